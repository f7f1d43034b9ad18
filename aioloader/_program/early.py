"""`start_prefetch()` with `worker_count=0`: the first chunk's records, read on other threads.

Grain's `DataLoader` with `worker_count=0` reads ahead on its read threads
(`ReadOptions.num_threads` of them) while the caller's thread runs the
transforms, and its `start_prefetch()` starts those reads before the first
`next()`. aioloader's inline driver reads in the caller's thread; so there,
`start_prefetch()` reads the first chunk (the records of the first output)
on a background thread, `aioloader-prefetch`, which hands a source read one
key at a time to `num_threads` read threads at once. The first `next()`
takes the records (waiting for the reads still in flight) and runs the
operations in the caller's thread, as always. Nothing else changes: the
same keys are read once each, and a read's error is raised in order, as
if the caller had read them.
"""

from __future__ import annotations

import threading

from aioloader._common.contexts import in_this_context
from aioloader._program.read_pool import ReadPool
from aioloader._program.records import RecordChunk, read


class EarlyRead:
    """The records of `chunk` (its keys set, not yet read), read on a background thread."""

    def __init__(self, source: object, chunk: RecordChunk, threads: int) -> None:
        self._chunk = chunk
        self._pool = ReadPool(threads)
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=in_this_context(self._read), args=(source,), name="aioloader-prefetch", daemon=True
        )
        self._thread.start()

    def _read(self, source: object) -> None:
        try:
            read(source, self._chunk, mapper=self._pool.map)
        except BaseException as error:  # raised again in the consumer, as an inline read would be
            self._error = error

    def take(self, chunk: RecordChunk) -> bool:
        """Give `chunk` the records read early, if it is the chunk read early (same
        position and keys): True then. Waits for the reads still in flight."""
        early = self._chunk
        if chunk.start != early.start or chunk.keys != early.keys:
            return False
        self._thread.join()
        if self._error is not None:
            raise self._error
        # The early chunk was made from the same keys: its failure is the
        # sampler's, or a read's that comes before it.
        chunk.items, chunk.failure = early.items, early.failure
        return True

    def close(self) -> None:
        """Cancel the reads not started and join the threads; idempotent."""
        self._pool.close()
        self._thread.join(2.0)
