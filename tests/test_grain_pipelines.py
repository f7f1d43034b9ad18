"""A Grain user's pipeline gives Grain's records in Grain's order after changing only the import.

Each pipeline below is written once, as a Grain user writes it, over a module
`pg` of Grain's names: the test runs it with `pg` = `grain.python` (Grain
0.2.18, `worker_count=0`, its order at any worker count being per-worker)
and with `pg` = `aioloader` (at `worker_count` 0 and 2), and compares every
output. The checkpoint round trip is the user's too: `get_state()` after
some outputs, `set_state()` on a fresh iterator, the rest; and a state
Grain saved resumes in aioloader.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import aioloader
from tests.grain_reference import grain_python
from tests.support.reference import assert_same_outputs


@dataclass(frozen=True)
class Pipeline:
    """A Grain user's pipeline: what `build` makes of it, and how many outputs to take."""

    name: str
    take: int | None = None  # None: to the end
    cut: int = 3  # where the checkpoint round trip saves
    loader_args: dict[str, Any] = field(default_factory=dict)


_UNIQUE = secrets.token_hex(4)

PIPELINES = [
    Pipeline("guide"),  # the DataLoader guide: in-memory source, shuffle, 2 epochs, random map, batch
    Pipeline("filter-then-batch", cut=2),
    Pipeline("sharded", loader_args={"worker_buffer_size": 4}),
    Pipeline("sequential-strided"),
    Pipeline("forever", take=30, cut=11),
    Pipeline("records-with-read-options", cut=7),
]


def transforms(pg: ModuleType) -> dict[str, Any]:
    """The user's transforms, subclassing `pg`'s classes."""

    class Normalize(pg.MapTransform):  # type: ignore[name-defined, misc]
        def map(self, element: Any) -> Any:
            return {"x": np.float32(element) / 10, "label": np.int32(element % 3)}

    class Augment(pg.RandomMapTransform):  # type: ignore[name-defined, misc]
        def random_map(self, element: Any, rng: np.random.Generator) -> Any:
            return {**element, "x": element["x"] + np.float32(rng.normal())}

    class DropLabelZero(pg.FilterTransform):  # type: ignore[name-defined, misc]
        def filter(self, element: Any) -> bool:
            return bool(element["label"] != 0)

    class Jitter(pg.RandomMapTransform):  # type: ignore[name-defined, misc]
        """Applied to whole batches: one draw per batch, from the batch's generator."""

        def random_map(self, element: Any, rng: np.random.Generator) -> Any:
            return {**element, "x": element["x"] * np.float32(rng.uniform(0.9, 1.1))}

    return {"Normalize": Normalize, "Augment": Augment, "DropLabelZero": DropLabelZero, "Jitter": Jitter}


@contextlib.contextmanager
def source(pg: ModuleType, name: str) -> Iterator[Any]:
    """The pipeline's data source, as the user makes it with `pg` (closed afterwards)."""
    if name == "guide":
        # Named, as a Grain user names it to find it again: the name is part of its repr,
        # which Grain's states record. Unique, since shared memory is the machine's.
        memory = pg.InMemoryDataSource(list(range(20)), name=f"guide_{os.getpid()}_{_UNIQUE}")
        try:
            yield memory
        finally:
            memory.close()
            memory.unlink()
    elif name in ("filter-then-batch", "forever"):
        yield pg.RangeDataSource(0, 37, 1)
    else:
        yield list(range(50))


