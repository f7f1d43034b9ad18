"""Where an iterator's outputs come from: the engines behind `for` and `async for`.

* `ThreadedEngine`: worker threads over the `Scheduler` (each with
  its own subinterpreter for `executor="interpreter"`), plus an
  event loop for asynchronous segments (a background thread for `for`, only
  if the program has such segments; the caller's loop for `async for`).
* `InlineEngine` / `AsyncInlineEngine`: `worker_count=0`, the pipeline run by
  the consumer itself as it asks.

Each gives `Outputs` with their window weight (`next`/`anext`), takes
the weight back when the consumer is done with them (`release`), and stops
everything it started (`close`/`aclose`).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Protocol

from aioloader._common.positions import Position
from aioloader._device.device_put import DeviceEngine
from aioloader._executors.inline import arun_inline, inline_steps, run_inline
from aioloader._executors.interpreter.executor import interpreter_runner
from aioloader._executors.loop_thread import AsyncSegments, LoopThread
from aioloader._executors.threads import WorkerThreads, thread_runner
from aioloader._iteration import interrupts as interrupts
from aioloader._program.jobs import Outputs
from aioloader._program.read_pool import ReadPool
from aioloader._scheduling.scheduler import Scheduler

if TYPE_CHECKING:
    from aioloader._loader import DataLoader


class ThreadedEngine:
    """Worker threads over a `Scheduler`, and an event loop for async segments.

    For `for`, the loop is a background thread started only if the program
    has asynchronous segments; for `async for` it is the caller's loop.
    """

    def __init__(
        self, loader: DataLoader, position: Position, loop: asyncio.AbstractEventLoop | None
    ) -> None:
        self._read_pool = ReadPool(loader.read_options.num_threads)
        program = loader.program(self._read_pool)
        self.scheduler = Scheduler(program, position, loader.read_options, loader.worker_count)
        self._loop_thread: LoopThread | None = None
        self._segments: AsyncSegments | None = None
        if self.scheduler.needs_async_runner:
            if loop is None:
                self._loop_thread = LoopThread()
                loop = self._loop_thread.loop
            self._segments = AsyncSegments(self.scheduler, loop)
            self.scheduler.use_async_runner(self._segments)
        runner = interpreter_runner(program) if loader.executor == "interpreter" else thread_runner(program)
        self._workers = WorkerThreads(self.scheduler, runner, loader.worker_count, "aioloader-worker")

    def next(self) -> tuple[Outputs, int] | None:
        return self.scheduler.get()

    async def anext(self) -> tuple[Outputs, int] | None:
        return await self.scheduler.aget()

    def release(self, weight: int) -> None:
        if weight:
            self.scheduler.release(weight)

    def _stop(self) -> None:
        self.scheduler.close()
        if self._segments is not None:
            self._segments.cancel()

    def close(self) -> None:
        """Stop everything and join every thread (any thread may call it)."""
        self._stop()
        self._read_pool.close()
        self._workers.join()
        if self._loop_thread is not None:
            self._loop_thread.close()

    async def aclose(self) -> None:
        """`close` on the consumer's loop: waits for the workers without blocking it
        (the read pool's threads end with the reads in flight: a few milliseconds)."""
        self._stop()
        self._read_pool.close()
        deadline = time.monotonic() + 2.0
        while self._workers.alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.001)


class InlineEngine:
    """`worker_count=0` for `for`: the pipeline runs in the caller's thread as it asks."""

    def __init__(self, loader: DataLoader, position: Position) -> None:
        steps = inline_steps(loader.program(), position, loader.read_options.prefetch_buffer_size)
        self._outputs = run_inline(steps)

    def next(self) -> tuple[Outputs, int] | None:
        outputs = next(self._outputs, None)
        return None if outputs is None else (outputs, 0)

    def release(self, weight: int) -> None:
        pass

    def close(self) -> None:
        self._outputs.close()  # type: ignore[attr-defined]


class AsyncInlineEngine:
    """`worker_count=0` for `async for`: the pipeline runs on the loop as it asks (debug mode)."""

    def __init__(self, loader: DataLoader, position: Position) -> None:
        steps = inline_steps(loader.program(), position, loader.read_options.prefetch_buffer_size)
        self._outputs = arun_inline(steps)

    async def anext(self) -> tuple[Outputs, int] | None:
        try:
            return await anext(self._outputs), 0
        except StopAsyncIteration:
            return None

    def release(self, weight: int) -> None:
        pass

    def close(self) -> None:
        pass  # no threads; the loop finalises the async generator

    async def aclose(self) -> None:
        await self._outputs.aclose()  # type: ignore[attr-defined]


class EngineHolder:
    """Owns the current engine; the iterator's finalizer closes it without a reference
    to the iterator itself, so that garbage collection can run it."""

    def __init__(self) -> None:
        self.engine: Any = None

    def close(self) -> None:
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.close()
            interrupts.unwatch(engine)


class SyncEngine(Protocol):
    """What `for` needs of an engine."""

    def next(self) -> tuple[Outputs, int] | None: ...
    def release(self, weight: int) -> None: ...
    def close(self) -> None: ...


class AsyncEngine(Protocol):
    """What `async for` needs of an engine."""

    async def anext(self) -> tuple[Outputs, int] | None: ...
    def release(self, weight: int) -> None: ...
    def close(self) -> None: ...
    async def aclose(self) -> None: ...


def sync_engine(loader: DataLoader, position: Position) -> SyncEngine:
    """The engine for `for`: inline without workers, threads otherwise (stopped by Ctrl-C)."""
    if loader.worker_count == 0:
        return _with_device(loader, InlineEngine(loader, position))  # type: ignore[no-any-return]
    return _with_device(loader, ThreadedEngine(loader, position, None))  # type: ignore[no-any-return]


def async_engine(loader: DataLoader, position: Position) -> AsyncEngine:
    """The engine for `async for`, on the running loop."""
    if loader.worker_count == 0:
        return _with_device(loader, AsyncInlineEngine(loader, position))  # type: ignore[no-any-return]
    loop = asyncio.get_running_loop()
    return _with_device(loader, ThreadedEngine(loader, position, loop))  # type: ignore[no-any-return]


def _with_device(loader: DataLoader, engine: Any) -> Any:
    if loader.device_put is not None:
        engine = DeviceEngine(engine, loader.device_put, threaded=loader.worker_count > 0)
    if loader.worker_count > 0:
        interrupts.watch(engine)
    return engine
