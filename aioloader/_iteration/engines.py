"""Where an iterator's outputs come from: the engines behind `for` and `async for`.

* `ThreadedEngine` (in `threaded`, loaded with the first workers): worker
  threads over a `Scheduler` (each with its own subinterpreter for
  `executor="interpreter"`), plus an event loop for asynchronous segments (a
  background thread for `for`, only if the program has such segments; the
  caller's loop for `async for`); wrapped in a `DeviceEngine` with
  `device_put`.
* `InlineEngine` / `AsyncInlineEngine`: `worker_count=0`, the pipeline run by
  the consumer itself as it asks (and put on the device as it asks).

What an engine must do, and who calls it from which thread, is written once,
on the two protocols `SyncEngine` and `AsyncEngine`.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from aioloader._common.calls import Stopped
from aioloader._common.positions import Position
from aioloader._device.device_put import InlineTransfers
from aioloader._executors.inline import AsyncInline, InlineAwaits, Steps, inline_steps, run_inline
from aioloader._executors.threads import aclose_elsewhere, close_elsewhere
from aioloader._iteration import interrupts as interrupts
from aioloader._iteration.spec import LoaderSpec
from aioloader._program.jobs import Outputs
from aioloader._program.program import Program
from aioloader._scheduling.planner import plan_chunks

if TYPE_CHECKING:
    from aioloader._observability.statistics import Observation  # imported when figures are asked for
    from aioloader._program.early import EarlyRead
    from aioloader._program.read_pool import ReadPool


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
    * `stop()`: the part of closing that does not wait, from any thread; on
      the loop's thread it leaves no task of the engine's running there
      but cancelled ones, before a closer thread does the rest with `close()`.

    Both kinds have `observe()`: what `statistics()` needs (the meters, the
    buffers, the thread counts); any thread, never blocks for long.
    """

    async def anext(self) -> tuple[Outputs, int] | None: ...
    def release(self, weight: int) -> None: ...
    def stop(self) -> None: ...
    def close(self) -> None: ...
    async def aclose(self) -> None: ...
    def observe(self) -> Observation: ...


def observe_program(
    program: Program, buffers: list[Any], workers: int, read_threads: int, inline: bool = False
) -> Observation:
    """What an engine's `observe()` answers: `program`'s stages and meters, with the
    engine's buffers and thread counts (the inline engines here, `ThreadedEngine`)."""
    from aioloader._observability.statistics import Observation

    return Observation(program.stage_names(), program.meters.all(), buffers, workers, read_threads, inline)


class Mark:
    """What an inline engine's threads carry (see `EngineHolder.marks`)."""

    __slots__ = ("__weakref__",)


