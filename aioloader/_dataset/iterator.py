"""The iterators of an IterDataset: `DatasetIterator` (for) and `AsyncDatasetIterator` (async for).

They mirror each other name for name (`close`/`aclose`, `__next__`/`__anext__`), as the
DataLoader's iterators do. Each runs one compiled pipeline, built afresh by `set_state`:

* a pipeline that is one parallel part runs as its DataLoader's iterator: the engine's
  worker threads, the caller's loop for `async for`, the engine's device thread for
  `device_put`;
* a pipeline with stages that run in order (a mix, a packer, ...) runs them in the
  caller's thread as it asks, for `for`; for `async for`, or with `device_put`, a thread
  of its own (`aioloader-dataset-{n}`) runs them a few outputs ahead (`Background`), so
  that the loop stays free and the transfer overlaps the training step.

The state is `{"version": 1, "dataset": <the pipeline's state>}`: small JSON, the same for
`for` and `async for`, for any worker count; `set_state` also takes it as JSON text.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import weakref
from types import TracebackType
from typing import Any, Generic, TypeVar

from aioloader._common import contexts
from aioloader._common.cancellation import Unraised, cancelling
from aioloader._common.turns import TaskTurns
from aioloader._dataset.iter_base import IterDataset
from aioloader._dataset.parallel import EnginePart, EngineStage, engine_state, loader_state
from aioloader._dataset.prefetch import DevicePutIterDataset
from aioloader._dataset.stages import Plan, Settings, Stage, as_stage
from aioloader._dataset.with_options import compiling_with, pipeline_options
from aioloader._device.device_put import DevicePut
from aioloader._device.handoff import Handoff
from aioloader._iteration.iterators import AsyncDataLoaderIterator, position_of, reentry
from aioloader._iteration.state import CheckpointableIterator
from aioloader._observability.statistics import LoaderStatistics

T = TypeVar("T")

STATE_VERSION = 1
_BACKGROUND_BUFFER = 2  # outputs a background thread runs ahead, without `device_put`
_JOIN_SECONDS = 2.0
_names = itertools.count()


def _compile(dataset: IterDataset[Any]) -> tuple[Plan, DevicePut | None]:
    """The dataset's pipeline, and the device stage after it (if `device_put` ends it)."""
    device = dataset.device if isinstance(dataset, DevicePutIterDataset) else None
    top = dataset.parent if isinstance(dataset, DevicePutIterDataset) else dataset
    options = pipeline_options(dataset)
    with compiling_with(options):
        plan = top._plan(Settings(options=options))
    if isinstance(plan, EnginePart) and plan.checked:
        plan = plan.build()  # its filters' checks run in order after it: a stage
    return plan, device


class Background:
    """A stage run by a thread of its own, a few outputs ahead of the consumer.

    Each output travels with the stage's snapshot after it, so that the consumer's state
    is the one after the last output it took. An error travels in order and ends the run.
    """

    def __init__(self, stage: Stage[Any], device_put: DevicePut | None) -> None:
        size = _BACKGROUND_BUFFER if device_put is None else device_put.buffer_size
        self._handoff: Handoff[tuple[Any, Any] | BaseException] = Handoff(size)
        self._thread = start_producer(stage, device_put, self._handoff, "aioloader-dataset")

    def get(self) -> tuple[Any, Any] | None:
        """The next output and the snapshot after it (blocking); None at the end."""
        return _unwrap(self._handoff.get())

    async def aget(self) -> tuple[Any, Any] | None:
        """`get` on the consumer's loop, which it does not block."""
        return _unwrap(await self._handoff.aget())

    def stop(self) -> None:
        """Take nothing more: the thread ends at its next output (close the stage too, so
        that it is not left waiting for one)."""
        self._handoff.close(drop=True)

    def join(self) -> None:
        join_producer(self._thread)

    async def ajoin(self) -> None:
        """`join` on the consumer's loop, which it does not block."""
        import asyncio  # here: `for` never loads asyncio

        deadline = time.monotonic() + _JOIN_SECONDS
        while self._thread.is_alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.001)


