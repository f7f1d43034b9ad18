"""`ParquetDataSource`: random access to the rows of Parquet files, one dict per row.

Parquet stores rows in row groups, each decoded whole. The row-group sizes
come from the files' metadata, read once when the source is made; a key
maps to (row group, row) through them. Decoded row groups are cached with a
memory bound, and a batch of keys decodes each row group it touches once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aioloader._common.validation import require_bool, require_int
from aioloader._sources.arrow import ArrowRows
from aioloader._sources.cache import ByteBoundedCache, CacheStatistics
from aioloader._sources.columns import choose_columns, require_columns
from aioloader._sources.keys import KeyIndex, read_grouped
from aioloader._sources.paths import describe_paths, require_paths

DEFAULT_CACHE_BYTES = 256 << 20


class ParquetDataSource:
    """The rows of one or more Parquet files, in the order of `paths`: dicts of column name to value.

    `columns` selects and orders the columns (all of them by default).
    Values: numpy scalars for numeric and boolean columns, numpy arrays for
    lists of numbers (a fresh array per read, so a transform may write to
    it), `str` and `bytes` as they are, anything else as pyarrow's
    `as_py()` gives it, and None for nulls.

    Decoded row groups stay in a least-recently-used cache of at most
    `cache_bytes` (Arrow's buffers plus the numpy arrays made from them).
    A file that is not Parquet, or lacks a requested column, is rejected
    when the source is made, with its name.

    Damaged files: with `verify_checksums=True` (the default) the CRC-32 of
    every page that the writer gave one (pyarrow's `write_page_checksum=True`,
    parquet-mr and Spark by default) is verified as the page is decoded. A
    row group that does not decode or verify is a ValueError naming the
    file, the row group and its rows. The footer has no checksum in the
    format: damage there is caught only where it no longer parses or
    disagrees with the pages, and pages written without checksums are not
    verified.

    Thread-safe: each decode opens its own reader, and the cache is locked.
    """

    def __init__(
        self,
        paths: Any,
        columns: Sequence[str] | None = None,
        *,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        verify_checksums: bool = True,
    ) -> None:
        import pyarrow.parquet as pq  # an optional dependency: `pip install 'aioloader[parquet]'`

        self._pq = pq
        self.paths = require_paths(paths)
        self.columns = require_columns(columns)
        self.verify_checksums = require_bool("verify_checksums", verify_checksums)
        self._metadata = [_read_metadata(pq, path, self.columns) for path in self.paths]
        self._row_groups = [
            (f, g) for f, meta in enumerate(self._metadata) for g in range(meta.num_row_groups)
        ]
        self._index = KeyIndex([self._metadata[f].row_group(g).num_rows for f, g in self._row_groups])
        self._cache: ByteBoundedCache[ArrowRows] = ByteBoundedCache(
            require_int("cache_bytes", cache_bytes, minimum=0)
        )

    def __len__(self) -> int:
        return self._index.total

    def __getitem__(self, key: int) -> dict[str, Any]:
        group, row = self._index.locate(key)
        return self._row_group(group).rows([row])[0]

    def __getitems__(self, keys: Sequence[int]) -> list[dict[str, Any]]:
        """The rows at `keys`, in order, decoding each row group they touch once."""
        groups, rows = self._index.locate_many(keys)
        return read_grouped(groups, rows, lambda group, at: self._row_group(group).rows(at))

    def cache_statistics(self) -> CacheStatistics:
        """The decoded row-group cache: entries, bytes, bound, hits and misses (one miss per decode)."""
        return self._cache.statistics()

    def __repr__(self) -> str:
        columns = "" if self.columns is None else f", columns={list(self.columns)!r}"
        return f"ParquetDataSource({describe_paths(self.paths)}{columns})"

    def _row_group(self, group: int) -> ArrowRows:
        return self._cache.get(group, lambda: self._decode(group))

    def _decode(self, group: int) -> ArrowRows:
        file, row_group = self._row_groups[group]
        expected = int(self._index.counts[group])
        try:
            table = self._read(file, row_group)
            if table.num_rows != expected:
                raise ValueError(f"it holds {table.num_rows} rows, the footer says {expected}")
            return ArrowRows(table)
        except MemoryError:
            raise
        except Exception as error:  # pyarrow says OSError, ArrowInvalid, ... depending on the damage
            if isinstance(error, OSError) and error.errno is not None:
                raise  # the storage failed (the file is gone, a disk error): not damage
            first, last = int(self._index.starts[group]), int(self._index.starts[group + 1]) - 1
            raise ValueError(
                f"`{self.paths[file]}`: row group {row_group} (rows {first} to {last} of the source) "
                f"is damaged: {type(error).__name__}: {error}"
            ) from error

    def _read(self, file: int, row_group: int) -> Any:
        # A reader per decode: Arrow does not promise that one reader may be
        # used by several threads at once, and opening one with the metadata
        # already in hand costs little next to decoding a row group.
        with self._pq.ParquetFile(
            self.paths[file],
            metadata=self._metadata[file],
            page_checksum_verification=self.verify_checksums,
        ) as reader:
            return reader.read_row_group(row_group, columns=self.columns, use_threads=False)


def _read_metadata(pq: Any, path: str, columns: tuple[str, ...] | None) -> Any:
    """The file's metadata, after checking that it is Parquet and has `columns`."""
    try:
        with pq.ParquetFile(path) as reader:
            metadata, names = reader.metadata, reader.schema_arrow.names
    except Exception as error:  # pyarrow says ArrowInvalid, OSError, ... depending on the damage
        raise ValueError(f"`{path}` is not a readable Parquet file: {error}") from error
    in_groups = sum(metadata.row_group(g).num_rows for g in range(metadata.num_row_groups))
    if in_groups != metadata.num_rows:
        raise ValueError(
            f"`{path}` is not a readable Parquet file: its row groups hold {in_groups} rows, "
            f"its footer says {metadata.num_rows}"
        )
    choose_columns(columns, names, f"`{path}`")
    return metadata
