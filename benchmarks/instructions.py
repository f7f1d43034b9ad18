"""Instructions per record, counted by valgrind's callgrind: a cost figure that a busy machine leaves alone.

    python -m benchmarks.instructions --workload trivial --loaders plain,pool,aioloader --workers 0,2

Each (loader, workers) runs `benchmarks.child` twice under callgrind, at two
record counts; the difference in instructions over the difference in records
is the cost of one more record, start-up and import left out. Valgrind runs
one thread at a time, so the figure is the work every thread did, without
what contention adds on real cores (cache-line transfers of shared reference
counts and locks): wall-clock ratios on a quiet machine show that part.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def instructions(python: str, loader: str, workload: str, workers: int, records: int) -> int:
    """Instructions of one child run under callgrind (all threads; not its worker processes)."""
    command = [
        "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
        python, "-m", "benchmarks.child", "--loader", loader, "--workload", workload,
        "--workers", str(workers), "--records", str(records),
    ]  # fmt: skip
    # A PYTHONPATH given comes first (another checkout's aioloader, to compare); the run
    # starts in an empty folder, since `-m` puts the working folder before it.
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(REPO)) if p)
    with tempfile.TemporaryDirectory() as empty:
        done = subprocess.run(
            command, cwd=empty, env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True
        )
    found = COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def per_record(python: str, loader: str, workload: str, workers: int, counts: tuple[int, int]) -> float:
    low, high = (instructions(python, loader, workload, workers, n) for n in counts)
    return (high - low) / (counts[1] - counts[0])


def main(argv: list[str] | None = None) -> int:
    description = __doc__.split("\n")[0]
    parser = argparse.ArgumentParser(prog="python -m benchmarks.instructions", description=description)
    parser.add_argument("--workload", default="trivial")
    parser.add_argument("--loaders", default="plain,pool,aioloader")
    parser.add_argument("--workers", default="0,2")
    parser.add_argument("--records", default="4096,12288", help="the two record counts")
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed")
    low, high = (int(x) for x in args.records.split(","))
    print(f"{args.workload}, {sys.version.split()[0]} ({args.python}): instructions per record")
    for loader in args.loaders.split(","):
        for workers in [int(w) for w in args.workers.split(",")]:
            if (loader == "plain" and workers) or (loader == "pool" and not workers):
                continue  # the plain loop has no workers; the pool needs some
            cost = per_record(args.python, loader, args.workload, workers, (low, high))
            print(f"{loader:>12} w={workers}: {cost:10,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
