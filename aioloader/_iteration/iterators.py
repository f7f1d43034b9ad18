"""The two faces of a loader: `DataLoaderIterator` (for) and `AsyncDataLoaderIterator` (async for).

They mirror each other name for name (`close`/`aclose`, `__next__`/`__anext__`)
over one shared core, `_Cursor`, which holds the `Outputs` being delivered
and knows the position just past the last output delivered: `get_state()`
is that position.

Outputs are delivered by a plain list iterator over the current `Outputs`'
items: the sync iterator is an `itertools.chain` over those iterators, and
the async one calls `next()` on the current one. How far into the current
`Outputs` the consumer is comes from the list iterator's length hint.

Calls from several threads (or tasks) take turns: one iterator is one
stream, and each output goes to exactly one caller. The sync iterator's
`__next__` takes a lock around chain's own, which is not safe to enter from
two threads at once (before CPython 3.14 a second thread could make chain
drop the generator that the first one was running: a crash); `set_state`
takes the same lock, so that it never lands in the middle of a `next()`.
"""

from __future__ import annotations

import itertools
import operator
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, cast

from aioloader._common import contexts
from aioloader._common.cancellation import Unraised, cancelling
from aioloader._common.failures import Failure
from aioloader._common.positions import Position
from aioloader._common.turns import TaskTurns
from aioloader._iteration.engines import (
    AsyncEngine,
    E,
    EngineHolder,
    SyncEngine,
    async_engine,
    stop_elsewhere,
    sync_engine,
)
from aioloader._iteration.spec import LoaderSpec
from aioloader._iteration.state import check_position, describe, dump_state, load_state, make_state
from aioloader._observability import logs as logs
from aioloader._observability.meter import Meter
from aioloader._program.jobs import Outputs
from aioloader._sampling.leftovers import Detour, Leftovers

if TYPE_CHECKING:
    import asyncio  # at run time only where an event loop is used: `for` never loads asyncio

    from aioloader._observability.statistics import LoaderStatistics, Observation  # when asked for

_EMPTY: list[Any] = []
_chain_next = itertools.chain.__next__
_ITS_THREADS = "one of the same iterator's threads (a worker, or a read thread)"
TURN_CHECK_SECONDS = 0.05  # how often a call waiting for the iterator's turn checks where it came from


