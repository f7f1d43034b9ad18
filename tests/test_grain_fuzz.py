"""Seeded random pipelines give Grain 0.2.18's outputs, output by output, and resume exactly.

The hand-written comparisons (test_grain_pipelines.py, test_grain_loader.py,
test_map_dataset_grain.py, test_iter_dataset_grain.py) cover the cases someone
thought of; this file draws many more from a fixed list of seeds, so that the
combinations nobody wrote down (a filter before a batch of a shard whose size
is prime, a random map on batches of dicts, a shuffle of a slice of a mix, ...)
are compared with the real Grain too. Each seed is its own test id and the
same seed always builds the same pipeline, so a failure is reproducible by id.
Nothing depends on timing: Grain runs in this process, without workers.

* `DataLoader`: a random source (a list or a `RangeDataSource`) of random size
  (edge sizes 1, 2, batch size +-1, primes, up to 3000), `IndexSampler` or
  `SequentialSampler`, shuffle, seed, 1..3 epochs, random `ShardOptions` or
  `ShardByJaxProcess` (also given to the loader, sometimes), and a random chain
  of `MapTransform`, `RandomMapTransform` (drawing from the record's generator),
  `FilterTransform` and `Batch` (drop_remainder, batch_fn), at a random
  aioloader `worker_count` (0, 1, 2 or "auto"). Grain runs at `worker_count=0`
  (with workers its order is per worker). Checked: every output equals Grain's;
  `get_state()` after `k` outputs resumes a fresh loader (another worker count)
  with exactly the rest, and resumes Grain's loader with Grain's rest; the state
  Grain's own iterator saved after `k` outputs resumes aioloader with Grain's rest.
* Dataset API: a random `MapDataset` chain (source or range, a weighted mix or a
  concatenation of two, `seed`, `shuffle`, `map`, `map_with_index`,
  `random_map`, `filter`, slices, `batch`, `repeat`), compared index by index
  (filter holes included), then `to_iter_dataset()` (read options, allow_nones)
  and a random `IterDataset` chain (`map`, `map_with_index`, `random_map`,
  `filter`, `batch`, a weighted `mix` with a second chain, by list or by name),
  compared element by element at a random `prefetch` worker count, with a
  `get_state`/`set_state` round trip at a random cut.

Corners kept out on purpose: aioloader's index shuffle differs from Grain's
where a shuffled length is 4**k + 1 with k >= 8 (65,537 and up; documented in
aioloader/_sampling/index_shuffle.py): every length here stays far below that.
Errors in both are not compared: no shard is empty (Grain's shuffle of it
divides by zero, aioloader refuses it), no mix has an empty input, no shuffle
seed reaches 2**32, `MapDataset.batch` never follows `filter`, and a Dataset's
batch of batches follows only a batch that drops its remainder (a ragged batch
cannot be stacked). Grain's `FlatMapTransform` in a DataLoader switches Grain to another
state format and drops the record generators, so it is not drawn here.

A DataLoader gets at most one `Batch`: Grain runs a second one (a batch of
batches) where aioloader refuses it with a ValueError, a difference the README's
Grain table states ("one `Batch` per `DataLoader`"); the Dataset API's batches of
batches are drawn, and agree.
"""

from __future__ import annotations

import functools
import itertools
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import aioloader as al
from tests.grain_reference import grain_python
from tests.support.outputs import assert_same

LOADER_SEEDS = range(64)
DATASET_SEEDS = range(48)
PRIMES = (2, 3, 5, 7, 11, 13, 31, 61, 127, 257, 509, 1021, 2039, 2999)
MAX_ELEMENTS = 1500  # a Dataset chain longer than this is compared on its first elements only
Workers = int | str
WORKER_COUNTS: tuple[Workers, ...] = (0, 1, 2, "auto")


# The element functions: pytrees of ints, float32 scalars and int arrays.


