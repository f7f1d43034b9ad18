"""Apply one per-element operation to a run of elements, in order.

This code runs on the worker threads (or inline). It applies each operation
to the whole run before the next ("op-major"): a tight loop over a list costs
little per element, which is what lets trivial records keep up with a plain
Python loop.

When an operation raises, the run is cut just before the failing element and
the failure kept; the later operations still run on the elements before it,
so that everything ahead of the error in output order is delivered. A later
operation failing on an earlier element replaces the failure, because that
element comes first. An element whose filter or flat-map raises contributes
nothing, not even the elements its flat-map yielded before raising.

The user's functions are called through `call_each` (see `_common/calls`): a
StopIteration they raise is an error like any other, and a closed loader
stops the run between two elements (`Stopped`). A filter's answer counts by
its truth value, as in Grain (`lambda x: x % 3` keeps what is not a multiple
of 3), but None, the answer of a forgotten `return`, is a TypeError: it would
silently drop every element.
"""

from __future__ import annotations

import abc
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from aioloader._common.calls import NEVER, Shutdown, call_each, call_pairs, guarded, not_data, unawaited
from aioloader._common.failures import Failure
from aioloader._observability.filtering import FilterWindows
from aioloader._operations.transforms import Kind, Op

if TYPE_CHECKING:
    import asyncio  # at run time only where an event loop is used: `for` never loads asyncio


class Run(abc.ABC):
    """Elements in output order, each tagged with its origin: the record or batch it came from.

    `origins[j]` is the offset of element `j`'s origin in the chunk (or batch
    job); None means one element per origin, in order: the fast path for maps.
    """

    __slots__ = ("failure", "items", "origins")

    def __init__(self, items: list[Any]) -> None:
        self.items = items
        self.origins: list[int] | None = None
        self.failure: Failure | None = None

    def origin_list(self) -> list[int]:
        """`origins`, materialised."""
        return list(range(len(self.items))) if self.origins is None else self.origins

    @abc.abstractmethod
    def rng_of(self, origin: int, seed: int | None) -> np.random.Generator:
        """The generator that random operations use for the elements of `origin`."""

    @abc.abstractmethod
    def record_index(self, origin: int) -> int:
        """The index of `origin`'s record (of its first record, for a batch)."""

    @abc.abstractmethod
    def blame(self, origin: int, error: BaseException, what: str) -> Failure:
        """A failure of `what` on `origin`, with the record (or batch) named in the message."""

    def drop_leading(self, count: int) -> None:
        """Drop the first `count` elements: those of the first origin that were delivered.

        Resuming inside a record's elements (a flat-map) or inside a batch's
        outputs: what the checkpoint's position says was delivered already. A
        checkpoint is only ever taken there when the origin gives more than
        `count`; if it does not (and no failure cut it short), the state was
        not made by this pipeline, and that is the run's failure.
        """
        if count == 0:
            return
        origins = self.origin_list()
        first = 0
        while first < len(origins) and origins[first] == 0:
            first += 1
        if first <= count and (self.failure is None or first < len(origins)):
            error = ValueError(
                f"`state` skips {count} elements of the first record (or outputs of the first batch), "
                f"but it gives {first}: the state was not made by this pipeline, or its data changed."
            )
            self.failure = self.blame(0, error, "resuming from `state`")
            self.items, self.origins = [], []
            return
        del self.items[:count]
        self.origins = origins[count:]

    def fail(self, j: int, error: BaseException, what: str) -> None:
        """Keep the elements before `j` and record `error` on element `j`."""
        origin = j if self.origins is None else self.origins[j]
        self.failure = self.blame(origin, error, what)
        del self.items[j:]
        if self.origins is not None:
            del self.origins[j:]


def apply(
    op: Op, run: Run, seed: int | None, shutdown: Shutdown = NEVER, filters: FilterWindows | None = None
) -> None:
    """Apply one synchronous operation to every element of `run`, in order.

    Raises `Stopped` between two elements once `shutdown` is set. A filter counts
    what it drops into `filters`, which warns when it drops nearly everything.
    """
    if op.kind is Kind.MAP:
        _collect(op, run, call_each, op.function(), run.items, op.label, shutdown)
    elif op.kind is Kind.RANDOM_MAP:
        rngs = _rngs(op, run, seed)
        _collect(op, run, call_pairs, op.function(), run.items, rngs, op.label, shutdown)
    elif op.kind is Kind.FILTER:
        _filter(op, run, shutdown, filters)
    elif op.kind is Kind.FLAT_MAP:
        _flat_map(op, run, shutdown)
    else:
        raise AssertionError(f"{op.label} is not a synchronous operation")


def _rngs(op: Op, run: Run, seed: int | None) -> Iterator[np.random.Generator]:
    """Each element's generator: its record's, shared by the loader's random
    operations, or the operation's own for the record (the Dataset API's)."""
    origins = run.origin_list()
    if op.rng is None:
        return map(run.rng_of, origins, itertools.repeat(seed))
    return map(op.rng, map(run.record_index, origins))


