"""The two faces of a loader: `DataLoaderIterator` (for) and `AsyncDataLoaderIterator` (async for).

They mirror each other name for name (`close`/`aclose`, `__next__`/`__anext__`)
over one shared core, `_Cursor`, which holds the `Outputs` being delivered
and knows the position just past the last output delivered: `get_state()`
is that position.

Outputs are delivered by a plain list iterator over the current `Outputs`'
items, so the cost per output is C's, not a Python method's: the sync
iterator is an `itertools.chain` over those iterators (its `__next__` is
chain's), and the async one calls `next()` on the current one. How far into
the current `Outputs` the consumer is comes from the list iterator's length
hint.
"""

from __future__ import annotations

import itertools
import operator
import time
import weakref
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any, Generic, cast

from aioloader._common.failures import Failure
from aioloader._common.positions import Position
from aioloader._iteration import interrupts as interrupts
from aioloader._iteration.engines import AsyncEngine, E, EngineHolder, SyncEngine, async_engine, sync_engine
from aioloader._iteration.spec import LoaderSpec
from aioloader._iteration.state import make_state, read_state
from aioloader._observability import logs as logs
from aioloader._observability.meter import Meter
from aioloader._observability.statistics import LoaderStatistics, Observation, snapshot
from aioloader._program.jobs import Outputs

_EMPTY: list[Any] = []
_NOTHING = Observation((), (), (), 0, 0)  # before the first `next()`: no engine yet


class _Cursor(Generic[E]):
    """The `Outputs` being delivered, where the consumer is, and the engine."""

    def __init__(self, spec: LoaderSpec) -> None:
        self.spec = spec
        self.closed = False
        self.ended = False  # the sync iterator's chain has reported its end: it cannot restart
        self.holder: EngineHolder[E] = EngineHolder()
        self.reset((0, 0, 0))
        self.started()

    def started(self) -> None:
        """A new engine: the consumer's counters start again with it."""
        self.meter = Meter("consumer")  # written by the consumer only
        self.since = self.logged = time.perf_counter()
        self.final: tuple[Observation, float] | None = None  # the figures at the end

    def statistics(self) -> LoaderStatistics:
        engine = self.holder.engine
        if engine is not None:
            return snapshot(engine.observe(), self.meter, time.perf_counter() - self.since)
        observation, until = self.final or (_NOTHING, time.perf_counter())
        return snapshot(observation, self.meter, until - self.since)

    def keep_final(self, engine: SyncEngine | AsyncEngine | None) -> None:
        """The engine stops: keep its last figures (its counters, not its data)."""
        if engine is not None:
            self.final = engine.observe(), time.perf_counter()

    def waited(self, started: float) -> None:
        """The consumer waited for outputs since `started`; log the statistics if it is time."""
        now = time.perf_counter()
        self.meter.waiting_for_input += now - started
        if logs.interval is not None and now - self.logged >= logs.interval:
            self.logged = now
            logs.logger.debug("%s", self.statistics().summary())

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
        """Make `outputs` the current ones (after `finish_outputs`); return their iterator."""
        self.items, self.after, self.failure, self.weight = (
            outputs.items,
            outputs.after,
            outputs.failure,
            weight,
        )
        self.current = iter(self.items)
        return self.current

    def finish_outputs(self) -> int:
        """Let go of the current `Outputs`, all delivered; return their weight, to release.

        The consumer holds every one of them now, so they no longer count as
        read ahead: releasing them before waiting for the next `Outputs` is
        what lets a window of one job make progress, and dropping our
        references keeps two `Outputs` from being alive at once.
        """
        self._count_delivered()
        self.base = self.position()
        self.items, self.after, self.current = [], (), iter(_EMPTY)
        weight, self.weight = self.weight, 0
        return weight

    def _count_delivered(self) -> None:
        delivered = len(self.items) - operator.length_hint(self.current)
        if delivered:
            self.meter.count("consumer", delivered, 0.0)

    def take_failure(self) -> BaseException | None:
        failure, self.failure = self.failure, None
        return None if failure is None else failure.error

    def stop(self) -> None:
        """Deliver nothing more: empty the current `Outputs` in place (their iterator
        stops with it), and close the engine."""
        self.closed = True
        self.base = self.position()
        self._count_delivered()
        self.items.clear()
        self.finish_outputs()
        self.keep_final(self.holder.engine)
        self.holder.close()

    def get_state(self) -> dict[str, Any]:
        return make_state(self.position(), self.spec.description)

    def set_state(self, state: dict[str, Any]) -> None:
        position = read_state(state, self.spec.description)
        length = self.spec.length
        if length is not None and position[0] > length:
            raise ValueError(f"`state` is at index {position[0]}, past the sampler's length {length}.")
        self.stop()
        self.reset(position)
        self.closed = False


