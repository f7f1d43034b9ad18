"""What a Grain `DataLoader` with several workers left unread below its furthest worker.

Grain's worker `w` of `W` reads the walk positions `w, w + W, w + 2W, ...`,
and its checkpoint says, for each worker, the first of its positions not
delivered: `starts[w]`. The positions delivered are then not a prefix of
the walk: below `frontier = max(starts)`, position `p` is still to be read
exactly when `p >= starts[p % W]`; from `frontier` on, all are.

aioloader resumes such a state in its own order (whatever its worker count):
the positions still to be read below the frontier, in increasing order, then
the walk from the frontier on, so that no record is lost or read twice. A
`Detour` lays those leftover positions just below the frontier, so that a
resumed walk is still positions `first, first + 1, ...`, contiguous as
chunks and batches need; only the loader's checkpoints translate a detoured
position back (`true_index`) and keep the `starts` while the walk is below
the frontier.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# A Grain loader's workers stay within a few batches of each other (its
# output is round-robin); a state whose workers are further apart than this
# is not one, and would make the detour too large to hold.
MAX_SPREAD = 1 << 24


class Leftovers:
    """The walk positions of `starts` (one per Grain worker) not yet delivered."""

    __slots__ = ("frontier", "starts")

    def __init__(self, starts: Sequence[int]) -> None:
        self.starts = tuple(starts)
        self.frontier = max(self.starts)

    def delivered(self, position: int) -> bool:
        """True when Grain had delivered `position` already."""
        return position < self.frontier and position < self.starts[position % len(self.starts)]

    def remaining(self, start: int) -> np.ndarray:
        """The positions in `[start, frontier)` still to be read, in increasing order."""
        positions = np.arange(start, max(start, self.frontier), dtype=np.int64)
        starts = np.asarray(self.starts, dtype=np.int64)
        remaining: np.ndarray = positions[positions >= starts[positions % len(starts)]]
        return remaining


class Detour:
    """A walk resumed at `index` under `leftovers`: detoured positions `[first, frontier)`
    are the leftover positions from `index` on, in order; later positions are themselves."""

    __slots__ = ("first", "frontier", "leftovers", "positions")

    def __init__(self, leftovers: Leftovers, index: int) -> None:
        if leftovers.frontier - index > MAX_SPREAD:
            raise ValueError(
                f"`state` leaves records unread up to {leftovers.frontier - index} indices past its "
                f"position {index}; a Grain loader's workers stay within a few batches of each other."
            )
        self.leftovers = leftovers
        self.positions = leftovers.remaining(index)
        self.frontier = leftovers.frontier
        self.first = self.frontier - len(self.positions)

    def true_index(self, position: int) -> int:
        """The walk position that detoured `position` reads."""
        if position >= self.frontier:
            return position
        return int(self.positions[position - self.first])

    def true_positions(self, start: int, stop: int) -> np.ndarray:
        """The walk positions that detoured positions `[start, stop)` read (`stop <= frontier`)."""
        positions: np.ndarray = self.positions[start - self.first : stop - self.first]
        return positions
