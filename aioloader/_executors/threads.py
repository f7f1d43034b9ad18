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
    """`count` daemon threads named `{name}-{i}` working for `scheduler`; `add` starts
    one more, `retire` asks one to end after the work in its hands (`worker_count="auto"`)."""

    def __init__(self, scheduler: Scheduler, make_runner: RunnerFactory, count: int, name: str) -> None:
        self._scheduler, self._make_runner, self._name = scheduler, make_runner, name
        self._lock = threading.Lock()  # the thread list and the retirements; never on the hot path
        self._threads: list[threading.Thread] = []
        self._retiring = 0
        for _ in range(count):
            self.add()

    def add(self) -> None:
        """Start one more worker."""
        with self._lock:
            thread = threading.Thread(
                target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True
            )
            self._threads.append(thread)
        thread.start()

    def retire(self) -> None:
        """Ask one worker to end once the work it holds is handed back."""
        with self._lock:
            self._retiring += 1

    def count(self) -> int:
        """The workers running and not asked to end."""
        with self._lock:
            return sum(thread.is_alive() for thread in self._threads) - self._retiring

    def _retired(self) -> bool:
        if not self._retiring:  # a plain read: the common answer costs no lock
            return False
        with self._lock:
            if not self._retiring:
                return False
            self._retiring -= 1
            return True

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
                    if self._retired():
                        return
        except BaseException as error:
            scheduler.fail(error)

    def alive(self) -> bool:
        """True while some worker is still running."""
        with self._lock:
            return any(thread.is_alive() for thread in self._threads)

    def join(self, timeout: float = 2.0) -> bool:
        """Wait for the workers to end (close the scheduler first); True if all did in `timeout`."""
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
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
