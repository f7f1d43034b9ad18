"""`worker_count=0`: a chunk's records read on other threads before the step that needs them.

Grain's `DataLoader` with `worker_count=0` reads ahead on its read threads
(`ReadOptions.num_threads` of them) while the caller's thread runs the
transforms, and its `start_prefetch()` starts those reads before the first
`next()`. aioloader's inline driver reads a chunk when `next()` needs it,
on the read pool once reads were seen waiting (see `read_pool`). Two things
read earlier:

* `EarlyRead`: `start_prefetch()` reads the first chunk (the records of the
  first output) on a background thread, `aioloader-prefetch`, which hands a
  source read one key at a time to `num_threads` read threads at once.
* `ReadAhead`: once the pool is engaged, the next chunk's reads are queued
  on it while the consumer takes the outputs of the chunk before, within
  `prefetch_buffer_size` records (see `inline_steps`).

The step that needs the records takes them (waiting for the reads still in
flight) and the operations run in the caller's thread, as always. Nothing
else changes: the same keys are read once each, and a read's error is
raised in order, as if the caller had read them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from aioloader._common.calls import Shutdown, checked
from aioloader._common.contexts import in_this_context
from aioloader._program.jobs import ChunkJob
from aioloader._program.read_pool import ReadPool
from aioloader._program.records import RecordChunk, read, read_label


class EarlyRead:
    """The records of `chunk` (its keys set, not yet read), read on a background thread."""

    def __init__(self, source: object, chunk: RecordChunk, threads: int, shutdown: Shutdown) -> None:
        self._chunk, self._shutdown = chunk, shutdown
        self._pool = ReadPool(threads)
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=in_this_context(self._read), args=(source,), name="aioloader-prefetch", daemon=True
        )
        self._thread.start()

    def _read(self, source: object) -> None:
        try:
            read(source, self._chunk, self._shutdown, self._pool.map)
        except BaseException as error:  # raised again in the consumer, as an inline read would be
            self._error = error

    def take(self, chunk: RecordChunk) -> bool:
        """Give `chunk` the records read early, if it is the chunk read early (same
        position and keys): True then. Waits for the reads still in flight."""
        early = self._chunk
        if chunk.start != early.start or chunk.keys != early.keys:
            return False
        self._thread.join()
        # Done with its threads: idle until the engine closed, a Ctrl-C in the step left them.
        self._pool.close()
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


class ReadAhead:
    """Once reads were seen waiting: the next chunk's records, queued on the
    engaged read pool while the consumer still takes the outputs of the chunk before it,
    as Grain's read threads read ahead of its `worker_count=0` loop. The chunk (its keys
    walked once) is the job's: the program's KEYS step takes it (see `Program.read_ahead`).
    """

    def __init__(
        self, source: Any, job: ChunkJob, chunk: RecordChunk, pool: ReadPool, shutdown: Shutdown
    ) -> None:
        self.job, self.chunk = job, chunk
        self._source, self._shutdown = source, shutdown
        self._queued = pool.map(checked(source.__getitem__, read_label(source), shutdown), chunk.keys)

    def take(self, chunk: RecordChunk) -> bool:
        """Give `chunk` its records, waiting for the reads still in flight; errors at their
        place, as `read` gives them. False for another chunk."""
        if chunk is not self.chunk:
            return False
        read(self._source, chunk, self._shutdown, self._already_queued)
        return True

    def _already_queued(self, _read: Callable[[Any], Any], _keys: object) -> Iterator[Any]:
        return self._queued
