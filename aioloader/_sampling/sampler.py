"""Samplers: the stateless map from output position to record key.

`sampler[index]` costs O(1) time and memory for any index, with no
permutation stored, so a sampler over a billion records is as cheap as one
over ten, and resuming at any index needs nothing but the index.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from aioloader._common.validation import require_bool, require_int
from aioloader._sampling.metadata import RecordMetadata
from aioloader._sampling.permutation import Permutation, splitmix64
from aioloader._sampling.sharding import NoSharding, ShardOptions

KEY_BLOCK = 8192  # shuffled keys are computed this many at a time


class IndexSampler:
    """Record keys of this process's shard, shuffled anew every epoch if asked.

    Global index `i` falls in epoch `i // shard_length` at position
    `i % shard_length`; with `shuffle=True` the position goes through a keyed
    bijection whose key depends on (`seed`, epoch), so every epoch is a
    different permutation of the whole shard. `num_epochs=None` repeats
    forever.
    """

    def __init__(
        self,
        num_records: int,
        shard_options: ShardOptions | None = None,
        shuffle: bool = False,
        num_epochs: int | None = 1,
        seed: int = 0,
    ) -> None:
        self.num_records = require_int("num_records", num_records, minimum=0)
        shard_options = NoSharding() if shard_options is None else shard_options
        if not isinstance(shard_options, ShardOptions):
            raise TypeError(f"`shard_options` must be a ShardOptions, got {shard_options!r}.")
        self.shard_options = shard_options
        self.shuffle = require_bool("shuffle", shuffle)
        self.num_epochs = None if num_epochs is None else require_int("num_epochs", num_epochs, minimum=1)
        self.seed = require_int("seed", seed, minimum=0)
        self._start, stop = shard_options.bounds(num_records)
        self.shard_length = stop - self._start
        if self.num_epochs is None and self.shard_length == 0:
            raise ValueError(
                f"`num_epochs=None` repeats forever, but shard {shard_options} holds no records."
            )
        self._permutations: dict[int, Permutation] = {}
        self._cached_block: tuple[int, int, list[int]] = (-1, 0, [])  # (number, first index, keys)

    @property
    def length(self) -> int | None:
        """How many indices the sampler yields; None when it repeats forever."""
        return None if self.num_epochs is None else self.num_epochs * self.shard_length

    def __len__(self) -> int:
        if self.length is None:
            raise TypeError("an IndexSampler with `num_epochs=None` is infinite and has no len().")
        return self.length

    def __getitem__(self, index: int) -> RecordMetadata:
        require_int("index", index, minimum=0)
        if self.length is not None and index >= self.length:
            raise IndexError(f"index {index} is out of range for a sampler of length {self.length}.")
        key = self.record_keys(index, index + 1)[0]
        return RecordMetadata.lazy(index, key, self.seed)

    def record_keys(self, start: int, stop: int) -> list[int]:
        """The record keys of indices `[start, stop)`, computed together.

        Shuffled keys are computed a block of `KEY_BLOCK` indices at a time and
        the last block is kept: numpy's fixed cost per call is then paid once
        per block, not once per chunk. Memory stays one block, whatever the
        dataset size.
        """
        if not self.shuffle:
            return self._keys_between(start, stop)
        keys: list[int] = []
        while start < stop:
            first, block = self._block(start // KEY_BLOCK)
            keys += block[start - first : stop - first]
            start = first + len(block)
        return keys

    def _block(self, number: int) -> tuple[int, list[int]]:
        cached = self._cached_block
        if cached[0] != number:
            first = number * KEY_BLOCK
            stop = first + KEY_BLOCK if self.length is None else min(first + KEY_BLOCK, self.length)
            cached = self._cached_block = (number, first, self._keys_between(first, stop))
        return cached[1], cached[2]

    def _keys_between(self, start: int, stop: int) -> list[int]:
        """Keys of `[start, stop)`: one range, or one vectorised permutation, per epoch."""
        keys: list[int] = []
        while start < stop:
            epoch, first = divmod(start, self.shard_length)
            count = min(stop - start, self.shard_length - first)
            if self.shuffle:
                positions = self._permutation(epoch)(np.arange(first, first + count, dtype=np.int64))
                keys += (positions + self._start).tolist()
            else:
                keys += range(self._start + first, self._start + first + count)
            start += count
        return keys

    def _permutation(self, epoch: int) -> Permutation:
        found = self._permutations.get(epoch)
        if found is None:
            found = Permutation(self.shard_length, splitmix64(splitmix64(self.seed) ^ epoch))
            # Chunks move forward through epochs; keeping the last two covers a
            # chunk that spans an epoch boundary without growing forever.
            self._permutations = {e: p for e, p in self._permutations.items() if e >= epoch - 1}
            self._permutations[epoch] = found
        return found

    def describe(self) -> dict[str, Any]:
        """What identifies this sampler's output, for checkpoint states."""
        options = self.shard_options
        return {
            "type": type(self).__name__,
            "num_records": self.num_records,
            "shard": [options.shard_index, options.shard_count, options.drop_remainder],
            "shuffle": self.shuffle,
            "num_epochs": self.num_epochs,
            "seed": self.seed,
        }

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_records={self.num_records}, shard_options={self.shard_options}, "
            f"shuffle={self.shuffle}, num_epochs={self.num_epochs}, seed={self.seed})"
        )


class SequentialSampler(IndexSampler):
    """Every record of the shard once, in order.

    `seed` (as in Grain) keys the generators that random transforms receive.
    """

    def __init__(self, num_records: int, shard_options: ShardOptions | None = None, seed: int = 0) -> None:
        super().__init__(num_records, shard_options, shuffle=False, num_epochs=1, seed=seed)

    def __repr__(self) -> str:
        return f"SequentialSampler(num_records={self.num_records}, shard_options={self.shard_options})"
