"""Worker threads: each takes work from the scheduler and runs it on its own copy of the program.

A worker makes its segment runner (for threads: its own deep copy of the
operations) in its own thread when it starts, since on free-threaded CPython
an object is cheapest to use from the thread that created it. Then it loops:
take work, run one segment, hand the result back. The runner comes as a
context manager, so that what a runner holds (a subinterpreter) is released
by the thread that made it when the worker ends. User errors travel inside
the results; anything else (a bug, a copy that fails) breaks the scheduler,
and the consumer raises it. A segment cut short by `close()` (`Stopped`)
ends the worker quietly.
"""

from __future__ import annotations

import _thread
import contextlib
import itertools
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from aioloader._common.calls import Stopped
from aioloader._common.contexts import in_this_context, serve
from aioloader._scheduling.work import SegmentRunner

if TYPE_CHECKING:  # the scheduler loads with the first workers (see `_iteration/threaded`)
    from aioloader._scheduling.scheduler import Scheduler

RunnerFactory = Callable[[], AbstractContextManager[SegmentRunner]]

_closers = itertools.count()


# How long `join` waits, past its timeout, for a worker still making its runner:
# a subinterpreter's start cannot be interrupted (a second or more on a busy
# machine), and only its thread may destroy it.
STARTING_SECONDS = 30.0


class WorkerThreads:
    """`count` daemon threads named `{name}-{i}` working for `scheduler`; `add` starts
    one more, `retire` asks one to end after the work in its hands (`worker_count="auto"`)."""

    def __init__(self, scheduler: Scheduler, make_runner: RunnerFactory, count: int, name: str) -> None:
        self._scheduler, self._make_runner, self._name = scheduler, make_runner, name
        self._lock = threading.Lock()  # the worker list and the retirements; never on the hot path
        # Held while a worker is listed and started: `join` never meets one listed and not yet
        # started ("cannot join thread before it is started", from a close in another thread
        # while "auto" adds a worker).
        self._starting = threading.Lock()
        # Each worker with its own event, set once its runner is made or it has ended.
        self._workers: list[tuple[threading.Thread, threading.Event]] = []
        self._retiring = 0  # retirements asked for and not yet taken by a worker
        # Workers asked for and not leaving: neither asked to end (a retirement
        # counts at once) nor ended; those still to be started by the chain count
        # too. Not "alive minus retiring": a worker that has taken its retirement
        # is alive a moment longer, and counted twice then, `retire` could end the last one.
        self._active = 0
        self._unstarted = 0  # workers asked for that the chain has not started yet
        self.add(count)

    def add(self, count: int = 1) -> None:
        """Start `count` more workers (after `close()` they end at once, making no runner).

        The caller starts the first, and each worker starts the next before
        making its runner: `Thread.start` returns only once the new thread
        runs, and with busy cores that may take a scheduling period. Starting
        eight workers on two busy cores took the consumer's thread 30 ms, while
        its first batch, which it runs itself if no worker has taken it, was
        3 ms of work; now it waits for one start.
        """
        if count <= 0:
            return  # a chain of -1 would never end: `after` counts down from it
        with self._lock:
            self._active += count
            self._unstarted += count
        self._start_next(count - 1)

    def _start_next(self, after: int) -> None:
        """Start one worker of a chain, which then starts the `after` others."""
        started = threading.Event()
        with self._starting:
            with self._lock:
                name = f"{self._name}-{len(self._workers)}"
                thread = threading.Thread(
                    target=in_this_context(self._work), args=(started, after), name=name, daemon=True
                )
                self._workers.append((thread, started))
                self._unstarted -= 1
            try:
                thread.start()
            except BaseException:  # "can't start new thread": neither it nor the chain after it are workers
                with self._lock:
                    self._workers.remove((thread, started))
                    self._active -= after + 1
                    self._unstarted -= after
                raise

    def retire(self) -> None:
        """Ask one worker to end once the work it holds is handed back."""
        with self._lock:
            self._retiring += 1
            self._active -= 1

    def ready(self) -> bool:
        """True once every worker asked for has started and made its runner (its copy of
        the operations), or ended: what they deliver from then on is their steady pace."""
        with self._lock:
            return not self._unstarted and all(started.is_set() for _, started in self._workers)

    def count(self) -> int:
        """The workers running and not asked to end."""
        with self._lock:
            return self._active

    def _retired(self) -> bool:
        if not self._retiring:  # a plain read: the common answer costs no lock
            return False
        with self._lock:
            if not self._retiring:
                return False
            self._retiring -= 1
            return True

    def _work(self, started: threading.Event, after: int) -> None:
        retired = False
        try:
            retired = self._work_with_a_runner(started, after)
        finally:
            if not retired:  # closed, or broken: it leaves the count now
                with self._lock:
                    if self._retiring:  # it was asked to end: `retire` counted it out
                        self._retiring -= 1
                    else:
                        self._active -= 1
            started.set()

    def _work_with_a_runner(self, started: threading.Event, after: int) -> bool:
        """Start the next worker of the chain, if `after` others are to follow this one; then
        work until the scheduler closes (False) or this worker takes a retirement (True)."""
        scheduler = self._scheduler
        serve(scheduler)  # in this thread's own context, and the threads it starts
        meter = scheduler.program.meters.new("worker")  # this thread's waits
        try:
            if after:
                self._start_next(after - 1)
            scheduler.program.shutdown.check()  # closed already: make nothing
            with self._make_runner() as run:
                started.set()
                while (work := scheduler.next_work(meter=meter)) is not None:
                    work.run_segment(run)
                    scheduler.advance(work, worker=True)
                    # Drop this work's data before waiting for more: an idle worker
                    # must not keep a chunk of records alive.
                    del work
                    if self._retired():
                        return True
        except Stopped:
            pass  # closed in the middle of a segment: its work is abandoned
        except BaseException as error:
            scheduler.fail(error)
        return False

    def alive(self) -> bool:
        """True while some worker is still running."""
        with self._lock:
            return any(thread.is_alive() for thread, _ in self._workers)

    def join(self, timeout: float = 2.0) -> bool:
        """Wait for the workers to end (close the scheduler first); True if all did.

        `timeout` bounds the wait for a worker in a read or a call of user code;
        one still making its runner is waited for until it has made it and let
        it go (`STARTING_SECONDS` at most), so that no subinterpreter outlives
        `close()`. A worker added while this waits is waited for too.
        """
        deadline = time.monotonic() + timeout
        joined = 0
        while True:
            with self._starting, self._lock:
                workers = self._workers[joined:]
            if not workers:
                return not self.alive()
            for thread, started in workers:
                if thread is not threading.current_thread():
                    thread.join(max(0.0, deadline - time.monotonic()))
                    if thread.is_alive() and not started.is_set():
                        thread.join(STARTING_SECONDS)
            joined += len(workers)


