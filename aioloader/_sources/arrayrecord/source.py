"""`ArrayRecordDataSource`: the records of ArrayRecord files (Grain's format), as bytes.

Two readers give the same records. Google's `array_record` package is used
where it installs; on free-threaded builds, which it has no wheels for,
aioloader's own reader of the format (`_arrayrecord_file`) reads the files,
decompressing with whatever this interpreter has (`_compression`).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from functools import partial
from typing import Any, Protocol

import numpy as np

from aioloader._common.validation import require_bool, require_int
from aioloader._sources.arrayrecord.reader import ArrayRecordFile
from aioloader._sources.arrayrecord.riegeli import FormatError, Records
from aioloader._sources.cache import ByteBoundedCache, CacheStatistics
from aioloader._sources.keys import KeyIndex, distinct, read_grouped
from aioloader._sources.paths import describe_paths, require_paths
from aioloader._sources.storage.blobs import open_blob, read_spans
from aioloader._sources.storage.owner import StoreOwner
from aioloader._sources.storage.store import ObjectStore, open_all, open_store
from aioloader._sources.storage.urls import is_url

READERS = ("auto", "builtin", "array_record")
READER_ENV = "AIOLOADER_ARRAY_RECORD_READER"
DEFAULT_CACHE_BYTES = 256 << 20


class _File(Protocol):
    num_records: int

    def read_one(self, position: int) -> bytes: ...

    def read(self, positions: list[int]) -> list[bytes]: ...

    def close(self) -> None: ...


class ArrayRecordDataSource(StoreOwner):
    """The records of one or more ArrayRecord files, in the order of `paths`, as `bytes`.

    `reader` picks who reads the files: `"array_record"` (Google's package),
    `"builtin"` (aioloader's own reader: plain Python and numpy, for
    interpreters where `array_record` does not install), or `"auto"`: the
    environment variable `AIOLOADER_ARRAY_RECORD_READER` if set, else
    `array_record` where it imports, else `builtin`. Both give the same
    records, so a checkpoint moves between them.

    The built-in reader supports what ArrayRecord's writer produces without
    `transpose`: any `group_size`, uncompressed, zstd, snappy or brotli
    chunks. It keeps decoded chunks of more than one record in a cache of at
    most `cache_bytes` shared by all the files.

    Damaged files: with `verify_checksums=True` (the default) the built-in
    reader verifies every checksum the Riegeli format defines (the
    HighwayHash of each block header, chunk header and chunk data) before
    it uses the bytes, so a changed byte anywhere in a file is a ValueError
    naming the file, the chunk, its records and the offset, never other
    records. The hash is C, compiled on first use (NumPy, a few hundred
    times slower, with a warning, where no C compiler works; see the
    README's "Damaged files"). `verify_checksums=False` skips the hashes
    (for storage you trust: they add about 15% to a read); sizes
    and counts are still checked, so a truncated or foreign file is still an
    error. `array_record`'s reader verifies the chunk header and chunk data
    hashes itself, whatever `verify_checksums` says. Files are checked when
    the source is made (signature, postscript, footer) and each chunk when
    it is read; every message names the file.

    `paths` may be `s3://bucket/key` URLs (and globs of them, expanded in
    sorted order), read by the built-in reader with `storage_options` (see
    the README: credentials, endpoint, region; the AWS_* environment
    variables otherwise), and verified as local files are. Each file's
    footer is read once, when the source is made (the files concurrently);
    `__getitems__` then fetches every chunk its keys need at once, in one
    round of concurrent range requests. A failed request is an OSError
    naming the URL, never a credential.

    Thread-safe: any number of threads may read at once.
    """

    def __init__(
        self,
        paths: Any,
        *,
        reader: str = "auto",
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        verify_checksums: bool = True,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        paths = require_paths(paths)
        self.reader = _choose_reader(reader, remote=any(map(is_url, paths)))
        self.verify_checksums = require_bool("verify_checksums", verify_checksums)
        self._cache: ByteBoundedCache[Records] = ByteBoundedCache(
            require_int("cache_bytes", cache_bytes, minimum=0)
        )
        self.paths, self._store = open_store(paths, storage_options)
        self._files: list[_File] = []
        try:
            opener = partial(
                _open, reader=self.reader, store=self._store, cache=self._cache, verify=self.verify_checksums
            )
            self._files = open_all(self.paths, self._store, opener, close=_close)
        except BaseException:
            self.close()
            raise
        self._index = KeyIndex([file.num_records for file in self._files])

    def __len__(self) -> int:
        return self._index.total

    def __getitem__(self, key: int) -> bytes:
        file, position = self._index.locate(key)
        return self._files[file].read_one(position)

    def __getitems__(self, keys: Sequence[int]) -> list[bytes]:
        """The records at `keys`, in order, with one read per file and one decode per chunk."""
        files, positions = self._index.locate_many(keys)
        if self._store is None:
            return read_grouped(files, positions, lambda file, at: self._files[file].read(at))
        fetched = self._fetch(files, positions)
        return read_grouped(
            files, positions, lambda file, at: self._builtin(file).read(at, fetched.get(file))
        )

    def cache_statistics(self) -> CacheStatistics:
        """The decoded-chunk cache of the built-in reader (empty for `array_record`)."""
        return self._cache.statistics()

    def _release(self) -> None:
        for file in self._files:
            file.close()
        self._cache.clear()

    def __repr__(self) -> str:
        return f"ArrayRecordDataSource({describe_paths(self.paths)}, reader={self.reader!r})"

    def _builtin(self, file: int) -> ArrayRecordFile:
        reader = self._files[file]
        assert isinstance(reader, ArrayRecordFile)  # s3:// URLs are read by the built-in reader
        return reader

    def _fetch(self, files: np.ndarray, positions: np.ndarray) -> dict[int, dict[int, bytes]]:
        """Every chunk that reading `positions` of `files` needs and the cache lacks, fetched at once
        (the bytes only: `ArrayRecordFile.read` verifies them): by file, then by chunk."""
        wanted = []
        for file in distinct(files):
            wanted += [(file, *span) for span in self._builtin(file).spans(positions[files == file].tolist())]
        fetched: dict[int, dict[int, bytes]] = {}
        data = read_spans([(blob, start, end) for _, _, blob, start, end in wanted])
        for (file, chunk, *_), raw in zip(wanted, data, strict=True):
            fetched.setdefault(file, {})[chunk] = raw
        return fetched


def array_record_installed() -> bool:
    """Whether Google's `array_record` package can be imported here."""
    try:
        return importlib.util.find_spec("array_record") is not None
    except ValueError:
        return False


def _choose_reader(reader: Any, *, remote: bool) -> str:
    if reader not in READERS:
        raise ValueError(f"`reader` must be one of {READERS}, got {reader!r}.")
    if reader == "array_record" and remote:
        raise ValueError(
            "`reader='array_record'` reads local files only; s3:// URLs are read by reader='builtin' "
            "(or 'auto')."
        )
    if reader == "auto":
        reader = "builtin" if remote else os.environ.get(READER_ENV) or "auto"
        if reader not in READERS:
            raise ValueError(
                f"the environment variable {READER_ENV} must be one of {READERS}, got {reader!r}."
            )
    if reader == "auto":
        return "array_record" if array_record_installed() else "builtin"
    if reader == "array_record" and not array_record_installed():
        raise ModuleNotFoundError(
            "`reader='array_record'` needs the array-record package, which is not installed "
            "(it has no wheels for free-threaded builds); use reader='builtin'."
        )
    return str(reader)


def _close(file: _File) -> None:
    file.close()


def _open(
    path: str, reader: str, store: ObjectStore | None, cache: ByteBoundedCache[Records], verify: bool
) -> _File:
    if reader == "array_record":
        return _NativeFile(path)
    # ArrayRecordFile closes the blob if the file is not valid.
    return ArrayRecordFile(open_blob(path, store), cache, verify_checksums=verify)


class _NativeFile:
    """One file read by the `array_record` package's C++ reader.

    One reader serves every thread, as in Grain's own data source (the C++
    reader is thread-safe); readahead is off, since reads are random.
    """

    def __init__(self, path: str) -> None:
        from array_record.python import array_record_module

        self._path = path
        try:
            self._reader = array_record_module.ArrayRecordReader(
                path, "readahead_buffer_size:0", file_reader_buffer_size=32768
            )
        except Exception as error:  # the C++ reader reports a bad file as a plain error
            raise FormatError(f"`{path}` is not a valid ArrayRecord file: {error}.") from error
        if not self._reader.ok():
            raise FormatError(f"`{path}` is not a valid ArrayRecord file: {self._failure()}.")
        self.num_records: int = self._reader.num_records()

    def _failure(self) -> str:
        # A reader that failed to open says why only when it is used.
        try:
            self._reader.read([0])
        except Exception as error:
            return str(error)
        return "the array_record reader reports a failure"

    def read_one(self, position: int) -> bytes:
        return self.read([position])[0]

    def read(self, positions: list[int]) -> list[bytes]:
        try:
            return list(self._reader.read(positions))
        except Exception as error:  # the C++ reader reports a damaged chunk as a RuntimeError
            raise FormatError(f"`{self._path}`: {_records(positions)} cannot be read: {error}.") from error

    def close(self) -> None:
        self._reader.close()


def _records(positions: list[int], shown: int = 3) -> str:
    """`positions` for a message: "record 7", or "records 3, 9, 12 and 5 more"."""
    if len(positions) == 1:
        return f"record {positions[0]}"
    more = len(positions) - shown
    return f"records {', '.join(map(str, positions[:shown]))}" + (f" and {more} more" if more > 0 else "")
