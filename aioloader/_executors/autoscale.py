"""`worker_count="auto"`: as many worker threads (and read threads) as keep the consumer fed,
within a memory bound.

The output does not depend on the worker count (each chunk's result is a
pure function of its indices, reassembled in order), so workers can come and
go while the loader runs without changing a single batch. `AutoWorkers`
starts with one worker and looks again every `INTERVAL` seconds, from the
consumer's thread as it asks for outputs:

* the consumer waited for data more than `GROW_ABOVE` of that time: more
  parallelism, while the process's resident memory is below
  `memory_limit_bytes`. If reads go through the read pool (they wait: a slow
  source) and took most of the workers' time (`READS_SHARE`), the read
  threads double (with `AutoReads`, up to `MAX_READ_THREADS`) and the records
  window grows to keep them busy; otherwise one more worker, up to the
  machine's CPU count. Growing is quick (a short run must not spend most of
  its life at one worker): one step per `INTERVAL`;
* the consumer hardly waited (`SHRINK_BELOW`) and the workers spent most of
  their time waiting for room (the consumer is the bottleneck) for
  `SHRINK_AFTER` seconds in a row: one worker fewer, down to one. Shrinking
  is slow, so that a count does not flap between two decisions (hysteresis);
* memory is above the bound: one worker fewer at once, and the read threads
  halve.

A retired worker ends after the work in its hands, so nothing is lost.
"""

from __future__ import annotations

import os
import resource
import time

from aioloader._executors.threads import WorkerThreads
from aioloader._observability.meter import Meters
from aioloader._program.read_pool import ReadPool
from aioloader._scheduling.scheduler import Scheduler

INTERVAL = 0.02  # seconds between two decisions
GROW_ABOVE = 0.1  # the consumer's wait share above which parallelism grows
SHRINK_BELOW = 0.02  # ... below which a worker may be retired
SHRINK_AFTER = 0.5  # seconds the consumer must be the bottleneck before a worker is retired
ROOM_SHARE = 0.5  # workers waiting for room this share of their time: too many of them
READS_SHARE = 0.5  # reads took this share of the workers' busy time: reads are what limits
MAX_READ_THREADS = 256
READ_AHEAD = 2  # records in the window per read thread, so that every thread has a read


def default_maximum() -> int:
    """The most workers "auto" starts: the CPUs this process may use."""
    counted = getattr(os, "process_cpu_count", os.cpu_count)()
    return max(1, counted or 1)


def default_memory_limit() -> int:
    """Half of the machine's memory, in bytes (1 GiB where it cannot be read)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):
        return 1 << 30


def resident_bytes() -> int:
    """This process's resident memory now (its peak where /proc is missing)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class AutoReads:
    """The read threads of "auto": `pool` resized, and the `scheduler`'s window widened to match."""

    def __init__(self, pool: ReadPool, scheduler: Scheduler) -> None:
        self._pool, self._scheduler = pool, scheduler
        self._least = pool.threads

    def waiting(self) -> bool:
        """True when reads go through the pool (they wait) and it may grow."""
        return self._pool.engaged and self._pool.threads < MAX_READ_THREADS

    def grow(self) -> None:
        threads = min(MAX_READ_THREADS, self._pool.threads * 2)
        self._scheduler.widen(threads * READ_AHEAD)
        self._pool.resize(threads)

    def shrink(self) -> None:
        if self._pool.threads > self._least:
            self._pool.resize(max(self._least, self._pool.threads // 2))


class AutoWorkers:
    """Grows and shrinks `workers` (and `reads`) from the consumer's waits; see the module
    docstring. Called by the consumer's thread only (`waited`), so it needs no lock."""

    def __init__(
        self,
        workers: WorkerThreads,
        meters: Meters,
        maximum: int,
        memory_limit: int,
        reads: AutoReads | None = None,
        read_keys: frozenset[object] = frozenset(),
    ) -> None:
        self._workers, self._meters, self._reads = workers, meters, reads
        self.maximum, self.memory_limit = maximum, memory_limit
        self._read_keys = read_keys  # the step keys of the `read` stage
        self._since = time.perf_counter()
        self._waited = self._quiet = 0.0
        self._room, self._busy, self._reading = self._worker_times()

    def waited(self, seconds: float) -> None:
        """The consumer waited `seconds` for its last outputs; decide once an interval has passed."""
        self._waited += seconds
        now = time.perf_counter()
        span = now - self._since
        if span < INTERVAL:
            return
        room, busy, reading = self._worker_times()
        room_share = (room - self._room) / (span * max(1, self._workers.count()))
        reads_share = (reading - self._reading) / max(busy - self._busy, 1e-9)
        share = self._waited / span
        self._since, self._waited = now, 0.0
        self._room, self._busy, self._reading = room, busy, reading
        self._decide(share, room_share, reads_share, span)

    def _decide(self, share: float, room_share: float, reads_share: float, span: float) -> None:
        if resident_bytes() > self.memory_limit:
            self._quiet = 0.0
            self._shrink()
        elif share > GROW_ABOVE:
            self._quiet = 0.0
            self._grow(reads_share)
        elif share < SHRINK_BELOW and room_share > ROOM_SHARE:
            self._quiet += span
            if self._quiet >= SHRINK_AFTER:
                self._quiet = 0.0
                self._retire()
        else:
            self._quiet = 0.0

    def _grow(self, reads_share: float) -> None:
        if self._reads is not None and reads_share > READS_SHARE and self._reads.waiting():
            self._reads.grow()
        elif self._workers.count() < self.maximum:
            self._workers.add()

    def _shrink(self) -> None:
        self._retire()
        if self._reads is not None:
            self._reads.shrink()

    def _retire(self) -> None:
        if self._workers.count() > 1:
            self._workers.retire()

    def _worker_times(self) -> tuple[float, float, float]:
        """The workers' seconds so far: waiting for room, busy in steps, busy reading."""
        room = busy = reading = 0.0
        for meter in self._meters.all():
            if meter.role == "worker":
                room += meter.waiting_for_room
            elif meter.role == "steps":
                for key, (_, seconds, _) in meter.copy_steps().items():
                    busy += seconds
                    reading += seconds if key in self._read_keys else 0.0
        return room, busy, reading
