"""The loader's walk through a sampler: positions `p = 0, 1, 2, ...` of one shard, in Grain's order.

Grain's `DataLoader` reads, for shard `i` of `n`, the global indices
`i, i + n, i + 2n, ...`: position `p` is global index `p * n + i`, and it
reads `len(sampler) // n` of them (a sampler without `__len__` is measured
by where its lookups start raising IndexError). Positions are what the
loader counts: chunks cut them, windows hold them, checkpoints record them;
global indices are what the sampler, `RecordMetadata.index`, error messages
and the per-record generators see.

Grain's walk is kept as it is, quirks included: with `drop_remainder=False`
and a record count that `n` does not divide, every shard reads
`num_epochs * num_records // n` positions whatever its own size, so a shard
holding one record more misses it in some epochs, and the other shards read
into one more epoch. `drop_remainder=True` gives every shard whole epochs.

For aioloader's own samplers a chunk's keys are computed together
(vectorised); any other object with `__getitem__(index) -> RecordMetadata`
(Grain's `Sampler` protocol) is read one index at a time, and its records
keep the generators its metadata carries.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from aioloader._common.validation import require_len
from aioloader._sampling.leftovers import Detour
from aioloader._sampling.sampler import IndexSampler, SamplerBase
from aioloader._sampling.sharding import NoSharding, ShardOptions


class Walked:
    """Positions `[start, start + len(indices))` of a walk.

    `keys[j]` is the record key of global index `indices[j]`. `rngs` holds
    the generators of a foreign sampler's metadata (None: made from the seed
    when a random operation asks). `error`, if any, is what the sampler
    raised at `indices[len(keys)]`; the keys stop there.
    """

    __slots__ = ("error", "indices", "keys", "rngs")

    def __init__(
        self,
        keys: list[int],
        indices: Sequence[int],
        rngs: list[np.random.Generator | None] | None = None,
        error: Exception | None = None,
    ) -> None:
        self.keys, self.indices, self.rngs, self.error = keys, indices, rngs, error

    def then(self, later: Walked) -> Walked:
        """These positions followed by `later`'s (unless these stopped at an error)."""
        if self.error is not None:
            return self
        rngs = None
        if self.rngs is not None or later.rngs is not None:
            rngs = (self.rngs or [None] * len(self.keys)) + (later.rngs or [None] * len(later.keys))
        return Walked(self.keys + later.keys, [*self.indices, *later.indices], rngs, later.error)


