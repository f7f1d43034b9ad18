"""`ParquetIterDataset(path, **read_kwargs)`: the rows of Parquet files, read in order
(Grain's `grain.experimental.ParquetIterDataset`).

Each row is a dict of column name to value, the values exactly as Grain gives them:
each row group is read whole and every column turned into a NumPy array by pyarrow's
`to_numpy()`, so a row holds NumPy scalars for numbers and booleans, `str` and `bytes`
as they are, NumPy arrays for lists, dicts for structs, and None for a null string,
list or struct. As in Grain, the kind of a value follows its row group: an int column
with a null in a row group gives that row group's ints as float64, the null as NaN,
and a boolean column with a null gives Python objects. (aioloader's random-access
`ParquetDataSource` gives None for nulls instead: its rows do not depend on row groups.)

One path reads that file, row group after row group. Several paths are interleaved as
Grain interleaves them: aioloader's `InterleaveIterDataset` over one dataset per file,
with a cycle length of 16, so the order is Grain's element for element and at most 16
files are open at once. `read_kwargs` go to `pyarrow.parquet.ParquetFile` for each file
(a `filesystem` there reaches remote files; a URL such as `gs://...` pyarrow resolves).
`set_slice(sl)` keeps the files `paths[sl]`, in place, as Grain's does to shard by file.

The state of one file is its row group and the rows given from it (Grain's fields);
that of several files is the interleave's, naming each open file's state.

Deliberate differences from Grain:

* arguments are checked when the dataset is made: `path` must be a path or a non-empty
  sequence of them (a local one must be a file) and `read_kwargs` must be parameters
  of `ParquetFile`, else an error naming them (Grain fails when iterating, or gives
  nothing for no path);
* `page_checksum_verification` is True unless given: pages written with checksums are
  verified as they are decoded (as `ParquetDataSource` verifies them);
* a file that is not Parquet, or damaged, is a ValueError naming it (and the row group);
  a file without row groups (a writer closed before any row) is empty (Grain fails on
  it), and a file with two columns of one name is refused (Grain's dict keeps one);
* a dictionary-encoded column (`read_dictionary=`) gives None for its nulls: Grain's
  `to_numpy()` gives the dictionary's first value for them;
* a state is checked against the file: a row group or row past its end is a ValueError.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from aioloader._dataset.interleave import InterleaveIterDataset
from aioloader._dataset.iter_base import IterDataset
from aioloader._dataset.stages import Plan, Settings, Stage, require_count, state_fields
from aioloader._sources.arrow import as_numpy, is_number
from aioloader._sources.parquet import require_unique_columns, storage_failed
from aioloader._sources.paths import describe_paths, require_path

CYCLE_LENGTH = 16  # files read at once, as Grain interleaves them

Row = dict[str, Any]


class ParquetIterDataset(IterDataset[Row]):
    """The rows of the Parquet file(s) at `path`, as dicts (several files interleaved)."""

    def __init__(
        self, path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], **read_kwargs: Any
    ) -> None:
        super().__init__()
        self._read_kwargs = _require_read_kwargs(read_kwargs)
        self._paths = _require_paths(path, local="filesystem" not in read_kwargs)
        # One dataset per file, made once: a pipeline compiled again (a repeat's epochs,
        # `set_state`) reuses them.
        self._files = [_ParquetFileDataset(p, self._read_kwargs) for p in self._paths]

    def set_slice(self, sl: slice, sequential_slice: bool = False) -> None:
        """Keep only the files `self._paths[sl]` (Grain's way to shard a Parquet dataset by
        file, in place). `sequential_slice` is accepted and ignored, as in Grain: a file's
        rows stay whole and in order either way."""
        if not isinstance(sl, slice):
            raise TypeError(f"`sl` must be a slice, got {sl!r:.200}.")
        files = self._files[sl]
        if not files:
            # Grain fails at the first `next()` (an interleave of no file); here, at once.
            raise ValueError(
                f"`sl` {sl} leaves none of the {len(self._files)} files: {describe_paths(self._paths)}."
            )
        self._files, self._paths = files, self._paths[sl]

    def _plan(self, settings: Settings) -> Plan:
        if len(self._files) == 1:
            return self._files[0]._plan(settings)
        return InterleaveIterDataset(self._files, cycle_length=CYCLE_LENGTH)._plan(settings)

    def __repr__(self) -> str:
        kwargs = "".join(f", {name}={value!r}" for name, value in self._read_kwargs.items())
        return f"ParquetIterDataset({describe_paths(self._paths)}{kwargs})"


class _ParquetFileDataset(IterDataset[Row]):
    """The rows of one file (its arguments already checked)."""

    def __init__(self, path: str, read_kwargs: dict[str, Any]) -> None:
        super().__init__()
        self._path, self._read_kwargs = path, read_kwargs

    def _plan(self, settings: Settings) -> Plan:
        return ParquetFileStage(self._path, self._read_kwargs)

    def __repr__(self) -> str:
        return f"ParquetIterDataset({self._path!r})"


class ParquetFileStage(Stage[Row]):
    """One file read in order: a row group decoded whole, then its rows one by one.

    The file is opened at the first `next()` or `set_state()`, so that a pipeline made
    and closed unread opens nothing; `close()` (from any thread) closes it.
    """

    def __init__(self, path: str, read_kwargs: dict[str, Any]) -> None:
        super().__init__()
        self._path, self._read_kwargs = path, read_kwargs
        self._reader: Any = None  # pyarrow's ParquetFile, once opened
        self._group, self._row = 0, 0  # where the next row is (the row may be past the group's end)
        self._loaded = -1  # the row group in `_columns`
        self._columns: list[tuple[str, np.ndarray]] = []
        self._rows = 0  # rows in the loaded row group
        # `close` may come from another thread while a row group is read: the reader is
        # closed between two reads, never under one.
        self._lock = threading.Lock()
        self._closed = False

    def __next__(self) -> Row:
        with self._lock:
            if self._closed:
                raise StopIteration
            reader = self._open()
            while True:
                if self._group >= reader.num_row_groups:
                    raise StopIteration  # no row group at all
                if self._loaded != self._group:
                    self._load(reader)
                if self._row < self._rows:
                    break
                if self._group + 1 >= reader.num_row_groups:
                    raise StopIteration  # stays at the last group's end, as Grain's state does
                self._group, self._row = self._group + 1, 0
            row = self._row
            self._row += 1
            return {name: values[row] for name, values in self._columns}

    def _open(self) -> Any:
        if self._reader is None:
            self._reader = open_parquet(self._path, self._read_kwargs)
        return self._reader

    def _load(self, reader: Any) -> None:
        """Decode row group `_group` into one NumPy array per column (Grain's values)."""
        import pyarrow as pa

        group = self._group
        expected = reader.metadata.row_group(group).num_rows
        try:
            table = reader.read_row_group(group)
            if table.num_rows != expected:
                raise ValueError(f"it holds {table.num_rows} rows, the footer says {expected}")
        except (pa.ArrowException, ValueError, OSError) as error:
            if storage_failed(error, self._path):
                raise  # the storage failed (the file went away): its own error says so
            raise ValueError(
                f"`{self._path}`: row group {group} is damaged: {type(error).__name__}: {error}"
            ) from error
        self._columns = [(name, _numpy(pa, table.column(name))) for name in table.column_names]
        self._rows, self._loaded = expected, group

    def snapshot(self) -> tuple[int, int]:
        return self._group, self._row

    def state_of(self, token: tuple[int, int]) -> dict[str, Any]:
        group, row = token
        return {"stage": "parquet", "row_group": group, "row": row}

    def set_state(self, state: dict[str, Any]) -> None:
        group, row = state_fields(state, "parquet", ("row_group", "row"))
        group, row = require_count("row_group", group), require_count("row", row)
        with self._lock:
            reader = self._open()
            groups = reader.num_row_groups
            rows = reader.metadata.row_group(group).num_rows if group < groups else 0
            if (group >= groups and (group, row) != (0, 0)) or row > rows:
                raise ValueError(
                    f"`state` (row_group={group}, row={row}) does not fit `{self._path}`, which has "
                    f"{groups} row groups (row group {group} of {rows} rows)."
                )
            self._group, self._row = group, row

    def close(self) -> None:
        with self._lock:
            self._closed = True
            reader, self._reader = self._reader, None
            self._columns = []
        if reader is not None:
            reader.close()


def open_parquet(path: str, read_kwargs: dict[str, Any]) -> Any:
    """pyarrow's ParquetFile for `path`; a file that is not Parquet (or whose footer is
    damaged) is a ValueError naming it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        reader = pq.ParquetFile(path, **read_kwargs)
    except (pa.ArrowException, OSError) as error:
        if storage_failed(error, path):
            raise  # no such file, no access: the storage's error names the file
        raise ValueError(f"`{path}` is not a readable Parquet file: {error}") from error
    try:
        require_unique_columns(reader.schema_arrow.names, path)
    except ValueError:
        reader.close()
        raise
    return reader


def _numpy(pa: Any, column: Any) -> np.ndarray:
    """A column of a row group as Grain turns it into values: pyarrow's `to_numpy()`.

    Numbers without nulls and text are made here, to the same arrays: `to_numpy()`
    imports pandas at its first call wherever pandas is installed (0.3 s before a
    first batch), for nothing used here (aioloader._sources.arrow)."""
    if pa.types.is_dictionary(column.type):
        # Decoded first: `to_numpy()` of the dictionary would give its first value for a null.
        column = column.cast(column.type.value_type)
    kind = column.type
    if column.null_count == 0 and is_number(pa, kind):
        return as_numpy(pa, column.combine_chunks())
    if kind in (pa.string(), pa.large_string(), pa.binary(), pa.large_binary()):
        text = np.empty(len(column), dtype=object)  # str or bytes, None for a null
        text[:] = column.to_pylist()
        return text
    values: np.ndarray = column.to_numpy()
    return values


def _require_paths(path: Any, *, local: bool) -> list[str]:
    """`path` as a non-empty list of paths; with `local` (no `filesystem` given), a local
    one (not a URL) must be a file."""
    paths = [path] if isinstance(path, (str, bytes, os.PathLike)) else path
    if not isinstance(paths, Sequence) or isinstance(paths, (str, bytes)):
        raise TypeError(f"`path` must be a path or a sequence of paths, got {type(path).__name__}.")
    if not paths:
        raise ValueError("`path` must name at least one Parquet file, got an empty sequence.")
    found: list[str] = []
    for i, each in enumerate(paths):
        # bytes too, as os.fsdecode reads them (pyarrow takes str paths only)
        text = require_path(f"path[{i}]", os.fsdecode(each) if isinstance(each, bytes) else each)
        if local and "://" not in text and not os.path.isfile(text):
            raise FileNotFoundError(f"`path[{i}]` is not a file: {text!r}.")
        found.append(text)
    return found


def _require_read_kwargs(read_kwargs: dict[str, Any]) -> dict[str, Any]:
    """`read_kwargs`, if each is a parameter of `pyarrow.parquet.ParquetFile` (besides
    `source`), with `page_checksum_verification` True unless given."""
    import inspect

    import pyarrow.parquet as pq  # an optional dependency: `pip install 'aioloader[parquet]'`

    accepted = [name for name in inspect.signature(pq.ParquetFile).parameters if name != "source"]
    unknown = sorted(set(read_kwargs) - set(accepted))
    if unknown:
        raise TypeError(
            f"`read_kwargs` {', '.join(unknown)} are not parameters of pyarrow.parquet.ParquetFile "
            f"(those are {', '.join(accepted)})."
        )
    if "page_checksum_verification" in accepted:
        return {"page_checksum_verification": True, **read_kwargs}
    return dict(read_kwargs)
