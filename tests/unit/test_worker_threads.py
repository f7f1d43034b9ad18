"""`WorkerThreads` with real threads over a real `Scheduler`: workers added later, retired, joined.

A runner that takes a while to make stands for a subinterpreter's start:
`join` must wait for it past its timeout (each worker has its own `started`
event, a worker added by `worker_count="auto"` too), and a worker started
after `close()` makes nothing.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from aioloader import IndexSampler, RangeDataSource
from aioloader._executors.threads import WorkerThreads, thread_runner
from aioloader._operations.transforms import compile_operations
from aioloader._program.program import Program
from aioloader._sampling.walk import Walk
from aioloader._scheduling.scheduler import Scheduler
from aioloader._scheduling.work import SegmentRunner
from tests.support.thread_starts import note_thread_starts


def scheduler_of(n: int = 100) -> Scheduler:
    program = Program(RangeDataSource(0, n), Walk(IndexSampler(n, num_epochs=1)), compile_operations([]), 0)
    return Scheduler(program, (0, 0, 0), 16, 4)


class SlowStart:
    """Runner factory whose runners are made only once `go` is set; counts what it made."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._make = thread_runner(scheduler.program)
        self.making = threading.Event()
        self.go = threading.Event()
        self.made = 0
        self.released = 0

    @contextlib.contextmanager
    def __call__(self) -> Iterator[SegmentRunner]:
        self.making.set()
        self.go.wait(30)
        self.made += 1
        with self._make() as run:
            yield run
        self.released += 1


def drain(scheduler: Scheduler) -> list[Any]:
    items: list[Any] = []
    while (found := scheduler.get()) is not None:
        outputs, weight = found
        items += outputs.items
        scheduler.release(weight)
    return items


def test_a_worker_added_later_works_and_all_outputs_come_once() -> None:
    scheduler = scheduler_of()
    workers = WorkerThreads(scheduler, thread_runner(scheduler.program), 1, "test-worker")
    workers.add()
    workers.add()
    assert drain(scheduler) == list(range(100))
    scheduler.close()
    assert workers.join()
    assert workers.count() == 0


def test_join_waits_for_a_worker_added_later_that_is_still_making_its_runner() -> None:
    scheduler = scheduler_of()
    slow = SlowStart(scheduler)
    workers = WorkerThreads(scheduler, slow, 0, "test-worker")
    workers.add()  # as `worker_count="auto"` adds one: with an event of its own
    assert slow.making.wait(30)
    scheduler.close()
    threading.Timer(0.3, slow.go.set).start()  # past join's timeout below
    assert workers.join(timeout=0.05)  # waited for the starting worker, which let its runner go
    assert (slow.made, slow.released) == (1, 1)


def test_a_worker_added_after_close_makes_nothing() -> None:
    scheduler = scheduler_of()
    slow = SlowStart(scheduler)
    slow.go.set()
    workers = WorkerThreads(scheduler, slow, 0, "test-worker")
    scheduler.close()
    workers.add()
    assert workers.join()
    assert slow.made == 0


def test_a_retired_worker_ends_after_its_work_and_the_others_finish() -> None:
    scheduler = scheduler_of(1000)
    workers = WorkerThreads(scheduler, thread_runner(scheduler.program), 3, "test-worker")
    workers.retire()
    assert workers.count() <= 2
    assert drain(scheduler) == list(range(1000))
    scheduler.close()
    assert workers.join()


def test_a_worker_ending_on_its_retirement_is_not_counted_twice(monkeypatch: Any) -> None:
    """Between taking its retirement and ending, a worker is alive: counted as working then,
    the tuner retired the last worker (2 -> 1 -> 0, the consumer's thread, -> 1 took one more
    away) and the loader waited for good for a worker that no longer was."""
    taken, leave = threading.Event(), threading.Event()
    retired = WorkerThreads._retired

    def retired_slowly(self: WorkerThreads) -> bool:
        if not retired(self):
            return False
        taken.set()
        leave.wait(30)  # alive, retirement taken
        return True

    monkeypatch.setattr(WorkerThreads, "_retired", retired_slowly)
    scheduler = scheduler_of(1000)
    workers = WorkerThreads(scheduler, thread_runner(scheduler.program), 2, "test-worker")
    workers.retire()
    assert workers.count() == 1
    items: list[Any] = []
    while not taken.is_set() and (found := scheduler.get()) is not None:
        items += found[0].items
        scheduler.release(found[1])
    assert taken.is_set()
    assert workers.count() == 1  # the other one, still working
    leave.set()
    assert items + drain(scheduler) == list(range(1000))
    scheduler.close()
    assert workers.join()
    assert workers.count() == 0


