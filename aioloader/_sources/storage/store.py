"""`ObjectStore`: byte ranges of objects, many requests in flight at once, retried when worth it.

A source that reads `s3://` URLs holds one store. A batch of records
becomes one call to `fetch` with every byte range it needs: ranges of the
same object that touch or overlap are merged into one request, and the
requests run concurrently on the store's threads (`aioloader-storage-{i}`,
at most `settings.max_requests`, started at first need), so a chunk of N records
costs about one round trip, not N in a row.

A request that fails transiently is sent again up to `settings.retries`
times, after 0.1, 0.2, 0.4, ... s (jittered, at most 2 s); any other
failure, and the last transient one, raises at once an error naming the
URL (see `errors`). Each retry is logged at DEBUG level on
`aioloader.storage`, credentials replaced. `close()` stops the threads and
cuts retry waits short. Thread-safe.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from aioloader._sources.storage.clients import Client, make_client
from aioloader._sources.storage.errors import Kind, detail, storage_error, unavailable
from aioloader._sources.storage.settings import S3Settings, resolve
from aioloader._sources.storage.urls import ObjectUrl, glob_matcher, glob_prefix, is_glob, is_url, parse

# asyncio, logging and concurrent.futures load where a store is used, not where a source
# of local files is made (tens of ms before a first batch: tests/test_lazy_imports.py).
if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor
S = TypeVar("S")
T = TypeVar("T")

THREAD_NAME = "aioloader-storage"
MAX_OPENING = 16  # files opened at once when a source is made
MAX_MERGED_BYTES = 8 << 20  # a merged request stays small enough to leave the others concurrent
_FIRST_BACKOFF, _MAX_BACKOFF = 0.1, 2.0

Range = tuple[ObjectUrl, int, int]  # an object, and [start, end) in it


class StorageStatistics(NamedTuple):
    """What a store has sent so far: requests (retries included), the bytes they brought back,
    the ranges asked for (before merging), the retries, and the requests that failed for good."""

    requests: int
    bytes: int
    ranges: int
    retries: int
    failures: int


class ObjectStore:
    """Objects of one S3 endpoint, read by ranges through the client `settings` choose."""

    def __init__(self, settings: S3Settings) -> None:
        self.settings = settings
        self.client: Client = make_client(settings)
        self._secrets = settings.secrets()
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._closed = threading.Event()
        self._counts = [0, 0, 0, 0, 0]  # as in StorageStatistics

    def size(self, url: ObjectUrl) -> int:
        """The object's size in bytes (one HEAD request)."""
        return self._call(url, self.client.size, url)

    def read(self, url: ObjectUrl) -> bytes:
        """The whole object."""
        data = self._call(url, self.client.read, url)
        self._count(bytes=len(data))
        return data

    async def aread(self, url: ObjectUrl) -> bytes:
        """The whole object, read on the store's threads while the event loop runs on."""
        import asyncio

        return await asyncio.wrap_future(self._submit(self.read, url))

    def fetch(self, ranges: Sequence[Range]) -> list[bytes]:
        """The bytes of each range, in order: touching ranges merged, the requests concurrent.

        A range past the end of its object comes back short, as a file read would.
        """
        if not ranges:
            return []
        merged, places = merge(ranges)
        self._count(ranges=len(ranges))
        # One request goes from this thread; more wait for each other on the store's threads.
        parts = self._map(self._read_range, merged) if len(merged) > 1 else [self._read_range(merged[0])]
        return [
            parts[m][offset : offset + end - start]
            for (m, offset), (_, start, end) in zip(places, ranges, strict=True)
        ]

    def glob(self, pattern: str) -> list[str]:
        """The URLs of the objects that `pattern` (an s3:// URL with wildcards) matches, sorted."""
        where = parse(pattern)
        keys = self._call(where, self.client.list, where.bucket, glob_prefix(where))
        match = glob_matcher(where.key).match
        return [str(ObjectUrl(where.bucket, key)) for key in sorted(keys) if match(key)]

    def statistics(self) -> StorageStatistics:
        with self._lock:
            return StorageStatistics(*self._counts)

    def close(self) -> None:
        """Stop the threads (requests under way finish; retry waits end at once). Idempotent."""
        self._closed.set()
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)

    def __repr__(self) -> str:
        return f"ObjectStore({self.settings.where}, client={self.client.name!r})"

    def _read_range(self, item: Range) -> bytes:
        url, start, end = item
        data = self._call(url, self.client.read_range, url, start, end)
        self._count(bytes=len(data))
        return data

    def _call(self, url: ObjectUrl, request: Callable[..., T], *args: Any) -> T:
        """`request(*args)`, sent again while it fails transiently, at most `retries` more times."""
        attempts, failure = 0, None
        while True:
            if self._closed.is_set():
                raise RuntimeError(f"`{url}`: the data source was closed.")
            attempts += 1
            self._count(requests=1)
            try:
                return request(*args)
            except Exception as error:  # each library raises its own types
                kind, failure = self.client.classify(error), error
            if kind is not Kind.TRANSIENT or attempts > self.settings.retries:
                break
            self._count(retries=1)
            delay = _backoff(attempts)
            _log_retry(url, detail(failure, self._secrets), delay)
            self._closed.wait(delay)  # cut short by close(), and then the loop's first line raises
        # Raised here, outside the `except`, so that the library's error (whose
        # arguments may hold what the message leaves out) is not even the context.
        self._count(failures=1)
        where, secrets = self.settings.where, self._secrets
        if kind is Kind.TRANSIENT:
            raise unavailable(str(url), where, attempts, failure, secrets)
        raise storage_error(kind, str(url), where, failure, secrets)

    def _map(self, function: Callable[[Range], bytes], items: list[Range]) -> list[bytes]:
        """`function` on every item on the store's threads; the first failure (in order) is raised."""
        futures = [self._submit(function, item) for item in items]
        try:
            return [future.result() for future in futures]
        finally:
            for future in futures:  # after a failure, the requests not yet sent are not sent
                future.cancel()

    def _submit(self, function: Callable[..., T], *args: Any) -> Future[T]:
        with self._lock:
            if self._closed.is_set():
                raise RuntimeError("the data source was closed.")
            if self._executor is None:
                from concurrent.futures import ThreadPoolExecutor

                self._executor = ThreadPoolExecutor(
                    self.settings.max_requests, thread_name_prefix=THREAD_NAME
                )
            return self._executor.submit(function, *args)

    def _count(self, **added: int) -> None:
        """Add to the statistics, by their names."""
        with self._lock:
            for name, value in added.items():
                self._counts[_FIELDS[name]] += value


