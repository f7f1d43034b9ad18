"""Data source protocols and the two in-memory sources.

A data source maps record keys (ints in `[0, len(source))`) to records. The
loader reads from many threads at once, so a source must be safe to read
concurrently; the real storage formats live in their own modules.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from aioloader._common.validation import require_int


@runtime_checkable
class RandomAccessDataSource(Protocol):
    """Records by key, read on the worker threads.

    A source may also define `__getitems__(keys) -> list` to read many keys
    at once (one call per chunk of records); the loader uses it when present.
    """

    def __len__(self) -> int: ...

    def __getitem__(self, key: int) -> Any: ...


@runtime_checkable
class AsyncDataSource(Protocol):
    """Records by key, awaited on the event loop (network or disk I/O).

    A source may also define `async aget_many(keys) -> list`; otherwise the
    loader awaits `aget` for each key, with at most
    `ReadOptions.num_threads` reads in flight.
    """

    def __len__(self) -> int: ...

    async def aget(self, key: int) -> Any: ...


class InMemoryDataSource:
    """A sequence held in memory; `source[key]` is `seq[key]`."""

    def __init__(self, seq: Sequence[Any]) -> None:
        if not isinstance(seq, Sequence) and not hasattr(seq, "__getitem__"):
            raise TypeError(f"`seq` must be a sequence, got {type(seq).__name__}.")
        self._seq = seq

    def __len__(self) -> int:
        return len(self._seq)

    def __getitem__(self, key: int) -> Any:
        return self._seq[key]

    def __getitems__(self, keys: Sequence[int]) -> list[Any]:
        return list(map(self._seq.__getitem__, keys))

    def __repr__(self) -> str:
        return f"InMemoryDataSource(<{type(self._seq).__name__} of {len(self._seq)}>)"


class RangeDataSource:
    """The integers of `range(start, stop, step)`; key `k` is the k-th of them."""

    def __init__(self, start: int, stop: int, step: int = 1) -> None:
        for name, value in (("start", start), ("stop", stop), ("step", step)):
            require_int(name, value)
        if step == 0:
            raise ValueError("`step` must not be zero, got 0.")
        self._range = range(start, stop, step)

    def __len__(self) -> int:
        return len(self._range)

    def __getitem__(self, key: int) -> int:
        return self._range[key]

    def __getitems__(self, keys: Sequence[int]) -> list[int]:
        return list(map(self._range.__getitem__, keys))

    def __repr__(self) -> str:
        r = self._range
        return f"RangeDataSource(start={r.start}, stop={r.stop}, step={r.step})"


def describe_source(source: Any) -> dict[str, Any]:
    """What identifies a source, for checkpoint states: its type and length."""
    return {"type": type(source).__qualname__, "len": len(source)}


def is_async_source(source: object) -> bool:
    """True for sources read by awaiting `aget` / `aget_many` on the loop."""
    return callable(getattr(source, "aget", None))


def check_source(source: Any) -> None:
    """Reject, naming `data_source`, what is neither kind of source."""
    if not hasattr(source, "__len__"):
        raise TypeError(f"`data_source` must define __len__, got {type(source).__name__}.")
    if not (is_async_source(source) or hasattr(source, "__getitem__")):
        raise TypeError(
            f"`data_source` must define __getitem__ (RandomAccessDataSource) or async aget "
            f"(AsyncDataSource), got {type(source).__name__}."
        )
    require_int("len(data_source)", len(source), minimum=0)
