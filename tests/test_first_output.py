"""The first output is handed over before the workers start more chunks (`Scheduler`).

With a busy worker on every core, a consumer woken for its first output can
wait a whole scheduling period for a core; so once the first chunk is done
and a thread waits for it in `get`, no other chunk starts until it is taken.
`start_prefetch()` (no consumer waiting yet) still fills the window. The
scheduler is driven by hand: the test thread is the worker.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

import aioloader
from aioloader._program.program import Stage
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


def run(sched: Scheduler, work: Work) -> None:
    """Run `work`'s segment as a worker does (`advance` is left to the caller)."""
    work.run_segment(sched.program.for_worker().run_segment)


def first_chunk(sched: Scheduler) -> Work:
    """The first chunk's work as the workers take it: where it is cut in parts (a batch of
    several records), each part is run and handed back, and its join is returned, not run."""
    work = sched.next_work(wait=False)
    while work is not None and work.stage is Stage.PARTS:
        run(sched, work)
        sched.advance(work, worker=True)
        work = sched.next_work(wait=False)
    assert work is not None
    return work


def consumer_waiting(sched: Scheduler) -> tuple[threading.Thread, list[Any]]:
    """A thread in `sched.get()`, returned once it waits there; its answer goes to the list."""
    answers: list[Any] = []
    thread = threading.Thread(target=lambda: answers.append(sched.get()), daemon=True)
    thread.start()
    while True:  # a state to reach, not a time: the consumer is in its wait
        with sched._lock:
            if sched._consumer_waits:
                return thread, answers
        threading.Event().wait(0.001)


def test_a_waiting_consumer_takes_the_first_output_before_a_second_chunk_starts() -> None:
    for batch in (None, 4):
        sched = scheduler(batch)
        first = first_chunk(sched)
        assert first.stage is (Stage.RECORDS if batch is None else Stage.JOIN)
        assert sched.next_work(wait=False) is None  # the first chunk is being measured
        thread, answers = consumer_waiting(sched)
        run(sched, first)
        with sched._lock:  # as `advance` does, then as a worker asks: the consumer cannot run between
            sched._complete_locked(first)
            assert sched._new_work_locked() is None  # held for the consumer
        thread.join(timeout=60)
        outputs, weight = answers[0]
        assert np.asarray(outputs.items).tolist() == ([0] if batch is None else [[0, 1, 2, 3]])
        second = sched.next_work(wait=False)
        assert second is not None
        assert second.seq == 1
        sched.release(weight)
        sched.close()


def test_with_no_consumer_waiting_the_workers_go_on_after_the_first_chunk() -> None:
    # As after `start_prefetch()`: the window fills before the first `next()`.
    sched = scheduler(batch=4)
    first = first_chunk(sched)
    run(sched, first)
    sched.advance(first, worker=True)
    second = sched.next_work(wait=False)
    assert second is not None
    assert second.seq == 1
    sched.close()


def test_every_output_comes_in_order_with_two_workers() -> None:
    for batch in (None, 1, 7):
        loader = aioloader.DataLoader(
            data_source=aioloader.RangeDataSource(0, 100, 1),
            sampler=aioloader.SequentialSampler(100),
            operations=[] if batch is None else [aioloader.Batch(batch)],
            worker_count=2,
        )
        values = [int(v) for item in loader for v in ([item] if batch is None else item.tolist())]
        assert values == list(range(100))


class SlowToCopy(aioloader.MapTransform):
    """A transform whose copy on a worker's thread waits until the test lets it go: the first
    output must not wait for it (the consumer's thread makes it with the original). The
    consumer's thread copies it once, at once: the pattern that the workers copy (which
    nothing runs, see `Operations.claim`)."""

    def __init__(self, release: threading.Event, consumer: threading.Thread) -> None:
        self.release, self.consumer = release, consumer
        self.threads: list[str] = []
        self.copied_by: list[str] = []

    def __deepcopy__(self, memo: dict[int, Any]) -> SlowToCopy:
        self.copied_by.append(threading.current_thread().name)
        if threading.current_thread() is not self.consumer:
            self.release.wait()
        copy = SlowToCopy(self.release, self.consumer)
        copy.threads, copy.copied_by = self.threads, self.copied_by  # one list each, to see the threads
        return copy

    def map(self, x: int) -> int:
        self.threads.append(threading.current_thread().name)
        return x


def test_the_first_output_does_not_wait_for_the_workers_copies() -> None:
    release = threading.Event()
    transform = SlowToCopy(release, threading.current_thread())
    loader = aioloader.DataLoader(
        data_source=aioloader.RangeDataSource(0, 400, 1),
        sampler=aioloader.IndexSampler(400, num_epochs=1),
        operations=[transform, aioloader.Batch(4)],
        worker_count=2,
    )
    with iter(loader) as batches:
        first = next(batches)  # no worker can have started: their copies are waiting
        assert first.tolist() == [0, 1, 2, 3]
        assert set(transform.threads) == {threading.current_thread().name}
        assert transform.copied_by[0] == threading.current_thread().name  # the pattern
        release.set()
        assert sum(len(batch) for batch in batches) == 396
    # The pattern, then a copy of it for each worker that started (the consumer's thread
    # may have taken every chunk before the second one did).
    main = threading.current_thread().name
    assert 2 <= len(transform.copied_by) <= 3
    assert main not in transform.copied_by[1:]
