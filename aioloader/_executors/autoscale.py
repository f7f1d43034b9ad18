"""`worker_count="auto"`: as many worker threads as keep the consumer fed, within a memory bound.

The output does not depend on the worker count (each chunk's result is a
pure function of its indices, reassembled in order), so workers can come and
go while the loader runs without changing a single batch. `AutoWorkers`
starts with one worker and looks again every `INTERVAL` seconds, from the
consumer's thread as it asks for outputs:

* the consumer waited for data more than `GROW_ABOVE` of that time: one more
  worker, up to the machine's CPU count, while the process's resident memory
  is below `memory_limit_bytes`;
* the consumer hardly waited (`SHRINK_BELOW`) and the workers spent most of
  their time waiting for room (the consumer is the bottleneck), or memory is
  above the bound: one worker fewer, down to one.

A retired worker ends after the work in its hands, so nothing is lost.
"""

from __future__ import annotations

import os
import resource
import time

from aioloader._executors.threads import WorkerThreads
from aioloader._observability.meter import Meters

INTERVAL = 0.2  # seconds between two decisions
GROW_ABOVE = 0.1  # the consumer's wait share above which a worker is added
SHRINK_BELOW = 0.02  # ... below which one may be retired
ROOM_SHARE = 0.5  # workers waiting for room this share of their time: too many of them


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


class AutoWorkers:
    """Grows and shrinks `workers` from the consumer's waits; see the module docstring.

    Called by the consumer's thread only (`waited`), so it needs no lock.
    """

    def __init__(self, workers: WorkerThreads, meters: Meters, maximum: int, memory_limit: int) -> None:
        self._workers, self._meters = workers, meters
        self.maximum, self.memory_limit = maximum, memory_limit
        self._since = time.perf_counter()
        self._waited = 0.0
        self._room = self._worker_room()

    def waited(self, seconds: float) -> None:
        """The consumer waited `seconds` for its last outputs; decide once an interval has passed."""
        self._waited += seconds
        now = time.perf_counter()
        if now - self._since < INTERVAL:
            return
        share, span = self._waited / (now - self._since), now - self._since
        room = self._worker_room()
        room_share = (room - self._room) / (span * max(1, self._workers.count()))
        self._since, self._waited, self._room = now, 0.0, room
        self._decide(share, room_share)

    def _decide(self, share: float, room_share: float) -> None:
        count = self._workers.count()
        over = resident_bytes() > self.memory_limit
        if share > GROW_ABOVE and count < self.maximum and not over:
            self._workers.add()
        elif count > 1 and (over or (share < SHRINK_BELOW and room_share > ROOM_SHARE)):
            self._workers.retire()

    def _worker_room(self) -> float:
        return sum(meter.waiting_for_room for meter in self._meters.all() if meter.role == "worker")
