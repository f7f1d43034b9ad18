"""Rows of an Arrow table as dicts of column name to value, the way aioloader's sources give them.

Values: numpy scalars for numeric and boolean columns, numpy arrays for lists of
numbers (a fresh array per read, so a transform may write to it), `str` and
`bytes` as they are, anything else as pyarrow's `as_py()` gives it, and None for
nulls. How a column is read is decided once per table, from its type and whether it
has nulls, so the kind of a value never depends on which other rows are read with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

# Values for the rows at some offsets of one column.
_Take = Callable[[list[int]], list[Any]]


class ArrowRows:
    """The rows of a pyarrow Table, by offset: per column, how to take the values of some rows.

    Immutable once made, so any number of threads may read it at once.
    """

    __slots__ = ("_names", "_takes", "nbytes")

    def __init__(self, table: Any) -> None:
        self._names: list[str] = table.column_names
        takes = [_column(column.combine_chunks()) for column in table.columns]
        self._takes = [take for take, _ in takes]
        self.nbytes: int = table.nbytes + sum(extra for _, extra in takes)

    def rows(self, offsets: list[int]) -> list[dict[str, Any]]:
        """The rows at `offsets` (within the table), in that order."""
        names = self._names
        columns = [take(offsets) for take in self._takes]
        return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]


def _column(array: Any) -> tuple[_Take, int]:
    """How to take values from one column, and the bytes that takes beyond Arrow's buffers."""
    import pyarrow as pa

    kind = array.type
    if array.null_count == 0 and _is_number(pa, kind):
        values = array.to_numpy(zero_copy_only=False)
        return (lambda at: list(values[at])), _owned(values)
    is_list = pa.types.is_list(kind) or pa.types.is_large_list(kind)
    if is_list and array.null_count == 0 and _is_number(pa, kind.value_type) and array.values.null_count == 0:
        flat, bounds = array.values.to_numpy(zero_copy_only=False), array.offsets.to_numpy()
        extra = _owned(flat) + _owned(bounds)
        return (lambda at: [flat[bounds[j] : bounds[j + 1]].copy() for j in at]), extra
    # Element by element: `Array.take` costs over 100 us a call, more than a row's worth of `as_py`.
    return (lambda at: [array[j].as_py() for j in at]), 0


def _is_number(pa: Any, kind: Any) -> bool:
    return bool(pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind))


def _owned(values: np.ndarray) -> int:
    """Bytes of a numpy array that does not view Arrow's memory (a copy, as for booleans)."""
    return values.nbytes if values.base is None else 0
