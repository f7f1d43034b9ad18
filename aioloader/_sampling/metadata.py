"""`RecordMetadata`: what the sampler says about one position of the output."""

from __future__ import annotations

import dataclasses
from typing import Generic, TypeVar

import numpy as np

T = TypeVar("T")


# Grain's names of the meta features its TensorFlow-era pipelines add to each element
# (`grain.python.RECORD_KEY`, ...): kept so that code naming them still imports; no
# pipeline here adds them.
INDEX = "_index"  # position in the stream of all records, from 0
RECORD_KEY = "_record_key"  # the record's key in its source, from 0
DATASET_INDEX = "_dataset_index"  # which dataset of a mixture
EPOCH = "_epoch"  # the epoch, from 1
SEED = "_seed"  # the record's seed
RECORD = "_record"  # the serialized record
META_FEATURES = frozenset([INDEX, RECORD_KEY, DATASET_INDEX, EPOCH, SEED, RECORD])


def record_rng(seed: int, index: int) -> np.random.Generator:
    """The generator for the record at global `index`: Philox keyed on `seed + index`.

    It is a pure function of its arguments, so a random transform gives the
    same result whichever thread, process or interpreter runs it. The keying
    is Grain's, so random transforms match a Grain pipeline with the same
    seed; global indices differ between shards, so no two records of any
    shards share a generator.
    """
    return np.random.Generator(np.random.Philox(key=seed + index))


def element_rng(seed: int, index: int, element: int) -> np.random.Generator:
    """A generator of its own for what starts at element `element` (above 0) of the record
    at global `index` (a batch that starts inside a flat-map's elements): Philox keyed as
    the record's, its counter `element * 2**128` blocks ahead, where the record's own
    stream never gets. A pure function of its arguments, as `record_rng`."""
    return np.random.Generator(np.random.Philox(key=seed + index, counter=[0, 0, element, 0]))


def make_rng(seed: int | None, index: int) -> np.random.Generator:
    """`record_rng(seed, index)` for a random operation; a ValueError naming the record
    when there is no seed (a foreign sampler that gave `rng=None`)."""
    if seed is None:
        raise ValueError(
            f"a random operation needs the record's generator, but the sampler gave "
            f"RecordMetadata(index={index}) rng=None; give the sampler a seed."
        )
    return record_rng(seed, index)


class RecordMetadata:
    """One position of the sampler's output, as Grain's `RecordMetadata`.

    `index` is the global index (the sampler's argument; under sharding each
    shard owns its own global indices), `record_key` the key given to the
    data source, and `rng` a generator that belongs to this record alone, or
    None when the sampler has no seed. When the sampler makes the metadata,
    the generator is created on first access only, since most pipelines
    never ask for it.
    """

    __slots__ = ("_rng", "_seed", "index", "record_key")

    def __init__(
        self, index: int, record_key: int | None = None, rng: np.random.Generator | None = None
    ) -> None:
        self.index = index
        self.record_key = record_key
        self._rng = rng
        self._seed: int | None = None

    @classmethod
    def lazy(cls, index: int, record_key: int, seed: int | None) -> RecordMetadata:
        """Metadata whose `rng` is made from (`seed`, `index`) when first asked for."""
        metadata = cls(index, record_key)
        metadata._seed = seed
        return metadata

    @property
    def rng(self) -> np.random.Generator | None:
        """This record's generator (None when made without rng or seed)."""
        if self._rng is None and self._seed is not None:
            self._rng = record_rng(self._seed, self.index)
        return self._rng

    def remove_record_key(self) -> RecordMetadata:
        """This metadata without its record key (itself when it has none), as Grain's."""
        if self.record_key is None:
            return self
        copy = RecordMetadata(self.index, None, self._rng)
        copy._seed = self._seed
        return copy

    def __repr__(self) -> str:
        return f"RecordMetadata(index={self.index}, record_key={self.record_key}, rng={self.rng!r})"

    def __str__(self) -> str:
        return f"RecordMetadata(index={self.index}, record_key={self.record_key}, rng={self.rng})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RecordMetadata):
            return NotImplemented
        return (self.index, self.record_key) == (other.index, other.record_key)

    def __hash__(self) -> int:
        return hash((self.index, self.record_key))


@dataclasses.dataclass(slots=True)
class Record(Generic[T]):
    """Grain's `Record`: a record's metadata and its data, as Grain's own pipelines pass
    them between operations (aioloader's engine passes the data alone)."""

    metadata: RecordMetadata
    data: T