def start_producer(
    stage: Stage[Any], device_put: DevicePut | None, handoff: Handoff[Any], name: str
) -> threading.Thread:
    """A started daemon thread `{name}-{n}` that runs `stage` into `handoff` (`Background`'s,
    and `ThreadPrefetchIterDataset`'s)."""
    thread = threading.Thread(
        target=contexts.in_this_context(_produce),
        args=(stage, device_put, handoff),
        name=f"{name}-{next(_names)}",
        daemon=True,
    )
    thread.start()
    return thread


def join_producer(thread: threading.Thread) -> None:
    """Join a producer thread, for at most `_JOIN_SECONDS` (a stage stuck in user code is not
    waited for forever); not from the thread itself."""
    if thread is not threading.current_thread():
        thread.join(_JOIN_SECONDS)


def _produce(stage: Stage[Any], device_put: DevicePut | None, handoff: Handoff[Any]) -> None:
    """A producer thread's loop: every output of `stage`, with its snapshot, into `handoff`;
    an error in order, then the end."""
    try:
        for count, item in enumerate(stage, 1):
            if device_put is not None:
                item = device_put.transfer(item, (count, 0, 0))  # a failure names output `count - 1`
            if not handoff.put((item, stage.snapshot())):
                return
            del item
    except BaseException as error:
        handoff.put(error)
    finally:
        handoff.close()


def _unwrap(found: tuple[Any, Any] | BaseException | None) -> tuple[Any, Any] | None:
    if isinstance(found, BaseException):
        raise found
    return found


_NOW = object()  # no token kept: the state is the stage's own, now