def thread_runner(program: Any) -> RunnerFactory:
    """Runners for thread workers: each a deep copy of the operations, made in its thread."""

    def make() -> AbstractContextManager[SegmentRunner]:
        copy = program.for_worker()
        runner: SegmentRunner = copy.run_segment
        return contextlib.nullcontext(runner)

    return make


class Closing:
    """A close handed to a closer thread: `done` is set once it has returned or raised,
    and `ended()` once its thread has ended too."""

    def __init__(self, close: Callable[[], None]) -> None:
        self.close = close
        self.done = threading.Event()
        self.thread: threading.Thread | None = None  # None: it ran where it was asked
        with _in_flight_lock:
            _in_flight.add(self)

    def ended(self) -> bool:
        return self.done.is_set() and (self.thread is None or not self.thread.is_alive())

    def run(self) -> None:
        try:
            self.close()
        finally:
            self.done.set()
            with _in_flight_lock:
                _in_flight.discard(self)

    def start_thread(self) -> None:
        thread = threading.Thread(target=self.run, name=f"aioloader-closer-{next(_closers)}", daemon=True)
        self.thread = thread  # before `done` can be set
        try:
            thread.start()
        except RuntimeError:  # "can't create new thread at interpreter shutdown"
            self.thread = None
            self.run()


# The closes handed over and not yet returned: between the hand-over and the closer
# thread's start, no thread shows them (see `closes_in_flight`).
_in_flight: set[Closing] = set()
_in_flight_lock = threading.Lock()


def closes_in_flight() -> int:
    """How many closes handed to closer threads have not returned yet (tests wait for 0)."""
    with _in_flight_lock:
        return len(_in_flight)


def close_elsewhere(close: Callable[[], None]) -> Closing:
    """Run `close` on a daemon thread of its own, `aioloader-closer-{n}`; return at once.

    For a caller that must not wait: an event loop's thread (joining workers
    there would freeze every task on the loop), or a finalizer. Not even for
    the thread to start: `Thread.start()` waits until the new thread runs,
    which on a busy machine took 0.2-0.35 s (3.13t, load 6 on 2 cores) and
    froze the loop that called it. So a bare `_thread` thread, which the
    caller does not wait for, starts the closer thread. At interpreter exit,
    when no thread can start, `close` runs here.
    """
    closing = Closing(close)
    try:
        _thread.start_new_thread(closing.start_thread, ())
    except RuntimeError:  # at interpreter shutdown
        closing.run()
    return closing


async def aclose_elsewhere(close: Callable[[], None]) -> None:
    """Run `close` on a closer thread and await its end without blocking the running loop.

    If the awaiting task is cancelled, the close goes on in its thread.
    """
    import asyncio  # here: `for` never loads asyncio

    closing = close_elsewhere(close)
    while not closing.ended():
        await asyncio.sleep(0.001)
