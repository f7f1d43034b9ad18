"""`ParquetDataSource`: random access to the rows of Parquet files, one dict per row.

Parquet stores rows in row groups, each decoded whole. The row-group sizes
come from the files' metadata, read once when the source is made; a key
maps to (row group, row) through them. Decoded row groups are cached with a
memory bound, and a batch of keys decodes each row group it touches once.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import partial
from typing import Any

from aioloader._common.validation import require_bool, require_int
from aioloader._sources.arrow import ArrowRows
from aioloader._sources.cache import ByteBoundedCache, CacheStatistics
from aioloader._sources.columns import choose_columns, require_columns
from aioloader._sources.keys import KeyIndex, distinct, read_grouped
from aioloader._sources.parquet_footer import ChunkSpans, read_chunk_spans
from aioloader._sources.paths import describe_paths, require_paths
from aioloader._sources.storage.blobs import Blob, BlobFile, open_blob, read_spans
from aioloader._sources.storage.owner import StoreOwner
from aioloader._sources.storage.store import open_all, open_store

DEFAULT_CACHE_BYTES = 256 << 20


class ParquetDataSource(StoreOwner):
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

    `paths` may be `s3://bucket/key` URLs (and globs of them, expanded in
    sorted order), reached with `storage_options` (see the README; the
    AWS_* environment variables otherwise), and verified as local files
    are. Each file's footer is read once, when the source is made (the
    files concurrently); `__getitems__` then fetches the column chunks of
    every row group its keys need and the cache lacks at once, in one round
    of concurrent range requests. A failed request is an OSError naming the
    URL (never a credential), not a damaged row group.

    Thread-safe: each decode opens its own reader, and the cache is locked.
    """

    def __init__(
        self,
        paths: Any,
        columns: Sequence[str] | None = None,
        *,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        verify_checksums: bool = True,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        import pyarrow.parquet as pq  # an optional dependency: `pip install 'aioloader[parquet]'`

        self._pq = pq
        paths = require_paths(paths)
        self.columns = require_columns(columns)
        self.verify_checksums = require_bool("verify_checksums", verify_checksums)
        self._cache: ByteBoundedCache[ArrowRows] = ByteBoundedCache(
            require_int("cache_bytes", cache_bytes, minimum=0)
        )
        self.paths, self._store = open_store(paths, storage_options)
        # With s3:// URLs every file is read as a blob, through file objects over the bytes fetched.
        self._blobs: list[Blob] = []
        try:
            if self._store is not None:
                opener = partial(open_blob, store=self._store)
                self._blobs = open_all(self.paths, self._store, opener, close=_close)
            opened = open_all(range(len(self.paths)), self._store, self._read_metadata)
        except BaseException:
            self.close()
            raise
        self._metadata = [metadata for metadata, _, _ in opened]
        _require_one_schema(self.paths, self._metadata, self.columns)
        self._chunk_spans = [spans for _, spans, _ in opened]
        self._identities = [identity for _, _, identity in opened]
        self._row_groups = [
            (f, g) for f, meta in enumerate(self._metadata) for g in range(meta.num_row_groups)
        ]
        self._index = KeyIndex([self._metadata[f].row_group(g).num_rows for f, g in self._row_groups])

    def __len__(self) -> int:
        return self._index.total

    def __getitem__(self, key: int) -> dict[str, Any]:
        group, row = self._index.locate(key)
        return self._row_group(group).rows([row])[0]

    def __getitems__(self, keys: Sequence[int]) -> list[dict[str, Any]]:
        """The rows at `keys`, in order, decoding each row group they touch once."""
        groups, rows = self._index.locate_many(keys)
        fetched = self._fetch(distinct(groups)) if self._blobs else {}
        return read_grouped(
            groups, rows, lambda group, at: self._row_group(group, fetched.get(group)).rows(at)
        )

    def cache_statistics(self) -> CacheStatistics:
        """The decoded row-group cache: entries, bytes, bound, hits and misses (one miss per decode)."""
        return self._cache.statistics()

    def _release(self) -> None:
        for blob in self._blobs:
            blob.close()
        self._cache.clear()

    def __repr__(self) -> str:
        columns = "" if self.columns is None else f", columns={list(self.columns)!r}"
        return f"ParquetDataSource({describe_paths(self.paths)}{columns})"

    def _row_group(self, group: int, fetched: dict[int, bytes] | None = None) -> ArrowRows:
        return self._cache.get(group, lambda: self._decode(group, fetched))

    def _decode(self, group: int, fetched: dict[int, bytes] | None) -> ArrowRows:
        """Row group `group`, read from `fetched` (its column chunks, by where they start) or the file."""
        file, row_group = self._row_groups[group]
        expected = int(self._index.counts[group])
        self._require_unchanged(file)
        source = self._file(file, fetched)
        try:
            table = self._read(source, file, row_group)
            if table.num_rows != expected:
                raise ValueError(f"it holds {table.num_rows} rows, the footer says {expected}")
            return ArrowRows(table)
        except MemoryError:
            raise
        except Exception as error:  # pyarrow says OSError, ArrowInvalid, ... depending on the damage
            if storage_failed(error, source):
                raise
            first, last = int(self._index.starts[group]), int(self._index.starts[group + 1]) - 1
            raise ValueError(
                f"`{self.paths[file]}`: row group {row_group} (rows {first} to {last} of the source) "
                f"is damaged: {type(error).__name__}: {error}"
            ) from error

    def _read(self, source: Any, file: int, row_group: int) -> Any:
        # A reader per decode: Arrow does not promise that one reader may be
        # used by several threads at once, and opening one with the metadata
        # already in hand costs little next to decoding a row group.
        with self._pq.ParquetFile(
            source,
            metadata=self._metadata[file],
            page_checksum_verification=self.verify_checksums,
        ) as reader:
            return reader.read_row_group(row_group, columns=self.columns, use_threads=False)

    def _file(self, file: int, fetched: dict[int, bytes] | None = None) -> Any:
        """What pyarrow reads file `file` from: its path, or a file object over its blob
        that serves the ranges in `fetched` from memory."""
        return BlobFile(self._blobs[file], fetched) if self._blobs else self.paths[file]

    def _require_unchanged(self, file: int) -> None:
        """A ValueError unless local file `file` is still the file whose footer the source
        read: each decode opens it again by its path, and the footer of one file over the
        row groups of another would give its rows, silently, where the offsets agree."""
        identity = self._identities[file]
        if identity is not None and _identity(self.paths[file]) != identity:
            raise ValueError(
                f"`{self.paths[file]}` changed after this ParquetDataSource read its footer (another "
                "file, size or modification time): make a new ParquetDataSource to read it as it is now."
            )

    def _read_metadata(self, file: int) -> tuple[Any, ChunkSpans, FileIdentity | None]:
        """The file's metadata, checked; for a stored object, also where its column chunks lie
        (read from the footer's bytes: see `parquet_footer`); for a local file, what tells it
        from another (taken first: a file replaced meanwhile then fails the first decode)."""
        path = self.paths[file]
        identity = None if self._blobs else _identity(path)
        metadata = _read_metadata(self._pq, self._file(file), path, self.columns)
        if not self._blobs:
            return metadata, [], identity
        try:
            spans = read_chunk_spans(self._blobs[file])
            if len(spans) != metadata.num_row_groups:
                raise ValueError(
                    f"its footer lists {len(spans)} row groups, pyarrow read {metadata.num_row_groups}"
                )
        except ValueError as error:
            raise ValueError(f"`{path}` is not a readable Parquet file: {error}") from None
        return metadata, spans, None

    def _fetch(self, groups: list[int]) -> dict[int, dict[int, bytes]]:
        """The column chunks of each of `groups` not in the cache, fetched at once (the bytes
        only: pyarrow verifies the pages as it decodes them): by row group, then by where they
        start in the file."""
        wanted = [
            (group, span)
            for group in groups
            if not self._cache.contains(group)
            for span in self._spans(group)
        ]
        data = read_spans([(self._blobs[self._row_groups[group][0]], *span) for group, span in wanted])
        fetched: dict[int, dict[int, bytes]] = {}
        for (group, (start, _)), raw in zip(wanted, data, strict=True):
            fetched.setdefault(group, {})[start] = raw
        return fetched

    def _spans(self, group: int) -> list[tuple[int, int]]:
        """The byte ranges of a row group's selected column chunks, those that touch joined
        (pyarrow may read touching chunks in one go). Only what to fetch ahead: pyarrow reads
        what these miss from the blob, so a footer that misleads costs requests, not rows."""
        file, row_group = self._row_groups[group]
        chunks = self._chunk_spans[file][row_group]
        return _join_touching(
            [(start, end) for name, start, end in chunks if self.columns is None or name in self.columns]
        )


FileIdentity = tuple[int, int, int, int]


def _identity(path: str) -> FileIdentity:
    """What changes when the file at `path` is replaced or written: its device and inode,
    its size and its modification time."""
    info = os.stat(path)
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


def _require_one_schema(
    paths: Sequence[str], metadata: Sequence[Any], columns: tuple[str, ...] | None
) -> None:
    """ValueError unless every file has the first one's columns (those read), in its order and of
    its types: rows whose keys or value kinds change from file to file would reach the
    transforms without a word (an int32 column turned string, a column gone)."""
    first = _read_columns(metadata[0], columns)
    for path, meta in zip(paths[1:], metadata[1:], strict=True):
        theirs = _read_columns(meta, columns)
        if theirs == first:
            continue
        names = dict(theirs)
        differs = next(
            (
                f"column {name!r} is {names[name]} there, {kind} in `{paths[0]}`"
                for name, kind in first
                if name in names and names[name] != kind
            ),
            f"its columns are {[n for n, _ in theirs]}, those of `{paths[0]}` {[n for n, _ in first]}",
        )
        raise ValueError(f"`{path}` does not have the schema of the source's first file: {differs}.")


def _read_columns(metadata: Any, columns: tuple[str, ...] | None) -> list[tuple[str, Any]]:
    schema = metadata.schema.to_arrow_schema()
    return [(name, schema.field(name).type) for name in (schema.names if columns is None else columns)]


def _join_touching(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    joined: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if joined and start <= joined[-1][1]:
            joined[-1] = (joined[-1][0], max(end, joined[-1][1]))
        else:
            joined.append((start, end))
    return joined


def _close(blob: Blob) -> None:
    blob.close()


def storage_failed(error: Exception, source: Any) -> bool:
    """Whether `error`, raised while pyarrow read `source`, is the storage failing (the file is
    gone, a disk error, a request to the object store that failed), rather than damaged bytes."""
    if isinstance(source, BlobFile) and error is source.failure:
        return True  # the blob raised it (pyarrow passes a file object's exception through)
    return isinstance(error, OSError) and error.errno is not None


def _read_metadata(pq: Any, source: Any, path: str, columns: tuple[str, ...] | None) -> Any:
    """The metadata of the file at `path` (read from `source`: the path, or a file object),
    after checking that it is Parquet and has `columns`."""
    try:
        with pq.ParquetFile(source) as reader:
            metadata, names = reader.metadata, reader.schema_arrow.names
    except Exception as error:  # pyarrow says ArrowInvalid, OSError, ... depending on the damage
        if storage_failed(error, source):
            raise  # no such object, access denied, no answer: the storage's error says so
        raise ValueError(f"`{path}` is not a readable Parquet file: {error}") from error
    in_groups = sum(metadata.row_group(g).num_rows for g in range(metadata.num_row_groups))
    if in_groups != metadata.num_rows:
        raise ValueError(
            f"`{path}` is not a readable Parquet file: its row groups hold {in_groups} rows, "
            f"its footer says {metadata.num_rows}"
        )
    require_unique_columns(names, path)
    choose_columns(columns, names, f"`{path}`")
    return metadata


def require_unique_columns(names: Sequence[str], path: str) -> None:
    """A row is a dict by column name: a file with two columns of one name would lose one
    of them in every row, so it is a ValueError naming the file and the names."""
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"`{path}` has more than one column named {', '.join(map(repr, twice))}.")
