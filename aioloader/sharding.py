"""Grain's `grain.sharding`: `grain.sharding.ShardOptions` works with `import aioloader as grain`."""

from aioloader._sampling.sharding import NoSharding, ShardByJaxProcess, ShardOptions

__all__ = ["NoSharding", "ShardByJaxProcess", "ShardOptions"]
