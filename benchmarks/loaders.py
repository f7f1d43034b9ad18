"""One small adapter per loader: a workload, its source and transform, and a worker count in; batches out.

An adapter receives the source and a prototype of the transform, already
built (building them is the dataset's cost, not the loader's); everything
it does after that is timed, from constructing the loader to the last batch.
Every loader reads the same `n` records in some shuffled order, applies the
transform once per record, batches with the workload's `collate`, and keeps
at most about `PREFETCH` records read ahead of the consumer.

The peers that need a third-party package live in `peer_*.py` and are
imported only when asked for, so that a loader's imports never weigh on
another's memory or start-up.
"""

from __future__ import annotations

import asyncio
import copy
import importlib
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.first_batch import aioloader_loader
from benchmarks.workloads import IN_FLIGHT, PREFETCH, Workload

Batches = Iterator[Any] | AsyncIterator[Any]


@dataclass(frozen=True)
class Loader:
    """How to run one loader, and where it applies."""

    name: str
    title: str
    requires: str | None  # the module that must be importable, if any
    batches: Callable[[Workload, Any, Any, int, int], Batches]
    settings: Callable[[Workload, int], str]
    min_workers: int = 0
    max_workers: int | None = None
    sync_sources: bool = True
    async_sources: bool = True
    only_workers: tuple[int, ...] | None = None  # a variant measured at a few worker counts only
    not_for: tuple[str, ...] = ()  # workloads this loader cannot read (the reason is given where it is set)
    preload: tuple[str, ...] = ()  # modules imported before the clock starts (imports are not loading)
    # Slow loaders read a fraction of a workload's records, so that each run
    # stays within a few seconds; throughput is per record, so it compares.
    scale: tuple[tuple[str, float], ...] = ()

    def records(self, workload: Workload, scale: float = 1.0) -> int:
        """How many records this loader reads of `workload` (at least two batches' worth)."""
        fraction = dict(self.scale).get(workload.name, 1.0) * scale
        return max(2 * workload.batch_size, int(workload.records * fraction))

    def runs(self, workload: Workload, workers: int) -> bool:
        """True when this loader takes `workload` with `workers` workers."""
        if workers < self.min_workers or (self.max_workers is not None and workers > self.max_workers):
            return False
        if self.only_workers is not None and workers not in self.only_workers:
            return False
        if workload.name in self.not_for:
            return False
        return self.async_sources if workload.is_async else self.sync_sources


def shuffled_keys(n: int) -> np.ndarray:
    """The plain loop's and the pools' sampler: one NumPy permutation."""
    return np.random.default_rng(0).permutation(n)


def key_batches(n: int, batch_size: int) -> Iterator[list[int]]:
    keys = shuffled_keys(n)
    for start in range(0, n, batch_size):
        yield keys[start : start + batch_size].tolist()


def read_batch(source: Any, keys: Sequence[int]) -> list[Any]:
    """The records at `keys`: one `__getitems__` call where the source has it (as aioloader reads)."""
    getitems = getattr(source, "__getitems__", None)
    return list(getitems(keys)) if getitems is not None else [source[k] for k in keys]


async def read_one_by_one(source: Any, keys: Sequence[int]) -> list[Any]:
    return [await source.aget(k) for k in keys]


async def read_concurrently(source: Any, keys: Sequence[int], limit: int) -> list[Any]:
    gate = asyncio.Semaphore(limit)

    async def one(key: int) -> Any:
        async with gate:
            return await source.aget(key)

    return await asyncio.gather(*(one(k) for k in keys))


# The reference: a plain Python loop in the caller's thread.


def plain_batches(workload: Workload, source: Any, transform: Any, workers: int, n: int) -> Iterator[Any]:
    collate, size = workload.collate, workload.batch_size
    if workload.is_async:
        loop = asyncio.new_event_loop()
        try:
            for keys in key_batches(n, size):
                records = loop.run_until_complete(read_one_by_one(source, keys))
                yield collate([transform(r) for r in records])
        finally:
            loop.close()
        return
    batch: list[Any] = []
    append = batch.append
    for key in shuffled_keys(n).tolist():
        append(transform(source[key]))
        if len(batch) == size:
            yield collate(batch)
            batch = []
            append = batch.append
    if batch:
        yield collate(batch)


# The ceiling for threads: whole batches on a ThreadPoolExecutor, nothing else.


class PerThread:
    """Each thread's own deep copy of `prototype`, made in that thread on first use (as aioloader does)."""

    def __init__(self, prototype: Any) -> None:
        self._prototype = prototype
        self._local = threading.local()

    def get(self) -> Any:
        mine = getattr(self._local, "copy", None)
        if mine is None:
            mine = self._local.copy = copy.deepcopy(self._prototype)
        return mine


