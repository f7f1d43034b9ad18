"""A least-recently-used cache bounded in bytes, for decoded chunks and row groups.

Decoding is the expensive part of a random read from a compressed format:
records that share a chunk (ArrayRecord) or a row group (Parquet) should be
decoded once, and the decoded form must not grow without bound.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, NamedTuple, Protocol, TypeVar


class HasNbytes(Protocol):
    """A cached value that reports the memory it holds."""

    @property
    def nbytes(self) -> int: ...


V = TypeVar("V", bound=HasNbytes)


class CacheStatistics(NamedTuple):
    """A snapshot of a cache: what it holds, its bound, and how lookups went."""

    entries: int
    nbytes: int
    max_bytes: int
    hits: int
    misses: int


class ByteBoundedCache(Generic[V]):
    """Values by key, holding at most `max_bytes` (by their `nbytes`); least recently used leave first.

    Thread-safe. The lock is held only for the table's bookkeeping, never
    while a value is made: two threads missing the same key both make it
    (duplicate work, never a wrong value). A value larger than `max_bytes`
    is returned but not kept; `max_bytes=0` keeps nothing.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Hashable, V] = OrderedDict()
        self._nbytes = self._hits = self._misses = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable, make: Callable[[], V]) -> V:
        """The value for `key`, made by `make()` (outside the lock) on a miss."""
        value = self.lookup(key)
        if value is None:
            value = make()
            self.put(key, value)
        return value

    def contains(self, key: Hashable) -> bool:
        """Whether `key` is held now (it may leave at any time; no hit or miss is counted)."""
        with self._lock:
            return key in self._entries

    def lookup(self, key: Hashable) -> V | None:
        """The value kept for `key`, or None; counted as a hit or a miss."""
        with self._lock:
            value = self._entries.get(key)
            if value is None:
                self._misses += 1
                return None
            self._entries.move_to_end(key)
            self._hits += 1
            return value

    def put(self, key: Hashable, value: V) -> None:
        """Keep `value` for `key`, evicting the least recently used (a value over the bound is not kept)."""
        size = value.nbytes
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._nbytes -= old.nbytes
            while self._entries and self._nbytes + size > self.max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self._nbytes -= evicted.nbytes
            self._entries[key] = value
            self._nbytes += size

    def statistics(self) -> CacheStatistics:
        """What the cache holds now and its hits and misses so far."""
        with self._lock:
            return CacheStatistics(len(self._entries), self._nbytes, self.max_bytes, self._hits, self._misses)

    def clear(self) -> None:
        """Drop every value (the statistics stay)."""
        with self._lock:
            self._entries.clear()
            self._nbytes = 0
