"""The two faces of a loader: `DataLoaderIterator` (for) and `AsyncDataLoaderIterator` (async for).

They mirror each other name for name (`close`/`aclose`, `__next__`/`__anext__`)
over one shared core, `_Cursor`, which holds the unit of outputs being
delivered and knows the position just past the last output delivered:
`get_state()` is that position.

Outputs are delivered by a plain list iterator over the current unit, so the
cost per output is C's, not a Python method's: the sync iterator is an
`itertools.chain` over the units (its `__next__` is chain's), and the async
one calls `next()` on the unit's iterator. How far into the unit the consumer
is comes from the list iterator's length hint.
"""

from __future__ import annotations

import itertools
import operator
import weakref
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from aioloader._common.failures import Failure
from aioloader._common.positions import Position
from aioloader._iteration import interrupts as interrupts
from aioloader._iteration.engines import AsyncEngine, EngineHolder, SyncEngine, async_engine, sync_engine
from aioloader._iteration.state import make_state, read_state
from aioloader._program.program import Outputs

if TYPE_CHECKING:
    from aioloader._loader import DataLoader

_EMPTY: list[Any] = []


class _Cursor:
    """The unit of outputs being delivered, where the consumer is, and the engine."""

    def __init__(self, loader: DataLoader) -> None:
        self.loader = loader
        self.closed = False
        self.holder = EngineHolder()
        self.reset((0, 0, 0))

    def reset(self, position: Position) -> None:
        self.base = position
        self.items: list[Any] = []
        self.after: Sequence[Position] = ()
        self.current: Iterator[Any] = iter(_EMPTY)
        self.weight = 0
        self.failure: Failure | None = None

    def position(self) -> Position:
        """The position just past the last output delivered."""
        delivered = len(self.items) - operator.length_hint(self.current)
        return self.after[delivered - 1] if delivered else self.base

    def load(self, outputs: Outputs, weight: int) -> Iterator[Any]:
        """Make `outputs` the current unit (after `finish_unit`); return its iterator."""
        self.items, self.after, self.failure, self.weight = (
            outputs.items,
            outputs.after,
            outputs.failure,
            weight,
        )
        self.current = iter(self.items)
        return self.current

    def finish_unit(self) -> int:
        """Let go of the current unit, all delivered; return its weight, to release.

        The consumer holds every output of it now, so it no longer counts as
        read ahead: releasing it before waiting for the next unit is what lets
        a window of one unit make progress, and dropping our references keeps
        two units from being alive at once.
        """
        self.base = self.position()
        self.items, self.after, self.current = [], (), iter(_EMPTY)
        weight, self.weight = self.weight, 0
        return weight

    def take_failure(self) -> BaseException | None:
        failure, self.failure = self.failure, None
        return None if failure is None else failure.error

    def stop(self) -> None:
        """Deliver nothing more: empty the current unit in place (its iterator
        stops with it), and close the engine."""
        self.closed = True
        self.base = self.position()
        self.items.clear()
        self.finish_unit()
        self.holder.close()

    def get_state(self) -> dict[str, Any]:
        return make_state(self.position(), self.loader.describe())

    def set_state(self, state: dict[str, Any]) -> None:
        position = read_state(state, self.loader.describe())
        length = self.loader.walk.length
        if length is not None and position[0] > length:
            raise ValueError(f"`state` is at index {position[0]}, past the sampler's length {length}.")
        self.stop()
        self.reset(position)
        self.closed = False