def test_a_worker_asked_to_end_that_ends_on_close_is_counted_out_once() -> None:
    scheduler = scheduler_of(1000)
    workers = WorkerThreads(scheduler, thread_runner(scheduler.program), 3, "test-worker")
    workers.retire()
    workers.retire()
    scheduler.close()  # before any worker took its retirement, maybe
    assert workers.join()
    assert workers.count() == 0


def test_the_caller_starts_one_worker_and_each_starts_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    """`Thread.start` waits until the new thread runs: on busy cores a scheduling period
    each, which the consumer's thread must not pay `count` times before its first batch."""
    starters = note_thread_starts(monkeypatch)
    scheduler = scheduler_of(1000)
    workers = WorkerThreads(scheduler, thread_runner(scheduler.program), 4, "test-worker")
    assert workers.count() == 4  # counted from the start, started or not
    assert drain(scheduler) == list(range(1000))
    scheduler.close()
    assert workers.join()
    caller = threading.current_thread().name
    assert starters == [
        (caller, "test-worker-0"),
        ("test-worker-0", "test-worker-1"),
        ("test-worker-1", "test-worker-2"),
        ("test-worker-2", "test-worker-3"),
    ]
    assert workers.count() == 0


def test_ready_waits_for_the_workers_the_chain_has_not_started(monkeypatch: Any) -> None:
    scheduler = scheduler_of()
    slow = SlowStart(scheduler)
    workers = WorkerThreads(scheduler, slow, 3, "test-worker")
    assert slow.making.wait(30)
    assert not workers.ready()
    slow.go.set()
    assert drain(scheduler) == list(range(100))
    # The first workers may deliver everything before the chain has started the last
    # one: ready then comes later, but it comes.
    deadline = time.monotonic() + 30
    while not workers.ready():
        assert time.monotonic() < deadline, "the workers never all started"
        time.sleep(0.001)
    assert slow.made == 3
    scheduler.close()
    assert workers.join()


def test_a_worker_that_cannot_start_the_next_fails_the_loader_and_the_count_drops(monkeypatch: Any) -> None:
    start = threading.Thread.start

    def third_fails(thread: threading.Thread) -> None:
        if thread.name == "test-worker-2":
            raise RuntimeError("can't start new thread")
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", third_fails)
    scheduler = scheduler_of(1000)
    workers = WorkerThreads(scheduler, thread_runner(scheduler.program), 4, "test-worker")
    with pytest.raises(RuntimeError, match="can't start new thread"):
        drain(scheduler)
    scheduler.close()
    assert workers.join()
    assert workers.count() == 0


def test_adding_no_workers_starts_none(monkeypatch: pytest.MonkeyPatch) -> None:
    starters = note_thread_starts(monkeypatch)
    scheduler = scheduler_of()
    workers = WorkerThreads(scheduler, thread_runner(scheduler.program), 0, "test-worker")
    workers.add(0)
    workers.add(-1)
    assert (starters, workers.count(), workers.ready()) == ([], 0, True)
    scheduler.close()
    assert workers.join()


def test_a_join_while_a_worker_is_being_started_waits_for_that_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """`add` lists a worker, then starts it: a `close()` in another thread in between ("auto"
    adding a worker) raised "cannot join thread before it is started" (a review, 2026-11-30)."""
    scheduler = scheduler_of()
    workers = WorkerThreads(scheduler, thread_runner(scheduler.program), 0, "test-worker")
    starting, go = threading.Event(), threading.Event()
    real_start = threading.Thread.start

    def slow_start(thread: threading.Thread) -> None:
        if thread.name.startswith("test-worker"):
            starting.set()
            go.wait(30)
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", slow_start)
    adder = threading.Thread(target=workers.add)
    adder.start()
    assert starting.wait(30)
    scheduler.close()
    joined: list[bool | BaseException] = []

    def join() -> None:
        try:
            joined.append(workers.join())
        except BaseException as error:  # what the test looks for
            joined.append(error)

    joiner = threading.Thread(target=join)
    joiner.start()
    time.sleep(0.05)  # the joiner meets the worker listed and not started
    go.set()
    joiner.join(30)
    adder.join(30)
    assert joined == [True]
    assert not workers.alive()
