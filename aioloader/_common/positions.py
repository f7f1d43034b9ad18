"""Positions in the output stream: what a checkpoint records.

A position is `(index, skip_elements, skip_outputs)`: restart the sampler at
`index`, drop the first `skip_elements` elements that record `index` gives
after the per-record operations, form batches from there, and drop the first
`skip_outputs` outputs of the first batch. The two skips are zero except after
a flat-map split a record across batches, or one batch into several outputs,
so resuming replays at most one record and one batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

Position = tuple[int, int, int]


class EvenPositions(Sequence[Position]):
    """Positions after outputs that each retire `stride` records from `start`.

    The common case (one output per record, or per fixed-size batch) needs no
    list of tuples: position `j` is computed when asked for, capped at `stop`
    for a short last batch.
    """

    __slots__ = ("_count", "_start", "_stop", "_stride")

    def __init__(self, start: int, stride: int, count: int, stop: int) -> None:
        self._start, self._stride, self._count, self._stop = start, stride, count, stop

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, j: int) -> Position: ...
    @overload
    def __getitem__(self, j: slice) -> Sequence[Position]: ...
    def __getitem__(self, j: int | slice) -> Position | Sequence[Position]:
        if isinstance(j, slice):
            return [self[i] for i in range(*j.indices(self._count))]
        if not -self._count <= j < self._count:
            raise IndexError(j)
        j %= self._count
        return (min(self._start + (j + 1) * self._stride, self._stop), 0, 0)


def positions_before_elements(start: int, origins: Sequence[int], first_skip: int = 0) -> list[Position]:
    """The position of each element itself: resuming there yields it first.

    `origins[j]` is the offset from `start` of the record element `j` came
    from; `first_skip` elements of the first record were dropped before
    these (a resumed flat-map), so its ordinals start there.
    """
    positions: list[Position] = []
    previous, ordinal = -1, 0
    for origin in origins:
        if origin == previous:
            ordinal += 1
        else:
            previous, ordinal = origin, first_skip if origin == 0 else 0
        positions.append((start + origin, ordinal, 0))
    return positions


def positions_after_elements(start: int, origins: Sequence[int], first_skip: int = 0) -> list[Position]:
    """The position just after each element.

    An element is the last of its record when the next element comes from a
    later record (or there is none), and then the position after it is the
    next record. Otherwise it is the same record with one more element to skip.
    """
    before = positions_before_elements(start, origins, first_skip)
    after: list[Position] = []
    for j, (index, ordinal, _) in enumerate(before):
        last_of_record = j + 1 == len(before) or before[j + 1][0] != index
        after.append((index + 1, 0, 0) if last_of_record else (index, ordinal + 1, 0))
    return after
