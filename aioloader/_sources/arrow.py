"""Rows of an Arrow table as dicts of column name to value, the way aioloader's sources give them.

Values: numpy scalars for numeric and boolean columns, numpy arrays for lists of
numbers (a fresh array per read, so a transform may write to it), `str` and
`bytes` as they are, anything else as pyarrow's `as_py()` gives it, and None for
nulls. How a column is read is decided from its type alone, so the kind of a value
never depends on which other rows are read with it, nor on its row group's nulls.

Columns of numbers become NumPy arrays read from their Arrow buffers, not with
pyarrow's `to_numpy()`: its first call in a process imports pandas wherever pandas is
installed (for the static data of its pandas converters), 0.3 s before a first batch
on these machines, for nothing that is used here.
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
    """How to take values from one column, and the bytes that takes beyond Arrow's buffers.

    The way is chosen by the column's type alone, never by whether this table
    (a row group) has nulls: a null is None, and every other value of a column
    of numbers is a numpy scalar whichever row group it comes from."""
    import pyarrow as pa

    kind = array.type
    if is_number(pa, kind):
        return _numbers(pa, array)
    is_list = pa.types.is_list(kind) or pa.types.is_large_list(kind)
    if is_list and is_number(pa, kind.value_type):
        return _lists_of_numbers(pa, array)
    # Element by element: `Array.take` costs over 100 us a call, more than a row's worth of `as_py`.
    return (lambda at: [array[j].as_py() for j in at]), 0


def _numbers(pa: Any, array: Any) -> tuple[_Take, int]:
    values = as_numpy(pa, array)  # a null's slot holds anything: never shown
    if array.null_count == 0:
        return (lambda at: list(values[at])), _owned(values)
    valid = as_numpy(pa, array.is_valid())

    def take(at: list[int]) -> list[Any]:
        return [v if ok else None for v, ok in zip(list(values[at]), valid[at].tolist(), strict=True)]

    return take, _owned(values) + valid.nbytes


def _lists_of_numbers(pa: Any, array: Any) -> tuple[_Take, int]:
    """A numpy array per list; None for a null list; a list holding a null (which no
    array of numbers can hold) as `as_py()` gives it, a Python list with None in it."""
    flat, bounds = as_numpy(pa, array.values), as_numpy(pa, array.offsets)
    extra = _owned(flat) + _owned(bounds)
    if array.null_count == 0 and array.values.null_count == 0:
        return (lambda at: [flat[bounds[j] : bounds[j + 1]].copy() for j in at]), extra
    missing = np.concatenate(([0], np.cumsum(~as_numpy(pa, array.values.is_valid()))))
    whole = as_numpy(pa, array.is_valid()) & (missing[bounds[1:]] == missing[bounds[:-1]])

    def take(at: list[int]) -> list[Any]:
        return [flat[bounds[j] : bounds[j + 1]].copy() if whole[j] else array[j].as_py() for j in at]

    return take, extra + missing.nbytes + whole.nbytes


def as_numpy(pa: Any, array: Any) -> np.ndarray:
    """A numeric or boolean Arrow array as a NumPy array, as `to_numpy()` gives it (see
    the module's docstring): a read-only view of the buffer for numbers, a copy for
    booleans (Arrow packs them in bits). A null's slot holds whatever the buffer has
    there (callers never show it); pyarrow's `fill_null` would need a scalar made from
    a Python object, and that conversion imports pandas too."""
    kind, start, count = array.type, array.offset, len(array)
    data = array.buffers()[1]
    if pa.types.is_boolean(kind):
        if data is None or count == 0:  # no buffer: an array of nulls only
            return np.zeros(count, dtype=bool)
        bits = np.unpackbits(np.frombuffer(data, np.uint8), count=start + count, bitorder="little")
        return bits[start:].astype(bool)
    size = kind.bit_width // 8
    letter = "f" if pa.types.is_floating(kind) else "i" if pa.types.is_signed_integer(kind) else "u"
    dtype = np.dtype(f"{letter}{size}")
    if data is None or count == 0:
        return np.zeros(count, dtype)
    return np.frombuffer(data, dtype, count=count, offset=start * size)


def is_number(pa: Any, kind: Any) -> bool:
    return bool(pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind))


def _owned(values: np.ndarray) -> int:
    """Bytes of a numpy array that does not view Arrow's memory (a copy, as for booleans)."""
    return values.nbytes if values.base is None else 0
