"""Reads of a slow random-access source, many at once.

A source read with `__getitem__` one key at a time is read by the worker
that holds the chunk, so only `worker_count` reads are in flight. That is
right when reading is cheap (memory, a local SSD): a hand-off between threads
costs more than the read. When reads wait (a network disk, an object store),
`ReadOptions.num_threads` of them should be in flight, as the option says.

So until the pool is engaged, a worker times each chunk's reads. A chunk
that took more than `SLOW_READ_SECONDS` a record makes the pool suspicious
(as it is at first), and while it is, workers time the first `PROBE_READS` reads of each chunk one
by one (`probing_map`): once the last `PROBE_READS` reads timed have *each*
taken more than `SLOW_READ_SECONDS`, the pool is engaged; once they show a
fast read, it is no longer suspicious. The first chunk is a batch that the
first output waits for: a source of 2 ms reads took 8 ms to time four of its
reads one by one before the other 28 were read at once. So when the first
two reads ever timed (`FIRST_SLOW_READS`, both of the first chunk) were both
slow, the rest of that chunk goes to the pool at once, which is not engaged
by it (a file opened by the first read makes one slow read, not two; once
per loader, at most one chunk's reads move). Engaged, every worker sends its
chunks' keys to a pool of `num_threads` threads (`aioloader-read-{i}`,
started then, each starting the next), which reads them concurrently, in order. Each read must be
slow, not their sum: a worker that waited for the GIL or for a core once in
a while (on a busy machine, or a GIL build with several workers) has a few
slow reads among fast ones, and must not move cheap reads to the pool; and
fast sources never pay for timing reads one by one.
The first chunk is read by one worker alone (the
pipeline waits to size the others from it), and the probes of the workers
take the same `num_threads` slots as the pool's reads, so a source slow from
the start never has more than `num_threads` reads in flight. Sources with
`__getitems__` batch their own reads and never use the pool.

`resize` changes how many reads may be in flight while the loader runs
(`worker_count="auto"` with the default `ReadOptions`): the slots bound the
reads, and the pool starts threads up to the new size; above it, the
threads it has stay, idle for want of slots.

The pool's threads are its own, not a `concurrent.futures` executor: that
module took 11 ms to import on 3.13t, which a slow source's first batch
paid, as it paid for starting the executor's threads one after another
(`Thread.start` waits for each to run).
"""

from __future__ import annotations

import collections
import itertools
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from aioloader._common.calls import Stopped
from aioloader._common.contexts import in_this_context, serve

SLOW_READ_SECONDS = 50e-6  # far above a hand-off between threads: waiting, not work
PROBE_READS = 4  # reads in a row that must each be slow
FIRST_SLOW_READS = 2  # ... and the first reads timed that, slow, send the rest of their chunk there
# What times the reads; a pool takes it when it is made. Tests put a clock of
# their own here, so that what counts as slow does not depend on the machine's load.
CLOCK: Callable[[], float] = time.perf_counter


class Slots:
    """At most `limit` holders at once, like a semaphore whose size may change."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._used = 0
        self._free = threading.Condition()

    def __enter__(self) -> None:
        with self._free:
            while self._used >= self.limit:
                self._free.wait()
            self._used += 1

    def __exit__(self, *_: object) -> None:
        with self._free:
            self._used -= 1
            self._free.notify()

    def resize(self, limit: int) -> None:
        """Let `limit` hold at once (those above it keep their slot until they leave)."""
        with self._free:
            self.limit = limit
            self._free.notify_all()


_PENDING: Any = object()  # a read not done yet


class _Reads:
    """The reads of one `ReadPool.map` call: their outcomes by position, filled in by the
    pool's threads, taken in order by the caller."""

    __slots__ = ("abandoned", "filled", "outcomes", "read")

    def __init__(self, read: Callable[[int], Any], count: int) -> None:
        self.read = read
        self.outcomes: list[Any] = [_PENDING] * count  # (value, None) or (None, error)
        self.filled = threading.Condition(threading.Lock())
        self.abandoned = False  # the caller stopped taking them: the reads not started are skipped

    def fill(self, position: int, outcome: tuple[Any, BaseException | None]) -> None:
        with self.filled:
            self.outcomes[position] = outcome
            self.filled.notify()  # one waiter: the caller

    def results(self) -> Iterator[Any]:
        """The values in order; a read's error is raised at its place."""
        try:
            for position in range(len(self.outcomes)):
                with self.filled:
                    while (outcome := self.outcomes[position]) is _PENDING:
                        self.filled.wait()
                    self.outcomes[position] = None  # the caller holds the record from here
                value, error = outcome
                if error is not None:
                    raise error
                yield value
        finally:
            self.abandoned = True


