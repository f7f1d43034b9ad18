"""`ThreadedEngine`: the engine of `worker_count` > 0, for `for` and `async for`.

Its own module, imported when the first engine with workers is made: the
scheduler, the worker threads, the tuner and the read pool are not on the
path of `worker_count=0`, and a script pays for the import of what it uses
before its first batch.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from aioloader._common.positions import Position
from aioloader._executors.autoscale import AutoReads
from aioloader._executors.threads import RunnerFactory, WorkerThreads, aclose_elsewhere, thread_runner
from aioloader._executors.tuning import Tuner
from aioloader._iteration import interrupts as interrupts
from aioloader._iteration.engines import observe_program
from aioloader._iteration.spec import LoaderSpec
from aioloader._program.jobs import Outputs
from aioloader._program.program import Program
from aioloader._program.read_pool import ReadPool
from aioloader._scheduling.scheduler import Scheduler

if TYPE_CHECKING:
    import asyncio  # at run time only where an event loop is used: `for` never loads asyncio

    from aioloader._device.device_engine import DeviceEngine  # loaded with a `device_put`
    from aioloader._executors.loop_thread import AsyncSegments, LoopThread
    from aioloader._observability.statistics import Observation  # imported when figures are asked for


def _interpreter_runner(program: Program) -> RunnerFactory:
    """Runners in subinterpreters: their modules load only for `executor="interpreter"`."""
    from aioloader._executors.interpreter.executor import interpreter_runner

    return interpreter_runner(program)


class ThreadedEngine:
    """Worker threads over a `Scheduler`, and an event loop for async segments.

    For `for`, the loop is a background thread started only if the program
    has asynchronous segments; for `async for` it is the caller's loop.
    """

    def __init__(
        self,
        spec: LoaderSpec,
        position: Position,
        loop: asyncio.AbstractEventLoop | None,
        prefetch: bool = False,
    ) -> None:
        threads = spec.read_options.num_threads
        self._read_pool = ReadPool(threads) if threads > 0 else None  # 0: each worker reads its own
        self._loop_thread: LoopThread | None = None
        self._segments: AsyncSegments | None = None
        program = spec.program(self._read_pool, workers=True)
        awaits = program.awaits()  # the loop runs the `async def` maps
        # Level 0, the consumer's thread, is for `for` only (the consumer of `async for` is
        # the event loop, where user code must not run), and where the consumer's thread can
        # run every step of a job (threads, no async segments).
        inline = loop is None and spec.executor == "thread" and not awaits
        try:
            # A copy that fails is the copy's error, naming the operation, before any record
            # runs; "auto" keeps such operations on level 0 instead.
            program.prepare_workers(shared=inline or awaits, required=spec.auto_memory_limit is None)
            self._start(spec, program, position, loop, prefetch, inline)
        except BaseException:
            if hasattr(self, "_workers"):  # started: nothing else would ever stop them
                self.close()
            else:
                program.release()  # the loader's operations, claimed: a later engine may run them
                if self._loop_thread is not None:
                    self._loop_thread.close()
            raise

    def _start(
        self,
        spec: LoaderSpec,
        program: Program,
        position: Position,
        loop: asyncio.AbstractEventLoop | None,
        prefetch: bool,
        inline: bool,
    ) -> None:
        self.scheduler = Scheduler(program, position, spec.window, spec.worker_count)
        if self._read_pool is not None:  # its readers are the pipeline's threads, as the workers are
            self._read_pool.serving = self.scheduler
        if self.scheduler.needs_async_runner:
            from aioloader._executors.loop_thread import AsyncSegments, LoopThread  # imports asyncio

            if loop is None:
                self._loop_thread = LoopThread()
                loop = self._loop_thread.loop
            self._segments = AsyncSegments(self.scheduler, loop)
            self.scheduler.use_async_runner(self._segments)
        runner = _interpreter_runner(program) if spec.executor == "interpreter" else thread_runner(program)
        # "auto" starts on level 0 (`inline`): no thread before the first batch, and most work
        # runs as fast on one worker as there; but with one worker when asked to prefetch,
        # which the consumer's thread cannot, unless no worker can copy the operations.
        auto = spec.auto_memory_limit is not None
        level0 = inline and (not prefetch or not program.copyable())
        first = (0 if level0 else 1) if auto else spec.worker_count
        self._workers = WorkerThreads(self.scheduler, runner, first, "aioloader-worker")
        self._spec = spec
        self._tuner = self._make_tuner(spec, program, inline)

    def _make_tuner(self, spec: LoaderSpec, program: Program, inline: bool) -> Tuner | None:
        """The tuner of the worker count (see `_executors/tuning`), or None for a fixed count
        that has nothing to choose from (no level 0: `inline` is False). "auto" tunes the
        read threads too unless `ReadOptions` was given."""
        if spec.auto_memory_limit is None:
            return Tuner(self.scheduler, self._workers, [0, spec.worker_count]) if inline else None
        reads = None
        if spec.auto_read_threads and self._read_pool is not None:
            reads = AutoReads(self._read_pool, self.scheduler)
        read_keys = frozenset(key for key, name in program.stage_names() if name == "read")
        levels = range(0 if inline else 1, spec.worker_count + 1)
        limit = spec.auto_memory_limit
        copyable = program.copyable if inline else None
        return Tuner(
            self.scheduler, self._workers, levels, limit, reads, program.meters, read_keys, copyable=copyable
        )

    def observe(self) -> Observation:
        program = self.scheduler.program
        threads = self._spec.read_options.num_threads if self._read_pool is None else self._read_pool.threads
        # Read threads count while they read at once: the pool engaged, or async segments.
        engaged = self._read_pool is not None and self._read_pool.engaged
        reading = engaged or self._segments is not None
        workers = self._workers.count() if self._tuner is None else self._tuner.chosen
        read_threads = threads if reading else 0
        return observe_program(program, self.scheduler.buffers(), workers, read_threads, workers == 0)

    def next(self) -> tuple[Outputs, int] | None:
        tuner = self._tuner
        if tuner is None:
            return self.scheduler.get()
        started = time.perf_counter()
        found = self.scheduler.get(self.scheduler.program.run_segment)  # the consumer's own jobs
        if found is not None:
            tuner.delivered(found[1], time.perf_counter() - started)
        return found

    async def anext(self) -> tuple[Outputs, int] | None:
        tuner = self._tuner
        if tuner is None:
            return await self.scheduler.aget()
        started = time.perf_counter()
        found = await self.scheduler.aget()
        if found is not None:
            tuner.delivered(found[1], time.perf_counter() - started)
        return found

    def release(self, weight: int) -> None:
        if weight:
            self.scheduler.release(weight)

    def stop(self) -> None:
        self.scheduler.close()
        if self._segments is not None:
            self._segments.cancel()

    def _close_read_pool(self) -> None:
        if self._read_pool is not None:
            self._read_pool.close()

    def close(self) -> None:
        """Stop everything and join every thread (any thread may call it)."""
        self.stop()
        self._close_read_pool()
        self._workers.join()
        if self._loop_thread is not None:
            self._loop_thread.close()
        self.scheduler.program.release()

    async def aclose(self) -> None:
        """`close` on the consumer's loop: stops at once, then joins on a closer thread,
        awaiting it without blocking the loop (a read in flight may take a while)."""
        self.stop()
        await aclose_elsewhere(self.close)
        if self._segments is not None:
            await self._segments.finished()  # none left pending when the loop closes


def threaded_engine(
    spec: LoaderSpec, position: Position, loop: asyncio.AbstractEventLoop | None, prefetch: bool = False
) -> ThreadedEngine | DeviceEngine:
    """A `ThreadedEngine` (`loop`: the caller's, for `async for`), behind a device thread
    with `device_put`; closed by Ctrl-C."""
    engine = ThreadedEngine(spec, position, loop, prefetch)
    wrapped: ThreadedEngine | DeviceEngine = engine
    try:
        if spec.device_put is not None:
            from aioloader._device.device_engine import DeviceEngine

            wrapped = DeviceEngine(engine, spec.device_put)
        interrupts.watch(wrapped)
    except BaseException:
        # The workers run already, and the caller never gets the engine to close: a device
        # thread that could not start left them running for good, past any close().
        interrupts.unwatch(wrapped)
        wrapped.close()
        raise
    return wrapped