class _Run:
    """One compiled pipeline and where its consumer is: what `set_state` replaces.

    `stage` runs in the consumer's thread, or in `background` (for `async for`, or with
    a device stage after stages in order); `loader` is set instead when an async
    pipeline is one parallel part. `token` is the stage's snapshot that the state comes
    from, for stages in order: the one after the last output the consumer took (taken
    with each output, so that `get_state()` from another thread never reads a stage
    that is moving), or the one before an output that failed or that a `close()` from
    another thread cut short (a mix, a window shuffle or a packer takes the close for
    the end of its input, and would flush what the run never makes).
    """

    def __init__(self, dataset: IterDataset[Any], asynchronous: bool) -> None:
        plan, device = _compile(dataset)
        self.loader: AsyncDataLoaderIterator | None = None
        self.stage: Stage[Any] | None = None
        self.device: DevicePut | None = None
        self.in_background = False
        if isinstance(plan, EnginePart):
            if asynchronous:
                self.loader = aiter(plan.loader(device))
            else:
                self.stage = plan.build(device)
        else:
            self.stage, self.device = as_stage(plan), device
            self.in_background = asynchronous or device is not None
        # A parallel part keeps its own state right when it fails; stages in order do not.
        self.snapshots = self.stage is not None and not isinstance(self.stage, EngineStage)
        self.background: Background | None = None
        self._unraised = Unraised()  # see `anext`
        self.token: Any = _NOW if self.stage is None or not self.snapshots else self.stage.snapshot()
        self.closed = False

    def next(self) -> Any:
        """The next output, in the consumer's thread; closes the run at the end or on an error."""
        stage = self.stage
        assert stage is not None
        try:
            if self.closed:
                raise StopIteration
            if self.in_background:
                return self._from_background()
            if not self.snapshots:
                return next(stage)
            item = next(stage)  # on an error, `token` stays: the stage took the failed element in
            if self.closed:
                raise StopIteration  # what a stage gave after a close may be a flush: not ours
            self.token = stage.snapshot()
            return item
        except StopIteration:
            if self.snapshots and not self.closed:
                self.token = stage.snapshot()  # the end: the state says so
            self.close()
            raise
        except BaseException:
            self.close()
            raise

    def _from_background(self) -> Any:
        found = self._background().get()
        if found is None:
            raise StopIteration
        item, self.token = found
        return item

    async def anext(self) -> Any:
        """The next output, on the consumer's loop; closes the run at the end or on an error."""
        if self.loader is not None:
            return await self.loader.__anext__()  # it closes itself at the end and on an error
        if self._unraised.error is not None:  # one that closing, cut short, kept
            await self._unraised.after(self.aclose(), self._unraised.error)
        try:
            found = None if self.closed else await self._background().aget()
        except BaseException as error:
            if cancelling(error):
                raise  # a timeout around `anext`: the stage's thread runs on, nothing is lost
            await self._unraised.after(self.aclose(), error)
        if found is None:
            await self.aclose()
            raise StopAsyncIteration
        item, self.token = found
        return item

    def _background(self) -> Background:
        if self.background is None:
            assert self.stage is not None
            self.token = self.stage.snapshot()
            self.background = Background(self.stage, self.device)
        return self.background

    def statistics(self) -> list[LoaderStatistics]:
        if self.loader is not None:
            return [self.loader.statistics()]
        assert self.stage is not None
        return self.stage.statistics()

    def start_prefetch(self) -> None:
        if self.closed or self.background is not None:  # a background thread runs the stages already
            return
        if self.loader is not None:
            self.loader.start_prefetch()
        elif self.stage is not None:
            self.stage.start_prefetch()

    def get_state(self) -> dict[str, Any]:
        if self.loader is not None:
            return engine_state(self.loader, position_of(self.loader))
        assert self.stage is not None
        if self.token is _NOW:
            return self.stage.get_state()
        return self.stage.state_of(self.token)

    def set_state(self, state: dict[str, Any]) -> None:
        """Resume a fresh run (before its first output) from `state`."""
        if self.loader is not None:
            self.loader.set_state(loader_state(state))
        else:
            assert self.stage is not None
            self.stage.set_state(state)
            if self.snapshots:
                self.token = self.stage.snapshot()

    def _stop(self) -> None:
        """Take nothing more, and stop the engines (the background thread then ends)."""
        self.closed = True
        if self.background is not None:
            self.background.stop()
        if self.stage is not None:
            self.stage.close()

    def close(self) -> None:
        """Stop every thread of the run (from any thread); idempotent."""
        self._stop()
        if self.background is not None:
            self.background.join()

    async def aclose(self) -> None:
        """`close` on the consumer's loop, waiting for the threads without blocking it."""
        if self.loader is not None:
            await self.loader.aclose()
        self._stop()
        if self.background is not None:
            await self.background.ajoin()


class _Parents:
    """The "run" of a user's own iterator (Grain's `DatasetIterator(parents)` form): the
    iterators it reads from, which it closes, starts and counts; its subclass defines
    `__next__`, `get_state` and `set_state`."""

    def __init__(self, parents: tuple[Any, ...], owner: str) -> None:
        self.parents, self._owner = parents, owner

    def next(self) -> Any:
        raise TypeError(f"{self._owner} must define `__next__` (a DatasetIterator made from parents).")

    async def anext(self) -> Any:
        return self.next()

    async def aclose(self) -> None:
        self.close()

    def get_state(self) -> dict[str, Any]:
        raise TypeError(f"{self._owner} must define `get_state` (a DatasetIterator made from parents).")

    def statistics(self) -> list[LoaderStatistics]:
        return [figures for parent in self._each("statistics") for figures in parent()]

    def start_prefetch(self) -> None:
        for start in self._each("start_prefetch"):
            start()

    def close(self) -> None:
        for close in self._each("close"):
            close()

    def _each(self, method: str) -> list[Any]:
        return [getattr(p, method) for p in self.parents if callable(getattr(p, method, None))]


