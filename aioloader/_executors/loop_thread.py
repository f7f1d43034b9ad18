"""Asynchronous segments for the workers: an event loop that awaits them.

`AsyncSegments` takes a job whose next segment is asynchronous (an async
source's reads, an `async def` map), awaits its segments on a loop, and hands
the job back to the scheduler. For `async for` that loop is the caller's; for
`for`, `LoopThread` runs one in a background thread, started only when the
program has asynchronous segments.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading

from aioloader._common.calls import Interrupt
from aioloader._common.contexts import serve
from aioloader._scheduling.scheduler import Scheduler
from aioloader._scheduling.work import Place, Work

_names = itertools.count()


class AsyncSegments:
    """Awaits jobs' asynchronous segments on `loop`, then returns them to `scheduler`."""

    def __init__(self, scheduler: Scheduler, loop: asyncio.AbstractEventLoop) -> None:
        self._scheduler, self._loop = scheduler, loop
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False  # set by `cancel`, or once the loop shuts down: no task starts after it
        self._watch: asyncio.Task[None] | None = None  # see `_watch_shutdown`

    def submit(self, work: Work) -> None:
        """Run `work`'s asynchronous segments (from any thread)."""
        with contextlib.suppress(RuntimeError):  # a closed loop: the scheduler is closing
            self._loop.call_soon_threadsafe(self._start, work)

    def _start(self, work: Work) -> None:
        if self._closed or self._shutting_down():
            # Submitted before `cancel` reached the loop, or the loop shuts down: it has
            # asked every task it knows to stop (`_watch` too, which sets `_closed` only
            # once it runs), and would close with a task started now still pending.
            return
        if self._watch is None:
            self._watch = self._loop.create_task(self._watch_shutdown())
        task = self._loop.create_task(self._run(work))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, work: Work) -> None:
        program, scheduler = self._scheduler.program, self._scheduler
        serve(scheduler)  # this task's own context: a `next()` or `anext()` from it is refused
        try:
            while work.place(program) is Place.LOOP:
                await work.await_segment(program)
            scheduler.advance(work)
        except Interrupt as carried:
            scheduler.fail(carried.error)  # raised again in the consumer
        except asyncio.CancelledError as error:
            if not (self._closed or self._shutting_down()):
                # The user's awaited code cancelled the task it ran in
                # (`asyncio.current_task().cancel()`): its error, which the consumer
                # gets as it is, as at `worker_count=0`. Raised on, it would end this
                # task with the job neither done nor failed: the consumer would wait
                # for good. (One that the user's code raised itself comes as an `Interrupt`.)
                scheduler.fail(error)
                return
            # `cancel` (which sets `_closed` first), or the loop shutting down with the
            # iterator still open (asyncio.run's end): start no task that it would leave
            # pending once closed.
            self._closed = True
            raise
        except BaseException as error:
            scheduler.fail(error)

    def _shutting_down(self) -> bool:
        """Whether the loop is cancelling every task, as at the end of `asyncio.run` or of
        `LoopThread`: `_watch`, which nothing else cancels, was asked to stop too. (Once
        it has stopped, `_closed` says so: its `finally` set it.)"""
        return self._watch is not None and self._watch.cancelling() > 0

    async def _watch_shutdown(self) -> None:
        """Wait until cancelled: a loop that ends with the iterator still open (the end of
        `asyncio.run`) cancels every task, this one too, and then runs the loop a while to
        let them finish. Workers may still submit jobs then; a task started for one would
        be left pending on the closed loop, its coroutines never awaited (a RuntimeWarning
        each). Once this task is cancelled, no task starts."""
        try:
            await asyncio.get_running_loop().create_future()
        finally:
            self._closed = True

    def cancel(self) -> None:
        """Cancel every segment in progress, and start none after (from any thread).

        On the loop's own thread the tasks are cancelled here and now, so that
        a loop about to close (an iterator dropped at the end of `asyncio.run`)
        finishes them: a task left pending on a closed loop is an error at
        garbage collection. From another thread the loop cancels them soon.
        """
        self._closed = True
        if _running_loop() is self._loop:
            self._cancel_now()
            return
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._cancel_now)

    async def finished(self) -> None:
        """Wait, on the loop, for the tasks that `cancel` cancelled to end (on
        another loop, an `aclose()` from the wrong one, there is nothing to wait on)."""
        if self._tasks and _running_loop() is self._loop:
            await asyncio.wait(list(self._tasks))

    def _cancel_now(self) -> None:
        for task in [*self._tasks, *([self._watch] if self._watch is not None else [])]:
            task.cancel()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class LoopThread:
    """An event loop running in daemon thread `aioloader-loop-{n}` until `close`."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.name = f"aioloader-loop-{next(_names)}"
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        try:
            self.loop.run_forever()
        finally:
            # Until no task is left: while the cancelled ones finish, a job submitted just
            # before the stop starts a task of its own (`AsyncSegments._start`), whose
            # `async def` map makes tasks in turn; left pending on the closed loop, their
            # coroutines would never be awaited (a RuntimeWarning each, at collection).
            while pending := asyncio.all_tasks(self.loop):
                for task in pending:
                    task.cancel()
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.close()

    def close(self, timeout: float = 2.0) -> None:
        """Stop the loop, cancelling what runs on it, and join the thread."""
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.loop.stop)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