def tree_map(function: Callable[[Any], Any], tree: Any) -> Any:
    """`function` on each leaf of dicts, tuples and lists, in their own order."""
    if isinstance(tree, dict):
        return {key: tree_map(function, value) for key, value in tree.items()}
    if isinstance(tree, (tuple, list)):
        return type(tree)(tree_map(function, value) for value in tree)
    return function(tree)


def first_leaf(tree: Any) -> Any:
    while isinstance(tree, (dict, tuple, list)):
        tree = next(iter(tree.values())) if isinstance(tree, dict) else tree[0]
    return tree


def affine(element: Any, mul: int, add: int) -> Any:
    return tree_map(lambda leaf: leaf * mul + add, element)


def to_record(element: Any) -> dict[str, Any]:
    """An int becomes a dict whose keys are not in sorted order (batching may sort them)."""
    return {
        "x": np.int64(element),
        "f": np.float32(element) / 4,
        "pair": (element, np.arange(2, dtype=np.int32) + element),
    }


def noise(element: Any, rng: np.random.Generator, scale: int) -> Any:
    return tree_map(lambda leaf: leaf + rng.integers(0, scale, size=np.shape(leaf)), element)


def as_tuple(elements: Sequence[Any]) -> tuple[Any, ...]:
    """A `batch_fn`: the batch's elements as they are."""
    return tuple(elements)


def with_index(index: int, element: Any) -> Any:
    return affine(element, 1, index % 11)


def keep(element: Any, mod: int, rem: int) -> bool:
    """False for about one element in `mod`, scattered (a plain residue would drop
    whole arithmetic progressions, such as every element of a stepped range)."""
    total = int(np.sum(first_leaf(element)))
    return (total * 2654435761 + 12345) // 97 % mod != rem


# Operations, described by value so that one description builds Grain's and aioloader's.


@dataclass(frozen=True)
class Op:
    """One operation: kind "affine" (a=mul, b=add), "record", "noise" (a=scale),
    "keep" (a=mod, b=rem: drops about one element in mod)
    or "batch" (a=batch_size, b=drop_remainder, c=1: batch_fn=as_tuple)."""

    kind: str
    a: int = 0
    b: int = 0
    c: int = 0


@functools.cache
def transform_classes(pg: ModuleType) -> dict[str, type[Any]]:
    """The user's transforms, subclassing `pg`'s classes (Grain's or aioloader's)."""

    class Affine(pg.MapTransform):  # type: ignore[name-defined, misc]
        def __init__(self, mul: int, add: int) -> None:
            self.mul, self.add = mul, add

        def map(self, element: Any) -> Any:
            return affine(element, self.mul, self.add)

    class Record(pg.MapTransform):  # type: ignore[name-defined, misc]
        def map(self, element: Any) -> Any:
            return to_record(element)

    class Noise(pg.RandomMapTransform):  # type: ignore[name-defined, misc]
        def __init__(self, scale: int) -> None:
            self.scale = scale

        def random_map(self, element: Any, rng: np.random.Generator) -> Any:
            return noise(element, rng, self.scale)

    class Keep(pg.FilterTransform):  # type: ignore[name-defined, misc]
        def __init__(self, mod: int, rem: int) -> None:
            self.mod, self.rem = mod, rem

        def filter(self, element: Any) -> bool:
            return keep(element, self.mod, self.rem)

    return {"affine": Affine, "record": Record, "noise": Noise, "keep": Keep}


def make_operation(pg: ModuleType, op: Op) -> Any:
    if op.kind == "batch":
        return pg.Batch(batch_size=op.a, drop_remainder=bool(op.b), batch_fn=as_tuple if op.c else None)
    cls = transform_classes(pg)[op.kind]
    if op.kind == "record":
        return cls()
    return cls(op.a) if op.kind == "noise" else cls(op.a, op.b)


