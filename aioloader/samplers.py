"""Grain's `grain.samplers`: `grain.samplers.IndexSampler` works with `import aioloader as grain`."""

from aioloader._sampling.sampler import IndexSampler, Sampler, SequentialSampler

__all__ = ["IndexSampler", "Sampler", "SequentialSampler"]
