"""Ordered reassembly: run jobs concurrently, hand back their results in job order.

A feeder task takes jobs in order, waits for room in the window, and starts
each one as a task; the consumer awaits those tasks in the order they were
started. Results are therefore in order however the workers interleave, and
at most a window's worth of work is in flight or waiting to be consumed: the
window's units are given back by whoever finishes with a result.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Generic, TypeVar

from aioloader._window import Window, WindowClosedError

J = TypeVar("J")
R = TypeVar("R")


class Reassembly(Generic[J, R]):
    """Results of `run(job)` for each `(job, weight)` of `jobs`, in order."""

    def __init__(
        self, jobs: AsyncIterator[tuple[J, int]], run: Callable[[J], Awaitable[R]], window: Window
    ) -> None:
        self._jobs, self._run, self.window = jobs, run, window
        self._pending: deque[tuple[asyncio.Task[R], int]] = deque()
        self._changed = asyncio.Event()
        self._feeder: asyncio.Task[None] | None = None
        self._closed = False

    async def _feed(self) -> None:
        try:
            async for job, weight in self._jobs:
                await self.window.acquire(weight)
                self._pending.append((asyncio.ensure_future(self._run(job)), weight))
                self._changed.set()
        except WindowClosedError:
            pass
        finally:
            self._changed.set()

    async def next(self) -> tuple[R, int] | None:
        """The next result and its weight (to release when done with it); None at the end.

        An exception from the jobs' iterator or from a job is raised here, in order.
        """
        if self._closed:
            return None
        if self._feeder is None:
            self._feeder = asyncio.ensure_future(self._feed())
        while not self._pending:
            if self._feeder.done():
                self._feeder.result()  # re-raise what stopped the feeder, if anything
                return None
            self._changed.clear()
            await self._changed.wait()
        task, weight = self._pending.popleft()
        return await task, weight

    async def aclose(self) -> None:
        """Cancel the feeder and every job, and wait until they have stopped."""
        self._closed = True
        self.window.close()
        tasks: list[asyncio.Future[Any]] = [task for task, _ in self._pending]
        if self._feeder is not None:
            tasks.append(self._feeder)
        self._pending.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # A cancelled task keeps its exception, whose traceback keeps the
        # frame that held a job: drop the tasks so their work can be freed.
        self._feeder = None
        del tasks
        close_jobs = getattr(self._jobs, "aclose", None)
        if close_jobs is not None:
            await close_jobs()  # its frame may hold buffered work: let it go now
