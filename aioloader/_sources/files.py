"""`FilesDataSource`: whole files as records, read with asyncio file I/O (aiofiles)."""

from __future__ import annotations

from typing import Any

import aiofiles

from aioloader._sources.keys import require_key
from aioloader._sources.paths import describe_paths, regular_file_opener, require_paths
from aioloader._sources.storage.owner import StoreOwner
from aioloader._sources.storage.store import open_store
from aioloader._sources.storage.urls import is_url, parse


class FilesDataSource(StoreOwner):
    """The bytes of each file in `paths`, one record per file, in order.

    An `AsyncDataSource`: the loader awaits `aget` on its event loop with at
    most `ReadOptions.num_threads` reads in flight, so files on slow or
    network storage are read concurrently, from `for` and `async for`
    alike. aiofiles runs each blocking call (open, read, close) on the event
    loop's default executor, whose size (`min(32, cpu_count + 4)` threads
    unless the loop's owner sets another) also bounds the reads that are
    really waiting on the disk at once.

    `paths` may be `s3://bucket/key` URLs (and globs of them, listed when
    the source is made, in sorted order), reached with `storage_options`
    (see the README; the AWS_* environment variables otherwise). An object
    is read whole with one request on the source's storage threads, so
    `ReadOptions.num_threads` objects are in flight at once.

    `source[key]` reads synchronously, for debugging. The paths are not
    checked when the source is made (a million `stat` calls on a network
    disk would not start at once): a missing file is an error when it is
    read, naming the file, and so is a path that is not a regular file (a pipe
    with no writer would block the read for ever). Safe to use from any
    number of threads and loops.
    """

    def __init__(self, paths: Any, *, storage_options: dict[str, Any] | None = None) -> None:
        self.paths, self._store = open_store(require_paths(paths, must_exist=False), storage_options)
        # URLs are parsed now (strings only, no request), so that `s3://bucket` fails here, named.
        self._urls = [
            parse(path, f"paths[{i}]") if is_url(path) else None for i, path in enumerate(self.paths)
        ]

    def __len__(self) -> int:
        return len(self.paths)

    async def aget(self, key: int) -> bytes:
        """The bytes of file `paths[key]`, read without blocking the event loop."""
        key = require_key(key, len(self.paths))
        url = self._urls[key]
        if self._store is not None and url is not None:
            return await self._store.aread(url)
        async with aiofiles.open(self.paths[key], "rb", opener=regular_file_opener) as file:
            return await file.read()  # type: ignore[no-any-return]

    def __getitem__(self, key: int) -> bytes:
        """The bytes of file `paths[key]`, read in this thread."""
        key = require_key(key, len(self.paths))
        url = self._urls[key]
        if self._store is not None and url is not None:
            return self._store.read(url)
        with open(self.paths[key], "rb", opener=regular_file_opener) as file:
            return file.read()

    def __repr__(self) -> str:
        return f"FilesDataSource({describe_paths(self.paths)})"