class DataLoaderIterator(itertools.chain[Any]):
    """Iterates a `DataLoader` in the caller's thread; see `DataLoader`.

    `next()` blocks the calling thread until the next output is ready (with
    `worker_count=0`, it computes it there). It raises the user's exception
    from a read or a transform once every output before it was delivered,
    with a note naming the record, and then the iterator is closed; it raises
    StopIteration at the end. `get_state()` / `set_state()` checkpoint and
    resume it; `close()` stops and joins every thread it started (leaving the
    loop early or dropping the iterator does too).
    """

    _cursor: _Cursor[SyncEngine]

    def __new__(cls, spec: LoaderSpec) -> DataLoaderIterator:
        cursor: _Cursor[SyncEngine] = _Cursor(spec)
        self = cast(DataLoaderIterator, cls.from_iterable(_each_outputs(cursor)))  # an instance of `cls`
        self._cursor = cursor
        weakref.finalize(self, EngineHolder.close, cursor.holder)
        return self

    def __init__(self, spec: LoaderSpec) -> None:
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
        """Continue from `state`, made by `get_state` of a loader with the same pipeline.

        What was read ahead is dropped and the pipeline restarts at the state's
        position; a closed iterator is open again, as long as it has not
        reported its end since (StopIteration or an error: an ended
        `itertools.chain` cannot restart): that is a ValueError saying to
        call `set_state` on a new iterator. A state from another pipeline is
        a ValueError that names what differs.
        """
        if self._cursor.ended:
            raise ValueError(
                "`set_state` cannot restart this DataLoaderIterator: it has ended (at the end of "
                "the data, after an error, or asked for more after close()); call set_state on a "
                "new one, iter(loader)."
            )
        self._cursor.set_state(state)

    def statistics(self) -> LoaderStatistics:
        """A snapshot of the pipeline's figures since it started (or restarted with
        `set_state`): each stage's items and busy time, the threads' waits, the
        buffers against their bounds; `.summary()` names the bottleneck. Any
        thread; it never waits for the pipeline."""
        return self._cursor.statistics()

    def close(self) -> None:
        """Stop and join every thread this iterator started, and let go of every
        record it holds. Idempotent; `get_state()` still works afterwards, and
        `set_state()` opens the iterator again."""
        self._cursor.stop()

    def __enter__(self) -> DataLoaderIterator:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _each_outputs(cursor: _Cursor[SyncEngine]) -> Iterator[Iterator[Any]]:
    """An iterator over the items of each `Outputs`, in order, for `chain.from_iterable`.

    A failure is raised once the items of its `Outputs` have all been delivered.
    """
    try:
        while True:
            error = cursor.take_failure()
            if error is not None:
                cursor.stop()
                raise error
            if cursor.closed:
                return
            engine = cursor.holder.engine
            if engine is None:
                cursor.started()
                engine = cursor.holder.engine = sync_engine(cursor.spec, cursor.position())
            engine.release(cursor.finish_outputs())
            started = time.perf_counter()
            try:
                found = engine.next()
            except BaseException:
                cursor.stop()  # KeyboardInterrupt while waiting, or a bug: stop every thread
                raise
            cursor.waited(started)
            if found is None:
                cursor.stop()
                return
            items = cursor.load(*found)
            del found, engine  # while suspended, this frame must hold nothing but the items' iterator
            yield items
    finally:
        cursor.ended = True


class AsyncDataLoaderIterator:
    """Iterates a `DataLoader` on the running event loop; see `DataLoader`.

    Workers run the user's code, so other tasks on the loop keep running
    while records are read and transformed.
    """

    def __init__(self, spec: LoaderSpec) -> None:
        self._cursor: _Cursor[AsyncEngine] = _Cursor(spec)
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
            engine = cursor.holder.engine
            if engine is None:
                cursor.started()
                engine = cursor.holder.engine = async_engine(cursor.spec, cursor.position())
            engine.release(cursor.finish_outputs())
            started = time.perf_counter()
            try:
                found = await engine.anext()
            except BaseException:
                await self.aclose()
                raise
            cursor.waited(started)
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
        """Continue from `state`, made by `get_state` of a loader with the same pipeline.

        What was read ahead is dropped and the pipeline restarts at the state's
        position; a closed iterator is open again. A state from another
        pipeline is a ValueError that names what differs.
        """
        self._cursor.set_state(state)

    def statistics(self) -> LoaderStatistics:
        """A snapshot of the pipeline's figures since it started (or restarted with
        `set_state`): each stage's items and busy time, the threads' waits, the
        buffers against their bounds; `.summary()` names the bottleneck. Any
        thread; it never waits for the pipeline."""
        return self._cursor.statistics()

    async def aclose(self) -> None:
        """Stop the pipeline, wait for every thread this iterator started, and let go
        of every record it holds. Idempotent; `get_state()` still works afterwards,
        and `set_state()` opens the iterator again."""
        cursor = self._cursor
        engine, cursor.holder.engine = cursor.holder.engine, None
        cursor.keep_final(engine)
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