class _Cursor(Generic[E]):
    """The `Outputs` being delivered, where the consumer is, and the engine.

    Only the consumer changes the outputs and the position. `close()` from
    another thread closes the engine through the holder and leaves them
    alone (`stop(elsewhere=True)`): the consumer sees the holder closed at
    its next step and stops there.
    """

    def __init__(self, spec: LoaderSpec) -> None:
        self.loader_spec = self.spec = spec  # `spec` is the loader's, or resumed with a detour
        self.detour: Detour | None = None  # after a Grain state that left records behind
        self.ended = False  # the sync iterator's chain has reported its end: it cannot restart
        self.consumer: int | None = None  # the thread that last asked for outputs
        self.restarts = 0  # `set_state` calls: an output awaited before one is dropped
        self.holder: EngineHolder[E] = EngineHolder()
        # Guards `base`, `items`, `after` and `current` together: `get_state()` and
        # `statistics()` may read the position from any thread while the consumer moves
        # to the next `Outputs` (the consumer's `next()` on `current` takes no lock).
        self._view = threading.Lock()
        self.reset((0, 0, 0))
        # The consumer's waits so far, and when the one in progress began (None: not
        # waiting): one tuple, replaced whole, so that another thread reads both at once.
        # A snapshot counts a wait in progress as waiting: the consumer's busy time never
        # goes down (it is a Prometheus counter).
        self.waits: tuple[float, float | None] = (0.0, None)
        self.started()

    def started(self, waiting: float | None = None) -> None:
        """A new engine: the consumer's counters start again with it. Made while the
        consumer waits (in `next()`, since `waiting`), they count from the start of that
        wait: making the engine (lazy imports, starting threads: a second on a loaded
        machine) is time the consumer waits for the loader, not its own."""
        self.meter = Meter("consumer")  # written by the consumer only
        self.since = self.logged = time.perf_counter() if waiting is None else waiting
        self.final: tuple[Observation, float] | None = None  # the figures at the end
        self.waits = (0.0, waiting)
        # The most elapsed and waited seconds a snapshot has reported: a snapshot taken in
        # another thread just as the engine stops reads the clock after the consumer kept
        # its final figures, and the next one must not report less (Prometheus counters).
        self._reported = (0.0, 0.0)
        self._reporting = threading.Lock()

    def statistics(self) -> LoaderStatistics:
        from aioloader._observability.statistics import Observation, snapshot

        engine = self.holder.engine
        waited, since = self.waits
        if engine is not None:
            now = time.perf_counter()
            waited += 0.0 if since is None else now - since
            elapsed, waited = self._never_less(now - self.since, waited)
            return snapshot(engine.observe(), self.meter, elapsed, waited)
        # Stopped: after a close from another thread, the consumer counts the outputs
        # it took from the current `Outputs` only when it next steps; count them here.
        # Before the first `next()` there is no engine yet, and no time counts.
        nothing = Observation((), (), (), 0, 0)
        observation, until = self.final or (nothing, self.since)
        elapsed, waited = self._never_less(until - self.since, waited)
        return snapshot(observation, self.meter, elapsed, waited, self._delivered())

    def _never_less(self, elapsed: float, waited: float) -> tuple[float, float]:
        """`elapsed` and `waited`, or more: at least what an earlier snapshot reported."""
        with self._reporting:
            reported = self._reported = (max(elapsed, self._reported[0]), max(waited, self._reported[1]))
        return reported

    def keep_final(self, engine: SyncEngine | AsyncEngine | None) -> None:
        """The engine stops: keep its last figures (its counters, not its data), as of
        now: `observe()` may wait for a worker holding the scheduler's lock (0.1 s on a
        loaded machine), and that wait is not the consumer's time."""
        if engine is not None:
            now = time.perf_counter()
            self.final = engine.observe(), now

    def waits_from(self, started: float) -> None:
        """The consumer starts waiting for outputs (see `waits`)."""
        self.waits = (self.waits[0], started)

    def waited(self, started: float) -> None:
        """The consumer waited for outputs since `started`; log the statistics if it is time."""
        now = time.perf_counter()
        self.waits = (self.waits[0] + now - started, None)
        if logs.interval is not None and now - self.logged >= logs.interval:
            self.logged = now
            logs.debug(self.statistics().summary())

    @property
    def closed(self) -> bool:
        return self.holder.closed

    def reset(self, position: Position) -> None:
        with self._view:
            self.base = position
            self.items: list[Any] = []
            self.after: Sequence[Position] = ()
            self.current: Iterator[Any] = iter(_EMPTY)
        self.weight = 0
        self.failure: Failure | None = None

    def position(self) -> Position:
        """The position just past the last output delivered (any thread)."""
        with self._view:
            return self._position()

    def _position(self) -> Position:
        """`position()`, holding the view's lock."""
        delivered = len(self.items) - operator.length_hint(self.current)
        return self.after[delivered - 1] if delivered else self.base

    def load(self, outputs: Outputs, weight: int) -> Iterator[Any]:
        """Make `outputs` the current ones (after `finish_outputs`); return their iterator."""
        with self._view:
            self.items, self.after = outputs.items, outputs.after
            self.current = current = iter(self.items)
        self.failure, self.weight = outputs.failure, weight
        return current

    def load_unless_closed(self, found: tuple[Outputs, int] | None) -> Iterator[Any] | None:
        """`load(*found)`, unless `found` is None (the end) or the iterator was closed
        meanwhile, from any thread: then None. Loaded under the holder's lock, so a
        `next()` still pending when `close()` returned never returns an output."""
        if found is None:
            return None
        outputs, weight = found
        return self.holder.unless_closed(lambda: self.load(outputs, weight))

    def finish_outputs(self) -> int:
        """Let go of the current `Outputs`, all delivered; return their weight, to release.

        The consumer holds every one of them now, so they no longer count as
        read ahead: releasing them before waiting for the next `Outputs` is
        what lets a window of one job make progress, and dropping our
        references keeps two `Outputs` from being alive at once.
        """
        with self._view:
            delivered = self._delivered_holding()
            self.base = self._position()
            self.items, self.after, self.current = [], (), iter(_EMPTY)
        self._count_delivered(delivered)
        weight, self.weight = self.weight, 0
        return weight

    def _delivered(self) -> int:
        """The outputs taken from the current `Outputs` (any thread: a moment's view)."""
        with self._view:
            return self._delivered_holding()

    def untake(self, taken_from: Iterator[Any] | None, left: int) -> None:
        """Undo the last `next()` on the current outputs, if it took one: from `taken_from`,
        which held `left` before, or from outputs loaded meanwhile (their first)."""
        with self._view:
            current = self.current
            if current is taken_from:
                taken = operator.length_hint(current) == left - 1
            else:
                taken = self._delivered_holding() == 1
            if taken:
                current.__setstate__(self._delivered_holding() - 1)  # type: ignore[attr-defined]

    def _delivered_holding(self) -> int:
        return max(0, len(self.items) - operator.length_hint(self.current))

    def _count_delivered(self, delivered: int) -> None:
        """Count `delivered` outputs, once they have left the current `Outputs` (so that a
        stopped iterator's `statistics()` never counts them twice)."""
        if delivered:
            self.meter.count("consumer", delivered, 0.0)

    def prefetch(self, make: Callable[[LoaderSpec, Position, bool], E]) -> None:
        """Make the engine now with `make(spec, position, prefetch=True)`, unless there is
        one already or the iterator is closed."""
        self.open_engine(make, prefetch=True)

    def take_failure(self) -> BaseException | None:
        failure, self.failure = self.failure, None
        return None if failure is None else failure.error

    def stop(self, elsewhere: bool = False) -> E | None:
        """Deliver nothing more; return the engine, for the caller to close.

        The consumer (`elsewhere=False`) also empties the current `Outputs` in
        place (their iterator stops with it). Another thread must not touch
        them while the consumer may be taking one: the outputs already handed
        over stay deliverable, and the position stays exact.

        The engine's last figures are kept for `statistics()` (its counters, not its
        data); the outputs delivered count once the consumer stops or finishes them.
        """
        running = self.holder.engine
        self.keep_final(running)  # first: a `statistics()` meanwhile sees the engine or its figures
        engine = self.holder.take()
        if engine is not running:  # made meanwhile
            self.keep_final(engine)
        if not elsewhere:
            with self._view:
                self.base = self._position()
                delivered = self._delivered_holding()
                self.items.clear()
            self.finish_outputs()
            self._count_delivered(delivered)
        return engine

    def open_engine(
        self, make: Callable[[LoaderSpec, Position, bool], E], prefetch: bool = False
    ) -> E | None:
        """The engine (made from the current position if there is none, with the
        consumer's counters started again); None once closed."""

        def fresh() -> E:
            self.started(None if prefetch else self.waits[1])  # `next()` waits since `waits_from`
            return make(self.spec, self.position(), prefetch)

        return self.holder.open(fresh)

    def get_state(self) -> bytes:
        index, skip_elements, skip_outputs = self.position()
        detour = self.detour
        starts = None
        if detour is not None:
            index, starts = detour.true_index(index), list(detour.leftovers.starts)
        spec = self.loader_spec
        return dump_state((index, skip_elements, skip_outputs), starts, spec.description, spec.grain)

    def set_state(self, state: bytes | dict[str, Any]) -> E | None:
        """Restart at `state`'s position; return the engine that ran, for the caller to close."""
        spec = self.loader_spec
        position, starts = load_state(state, spec.description, spec.grain, spec.length)
        check_position(position, spec.description, spec.length)
        detour = None if starts is None else Detour(Leftovers(starts), position[0])
        engine = self.stop()
        self.restarts += 1
        self.spec, self.detour = spec.resumed(detour), detour
        self.reset(position if detour is None else (detour.first, position[1], position[2]))
        self.holder.reopen()
        return engine