class Walk:
    """The positions one loader reads from `sampler`, for the shard of `shard_options`.

    Immutable and thread-safe for aioloader's samplers; a foreign sampler's
    `__getitem__` is called from the worker threads, as a source's is.
    """

    def __init__(self, sampler: Any, shard_options: Any = None) -> None:
        shard = _shard_of(sampler) if shard_options is None else shard_options
        self.sampler = sampler
        self.detour: Detour | None = None  # see `resumed`
        self._stride, self._offset = shard.shard_count, shard.shard_index
        self._own = isinstance(sampler, SamplerBase)
        self.seed: int | None = sampler.seed if self._own else None
        total = sampler.length if self._own else _foreign_length(sampler)
        self.length: int | None = None if total is None else total // self._stride
        if not self._own and self.length != 0:
            _check_metadata(sampler, self._offset)
        if isinstance(sampler, IndexSampler) and sampler.shard_length == 0 and self.length != 0:
            raise ValueError(
                f"`sampler` gives shard {sampler.shard_options!r} none of its {sampler.num_records} "
                f"records, but a loader would read {self.length or 'infinitely many'} indices from it."
            )

    def resumed(self, detour: Detour) -> Walk:
        """This walk with `detour` laid on it: where a Grain loader's state left records
        unread behind its furthest worker (see `aioloader._sampling.leftovers`)."""
        walk = copy.copy(self)
        walk.detour = detour
        return walk

    def indices(self, start: int, stop: int) -> range:
        """The global indices of positions `[start, stop)` (without a detour)."""
        return range(start * self._stride + self._offset, stop * self._stride + self._offset, self._stride)

    def walk(self, start: int, stop: int) -> Walked:
        """Keys (and a foreign sampler's generators) of positions `[start, stop)`."""
        detour = self.detour
        if detour is None or start >= detour.frontier:
            return self._walk(self.indices(start, stop))
        middle = min(stop, detour.frontier)
        positions = detour.true_positions(start, middle) * self._stride + self._offset
        walked = self._walk(positions.tolist())
        return walked if stop == middle else walked.then(self._walk(self.indices(middle, stop)))

    def _walk(self, indices: Sequence[int]) -> Walked:
        if self._own:
            if isinstance(indices, range):
                return Walked(self.sampler.record_keys(indices.start, indices.stop, indices.step), indices)
            return Walked(self.sampler.keys_at(indices), indices)
        keys: list[int] = []
        rngs: list[np.random.Generator | None] = []
        for index in indices:
            try:
                metadata = self.sampler[index]
                key, rng = metadata.record_key, metadata.rng
            except Exception as error:
                return Walked(keys, indices, rngs, error)
            keys.append(key)
            rngs.append(rng)
        return Walked(keys, indices, rngs)

    def describe(self) -> dict[str, Any]:
        """What identifies the walk's output, for checkpoint states.

        For aioloader's samplers, the sampler's description, and the walk's
        shard only where the loader's `shard_options` differ from the sampler's.
        """
        if not self._own:
            foreign: dict[str, Any] = {"type": type(self.sampler).__qualname__, "shard": self.shard}
            # object's own repr holds an address, new each run: no state would ever resume
            if getattr(type(self.sampler), "__repr__", None) is not object.__repr__:
                foreign["repr"] = repr(self.sampler)
            return foreign
        described: dict[str, Any] = self.sampler.describe()
        if self.shard != described["shard"][:2]:
            described["walk"] = self.shard
        return described

    @property
    def makes_rngs_from_seed(self) -> bool:
        """True when generators come from `seed` (aioloader's samplers), not from the metadata."""
        return self._own

    @property
    def shard(self) -> list[int]:
        """`[shard_index, shard_count]` of the walk."""
        return [self._offset, self._stride]


def _shard_of(sampler: Any) -> ShardOptions:
    """The sampler's own shard (`shard_options`, or Grain's `_shard_options`), else no sharding."""
    for name in ("shard_options", "_shard_options"):
        options = getattr(sampler, name, None)
        if options is not None and hasattr(options, "shard_index") and hasattr(options, "shard_count"):
            return ShardOptions(options.shard_index, options.shard_count, bool(options.drop_remainder))
    return NoSharding()


def _check_metadata(sampler: Any, index: int) -> None:
    """Reject at once a sampler whose lookups do not give metadata (a list, a range)."""
    metadata = sampler[index]
    if not (hasattr(metadata, "record_key") and hasattr(metadata, "index")):
        raise TypeError(
            f"`sampler[{index}]` must return a RecordMetadata (with index, record_key and rng), "
            f"got {metadata!r} of type {type(metadata).__name__}."
        )


def _foreign_length(sampler: Any) -> int | None:
    """How many global indices a foreign sampler holds: `len()`, else where lookups
    start raising IndexError; None for `sys.maxsize` (Grain's "forever")."""
    length = require_len("sampler", sampler) if hasattr(sampler, "__len__") else _first_missing(sampler)
    return None if length >= sys.maxsize else length


def _first_missing(sampler: Any) -> int:
    """The first index whose lookup raises IndexError, as Grain's bisection finds it, but
    probing up from 0 (indices 0, 1, 3, 7, ...) so that a sampler of n indices costs
    O(log n) lookups and is never asked for indices far past its end."""
    found, probe = 0, 0  # every index below `found` exists
    while probe < sys.maxsize and _exists(sampler, probe):
        found, probe = probe + 1, 2 * probe + 1
    high = min(probe, sys.maxsize)
    while found < high:
        middle = (found + high) // 2
        if _exists(sampler, middle):
            found = middle + 1
        else:
            high = middle
    return found


def _exists(sampler: Any, index: int) -> bool:
    try:
        sampler[index]
    except IndexError:
        return False
    return True