_FIELDS = {name: i for i, name in enumerate(StorageStatistics._fields)}


def merge(ranges: Sequence[Range]) -> tuple[list[Range], list[tuple[int, int]]]:
    """Ranges that touch or overlap, merged (up to `MAX_MERGED_BYTES`); and for each input range,
    the merged range holding it and its offset there."""
    order = sorted(range(len(ranges)), key=lambda i: ranges[i])
    merged: list[Range] = []
    places: list[tuple[int, int]] = [(0, 0)] * len(ranges)
    for i in order:
        url, start, end = ranges[i]
        if merged:
            last_url, last_start, last_end = merged[-1]
            if last_url == url and start <= last_end and max(end, last_end) - last_start <= MAX_MERGED_BYTES:
                merged[-1] = (url, last_start, max(end, last_end))
                places[i] = (len(merged) - 1, start - last_start)
                continue
        merged.append((url, start, end))
        places[i] = (len(merged) - 1, 0)
    return merged, places


def open_store(paths: tuple[str, ...], storage_options: Any) -> tuple[tuple[str, ...], ObjectStore | None]:
    """For a source's `paths`: the paths with their globs expanded, and the store that reads the
    s3:// ones (None if all are local). `storage_options` is checked either way."""
    settings = resolve(storage_options)
    if not any(is_url(path) for path in paths):
        return paths, None
    store = ObjectStore(settings)
    try:
        return expand(paths, store), store
    except BaseException:
        store.close()
        raise


def open_all(
    items: Sequence[S],
    store: ObjectStore | None,
    open_one: Callable[[S], T],
    close: Callable[[T], None] | None = None,
) -> list[T]:
    """`open_one(item)` for each item, in order: one after the other for local files, and
    `MAX_OPENING` at a time with a store (each open is a few round trips). If one fails,
    `close` is called on those already opened, and its error is raised."""
    if store is None or len(items) == 1:
        opened: list[T] = []
        try:
            for item in items:
                opened.append(open_one(item))
        except BaseException:
            for done in opened if close else ():
                close(done)  # type: ignore[misc]
            raise
        return opened
    from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

    with ThreadPoolExecutor(min(MAX_OPENING, len(items)), thread_name_prefix="aioloader-open") as pool:
        futures = [pool.submit(open_one, item) for item in items]
        wait(futures, return_when=FIRST_EXCEPTION)
        for future in futures:  # after a failure, what has not started does not start
            future.cancel()
    succeeded = [f for f in futures if not f.cancelled() and f.exception() is None]
    if len(succeeded) < len(futures):
        for future in succeeded if close else ():
            close(future.result())  # type: ignore[misc]
        next(f for f in futures if not f.cancelled() and f.exception() is not None).result()
    return [future.result() for future in futures]


def _log_retry(url: ObjectUrl, failure: str, delay: float) -> None:
    import logging

    logging.getLogger("aioloader.storage").debug("`%s`: %s; sending it again in %.2f s", url, failure, delay)


def statistics_of(store: ObjectStore | None) -> StorageStatistics:
    """The store's statistics; all zero without one (a source of local files)."""
    return store.statistics() if store is not None else StorageStatistics(0, 0, 0, 0, 0)


def expand(paths: Sequence[str], store: ObjectStore) -> tuple[str, ...]:
    """`paths` with each s3:// glob replaced by the URLs it matches (sorted); a glob that
    matches nothing is a FileNotFoundError naming it."""
    found: list[str] = []
    for i, path in enumerate(paths):
        if not (is_url(path) and is_glob(path)):
            found.append(path)
            continue
        matches = store.glob(path)
        if not matches:
            raise FileNotFoundError(f"`paths[{i}]` matches no object: {path!r}.")
        found.extend(matches)
    return tuple(found)


def _backoff(attempt: int) -> float:
    """Seconds to wait after the `attempt`-th failure: exponential, jittered, capped."""
    ceiling = min(_FIRST_BACKOFF * 2.0 ** (attempt - 1), _MAX_BACKOFF)
    return ceiling / 2 + random.random() * ceiling / 2
