"""The two faces of a loader: `DataLoaderIterator` (for) and `AsyncDataLoaderIterator` (async for).

They mirror each other name for name (`close`/`aclose`, `__next__`/`__anext__`)
over one shared core, `_Cursor`, which holds the outputs being delivered and
the position just past the last one delivered: `get_state()` is that
position. Delivering an output from the current unit is a list index and a
counter, so the per-output cost stays near a plain generator's.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from aioloader import _interrupts as interrupts
from aioloader._failures import Failure
from aioloader._inline import arun_inline, inline_steps, run_inline
from aioloader._loop_thread import AsyncSegments, LoopThread
from aioloader._pipeline import Pipeline
from aioloader._positions import Position
from aioloader._program import Outputs
from aioloader._state import make_state, read_state
from aioloader._workers import WorkerThreads, thread_runner

if TYPE_CHECKING:
    from aioloader._loader import DataLoader


class _Cursor:
    """The unit of outputs being delivered, and where the consumer is."""

    def __init__(self, loader: DataLoader) -> None:
        self._loader = loader
        self._closed = False
        self._reset((0, 0, 0))

    def _reset(self, position: Position) -> None:
        self._base = position
        self._items: list[Any] = []
        self._after: Sequence[Position] = ()
        self._count = self._j = self._weight = 0
        self._failure: Failure | None = None

    def _position(self) -> Position:
        return self._after[self._j - 1] if self._j else self._base

    def _load(self, outputs: Outputs, weight: int) -> None:
        """Make `outputs` current (after `_finish_unit`)."""
        self._items, self._after, self._failure = outputs.items, outputs.after, outputs.failure
        self._count, self._j, self._weight = len(outputs.items), 0, weight

    def _finish_unit(self) -> int:
        """Let go of the current unit, all delivered; return its weight, to release.

        The consumer holds every output of it now, so it no longer counts as
        read ahead: releasing it before waiting for the next unit is what lets
        a window of one unit make progress, and dropping our references keeps
        two units from being alive at once.
        """
        self._base = self._position()
        self._items, self._after, self._count, self._j = [], (), 0, 0
        weight, self._weight = self._weight, 0
        return weight

    def _take_failure(self) -> BaseException | None:
        failure, self._failure = self._failure, None
        return None if failure is None else failure.error

    def get_state(self) -> dict[str, Any]:
        """A small JSON-serialisable state; `set_state` on a fresh loader resumes right after
        the last output delivered, whatever its `worker_count`."""
        return make_state(self._position(), self._loader.describe())

    def _checked_position(self, state: dict[str, Any]) -> Position:
        position = read_state(state, self._loader.describe())
        length = self._loader.sampler.length
        if length is not None and position[0] > length:
            raise ValueError(f"`state` is at index {position[0]}, past the sampler's length {length}.")
        return position


class _ThreadedEngine:
    """Worker threads over the pipeline's scheduler, and an event loop for async segments.

    For `for`, the loop is a background thread started only if the program
    has asynchronous segments; for `async for` it is the caller's loop.
    """

    def __init__(
        self, loader: DataLoader, position: Position, loop: asyncio.AbstractEventLoop | None
    ) -> None:
        program = loader.program()
        self.pipeline = Pipeline(program, position, loader.read_options, loader.worker_count)
        self._loop_thread: LoopThread | None = None
        self._segments: AsyncSegments | None = None
        if self.pipeline.needs_async_runner:
            if loop is None:
                self._loop_thread = LoopThread()
                loop = self._loop_thread.loop
            self._segments = AsyncSegments(self.pipeline, loop)
            self.pipeline.use_async_runner(self._segments)
        self._workers = WorkerThreads(
            self.pipeline, thread_runner(program), loader.worker_count, "aioloader-worker"
        )

    def next(self) -> tuple[Outputs, int] | None:
        return self.pipeline.get()

    async def anext(self) -> tuple[Outputs, int] | None:
        return await self.pipeline.aget()

    def release(self, weight: int) -> None:
        if weight:
            self.pipeline.release(weight)

    def _stop(self) -> None:
        self.pipeline.close()
        if self._segments is not None:
            self._segments.cancel()

    def close(self) -> None:
        """Stop everything and join every thread (any thread may call it)."""
        self._stop()
        self._workers.join()
        if self._loop_thread is not None:
            self._loop_thread.close()
        interrupts.unwatch(self)

    async def aclose(self) -> None:
        """`close` on the consumer's loop: waits for the workers without blocking it."""
        self._stop()
        deadline = time.monotonic() + 2.0
        while self._workers.alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.001)


