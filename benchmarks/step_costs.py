"""CPU time per record of each pipeline step and each scheduler method, for one loader run.

    python -m benchmarks.step_costs --workload trivial --workers 2 --records 300000

Every `Program` step and every public `Scheduler` method is wrapped with a
counter of `time.thread_time_ns` (the CPU time of the thread that ran it:
preemption by other programs does not inflate it, so the shares hold on a
busy machine). Records go through aioloader as the suite runs it
(`first_batch.aioloader_loader`). Prints ns per record, calls, us per call.
"""

from __future__ import annotations

import argparse
import collections
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from aioloader._program import program
from aioloader._scheduling import scheduler
from benchmarks.first_batch import aioloader_loader
from benchmarks.workloads import WORKLOADS

SCHEDULER_METHODS = ("next_work", "advance", "get", "release")


class Costs:
    """CPU nanoseconds and calls per name, from any thread."""

    def __init__(self) -> None:
        self.nanoseconds: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def wrap(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time_ns()
            try:
                return function(*args, **kwargs)
            finally:
                spent = time.thread_time_ns() - started
                with self._lock:
                    self.nanoseconds[name] += spent
                    self.calls[name] += 1

        return counted


def instrument(costs: Costs) -> None:
    for step, function in list(program._SYNC_STEPS.items()):
        program._SYNC_STEPS[step] = costs.wrap(f"step {step.name}", function)
    for name in SCHEDULER_METHODS:
        method = getattr(scheduler.Scheduler, name)
        setattr(scheduler.Scheduler, name, costs.wrap(f"Scheduler.{name}", method))


def main(argv: list[str] | None = None) -> int:
    description = __doc__.split("\n")[0]
    parser = argparse.ArgumentParser(prog="python -m benchmarks.step_costs", description=description)
    parser.add_argument("--workload", default="trivial", choices=sorted(WORKLOADS))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--records", type=int, default=300_000)
    args = parser.parse_args(argv)
    workload, n = WORKLOADS[args.workload], args.records
    source, transform = workload.make_source(n), workload.make_transform()
    costs = Costs()
    instrument(costs)
    started = time.process_time()
    with iter(aioloader_loader(workload, source, transform, args.workers, n)) as batches:
        delivered = sum(len(batch) for batch in batches)
    assert delivered == n, (delivered, n)
    process = (time.process_time() - started) * 1e9 / n
    print(f"{workload.name}, worker_count={args.workers}, {n} records: the process {process:,.0f} ns/record")
    for name, spent in costs.nanoseconds.most_common():
        calls = costs.calls[name]
        print(f"  {name:22} {spent / n:8,.0f} ns/record {calls:8d} calls {spent / calls / 1e3:9.1f} us/call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