class _Holder:
    """Owns the current run; the iterator's finalizer closes it without a reference to
    the iterator, so that garbage collection can run it."""

    def __init__(self, run: _Run | _Parents) -> None:
        self.run = run

    def close(self) -> None:
        self.run.close()


class _Iterator(CheckpointableIterator, Generic[T]):
    """What both iterators share: the dataset, the current run, and the state."""

    _asynchronous = False
    _busy = False  # a `next()` runs the pipeline (in the thread holding the turn)

    def __init__(self, dataset: IterDataset[T]) -> None:
        self._dataset = dataset
        self._parents: tuple[Any, ...] = ()
        self._holder = _Holder(_Run(dataset, self._asynchronous))
        # Callers in several threads take turns, and `set_state` lands between two outputs.
        # An RLock for its owner: a transformation that calls `next()` or `set_state` inside
        # `next()` is refused (see `_refuse_reentry`).
        self._turn = threading.RLock()
        weakref.finalize(self, _Holder.close, self._holder)

    def _refuse_reentry(self, call: str) -> None:
        """A RuntimeError if the pipeline's own code made the call: in this thread, inside
        this iterator's `next()` (the failure it met would have closed the run that the
        `next()` outside it was running: the data ended early, with no error), or in a
        thread that this iterator's `next()` started (it waited for the turn that `next()`
        holds, waiting for it). (The turn alone is no sign: a KeyboardInterrupt may leave it
        held.)"""
        if self._busy and self._turn._is_owned():  # type: ignore[attr-defined]
            raise reentry(f"{type(self).__name__}.{call}", "inside the same iterator's next()")
        if contexts.runs(self):
            raise reentry(f"{type(self).__name__}.{call}", "a thread of the same iterator's pipeline")

    def get_state(self) -> dict[str, Any]:
        """A small JSON-serialisable state: `set_state` on an iterator of the same pipeline,
        whatever its worker count, resumes right after the last output delivered."""
        return {"version": STATE_VERSION, "dataset": self._holder.run.get_state()}

    def start_prefetch(self) -> None:
        """Start the parallel parts now, before the first `next()`, as Grain's does (to
        restore the iterator, start it, then restore the model). Idempotent; never
        changes the outputs; see `DataLoaderIterator.start_prefetch`."""
        with self._turn:
            mark = contexts.running(self)  # the threads it starts serve this one
            try:
                self._holder.run.start_prefetch()
            finally:
                contexts.done(mark)

    def statistics(self) -> list[LoaderStatistics]:
        """The figures of each parallel part (a `to_iter_dataset` and the maps, filters
        and batch that joined it), in graph order: what `DataLoader`'s iterators give,
        one per part. Any thread; it never waits for the pipeline."""
        return self._holder.run.statistics()

    def set_state(self, state: dict[str, Any] | str | bytes) -> None:
        """Continue from `state` (made by `get_state` of the same pipeline, or its JSON).

        What was read ahead is dropped; a closed or ended iterator is open again. A state
        of another pipeline is a ValueError that names what differs.
        """
        if isinstance(self._holder.run, _Parents):
            raise TypeError(
                f"{type(self).__name__} must define `set_state` (a DatasetIterator made from parents)."
            )
        self._refuse_reentry("set_state()")
        with self._turn:  # after a `next()` running in another thread, never during it
            fresh = _Run(self._dataset, self._asynchronous)
            try:
                fresh.set_state(_dataset_state(state))
            except BaseException:
                fresh.close()
                raise
            old, self._holder.run = self._holder.run, fresh
        old.close()

    @property
    def _parent(self) -> Any:
        """The one iterator a user's own iterator reads from (Grain's spelling)."""
        if len(self._parents) != 1:
            raise AttributeError(
                f"`_parent` is for an iterator of one parent; this one has {len(self._parents)}."
            )
        return self._parents[0]


