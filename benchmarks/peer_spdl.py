"""SPDL's pipeline (asyncio in a background thread, stages on a thread pool) at its best settings.

Per-record stages cost SPDL a task each, so the sync workloads run whole
batches as one stage (`pipe(batch, concurrency=N)`, in order) on `N`
threads, each thread with its own copy of the transform, as in the ideal
thread pool. An async source is read the way SPDL is built for: one
coroutine per record, 16 in flight, then `aggregate` and the transform on
the threads.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from spdl.pipeline import PipelineBuilder

from benchmarks.loaders import IN_FLIGHT, BatchWork, key_batches, pool_ahead, shuffled_keys
from benchmarks.workloads import Workload


def batches(workload: Workload, source: Any, transform: Any, workers: int, n: int) -> Iterator[Any]:
    work = BatchWork(workload, source, transform, workers)
    builder: PipelineBuilder[Any, Any]
    if workload.is_async:
        builder = (
            PipelineBuilder[Any, Any]()
            .add_source(shuffled_keys(n).tolist())
            .pipe(source.aget, concurrency=IN_FLIGHT, output_order="input")
            .aggregate(workload.batch_size)
            .pipe(work.transform_batch, concurrency=workers, output_order="input")
        )
    else:
        builder = (
            PipelineBuilder[Any, Any]()
            .add_source(key_batches(n, workload.batch_size))
            .pipe(work, concurrency=workers, output_order="input")
        )
    pipeline: Any = builder.add_sink(pool_ahead(workload, workers)).build(num_threads=workers)
    with pipeline.auto_stop():
        yield from pipeline.get_iterator(timeout=600)


def settings(workload: Workload, workers: int) -> str:
    if workload.is_async:
        return (
            f"num_threads={workers}; pipe(aget, concurrency={IN_FLIGHT}), aggregate, "
            f"pipe(batch, concurrency={workers}), in order"
        )
    return f"num_threads={workers}, pipe(whole batch, concurrency={workers}), in order, per-thread copies"