def position_of(iterator: DataLoaderIterator | AsyncDataLoaderIterator) -> Position:
    """Where `iterator` stands (after its last output delivered), without making a state:
    what an IterDataset's stage keeps for each element, and turns into a state later."""
    return iterator._cursor.position()


def state_at(iterator: DataLoaderIterator | AsyncDataLoaderIterator, position: Position) -> dict[str, Any]:
    """The state `iterator.get_state()` gave, or would give, at `position` (any thread), as a
    dict (aioloader's part of it): an IterDataset's loaders never resume from a Grain state."""
    return make_state(position, iterator._cursor.loader_spec.description)


def _wait_turn(iterator: DataLoaderIterator, call: str) -> None:
    """A RuntimeError if the pipeline's own code (a transform, a source) made this call, else
    return (for a worker thread of some loader, once the turn is free; the caller then takes
    it): in the caller's thread,
    inside the iterator's `next()` (entered again, `itertools.chain` drops the generator it
    is running: a crash of the interpreter; a `set_state` there ended the iteration early,
    silently), or in one of its workers (which would wait for the `next()` that waits for
    it). A worker may run that code before its engine is made (and known), while the
    consumer holds the turn: so the check comes after each wait, and once holding it."""
    turn = iterator._turn
    # Inside: this thread holds the turn and the generator runs (not merely holds: a
    # KeyboardInterrupt may leave the RLock held once, harmless to the thread that holds it).
    if iterator._outputs.gi_running and turn._is_owned():  # type: ignore[attr-defined]
        raise reentry(
            f"DataLoaderIterator.{call}", "inside the same iterator's next(), in the caller's thread"
        )
    if contexts.runs(iterator):  # a thread that its `start_prefetch()` started (an early read's)
        raise reentry(f"DataLoaderIterator.{call}", _ITS_THREADS)
    serving = contexts.working_for()
    if serving is None:  # not a worker thread (the consumer's): nothing more to check
        return
    acquired = False
    while not acquired:
        acquired = turn.acquire(timeout=TURN_CHECK_SECONDS)
        if _serves(iterator._cursor, serving):
            if acquired:
                turn.release()
            raise reentry(f"DataLoaderIterator.{call}", _ITS_THREADS)
    turn.release()