def random_chain(rng: random.Random, batch_size: int) -> tuple[Op, ...]:
    """0..6 operations; a dict record only before the batch, and at most one batch (a
    DataLoader takes one: see the module docstring)."""
    ops: list[Op] = []
    structured = batched = False
    for _ in range(rng.randint(0, 6)):
        kind = rng.choice(["affine", "noise", "noise", "keep", "batch", "batch", "record"])
        if kind == "record" and (structured or batched):
            kind = "affine"
        if kind == "batch" and batched:
            kind = "noise"
        if kind == "affine":
            ops.append(Op("affine", rng.randint(1, 3), rng.randint(-5, 5)))
        elif kind == "noise":
            ops.append(Op("noise", rng.choice([2, 10, 1000, 2**40])))
        elif kind == "keep":
            mod = rng.choice([1, 2, 3, 5, 7]) if rng.random() < 0.1 else rng.randint(2, 7)
            ops.append(Op("keep", mod, rng.randrange(mod)))
        elif kind == "record":
            ops.append(Op("record"))
            structured = True
        else:
            drop = rng.random() < 0.4
            ops.append(Op("batch", batch_size, int(drop), int(rng.random() < 0.15)))
            batched = True
    return tuple(ops)


# DataLoader cases.


@dataclass(frozen=True)
class LoaderCase:
    num_records: int
    sequential: bool  # SequentialSampler (no shuffle, one epoch)
    shuffle: bool
    seed: int
    num_epochs: int
    list_source: bool  # a list of the ints instead of a RangeDataSource
    shard: tuple[int, int, bool] | None
    by_jax_process: bool  # ShardByJaxProcess(drop_remainder) instead: shard 0 of 1 here
    shard_to_loader: bool  # also passed as DataLoader(shard_options=...)
    operations: tuple[Op, ...]
    workers: Workers
    resume_workers: Workers
    worker_buffer_size: int
    read_options: tuple[int, int] | None
    cut: float  # where the states are taken, as a fraction of the outputs


def pick_num_records(rng: random.Random, batch_size: int) -> int:
    choices = [1, 2, rng.choice(PRIMES), max(1, batch_size - 1), batch_size, batch_size + 1, 3000]
    return rng.choice(choices) if rng.random() < 0.5 else int(10 ** rng.uniform(0, np.log10(3000)))


def loader_case(seed: int) -> LoaderCase:
    rng = random.Random(seed)
    batch_size = rng.choice([1, 2, 3, 4, 7, 8, 16, 32, rng.randint(1, 64)])
    num_records = pick_num_records(rng, batch_size)
    shard = None
    if rng.random() < 0.5:  # no empty shard: Grain's shuffle of one divides by zero (aioloader refuses it)
        count = rng.randint(1, min(4, num_records))
        shard = (rng.randrange(count), count, rng.random() < 0.5)
    sequential = rng.random() < 0.15
    return LoaderCase(
        num_records=num_records,
        list_source=rng.random() < 0.3,
        sequential=sequential,
        shuffle=not sequential and rng.random() < 0.7,
        seed=rng.choice([0, 1, 2**32 - 1, rng.randrange(2**32)]),
        num_epochs=1 if sequential else rng.randint(1, 3),
        shard=shard,
        by_jax_process=shard is None and rng.random() < 0.2,
        shard_to_loader=rng.random() < 0.3,
        operations=random_chain(rng, batch_size),
        workers=rng.choice(WORKER_COUNTS),
        resume_workers=rng.choice(WORKER_COUNTS),
        worker_buffer_size=rng.choice([1, 2, 4]),
        read_options=rng.choice([None, (0, 0), (2, 8), (16, 500)]),
        cut=rng.random(),
    )


def data_source(pg: ModuleType, case: LoaderCase) -> Any:
    """The ints 0..num_records-1: a list, or a RangeDataSource (their reprs are in the states)."""
    return list(range(case.num_records)) if case.list_source else pg.RangeDataSource(0, case.num_records, 1)


