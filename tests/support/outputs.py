"""Taking a loader's outputs: all of them, the error after them, the states along the way."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import numpy as np

from aioloader import DataLoader


async def collect_async(loader: DataLoader) -> list[Any]:
    """Every output of `async for` over `loader`."""
    return [x async for x in loader]


def drain(
    loader: Iterable[Any], errors: type[BaseException] | tuple[type[BaseException], ...] = Exception
) -> tuple[list[Any], BaseException]:
    """Every output before the error (one of `errors`), and the error."""
    got: list[Any] = []
    try:
        for item in loader:
            got.append(item)
    except errors as error:
        return got, error
    raise AssertionError(f"no error after {len(got)} outputs")


async def adrain(iterator: Any, timeout: float = 60.0) -> tuple[list[Any], BaseException]:
    """`drain` for `async for` over `iterator`, within `timeout` seconds (a hang is a
    TimeoutError, not a stuck test run); any exception ends it."""
    got: list[Any] = []

    async def take() -> None:
        async for item in iterator:
            got.append(item)

    try:
        await asyncio.wait_for(take(), timeout)
    except Exception as error:
        return got, error
    raise AssertionError(f"no error after {len(got)} outputs")


def notes(error: BaseException) -> str:
    return "\n".join(getattr(error, "__notes__", []))


def states_at_every_output(loader: DataLoader, count: int) -> list[bytes]:
    """The iterator's state before its first output and after each of `count` outputs."""
    with iter(loader) as iterator:
        states = [iterator.get_state()]
        for _ in range(count):
            next(iterator)
            states.append(iterator.get_state())
    return states


def assert_same(mine: Any, theirs: Any, where: str = "element") -> None:
    """Equal values, structure and dtypes, leaf by leaf."""
    if isinstance(theirs, dict):
        assert isinstance(mine, dict), where
        assert set(mine) == set(theirs), where
        for key in theirs:
            assert_same(mine[key], theirs[key], f"{where}[{key!r}]")
    elif isinstance(theirs, (tuple, list)):
        assert type(mine) is type(theirs), where
        assert len(mine) == len(theirs), where
        for i, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            assert_same(a, b, f"{where}[{i}]")
    elif isinstance(theirs, np.ndarray):
        assert isinstance(mine, np.ndarray), where
        assert mine.dtype == theirs.dtype, (where, mine, theirs)
        np.testing.assert_array_equal(mine, theirs, err_msg=where)
    else:
        assert type(mine) is type(theirs), (where, mine, theirs)
        assert mine == theirs, (where, mine, theirs)