class InlineEngine:
    """`worker_count=0` for `for`: the pipeline runs in the caller's thread as it asks.

    `close()` may come from another thread while `next()` computes: the
    program's `shutdown` then stops the computation before its next read or
    call of user code, and that `next()` answers the end. The generator is
    only ever closed by a thread that is not running it. With `prefetch`
    (`start_prefetch()`), the first chunk's records are read on other threads
    until the first `next()` asks for them (see `EarlyRead`). A slow source's reads of
    a chunk go to a read pool, `read_options.num_threads` at once, as the
    workers' reads do and as Grain's `worker_count=0` reads on its read threads
    (see `read_pool`: a source whose reads do not wait is read here, untimed
    but for a chunk's first records); the rest of the chunk stays in this thread.
    """

    def __init__(self, spec: LoaderSpec, position: Position, prefetch: bool = False) -> None:
        self._pool = _inline_read_pool(spec)
        # What its read threads carry (`contexts.serve`), so that a read calling this engine's
        # iterator is refused, as a threaded engine's threads carry its scheduler. A token,
        # not the engine: the pool would hold the engine in a cycle.
        self.scheduler = Mark()
        if self._pool is not None:
            self._pool.serving = self.scheduler
            # Its threads read ahead while the consumer works: Ctrl-C there must stop them,
            # as it stops a threaded engine's (see `interrupts`). Weakly: the pool must not
            # hold its engine in a cycle.
            self._pool.on_first_thread = functools.partial(_watch, weakref.ref(self))
        self._program = program = spec.program(self._pool)
        self._shutdown = program.shutdown
        steps, self._early = _started(program, spec, position, prefetch)
        self._awaits = InlineAwaits()
        self._outputs = run_inline(steps, self._awaits)
        self._transfers = None if spec.device_put is None else InlineTransfers(spec.device_put)
        self._lock = threading.Lock()
        self._running = self._closed = self._finished = False

    def observe(self) -> Observation:
        pool = self._program.engaged_pool()  # its threads count once reads wait
        observation = observe_program(self._program, [], 0, 0 if pool is None else pool.threads)
        return observation if self._transfers is None else self._transfers.observed(observation)

    def next(self) -> tuple[Outputs, int] | None:
        transfers = self._transfers
        with self._lock:
            if self._closed:
                return None
            rest = transfers is not None and transfers.pending  # a chunk's batches not yet on the device
            if not rest:
                self._running = True
        if rest:
            assert transfers is not None
            return transfers.take(), 0
        try:
            outputs = next(self._outputs, None)
        except Stopped:
            outputs = None
        finally:
            with self._lock:
                self._running = False
                closed = self._closed
        if closed:
            self._finish()  # close() left it to us: it was running
            return None
        if outputs is None:
            return None
        return (outputs if transfers is None else transfers.take(outputs)), 0

    def release(self, weight: int) -> None:
        pass

    def close(self) -> None:
        self._shutdown.set()
        with self._lock:
            self._closed = True
            running = self._running
            if running:
                self._awaits.cancel()  # an await in progress would not see the shutdown
        if running:
            # `next()` in another thread stops soon and closes the generator; the threads are
            # joined here, as close() joins every thread the loader started.
            self._join_threads()
        else:
            self._finish()

    def _finish(self) -> None:
        with self._lock:  # once: Ctrl-C's closer and the consumer's own close may both come
            if self._finished:
                return
            self._finished = True
        self._outputs.close()
        self._join_threads()
        self._program.release()

    def _join_threads(self) -> None:
        """Stop the early read's and the read pool's threads and join them (idempotent)."""
        if self._early is not None:
            self._early.close()
        if self._pool is not None:
            self._pool.close()


def _watch(engine: weakref.ref[InlineEngine]) -> None:
    """Have Ctrl-C close `engine`, if it is still there."""
    alive = engine()
    if alive is not None:
        interrupts.watch(alive)


def _inline_read_pool(spec: LoaderSpec) -> ReadPool | None:
    """The inline engine's read pool, where reads may run ahead (`ReadOptions`, both above 0)."""
    if not spec.read_options.reads_ahead:
        return None
    from aioloader._program.read_pool import ReadPool  # loaded where it is used

    return ReadPool(spec.read_options.num_threads)


class AsyncInlineEngine:
    """`worker_count=0` for `async for`: the pipeline runs on the loop as it asks (debug mode).

    `aclose()` while an `anext()` awaits a read or an `async def` map cancels
    that await, and the pending `anext()` answers the end.
    """

    def __init__(self, spec: LoaderSpec, position: Position, prefetch: bool = False) -> None:
        self._program = spec.program(None)
        steps, self._early = _started(self._program, spec, position, prefetch)
        self._outputs = AsyncInline(steps)
        self._transfers = None if spec.device_put is None else InlineTransfers(spec.device_put)

    def observe(self) -> Observation:
        observation = observe_program(self._program, [], 0, 0)
        return observation if self._transfers is None else self._transfers.observed(observation)

    async def anext(self) -> tuple[Outputs, int] | None:
        if self._transfers is not None and self._transfers.pending:
            return self._transfers.take(), 0  # the rest of a chunk's batches
        outputs = await self._outputs.anext()
        if outputs is None:
            return None
        return (outputs if self._transfers is None else self._transfers.take(outputs)), 0

    def release(self, weight: int) -> None:
        pass

    def stop(self) -> None:
        pass  # nothing of its own runs on the loop: only what `anext()` awaits, in the consumer's task

    def close(self) -> None:
        # No threads but the early read's; the rest goes with the engine.
        if self._early is not None:
            self._early.close()
        self._program.release()

    async def aclose(self) -> None:
        self._outputs.close()
        if self._early is not None:
            await aclose_elsewhere(self._early.close)  # joins its threads without blocking the loop
        self._program.release()


def _started(
    program: Program, spec: LoaderSpec, position: Position, prefetch: bool
) -> tuple[Steps, EarlyRead | None]:
    """`_inline`, releasing the program's claim of the loader's operations if it fails (a
    thread of the early read that cannot start): no engine will hold them."""
    try:
        return _inline(program, spec, position, prefetch)
    except BaseException:
        program.release()
        raise