def make_loader(pg: ModuleType, case: LoaderCase, workers: Workers) -> Any:
    """The case's DataLoader with `pg`'s names. Grain reads in its own thread
    (`ReadOptions(0, 0)`, about twice as fast here): its order does not depend on them."""
    shard = pg.NoSharding() if case.shard is None else pg.ShardOptions(*case.shard)
    if case.by_jax_process:
        shard = pg.ShardByJaxProcess(drop_remainder=case.seed % 2 == 0)
    if case.sequential:
        sampler = pg.SequentialSampler(case.num_records, shard, seed=case.seed)
    else:
        sampler = pg.IndexSampler(case.num_records, shard, case.shuffle, case.num_epochs, case.seed)
    read = (0, 0) if pg is not al else case.read_options
    return pg.DataLoader(
        data_source=data_source(pg, case),
        sampler=sampler,
        operations=[make_operation(pg, op) for op in case.operations],
        worker_count=workers,
        worker_buffer_size=case.worker_buffer_size,
        shard_options=shard if case.shard_to_loader else None,
        read_options=None if read is None else pg.ReadOptions(*read),
    )


def grain_outputs(gp: ModuleType, case: LoaderCase) -> list[Any]:
    return list(make_loader(gp, case, 0))


def grain_state_after(gp: ModuleType, case: LoaderCase, k: int) -> bytes:
    iterator = iter(make_loader(gp, case, 0))
    for _ in range(k):
        next(iterator)
    state: bytes = iterator.get_state()
    return state


def grain_outputs_from(gp: ModuleType, case: LoaderCase, state: bytes) -> list[Any]:
    iterator = iter(make_loader(gp, case, 0))
    iterator.set_state(state)
    return list(iterator)


def our_outputs(case: LoaderCase, workers: Workers, state: bytes | None = None) -> list[Any]:
    with iter(make_loader(al, case, workers)) as iterator:
        if state is not None:
            iterator.set_state(state)
        return list(iterator)


def our_head_and_state(case: LoaderCase, k: int) -> tuple[list[Any], bytes]:
    with iter(make_loader(al, case, case.workers)) as iterator:
        head = [next(iterator) for _ in range(k)]
        return head, iterator.get_state()


def assert_outputs(mine: Sequence[Any], theirs: Sequence[Any], where: str) -> None:
    assert len(mine) == len(theirs), f"{where}: {len(mine)} outputs, Grain gives {len(theirs)}"
    for i, (a, b) in enumerate(zip(mine, theirs, strict=True)):
        assert_same(a, b, f"{where}: output {i}")


@pytest.mark.parametrize("seed", LOADER_SEEDS, ids=lambda s: f"loader{s}")
def test_a_random_loader_gives_grains_outputs_and_resumes(seed: int) -> None:
    gp = grain_python()
    case = loader_case(seed)
    theirs = grain_outputs(gp, case)
    k = int(case.cut * (len(theirs) + 1))  # 0..len
    assert_outputs(our_outputs(case, case.workers), theirs, f"{case}")
    head, state = our_head_and_state(case, k)
    rest = our_outputs(case, case.resume_workers, state)
    assert_outputs(head + rest, theirs, f"{case}, own state after {k}")
    assert_same(grain_outputs_from(gp, case, state), theirs[k:], f"{case}, Grain resumed from ours")
    grains_state = grain_state_after(gp, case, k)
    assert_outputs(our_outputs(case, case.resume_workers, grains_state), theirs[k:], f"{case}, Grain's state")


# Dataset API cases: a step list that builds the same chain from Grain's or aioloader's module.


@dataclass(frozen=True)
class Step:
    """One call: `kind` with `args` (None where a seed is left to `seed()` upstream);
    `branch` is the other chain of a mix."""

    kind: str
    args: tuple[Any, ...] = ()
    branch: tuple[Step, ...] = ()


