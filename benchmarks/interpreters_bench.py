"""Threads against subinterpreters on pure-Python CPU work: `python -m benchmarks.interpreters_bench`.

The workload is a small-int loop per record (`spin`, about 40 us), the
kind of pure-Python work (parsing, tokenising) that `executor="interpreter"`
is for. Each row is the median of `--repeats` passes over `--records`
records, as records per second and as a ratio to the plain loop:

* plain loop: `[spin(r) for r in records]` in the main thread;
* ideal: the same work split in whole halves over 2 threads, or over 2
  subinterpreters (one call each, no loader): what the interpreter allows;
* loader: `DataLoader(..., executor=E, worker_count=N)`, the whole pass,
  which includes starting the workers (and their subinterpreters), and the
  pass after its first output, which does not.

Run it on a GIL build (CPython 3.13) and on a free-threaded one (3.13t).
Before each pass it waits (up to `--patience` seconds) for the other
programs on the machine to leave the CPUs idle, and prints the most they
used just before a pass.
"""

from __future__ import annotations

import argparse
import itertools
import pickle
import statistics
import sys
import sysconfig
import threading
import time
from collections.abc import Callable
from pathlib import Path

from aioloader import DataLoader, RangeDataSource, SequentialSampler
from aioloader._executors.interpreter.subinterpreters import Subinterpreter, unavailable
from benchmarks.interpreters_workload import spin, spin_range


def plain(records: int) -> float:
    started = time.perf_counter()
    [spin(r) for r in range(records)]
    return time.perf_counter() - started


def ideal_threads(records: int, count: int) -> float:
    """`count` threads, each running its share of the records in one go."""
    halves = [range(k * records // count, (k + 1) * records // count) for k in range(count)]
    return run_all([threading.Thread(target=lambda h=h: [spin(r) for r in h]) for h in halves])


def run_all(threads: list[threading.Thread]) -> float:
    """Seconds from starting `threads` to the end of the last."""
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def ideal_interpreters(records: int, count: int) -> float:
    """`count` subinterpreters (started beforehand), each running its share in one call."""
    shares = [(k * records // count, (k + 1) * records // count) for k in range(count)]
    interpreters = [Subinterpreter() for _ in shares]
    try:
        for interpreter in interpreters:  # import this module there before the clock starts
            interpreter.call(spin_range, pickle.dumps((0, 0)))
        threads = [
            threading.Thread(target=interpreter.call, args=(spin_range, pickle.dumps(share)))
            for interpreter, share in zip(interpreters, shares, strict=True)
        ]
        return run_all(threads)
    finally:
        for interpreter in interpreters:
            interpreter.close()


def loader_pass(records: int, executor: str, workers: int) -> tuple[float, float]:
    """Seconds for a whole pass, and to the first output."""
    loader = DataLoader(
        data_source=RangeDataSource(0, records),
        sampler=SequentialSampler(records),
        operations=[spin],
        worker_count=workers,
        executor=executor,
    )
    started = time.perf_counter()
    first = 0.0
    for count, _ in enumerate(loader):
        if count == 0:
            first = time.perf_counter() - started
    return time.perf_counter() - started, first


class Quiet:
    """Waits for an idle machine before each pass (Linux `/proc/stat`; elsewhere it cannot tell)."""

    def __init__(self, patience: float, limit: float = 0.05) -> None:
        self.patience, self.limit, self.worst = patience, limit, 0.0

    def wait(self) -> None:
        deadline = time.monotonic() + self.patience
        busy = self.busy()
        while busy > self.limit and time.monotonic() < deadline:
            busy = self.busy()
        self.worst = max(self.worst, busy)

    @staticmethod
    def busy(seconds: float = 0.5) -> float:
        """The fraction of the machine's CPU time others used over `seconds` (this process sleeps)."""
        stat = Path("/proc/stat")
        if not stat.exists():
            return 0.0

        def sample() -> tuple[int, int]:
            values = [int(v) for v in stat.read_text().split("\n", 1)[0].split()[1:]]
            return sum(values), values[3] + values[4]  # all, idle + iowait

        total, idle = sample()
        time.sleep(seconds)
        total2, idle2 = sample()
        return 1 - (idle2 - idle) / max(1, total2 - total)


Row = tuple[str, float, float | None]  # name, seconds for a pass, seconds to its first output


def measure(name: str, run: Callable[[], float | tuple[float, float]], repeats: int, quiet: Quiet) -> Row:
    """Medians over `repeats` passes, each on a quiet machine (`run` gives a loader's
    seconds to the first output too)."""
    results = []
    for _ in range(repeats):
        quiet.wait()
        results.append(run())
    seconds = statistics.median(r[0] if isinstance(r, tuple) else r for r in results)
    starts = [r[1] for r in results if isinstance(r, tuple)]
    return name, seconds, statistics.median(starts) if starts else None


def print_row(row: Row, base: float, records: int) -> None:
    """Records/s and the ratio to the plain loop, for the whole pass and after the first output."""
    name, seconds, first = row
    steady = seconds if first is None else (seconds - first) * records / (records - 1)
    start = "" if first is None else f"{first * 1000:.0f} ms"
    rate, ratio = f"{records / seconds:9.0f}", f"{base / seconds:7.2f}"
    print(f"| {name:40} | {rate} | {ratio} | {start:>12} | {base / steady:16.2f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=40_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--patience", type=float, default=30, help="seconds to wait for a quiet machine")
    args = parser.parse_args()
    records, repeats, quiet = args.records, args.repeats, Quiet(args.patience)
    build = "free-threaded" if sysconfig.get_config_var("Py_GIL_DISABLED") else "GIL"
    version = sys.version.split()[0]
    print(f"CPython {version} ({build} build), {records} records, medians of {repeats} passes\n")
    runs: list[tuple[str, Callable[[], float | tuple[float, float]]]] = [
        ("plain loop", lambda: plain(records)),
        ("ideal: 2 threads, whole halves", lambda: ideal_threads(records, 2)),
    ]
    if unavailable() is None:
        runs.append(("ideal: 2 subinterpreters, whole halves", lambda: ideal_interpreters(records, 2)))
    executors = ["thread", "interpreter"] if unavailable() is None else ["thread"]
    for executor, workers in itertools.product(executors, (0, 1, 2)):
        if (executor, workers) != ("interpreter", 0):  # inline: the same as threads
            name = f"loader: {executor}, worker_count={workers}"
            runs.append((name, lambda e=executor, w=workers: loader_pass(records, e, w)))
    print(f"| {'':40} | records/s | x plain | first output | x plain after it |")
    print(f"| {'-' * 40} | --------: | ------: | -----------: | ---------------: |")
    base = 0.0
    for name, run in runs:
        row = measure(name, run, repeats, quiet)
        base = base or row[1]
        print_row(row, base, records)
    print(f"\nother programs used at most {quiet.worst:.0%} of the CPUs just before a pass")


if __name__ == "__main__":
    main()
