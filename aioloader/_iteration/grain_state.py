"""Grain's checkpoint fields: written into every state, and read from states Grain saved.

Grain 0.2.18's `DataLoaderIterator.get_state()` is `json.dumps(state, indent=4).encode()` of

    {"version": 2, "last_seen_indices": {"0": ..., "1": ...}, "last_worker_index": ...,
     "worker_count": W, "sampler": repr(sampler), "data_source": repr(source)}

Its worker `w` of `W` (one "worker" when `W` is 0) reads the positions
`w, w + W, ...` of the loader's shard `o` of `c` (see `Walk`), and
`last_seen_indices[str(w)]` is the global index of the last one it delivered,
`o + c * (starts[w] - W)`, where `starts[w]` is its first position not
delivered (see `Leftovers`). So the fields say which positions were
delivered, whatever `W`; `last_worker_index` only says which worker Grain
would ask next, and the order is aioloader's own.

aioloader writes the same fields for its own position: the form of Grain's
`worker_count=0` loader (whose order aioloader's outputs follow at any
worker count), or, after resuming a state of Grain's with several workers
and until the walk passes their furthest, the form of that many workers.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import numpy as np

GRAIN_VERSION = 2  # Grain's `_CHECKPOINT_VERSION_NUMBER`
_SHOWN = 200  # the most of a source's repr written into a state (Grain writes all of it)


class GrainNames:
    """What Grain's fields name for a loader: its sampler's `repr`, its source (whose
    `repr` is taken only when a state needs it: it may be long, as an in-memory
    source's is), and the loader's shard `(shard_index, shard_count)`."""

    def __init__(self, sampler: Any, source: Any, shard: list[int]) -> None:
        self.sampler = repr(sampler)
        self._source = source
        self.shard = (shard[0], shard[1])

    @functools.cached_property
    def source(self) -> str:
        """The source's name as written: Grain's, cut short if long (Grain writes all of it)."""
        name = _source_names(self._source)[0]
        return name if len(name) <= _SHOWN else name[: _SHOWN - 3] + "..."

    def is_source(self, name: Any) -> bool:
        """True when a Grain state's `data_source` names this loader's source."""
        return name in _source_names(self._source)


def grain_fields(index: int, starts: list[int] | None, names: GrainNames) -> dict[str, Any]:
    """Grain's fields for walk position `index`, or for `starts` (one per Grain worker)."""
    offset, count = names.shard
    workers = [index] if starts is None else starts
    width = len(workers)
    return {
        "version": GRAIN_VERSION,
        "last_seen_indices": {str(w): offset + count * (start - width) for w, start in enumerate(workers)},
        "last_worker_index": -1,
        "worker_count": 0 if starts is None else width,
        "sampler": names.sampler,
        "data_source": names.source,
    }


def is_grain_state(document: dict[str, Any]) -> bool:
    """True for a state Grain's DataLoader saved (aioloader's have an `aioloader` part)."""
    return "last_seen_indices" in document and "aioloader" not in document


def read_grain_state(document: dict[str, Any], names: GrainNames, length: int | None) -> list[int]:
    """The first position not delivered of each of the state's workers (see `Leftovers`).

    Raises ValueError when the state is not Grain's version 2, names another
    sampler or source, or its indices are not those of this loader's shard.
    """
    _check_names(document, names)
    workers = _int_field(document, "worker_count")
    if workers < 0:
        raise ValueError(f"`state['worker_count']` must be an int >= 0, got {workers}.")
    workers = max(workers, 1)  # Grain's worker_count=0 reads as one worker
    _int_field(document, "last_worker_index")
    seen = document.get("last_seen_indices")
    # Its size first: a damaged `worker_count` must not cost a string per claimed worker.
    if (
        not isinstance(seen, dict)
        or len(seen) != workers
        or sorted(seen) != sorted(str(w) for w in range(workers))
    ):
        raise ValueError(
            f"`state['last_seen_indices']` must map each of Grain's {workers} workers ('0', '1', ...) to "
            f"an index, got {seen!r:.200}."
        )
    return [_start(seen[str(w)], w, workers, names.shard, length) for w in range(workers)]


def _check_names(document: dict[str, Any], names: GrainNames) -> None:
    if document.get("version") != GRAIN_VERSION:
        raise ValueError(
            f"`state` looks like Grain's but has version {document.get('version')!r}; "
            f"aioloader reads Grain's version {GRAIN_VERSION} (Grain 0.2.18's DataLoader)."
        )
    if document.get("sampler") != names.sampler:
        raise ValueError(
            f"`state` was saved by Grain with another sampler: {document.get('sampler')!r}, but this "
            f"loader's sampler is {names.sampler!r} (Grain compares reprs too)."
        )
    if not names.is_source(document.get("data_source")):
        raise ValueError(
            f"`state` was saved by Grain with another data_source: {document.get('data_source')!r:.300}, "
            f"but this loader's is {names.source!r} (Grain compares reprs too)."
        )


def _int_field(document: dict[str, Any], name: str) -> int:
    value = document.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"`state['{name}']` must be an int, got {value!r}.")
    return value


def _start(seen: Any, worker: int, workers: int, shard: tuple[int, int], length: int | None) -> int:
    """Worker `worker`'s first position not delivered, from the last index it delivered."""
    offset, count = shard
    if isinstance(seen, bool) or not isinstance(seen, int) or (seen - offset) % count:
        raise ValueError(
            f"`state['last_seen_indices']['{worker}']` must be an index of this loader's shard "
            f"{offset} of {count}, got {seen!r}: was the state saved by another shard?"
        )
    start = (seen - offset) // count + workers
    if start < worker or (start - worker) % workers:
        raise ValueError(
            f"`state['last_seen_indices']['{worker}']` = {seen} is not an index Grain's worker {worker} "
            f"of {workers} reads in shard {offset} of {count}."
        )
    if length is not None and start - workers >= length:
        raise ValueError(
            f"`state['last_seen_indices']['{worker}']` = {seen} is past the end of the sampler's "
            f"{length} indices for this shard."
        )
    return start if length is None else min(start, length)


def normalized(index: int, starts: list[int] | None) -> list[int] | None:
    """The starts of Grain's workers once position `index` is reached in increasing order
    (everything below it delivered); None when nothing is left unread behind it."""
    if starts is None:
        return None
    width = len(starts)
    firsts = [index + (w - index) % width for w in range(width)]  # each worker's first position >= index
    moved = [max(start, first) for start, first in zip(starts, firsts, strict=True)]
    return moved if moved != firsts else None


def _source_names(source: Any) -> tuple[str, ...]:
    """What Grain's state calls `source` (its `_source_repr`), and for aioloader's
    ArrayRecordDataSource what it called Grain's ArrayRecordDataSource of the same paths."""
    if isinstance(source, list | tuple | np.ndarray):
        return (str(type(source)),)
    # Not imported here: `import aioloader` leaves the storage formats out. A source of
    # that class exists only once its module is loaded.
    arrayrecord = sys.modules.get("aioloader._sources.arrayrecord.source")
    if arrayrecord is not None and isinstance(source, arrayrecord.ArrayRecordDataSource):
        import hashlib  # here: its native hashes cost ~10 ms at import, and only this needs them

        digest = hashlib.sha1(usedforsecurity=False)  # how Grain names a list of paths
        for path in source.paths:
            digest.update(path.encode())
        return (repr(source), f"ArrayRecordDataSource(hash_of_paths={digest.hexdigest()})")
    return (repr(source),)
