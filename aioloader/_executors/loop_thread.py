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

from aioloader._scheduling.scheduler import Scheduler
from aioloader._scheduling.work import Place, Work

_names = itertools.count()


class AsyncSegments:
    """Awaits jobs' asynchronous segments on `loop`, then returns them to `scheduler`."""

    def __init__(self, scheduler: Scheduler, loop: asyncio.AbstractEventLoop) -> None:
        self._scheduler, self._loop = scheduler, loop
        self._tasks: set[asyncio.Task[None]] = set()

    def submit(self, work: Work) -> None:
        """Run `work`'s asynchronous segments (from any thread)."""
        with contextlib.suppress(RuntimeError):  # a closed loop: the scheduler is closing
            self._loop.call_soon_threadsafe(self._start, work)

    def _start(self, work: Work) -> None:
        task = self._loop.create_task(self._run(work))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, work: Work) -> None:
        program, scheduler = self._scheduler.program, self._scheduler
        try:
            while work.place(program) is Place.LOOP:
                await work.await_segment(program)
            scheduler.advance(work)
        except asyncio.CancelledError:
            raise
        except BaseException as error:
            scheduler.fail(error)

    def cancel(self) -> None:
        """Cancel every segment in progress (from any thread)."""
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._cancel_now)

    def _cancel_now(self) -> None:
        for task in list(self._tasks):
            task.cancel()


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
            for task in asyncio.all_tasks(self.loop):
                task.cancel()
            pending = asyncio.all_tasks(self.loop)
            if pending:
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.close()

    def close(self, timeout: float = 2.0) -> None:
        """Stop the loop, cancelling what runs on it, and join the thread."""
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.loop.stop)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
