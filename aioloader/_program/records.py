"""The per-record stage: a chunk of consecutive walk positions, read and transformed."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from typing import TYPE_CHECKING, Any

import numpy as np

from aioloader._common.calls import (
    NEVER,
    Interrupt,
    Shutdown,
    call_each,
    checked,
    guarded,
    not_data,
    unawaited,
)
from aioloader._common.failures import Failure
from aioloader._operations.apply import Run
from aioloader._sampling.metadata import make_rng

if TYPE_CHECKING:
    import asyncio  # at run time only where an event loop is used: `for` never loads asyncio


class RecordChunk(Run):
    """Walk positions `[start, start + len(keys))`, then the elements made from them.

    `indices[j]` is the global index of position `start + j` (what the
    sampler, error messages and generators see). `skip` elements of the
    first record are dropped after the operations (a checkpoint taken inside
    a flat-map's output), and `skip_outputs` outputs of its first batch.
    `rngs` holds each record's generator once a random operation asked for
    it, or from the start when a foreign sampler's metadata carried them.
    """

    __slots__ = ("indices", "keys", "rngs", "skip", "skip_outputs", "start")

    def __init__(
        self, start: int, keys: list[int], indices: Sequence[int], skip: int = 0, skip_outputs: int = 0
    ) -> None:
        super().__init__([])
        self.start, self.keys, self.indices = start, keys, indices
        self.skip, self.skip_outputs = skip, skip_outputs
        self.rngs: list[np.random.Generator | None] | None = None

    def rng_of(self, origin: int, seed: int | None) -> np.random.Generator:
        if self.rngs is None:
            self.rngs = [None] * len(self.keys)
        rng = self.rngs[origin]
        if rng is None:
            rng = self.rngs[origin] = make_rng(seed, self.indices[origin])
        return rng

    def record_index(self, origin: int) -> int:
        return self.indices[origin]

    def blame(self, origin: int, error: BaseException, what: str) -> Failure:
        return Failure.at_record(error, what, self.indices[origin], self.keys[origin])


def read_label(source: Any) -> str:
    """How errors name a read of `source`."""
    return f"reading from {type(source).__name__}"


Mapper = Callable[[Callable[[Any], Any], Sequence[int]], Iterable[Any]]


def read(source: Any, chunk: RecordChunk, shutdown: Shutdown = NEVER, mapper: Mapper | None = None) -> None:
    """Read the chunk's records from a random-access source, in order.

    `__getitems__` reads the whole chunk in one call when the source has it
    and no `mapper` is given; if that raises, the keys are read one by one to
    find the failing record.
    It must return one record per key: any other count is a ValueError on the
    chunk's first record, since records would be lost or moved onto other
    keys. One by one, `mapper` (a read pool's concurrent map, given a
    function that checks `shutdown` first) or else `call_each` reads them
    in order; both keep what they appended before a read raised: the list's
    length is the failing key's.
    """
    getitems = getattr(source, "__getitems__", None) if mapper is None else None
    if getitems is not None:
        try:
            # A copy: a source that sorts its keys in place for locality, then fails, would
            # have the keys read one by one below in its order, and blamed on other records.
            returned = getitems(list(chunk.keys))
        except Exception:
            pass  # read one by one below, to find the record that fails
        else:
            _take_records(source, "__getitems__", chunk, returned)
            return
    what = read_label(source)
    items: list[Any] = []
    chunk.items = items
    try:
        if mapper is None:
            call_each(items, source.__getitem__, chunk.keys, what, shutdown)
        else:
            items.extend(mapper(checked(source.__getitem__, what, shutdown), chunk.keys))
    except Exception as error:
        chunk.fail(len(items), error, what)


def _take_records(source: Any, method: str, chunk: RecordChunk, returned: Any, awaited: bool = False) -> None:
    """Take what `method` returned as the chunk's records if it is one record per key, in
    order (a list, a tuple, an array...); else fail on the first record. A mapping (its
    keys would become records), a set (no order) or a string is no such sequence; from an
    `awaited` method, neither is one holding an awaitable (see `_unawaited`)."""
    chunk.items = []
    what = read_label(source)
    name = f"`data_source` {type(source).__name__}.{method}"
    if isinstance(returned, str | bytes | Mapping | Set) or not isinstance(returned, Iterable):
        error: Exception = TypeError(
            f"{name} must return a sequence of records, one per key in the keys' order, "
            f"got {type(returned).__name__}."
        )
        chunk.fail(0, error, what)
        return
    found = list(returned)
    if len(found) != len(chunk.keys):
        error = ValueError(
            f"{name} returned {len(found)} records for {len(chunk.keys)} keys; it must return one "
            "record per key, in the keys' order."
        )
        chunk.fail(0, error, what)
        return
    refused = _unawaited(found, source, method) if awaited else None
    if refused is not None:
        chunk.fail(0, refused, what)
        return
    chunk.items = found


async def aread(source: Any, chunk: RecordChunk, limit: asyncio.Semaphore) -> None:
    """Await the chunk's records from an async source, at most `limit` reads at a time.

    `aget_many` must return one record per key, as `__getitems__` must (see `read`).
    """
    many = getattr(source, "aget_many", None)
    if many is not None:
        try:
            async with limit:
                returned = await guarded(many(list(chunk.keys)))  # a copy, as for `__getitems__`
        except Interrupt:
            raise
        except Exception:
            pass  # read one by one below, to find the record that fails
        else:
            _take_records(source, "aget_many", chunk, returned, awaited=True)
            return

    async def one(key: int) -> Any:
        async with limit:
            record = await guarded(source.aget(key))
        refused = _unawaited([record], source, "aget")
        if refused is not None:
            raise refused
        return record

    import asyncio

    results = await asyncio.gather(*(one(k) for k in chunk.keys), return_exceptions=True)
    chunk.items = results
    for j, result in enumerate(results):
        if not_data(result):
            raise result
        if isinstance(result, BaseException):
            chunk.fail(j, result, read_label(source))
            break


def _unawaited(records: list[Any], source: Any, method: str) -> TypeError | None:
    """A TypeError if one of `records` is an awaitable (a coroutine that `method` returned
    unawaited): never a coroutine taken for data. Each such coroutine is closed, so that
    its collection warns of nothing."""
    awaitables = [record for record in records if unawaited(record)]
    if not awaitables:
        return None
    return TypeError(
        f"{type(source).__name__}.{method} returned an awaitable ({type(awaitables[0]).__name__}), "
        "not a record: await it inside the method."
    )