class ReadPool:
    """Up to `threads` concurrent reads, on threads started at the first use."""

    def __init__(self, threads: int) -> None:
        self._threads = threads
        self.clock = CLOCK
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[tuple[_Reads, int, int] | None] = queue.SimpleQueue()
        self._readers: list[threading.Thread] = []  # started on the first `map`
        self._closed = False
        self.engaged = False  # reads are slow: every worker reads through the pool
        # Time the next reads one by one. At first too: the first chunk (a batch)
        # is read by one worker alone, and from a slow source it should not wait
        # for all its reads in turn.
        self.suspicious = True
        self._timed: collections.deque[float] = collections.deque(maxlen=PROBE_READS)
        # The reads in flight, the pool's and the probes' together: a worker may
        # still be probing when another one has engaged the pool.
        self._slots = Slots(threads)
        # Whose jobs the reader threads do (the engine's scheduler): a read that calls its own
        # iterator is refused, whichever thread started the readers (see `_common/contexts`).
        self.serving: Any = None
        self.on_first_thread: Callable[[], None] | None = None  # called once it has started

    @property
    def idle(self) -> bool:
        """True when workers read for themselves (not engaged, nor probing reads)."""
        return not (self.engaged or self.suspicious)

    @property
    def threads(self) -> int:
        """How many reads may be in flight at once."""
        return self._threads

    def resize(self, threads: int) -> None:
        """Let `threads` (> 0) reads be in flight from now on."""
        with self._lock:
            self._threads = threads
            self._slots.resize(threads)

    def map(self, read: Callable[[int], Any], keys: Iterable[int]) -> Iterator[Any]:
        """`read(key)` for every key, concurrently, yielding the results in key order."""
        keys = list(keys)
        reads = _Reads(read, len(keys))
        self._grow()
        with self._lock:  # queued under the lock: after `close` has queued its ends, none is
            if self._closed:
                raise Stopped  # the loader closed while this work ran: abandoned, not failed
            for position, key in enumerate(keys):
                self._queue.put((reads, position, key))
        return reads.results()

    def _grow(self) -> None:
        """Start a reader thread if fewer than `threads` run; each new one calls this first,
        so that the caller waits for one thread's start, not for all of them."""
        with self._lock:
            if self._closed or len(self._readers) >= self._threads:
                return
            thread = threading.Thread(
                target=in_this_context(self._serve), name=f"aioloader-read-{len(self._readers)}", daemon=True
            )
            self._readers.append(thread)
            try:  # under the lock, so that `close` never joins a thread not started
                thread.start()
            except BaseException:  # "can't start new thread"
                self._readers.remove(thread)
                if self._readers:  # fewer readers: the reads still all get done
                    return
                raise
            first, self.on_first_thread = self.on_first_thread, None
        if first is not None:
            first()

    def _serve(self) -> None:
        """A reader thread: read what is queued, each read in a slot, until `close`."""
        serve(self.serving)
        self._grow()
        while (task := self._queue.get()) is not None:
            reads, position, key = task
            if self._closed or reads.abandoned:
                reads.fill(position, (None, Stopped()))  # the caller, if it still waits, is closing
                continue
            try:
                with self._slots:
                    outcome: tuple[Any, BaseException | None] = (reads.read(key), None)
            except BaseException as error:  # raised in the caller, at its place
                outcome = (None, error)
            reads.fill(position, outcome)
            del task, reads, outcome  # an idle reader holds no record

    def note_chunk(self, seconds: float, reads: int) -> None:
        """A chunk's `reads` took `seconds`: if that is slow, look closer at the next reads."""
        if seconds > SLOW_READ_SECONDS * reads:
            self.suspicious = True

    def probing_map(self, read: Callable[[int], Any], keys: Sequence[int]) -> Iterator[Any]:
        """`map(read, keys)`, timing the first reads; if they show that reads wait,
        the rest go through the pool, and so will every later chunk's. The
        first two reads ever timed, both slow, send the rest of their chunk there
        (see the module docstring)."""
        timed_count, split = 0, False

        def timed() -> Iterator[Any]:
            nonlocal timed_count, split
            for key in keys[:PROBE_READS]:
                with self._slots:
                    started = self.clock()
                    item = read(key)
                    first_slow = self._record(self.clock() - started)
                timed_count += 1
                split = first_slow and timed_count == FIRST_SLOW_READS  # both this chunk's
                yield item
                if self.engaged or split:
                    return

        def parts() -> Iterator[Iterator[Any]]:
            yield timed()
            if not (self.engaged or split) and len(self._timed) == PROBE_READS:
                self.suspicious = False  # a fast read among the last ones: a hiccup
            rest = keys[timed_count:]
            yield self.map(read, rest) if self.engaged or split else map(read, rest)

        # Lazily chained, so that `list.extend` still counts the records read
        # before one that raises; the rest is `map` itself, at C speed.
        return itertools.chain.from_iterable(parts())

    def _record(self, seconds: float) -> bool:
        """Note how long a read took; engage the pool if the last `PROBE_READS` were all slow.
        True when this was the last of the `FIRST_SLOW_READS` first reads ever timed, all slow."""
        with self._lock:  # other workers time their reads too
            timed = self._timed
            timed.append(seconds)
            if len(timed) == PROBE_READS and min(timed) > SLOW_READ_SECONDS:
                self.engaged = True
            return len(timed) == FIRST_SLOW_READS and min(timed) > SLOW_READ_SECONDS

    def close(self) -> None:
        """Skip the reads not started (their callers get `Stopped`), and join the threads
        once the reads in flight are done. Idempotent, and every call waits: a `close()`
        from another thread and the consumer's own, at once, both return with the threads
        joined (the second returned at once while the first still joined them)."""
        with self._lock:
            if not self._closed:
                self._closed = True  # `_grow` starts no reader from now on
                for _ in self._readers:
                    self._queue.put(None)
            readers = list(self._readers)
        for thread in readers:
            if thread is not threading.current_thread():
                thread.join()
