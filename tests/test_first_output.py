"""The first output is handed over before the workers start more chunks (`Scheduler`).

With a busy worker on every core, a consumer woken for its first output can
wait a whole scheduling period for a core; so once the first chunk is done
and the consumer waits for it, no other chunk starts until it is taken.
`start_prefetch()` (no consumer waiting yet) still fills the window. The
scheduler is driven by hand here, its consumer a coroutine: no timing.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aioloader
from aioloader._scheduling.scheduler import Scheduler
from aioloader._scheduling.work import Work


def scheduler(batch: int | None) -> Scheduler:
    operations: list[Any] = [] if batch is None else [aioloader.Batch(batch)]
    loader = aioloader.DataLoader(
        data_source=aioloader.RangeDataSource(0, 100, 1),
        sampler=aioloader.SequentialSampler(100),
        operations=operations,
        worker_count=2,
    )
    spec = loader._spec
    return Scheduler(spec.program(None), (0, 0, 0), spec.window, 2)


def finish(scheduler: Scheduler, work: Work) -> None:
    """Do `work` as a worker does, and hand it back."""
    work.run_segment(scheduler.program.for_worker().run_segment)
    scheduler.advance(work)


def test_a_waiting_consumer_takes_the_first_output_before_a_second_chunk_starts() -> None:
    sched = scheduler(batch=4)
    loop = asyncio.new_event_loop()
    try:
        first = sched.next_work(wait=False)
        assert first is not None
        assert sched.next_work(wait=False) is None  # the first chunk is being measured
        task = loop.create_task(sched.aget())
        loop.run_until_complete(asyncio.sleep(0))  # the consumer waits now
        finish(sched, first)
        assert sched.next_work(wait=False) is None  # held for the consumer
        outputs, weight = loop.run_until_complete(task)  # type: ignore[misc]
        assert [item.tolist() for item in outputs.items] == [[0, 1, 2, 3]]
        second = sched.next_work(wait=False)
        assert second is not None
        assert second.seq == 1
        sched.release(weight)
    finally:
        sched.close()
        loop.close()


def test_with_no_consumer_waiting_the_workers_go_on_after_the_first_chunk() -> None:
    # As after `start_prefetch()`: the window fills before the first `next()`.
    sched = scheduler(batch=4)
    first = sched.next_work(wait=False)
    assert first is not None
    finish(sched, first)
    second = sched.next_work(wait=False)
    assert second is not None
    assert second.seq == 1
    sched.close()


def test_a_sync_consumer_gets_every_output_in_order_with_two_workers() -> None:
    for batch in (None, 1, 7):
        loader = aioloader.DataLoader(
            data_source=aioloader.RangeDataSource(0, 100, 1),
            sampler=aioloader.SequentialSampler(100),
            operations=[] if batch is None else [aioloader.Batch(batch)],
            worker_count=2,
        )
        values = [int(v) for item in loader for v in ([item] if batch is None else item.tolist())]
        assert values == list(range(100))
