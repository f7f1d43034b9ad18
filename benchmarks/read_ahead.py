"""`worker_count=0` over a slow source: the share of a training loop's time spent in `next()`.

    python -m benchmarks.read_ahead [--records 3200] [--read-ms 2] [--step-ms 4] [--repeats 3]

A source whose reads block (`time.sleep`, like a network disk) feeds a loop
whose step takes `--step-ms` (a sleep: the step needs no core, so the figure
is the loader's overlap, not the machine's cores), batches of 32, shuffled,
`ReadOptions(num_threads=16, prefetch_buffer_size=500)`, Grain's defaults.
aioloader's `worker_count=0` reads such a source on its read threads and
reads the next chunk while the step runs; with `num_threads=0` it reads in
the caller's thread, one read after another (the figure before both);
Grain's `DataLoader` at `worker_count=0` (where it installs) reads ahead on
its read threads. Each loader runs `--repeats` times, in turns; the medians
of the total time and of the share spent waiting in `next()` are printed,
with the steps' own time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

BATCH = 32


class Blocking:
    """`records` records, each read waiting `seconds` (the key is the record)."""

    def __init__(self, records: int, seconds: float) -> None:
        self.records, self.seconds = records, seconds

    def __len__(self) -> int:
        return self.records

    def __getitem__(self, key: int) -> int:
        time.sleep(self.seconds)
        return key


def aioloader_loader(source: Blocking, threads: int) -> Iterable[Any]:
    import aioloader as al

    return al.DataLoader(
        data_source=source,
        sampler=al.IndexSampler(len(source), shuffle=True, seed=1, num_epochs=1),
        operations=[al.Batch(BATCH)],
        read_options=al.ReadOptions(num_threads=threads, prefetch_buffer_size=500),
    )


def grain_loader(source: Blocking) -> Iterable[Any]:
    import grain.python as gp

    sampler = gp.IndexSampler(len(source), shuffle=True, seed=1, num_epochs=1, shard_options=gp.NoSharding())
    return gp.DataLoader(
        data_source=source,
        sampler=sampler,
        operations=[gp.Batch(BATCH)],
        worker_count=0,
        read_options=gp.ReadOptions(num_threads=16, prefetch_buffer_size=500),
    )


def timed(loader: Iterable[Any], step_seconds: float, records: int) -> tuple[float, float]:
    """Seconds for the whole loop, and seconds spent in `next()`."""
    started = time.perf_counter()
    waited, count = 0.0, 0
    iterator = iter(loader)
    while True:
        asked = time.perf_counter()
        try:
            batch = next(iterator)
        except StopIteration:
            break
        waited += time.perf_counter() - asked
        count += len(batch)
        time.sleep(step_seconds)  # the training step
    assert count == records, f"{count} records delivered, {records} asked for"
    return time.perf_counter() - started, waited


def main(argv: Iterable[str] | None = None) -> int:
    description = __doc__.split("\n")[0]
    parser = argparse.ArgumentParser(prog="python -m benchmarks.read_ahead", description=description)
    parser.add_argument("--records", type=int, default=3200)
    parser.add_argument("--read-ms", type=float, default=2.0)
    parser.add_argument("--step-ms", type=float, default=4.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(None if argv is None else list(argv))
    source = Blocking(args.records, args.read_ms / 1e3)
    loaders: dict[str, Callable[[], Iterable[Any]]] = {
        "aioloader, worker_count=0": lambda: aioloader_loader(source, 16),
        "aioloader, worker_count=0, num_threads=0": lambda: aioloader_loader(source, 0),
    }
    try:
        import grain.python  # noqa: F401
    except ImportError:
        pass
    else:
        loaders["grain, worker_count=0"] = lambda: grain_loader(source)
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in loaders}
    for _ in range(args.repeats):
        for name, make in loaders.items():
            runs[name].append(timed(make(), args.step_ms / 1e3, args.records))
    steps = -(-args.records // BATCH) * args.step_ms / 1e3
    version = sys.version.split()[0]
    print(f"{version}: {args.records} records of {args.read_ms} ms reads, a {args.step_ms} ms step")
    print(f"  the steps alone: {steps:.2f} s")
    for name, figures in runs.items():
        total = statistics.median(t for t, _ in figures)
        share = statistics.median(w / t for t, w in figures)
        print(f"  {name:42s} {total:6.2f} s, {share:4.0%} waiting for data (median of {args.repeats})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
