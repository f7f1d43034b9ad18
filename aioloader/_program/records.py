"""The per-record stage: a chunk of consecutive walk positions, read and transformed."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from aioloader._common.failures import Failure
from aioloader._common.positions import Position
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

    def blame(self, origin: int, error: BaseException, what: str) -> Failure:
        return Failure.at_record(error, what, self.indices[origin], self.keys[origin])


class WholeRecords:
    """The `ElementColumns` of a chunk whose elements are its records, one each, in order.

    A fused chunk is one: its operations before `Batch` are one-to-one.
    """

    __slots__ = ("_indices", "_rngs", "_start")

    def __init__(self, chunk: RecordChunk) -> None:
        self._start, self._indices, self._rngs = chunk.start, chunk.indices, chunk.rngs

    def position_before(self, j: int) -> Position:
        return (self._start + j, 0, 0)

    def position_after(self, j: int) -> Position:
        return (self._start + j + 1, 0, 0)

    def record_index(self, j: int) -> int:
        return self._indices[j]

    def record_rng(self, j: int) -> np.random.Generator | None:
        return None if self._rngs is None else self._rngs[j]


def read(source: Any, chunk: RecordChunk, mapper: Callable[..., Iterator[Any]] = map) -> None:
    """Read the chunk's records from a random-access source, in order.

    `__getitems__` reads the whole chunk in one call when the source has it;
    if that raises, the keys are read one by one to find the failing record.
    One by one, `mapper` (`map`, or a read pool's concurrent map) reads them
    in order, and `list.extend` collects them at C speed, keeping what it
    appended before a read raised: its length is the failing key's.
    """
    getitems = getattr(source, "__getitems__", None)
    if getitems is not None:
        try:
            chunk.items = list(getitems(chunk.keys))
            return
        except Exception:
            pass
    items: list[Any] = []
    chunk.items = items
    try:
        items.extend(mapper(source.__getitem__, chunk.keys))
    except Exception as error:
        chunk.fail(len(items), error, f"reading from {type(source).__name__}")


async def aread(source: Any, chunk: RecordChunk, limit: asyncio.Semaphore) -> None:
    """Await the chunk's records from an async source, at most `limit` reads at a time."""
    many = getattr(source, "aget_many", None)
    if many is not None:
        try:
            async with limit:
                chunk.items = list(await many(chunk.keys))
            return
        except Exception:
            pass

    async def one(key: int) -> Any:
        async with limit:
            return await source.aget(key)

    import asyncio

    results = await asyncio.gather(*(one(k) for k in chunk.keys), return_exceptions=True)
    chunk.items = results
    for j, result in enumerate(results):
        if isinstance(result, BaseException):
            if not isinstance(result, Exception):
                raise result
            chunk.fail(j, result, f"reading from {type(source).__name__}")
            break
