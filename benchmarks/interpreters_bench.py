"""Threads against subinterpreters on pure-Python CPU work: `python -m benchmarks.interpreters_bench`.

The workload is a small-int loop per record (`spin`, about 60 us), the
kind of pure-Python work (parsing, tokenising) that `executor="interpreter"`
is for. Each row is the median of `--repeats` passes over `--records`
records, as records per second and as a ratio to the plain loop:

* plain loop: `[spin(r) for r in records]` in the main thread;
* ideal: the same work split in whole halves over 2 threads, or over 2
  subinterpreters (one call each, no loader): what the interpreter allows;
* loader: `DataLoader(..., executor=E, worker_count=N)`, the full pass
  including the start of its workers (and their subinterpreters), and
  `start` the seconds to the first output.

Run it on a GIL build (CPython 3.13) and on a free-threaded one (3.13t).
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import sys
import sysconfig
import threading
import time
from collections.abc import Callable

from aioloader import DataLoader, RangeDataSource, SequentialSampler
from aioloader._subinterpreters import Subinterpreter, unavailable
from benchmarks.interpreters_workload import spin, spin_range


def plain(records: int) -> float:
    started = time.perf_counter()
    [spin(r) for r in range(records)]
    return time.perf_counter() - started


def ideal_threads(records: int, count: int) -> float:
    """`count` threads, each running its share of the records in one go."""
    halves = [range(k * records // count, (k + 1) * records // count) for k in range(count)]
    threads = [threading.Thread(target=lambda h=h: [spin(r) for r in h]) for h in halves]
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
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return time.perf_counter() - started
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


def median(run: Callable[[], float], repeats: int) -> float:
    return statistics.median(run() for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=8_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    records, repeats = args.records, args.repeats
    free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    build = "free-threaded" if free_threaded else "GIL"
    print(f"CPython {sys.version.split()[0]} ({build} build), {records} records, median of {repeats}")
    base = median(lambda: plain(records), repeats)
    rows: list[tuple[str, float, str]] = [("plain loop", base, "")]
    rows.append(("ideal: 2 threads, whole halves", median(lambda: ideal_threads(records, 2), repeats), ""))
    if unavailable() is None:
        ideal = median(lambda: ideal_interpreters(records, 2), repeats)
        rows.append(("ideal: 2 subinterpreters, whole halves", ideal, ""))
    executors = ["thread"] + (["interpreter"] if unavailable() is None else [])
    for executor in executors:
        for workers in (0, 1, 2) if executor == "thread" else (1, 2):
            passes = [loader_pass(records, executor, workers) for _ in range(repeats)]
            seconds = statistics.median(p[0] for p in passes)
            start = statistics.median(p[1] for p in passes)
            rows.append((f"loader: {executor}, worker_count={workers}", seconds, f"{start * 1000:.0f} ms"))
    print(f"{'':42} {'records/s':>10} {'x plain':>8} {'start':>8}")
    for name, seconds, start in rows:
        print(f"{name:42} {records / seconds:10.0f} {base / seconds:8.2f} {start:>8}")


if __name__ == "__main__":
    main()
