"""What counting for `statistics()` costs: the overhead workload with step timing on and off.

    python -m benchmarks.statistics_cost [--workload trivial] [--workers 0,2] [--repeats 9]

Runs aioloader over the workload in this process (run it with each build's
Python; `PYTHON_GIL=0` for the free-threaded one), alternating runs with the
counters on and off (`meter.ENABLED`, which `AIOLOADER_STATISTICS=0` sets at
import; each run's pipeline is made afresh and reads it), so that the
machine's drift reaches both alike; prints the medians of the records per
second and of the process's CPU time per record, and the cost of counting.
Issue 14 asks for under 3% on the overhead workload, whose records cost
least, so that counting is the largest share of their cost.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterable

from aioloader._observability import meter
from benchmarks.first_batch import aioloader_loader
from benchmarks.workloads import WORKLOADS


def run(workload: str, workers: int, counting: bool) -> tuple[float, float]:
    """One run: (records per second, CPU seconds per record)."""
    meter.ENABLED = counting
    chosen = WORKLOADS[workload]
    n = chosen.records
    loader = aioloader_loader(chosen, chosen.make_source(n), chosen.make_transform(), workers, n)
    wall, cpu = time.perf_counter(), time.process_time()
    records = sum(len(batch) for batch in loader)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert records == n, (records, n)
    return records / wall, cpu / records


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.statistics_cost", description=__doc__)
    parser.add_argument("--workload", default="trivial")
    parser.add_argument("--workers", default="0,2", help="comma-separated worker counts")
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args(None if argv is None else list(argv))
    print(f"{sys.version.split()[0]} ({sys.executable}), {args.workload}, {args.repeats} repeats, medians")
    print("workers | rec/s on | rec/s off | slower | CPU ns/rec on | off | more CPU")
    for workers in (int(w) for w in args.workers.split(",")):
        run(args.workload, workers, True)  # warm: caches, the allocator's arenas
        on: list[tuple[float, float]] = []
        off: list[tuple[float, float]] = []
        for _ in range(args.repeats):
            on.append(run(args.workload, workers, True))
            off.append(run(args.workload, workers, False))
        rate_on, rate_off = (statistics.median(r for r, _ in runs) for runs in (on, off))
        cpu_on, cpu_off = (statistics.median(c for _, c in runs) * 1e9 for runs in (on, off))
        print(
            f"{workers} | {rate_on:,.0f} | {rate_off:,.0f} | {1 - rate_on / rate_off:+.1%}"
            f" | {cpu_on:.0f} | {cpu_off:.0f} | {cpu_on / cpu_off - 1:+.1%}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