def build(pg: ModuleType, name: str, data_source: Any, worker_count: int, **loader_args: Any) -> Any:
    """The user's `DataLoader`, with `pg`'s names only."""
    t = transforms(pg)
    if name == "guide":
        sampler = pg.IndexSampler(
            num_records=len(data_source), shard_options=pg.NoSharding(), shuffle=True, num_epochs=2, seed=0
        )
        operations = [t["Normalize"](), t["Augment"](), pg.Batch(batch_size=4)]
    elif name == "filter-then-batch":
        sampler = pg.IndexSampler(37, shuffle=True, seed=7, num_epochs=1)
        operations = [
            t["Normalize"](),
            t["DropLabelZero"](),
            t["Augment"](),
            pg.Batch(5, drop_remainder=True),
        ]
        loader_args["read_options"] = pg.ReadOptions(num_threads=0, prefetch_buffer_size=0)
    elif name == "sharded":
        shard = pg.ShardOptions(shard_index=1, shard_count=4, drop_remainder=True)
        sampler = pg.IndexSampler(50, shard_options=shard, shuffle=True, num_epochs=3, seed=3)
        operations = [t["Normalize"](), pg.Batch(3), t["Jitter"]()]
        loader_args["shard_options"] = shard
    elif name == "sequential-strided":
        sampler = pg.SequentialSampler(23, shard_options=pg.ShardOptions(2, 3), seed=11)
        operations = [t["Normalize"](), t["Augment"](), pg.Batch(2)]
    elif name == "forever":
        sampler = pg.IndexSampler(13, shuffle=True, seed=1)  # num_epochs=None: forever
        operations = [t["Normalize"](), t["Augment"](), pg.Batch(4)]
    else:
        sampler = pg.IndexSampler(50, num_epochs=1, seed=2)
        operations = [t["Normalize"](), t["Augment"]()]
        loader_args["read_options"] = pg.ReadOptions(num_threads=2, prefetch_buffer_size=8)
    return pg.DataLoader(
        data_source=data_source,
        sampler=sampler,
        operations=operations,
        worker_count=worker_count,
        **loader_args,
    )


def outputs(iterator: Any, take: int | None) -> list[Any]:
    return list(iterator if take is None else itertools.islice(iterator, take))


def run(pg: ModuleType, pipeline: Pipeline, workers: int) -> list[Any]:
    with source(pg, pipeline.name) as data:
        return outputs(iter(build(pg, pipeline.name, data, workers, **pipeline.loader_args)), pipeline.take)


def resumed_run(
    pg: ModuleType, pipeline: Pipeline, workers: int, state_from: ModuleType | None = None
) -> list[Any]:
    """The user's round trip: `cut` outputs, `get_state()`, then a fresh iterator resumed
    with `set_state()` gives the rest; `state_from` saves the state with other names."""
    saver = pg if state_from is None else state_from
    with source(saver, pipeline.name) as data:
        first = iter(
            build(saver, pipeline.name, data, 0 if saver is not pg else workers, **pipeline.loader_args)
        )
        head = [next(first) for _ in range(pipeline.cut)]
        state = first.get_state()
        assert isinstance(state, bytes)
    with source(pg, pipeline.name) as data:
        second = iter(build(pg, pipeline.name, data, workers, **pipeline.loader_args))
        second.set_state(state)
        rest = None if pipeline.take is None else pipeline.take - pipeline.cut
        return head + outputs(second, rest)


IDS = [p.name for p in PIPELINES]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("pipeline", PIPELINES, ids=IDS)
def test_changing_only_the_import_gives_grains_outputs(pipeline: Pipeline, workers: int) -> None:
    wanted = run(grain_python(), pipeline, 0)
    assert len(wanted) > pipeline.cut
    assert_same_outputs(run(aioloader, pipeline, workers), wanted)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("pipeline", PIPELINES, ids=IDS)
def test_the_checkpoint_round_trip_gives_grains_outputs(pipeline: Pipeline, workers: int) -> None:
    gp = grain_python()
    wanted = resumed_run(gp, pipeline, 0)
    assert_same_outputs(wanted, run(gp, pipeline, 0))
    assert_same_outputs(resumed_run(aioloader, pipeline, workers), wanted)


@pytest.mark.parametrize("pipeline", PIPELINES, ids=IDS)
def test_a_state_grain_saved_resumes_in_aioloader(pipeline: Pipeline) -> None:
    gp = grain_python()
    assert_same_outputs(resumed_run(aioloader, pipeline, 2, state_from=gp), run(gp, pipeline, 0))


@pytest.mark.parametrize("pipeline", PIPELINES, ids=IDS)
def test_the_pipelines_run_without_grain_too(pipeline: Pipeline) -> None:
    """On every build: aioloader's run equals itself across worker counts and a round trip."""
    wanted = run(aioloader, pipeline, 0)
    assert_same_outputs(run(aioloader, pipeline, 3), wanted)
    assert_same_outputs(resumed_run(aioloader, pipeline, 1), wanted)
