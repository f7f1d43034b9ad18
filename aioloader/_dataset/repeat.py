"""`ds.repeat(num_epochs)`: more epochs of the parent.

A `MapDataset` already answers for indices past its length (the next epochs), so
repeating only changes the length. With `reseed_each_epoch=False`, index `i` reads
the parent's `i % len(parent)`: every epoch is then the first one again, random
transformations included.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, TypeVar

from aioloader._common.validation import require_bool, require_int
from aioloader._dataset.base import MapDataset

T = TypeVar("T")


class RepeatMapDataset(MapDataset[T]):
    """`num_epochs` epochs of the parent; `None` for `sys.maxsize` elements (forever)."""

    def __init__(self, parent: MapDataset[T], num_epochs: Any, *, reseed_each_epoch: bool) -> None:
        super().__init__(parent)
        if num_epochs is not None:
            require_int("num_epochs", num_epochs, minimum=1)
        require_bool("reseed_each_epoch", reseed_each_epoch)
        self._parent, self._parent_length = parent, len(parent)
        if self._parent_length >= sys.maxsize:
            raise ValueError(f"cannot repeat {parent!r}: it already repeats forever (len is sys.maxsize).")
        if num_epochs is None:
            self._length = sys.maxsize if self._parent_length else 0
        else:
            self._length = num_epochs * self._parent_length
            if self._length >= sys.maxsize:
                raise ValueError(
                    f"`num_epochs` {num_epochs} times len(parent) {self._parent_length} reaches sys.maxsize; "
                    "pass num_epochs=None to repeat forever."
                )
        self._num_epochs, self._reseed = num_epochs, reseed_each_epoch

    def __len__(self) -> int:
        return self._length

    def _get(self, index: int) -> T | None:
        return self._parent[index if self._reseed else index % self._parent_length]

    def _getitems(self, indices: Sequence[int]) -> list[T | None]:
        if not self._reseed:
            indices = [i % self._parent_length for i in indices]
        return self._parent._getitems(indices)

    def __repr__(self) -> str:
        return f"{self._parent!r}.repeat({self._num_epochs}, reseed_each_epoch={self._reseed})"