@dataclass
class Chain:
    """What the generator knows of the chain so far."""

    length: int
    seeded: bool = False
    filtered: bool = False
    structured: bool = False
    batched: bool = False
    stackable: bool = True


def source_step(rng: random.Random) -> tuple[Step, Chain]:
    if rng.random() < 0.5:
        n = rng.choice([1, 2, rng.choice(PRIMES), rng.randint(1, 400), rng.randint(1, 400), 1000])
        offset = rng.randint(0, 100)
        return Step("source", (n, offset)), Chain(n)
    start, step = rng.randint(-20, 20), rng.choice([1, 2, 3, 7])
    stop = start + step * rng.randint(0, 300)
    return Step("range", (start, stop, step)), Chain(len(range(start, stop, step)))


def map_chain(rng: random.Random, steps: int) -> tuple[list[Step], Chain]:
    """A source and `steps` random MapDataset calls after it."""
    first, chain = source_step(rng)
    out = [first]
    for _ in range(steps):
        step = map_step(rng, chain)
        if step is not None:
            out.append(step)
    return out, chain


def map_step(rng: random.Random, chain: Chain) -> Step | None:
    """A MapDataset call that fits `chain` (updated), or None."""
    kind = rng.choice(
        [
            "seed",
            "shuffle",
            "map",
            "map_with_index",
            "record",
            "random_map",
            "filter",
            "slice",
            "batch",
            "repeat",
        ]
    )
    seed = None if chain.seeded and rng.random() < 0.5 else rng.randrange(2**32)
    if kind == "seed":
        chain.seeded = True
        return Step("seed", (rng.randrange(rng.choice([2**32, 2**64])),))
    if kind == "random_map" and seed is not None and rng.random() < 0.3:
        seed = rng.randrange(2**64)  # a shuffle's seed must be below 2**32 (in both); a random map's need not
    if kind in ("shuffle", "random_map"):
        return Step(kind, (seed, rng.choice([2, 1000])))
    if kind == "map":
        return Step("map", (rng.randint(1, 3), rng.randint(-5, 5)))
    if kind == "map_with_index":
        return Step("map_with_index")
    if kind == "record" and not (chain.structured or chain.batched):
        chain.structured = True
        return Step("record")
    if kind == "filter":
        chain.filtered = True
        mod = rng.randint(2, 5)
        return Step("filter", (mod, rng.randrange(mod)))
    if kind == "slice":
        return slice_step(rng, chain)
    if kind == "batch" and not chain.filtered and chain.stackable:
        return batch_step(rng, chain)
    if kind == "repeat" and chain.length <= MAX_ELEMENTS:
        epochs = rng.randint(1, 3)
        chain.length *= epochs
        return Step("repeat", (epochs, rng.random() < 0.8))
    return None


def slice_step(rng: random.Random, chain: Chain) -> Step:
    start = rng.choice([None, rng.randint(-5, max(0, chain.length))])
    stop = rng.choice([None, rng.randint(-5, chain.length + 5)])
    step = rng.choice([None, 1, 2, 3, -1, -2])
    chain.length = len(range(chain.length)[slice(start, stop, step)])
    return Step("slice", (start, stop, step))


def batch_step(rng: random.Random, chain: Chain) -> Step:
    size = rng.choice([1, 2, 3, 5, 8, rng.randint(1, 40)])
    drop = rng.random() < 0.4
    chain.length = chain.length // size if drop else -(-chain.length // size)
    chain.batched, chain.stackable = True, drop
    return Step("batch", (size, drop))


