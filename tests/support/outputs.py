"""Taking a loader's outputs: all of them, the error after them, the states along the way."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

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
