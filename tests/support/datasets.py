"""Small pieces the Dataset tests share: transforms that Grain and aioloader both take (plain
functions: each side calls them the same way), and a state taken after some elements."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest


def odd(x: int) -> bool:
    return x % 2 == 1


def tenfold(x: int) -> int:
    return 10 * x


def draw(x: Any, rng: np.random.Generator) -> tuple[Any, int]:
    """The element and one draw of its generator (a random map's output to compare)."""
    return x, int(rng.integers(1 << 40))


def state_after(ds: Any, k: int) -> dict[str, Any]:
    """The state of a fresh iterator of `ds` after `k` elements (the iterator then closed)."""
    iterator = iter(ds)
    for _ in range(k):
        next(iterator)
    state: dict[str, Any] = iterator.get_state()
    iterator.close()
    return state


def assert_refuses_state(source: Any, target: Any) -> None:
    """A fresh iterator of `target` refuses the state of `source` after one element."""
    state = state_after(source, 1)
    fresh = iter(target)
    try:
        with pytest.raises(ValueError, match="state"):
            fresh.set_state(state)
    finally:
        fresh.close()


def async_halves(ds: Any, first: int = 2) -> tuple[list[Any], list[Any]]:
    """`first` elements by `async for`, then the rest from a fresh async iterator given the
    first one's state: together, what `ds` gives."""

    async def run() -> tuple[list[Any], list[Any]]:
        iterator = aiter(ds)
        taken = [await anext(iterator) for _ in range(first)]
        fresh = aiter(ds)
        fresh.set_state(iterator.get_state())
        await iterator.aclose()
        return taken, [x async for x in fresh]

    return asyncio.run(run())


# (make, the error's type, a pattern its message must match): one bad argument each.
BadArgument = tuple[Callable[[], Any], type[Exception], str]


def refused_by_name(cases: list[BadArgument]) -> Callable[..., None]:
    """A test, one case per `cases` entry (named by its pattern): calling `make` raises
    the error, with a message naming what was wrong."""

    @pytest.mark.parametrize(("make", "kind", "message"), cases, ids=[case[2] for case in cases])
    def test(make: Callable[[], Any], kind: type[Exception], message: str) -> None:
        with pytest.raises(kind, match=message):
            make()

    return test
