"""The leaves of a dataset tree: a data source (or sequence), and a range of ints.

Element `i` of a source of length `n` is `source[i % n]`: later epochs read the same
records again, as in Grain.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from aioloader._common.validation import require_int, require_len
from aioloader._dataset.base import Indexable, MapDataset

T = TypeVar("T")


class SourceMapDataset(MapDataset[T]):
    """`MapDataset.source(source)`: the records of a sequence or random-access data source."""

    def __init__(self, source: Indexable[T]) -> None:
        super().__init__()
        if isinstance(source, (str, bytes)) or not (
            hasattr(source, "__len__") and hasattr(source, "__getitem__")
        ):
            raise TypeError(
                f"`source` must define __len__ and __getitem__ (a sequence or a RandomAccessDataSource), "
                f"got {type(source).__name__}."
            )
        self._source = source
        self._length = require_len("source", source)
        many = getattr(source, "__getitems__", None)
        self._read_many = many if callable(many) else None

    @property
    def data_source(self) -> Indexable[T]:
        """The sequence or data source it reads."""
        return self._source

    def __len__(self) -> int:
        return self._length

    def _get(self, index: int) -> T:
        return self._source[index % self._length]

    def _getitems(self, indices: Sequence[int]) -> list[T | None]:
        if not indices:
            return []
        keys = [i % self._length for i in indices]
        if self._read_many is None:
            return [self._source[k] for k in keys]
        records = list(self._read_many(keys))
        if len(records) != len(keys):
            raise ValueError(
                f"`source.__getitems__` returned {len(records)} records for {len(keys)} keys "
                f"({type(self._source).__name__})."
            )
        return records

    def __repr__(self) -> str:
        return f"MapDataset.source(<{type(self._source).__name__} of {self._length}>)"


class RangeMapDataset(MapDataset[int]):
    """`MapDataset.range(start, stop, step)`: the ints of Python's `range`, epoch after epoch."""

    def __init__(self, start: int, stop: int | None = None, step: int = 1) -> None:
        super().__init__()
        for name, value in (("start", start), ("stop", stop), ("step", step)):
            if value is not None:
                require_int(name, value)
        if step == 0:
            raise ValueError("`step` must not be zero, got 0.")
        self._range = range(start) if stop is None else range(start, stop, step)

    def __len__(self) -> int:
        return len(self._range)

    def _get(self, index: int) -> int:
        return self._range[index % len(self._range)]

    def _getitems(self, indices: Sequence[int]) -> list[int | None]:
        r, n = self._range, len(self._range)
        return [r.start + (i % n) * r.step for i in indices]

    def __repr__(self) -> str:
        r = self._range
        return f"MapDataset.range({r.start}, {r.stop}, {r.step})"
