"""Grain's `DataLoader` (worker processes), at the settings Grain documents for each case.

`grain` runs Grain's defaults, `ReadOptions(num_threads=16, prefetch_buffer_size=500)`:
16 threads read and transform records in each process. `grain-t0` sets
`num_threads=0`, which Grain advises for data already in memory (the threads
only add hand-offs there). `worker_count=0` runs in the caller's process.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grain.python as gp
from absl import flags

from benchmarks.loaders import PREFETCH
from benchmarks.workloads import Workload

# Grain reads absl flags; outside an absl app nobody parses them.
if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()


class Apply(gp.MapTransform):  # type: ignore[misc]
    """The workload's transform as a Grain map (Grain takes only its own transform classes)."""

    def __init__(self, transform: Any) -> None:
        self.transform = transform

    def map(self, element: Any) -> Any:
        return self.transform(element)


def _batches(
    workload: Workload, source: Any, transform: Any, workers: int, n: int, threads: int
) -> Iterator[Any]:
    loader = gp.DataLoader(
        data_source=source,
        sampler=gp.IndexSampler(n, shard_options=gp.NoSharding(), shuffle=True, num_epochs=1, seed=0),
        operations=[Apply(transform), gp.Batch(workload.batch_size, batch_fn=workload.collate)],
        worker_count=workers,
        read_options=gp.ReadOptions(num_threads=threads, prefetch_buffer_size=PREFETCH),
    )
    iterator = iter(loader)
    try:
        yield from iterator
    finally:
        del iterator  # stops and joins the worker processes


def batches(workload: Workload, source: Any, transform: Any, workers: int, n: int) -> Iterator[Any]:
    return _batches(workload, source, transform, workers, n, 16)


def batches_no_threads(
    workload: Workload, source: Any, transform: Any, workers: int, n: int
) -> Iterator[Any]:
    return _batches(workload, source, transform, workers, n, 0)


def settings(workload: Workload, workers: int) -> str:
    return f"worker_count={workers} processes, ReadOptions(num_threads=16, prefetch_buffer_size={PREFETCH})"


def settings_no_threads(workload: Workload, workers: int) -> str:
    return f"worker_count={workers} processes, ReadOptions(num_threads=0, prefetch_buffer_size={PREFETCH})"
