"""The peak memory of a process tree, sampled from outside it.

Memory is the tree's proportional set size (PSS, from
`/proc/PID/smaps_rollup`): summed over processes it counts a page shared by
forked workers once, where summed RSS would count it in every worker. The
sampler runs in the runner's process, so the measured process carries no
sampling thread; descendants are found through `/proc/PID/task/*/children`,
which costs far less than scanning every process.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from pathlib import Path

INTERVAL = 0.025


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            text = Path(f"/proc/{pid}/task/{task}/children").read_text()
            found += [int(child) for child in text.split()]
    except OSError:
        pass
    return found


def tree(pid: int) -> list[int]:
    """`pid` and all its descendants alive now."""
    pids, pending = [], [pid]
    while pending:
        current = pending.pop()
        pids.append(current)
        pending += _children(current)
    return pids


def memory_kib(pid: int) -> int:
    """PSS of one process in KiB (RSS where smaps_rollup is missing); 0 once it has gone."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except FileNotFoundError:
        try:
            return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGESIZE") // 1024
        except OSError:
            return 0
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


class TreeMemory:
    """Samples the memory of the tree under `pid` every `INTERVAL` seconds until `stop()`."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_kib = 0
        self.most_processes = 0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tree-memory", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            self.sample()
            self._stopped.wait(INTERVAL)

    def sample(self) -> None:
        pids = tree(self.pid)
        self.most_processes = max(self.most_processes, len(pids))
        self.peak_kib = max(self.peak_kib, sum(memory_kib(p) for p in pids))

    def stop(self) -> float:
        """Stop sampling; return the peak in MiB."""
        self._stopped.set()
        self._thread.join()
        return self.peak_kib / 1024


def busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy since boot (every process, every core)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    ticks = [int(f) for f in fields]
    idle = ticks[3] + ticks[4]  # idle, iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class ForeignLoad:
    """How many cores processes outside the measured tree kept busy, from `start()` to `stop()`.

    Other programs on the machine take cores from the loaders: a run whose
    foreign load is well above zero measured the machine, not the loader.
    """

    def __init__(self) -> None:
        self._wall = time.monotonic()
        self._busy = busy_seconds()
        self._ours = self._own_cpu()

    @staticmethod
    def _own_cpu() -> float:
        total = 0.0
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
            usage = resource.getrusage(who)
            total += usage.ru_utime + usage.ru_stime
        return total

    def stop(self) -> float:
        """Cores busy outside this process and its reaped children, on average (call after the wait)."""
        wall = time.monotonic() - self._wall
        foreign = (busy_seconds() - self._busy) - (self._own_cpu() - self._ours)
        return max(0.0, foreign / wall) if wall > 0 else 0.0


def wait_until_quiet(threshold: float, patience: float, probe: float = 0.1) -> float:
    """Wait (up to `patience` seconds) until other processes keep fewer than `threshold` cores busy.

    Returns the foreign load of the last probe.
    """
    deadline = time.monotonic() + patience
    while True:
        load = ForeignLoad()
        time.sleep(probe)
        foreign = load.stop()
        if foreign < threshold or time.monotonic() >= deadline:
            return foreign
