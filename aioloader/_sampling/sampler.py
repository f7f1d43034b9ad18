"""Samplers: the stateless map from a global index to a record key, equal to Grain's.

`sampler[index]` gives the `RecordMetadata` that Grain 0.2.18's sampler of
the same arguments gives: the same `record_key`, and an `rng` keyed on
`seed + index`. It costs O(1) time and memory for any index, with no
permutation stored; `record_keys(start, stop, step)` computes many at once.

How Grain numbers records, which these samplers follow:

* `ShardOptions(i, n)` gives shard `i` a contiguous slice of `L` records
  (`ShardOptions.bounds`). `IndexSampler` maps global index `g` to the
  shard's `g // n`-th record: epoch `(g // n) // L`, position `(g // n) % L`
  within it, shuffled with Grain's `index_shuffle` keyed on
  `(seed + epoch) % 2**32` when `shuffle=True`, so every epoch is another
  permutation of the shard. The loader of shard `i` reads global indices
  `i, i + n, i + 2n, ...` (see `Walk`), which are the shard's records in order.
* `SequentialSampler` maps `g` to record `g` whatever the sharding, so shard
  `i` reads records `i, i + n, i + 2n, ...` (strided sharding).
* A sampler holds `num_epochs * num_records` indices (fewer with
  `drop_remainder=True`); `num_epochs=None` repeats forever, and `len()` is
  then `sys.maxsize`, as in Grain.
"""

from __future__ import annotations

import itertools
import operator
import sys
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from aioloader._common.validation import require_bool, require_int
from aioloader._sampling.index_shuffle import index_shuffle_array, index_shuffle_range, shuffled_range
from aioloader._sampling.metadata import RecordMetadata
from aioloader._sampling.sharding import NoSharding, ShardOptions, check_shard_options

_SEED_LIMIT = 2**32  # Grain: "Seed should be positive 32-bit integer."


class Sampler(Protocol):
    """What a `DataLoader` needs of a sampler, Grain's protocol: the metadata of global
    position `index`; an `IndexError` (or `len()`) says where the output ends."""

    def __getitem__(self, index: int) -> RecordMetadata: ...


class SamplerBase:
    """What both samplers share: checks, `len()`, lookups by index, and their description."""

    num_records: int
    shard_options: ShardOptions
    seed: int | None
    length: int | None  # how many global indices it holds; None: forever

    def __len__(self) -> int:
        return sys.maxsize if self.length is None else self.length

    def __getitem__(self, index: int) -> RecordMetadata:
        """The metadata of global `index`; IndexError outside `[0, len(self))`, as in Grain."""
        index = operator.index(index)
        return RecordMetadata.lazy(index, self.record_keys(index, index + 1)[0], self.seed)

    def record_keys(self, start: int, stop: int, step: int = 1) -> list[int]:
        """The record keys of the global indices `range(start, stop, step)`, computed together."""
        indices = self._checked(start, stop, step)
        return (
            self._keys(np.arange(indices.start, indices.stop, indices.step, dtype=np.int64))
            if indices
            else []
        )

    def keys_at(self, indices: Sequence[int]) -> list[int]:
        """The record keys of any increasing global `indices`, computed together."""
        array = np.asarray(indices, dtype=np.int64)
        if len(array):
            self._check_bounds(int(array[0]), int(array[-1]))
        return self._keys(array) if len(array) else []

    def _keys(self, indices: np.ndarray) -> list[int]:
        """The record keys of increasing, checked global `indices`."""
        raise NotImplementedError

    def _checked(self, start: int, stop: int, step: int) -> range:
        """`range(start, stop, step)`, after checking that every index in it is in range."""
        indices = range(start, stop, require_int("step", step, minimum=1))
        if indices:
            self._check_bounds(indices[0], indices[-1])
        return indices

    def _check_bounds(self, first: int, last: int) -> None:
        """IndexError unless the indices from `first` to `last` are all in range."""
        if first < 0 or (self.length is not None and last >= self.length):
            wrong = first if first < 0 else last
            bound = "forever" if self.length is None else f"{self.length}"
            raise IndexError(f"`index` must be in [0, {bound}) for {self!r}, got {wrong}.")

    def describe(self) -> dict[str, Any]:
        """What identifies this sampler's output, for checkpoint states."""
        options = self.shard_options
        return {
            "type": type(self).__name__,
            "num_records": self.num_records,
            "shard": [options.shard_index, options.shard_count, options.drop_remainder],
            "seed": self.seed,
        }


