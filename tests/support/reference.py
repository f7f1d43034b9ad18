"""The pipelines the contract tests share, and an independent reference evaluator.

The transforms live at module level so that they can be copied per thread
and pickled for other interpreters. `reference_outputs` evaluates a pipeline
the slow, obvious way (one record at a time, Grain's semantics, batches
stacked with `np.stack` through a tree walk of its own) so that the loader is
checked against its meaning, not only against itself.

`LateEarly` makes later chunks finish first (see `out_of_order`), so that a
reassembly that delivered results in the order they finish would fail.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from aioloader import (
    Batch,
    DataLoader,
    FilterTransform,
    FlatMapTransform,
    IndexSampler,
    MapTransform,
    RandomMapTransform,
    RangeDataSource,
)


class AddOne(MapTransform):
    def map(self, element: Any) -> Any:
        return element + 1


class Noise(RandomMapTransform):
    """Adds a number drawn from the record's generator."""

    def random_map(self, element: Any, rng: np.random.Generator) -> Any:
        return element * 1000 + int(rng.integers(0, 1000))


class KeepSome(FilterTransform):
    def filter(self, element: Any) -> bool:
        return element % 3 != 0


class Spread(FlatMapTransform):
    """0 to 3 elements per record, so flat-maps split records across batches."""

    def flat_map(self, element: Any) -> Iterable[Any]:
        return [element * 10 + k for k in range(element % 4)]


class ToDict(MapTransform):
    def map(self, element: Any) -> Any:
        return {"x": np.int64(element), "pair": (np.float32(element) / 2, np.arange(3) + element)}


class BatchNoise(RandomMapTransform):
    def random_map(self, element: Any, rng: np.random.Generator) -> Any:
        return element + rng.integers(0, 5, size=np.shape(element))


class Halves(FlatMapTransform):
    """Splits a batch in two outputs, so one batch gives several outputs."""

    def flat_map(self, element: Any) -> Iterable[Any]:
        middle = (len(element) + 1) // 2
        return [element[:middle], element[middle:]]


async def async_add_one(element: Any) -> Any:
    await asyncio.sleep(0)
    return element + 1


def plus_two(element: Any) -> Any:
    return element + 2