def iter_step(rng: random.Random, chain: Chain) -> Step | None:
    kind = rng.choice(["map", "map_with_index", "random_map", "filter", "batch", "mix"])
    if kind == "map":
        return Step("map", (rng.randint(1, 3), rng.randint(-5, 5)))
    if kind == "map_with_index":
        return Step("map_with_index")
    if kind == "random_map":
        seed = None if chain.seeded and rng.random() < 0.5 else rng.randrange(2**32)
        return Step("random_map", (seed, rng.choice([2, 1000])))
    if kind == "filter":
        mod = rng.randint(2, 5)
        return Step("filter", (mod, rng.randrange(mod)))
    if kind == "batch" and chain.stackable:
        chain.batched, chain.stackable = True, rng.random() < 0.4
        return Step("batch", (rng.choice([1, 2, 3, 5, rng.randint(1, 20)]), chain.stackable))
    if kind == "mix" and not chain.batched:
        return iter_mix_step(rng, chain)
    return None


def iter_mix_step(rng: random.Random, chain: Chain) -> Step:
    """A weighted mix with another chain of plain ints (records only if this one has them)."""
    other = Chain(0)
    while True:
        branch, other = map_chain(rng, rng.randint(0, 3))
        if not other.batched and other.structured == chain.structured:
            break
    chain.seeded = chain.seeded or other.seeded
    by_name = rng.random() < 0.3  # as a dict {"b": this, "a": the other}
    return Step("mix", (rng.randint(1, 5), rng.randint(1, 5), by_name), tuple(branch))


@dataclass(frozen=True)
class DatasetCase:
    map_steps: tuple[Step, ...]
    iter_steps: tuple[Step, ...]
    read_options: tuple[int, int] | None  # to_iter_dataset(ReadOptions(*read_options))
    allow_nones: bool  # to_iter_dataset(allow_nones=True): only where no IterDataset call follows
    workers: int
    resume_workers: int
    cut: float


def dataset_case(seed: int) -> DatasetCase:
    rng = random.Random(1_000_003 * seed + 17)
    if rng.random() < 0.3:  # a MapDataset mix first: both sides of plain ints or both of records
        steps, chain = mix_of_maps(rng)
    else:
        steps, chain = map_chain(rng, rng.randint(0, 6))
    iter_steps = [s for s in (iter_step(rng, chain) for _ in range(rng.randint(0, 4))) if s is not None]
    return DatasetCase(
        map_steps=tuple(steps),
        iter_steps=tuple(iter_steps),
        read_options=rng.choice([None, (0, 0), (1, 1), (4, 16)]),
        allow_nones=not iter_steps and rng.random() < 0.3,
        workers=rng.choice([0, 1, 2]),
        resume_workers=rng.choice([0, 2]),
        cut=rng.random(),
    )


def mix_of_maps(rng: random.Random) -> tuple[list[Step], Chain]:
    while True:
        left, one = map_chain(rng, rng.randint(0, 3))
        right, two = map_chain(rng, rng.randint(0, 3))
        same_kind = one.structured == two.structured and not (one.batched or two.batched)
        if same_kind and one.length > 0 and two.length > 0:  # Grain refuses an empty input, as aioloader
            break
    weights = rng.choice([None, (rng.randint(1, 5), rng.randint(1, 5)), (rng.random() + 0.01, 0.5)])
    chain = Chain(one.length + two.length, one.seeded or two.seeded, one.filtered or two.filtered)
    chain.structured = one.structured
    kind = rng.choice(["mix", "mix", "concatenate"])  # the length is exact for a concatenation only
    steps = [*left, Step(kind, (weights,), tuple(right))]
    for _ in range(rng.randint(0, 3)):
        step = map_step(rng, chain)  # the length is an estimate now: any slice is valid
        if step is not None:
            steps.append(step)
    return steps, chain


def build_map(pg: ModuleType, steps: Sequence[Step]) -> Any:
    ds: Any = None
    for step in steps:
        ds = apply_map_step(pg, ds, step)
    return ds


