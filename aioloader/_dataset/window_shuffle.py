"""Grain's window shuffles: `WindowShuffleMapDataset` and `WindowShuffleIterDataset`.

`WindowShuffleMapDataset(parent, window_size=, seed=)` permutes the indices within each
window of `window_size` consecutive indices: index `i` of window `w = i // window_size`
reads the parent's `w * window_size + index_shuffle(i % window_size)`, where
`index_shuffle` is Grain's keyed permutation of `[0, window_size)` with the seed
`seed + w` and 4 rounds: Grain's elements for the same seed and window size, computed
per index, nothing held. As in Grain, epochs past `len(parent)` are only more windows
(window `w` keeps its seed whatever epoch it falls in), a negative index falls in a
negative window, and the last window of an epoch is a whole window too when
`window_size` does not divide the length: its indices past the end read the parent's
next epoch (so an epoch may then repeat some elements and miss others, as Grain's does).
Each window's permutation costs about 2 ms to compute (a table of 65,536 entries below
16,384 positions, see `index_shuffle`); the last few are kept, so reading in order pays
it once per window.

Deliberate differences from Grain's `WindowShuffleMapDataset`, whose constructor checks
nothing: `window_size` must be an int of at least 1 and `seed` an int in `[0, 2**32)`,
else an error naming it at once (Grain fails at the first read); `seed` may be left out
(None) after `ds.seed()` upstream, which then derives it as for `shuffle` (Grain requires
it); and a window's seed `seed + w` wraps modulo 2**32 (Grain's raises a TypeError for
windows whose seed falls outside, as its global shuffle's per-epoch seed wraps).

`WindowShuffleIterDataset(parent, window_size=, seed=)` shuffles within windows, in
order. The parent's elements are taken `window_size` at a time; window `w` is permuted
with Grain's `index_shuffle` keyed by `seed + w` and given out from its end, exactly as
Grain's `WindowShuffleIterDataset` does, so the order equals Grain's. Memory is one
window of elements.

Its state is the parent's state where the current window began, the window's number
and how many of its elements were given: resuming reads that window again, shuffles it
again and skips what was given (Grain's state, and Grain's way).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from aioloader._common.validation import require_int
from aioloader._dataset.base import MapDataset, require_shuffle_seed
from aioloader._dataset.iter_base import IterDataset, require_iter_dataset
from aioloader._dataset.stages import (
    Plan,
    Settings,
    Stage,
    as_stage,
    check_setup,
    require_count,
    state_fields,
)

T = TypeVar("T")

_SEEDS = 2**32
_ROUNDS = 4


class WindowShuffleMapDataset(MapDataset[T]):
    """The parent's elements, their indices permuted within windows of `window_size`."""

    def __init__(self, parent: MapDataset[T], *, window_size: int, seed: int | None = None) -> None:
        if not isinstance(parent, MapDataset):
            raise TypeError(f"`parent` must be a MapDataset, got {type(parent).__name__}.")
        super().__init__(parent)
        self._parent, self._length = parent, len(parent)
        self._window_size = require_int("window_size", window_size, minimum=1)
        self._seed = require_shuffle_seed(seed, self._default_seed, "WindowShuffleMapDataset")

    def __len__(self) -> int:
        return self._length

    def _parent_indices(self, indices: Sequence[int]) -> list[int]:
        """The parent's index for each of `indices`: one permutation per window they span."""
        # Imported here, as in `shuffle_window`: index_shuffle imports NumPy.
        import numpy as np

        from aioloader._sampling.index_shuffle import index_shuffle_array

        windows, offsets = np.divmod(np.asarray(indices, dtype=np.int64), self._window_size)
        parents = windows * self._window_size
        for window in np.unique(windows).tolist():
            at = windows == window
            seed = (self._seed + window) % _SEEDS  # Python's %: a negative window wraps too
            parents[at] += index_shuffle_array(offsets[at], self._window_size - 1, seed, _ROUNDS)
        result: list[int] = parents.tolist()
        return result

    def _get(self, index: int) -> T | None:
        return self._parent[self._parent_indices([index])[0]]

    def _getitems(self, indices: Sequence[int]) -> list[T | None]:
        if not indices:
            return []
        return self._parent._getitems(self._parent_indices(indices))

    def __repr__(self) -> str:
        return (
            f"WindowShuffleMapDataset({self._parent!r}, window_size={self._window_size}, seed={self._seed})"
        )