def spin(seconds: float) -> None:
    """Use `seconds` of this thread's CPU time: chunks are sized by it (about 1 ms each)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class LateEarly(RandomMapTransform):
    """Makes later chunks finish before earlier ones, deterministically.

    Each record costs 0.3 ms of CPU, so chunks hold a few records. When the
    loader has `workers` threads, two or more, a record whose value is 1
    modulo 10 waits, on its worker, until another worker has done a record
    with a greater value: that record is in a later chunk (values are sampler
    indices with `shuffle=False` and one epoch, and a chunk is one worker's),
    which so finishes first. The worker count is told, not guessed from the
    live threads: the first worker may run a whole epoch before the loader
    has started the second (a busy machine), and then that wait still comes.

    No wait where none can end: not with fewer than two workers, not on the
    first record the gate sees (the first chunk, which the loader runs alone
    to measure its cost; a resumed loader's may hold such a record), and not
    twice at once (two waits could wait for each other). A wait gives up only
    when the loader is closing: every other worker seen has ended, or none
    has done a record for 2 s (one that never got a chunk); it then stops all
    later waits. `overtaken` counts the waits that ended with a later record
    done. One object serves every worker (`__deepcopy__`); it is a random map
    so that it runs in the main interpreter with `executor="interpreter"`,
    and returns its element. A gate serves one loader's iteration.
    """

    def __init__(self, workers: int = 0) -> None:
        self.workers = workers
        self.done: dict[int, threading.Thread] = {}  # value -> the worker that did it
        self.changed = threading.Condition()
        self.waiting = False
        self.patient = True
        self.overtaken = 0

    def __deepcopy__(self, memo: dict[int, Any]) -> LateEarly:
        return self

    def random_map(self, element: Any, rng: np.random.Generator) -> Any:
        spin(0.0003)
        me = threading.current_thread()
        with self.changed:
            if self._may_wait(element, me):
                self.waiting = True
                if self._wait_for_later(element, me):
                    self.overtaken += 1
                else:
                    self.patient = False
                self.waiting = False
            self.done[element] = me
            self.changed.notify_all()
        return element

    def _may_wait(self, element: int, me: threading.Thread) -> bool:
        return (
            element % 10 == 1
            and self.workers >= 2
            and me.name.startswith("aioloader-worker-")
            and bool(self.done)  # not the first chunk
            and self.patient
            and not self.waiting
        )

    def _wait_for_later(self, element: int, me: threading.Thread) -> bool:
        """Wait (holding `changed`) until another worker has done a later record; False
        if the loader is closing first (see the class)."""
        count, since = len(self.done), time.monotonic()
        while not self._done_later(element, me):
            if self._others_ended(me) or time.monotonic() - since > 2.0:
                return False
            self.changed.wait(0.05)  # wakes on progress; a thread's end notifies nobody
            if len(self.done) > count:
                count, since = len(self.done), time.monotonic()
        return True

    def _done_later(self, element: int, me: threading.Thread) -> bool:
        return any(value > element and worker is not me for value, worker in self.done.items())

    def _others_ended(self, me: threading.Thread) -> bool:
        others = {worker for worker in self.done.values() if worker is not me}
        return bool(others) and not any(worker.is_alive() for worker in others)


@dataclass(frozen=True)
class Case:
    """A pipeline: a source size, a sampler and operations."""

    name: str
    num_records: int
    make_operations: Callable[[], list[Any]]
    shuffle: bool = True
    num_epochs: int | None = 3
    seed: int = 11

    def sampler(self) -> IndexSampler:
        return IndexSampler(
            self.num_records, shuffle=self.shuffle, num_epochs=self.num_epochs, seed=self.seed
        )

    def operations(self, worker_count: int) -> list[Any]:
        """Its operations for a loader with `worker_count` workers (a `LateEarly` needs to know)."""
        operations = self.make_operations()
        for op in operations:
            if isinstance(op, LateEarly):
                op.workers = worker_count
        return operations

    def loader(self, worker_count: int, **kwargs: Any) -> DataLoader:
        return DataLoader(
            data_source=RangeDataSource(0, self.num_records),
            sampler=self.sampler(),
            operations=self.operations(worker_count),
            worker_count=worker_count,
            **kwargs,
        )


CASES = [
    Case("records", 53, lambda: [AddOne(), Noise(), plus_two]),
    Case("fused-batch", 53, lambda: [AddOne(), Noise(), Batch(7)]),
    Case("dict-batch", 20, lambda: [ToDict(), Batch(6)], num_epochs=2),
    Case("filter-batch", 53, lambda: [Noise(), KeepSome(), Batch(5)]),
    Case("flatmap-batch", 41, lambda: [Spread(), Noise(), Batch(4)]),
    Case("ops-after-batch", 47, lambda: [AddOne(), Batch(6), BatchNoise(), Halves(), AddOne()]),
    Case("drop-remainder", 29, lambda: [AddOne(), Batch(8, drop_remainder=True)], num_epochs=1),
    Case("async-map", 23, lambda: [async_add_one, Noise(), Batch(3)], num_epochs=2),
    Case("sequential", 30, lambda: [Spread(), KeepSome()], shuffle=False, num_epochs=1),
    # Later chunks finish first (LateEarly), in the record plan and in the tail plan.
    Case("out-of-order", 60, lambda: [LateEarly(), Noise()], shuffle=False, num_epochs=1),
    Case(
        "out-of-order-tail",
        60,
        lambda: [LateEarly(), Spread(), KeepSome(), Batch(4)],
        shuffle=False,
        num_epochs=1,
    ),
]
CASE_IDS = [case.name for case in CASES]


def reference_outputs(source: Sequence[Any], sampler: IndexSampler, operations: Sequence[Any]) -> list[Any]:
    """The outputs, one record at a time, with Grain's semantics for metadata.

    Grain's DataLoader reads shard `i` of `n` at global indices `i, i + n, ...`,
    `len(sampler) // n` of them.
    """
    shard = sampler.shard_options
    count = len(sampler) // shard.shard_count
    indices = range(shard.shard_index, count * shard.shard_count, shard.shard_count)
    stream: Iterator[tuple[Any, Any]] = ((source[sampler[i].record_key], sampler[i]) for i in indices)
    for op in operations:
        stream = _reference_op(op, stream)
    return [element for element, _ in stream]


def _reference_op(op: Any, stream: Iterator[tuple[Any, Any]]) -> Iterator[tuple[Any, Any]]:
    if isinstance(op, Batch):
        return _reference_batches(op, stream)
    if isinstance(op, MapTransform):
        return ((op.map(x), m) for x, m in stream)
    if isinstance(op, RandomMapTransform):
        return ((op.random_map(x, m.rng), m) for x, m in stream)
    if isinstance(op, FilterTransform):
        return ((x, m) for x, m in stream if op.filter(x))
    if isinstance(op, FlatMapTransform):
        return ((y, m) for x, m in stream for y in op.flat_map(x))
    if inspect.iscoroutinefunction(op):
        return ((_driven(op(x)), m) for x, m in stream)
    return ((op(x), m) for x, m in stream)


def _driven(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """The result of a coroutine that awaits only `asyncio.sleep(0)`, driven by hand:
    the reference then works inside a running event loop too (an async test)."""
    try:
        while True:
            coroutine.send(None)
    except StopIteration as done:
        return done.value


def _reference_batches(batch: Batch, stream: Iterator[tuple[Any, Any]]) -> Iterator[tuple[Any, Any]]:
    group: list[tuple[Any, Any]] = []
    for item in stream:
        group.append(item)
        if len(group) == batch.batch_size:
            yield (batch.batch_fn or _stacked)([x for x, _ in group]), group[-1][1]
            group = []
    if group and not batch.drop_remainder:
        yield (batch.batch_fn or _stacked)([x for x, _ in group]), group[-1][1]


def _stacked(elements: list[Any]) -> Any:
    """Grain's default batching, written plainly: the same tree, each leaf `np.stack`ed."""
    first = elements[0]
    if isinstance(first, dict):
        return {key: _stacked([e[key] for e in elements]) for key in first}
    if isinstance(first, (tuple, list)):
        leaves = [_stacked([e[k] for e in elements]) for k in range(len(first))]
        if isinstance(first, list):
            return leaves
        return type(first)(*leaves) if hasattr(first, "_fields") else tuple(leaves)
    return np.stack(elements)


def expected(case: Case) -> list[Any]:
    """The reference outputs of `case`."""
    return reference_outputs(range(case.num_records), case.sampler(), case.make_operations())


def canonical(value: Any) -> Any:
    """A comparable, hashable form of nested outputs (arrays become (dtype, shape, values));
    a dict's keys in sorted order, as JAX's tree utilities take them."""
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, canonical(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(canonical(v) for v in value))
    if isinstance(value, np.ndarray | np.generic):
        array = np.asarray(value)
        return (str(array.dtype), array.shape, tuple(array.ravel().tolist()))
    return value


def assert_same_outputs(actual: Sequence[Any], wanted: Sequence[Any]) -> None:
    """Equal outputs, element by element, dtypes and shapes included."""
    assert len(actual) == len(wanted), f"{len(actual)} outputs, expected {len(wanted)}"
    for i, (a, b) in enumerate(zip(actual, wanted, strict=True)):
        assert canonical(a) == canonical(b), f"output {i} differs: {a!r} != {b!r}"
