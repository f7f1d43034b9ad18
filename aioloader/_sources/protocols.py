"""Data source protocols and the two in-memory sources.

A data source maps record keys (ints in `[0, len(source))`) to records. The
loader reads from many threads at once, so a source must be safe to read
concurrently; the real storage formats live in their own modules.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from aioloader._common.validation import require_int, require_len


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


class _Elements:
    """The elements that the InMemoryDataSources of one name share."""

    __slots__ = ("__weakref__", "items")

    def __init__(self, items: Sequence[Any]) -> None:
        self.items = items


# The elements of each name, while some source of that name holds them (weakly:
# an InMemoryDataSource never keeps its elements alive on its own).
_NAMED: weakref.WeakValueDictionary[str, _Elements] = weakref.WeakValueDictionary()
# Names unlinked and not made again: unlinking one of them twice is an error, as in
# Grain, while a name whose last source was closed (released, above) unlinks quietly.
_UNLINKED: set[str] = set()
_NAMED_LOCK = threading.Lock()


class InMemoryDataSource:
    """Elements held in memory; `source[key]` is `elements[key]`. Grain's `InMemoryDataSource`.

    Grain keeps the elements in shared memory for its worker processes;
    aioloader's workers are threads, so the elements are read where they are,
    of any type and without a copy. The rest is Grain's: `name` (made up when
    not given) names the elements, and `InMemoryDataSource(name=...)` without
    elements attaches to those of a source of that name still open in this
    process (FileNotFoundError if none; FileExistsError when making a second
    one). `close()` ends this source's reads (then a ValueError); `unlink()`
    removes the name, so no new source attaches, while the sources still open
    keep reading, as with shared memory.
    """

    def __init__(self, elements: Sequence[Any] | None = None, *, name: str | None = None) -> None:
        if (
            elements is not None
            and not isinstance(elements, Sequence)
            and not hasattr(elements, "__getitem__")
        ):
            raise TypeError(f"`elements` must be a sequence, got {type(elements).__name__}.")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"`name` must be a str or None, got {name!r}.")
        if elements is None and name is None:
            raise ValueError("`elements` or `name` must be given, got neither.")
        # As secrets.token_hex(4), without importing `secrets` (and hashlib, hmac, random).
        self.name = name if name is not None else f"psm_{os.urandom(4).hex()}"
        self._elements: _Elements | None = _share(self.name, elements)

    def _items(self) -> Sequence[Any]:
        if self._elements is None:
            raise ValueError(f"InMemoryDataSource {self.name!r} is closed.")
        return self._elements.items

    def elements(self) -> Sequence[Any]:
        """The elements it holds (a ValueError once closed)."""
        return self._items()

    def __len__(self) -> int:
        return len(self._items())

    def __getitem__(self, key: int) -> Any:
        return self._items()[key]

    def __getitems__(self, keys: Sequence[int]) -> list[Any]:
        return list(map(self._items().__getitem__, keys))

    def close(self) -> None:
        """End this source's reads (idempotent); other sources of the name keep theirs."""
        self._elements = None

    def unlink(self) -> None:
        """Remove the name: no new source can attach to these elements. As with Grain's
        shared memory, `close()` then `unlink()` works, and unlinking a name that was
        unlinked already is a FileNotFoundError."""
        with _NAMED_LOCK:
            if _NAMED.pop(self.name, None) is None and self.name in _UNLINKED:
                raise FileNotFoundError(f"no InMemoryDataSource named {self.name!r} to unlink")
            _UNLINKED.add(self.name)

    def __str__(self) -> str:
        length = "closed" if self._elements is None else len(self._elements.items)
        return f"InMemoryDataSource(name={self.name}, len={length})"

    def __repr__(self) -> str:
        # Grain's repr (its class is SharedMemoryDataSource), elements included.
        elements = "<closed>" if self._elements is None else repr(list(self._elements.items))
        return f"SharedMemoryDataSource({elements}, name={self.name!r})"


def _share(name: str, elements: Sequence[Any] | None) -> _Elements:
    """New elements registered under `name`, or those already registered there."""
    with _NAMED_LOCK:
        found = _NAMED.get(name)
        if elements is None:
            if found is None:
                raise FileNotFoundError(f"no InMemoryDataSource named {name!r} is open in this process")
            return found
        if found is not None:
            raise FileExistsError(f"an InMemoryDataSource named {name!r} already exists")
        _UNLINKED.discard(name)
        shared = _NAMED[name] = _Elements(elements)
        return shared


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

    def state_identity(self) -> list[int]:
        """What a state records of it, to resume on the same range only."""
        r = self._range
        return [r.start, r.stop, r.step]


def describe_source(source: Any) -> dict[str, Any]:
    """What identifies a source, for checkpoint states: its type and length, and for
    aioloader's own sources what they read (`id`, their `state_identity()`): a range's
    bounds, a digest of the files' names, of a MapDataset's graph. A user's source has no
    `id`: its repr may hold an address that changes every run."""
    description: dict[str, Any] = {"type": type(source).__qualname__, "len": len(source)}
    identity = getattr(source, "state_identity", None)
    if callable(identity) and type(source).__module__.startswith("aioloader."):
        description["id"] = identity()
    return description


def digest(text: str) -> str:
    """A short digest of `text`, for a state's `id` of a source."""
    import hashlib  # here: its native hashes cost ~10 ms at import, and only states need them

    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:16]


def same_source(theirs: Any, ours: dict[str, Any]) -> bool:
    """True when a state's source description `theirs` fits this loader's `ours`: the
    same type and length, and the same `id` where both have one (a state saved before
    sources had one resumes on type and length)."""
    if not isinstance(theirs, dict):
        return False
    keys = ["type", "len", *(["id"] if "id" in theirs and "id" in ours else [])]
    return all(theirs.get(key) == ours.get(key) for key in keys)


def is_async_source(source: object) -> bool:
    """True for sources read by awaiting `aget` / `aget_many` on the loop."""
    return callable(getattr(source, "aget", None))


def check_source(source: Any) -> None:
    """Reject, naming `data_source`, what is neither kind of source."""
    if isinstance(source, type):
        raise TypeError(
            f"`data_source` is the class {source.__name__}, not an instance: write {source.__name__}(...)."
        )
    if not hasattr(source, "__len__"):
        raise TypeError(f"`data_source` must define __len__, got {type(source).__name__}.")
    if not (is_async_source(source) or hasattr(source, "__getitem__")):
        raise TypeError(
            f"`data_source` must define __getitem__ (RandomAccessDataSource) or async aget "
            f"(AsyncDataSource), got {type(source).__name__}."
        )
    require_len("data_source", source)