class _InlineEngine:
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


class _AsyncInlineEngine:
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


class _Holder:
    """Owns the current engine; the iterator's finalizer closes it without a reference
    to the iterator itself, so that garbage collection can run it."""

    def __init__(self) -> None:
        self.engine: Any = None

    def close(self) -> None:
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.close()


class DataLoaderIterator(_Cursor):
    """Iterates a `DataLoader` in the caller's thread; see `DataLoader`."""

    def __init__(self, loader: DataLoader) -> None:
        super().__init__(loader)
        self._holder = _Holder()
        self._finalizer = weakref.finalize(self, _Holder.close, self._holder)

    def __iter__(self) -> DataLoaderIterator:
        return self

    def __next__(self) -> Any:
        j = self._j
        if j < self._count:
            self._j = j + 1
            return self._items[j]
        return self._advance()

    def next(self) -> Any:
        """The next output (as `next(iterator)`)."""
        return self.__next__()

    def _advance(self) -> Any:
        while True:
            error = self._take_failure()
            if error is not None:
                self.close()
                raise error
            if self._closed:
                raise StopIteration
            engine = self._engine()
            engine.release(self._finish_unit())
            try:
                found = engine.next()
            except BaseException:
                self.close()  # KeyboardInterrupt while waiting, or a bug: stop every thread
                raise
            if found is None:
                self.close()
                raise StopIteration
            self._load(*found)
            if self._count:
                self._j = 1
                return self._items[0]

    def _engine(self) -> _InlineEngine | _ThreadedEngine:
        if self._holder.engine is None:
            if self._loader.worker_count == 0:
                self._holder.engine = _InlineEngine(self._loader, self._position())
            else:
                self._holder.engine = _ThreadedEngine(self._loader, self._position(), None)
                interrupts.watch(self._holder.engine)
        engine: _InlineEngine | _ThreadedEngine = self._holder.engine
        return engine

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from `state` (made by `get_state` of a loader with the same pipeline)."""
        position = self._checked_position(state)
        self._holder.close()
        self._reset(position)
        self._closed = False

    def close(self) -> None:
        """Stop and join every thread this iterator started, and let go of every
        record it holds. Idempotent; `get_state()` still works afterwards."""
        self._closed = True
        self._finish_unit()
        self._holder.close()

    def __enter__(self) -> DataLoaderIterator:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncDataLoaderIterator(_Cursor):
    """Iterates a `DataLoader` on the running event loop; see `DataLoader`.

    Workers run the user's code, so other tasks on the loop keep running
    while records are read and transformed.
    """

    def __init__(self, loader: DataLoader) -> None:
        super().__init__(loader)
        self._holder = _Holder()
        self._finalizer = weakref.finalize(self, _Holder.close, self._holder)

    def __aiter__(self) -> AsyncDataLoaderIterator:
        return self

    async def __anext__(self) -> Any:
        j = self._j
        if j < self._count:
            self._j = j + 1
            return self._items[j]
        return await self._advance()

    async def _advance(self) -> Any:
        while True:
            error = self._take_failure()
            if error is not None:
                await self.aclose()
                raise error
            if self._closed:
                raise StopAsyncIteration
            engine = self._engine()
            engine.release(self._finish_unit())
            try:
                found = await engine.anext()
            except BaseException:
                await self.aclose()
                raise
            if found is None:
                await self.aclose()
                raise StopAsyncIteration
            self._load(*found)
            if self._count:
                self._j = 1
                return self._items[0]

    def _engine(self) -> _AsyncInlineEngine | _ThreadedEngine:
        if self._holder.engine is None:
            if self._loader.worker_count == 0:
                self._holder.engine = _AsyncInlineEngine(self._loader, self._position())
            else:
                self._holder.engine = _ThreadedEngine(
                    self._loader, self._position(), asyncio.get_running_loop()
                )
        engine: _AsyncInlineEngine | _ThreadedEngine = self._holder.engine
        return engine

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from `state` (made by `get_state` of a loader with the same pipeline)."""
        position = self._checked_position(state)
        self._holder.close()
        self._reset(position)
        self._closed = False

    async def aclose(self) -> None:
        """Stop the pipeline, wait for every thread this iterator started, and let go
        of every record it holds. Idempotent; `get_state()` still works afterwards."""
        self._closed = True
        self._finish_unit()
        engine, self._holder.engine = self._holder.engine, None
        if engine is not None:
            await engine.aclose()

    async def __aenter__(self) -> AsyncDataLoaderIterator:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
