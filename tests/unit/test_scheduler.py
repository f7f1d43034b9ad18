"""`Scheduler` driven by hand in one thread: work out, results back in order, windows, the end.

The test plays the workers (`next_work(wait=False)`, running segments,
`advance`) and the consumer (`get`, `release`) in whatever order it likes,
so every interleaving below is exact, not a matter of timing.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from aioloader import Batch, FilterTransform, IndexSampler, MapTransform, RangeDataSource
from aioloader._common.positions import Position
from aioloader._operations.transforms import compile_operations
from aioloader._program.jobs import ChunkJob
from aioloader._program.program import Program, Stage
from aioloader._sampling.walk import Walk
from aioloader._scheduling.planner import WINDOW_BYTES
from aioloader._scheduling.scheduler import Scheduler
from aioloader._scheduling.work import Place, Work


class Odd(FilterTransform):
    def filter(self, element: int) -> bool:
        return element % 2 == 1


def scheduler_of(
    operations: list[Any], n: int = 20, capacity: int = 8, workers: int = 1, position: Position = (0, 0, 0)
) -> Scheduler:
    program = Program(
        RangeDataSource(0, n), Walk(IndexSampler(n, num_epochs=1)), compile_operations(operations), 4
    )
    return Scheduler(program, position, capacity, workers)


def take(scheduler: Scheduler) -> Work:
    work = scheduler.next_work(wait=False)
    assert work is not None, "no work ready"
    return work


def finish(scheduler: Scheduler, work: Work) -> None:
    """Run `work`'s synchronous segments as a worker would, and hand it back.

    Its cost is counted as nothing, so that chunk sizes are the cap: exact.
    """
    while work.place(scheduler.program) is Place.WORKER:
        work.run_segment(scheduler.program.run_segment)
    work.seconds = 0.0
    scheduler.advance(work, worker=True)


def outputs(scheduler: Scheduler) -> list[Any]:
    assert scheduler.has_answer()
    found = scheduler.get()
    assert found is not None
    items, weight = found[0].items, found[1]
    scheduler.release(weight)
    return items


def test_the_first_chunk_goes_out_alone() -> None:
    scheduler = scheduler_of([])
    first = take(scheduler)
    assert (first.stage, first.seq, first.payload) == (Stage.RECORDS, 0, ChunkJob(0, 1))
    assert scheduler.next_work(wait=False) is None  # the others wait for its cost
    assert not scheduler.has_answer()
    finish(scheduler, first)
    assert scheduler.next_work(wait=False) is not None


def test_results_finished_out_of_order_are_delivered_in_order() -> None:
    scheduler = scheduler_of([])
    finish(scheduler, take(scheduler))
    assert outputs(scheduler) == [0]
    second, third = take(scheduler), take(scheduler)  # chunks of 4 (8 // (1 + 1))
    assert (second.payload, third.payload) == (ChunkJob(1, 4), ChunkJob(5, 4))
    finish(scheduler, third)
    assert not scheduler.has_answer()  # the second is still out
    finish(scheduler, second)
    assert outputs(scheduler) == [1, 2, 3, 4]
    assert outputs(scheduler) == [5, 6, 7, 8]


def test_the_window_holds_work_back_until_the_consumer_releases() -> None:
    scheduler = scheduler_of([])
    finish(scheduler, take(scheduler))
    assert outputs(scheduler) == [0]
    out = [take(scheduler), take(scheduler)]  # 8 records: the window is full
    assert scheduler.next_work(wait=False) is None
    for work in out:
        finish(scheduler, work)
    assert scheduler.next_work(wait=False) is None  # done, but not delivered yet
    found = scheduler.get()
    assert found is not None
    assert found[1] == 4
    assert scheduler.next_work(wait=False) is None  # delivered, but its weight is not back
    scheduler.release(found[1])
    assert take(scheduler).payload == ChunkJob(9, 4)
    assert scheduler.records.window.statistics().peak == 8


class Mebibyte(MapTransform):
    def map(self, element: int) -> np.ndarray:
        return np.full(1 << 18, element, dtype=np.float32)  # 1 MiB a record


def test_large_records_fill_the_window_up_to_its_bytes_not_its_count() -> None:
    scheduler = scheduler_of([Mebibyte()], n=100, capacity=64, workers=1)
    finish(scheduler, take(scheduler))  # the first chunk: its outputs' size is known from it
    assert [x[0] for x in outputs(scheduler)] == [0]
    held = []
    while (work := scheduler.next_work(wait=False)) is not None:
        held.append(work)
    assert [work.weight for work in held] == [1] * (WINDOW_BYTES >> 20)  # 8 chunks of one record
    for work in held:
        finish(scheduler, work)
    assert scheduler.next_work(wait=False) is None  # the window's bytes are taken
    assert [x[0] for x in outputs(scheduler)] == [1]
    assert take(scheduler).weight == 1  # one delivered: one more may go
    assert scheduler.records.window.statistics().peak == WINDOW_BYTES >> 20


def test_a_chunk_a_worker_and_two_more_go_out_whatever_their_bytes() -> None:
    scheduler = scheduler_of([Mebibyte()], n=100, capacity=64, workers=12)
    finish(scheduler, take(scheduler))
    outputs(scheduler)
    held = []
    while (work := scheduler.next_work(wait=False)) is not None:
        held.append(work)
    assert len(held) == 12 + 2  # past 8 MiB: every worker has a chunk, with two to spare


def test_every_record_once_then_the_end() -> None:
    scheduler = scheduler_of([], n=11)
    delivered: list[Any] = []
    while (work := scheduler.next_work(wait=False)) is not None:
        finish(scheduler, work)
        delivered += outputs(scheduler)
    assert delivered == list(range(11))
    assert scheduler.has_answer()
    assert scheduler.get() is None


def test_the_tail_plan_cuts_batches_in_order_and_issues_them_first() -> None:
    scheduler = scheduler_of([Odd(), Batch(2)], n=12)
    finish(scheduler, take(scheduler))  # record 0: no element
    chunks = [take(scheduler), take(scheduler)]  # records 1-4 and 5-8
    finish(scheduler, chunks[1])
    assert scheduler.batches is not None
    assert not scheduler.batches.pending  # 5-8 wait for 1-4
    finish(scheduler, chunks[0])
    # Batch jobs come before the next chunk, one chunk's batches at a time.
    batch_jobs = [take(scheduler), take(scheduler)]
    assert [job.stage for job in batch_jobs] == [Stage.BATCHES, Stage.BATCHES]
    assert [job.payload.plan.groups for job in batch_jobs] == [[[1, 3]], [[5, 7]]]
    last_chunk = take(scheduler)
    assert last_chunk.payload == ChunkJob(9, 3)
    finish(scheduler, batch_jobs[1])
    assert not scheduler.has_answer()
    finish(scheduler, batch_jobs[0])
    assert [b.tolist() for b in outputs(scheduler)] == [[1, 3]]
    assert [b.tolist() for b in outputs(scheduler)] == [[5, 7]]
    finish(scheduler, last_chunk)
    rest: list[Any] = []
    while (work := scheduler.next_work(wait=False)) is not None:
        finish(scheduler, work)
        while scheduler.has_answer() and (found := scheduler.get()) is not None:
            rest += [b.tolist() for b in found[0].items]
            scheduler.release(found[1])
    assert rest == [[9, 11]]


def test_a_resumed_scheduler_starts_at_its_position() -> None:
    scheduler = scheduler_of([], position=(15, 0, 0))
    assert take(scheduler).payload == ChunkJob(15, 1)


def test_async_segments_go_to_the_async_runner_and_come_back() -> None:
    async def double(element: int) -> int:
        return element * 2

    scheduler = scheduler_of([double])
    submitted: list[Work] = []

    class Recorder:
        def submit(self, work: Work) -> None:
            submitted.append(work)

    assert scheduler.needs_async_runner
    scheduler.use_async_runner(Recorder())
    work = take(scheduler)
    work.run_segment(scheduler.program.run_segment)  # keys and read, on a worker
    scheduler.advance(work, worker=True)
    assert submitted == [work]  # the map is awaited on a loop
    asyncio.run(work.await_segment(scheduler.program))
    assert work.place(scheduler.program) is Place.WORKER  # then back to a worker for the outputs
    scheduler.advance(work, worker=True)
    finish(scheduler, take(scheduler))
    assert outputs(scheduler) == [0]


def test_a_broken_scheduler_raises_for_the_consumer() -> None:
    scheduler = scheduler_of([])
    take(scheduler)
    scheduler.fail(RuntimeError("a worker broke"))
    assert scheduler.next_work(wait=False) is None
    with pytest.raises(RuntimeError, match="a worker broke"):
        scheduler.get()


def test_close_drops_results_and_stops_work() -> None:
    scheduler = scheduler_of([])
    finish(scheduler, take(scheduler))
    late = take(scheduler)
    scheduler.close()
    scheduler.close()  # idempotent
    assert scheduler.next_work() is None  # would wait forever if it were not closed
    assert scheduler.get() is None  # the finished result was dropped
    finish(scheduler, late)  # a worker finishing after the close: kept nowhere
    assert scheduler.get() is None