class IndexSampler(SamplerBase):
    """The records of this process's shard, shuffled anew every epoch if asked; Grain's sampler.

    `num_epochs=None` repeats forever. `shuffle=True` needs a `seed` (a
    non-negative 32-bit int), which also keys each record's generator; with
    `seed=None` records have no generator (`rng=None`).
    """

    def __init__(
        self,
        num_records: int,
        shard_options: ShardOptions = NoSharding(),  # noqa: B008 - frozen, as Grain's default
        shuffle: bool = False,
        num_epochs: int | None = None,
        seed: int | None = None,
    ) -> None:
        self.num_records = _fits("num_records", require_int("num_records", num_records, minimum=1))
        self.shard_options = check_shard_options(shard_options)
        self.shuffle = require_bool("shuffle", shuffle)
        self.num_epochs = None if num_epochs is None else require_int("num_epochs", num_epochs, minimum=1)
        self.seed = _check_seed(seed, shuffle)
        self._start, stop = shard_options.bounds(self.num_records)
        self.shard_length = stop - self._start
        length = self._length()
        self.length = None if length is None else _fits("num_epochs", length)

    def _length(self) -> int | None:
        if self.num_epochs is None:
            return None
        options = self.shard_options
        if options.drop_remainder:  # Grain keeps only whole rounds of the shards
            return self.num_epochs * self.shard_length * options.shard_count
        return self.num_epochs * self.num_records

    def record_keys(self, start: int, stop: int, step: int = 1) -> list[int]:
        """The record keys of the global indices `range(start, stop, step)`, computed together.

        With `step` the shard count (the loader's walk of its shard), the indices are
        consecutive positions of the shard: they take `_run_keys`, with no array per
        index (the walk asks for a chunk of keys at a time, thousands of times a second).
        """
        indices = self._checked(start, stop, step)
        if not indices or step != self.shard_options.shard_count or self.shard_length == 0:
            return super().record_keys(start, stop, step)
        keys: list[int] = []
        first, count = start // step, len(indices)
        while count:  # one run per epoch the positions touch
            epoch, position = divmod(first, self.shard_length)
            taken = min(count, self.shard_length - position)
            run = self._run_keys(epoch, position, taken)
            keys = keys + run if keys else run  # one run (most chunks): not copied
            first, count = first + taken, count - taken
        return keys

    def _run_keys(self, epoch: int, position: int, count: int) -> list[int]:
        """The keys of positions `[position, position + count)` of one epoch of the shard."""
        first = self._start + position
        if not self.shuffle:
            return list(range(first, first + count))
        assert self.seed is not None
        seed = (self.seed + epoch) % _SEED_LIMIT
        images = shuffled_range(position, count, self.shard_length - 1, seed)
        keys: list[int] = (images + self._start).tolist() if self._start else images.tolist()
        return keys

    def _keys(self, indices: np.ndarray) -> list[int]:
        if self.shard_length == 0:
            raise IndexError(f"{self.shard_options!r} holds none of the {self.num_records} records.")
        epochs, positions = np.divmod(indices // self.shard_options.shard_count, self.shard_length)
        if self.shuffle:
            positions = self._shuffled(epochs, positions)
        keys: list[int] = (positions + self._start).tolist()
        return keys

    def _shuffled(self, epochs: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Each epoch's positions through that epoch's permutation (`epochs` never decreases)."""
        assert self.seed is not None
        cuts = [0, *(np.flatnonzero(np.diff(epochs)) + 1).tolist(), len(epochs)]
        for first, stop in itertools.pairwise(cuts):
            seed = (self.seed + int(epochs[first])) % _SEED_LIMIT
            run = positions[first:stop]
            if bool(np.all(np.diff(run) == 1)):  # the loader's chunks: from blocks kept between calls
                run[:] = index_shuffle_range(int(run[0]), len(run), self.shard_length - 1, seed)
            else:
                run[:] = index_shuffle_array(run, self.shard_length - 1, seed)
        return positions

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "shuffle": self.shuffle, "num_epochs": self.num_epochs}

    def __repr__(self) -> str:
        return (
            f"IndexSampler(num_records={self.num_records}, shard_options={self.shard_options!r}, "
            f"shuffle={self.shuffle}, num_epochs={self.num_epochs}, seed={self.seed})"
        )


class SequentialSampler(SamplerBase):
    """Every record once, in order: global index `g` is record `g`; Grain's sampler.

    Under sharding the loader of shard `i` of `n` reads records `i, i + n, ...`
    (with `drop_remainder=True`, only the first `num_records // n * n`).
    `seed`, if given, keys each record's generator.
    """

    def __init__(
        self,
        num_records: int,
        shard_options: ShardOptions = NoSharding(),  # noqa: B008 - frozen, as Grain's default
        seed: int | None = None,
    ) -> None:
        self.num_records = _fits("num_records", require_int("num_records", num_records, minimum=1))
        self.shard_options = check_shard_options(shard_options)
        self.seed = None if seed is None else require_int("seed", seed, minimum=0)
        count = self.shard_options.shard_count
        self.length = (
            self.num_records // count * count if self.shard_options.drop_remainder else self.num_records
        )

    def record_keys(self, start: int, stop: int, step: int = 1) -> list[int]:
        return list(self._checked(start, stop, step))  # no array needed: the keys are the indices

    def _keys(self, indices: np.ndarray) -> list[int]:
        keys: list[int] = indices.tolist()
        return keys

    def __repr__(self) -> str:
        return f"SequentialSampler(num_records={self.num_records}, shard_options={self.shard_options!r})"


def _fits(name: str, length: int) -> int:
    """`length` (the global indices of a sampler), if they fit NumPy's int64, as the
    keys and indices are computed: else a ValueError naming `name`."""
    if length > sys.maxsize:
        raise ValueError(
            f"`{name}` makes {length} global indices, more than an int64 holds ({sys.maxsize}): "
            "fewer records or epochs (or `num_epochs=None`, which repeats forever)."
        )
    return length


def _check_seed(seed: Any, shuffle: bool) -> int | None:
    """Grain's rules: a seed is needed to shuffle, and is a non-negative 32-bit int."""
    if seed is None:
        if shuffle:
            raise ValueError("`shuffle=True` needs a `seed` (a non-negative 32-bit int), got seed=None.")
        return None
    require_int("seed", seed)
    if not 0 <= seed < _SEED_LIMIT:
        raise ValueError(f"`seed` must be a non-negative 32-bit int (0 <= seed < 2**32), got {seed}.")
    return int(seed)
