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
import asyncio
import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np

from aioloader._common.failures import USER_ERRORS, Failure, stop_iteration_error
from aioloader._operations.transforms import Kind, Op


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
    elif op.kind is Kind.FILTER:
        _filter(op, run)
    elif op.kind is Kind.FLAT_MAP:
        _select(op, run)
    else:
        raise AssertionError(f"{op.label} is not a synchronous operation")


def _map(op: Op, run: Run) -> None:
    _extend(op, run, map(op.function(), run.items))


def _random_map(op: Op, run: Run, seed: int | None) -> None:
    origins = run.origin_list()
    if op.rng is None:  # the record's generator, shared by the random operations
        rngs = map(run.rng_of, origins, itertools.repeat(seed))
    else:  # the operation's own generator for the record
        rngs = map(op.rng, map(run.record_index, origins))
    _extend(op, run, map(op.function(), run.items, rngs))


def _extend(op: Op, run: Run, results: Iterator[Any]) -> None:
    """Collect one result per element at C speed, keeping track of a failure.

    `list.extend` keeps what it appended before the iterator raised, so the
    length of `out` is the index of the element that failed. A function that
    raises StopIteration ends `extend` without an error: fewer results than
    elements is that, and fails the element where they stop.
    """
    out: list[Any] = []
    expected = len(run.items)
    try:
        out.extend(results)
    except USER_ERRORS as error:
        run.fail(len(out), error, op.label)
    else:
        if len(out) < expected:
            run.fail(len(out), stop_iteration_error(op.label), op.label)
    run.items = out


def _filter(op: Op, run: Run) -> None:
    """Keep the elements `op` is true for, judged at C speed.

    A run the filter keeps whole (the common case) stays as it was, one element per
    origin, so its positions stay cheap. As in `_extend`, the length of `flags` is the
    index of the element whose filter (or whose truth value) failed.
    """
    flags: list[bool] = []
    error: BaseException | None = None
    try:
        flags.extend(map(bool, map(op.function(), run.items)))
    except USER_ERRORS as caught:
        error = caught
    else:
        if len(flags) < len(run.items):
            error = stop_iteration_error(op.label)
    if error is None and all(flags):
        return
    origins = run.origin_list()
    if error is not None:
        run.failure = run.blame(origins[len(flags)], error, op.label)
    run.items = list(itertools.compress(run.items, flags))
    run.origins = list(itertools.compress(origins, flags))


def _select(op: Op, run: Run) -> None:
    fn, flat = op.function(), op.kind is Kind.FLAT_MAP
    out: list[Any] = []
    origins: list[int] = []
    for j, (element, origin) in enumerate(zip(run.items, run.origin_list(), strict=True)):
        try:
            produced = list(fn(element)) if flat else ((element,) if fn(element) else ())
        except USER_ERRORS as error:
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

    results = await asyncio.gather(*(one(e) for e in run.items), return_exceptions=True)
    for j, result in enumerate(results):
        if isinstance(result, BaseException) and not isinstance(result, Exception):
            raise result  # cancellation and KeyboardInterrupt are not the user's data errors
        if isinstance(result, Exception):
            run.fail(j, result, op.label)
            del results[j:]
            break
    run.items = list(results)
