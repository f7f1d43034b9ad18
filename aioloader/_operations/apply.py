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
"""

from __future__ import annotations

import abc
import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from aioloader._common.failures import Failure
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
    def blame(self, origin: int, error: BaseException, what: str) -> Failure:
        """A failure of `what` on `origin`, with the record (or batch) named in the message."""

    def drop_leading(self, count: int) -> None:
        """Drop the first `count` elements, or fewer if the first origin gave fewer.

        Resuming inside a record's elements (a flat-map) or inside a batch's
        outputs: what the checkpoint's position says was delivered already.
        """
        if count == 0:
            return
        origins = self.origin_list()
        drop = 0
        while drop < count and drop < len(origins) and origins[drop] == 0:
            drop += 1
        del self.items[:drop]
        self.origins = origins[drop:]

    def fail(self, j: int, error: BaseException, what: str) -> None:
        """Keep the elements before `j` and record `error` on element `j`."""
        origin = j if self.origins is None else self.origins[j]
        self.failure = self.blame(origin, error, what)
        del self.items[j:]
        if self.origins is not None:
            del self.origins[j:]


def apply(op: Op, run: Run, seed: int | None) -> None:
    """Apply one synchronous operation to every element of `run`, in order."""
    if op.kind is Kind.MAP:
        _map(op, run)
    elif op.kind is Kind.RANDOM_MAP:
        _random_map(op, run, seed)
    elif op.kind in (Kind.FILTER, Kind.FLAT_MAP):
        _select(op, run)
    else:
        raise AssertionError(f"{op.label} is not a synchronous operation")


def _map(op: Op, run: Run) -> None:
    _extend(op, run, map(op.function(), run.items))


def _random_map(op: Op, run: Run, seed: int | None) -> None:
    rngs = map(run.rng_of, run.origin_list(), itertools.repeat(seed))
    _extend(op, run, map(op.function(), run.items, rngs))


def _extend(op: Op, run: Run, results: Iterator[Any]) -> None:
    """Collect one result per element at C speed, keeping track of a failure.

    `list.extend` keeps what it appended before the iterator raised, so the
    length of `out` is the index of the element that failed.
    """
    out: list[Any] = []
    try:
        out.extend(results)
    except Exception as error:
        run.fail(len(out), error, op.label)
    run.items = out


def _select(op: Op, run: Run) -> None:
    fn, flat = op.function(), op.kind is Kind.FLAT_MAP
    out: list[Any] = []
    origins: list[int] = []
    for j, (element, origin) in enumerate(zip(run.items, run.origin_list(), strict=True)):
        try:
            produced = list(fn(element)) if flat else ((element,) if fn(element) else ())
        except Exception as error:
            run.fail(j, error, op.label)
            break
        out += produced
        origins += [origin] * len(produced)
    run.items, run.origins = out, origins


async def apply_async(op: Op, run: Run, limit: asyncio.Semaphore) -> None:
    """Await an `async def` map on every element, at most `limit` at a time, in order."""
    fn = op.function()

    async def one(element: Any) -> Any:
        async with limit:
            return await fn(element)

    import asyncio

    results = await asyncio.gather(*(one(e) for e in run.items), return_exceptions=True)
    for j, result in enumerate(results):
        if isinstance(result, BaseException) and not isinstance(result, Exception):
            raise result  # cancellation and KeyboardInterrupt are not the user's data errors
        if isinstance(result, Exception):
            run.fail(j, result, op.label)
            del results[j:]
            break
    run.items = list(results)
