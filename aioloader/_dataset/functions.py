"""The user's transform, as the function a dataset calls: aioloader's and Grain's transform
objects (see `is_grain`), or a plain callable, as Grain's `MapDataset.map` / `random_map` /
`map_with_index` / `filter` take them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from aioloader._common.failures import note
from aioloader._operations.transforms import (
    FilterTransform,
    MapTransform,
    MapWithIndexTransform,
    RandomMapTransform,
    is_async,
    is_grain,
    refuse_class,
)

# What each dataset method accepts: aioloader's base class, Grain's class name, the method.
KINDS: dict[str, tuple[type, str, str]] = {
    "map": (MapTransform, "Map", "map"),
    "random_map": (RandomMapTransform, "RandomMap", "random_map"),
    "filter": (FilterTransform, "Filter", "filter"),
    "map_with_index": (MapWithIndexTransform, "MapWithIndex", "map_with_index"),
}


def resolve(kind: str, transform: Any) -> tuple[Callable[..., Any], str]:
    """The function to call for `transform`, and a name for messages (`Tokenize.map`).

    A transform object gives its bound method; any other callable is called as it is.
    The Dataset API awaits nothing: an `async def` function is a TypeError.
    """
    base, grain_name, method = KINDS[kind]
    refuse_class("transform", transform)
    if isinstance(transform, base) or is_grain(transform, grain_name):
        function, what = getattr(transform, method), f"{type(transform).__name__}.{method}"
    elif callable(transform):
        function, what = transform, getattr(transform, "__qualname__", type(transform).__name__)
    else:
        raise TypeError(
            f"`transform` of `{kind}` must be a {base.__name__} (aioloader's or Grain's) or a callable, "
            f"got {transform!r}."
        )
    if is_async(function):
        raise TypeError(
            f"`transform` of `{kind}` ({what}) must not be `async def`: the Dataset API awaits nothing "
            "(a DataLoader's operations may hold an async map)."
        )
    return function, what


def add_note(error: BaseException, what: str, index: int) -> None:
    """Name the transform and the element's index under the user's traceback (PEP 678)."""
    note(error, f"aioloader: {what} failed on the element at index {index}")


def derive_seed(node: Any) -> int | None:
    """The seed for a random transformation of `node` given none: Grain's derivation from
    the nearest `seed()` calls upstream and their distances, or None without one.

    The graph is walked breadth first, parents in order (MapDatasets and IterDatasets
    alike): the order is part of the result.
    """
    found: list[int] = []
    to_visit: list[tuple[Any, int]] = [(node, 0)]
    while to_visit:
        current, depth = to_visit.pop(0)
        seed = getattr(current, "_seed_rng_seed", None)
        if seed is not None:
            found.extend((seed, depth))
        else:
            to_visit.extend((parent, depth + 1) for parent in getattr(current, "_parents", ()))
    if not found:
        return None
    return int(np.random.SeedSequence(found).generate_state(1, dtype=np.uint32)[0])