class WindowShuffleIterDataset(IterDataset[T]):
    """The parent's elements, shuffled within consecutive windows of `window_size`."""

    def __init__(self, parent: IterDataset[T], *, window_size: int, seed: int) -> None:
        parent = require_iter_dataset("parent", parent)
        super().__init__(parent)
        self._parent = parent
        self._window_size = require_int("window_size", window_size, minimum=1)
        self._seed = require_int("seed", seed, minimum=0)
        if self._seed >= _SEEDS:
            raise ValueError(f"`seed` must be less than 2**32, got {seed}.")

    def _plan(self, settings: Settings) -> Plan:
        return WindowShuffleStage(as_stage(self._parent._plan(settings)), self._window_size, self._seed)

    def __repr__(self) -> str:
        return (
            f"WindowShuffleIterDataset({self._parent!r}, window_size={self._window_size}, seed={self._seed})"
        )


def shuffle_window(window: list[Any], seed: int) -> list[Any]:
    """Grain's order of one window: position `p` holds `window[index_shuffle(p)]`."""
    # Imported here: `import aioloader` must not touch NumPy (subinterpreters import it
    # with a stand-in for NumPy), and index_shuffle does at import.
    from aioloader._sampling.index_shuffle import index_shuffle_array

    if not window:
        return []
    order = index_shuffle_array(range(len(window)), len(window) - 1, seed % _SEEDS).tolist()
    return [window[i] for i in order]


class WindowShuffleStage(Stage[Any]):
    """The window shuffle running (see the module docstring)."""

    def __init__(self, parent: Stage[Any], window_size: int, seed: int) -> None:
        super().__init__((parent,))
        self._parent, self._size, self._seed = parent, window_size, seed
        self._window: list[Any] = []
        self._window_index = 0
        self._given = 0  # elements of the current window given out
        self._window_start: Any = None  # the parent's snapshot where it began
        self._parent_ended = False

    def _fill(self) -> None:
        """Read the next window from the parent, and shuffle it."""
        window: list[Any] = []
        try:
            while len(window) < self._size:
                window.append(next(self._parent))
        except StopIteration:
            self._parent_ended = True
        self._window = shuffle_window(window, self._seed + self._window_index)

    def __next__(self) -> Any:
        if not self._window:
            if self._parent_ended:
                raise StopIteration
            self._window_start = self._parent.snapshot()
            self._fill()
            self._given = 0
            if not self._window:
                raise StopIteration
        self._given += 1
        element = self._window.pop()
        if not self._window:
            self._window_index += 1
        return element

    def snapshot(self) -> Any:
        start = self._parent.snapshot() if self._window_start is None else self._window_start
        return start, self._window_index, self._given

    def state_of(self, token: Any) -> dict[str, Any]:
        start, window, given = token
        parent = self._parent.state_of(start)
        setup = self._setup()
        return {"stage": "window_shuffle", "parent": parent, "window": window, "given": given, "setup": setup}

    def _setup(self) -> str:
        return f"window_size={self._size}, seed={self._seed}"

    def set_state(self, state: dict[str, Any]) -> None:
        start, window, given = state_fields(state, "window_shuffle", ("parent", "window", "given"))
        check_setup(state, self._setup())
        self._parent.set_state(start)
        self._window_start = self._parent.snapshot()
        self._window_index, self._given = require_count("window", window), require_count("given", given)
        self._fill()
        del self._window[len(self._window) - min(self._given, len(self._window)) :]
