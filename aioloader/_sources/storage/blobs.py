"""Blobs: a local file or a stored object, read by byte ranges. The readers of the storage formats
see only this: `open_blob`, `Blob.read`, and `read_spans` for many ranges at once.

A local file is read with `os.pread` on one descriptor, range after range
(the disk's cache answers faster than threads could hand work over). A
stored object (`s3://`) is read through its `ObjectStore`, every range of a
`read_spans` call in flight at once. Both read like a file: a range that
runs past the end comes back short. Thread-safe.
"""

from __future__ import annotations

import io
import os
import threading
import weakref
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from typing import Protocol

from aioloader._sources.storage.store import ObjectStore
from aioloader._sources.storage.urls import ObjectUrl, is_url, parse


class Blob(Protocol):
    """Bytes by range: `name` is the path or URL (for messages), `size` the length, fixed when opened."""

    name: str
    size: int

    @property
    def closed(self) -> bool: ...

    def read(self, offset: int, size: int) -> bytes: ...

    def close(self) -> None: ...


class LocalBlob:
    """A local file, read with `os.pread` on one descriptor (closed by `close()` or when collected).

    A `close()` while reads are in flight closes the descriptor after the last
    of them: closed at once, its number could be reused by the next `open`
    before a read that had checked it began, and that read would return
    another file's bytes.
    """

    def __init__(self, path: str) -> None:
        self.name = path
        self._fd = os.open(path, os.O_RDONLY)
        self._closer = weakref.finalize(self, os.close, self._fd)
        self._lock = threading.Lock()  # `_closed` and `_reading`: two short holds per read
        self._closed = False
        self._reading = 0
        try:
            self.size = os.fstat(self._fd).st_size
        except BaseException:
            self.close()
            raise

    @property
    def closed(self) -> bool:
        return self._closed

    def read(self, offset: int, size: int) -> bytes:
        with self._lock:
            if self._closed:
                raise ValueError(f"`{self.name}` was closed.")
            self._reading += 1
        try:
            return os.pread(self._fd, size, offset)
        finally:
            with self._lock:
                self._reading -= 1
                last = self._closed and not self._reading
            if last:
                self._closer()

    def close(self) -> None:
        """Close the file (idempotent; after the reads in flight); reading afterwards raises ValueError."""
        with self._lock:
            self._closed = True
            idle = not self._reading
        if idle:
            self._closer()


class RemoteBlob:
    """An object in a store; opening it asks for its size."""

    def __init__(self, store: ObjectStore, url: str) -> None:
        self.name, self.url, self.store = url, parse(url), store
        self.size = store.size(self.url)
        self.closed = False

    def read(self, offset: int, size: int) -> bytes:
        return read_spans([(self, offset, offset + size)])[0]

    def close(self) -> None:
        self.closed = True


def open_blob(path: str, store: ObjectStore | None) -> Blob:
    """The file at `path`, or the object at an s3:// URL (read through `store`)."""
    if not is_url(path):
        return LocalBlob(path)
    if store is None:
        raise ValueError(f"{path!r} is an s3:// URL, but no object store was set up for it.")
    return RemoteBlob(store, path)


def read_spans(spans: Sequence[tuple[Blob, int, int]]) -> list[bytes]:
    """The bytes of each `(blob, start, end)`, in order; the ranges of stored objects all at once."""
    results = [b""] * len(spans)
    remote: dict[ObjectStore, list[tuple[int, ObjectUrl, int, int]]] = {}
    for i, (blob, start, end) in enumerate(spans):
        if not isinstance(blob, RemoteBlob):
            results[i] = blob.read(start, end - start)
            continue
        if blob.closed:
            raise ValueError(f"`{blob.name}` was closed.")
        end = min(end, blob.size)  # past the end: short, as from a file, and no request for nothing
        if start < end:
            remote.setdefault(blob.store, []).append((i, blob.url, start, end))
    for store, wanted in remote.items():
        fetched = store.fetch([(url, start, end) for _, url, start, end in wanted])
        for (i, *_), data in zip(wanted, fetched, strict=True):
            results[i] = data
    return results


class BlobFile(io.RawIOBase):
    """A read-only file object over a blob, for libraries that read through one (pyarrow's Parquet).

    Reads that fall inside a `prefetched` span (start offset -> bytes) are
    served from memory; others read the blob, and are counted in
    `fallback_reads`. `failure` is the last error the blob raised, so that a
    caller can tell the storage failing from a library's own errors. One per
    reading thread: the position is not shared.
    """

    def __init__(self, blob: Blob, prefetched: Mapping[int, bytes] | None = None) -> None:
        super().__init__()
        self._blob, self._position, self.fallback_reads = blob, 0, 0
        self.failure: BaseException | None = None
        spans = sorted((prefetched or {}).items())
        self._starts = [start for start, _ in spans]
        self._spans = [data for _, data in spans]

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._blob.size}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._position = base + offset
        return self._position

    def read(self, size: int | None = -1) -> bytes:
        start = self._position
        end = self._blob.size if size is None or size < 0 else min(start + size, self._blob.size)
        data = self._prefetched(start, end)
        if data is None:
            self.fallback_reads += 1
            try:
                data = self._blob.read(start, max(0, end - start))
            except BaseException as error:
                self.failure = error
                raise
        self._position = start + len(data)
        return data

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        memoryview(buffer)[: len(data)] = data
        return len(data)

    def _prefetched(self, start: int, end: int) -> bytes | None:
        i = bisect_right(self._starts, start) - 1
        if i < 0 or end - self._starts[i] > len(self._spans[i]):
            return None
        offset = start - self._starts[i]
        return self._spans[i][offset : offset + end - start]