def _serves(cursor: _Cursor[Any], serving: Any) -> bool:
    """Whether `serving` (what this thread or task works for) is the scheduler of one of
    the iterator's engines, the current one or one a close or `set_state` took away: its
    workers', read threads' and `async def` maps' own code."""
    return serving is not None and serving in cursor.holder.marks


def reentry(call: str, where: str) -> RuntimeError:
    """The error of an iterator's `call` made by the code of its own pipeline, from `where`."""
    return RuntimeError(
        f"{call} was called from {where}: by a transform or the data source of its own "
        "pipeline. Call it from outside the pipeline, between two outputs."
    )


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
    _outputs: Generator[Iterator[Any], None, None]  # the generator chain runs (see `_wait_turn`)
    _turn: threading.RLock

    def __new__(cls, spec: LoaderSpec) -> DataLoaderIterator:
        cursor: _Cursor[SyncEngine] = _Cursor(spec)
        outputs = _each_outputs(cursor)
        self = cast(DataLoaderIterator, cls.from_iterable(outputs))  # an instance of `cls`
        self._cursor, self._outputs = cursor, outputs
        # An RLock for its owner: a transform or source that calls `next()` or `set_state` runs
        # inside `next()` (at worker_count=0), and is refused (see `_wait_turn`).
        self._turn = threading.RLock()
        weakref.finalize(self, EngineHolder.close, cursor.holder)
        return self

    def __init__(self, spec: LoaderSpec) -> None:
        pass  # made in __new__: `chain.from_iterable` builds the instance

    def __iter__(self) -> DataLoaderIterator:
        return self

    def __next__(self) -> Any:
        cursor = self._cursor
        taken_from, left = None, 0
        # Perhaps the pipeline's own code (see `_wait_turn`); else nothing to check.
        if self._outputs.gi_running or contexts.working_for() is not None:  # type: ignore[attr-defined]
            _wait_turn(self, "next()")
        try:
            with self._turn:  # callers in several threads take turns (see the module docstring)
                taken_from = cursor.current
                left = operator.length_hint(taken_from)
                return _chain_next(self)
        except BaseException:
            # A KeyboardInterrupt may land in this frame after the output was taken (Python
            # checks for signals after each call): `get_state()` would count an output the
            # caller never got. Put it back, so that the next `next()` returns it.
            cursor.untake(taken_from, left)
            raise

    def next(self) -> Any:
        """The next output (as `next(iterator)`)."""
        return next(self)

    def start_prefetch(self) -> None:
        """Start filling the pipeline now, before the first `next()`, as Grain's does.

        With workers, they start reading and transforming; with
        `worker_count=0`, the records of the first output are read on other
        threads (the operations still run in the caller's thread, at
        `next()`). Nothing starts when `ReadOptions` allow no read-ahead
        there (a 0), for an async source there, once the pipeline runs, or
        on a closed iterator. Idempotent; never changes the outputs.
        """
        mark = contexts.running(self)  # the threads it starts serve this iterator
        try:
            self._cursor.prefetch(sync_engine)
        finally:
            contexts.done(mark)

    def get_state(self) -> bytes:
        """The position after the last output delivered, as Grain's: a small JSON document,
        as bytes. `set_state` on a loader with the same pipeline, whatever its
        `worker_count`, resumes right there (see `set_state`)."""
        return self._cursor.get_state()

    def __str__(self) -> str:
        return describe(type(self).__name__, self.get_state())

    def set_state(self, state: bytes | dict[str, Any]) -> None:
        """Continue from `state`: what `get_state` of a loader with the same pipeline
        returned (bytes; the dicts of earlier versions too), or what Grain 0.2.18's
        own DataLoader iterator saved for the same sampler and source, with any
        `worker_count`. Every record Grain had not delivered comes next, each once,
        in aioloader's order (after a state of several Grain workers, those they
        left behind their furthest come first, in order).

        What was read ahead is dropped and the pipeline restarts at the state's
        position; a closed iterator is open again, as long as it has not
        reported its end since (StopIteration or an error: an ended
        `itertools.chain` cannot restart): that is a ValueError saying to
        call `set_state` on a new iterator. A state from another pipeline is
        a ValueError that names what differs.
        """
        _wait_turn(self, "set_state()")
        with self._turn:  # after a `next()` running in another thread, never during it
            if self._cursor.ended:
                raise ValueError(
                    "`set_state` cannot restart this DataLoaderIterator: it has ended (at the end of "
                    "the data, after an error, or asked for more after close()); call set_state on a "
                    "new one, iter(loader)."
                )
            _close(self._cursor.set_state(state))

    def statistics(self) -> LoaderStatistics:
        """A snapshot of the pipeline's figures since it started (or restarted with
        `set_state`): each stage's items and busy time, the threads' waits, the
        buffers against their bounds; `.summary()` names the bottleneck. Any
        thread; it never waits for the pipeline."""
        return self._cursor.statistics()

    def close(self) -> None:
        """Stop and join every thread this iterator started, and let go of every
        record it holds. Idempotent; `get_state()` still works afterwards, and
        `set_state()` opens the iterator again.

        Any thread may call it. A `next()` waiting in another thread then
        raises StopIteration, as a closed file's iterator ends (or the
        pipeline's error, if it had failed before); so does every later
        `next()`, once the outputs already handed to the iterator before the
        close (the rest of one chunk's) are delivered: `get_state()` counts
        exactly the outputs that `next()` returned.
        """
        cursor = self._cursor
        _close(cursor.stop(elsewhere=cursor.consumer not in (None, threading.get_ident())))

    def __enter__(self) -> DataLoaderIterator:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _each_outputs(cursor: _Cursor[SyncEngine]) -> Generator[Iterator[Any], None, None]:
    """An iterator over the items of each `Outputs`, in order, for `chain.from_iterable`.

    A failure is raised once the items of its `Outputs` have all been delivered.
    """
    try:
        while True:
            cursor.consumer = threading.get_ident()
            error = cursor.take_failure()
            if error is not None:
                _close(cursor.stop())
                raise error
            started = time.perf_counter()
            cursor.waits_from(started)
            engine = cursor.open_engine(sync_engine)
            if engine is None:
                _close(cursor.stop())  # closed, perhaps from another thread
                return
            engine.release(cursor.finish_outputs())
            try:
                found = engine.next()
            except BaseException:
                _close(cursor.stop())  # KeyboardInterrupt while waiting, or a bug: stop every thread
                raise
            cursor.waited(started)
            items = cursor.load_unless_closed(found)
            if items is None:
                _close(cursor.stop())
                return
            del found, engine  # while suspended, this frame must hold nothing but the items' iterator
            yield items
    finally:
        cursor.ended = True