def _collect(op: Op, run: Run, caller: Callable[..., None], *arguments: Any) -> None:
    """Collect one result per element with `caller(out, *arguments)`, keeping track of
    a failure: the caller keeps what it appended before a call raised, so the
    length of `out` is the index of the element that failed."""
    out: list[Any] = []
    try:
        caller(out, *arguments)
    except Exception as error:
        run.fail(len(out), error, op.label)
    run.items = out


def _filter(op: Op, run: Run, shutdown: Shutdown, filters: FilterWindows | None = None) -> None:
    """Keep the elements `op` is true for.

    A run the filter keeps whole (the common case) stays as it was, one element
    per origin, so its positions stay cheap. As in `_collect`, the length of
    `flags` is the index of the element whose filter failed (or did not answer
    with a bool).
    """
    fn, what = op.function(), f"`{op.name}` ({op.what})"  # the label made once, not per element

    def kept(element: Any) -> bool:
        return filter_verdict(fn(element), what)

    flags: list[bool] = []
    error: Exception | None = None
    try:
        call_each(flags, kept, run.items, op.label, shutdown)
    except Exception as caught:
        error = caught
    dropped = flags.count(False)
    if filters is not None:
        filters.note(op, op.grain_label or op.label, len(flags), dropped)
    if error is None and not dropped:
        return
    origins = run.origin_list()
    if error is not None:
        run.failure = run.blame(origins[len(flags)], error, op.label)
    run.items = list(itertools.compress(run.items, flags))
    run.origins = list(itertools.compress(origins, flags))


def _flat_map(op: Op, run: Run, shutdown: Shutdown) -> None:
    fn = op.function()
    limit = _max_fan_out(op)
    out: list[Any] = []
    origins: list[int] = []
    for j, (element, origin) in enumerate(zip(run.items, run.origin_list(), strict=True)):
        shutdown.check()
        try:
            produced = _fan_out(fn(element), limit, shutdown)
        except Exception as error:
            run.fail(j, error, op.label)
            break
        out += produced
        origins += [origin] * len(produced)
    run.items, run.origins = out, origins


_FAN_OUT_STEP = 1024  # elements of one record taken between two checks of the shutdown


def _fan_out(elements: Iterable[Any], limit: int | None, shutdown: Shutdown) -> list[Any]:
    """The elements of one record, taken in slices so that a close stops a generator
    without end (`Stopped`), and no more than `limit` of them (ValueError past it)."""
    source, taken = iter(elements), list[Any]()
    while True:
        wanted = _FAN_OUT_STEP if limit is None else min(_FAN_OUT_STEP, limit + 1 - len(taken))
        piece = list(itertools.islice(source, wanted))
        taken += piece
        if limit is not None and len(taken) > limit:
            raise ValueError(f"a record gave more than max_fan_out={limit} elements")
        if len(piece) < wanted:
            return taken
        shutdown.check()


def _max_fan_out(op: Op) -> int | None:
    """The transform's `max_fan_out` (Grain's attribute), if it has an int one."""
    limit = getattr(op.target, "max_fan_out", None)
    return limit if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0 else None


def filter_verdict(verdict: Any, what: str) -> bool:
    """A filter's answer as Grain takes it, by its truth value; but None, the answer of a
    forgotten `return`, which would silently drop every element, is a TypeError naming
    `what`. An answer with no truth value (an array of several elements) raises
    ValueError, as `bool` does."""
    if verdict is True or verdict is False:
        return verdict
    if verdict is None:
        raise TypeError(
            f"{what} returned None, which is no answer: a forgotten `return`? Return True to keep."
        )
    if unawaited(verdict):  # true as an object: it would keep every element
        raise TypeError(
            f"{what} returned an awaitable ({type(verdict).__name__}), which is no answer: a "
            "filter must answer at once (only maps may be `async def`)."
        )
    return bool(verdict)


async def apply_async(op: Op, run: Run, limit: asyncio.Semaphore) -> None:
    """Await an `async def` map on every element, at most `limit` at a time, in order."""
    fn = op.function()

    async def one(element: Any) -> Any:
        async with limit:
            result = await guarded(fn(element))
        if unawaited(result):  # another's coroutine, returned unawaited: never data
            raise TypeError(
                f"{op.label} returned an awaitable ({type(result).__name__}), not an element: "
                "await it inside the map."
            )
        return result

    import asyncio

    results = await asyncio.gather(*(one(e) for e in run.items), return_exceptions=True)
    for j, result in enumerate(results):
        if not_data(result):
            raise result  # cancellation and KeyboardInterrupt are not the user's data errors
        if isinstance(result, Exception):
            run.fail(j, result, op.label)
            del results[j:]
            break
    run.items = list(results)
