"""What counting for `statistics()` costs: the overhead workload with step timing on and off.

    python -m benchmarks.statistics_cost [--workload trivial] [--workers 0,2] [--repeats 7]

Runs `benchmarks.child` (aioloader, one fresh process a run) with
`AIOLOADER_STATISTICS=1` and `=0` in turn, on the interpreter running this
module (run it with each build's Python; `PYTHON_GIL=0` passes through), and
prints the medians of the records per second and of the CPU time per
record, with the cost of counting: how much slower (rate) and how much more
CPU a record (CPU) it is with the counters on. Issue 14 asks for under 3% on
the overhead workload, whose records cost least, so that counting is the
largest share of their cost.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run(workload: str, workers: int, counting: bool) -> tuple[float, float]:
    """One fresh process: (records per second after the first batch, CPU seconds per record)."""
    env = {**os.environ, "AIOLOADER_STATISTICS": "1" if counting else "0"}
    command = [sys.executable, "-m", "benchmarks.child", "--loader", "aioloader"]
    command += ["--workload", workload, "--workers", str(workers)]
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result["steady_rate"], result["cpu_s"] / result["records"]


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.statistics_cost", description=__doc__)
    parser.add_argument("--workload", default="trivial")
    parser.add_argument("--workers", default="0,2", help="comma-separated worker counts")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(None if argv is None else list(argv))
    print(f"{sys.version.split()[0]} ({sys.executable}), {args.workload}, {args.repeats} repeats, medians")
    print("workers | rec/s on | rec/s off | slower | CPU ns/rec on | off | more CPU")
    for workers in (int(w) for w in args.workers.split(",")):
        on: list[tuple[float, float]] = []
        off: list[tuple[float, float]] = []
        for _ in range(args.repeats):  # interleaved: the machine's drift reaches both alike
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
