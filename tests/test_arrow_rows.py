"""`ArrowRows`, the rows of an Arrow table as the table sources give them: numbers read
from Arrow's buffers must be exactly what pyarrow's `to_numpy()` gives (the oracle here),
for every numeric type, with and without nulls, sliced or not; and reading them must not
import pandas (pyarrow's `to_numpy()` does, once a process, where pandas is installed).
`ParquetIterDataset` gives `to_numpy()`'s values too (Grain's), made the same way for
numbers without nulls and for text, so that such files do not import pandas either."""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aioloader._sources.arrow import ArrowRows

NUMBERS = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
NUMBERS += [pa.float16(), pa.float32(), pa.float64(), pa.bool_()]


def values(kind: pa.DataType, count: int, nulls: bool) -> list[Any]:
    rng = np.random.default_rng(count)
    if pa.types.is_boolean(kind):
        made: list[Any] = [bool(b) for b in rng.integers(0, 2, count)]
    elif pa.types.is_floating(kind):
        made = [float(np.float16(x)) for x in rng.normal(size=count)]
    else:
        top = min(2 ** (kind.bit_width - 1) - 1, 2**31)
        made = [int(x) for x in rng.integers(0, top, count)]
    return [None if nulls and i % 3 == 1 else v for i, v in enumerate(made)]


def oracle(array: pa.Array) -> list[Any]:
    """What a row holds, from pyarrow's own conversion: None for a null, else the value
    of `to_numpy()` (lists: an array of the list's numbers; a list holding a null, as_py)."""
    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        out: list[Any] = []
        for item in array:
            inner = item.values if item.is_valid else None
            if inner is None:
                out.append(None)
            elif inner.null_count:
                out.append(item.as_py())
            else:
                out.append(inner.to_numpy(zero_copy_only=False))
        return out
    filler = False if pa.types.is_boolean(array.type) else 0
    converted = array.fill_null(filler).to_numpy(zero_copy_only=False)
    return [converted[i] if array[i].is_valid else None for i in range(len(array))]


def same(got: Any, want: Any) -> bool:
    if want is None or isinstance(want, list):
        return bool(got == want)
    if type(got) is not type(want) or getattr(got, "dtype", None) != getattr(want, "dtype", None):
        return False
    if isinstance(want, np.ndarray):
        return bool(np.array_equal(got, want, equal_nan=True))
    return bool(got == want or (isinstance(want, np.floating) and math.isnan(want) and math.isnan(got)))


def check(table: pa.Table) -> None:
    rows = ArrowRows(table).rows(list(range(table.num_rows)))
    for name in table.column_names:
        want = oracle(table.column(name).combine_chunks())
        got = [row[name] for row in rows]
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert same(g, w), f"{name} row {i}: {g!r} ({type(g)}) != {w!r} ({type(w)})"


@pytest.mark.parametrize("kind", NUMBERS, ids=str)
@pytest.mark.parametrize("nulls", [False, True])
def test_numbers_and_lists_of_numbers_are_what_to_numpy_gives(kind: pa.DataType, nulls: bool) -> None:
    count = 37  # not a multiple of 8: booleans' last byte is partly used
    lists = [values(kind, i % 4, nulls and i % 7 == 3) for i in range(count)]
    lists = [None if nulls and i % 5 == 2 else made for i, made in enumerate(lists)]
    table = pa.table(
        {
            "number": pa.array(values(kind, count, nulls), kind),
            "list": pa.array(lists, pa.list_(kind)),
            "large_list": pa.array(lists, pa.large_list(kind)),
        }
    )
    check(table)
    # Sliced at offsets that are not a byte's bit boundary, and empty.
    for start, length in [(1, 20), (3, 34), (9, 7), (13, 0), (count, 0)]:
        check(table.slice(start, length))
    # Several chunks, combined; a column of nulls only.
    check(pa.concat_tables([table.slice(0, 11), table.slice(5, 20)]))
    check(pa.table({"number": pa.nulls(9, kind), "list": pa.nulls(9, pa.list_(kind))}))


def test_reading_rows_does_not_import_pandas(tmp_path: Path) -> None:
    if importlib.util.find_spec("pandas") is None:
        pytest.skip("pandas is not installed here: nothing could import it")
    path = tmp_path / "rows.parquet"
    table = pa.table({"id": [1, 2, None], "flag": [True, None, False], "tokens": [[1, 2], None, [3, None]]})
    pq.write_table(table, path)
    code = (
        "import sys, aioloader\n"
        f"source = aioloader.ParquetDataSource({str(path)!r})\n"
        "rows = [source[i] for i in range(len(source))]\n"
        "assert rows[0]['id'] == 1 and rows[1]['flag'] is None and rows[2]['tokens'] == [3, None], rows\n"
        "print('pandas' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


TEXT = [pa.string(), pa.large_string(), pa.binary(), pa.large_binary()]


def text_values(kind: pa.DataType, count: int, nulls: bool) -> list[Any]:
    made = ["", "a", "\u00e9t\u00e9", "x" * 40, "\x00"] * count
    out: list[Any] = [t.encode() if kind in (pa.binary(), pa.large_binary()) else t for t in made[:count]]
    return [None if nulls and i % 4 == 2 else v for i, v in enumerate(out)]


@pytest.mark.parametrize("nulls", [False, True])
def test_parquet_iter_dataset_rows_are_what_to_numpy_gives_per_row_group(tmp_path: Path, nulls: bool) -> None:
    from aioloader.experimental import ParquetIterDataset

    count = 37
    columns = {str(kind): pa.array(values(kind, count, nulls), kind) for kind in NUMBERS}
    columns |= {str(kind): pa.array(text_values(kind, count, nulls), kind) for kind in TEXT}
    table = pa.table(columns)
    path = tmp_path / "rows.parquet"
    pq.write_table(table, path, row_group_size=10)  # 10, 10, 10, 7: each its own `to_numpy()`
    rows = list(ParquetIterDataset(str(path)))
    assert len(rows) == count
    groups = pq.ParquetFile(path)
    for group in range(groups.num_row_groups):
        read = groups.read_row_group(group)
        for name in table.column_names:
            want = read.column(name).to_numpy()
            for i, w in enumerate(want):
                got = rows[10 * group + i][name]
                assert same(got, w), f"{name} row {10 * group + i}: {got!r} != {w!r}"


def test_parquet_iter_dataset_of_numbers_and_text_does_not_import_pandas(tmp_path: Path) -> None:
    if importlib.util.find_spec("pandas") is None:
        pytest.skip("pandas is not installed here: nothing could import it")
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3], "text": ["a", None, "c"], "raw": [b"x", b"y", None]}), path)
    code = (
        "import sys\n"
        "from aioloader.experimental import ParquetIterDataset\n"
        f"rows = list(ParquetIterDataset({str(path)!r}))\n"
        "assert [r['id'] for r in rows] == [1, 2, 3] and rows[1]['text'] is None, rows\n"
        "print('pandas' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
