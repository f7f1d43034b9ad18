"""Which contiguous slice of the records one process reads; Grain's classes, with Grain's reprs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aioloader._common.validation import bool_field, int_field


@dataclass(frozen=True)
class ShardOptions:
    """Read shard `shard_index` of `shard_count` disjoint shards.

    Shards are contiguous ranges that together cover every record; the first
    `num_records % shard_count` shards hold one record more than the others,
    unless `drop_remainder=True`, which drops those records so that every
    shard has the same length.
    """

    shard_index: int
    shard_count: int
    drop_remainder: bool = False

    def __post_init__(self) -> None:
        int_field(self, "shard_count", minimum=1)
        int_field(self, "shard_index", minimum=0)
        bool_field(self, "drop_remainder")
        if self.shard_index >= self.shard_count:
            raise ValueError(
                f"`shard_index` must be less than `shard_count` ({self.shard_count}), got {self.shard_index}."
            )

    def bounds(self, num_records: int) -> tuple[int, int]:
        """The half-open range `[start, stop)` of record keys in this shard."""
        per_shard, extra = divmod(num_records, self.shard_count)
        start = per_shard * self.shard_index
        if self.drop_remainder:
            return start, start + per_shard
        start += min(self.shard_index, extra)
        return start, start + per_shard + (1 if self.shard_index < extra else 0)


class NoSharding(ShardOptions):
    """Read every record: one shard of one."""

    def __init__(self) -> None:
        super().__init__(shard_index=0, shard_count=1, drop_remainder=False)


class ShardByJaxProcess(ShardOptions):
    """One shard per JAX process: `jax.process_index()` of `jax.process_count()`.

    JAX is imported here, when the options are made, and nowhere else in the
    sampler, so that loaders without it do not need it.
    """

    def __init__(self, drop_remainder: bool = False) -> None:
        import jax

        super().__init__(
            shard_index=jax.process_index(), shard_count=jax.process_count(), drop_remainder=drop_remainder
        )


def check_shard_options(shard_options: Any) -> ShardOptions:
    """`shard_options` if it is a ShardOptions (NoSharding and ShardByJaxProcess are)."""
    if not isinstance(shard_options, ShardOptions):
        raise TypeError(f"`shard_options` must be a ShardOptions, got {shard_options!r}.")
    return shard_options