class BatchWork:
    """Read, transform and collate one batch of keys, in the calling thread."""

    def __init__(self, workload: Workload, source: Any, transform: Any, threads: int) -> None:
        self.source, self.collate = source, workload.collate
        self.transforms = PerThread(transform)
        self.is_async = workload.is_async
        self.in_flight = max(1, IN_FLIGHT // max(1, threads))  # the same async budget as the others
        self._loops = threading.local()

    def __call__(self, keys: Sequence[int]) -> Any:
        transform = self.transforms.get()
        return self.collate([transform(r) for r in self.read(keys)])

    def read(self, keys: Sequence[int]) -> list[Any]:
        if not self.is_async:
            return read_batch(self.source, keys)
        loop = getattr(self._loops, "loop", None)
        if loop is None:
            loop = self._loops.loop = asyncio.new_event_loop()
        return loop.run_until_complete(read_concurrently(self.source, keys, self.in_flight))

    def transform_batch(self, records: Sequence[Any]) -> Any:
        transform = self.transforms.get()
        return self.collate([transform(r) for r in records])


def pool_ahead(workload: Workload, workers: int) -> int:
    return max(workers, PREFETCH // workload.batch_size)


def pool_batches(workload: Workload, source: Any, transform: Any, workers: int, n: int) -> Iterator[Any]:
    work = BatchWork(workload, source, transform, workers)
    ahead = pool_ahead(workload, workers)
    pending: deque[Future[Any]] = deque()
    with ThreadPoolExecutor(workers) as executor:
        for keys in key_batches(n, workload.batch_size):
            if len(pending) >= ahead:
                yield pending.popleft().result()
            pending.append(executor.submit(work, keys))
        while pending:
            yield pending.popleft().result()


# aioloader.


def aioloader_batches(workload: Workload, source: Any, transform: Any, workers: int, n: int) -> Iterator[Any]:
    with iter(aioloader_loader(workload, source, transform, workers, n)) as batches:
        yield from batches


async def aioloader_async_batches(
    workload: Workload, source: Any, transform: Any, workers: int, n: int
) -> AsyncIterator[Any]:
    async with aiter(aioloader_loader(workload, source, transform, workers, n)) as batches:
        async for batch in batches:
            yield batch


def aioloader_auto_batches(
    workload: Workload, source: Any, transform: Any, workers: int, n: int
) -> Iterator[Any]:
    """`worker_count="auto"` (measured at one worker count of the matrix: it chooses its own)."""
    with iter(aioloader_loader(workload, source, transform, "auto", n)) as batches:
        yield from batches


def aioloader_auto_settings(workload: Workload, workers: int) -> str:
    return aioloader_settings(workload, "auto")


def aioloader_settings(workload: Workload, workers: int | str) -> str:
    return f"worker_count={workers}, ReadOptions(num_threads={IN_FLIGHT}, prefetch_buffer_size={PREFETCH})"


def _peer(module: str, function: str) -> Callable[..., Any]:
    """`benchmarks.<module>.<function>`, imported on first call."""

    def call(*args: Any) -> Any:
        return getattr(importlib.import_module(f"benchmarks.{module}"), function)(*args)

    return call


def _grain_scale(trivial: float) -> tuple[tuple[str, float], ...]:
    """The share of each workload Grain reads: its runs are slow (`trivial`: the variant's own)."""
    return (
        ("trivial", trivial),
        ("cpu", 0.08),
        ("tokenize", 0.05),
        ("image", 0.04),
        ("storage", 0.3),
        ("arrayrecord", 0.15),
        ("parquet", 0.05),
        ("llm", 0.1),
        ("png", 0.3),
    )


def _pool_settings(workload: Workload, workers: int) -> str:
    extra = f", {max(1, IN_FLIGHT // workers)} reads in flight per thread" if workload.is_async else ""
    return (
        f"ThreadPoolExecutor({workers}), whole batches, per-thread transform copies, "
        f"{pool_ahead(workload, workers)} batches ahead{extra}"
    )


LOADERS: dict[str, Loader] = {
    loader.name: loader
    for loader in [
        Loader(
            "plain",
            "plain Python loop (reference)",
            None,
            plain_batches,
            lambda w, n: (
                "caller's thread, one record at a time" + (", awaited in turn" if w.is_async else "")
            ),
            max_workers=0,
        ),
        Loader("pool", "ideal thread pool (ceiling)", None, pool_batches, _pool_settings, min_workers=1),
        Loader(
            "aioloader",
            "aioloader (for)",
            "aioloader",
            aioloader_batches,
            aioloader_settings,
            preload=("aioloader",),
        ),
        Loader(
            "aioloader-auto",
            'aioloader (for), worker_count="auto"',
            "aioloader",
            aioloader_auto_batches,
            aioloader_auto_settings,
            only_workers=(0,),  # the row of w=0: it picks its own count
            preload=("aioloader",),
        ),
        Loader(
            "aioloader-async",
            "aioloader (async for)",
            "aioloader",
            aioloader_async_batches,
            aioloader_settings,
            preload=("aioloader",),
        ),
        Loader(
            "grain",
            "Grain DataLoader",
            "grain",
            _peer("peer_grain", "batches"),
            _peer("peer_grain", "settings"),
            preload=("benchmarks.peer_grain",),
            async_sources=False,
            scale=_grain_scale(trivial=0.002),
            only_workers=(0, 2),
        ),
        Loader(
            "grain-t0",
            "Grain DataLoader, num_threads=0",
            "grain",
            _peer("peer_grain", "batches_no_threads"),
            _peer("peer_grain", "settings_no_threads"),
            preload=("benchmarks.peer_grain",),
            async_sources=False,
            scale=_grain_scale(trivial=0.003),
            only_workers=(0, 2),
        ),
        Loader(
            "torch",
            "PyTorch DataLoader",
            "torch",
            _peer("peer_torch", "batches"),
            _peer("peer_torch", "settings"),
            preload=("benchmarks.peer_torch",),
            async_sources=False,
            scale=(("trivial", 0.03), ("tokenize", 0.3), ("image", 0.3)),
            only_workers=(0, 2),
            # array_record's native reader (the GIL build's) crashes or hangs in a forked
            # process once threads have run, and PyTorch forks its workers.
            not_for=("arrayrecord", "llm"),
        ),
        Loader(
            "spdl",
            "SPDL pipeline",
            "spdl.pipeline",
            _peer("peer_spdl", "batches"),
            _peer("peer_spdl", "settings"),
            preload=("benchmarks.peer_spdl",),
            min_workers=1,
            scale=(("trivial", 0.03), ("tokenize", 0.5)),
        ),
    ]
}
