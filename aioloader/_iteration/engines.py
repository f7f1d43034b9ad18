"""Where an iterator's outputs come from: the engines behind `for` and `async for`.

* `ThreadedEngine`: worker threads over a `Scheduler` (each with its own
  subinterpreter for `executor="interpreter"`), plus an event loop for
  asynchronous segments (a background thread for `for`, only if the program
  has such segments; the caller's loop for `async for`); wrapped in a
  `DeviceEngine` with `device_put`.
* `InlineEngine` / `AsyncInlineEngine`: `worker_count=0`, the pipeline run by
  the consumer itself as it asks (and put on the device as it asks).

What an engine must do, and who calls it from which thread, is written once,
on the two protocols `SyncEngine` and `AsyncEngine`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Generic, Protocol, TypeVar

from aioloader._common.positions import Position
from aioloader._device.device_put import DeviceEngine, transfer_outputs
from aioloader._executors.autoscale import AutoWorkers
from aioloader._executors.inline import arun_inline, inline_steps, run_inline
from aioloader._executors.interpreter.executor import interpreter_runner
from aioloader._executors.loop_thread import AsyncSegments, LoopThread
from aioloader._executors.threads import WorkerThreads, thread_runner
from aioloader._iteration import interrupts as interrupts
from aioloader._iteration.spec import LoaderSpec
from aioloader._observability.statistics import Observation
from aioloader._program.jobs import Outputs
from aioloader._program.program import Program
from aioloader._program.read_pool import ReadPool
from aioloader._scheduling.scheduler import Scheduler


class SyncEngine(Protocol):
    """What `for` needs of an engine: `DataLoaderIterator` takes its outputs from one.

    * `next()`: the next `Outputs`, in order, with their window weight; None
      at the end. Called by the consumer's thread, which it blocks until they
      are ready. An error that is not the user's data (a bug, a worker that
      could not start) is raised here; the user's errors ride in `Outputs`.
    * `release(weight)`: the consumer has delivered every item of an
      `Outputs` and gives their weight back, so that the engine may read that
      much further ahead. Called by the consumer's thread, before its next
      `next()`; never blocks.
    * `close()`: stop, let go of every record, and join every thread the
      engine started (within 2 s). Idempotent, and callable from any thread:
      the consumer's, the finalizer's (garbage collection), or the closer
      thread of a Ctrl-C (see `interrupts`), possibly while `next()` waits.
    """

    def next(self) -> tuple[Outputs, int] | None: ...
    def release(self, weight: int) -> None: ...
    def close(self) -> None: ...
    def observe(self) -> Observation: ...


class AsyncEngine(Protocol):
    """What `async for` needs of an engine: `AsyncDataLoaderIterator` takes its outputs from one.

    * `anext()`: as `SyncEngine.next`, awaited on the consumer's loop, which
      it never blocks while it waits.
    * `release(weight)`: as `SyncEngine.release`, called on the loop.
    * `aclose()`: as `SyncEngine.close`, awaited on the loop; waits for the
      worker threads without blocking it. What the iterator's `aclose()` uses.
    * `close()`: the same from the finalizer (any thread, no loop to await
      on); idempotent.

    Both kinds have `observe()`: what `statistics()` needs (the meters, the
    buffers, the thread counts); any thread, never blocks for long.
    """

    async def anext(self) -> tuple[Outputs, int] | None: ...
    def release(self, weight: int) -> None: ...
    def close(self) -> None: ...
    async def aclose(self) -> None: ...
    def observe(self) -> Observation: ...


def _observation(program: Program, buffers: list[Any], workers: int, read_threads: int) -> Observation:
    return Observation(program.stage_names(), program.meters.all(), buffers, workers, read_threads)


class ThreadedEngine:
    """Worker threads over a `Scheduler`, and an event loop for async segments.

    For `for`, the loop is a background thread started only if the program
    has asynchronous segments; for `async for` it is the caller's loop.
    """

    def __init__(self, spec: LoaderSpec, position: Position, loop: asyncio.AbstractEventLoop | None) -> None:
        self._read_pool = ReadPool(spec.read_options.num_threads)
        program = spec.program(self._read_pool)
        self.scheduler = Scheduler(program, position, spec.read_options, spec.worker_count)
        self._loop_thread: LoopThread | None = None
        self._segments: AsyncSegments | None = None
        if self.scheduler.needs_async_runner:
            if loop is None:
                self._loop_thread = LoopThread()
                loop = self._loop_thread.loop
            self._segments = AsyncSegments(self.scheduler, loop)
            self.scheduler.use_async_runner(self._segments)
        runner = interpreter_runner(program) if spec.executor == "interpreter" else thread_runner(program)
        auto = spec.auto_memory_limit is not None
        self._workers = WorkerThreads(
            self.scheduler, runner, 1 if auto else spec.worker_count, "aioloader-worker"
        )
        self._auto: AutoWorkers | None = None
        if spec.auto_memory_limit is not None:
            self._auto = AutoWorkers(self._workers, program.meters, spec.worker_count, spec.auto_memory_limit)
        self._spec = spec

    def observe(self) -> Observation:
        program, threads = self.scheduler.program, self._spec.read_options.num_threads
        reading = self._read_pool.engaged or self._segments is not None  # reads (or async maps) at once
        return _observation(
            program, self.scheduler.buffers(), self._workers.count(), threads if reading else 0
        )

    def next(self) -> tuple[Outputs, int] | None:
        if self._auto is None:
            return self.scheduler.get()
        started = time.perf_counter()
        found = self.scheduler.get()
        self._auto.waited(time.perf_counter() - started)
        return found

    async def anext(self) -> tuple[Outputs, int] | None:
        if self._auto is None:
            return await self.scheduler.aget()
        started = time.perf_counter()
        found = await self.scheduler.aget()
        self._auto.waited(time.perf_counter() - started)
        return found

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

    def __init__(self, spec: LoaderSpec, position: Position) -> None:
        self._program = spec.program(None)
        steps = inline_steps(self._program, position, spec.read_options.prefetch_buffer_size)
        self._outputs = run_inline(steps)
        self._device_put = spec.device_put

    def observe(self) -> Observation:
        return _observation(self._program, [], 0, 0)

    def next(self) -> tuple[Outputs, int] | None:
        outputs = next(self._outputs, None)
        if outputs is None:
            return None
        return (outputs if self._device_put is None else transfer_outputs(outputs, self._device_put)), 0

    def release(self, weight: int) -> None:
        pass

    def close(self) -> None:
        self._outputs.close()


class AsyncInlineEngine:
    """`worker_count=0` for `async for`: the pipeline runs on the loop as it asks (debug mode)."""

    def __init__(self, spec: LoaderSpec, position: Position) -> None:
        self._program = spec.program(None)
        steps = inline_steps(self._program, position, spec.read_options.prefetch_buffer_size)
        self._outputs = arun_inline(steps)
        self._device_put = spec.device_put

    def observe(self) -> Observation:
        return _observation(self._program, [], 0, 0)

    async def anext(self) -> tuple[Outputs, int] | None:
        try:
            outputs = await anext(self._outputs)
        except StopAsyncIteration:
            return None
        return (outputs if self._device_put is None else transfer_outputs(outputs, self._device_put)), 0

    def release(self, weight: int) -> None:
        pass

    def close(self) -> None:
        pass  # no threads; the loop finalises the async generator

    async def aclose(self) -> None:
        await self._outputs.aclose()


E = TypeVar("E", SyncEngine, AsyncEngine)


class EngineHolder(Generic[E]):
    """Owns the current engine; the iterator's finalizer closes it without a reference
    to the iterator itself, so that garbage collection can run it."""

    def __init__(self) -> None:
        self.engine: E | None = None

    def close(self) -> None:
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.close()
            interrupts.unwatch(engine)


def sync_engine(spec: LoaderSpec, position: Position) -> SyncEngine:
    """The engine for `for`: inline without workers, threads otherwise (stopped by Ctrl-C)."""
    if spec.worker_count == 0:
        return InlineEngine(spec, position)
    return _threaded(spec, ThreadedEngine(spec, position, None))


def async_engine(spec: LoaderSpec, position: Position) -> AsyncEngine:
    """The engine for `async for`, on the running loop."""
    if spec.worker_count == 0:
        return AsyncInlineEngine(spec, position)
    return _threaded(spec, ThreadedEngine(spec, position, asyncio.get_running_loop()))


def _threaded(spec: LoaderSpec, engine: ThreadedEngine) -> ThreadedEngine | DeviceEngine:
    """`engine`, behind a device thread with `device_put`; closed by Ctrl-C."""
    wrapped = engine if spec.device_put is None else DeviceEngine(engine, spec.device_put)
    interrupts.watch(wrapped)
    return wrapped
