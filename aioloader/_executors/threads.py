"""Worker threads: each takes work from the scheduler and runs it on its own copy of the program.

A worker makes its segment runner (for threads: its own deep copy of the
operations) in its own thread when it starts, since on free-threaded CPython
an object is cheapest to use from the thread that created it. Then it loops:
take work, run one segment, hand the result back. The runner comes as a
context manager, so that what a runner holds (a subinterpreter) is released
by the thread that made it when the worker ends. User errors travel inside
the results; anything else (a bug, a copy that fails) breaks the scheduler,
and the consumer raises it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from aioloader._scheduling.scheduler import Scheduler
from aioloader._scheduling.work import SegmentRunner

RunnerFactory = Callable[[], AbstractContextManager[SegmentRunner]]


class WorkerThreads:
    """`count` daemon threads named `{name}-{i}` working for `scheduler`."""

    def __init__(self, scheduler: Scheduler, make_runner: RunnerFactory, count: int, name: str) -> None:
        self._scheduler, self._make_runner = scheduler, make_runner
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def _work(self) -> None:
        scheduler = self._scheduler
        meter = scheduler.program.meters.new("worker")  # this thread's waits
        try:
            with self._make_runner() as run:
                while (work := scheduler.next_work(meter=meter)) is not None:
                    work.run_segment(run)
                    scheduler.advance(work)
                    # Drop this work's data before waiting for more: an idle worker
                    # must not keep a chunk of records alive.
                    del work
        except BaseException as error:
            scheduler.fail(error)

    def alive(self) -> bool:
        """True while some worker is still running."""
        return any(thread.is_alive() for thread in self._threads)

    def join(self, timeout: float = 2.0) -> bool:
        """Wait for the workers to end (close the scheduler first); True if all did in `timeout`."""
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))
        return not self.alive()


def thread_runner(program: Any) -> RunnerFactory:
    """Runners for thread workers: each a deep copy of the operations, made in its thread."""

    def make() -> AbstractContextManager[SegmentRunner]:
        copy = program.for_worker()
        runner: SegmentRunner = copy.run_segment
        return contextlib.nullcontext(runner)

    return make