class DatasetIterator(_Iterator[T]):
    """Iterates an IterDataset in the caller's thread; see `IterDataset`.

    `next()` blocks until the next output is ready. It raises the user's exception from a
    read or a transformation once every output before it was delivered, with a note
    naming the transformation and the element, and the iterator is then closed; it
    raises StopIteration at the end. `close()` stops and joins every thread it started
    (dropping the iterator does too).

    As in Grain, a user's own iterator subclasses it and is made from the iterators it
    reads from, `DatasetIterator(parents)` (`self._parent` when there is one), and
    defines `__next__`, `get_state` and `set_state`; an `IterDataset` subclass returns
    it from `__iter__`. `close()`, `start_prefetch()` and `statistics()` then reach the
    parents.
    """

    def __init__(self, parents: IterDataset[T] | _Iterator[Any] | tuple[Any, ...] | list[Any] = ()) -> None:
        if isinstance(parents, IterDataset):
            super().__init__(parents)
            return
        self._parents = (parents,) if isinstance(parents, _Iterator) else tuple(parents)
        self._holder = _Holder(_Parents(self._parents, type(self).__name__))
        self._turn = threading.RLock()

    def __iter__(self) -> DatasetIterator[T]:
        return self

    def __next__(self) -> T:
        self._refuse_reentry("next()")
        with self._turn:  # the in-order stages (a mix, a packer...) are one caller's at a time
            mark = contexts.running(self)  # what the threads it starts serve
            try:
                self._busy = True
                item: T = self._holder.run.next()
            finally:
                self._busy = False
                contexts.done(mark)
        return item

    def next(self) -> T:
        """The next output (as `next(iterator)`)."""
        return next(self)

    def close(self) -> None:
        """Stop and join every thread this iterator started. Idempotent; `get_state()` still
        works afterwards, and `set_state()` opens the iterator again."""
        self._holder.run.close()

    def __enter__(self) -> DatasetIterator[T]:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncDatasetIterator(_Iterator[T]):
    """Iterates an IterDataset on the running event loop; see `IterDataset`.

    The user's code runs on worker threads (or the pipeline's own thread), so other tasks
    on the loop keep running meanwhile.
    """

    _asynchronous = True

    def __init__(self, dataset: IterDataset[T]) -> None:
        super().__init__(dataset)
        self._turns = TaskTurns()

    def __aiter__(self) -> AsyncDatasetIterator[T]:
        return self

    async def __anext__(self) -> T:
        async with self._turns.lock():  # another task's `__anext__` waits for this one's
            while True:
                run = self._holder.run
                mark = contexts.running(self)  # what the threads and tasks it starts serve
                try:
                    item: T = await run.anext()
                except StopAsyncIteration:
                    if self._holder.run is run:
                        raise
                    continue  # `set_state` from another task replaced the run meanwhile
                finally:
                    contexts.done(mark)
                if self._holder.run is run:
                    return item
                # Else the old run's output, taken after `set_state`: the new run's comes next.

    async def aclose(self) -> None:
        """Stop every thread this iterator started and let go of what it holds.
        Idempotent; `get_state()` still works afterwards, and `set_state()` opens the
        iterator again."""
        await self._holder.run.aclose()

    async def __aenter__(self) -> AsyncDatasetIterator[T]:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


def _dataset_state(state: Any) -> dict[str, Any]:
    """The pipeline's state inside an iterator's state (a dict, or its JSON)."""
    if isinstance(state, (str, bytes)):
        try:
            state = json.loads(state)
        except ValueError as error:
            raise ValueError(f"`state` is not JSON: {error}.") from None
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION or "dataset" not in state:
        raise ValueError(
            f"`state` must be made by an IterDataset iterator's get_state() (version {STATE_VERSION}), "
            f"got {state!r:.200}."
        )
    inner = state["dataset"]
    if not isinstance(inner, dict):
        raise ValueError(f"`state['dataset']` must be a dict, got {inner!r:.200}.")
    return inner
