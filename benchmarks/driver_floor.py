"""What the inline driver costs: aioloader at `worker_count=0` against the same work without it.

    python -m benchmarks.driver_floor [--records 1000000] [--repeats 5]

Three loops over the same trivial records (`int + 1`, the overhead workload),
in turns in one process (medians):

* the plain loop of the suite (`loaders.plain_batches`);
* "floor": aioloader's own parts with no driver around them: the sampler's
  keys for chunks of the size the driver cuts for these records (as many
  whole batches as `prefetch_buffer_size` holds; `IndexSampler.record_keys`),
  the compiled loop of the read and the map (`compile_loop`, untimed), and
  the workload's `collate` for each batch; no state, no statistics, no
  error handling, no close;
* aioloader, `worker_count=0`, as the suite runs it.

aioloader minus the floor is what the driver and the iterator cost (the
chunk planner, the steps and their counters, the batch plan, the outputs
and their positions, `next()`): shown per chunk, since each costs about the
same whatever the chunk holds.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import aioloader as al
from aioloader._common.calls import Shutdown
from aioloader._operations.fused import MAX_BLOCK, compile_loop
from aioloader._operations.transforms import Kind
from benchmarks.loaders import aioloader_batches, plain_batches
from benchmarks.workloads import PREFETCH, WORKLOADS, Workload

Batches = Callable[[Workload, Any, Any, int, int], Iterator[Any]]


def chunk_records(workload: Workload) -> int:
    """The records of the driver's chunks for trivial records: whole batches within the window
    (records of more work make smaller chunks: see `_scheduling/planner`)."""
    return PREFETCH // workload.batch_size * workload.batch_size


def floor_batches(workload: Workload, source: Any, transform: Any, workers: int, n: int) -> Iterator[Any]:
    sampler = al.IndexSampler(n, shuffle=True, seed=0, num_epochs=1)
    loop = compile_loop((Kind.MAP,), True, False)
    shutdown, get, size = Shutdown(), source.__getitem__, workload.batch_size
    step = chunk_records(workload)
    for start in range(0, n, step):
        out: list[Any] = []
        keys = sampler.record_keys(start, min(n, start + step))
        loop(out, keys, get, (transform,), (None,), shutdown, 0, MAX_BLOCK)
        yield from [workload.collate(out[b : b + size]) for b in range(0, len(out), size)]


def seconds(batches: Batches, workload: Workload, n: int) -> float:
    source, transform = workload.make_source(n), workload.make_transform()
    started = time.perf_counter()
    for _ in batches(workload, source, transform, 0, n):
        pass
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    description = __doc__.split("\n")[0]
    parser = argparse.ArgumentParser(prog="python -m benchmarks.driver_floor", description=description)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    workload, n = WORKLOADS["trivial"], args.records
    loops: dict[str, Batches] = {"plain": plain_batches, "floor": floor_batches}
    loops["aioloader"] = aioloader_batches
    for batches in loops.values():  # warm up: imports, compiled loops, caches
        seconds(batches, workload, min(n, 50_000))
    times: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(args.repeats):
        for name, batches in loops.items():
            times[name].append(seconds(batches, workload, n))
    median = {name: statistics.median(spent) for name, spent in times.items()}
    for name, spent in median.items():
        ratio = median["plain"] / spent
        print(f"{name:10s} {spent / n * 1e9:7.0f} ns a record  {ratio:5.2f}x the plain loop")
    chunks = -(-n // chunk_records(workload))
    print(f"driver and iterator: {(median['aioloader'] - median['floor']) / chunks * 1e6:.0f} us a chunk")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