def _close(engine: SyncEngine | AsyncEngine | None) -> None:
    if engine is not None:
        engine.close()


class AsyncDataLoaderIterator:
    """Iterates a `DataLoader` on the running event loop; see `DataLoader`.

    Workers run the user's code, so other tasks on the loop keep running
    while records are read and transformed. The iterator belongs to the
    event loop on which it started: awaiting it on another (under a second
    `asyncio.run()`) is a RuntimeError. Leaving `async for` early closes it
    without blocking the loop: its threads are joined on a closer thread.
    """

    def __init__(self, spec: LoaderSpec) -> None:
        self._cursor: _Cursor[AsyncEngine] = _Cursor(spec)
        self._loop: asyncio.AbstractEventLoop | None = None  # where the engine runs
        import asyncio  # the async path's own module: `import aioloader` leaves it out

        self._running_loop = asyncio.get_running_loop
        self._turns = TaskTurns()
        self._unraised = Unraised()
        weakref.finalize(self, EngineHolder.close_elsewhere, self._cursor.holder)

    def __aiter__(self) -> AsyncDataLoaderIterator:
        return self

    async def __anext__(self) -> Any:
        # The loaded outputs go to the tasks of the engine's loop only, one at a time: an
        # `anext` under another loop (another thread) would race them for the same output.
        if self._running_loop() is self._loop:
            try:
                return next(self._cursor.current)
            except StopIteration:
                pass
        return await self._advance()

    async def _advance(self) -> Any:
        self._check_loop()  # before taking an output: under another loop, none is taken
        self._refuse_from_pipeline("__anext__")
        async with self._turns.lock():  # another task's `__anext__` waits for this one's
            mark = contexts.running(self)  # what the tasks and threads it starts serve
            try:
                return next(self._cursor.current)  # what the task before this one loaded
            except StopIteration:
                return await self._advance_in_turn()
            finally:
                contexts.done(mark)

    async def _advance_in_turn(self) -> Any:
        cursor = self._cursor
        while True:
            error = self._unraised.error or cursor.take_failure()
            if error is not None:
                await self._unraised.after(self.aclose(), error)
            self._check_loop()
            started, restarts = time.perf_counter(), cursor.restarts
            cursor.waits_from(started)
            engine = cursor.open_engine(self._make_engine)
            if engine is None:
                await self.aclose()
                raise StopAsyncIteration
            engine.release(cursor.finish_outputs())
            try:
                found = await engine.anext()
            except BaseException as stopped:
                if cancelling(stopped):
                    # A timeout around `anext`: the engine runs on, and the next `__anext__`
                    # takes what it makes; nothing is lost.
                    raise
                await self._unraised.after(self.aclose(), stopped)
            if cursor.restarts != restarts:
                continue  # `set_state` from another task meanwhile: its engine, not this one
            cursor.waited(started)
            items = cursor.load_unless_closed(found)
            if items is None:  # the end, or aclose() while we waited
                await self.aclose()
                raise StopAsyncIteration
            for output in items:
                return output

    def _make_engine(self, spec: LoaderSpec, position: Position, prefetch: bool = False) -> AsyncEngine:
        import asyncio  # here and below: `for` never loads asyncio

        self._loop = asyncio.get_running_loop()
        return async_engine(spec, position, prefetch)

    def _check_loop(self) -> None:
        import asyncio

        if self._cursor.holder.engine is not None and self._loop is not asyncio.get_running_loop():
            raise RuntimeError(
                "this AsyncDataLoaderIterator belongs to another event loop: its workers hand their "
                "outputs to the loop it started on (an earlier asyncio.run()?). Iterate it on that "
                "loop, or call set_state(get_state()) to restart it on this one where it stood."
            )

    def start_prefetch(self) -> None:
        """As `DataLoaderIterator.start_prefetch`; call it on the loop that iterates
        (in a coroutine): with workers, asynchronous steps run on that loop."""
        import asyncio

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "AsyncDataLoaderIterator.start_prefetch() must be called on the event loop that "
                "iterates it (from a coroutine); no event loop is running in this thread."
            ) from None
        self._check_loop()
        mark = contexts.running(self)  # the threads it starts serve this iterator
        try:
            self._cursor.prefetch(self._make_engine)
        finally:
            contexts.done(mark)

    def get_state(self) -> bytes:
        """The position after the last output delivered, as Grain's: a small JSON document,
        as bytes. `set_state` on a loader with the same pipeline, whatever its
        `worker_count`, resumes right there (see `set_state`)."""
        return self._cursor.get_state()

    def __str__(self) -> str:
        return describe(type(self).__name__, self.get_state())

    def set_state(self, state: bytes | dict[str, Any]) -> None:
        """Continue from `state`, as `DataLoaderIterator.set_state` (Grain's states too).

        What was read ahead is dropped and the pipeline restarts at the state's
        position; a closed iterator is open again. A state from another
        pipeline is a ValueError that names what differs. The threads that
        ran are joined on a closer thread, not on the loop.
        """
        self._refuse_from_pipeline("set_state()")
        stop_elsewhere(self._cursor.set_state(state))
        self._unraised.error = None  # a restart: an error the old run could not raise is its own

    def _refuse_from_pipeline(self, call: str) -> None:
        """A RuntimeError if the pipeline's own code made this call: awaited inside this
        iterator's `__anext__` (at `worker_count=0`, or by a task it started: they inherit its
        context), it would wait for the turn that `__anext__` holds; from a worker thread or
        an `async def` map's task, for outputs that it makes itself. A `set_state` there
        restarted the run under the `__anext__` running it: data repeated, or ended early."""
        if contexts.runs(self):
            raise reentry(
                f"AsyncDataLoaderIterator.{call}",
                "inside the same iterator's __anext__ (or a worker it started)",
            )
        if _serves(self._cursor, contexts.working_for()):
            raise reentry(f"AsyncDataLoaderIterator.{call}", _ITS_THREADS)

    def statistics(self) -> LoaderStatistics:
        """A snapshot of the pipeline's figures since it started (or restarted with
        `set_state`): each stage's items and busy time, the threads' waits, the
        buffers against their bounds; `.summary()` names the bottleneck. Any
        thread; it never waits for the pipeline."""
        return self._cursor.statistics()

    async def aclose(self) -> None:
        """Stop the pipeline, wait for every thread this iterator started, and let go
        of every record it holds. Idempotent; `get_state()` still works afterwards,
        and `set_state()` opens the iterator again.

        An `__anext__` awaiting in another task meanwhile raises
        StopAsyncIteration (or the pipeline's error, if it had failed before).
        The threads are joined on a closer thread, so the loop stays free.
        """
        engine = self._cursor.stop()
        if engine is not None:
            await engine.aclose()

    async def __aenter__(self) -> AsyncDataLoaderIterator:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