def apply_map_step(pg: ModuleType, ds: Any, step: Step) -> Any:
    a = step.args
    if step.kind == "source":
        return pg.MapDataset.source([a[1] + 3 * i for i in range(a[0])])
    if step.kind == "range":
        return pg.MapDataset.range(*a)
    if step.kind == "mix":
        weights = None if a[0] is None else list(a[0])
        return pg.MapDataset.mix([ds, build_map(pg, step.branch)], weights)
    if step.kind == "concatenate":
        return pg.MapDataset.concatenate([ds, build_map(pg, step.branch)])
    if step.kind == "slice":
        return ds[slice(*a)]
    if step.kind == "batch":
        return ds.batch(a[0], drop_remainder=a[1])
    if step.kind == "repeat":
        return ds.repeat(a[0], reseed_each_epoch=a[1])
    return apply_common_step(ds, step)


def apply_common_step(ds: Any, step: Step) -> Any:
    """The calls MapDataset and IterDataset share."""
    a = step.args
    if step.kind == "seed":
        return ds.seed(a[0])
    if step.kind == "shuffle":
        return ds.shuffle(seed=a[0])
    if step.kind == "map":
        return ds.map(functools.partial(affine, mul=a[0], add=a[1]))
    if step.kind == "record":
        return ds.map(to_record)
    if step.kind == "map_with_index":
        return ds.map_with_index(with_index)
    if step.kind == "random_map":
        return ds.random_map(functools.partial(noise, scale=a[1]), seed=a[0])
    if step.kind == "filter":
        return ds.filter(functools.partial(keep, mod=a[0], rem=a[1]))
    if step.kind == "batch":
        return ds.batch(a[0], drop_remainder=a[1])
    raise AssertionError(f"unknown step {step}")


def build_iter(pg: ModuleType, case: DatasetCase) -> Any:
    read = None if case.read_options is None else pg.ReadOptions(*case.read_options)
    ds = build_map(pg, case.map_steps).to_iter_dataset(read, allow_nones=case.allow_nones)
    for step in case.iter_steps:
        if step.kind == "mix":
            other = build_map(pg, step.branch).to_iter_dataset()
            weights = step.args[:2]
            if step.args[2]:
                ds = pg.IterDataset.mix({"b": ds, "a": other}, dict(zip("ba", weights, strict=True)))
            else:
                ds = pg.IterDataset.mix([ds, other], list(weights))
        else:
            ds = apply_common_step(ds, step)
    return ds


def our_iter(case: DatasetCase, workers: int) -> Iterator[Any]:
    iterator: Iterator[Any] = iter(build_iter(al, case).prefetch(workers))
    return iterator


def take(iterator: Iterator[Any], count: int) -> list[Any]:
    try:
        return list(itertools.islice(iterator, count))
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()


@pytest.mark.parametrize("seed", DATASET_SEEDS, ids=lambda s: f"dataset{s}")
def test_a_random_dataset_gives_grains_elements_and_resumes(seed: int) -> None:
    gp = grain_python()
    case = dataset_case(seed)
    mine_map, theirs_map = build_map(al, case.map_steps), build_map(gp, case.map_steps)
    assert len(mine_map) == len(theirs_map), case
    for i in range(min(len(theirs_map), MAX_ELEMENTS)):
        assert_same(mine_map[i], theirs_map[i], f"{case}: MapDataset element {i}")
    theirs = list(itertools.islice(iter(build_iter(gp, case)), MAX_ELEMENTS))
    assert_outputs(take(our_iter(case, case.workers), MAX_ELEMENTS), theirs, f"{case}: IterDataset")
    k = int(case.cut * (len(theirs) + 1))
    first = our_iter(case, case.workers)
    head = [next(first) for _ in range(k)]
    state = first.get_state()  # type: ignore[attr-defined]
    take(first, 0)
    resumed = our_iter(case, case.resume_workers)
    resumed.set_state(state)  # type: ignore[attr-defined]
    rest = take(resumed, MAX_ELEMENTS - k)
    assert_outputs(head + rest, theirs, f"{case}: resumed after {k}")
