"""What `worker_count="auto"` may use: the CPUs, the memory bound, and read threads that grow.

The choice of how many workers run (see `_executors/tuning`) stays within
`default_maximum()` workers and, as long as the process's resident memory
(`resident_bytes`) is above its bound (`memory_limit_bytes`, by default half
of the machine's memory), adds none. `AutoReads` doubles the read threads of
a slow source (reads that wait go through the read pool), up to
`MAX_READ_THREADS`, and widens the records window to keep them busy.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the loader asks for its defaults at import; these load with the workers
    from aioloader._program.read_pool import ReadPool
    from aioloader._scheduling.scheduler import Scheduler

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
        import resource  # only where /proc is missing (macOS)

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
