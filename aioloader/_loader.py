"""`DataLoader`: the public entry point that checks its arguments and makes iterators.

What the iterators need of it is a frozen `LoaderSpec`, built here once.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from aioloader._common.options import ReadOptions
from aioloader._common.validation import require_int
from aioloader._device.device_put import DevicePut
from aioloader._executors.autoscale import default_maximum, default_memory_limit
from aioloader._iteration.grain_state import GrainNames
from aioloader._iteration.iterators import AsyncDataLoaderIterator, DataLoaderIterator
from aioloader._iteration.spec import LoaderSpec
from aioloader._operations.transforms import Batch, Kind, Operations, compile_operations
from aioloader._program.program import Program
from aioloader._sampling.sampler import IndexSampler, SamplerBase
from aioloader._sampling.sharding import NoSharding, ShardOptions, check_shard_options
from aioloader._sampling.walk import Walk
from aioloader._sources.protocols import check_source, describe_source

if TYPE_CHECKING:
    from aioloader._program.read_pool import ReadPool  # loaded with the first workers

EXECUTORS = ("thread", "interpreter")
# Threads are cheap, but not free: each holds a stack and its own copy of the
# operations, and past a few hundred they only contend for the cores and the
# window. A count above this is a typo (10_000) rather than a plan.
MAX_WORKER_COUNT = 256


class DataLoader:
    """Reads `data_source` in the order of `sampler`, applies `operations`, and yields the results.

    The output is a pure function of the source, the sampler and the
    operations: it does not depend on `worker_count`, `executor`,
    `read_options` or timing. `for x in loader` and `async for x in loader`
    each start a new iterator; `iter(loader)` / `aiter(loader)` give one whose
    `get_state()` / `set_state()` checkpoint and resume it.

    `worker_count=0` runs everything in the caller's thread (the debug mode),
    but for a slow source's reads, which go to `read_options.num_threads` read
    threads as Grain's do (none with `num_threads=0`);
    `worker_count=None` means one worker per CPU (`os.cpu_count()`), as in
    Grain; `worker_count=N` runs reads and operations on N worker threads (at
    most `MAX_WORKER_COUNT`, 256), each with its own deep copy of the
    operations. With `executor="interpreter"` (CPython 3.13+), each worker
    thread runs the per-record maps, filters and flat-maps
    (and the reads of a small picklable source) in its own isolated
    subinterpreter, with its own GIL; `worker_count=0` still runs inline, in
    the caller's thread. `device_put=DevicePut(...)` puts each output on the
    accelerator ahead of the consumer.

    `worker_count="auto"` measures while the loader runs and adds or retires workers
    (up to the CPUs the process may use) or lets the consumer's thread run the chunks,
    where it starts with `for` (with `async for` or `start_prefetch()`, one worker),
    without changing the output. No worker is added while the process's resident
    memory is above `memory_limit_bytes` (default: half of the machine's memory), and
    one is retired then. The count in use is `iterator.statistics().worker_count`.
    Without `read_options`, "auto" also tunes the read threads: from
    `ReadOptions().num_threads` (16) they double, up to 256, while reads wait (a slow
    source read through the read pool) and take most of the workers' time; the records
    read ahead (`prefetch_buffer_size`'s window) grow with them, to two per read
    thread; the count in use is `statistics().read_threads`, the window's bound
    `statistics().buffer("records window").capacity`. Given `read_options` are kept as
    they are.

    `sampler` is an `IndexSampler`, a `SequentialSampler`, or any object with
    `__getitem__(index) -> RecordMetadata` (Grain's `Sampler` protocol; it is
    called from the worker threads, so it must be stateless or thread-safe).
    A `RandomMapTransform` needs a sampler with a seed.

    `shard_options` is Grain's: which of the sampler's global indices this
    loader reads. Shard `i` of `n` reads indices `i, i + n, i + 2n, ...`
    (`len(sampler) // n` of them; see `aioloader._sampling.walk`). None, the
    default, takes the sampler's own `shard_options` (as Grain does; a
    sampler without one is read unsharded, where Grain raises). Given, it
    wins over the sampler's for the walk, while the sampler still maps each
    index to a record with its own: as in Grain, give both the same options.

    How far ahead the pipeline runs: with `worker_count=0`, at most one chunk
    of records (cut from `read_options.prefetch_buffer_size`) is being worked
    on. With workers, `read_options.prefetch_buffer_size` records read but
    not yet delivered, plus `worker_buffer_size` finished outputs per worker
    (Grain's "output batches to produce in advance per worker"), make one
    bound, counted in records: `prefetch_buffer_size + worker_count *
    worker_buffer_size * records_per_output` (the batch size, or 1 without
    `Batch`). aioloader's workers share that bound rather than each having
    their own, since they share one ordered output. Both at 0 means one chunk
    at a time.
    """

    def __init__(
        self,
        *,
        data_source: Any,
        sampler: Any,
        operations: Sequence[Any] = (),
        worker_count: int | str | None = 0,
        worker_buffer_size: int = 1,
        shard_options: ShardOptions | None = None,
        read_options: ReadOptions | None = None,
        executor: str = "thread",
        device_put: DevicePut | None = None,
        memory_limit_bytes: int | None = None,
    ) -> None:
        check_source(data_source)
        _check_sampler(sampler, len(data_source))
        self.operations = compile_operations(operations)
        self.shard_options = None if shard_options is None else check_shard_options(shard_options)
        self.walk = Walk(sampler, self.shard_options)
        _check_seed_for_random_ops(self.walk, self.operations)
        self.worker_count: int | str = _check_worker_count(worker_count)
        self.memory_limit_bytes = _check_memory_limit(memory_limit_bytes, worker_count)
        self.worker_buffer_size = require_int("worker_buffer_size", worker_buffer_size, minimum=0)
        if executor not in EXECUTORS:
            raise ValueError(f"`executor` must be one of {EXECUTORS}, got {executor!r}.")
        if read_options is not None and not isinstance(read_options, ReadOptions):
            raise TypeError(f"`read_options` must be a ReadOptions or None, got {read_options!r}.")
        if device_put is not None and not isinstance(device_put, DevicePut):
            raise TypeError(f"`device_put` must be a DevicePut or None, got {device_put!r}.")
        if executor == "interpreter":  # its modules load only for it
            from aioloader._executors.interpreter.executor import check_interpreter_executor

            check_interpreter_executor(self.operations)
        self.data_source, self.sampler, self.executor = data_source, sampler, executor
        self.device_put = device_put
        self._default_read_options = read_options is None  # "auto" tunes the read threads then
        self.read_options = read_options or ReadOptions()
        self._spec = self._make_spec()

    def _make_spec(self) -> LoaderSpec:
        return LoaderSpec(
            make_program=functools.partial(
                self._program, self.data_source, self.operations, self.read_options
            ),
            walk=self.walk,
            read_options=self.read_options,
            window=self._window(),
            worker_count=self._most_workers(),
            executor=self.executor,
            device_put=self.device_put,
            description={
                "sampler": self.walk.describe(),
                "data_source": describe_source(self.data_source),
                "operations": self.operations.describe(),
            },
            grain=GrainNames(self.sampler, self.data_source, self.walk.shard),
            length=self.walk.length,
            auto_memory_limit=self._auto_memory_limit(),
            auto_read_threads=self.worker_count == "auto" and self._default_read_options,
        )

    def _most_workers(self) -> int:
        """The worker count, or with "auto" the most workers it may start."""
        if self.worker_count == "auto":
            return min(default_maximum(), MAX_WORKER_COUNT)
        return int(self.worker_count)

    def _auto_memory_limit(self) -> int | None:
        if self.worker_count != "auto":
            return None
        return default_memory_limit() if self.memory_limit_bytes is None else self.memory_limit_bytes

    @staticmethod
    def _program(
        source: Any,
        operations: Operations,
        options: ReadOptions,
        walk: Walk,
        read_pool: ReadPool | None,
        fuse: bool,
        workers: bool,
    ) -> Program:
        return Program(source, walk, operations, options.num_threads, read_pool, fuse, workers)

    def _window(self) -> int:
        """The records the threaded pipeline may hold ahead of the consumer (see the class)."""
        batch = self.operations.batch
        per_output = 1 if batch is None else batch.batch_size
        ahead = self._most_workers() * self.worker_buffer_size * per_output
        return self.read_options.prefetch_buffer_size + ahead

    def __iter__(self) -> DataLoaderIterator:
        return DataLoaderIterator(self._spec)

    def __aiter__(self) -> AsyncDataLoaderIterator:
        return AsyncDataLoaderIterator(self._spec)

    def __repr__(self) -> str:
        return (
            f"DataLoader(data_source={self.data_source!r}, sampler={self.sampler!r}, "
            f"operations={self.operations.describe()}, worker_count={self.worker_count})"
        )


def _check_worker_count(worker_count: Any) -> int | str:
    """`worker_count` checked: "auto", or an int from 0 to `MAX_WORKER_COUNT`; None
    (Grain's "let the backend choose") is one worker per CPU."""
    if isinstance(worker_count, str):
        if worker_count == "auto":
            return worker_count
        raise ValueError(f'`worker_count` must be an int, None or "auto", got {worker_count!r}.')
    count = (os.cpu_count() or 1) if worker_count is None else worker_count
    return require_thread_count("worker_count", count)


def require_thread_count(name: str, count: Any) -> int:
    """`count`, an int from 0 to `MAX_WORKER_COUNT`, else an error naming `name` (the
    Dataset API's `prefetch`/`multithread_prefetch` check theirs when the pipeline is built)."""
    threads = require_int(name, count, minimum=0)
    if threads > MAX_WORKER_COUNT:
        raise ValueError(
            f"`{name}` must be at most {MAX_WORKER_COUNT} (the most worker threads a loader "
            f"starts), got {threads}."
        )
    return threads


def _check_memory_limit(limit: Any, worker_count: Any) -> int | None:
    if limit is None:
        return None
    if worker_count != "auto":
        raise ValueError(
            f'`memory_limit_bytes` bounds `worker_count="auto"`, but worker_count={worker_count!r}; '
            f'drop it or use worker_count="auto".'
        )
    return require_int("memory_limit_bytes", limit, minimum=1)


def _check_sampler(sampler: Any, source_length: int) -> None:
    if isinstance(sampler, type):
        raise TypeError(
            f"`sampler` is the class {sampler.__name__}, not an instance: write {sampler.__name__}(...)."
        )
    if not callable(getattr(sampler, "__getitem__", None)):
        raise TypeError(
            f"`sampler` must have __getitem__(index) -> RecordMetadata (an IndexSampler, a "
            f"SequentialSampler or Grain's Sampler protocol), got {sampler!r}."
        )
    if isinstance(sampler, SamplerBase) and sampler.num_records > source_length:
        raise ValueError(
            f"`sampler` has num_records={sampler.num_records}, "
            f"but `data_source` holds only {source_length} records."
        )


def _check_seed_for_random_ops(walk: Walk, operations: Operations) -> None:
    """A random operation draws from each record's generator, which comes from the seed."""
    if walk.seed is not None or not walk.makes_rngs_from_seed:
        return
    for op in (*operations.before, *operations.after):
        if op.kind is Kind.RANDOM_MAP:
            raise ValueError(
                f"`{op.name}` ({op.what}) needs each record's generator, but `sampler` has seed=None: "
                f"give the sampler a seed, e.g. IndexSampler(..., seed=0)."
            )


def load(
    source: Any,
    *,
    num_epochs: int | None = None,
    shuffle: bool = False,
    seed: int | None = None,
    shard_options: ShardOptions = NoSharding(),  # noqa: B008 - frozen, as Grain's default
    transformations: Sequence[Any] = (),
    batch_size: int | None = None,
    drop_remainder: bool = False,
    worker_count: int | str | None = 0,
    read_options: ReadOptions | None = None,
) -> DataLoader:
    """Grain's `load`: a `DataLoader` over `source` for a simple pipeline.

    An `IndexSampler` of `len(source)` records with `num_epochs`, `shuffle`, `seed`
    and `shard_options`; `transformations`, then `Batch(batch_size, drop_remainder)`
    if `batch_size` is given; `worker_count` and `read_options` as `DataLoader` takes
    them. The same records in the same order as Grain's `load` with the same arguments.
    """
    sampler = IndexSampler(
        len(source), shard_options=shard_options, shuffle=shuffle, num_epochs=num_epochs, seed=seed
    )
    operations = list(transformations)
    if batch_size is not None:
        operations.append(Batch(batch_size, drop_remainder=drop_remainder))
    return DataLoader(
        data_source=source,
        sampler=sampler,
        operations=operations,
        worker_count=worker_count,
        read_options=read_options,
    )
