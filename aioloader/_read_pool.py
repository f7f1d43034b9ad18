"""Reads of a slow random-access source, many at once.

A source read with `__getitem__` one key at a time is read by the worker
that holds the chunk, so only `worker_count` reads are in flight. That is
right when reading is cheap (memory, a local SSD): a hand-off between threads
costs more than the read. When reads wait (a network disk, an object store),
`ReadOptions.num_threads` of them should be in flight, as the option says.
So a worker times its reads, and once they take more than `SLOW_READ_SECONDS`
a record, the pool is engaged: from then on every worker sends its chunks'
keys to a pool of `num_threads` threads (`aioloader-read-{i}`, started then),
which reads them concurrently, in order. The first chunk is read by one worker
alone (the pipeline waits to size the others from it), so a source slow from
the start never has more than `num_threads` reads in flight. Sources with
`__getitems__` batch their own reads and never use the pool.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

SLOW_READ_SECONDS = 50e-6  # far above a hand-off between threads: waiting, not work


class ReadPool:
    """Up to `threads` concurrent reads, on threads started at the first use."""

    def __init__(self, threads: int) -> None:
        self._threads = threads
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False
        self.engaged = False  # reads are slow: every worker reads through the pool

    def map(self, read: Callable[[int], Any], keys: Iterable[int]) -> Iterator[Any]:
        """`read(key)` for every key, concurrently, yielding the results in key order."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the loader is closed")
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self._threads, thread_name_prefix="aioloader-read")
            executor = self._executor
        return executor.map(read, keys)

    def close(self) -> None:
        """Cancel the reads not started, and join the threads. Idempotent."""
        with self._lock:
            self._closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