def _inline(
    program: Program, spec: LoaderSpec, position: Position, prefetch: bool
) -> tuple[Steps, EarlyRead | None]:
    """The inline driver's steps from `position`, and with `prefetch` the first chunk's
    early read (when reads may run ahead: both `ReadOptions` above 0, a sync source)."""
    buffer = spec.read_options.prefetch_buffer_size
    if not (prefetch and spec.read_options.reads_ahead):
        return inline_steps(program, position, buffer), None
    batch = program.operations.batch
    first = 1 if batch is None else batch.batch_size  # the records of the first output
    job = plan_chunks(program, position, buffer, first)[0].next_job()
    early = None if job is None else program.read_early(job, spec.read_options.num_threads)
    return inline_steps(program, position, buffer, first), early


E = TypeVar("E", SyncEngine, AsyncEngine)
T = TypeVar("T")


class EngineHolder(Generic[E]):
    """The iterator's current engine and whether the iterator is closed, safe from any thread.

    `open` (the consumer) and `take` (`close()` from any thread, or the
    finalizer) exchange the engine under a lock, so that a close never misses
    an engine that is being made. The finalizer closes the engine through
    the holder, without a reference to the iterator, so that garbage
    collection can run it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.engine: E | None = None
        self.closed = False
        # What the threads of each engine it has had carry (`contexts.serve`: the engine's
        # `scheduler`), as long as they live: a thread of an engine that a close or a
        # `set_state` took away still runs the pipeline's code, and must still be known
        # (it would wait for the turn that the consumer holds while it waits for it).
        self.marks: weakref.WeakSet[Any] = weakref.WeakSet()

    def open(self, make: Callable[[], E]) -> E | None:
        """The engine, made by `make()` if there is none yet; None once closed."""
        with self._lock:
            if self.closed:
                return None
            if self.engine is None:
                self.engine = make()
                mark = getattr(self.engine, "scheduler", None)
                if mark is not None:
                    self.marks.add(mark)
            return self.engine

    def unless_closed(self, act: Callable[[], T]) -> T | None:
        """`act()`, or None once closed: a `take()` (a close from any thread) comes wholly
        before or after it, so what `act` hands over is never handed over after a close."""
        with self._lock:
            return None if self.closed else act()

    def reopen(self) -> None:
        """Let `open` make an engine again (`set_state`)."""
        with self._lock:
            self.closed = False

    def take(self) -> E | None:
        """Close the holder and take its engine, for the caller to close."""
        with self._lock:
            self.closed = True
            engine, self.engine = self.engine, None
        if engine is not None:
            interrupts.unwatch(engine)
        return engine

    def close(self) -> None:
        """Close the engine here, joining its threads."""
        engine = self.take()
        if engine is not None:
            engine.close()

    def close_elsewhere(self: EngineHolder[AsyncEngine]) -> None:
        """Close the engine on a closer thread: an async iterator's finalizer runs on
        the event loop's thread (leaving `async for` with `break`), which must not wait.
        It stops here first (see `AsyncEngine.stop`)."""
        stop_elsewhere(self.take())


def stop_elsewhere(engine: AsyncEngine | None) -> None:
    """Stop `engine` now, here, and close it on a closer thread."""
    if engine is not None:
        engine.stop()
        close_elsewhere(engine.close)


def sync_engine(spec: LoaderSpec, position: Position, prefetch: bool = False) -> SyncEngine:
    """The engine for `for`: inline without workers, threads otherwise (stopped by Ctrl-C).

    Threads start working at once; `prefetch` makes the inline engine read
    its first chunk early (see `InlineEngine`).
    """
    if spec.worker_count == 0:
        return InlineEngine(spec, position, prefetch)
    from aioloader._iteration.threaded import threaded_engine  # its modules load with the first workers

    return threaded_engine(spec, position, None, prefetch)


def async_engine(spec: LoaderSpec, position: Position, prefetch: bool = False) -> AsyncEngine:
    """The engine for `async for`, on the running loop (`prefetch` as for `sync_engine`)."""
    if spec.worker_count == 0:
        return AsyncInlineEngine(spec, position, prefetch)
    import asyncio

    from aioloader._iteration.threaded import threaded_engine

    return threaded_engine(spec, position, asyncio.get_running_loop())
