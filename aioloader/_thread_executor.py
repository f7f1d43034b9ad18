"""The thread executor: N worker threads, each with its own copy of the program.

Work arrives as (stage, segment, payload) on one queue that every worker
takes from; each worker runs it on its own copy of the operations, made in
that thread when it starts (on free-threaded CPython an object is cheapest to
use from the thread that created it). Results go back to the event loop with
one `call_soon_threadsafe` per unit of work, never per record.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from typing import Any

from aioloader._program import Program

_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[tuple[Any, float]]", int, int, Any]


class ThreadExecutor:
    """Runs program segments on `workers` daemon threads named `{name}-worker-{i}`."""

    def __init__(self, program: Program, workers: int, name: str) -> None:
        self._program = program
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-worker-{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    async def run(self, stage: int, segment: int, payload: Any) -> tuple[Any, float]:
        """Run one segment on a worker; return its result and the seconds it took."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[Any, float]] = loop.create_future()
        self._jobs.put((loop, future, stage, segment, payload))
        return await future

    def _work(self) -> None:
        try:
            program = self._program.for_worker()
        except Exception as error:
            program, copy_error = None, _copy_failed(error)
        while (job := self._jobs.get()) is not None and not self._closed:
            loop, future, stage, segment, payload = job
            started = time.perf_counter()
            try:
                if program is None:
                    raise copy_error
                outcome: Any = (program.run_segment(stage, segment, payload), time.perf_counter() - started)
            except BaseException as error:
                outcome = error
            try:
                loop.call_soon_threadsafe(_settle, future, outcome)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                return
            # Drop this job's data before waiting for the next one: a worker
            # must not keep a unit of records alive while it is idle.
            del job, future, payload, outcome

    def _stop(self) -> None:
        if not self._closed:
            self._closed = True
            for _ in self._threads:
                self._jobs.put(None)

    def _alive(self) -> bool:
        return any(thread.is_alive() for thread in self._threads)

    def close(self, timeout: float = 2.0) -> bool:
        """Stop the workers after their current segment; True if all joined in `timeout`."""
        self._stop()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))
        return not self._alive()

    async def aclose(self, timeout: float = 2.0) -> bool:
        """`close` for the event loop: waits for the workers without blocking the loop."""
        self._stop()
        deadline = time.monotonic() + timeout
        while self._alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.001)
        return not self._alive()


def _settle(future: asyncio.Future[tuple[Any, float]], outcome: Any) -> None:
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


def _copy_failed(error: Exception) -> TypeError:
    copy_error = TypeError(
        f"could not copy the operations for a worker thread ({type(error).__name__}: {error}); "
        "define __deepcopy__ on the transform to share it between threads instead"
    )
    copy_error.__cause__ = error
    return copy_error