class DataLoaderIterator(itertools.chain):  # type: ignore[type-arg]
    """Iterates a `DataLoader` in the caller's thread; see `DataLoader`.

    `get_state()` / `set_state()` checkpoint and resume it; `close()` stops
    and joins every thread it started (leaving the loop early or dropping the
    iterator does too).
    """

    _cursor: _Cursor

    def __new__(cls, loader: DataLoader) -> DataLoaderIterator:
        cursor = _Cursor(loader)
        self = cast(DataLoaderIterator, cls.from_iterable(_units(cursor)))  # an instance of `cls`
        self._cursor = cursor
        weakref.finalize(self, EngineHolder.close, cursor.holder)
        return self

    def __init__(self, loader: DataLoader) -> None:
        pass  # made in __new__: `chain.from_iterable` builds the instance

    def __iter__(self) -> DataLoaderIterator:
        return self

    def next(self) -> Any:
        """The next output (as `next(iterator)`)."""
        return next(self)

    def get_state(self) -> dict[str, Any]:
        """A small JSON-serialisable state: `set_state` on a loader with the same pipeline,
        whatever its `worker_count`, resumes right after the last output delivered."""
        return self._cursor.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from `state`, made by `get_state` of a loader with the same pipeline."""
        self._cursor.set_state(state)

    def close(self) -> None:
        """Stop and join every thread this iterator started, and let go of every
        record it holds. Idempotent; `get_state()` still works afterwards."""
        self._cursor.stop()

    def __enter__(self) -> DataLoaderIterator:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _units(cursor: _Cursor) -> Iterator[Iterator[Any]]:
    """The iterators of the units of outputs, in order, for `chain.from_iterable`.

    A failure is raised once its unit's outputs have all been delivered.
    """
    while True:
        error = cursor.take_failure()
        if error is not None:
            cursor.stop()
            raise error
        if cursor.closed:
            return
        if cursor.holder.engine is None:
            cursor.holder.engine = sync_engine(cursor.loader, cursor.position())
        engine: SyncEngine = cursor.holder.engine
        engine.release(cursor.finish_unit())
        try:
            found = engine.next()
        except BaseException:
            cursor.stop()  # KeyboardInterrupt while waiting, or a bug: stop every thread
            raise
        if found is None:
            cursor.stop()
            return
        unit = cursor.load(*found)
        del found, engine  # while suspended, this frame must hold nothing but the unit's iterator
        yield unit


class AsyncDataLoaderIterator:
    """Iterates a `DataLoader` on the running event loop; see `DataLoader`.

    Workers run the user's code, so other tasks on the loop keep running
    while records are read and transformed.
    """

    def __init__(self, loader: DataLoader) -> None:
        self._cursor = _Cursor(loader)
        weakref.finalize(self, EngineHolder.close, self._cursor.holder)

    def __aiter__(self) -> AsyncDataLoaderIterator:
        return self

    async def __anext__(self) -> Any:
        try:
            return next(self._cursor.current)
        except StopIteration:
            return await self._advance()

    async def _advance(self) -> Any:
        cursor = self._cursor
        while True:
            error = cursor.take_failure()
            if error is not None:
                await self.aclose()
                raise error
            if cursor.closed:
                raise StopAsyncIteration
            if cursor.holder.engine is None:
                cursor.holder.engine = async_engine(cursor.loader, cursor.position())
            engine: AsyncEngine = cursor.holder.engine
            engine.release(cursor.finish_unit())
            try:
                found = await engine.anext()
            except BaseException:
                await self.aclose()
                raise
            if found is None:
                await self.aclose()
                raise StopAsyncIteration
            for output in cursor.load(*found):
                return output

    def get_state(self) -> dict[str, Any]:
        """A small JSON-serialisable state: `set_state` on a loader with the same pipeline,
        whatever its `worker_count`, resumes right after the last output delivered."""
        return self._cursor.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from `state`, made by `get_state` of a loader with the same pipeline."""
        self._cursor.set_state(state)

    async def aclose(self) -> None:
        """Stop the pipeline, wait for every thread this iterator started, and let go
        of every record it holds. Idempotent; `get_state()` still works afterwards."""
        cursor = self._cursor
        engine, cursor.holder.engine = cursor.holder.engine, None
        cursor.stop()
        if engine is not None:
            await engine.aclose()
            interrupts.unwatch(engine)

    async def __aenter__(self) -> AsyncDataLoaderIterator:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
