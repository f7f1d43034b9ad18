"""The two faces of a loader: `DataLoaderIterator` (for) and `AsyncDataLoaderIterator` (async for).

They mirror each other name for name (`close`/`aclose`, `__next__`/`__anext__`)
over one shared core, `_Cursor`, which holds the outputs being delivered and
the position just past the last one delivered: `get_state()` is that
position. Delivering an output from the current unit is a list index and a
counter, so the per-output cost stays near a plain generator's.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from aioloader import _interrupts as interrupts
from aioloader._failures import Failure
from aioloader._inline import InlineExecutor, inline_outputs
from aioloader._loop_thread import LoopThread
from aioloader._pipeline import Executor, Pipeline
from aioloader._positions import Position
from aioloader._program import Outputs
from aioloader._state import make_state, read_state
from aioloader._thread_executor import ThreadExecutor

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


class _SyncEngine:
    """Where a sync iterator's outputs come from: inline, or a loop thread."""

    def __init__(self, loader: DataLoader, position: Position) -> None:
        self._thread: LoopThread | None = None
        self._inline: Iterator[Outputs] | None = None
        if loader.worker_count == 0:
            self._inline = inline_outputs(
                loader.program(), position, loader.read_options.prefetch_buffer_size
            )
        else:
            self._thread = LoopThread(lambda: _start_pipeline(loader, position))
            interrupts.watch(self)

    def next(self) -> tuple[Outputs, int] | None:
        if self._inline is not None:
            return next(((outputs, 0) for outputs in self._inline), None)
        assert self._thread is not None
        return self._thread.get()

    def release(self, weight: int) -> None:
        if self._thread is not None and weight:
            self._thread.release(weight)

    def close(self) -> None:
        if self._thread is not None:
            self._thread.close()
            interrupts.unwatch(self)
        if self._inline is not None:
            self._inline.close()  # type: ignore[attr-defined]


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

    def _engine(self) -> _SyncEngine:
        if self._holder.engine is None:
            self._holder.engine = _SyncEngine(self._loader, self._position())
        engine: _SyncEngine = self._holder.engine
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


class _AsyncEngine:
    """A pipeline on the caller's event loop, with its executor."""

    def __init__(self, loader: DataLoader, position: Position) -> None:
        self.loop = asyncio.get_running_loop()
        self.pipeline, self.executor = _start_pipeline(loader, position)

    def close(self) -> None:
        """Stop from any thread (garbage collection, `set_state`): cancel on the loop, join workers."""
        self.executor.close()
        with contextlib.suppress(RuntimeError):  # a closed loop took its tasks with it
            self.loop.call_soon_threadsafe(lambda: self.loop.create_task(self.pipeline.aclose()))

    async def aclose(self) -> None:
        await self.pipeline.aclose()
        await self.executor.aclose()


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
            if self._holder.engine is None:
                self._holder.engine = _AsyncEngine(self._loader, self._position())
            engine: _AsyncEngine = self._holder.engine
            if weight := self._finish_unit():
                engine.pipeline.release(weight)
            try:
                found = await engine.pipeline.next()
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


def _start_pipeline(loader: DataLoader, position: Position) -> tuple[Pipeline, Executor]:
    """A new program, executor and pipeline from `position` (call on the loop that runs it)."""
    program = loader.program()
    workers = loader.worker_count
    executor: Executor = (
        InlineExecutor(program) if workers == 0 else ThreadExecutor(program, workers, "aioloader")
    )
    return Pipeline(program, executor, position, loader.read_options, max(1, workers)), executor
