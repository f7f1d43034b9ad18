"""`ds.slice(sl)` and `ds[a:b:c]`: the elements at the indices a slice picks from one epoch.

The slice is resolved against the parent's length, as Python resolves it against a
list's: `slice.indices(len(parent))`. Later epochs of the slice read the same
positions in the parent's later epochs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from aioloader._dataset.base import MapDataset

T = TypeVar("T")


class SliceMapDataset(MapDataset[T]):
    """The parent's elements at `range(*sl.indices(len(parent)))`."""

    def __init__(self, parent: MapDataset[T], sl: slice) -> None:
        super().__init__(parent)
        if not isinstance(sl, slice):  # a ValueError, as Grain raises: `except ValueError` catches it
            raise ValueError(f"`sl` must be a slice, got {sl!r} of type {type(sl).__name__}.")
        try:
            self._range = range(*sl.indices(len(parent)))
        except (TypeError, ValueError) as error:  # a non-int bound, or a zero step
            raise type(error)(f"`sl` must be a slice of ints with a non-zero step, got {sl!r}.") from None
        self._parent, self._parent_length = parent, len(parent)

    def __len__(self) -> int:
        return len(self._range)

    def _parent_index(self, index: int) -> int:
        epoch, offset = divmod(index, len(self._range))
        return self._range[offset] + epoch * self._parent_length

    def _get(self, index: int) -> T | None:
        return self._parent[self._parent_index(index)]

    def _getitems(self, indices: Sequence[int]) -> list[T | None]:
        return self._parent._getitems([self._parent_index(i) for i in indices])

    def __repr__(self) -> str:
        r = self._range
        return f"{self._parent!r}[{r.start}:{r.stop}:{r.step}]"
