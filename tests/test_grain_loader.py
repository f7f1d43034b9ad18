"""The loader reads Grain's records in Grain's order, with Grain's generators.

At `worker_count=0` aioloader's outputs equal Grain's `DataLoader(worker_count=0)`
(the real Grain 0.2.18, where it is installed), and at any worker count they
equal aioloader's own `worker_count=0`. Any object with `__getitem__(index) ->
RecordMetadata` is a sampler, and records of different shards never share a
generator.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

import numpy as np
import pytest

import aioloader as al
from tests.grain_reference import grain_python
from tests.support.outputs import drain, notes
from tests.support.reference import assert_same_outputs


class Tag(al.MapTransform):
    def map(self, element: Any) -> Any:
        return {"key": np.int64(element)}


class Draw(al.RandomMapTransform):
    """Records the first draw of the generator it is given."""

    def random_map(self, element: Any, rng: np.random.Generator) -> Any:
        return {**element, "draw": rng.integers(0, 2**62, size=np.shape(element["key"]))}


class Halve(al.MapTransform):
    def map(self, element: Any) -> Any:
        return {key: value // 2 for key, value in element.items()}


# Grain's transforms are other classes; these wrap the same functions.
def grain_operations(gp: Any, batch_size: int) -> list[Any]:
    class GrainTag(gp.MapTransform):
        def map(self, element: Any) -> Any:
            return Tag().map(element)

    class GrainDraw(gp.RandomMapTransform):
        def random_map(self, element: Any, rng: np.random.Generator) -> Any:
            return Draw().random_map(element, rng)

    return [GrainTag(), GrainDraw(), gp.Batch(batch_size), GrainDraw()]


def our_operations(batch_size: int) -> list[Any]:
    return [Tag(), Draw(), al.Batch(batch_size), Draw()]


# (num_records, shard, shuffle, seed, num_epochs): shards with and without a remainder.
LOADER_CASES = [
    (20, None, False, 1, 1),
    (20, None, True, 1, 2),
    (23, None, True, 2**32 - 1, None),
    (20, (0, 3, False), True, 5, 1),
    (20, (1, 3, False), True, 5, 3),
    (20, (2, 3, False), False, 5, 3),
    (20, (2, 3, True), True, 7, 2),
    (30, (3, 4, True), True, 0, None),
    (30, (1, 4, False), False, 9, None),
]


def case_id(case: tuple[Any, ...]) -> str:
    records, shard, shuffle, seed, epochs = case
    where = "all" if shard is None else f"{shard[0]}of{shard[1]}{'-drop' if shard[2] else ''}"
    return f"n{records}-{where}-{'shuffle' if shuffle else 'ordered'}-seed{seed}-epochs{epochs}"


def samplers(gp: Any, case: tuple[Any, ...]) -> tuple[al.IndexSampler, Any]:
    records, shard, shuffle, seed, epochs = case
    ours = al.NoSharding() if shard is None else al.ShardOptions(*shard)
    theirs = gp.NoSharding() if shard is None else gp.ShardOptions(*shard)
    return (
        al.IndexSampler(records, ours, shuffle, epochs, seed),
        gp.IndexSampler(records, theirs, shuffle, epochs, seed),
    )


def first(outputs: Iterable[Any], count: int = 40) -> list[Any]:
    return list(itertools.islice(outputs, count))


def grain_outputs(gp: Any, sampler: Any, records: int, batch_size: int = 3) -> list[Any]:
    loader = gp.DataLoader(
        data_source=list(range(records)),
        sampler=sampler,
        operations=grain_operations(gp, batch_size),
        worker_count=0,
    )
    return first(loader)


def our_outputs(sampler: Any, records: int, workers: int = 0, batch_size: int = 3) -> list[Any]:
    loader = al.DataLoader(
        data_source=al.RangeDataSource(0, records),
        sampler=sampler,
        operations=our_operations(batch_size),
        worker_count=workers,
    )
    with iter(loader) as iterator:
        return first(iterator)


@pytest.mark.parametrize("case", LOADER_CASES, ids=case_id)
def test_worker_count_0_gives_grains_batches(case: tuple[Any, ...]) -> None:
    gp = grain_python()
    ours, theirs = samplers(gp, case)
    wanted = grain_outputs(gp, theirs, case[0])
    assert wanted, "the case must produce batches"
    assert_same_outputs(our_outputs(ours, case[0]), wanted)


@pytest.mark.parametrize("case", LOADER_CASES, ids=case_id)
@pytest.mark.parametrize("workers", [1, 3])
def test_any_worker_count_gives_the_batches_of_worker_count_0(case: tuple[Any, ...], workers: int) -> None:
    records, shard, shuffle, seed, epochs = case
    sampler = al.IndexSampler(
        records, al.NoSharding() if shard is None else al.ShardOptions(*shard), shuffle, epochs, seed
    )
    assert_same_outputs(our_outputs(sampler, records, workers), our_outputs(sampler, records, 0))


@pytest.mark.parametrize("case", LOADER_CASES[:6], ids=case_id)
def test_grains_own_sampler_object_gives_grains_batches(case: tuple[Any, ...]) -> None:
    """Grain's sampler is a foreign sampler here: read one index at a time, its generators kept."""
    gp = grain_python()
    _, theirs = samplers(gp, case)
    assert_same_outputs(our_outputs(theirs, case[0], workers=2), grain_outputs(gp, theirs, case[0]))


def test_the_guides_pipeline_gives_grains_batches() -> None:
    """The DataLoader guide: an in-memory source, shuffle with a seed, 2 epochs; with a
    MapTransform, a RandomMapTransform and Batch, as a user of the guide goes on to write."""
    gp = grain_python()
    grain_source = gp.InMemoryDataSource(list(range(10)))
    try:
        grain_loader = gp.DataLoader(
            data_source=grain_source,
            sampler=gp.IndexSampler(
                num_records=len(grain_source),
                num_epochs=2,
                shard_options=gp.NoSharding(),
                shuffle=True,
                seed=0,
            ),
            operations=grain_operations(gp, 4)[:3],
            worker_count=0,
        )
        wanted = list(grain_loader)
    finally:
        grain_source.close()
        grain_source.unlink()
    source = al.InMemoryDataSource(list(range(10)))
    loader = al.DataLoader(
        data_source=source,
        sampler=al.IndexSampler(
            num_records=len(source), num_epochs=2, shard_options=al.NoSharding(), shuffle=True, seed=0
        ),
        operations=our_operations(4)[:3],
        worker_count=0,
    )
    assert len(wanted) == 5
    assert_same_outputs(list(loader), wanted)


def double(x: int) -> int:
    return 2 * x


def not_a_multiple_of_3(x: int) -> bool:
    return x % 3 != 0


def plus_a_draw(x: int, rng: np.random.Generator) -> int:
    return x + int(rng.integers(1000))


def legacy_operations(gp: Any, batch_fn: Any = None) -> list[Any]:
    """Grain's deprecated operations, which Grain applies to the whole stream of records."""
    return [
        gp.MapOperation(double),
        gp.FilterOperation(not_a_multiple_of_3),
        gp.RandomMapOperation(plus_a_draw),
        gp.BatchOperation(batch_size=3, drop_remainder=False, batch_fn=batch_fn),
    ]


@pytest.mark.parametrize("ours", [False, True], ids=["grains-objects", "aioloaders-names"])
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("batch_fn", [None, list], ids=["default-stacking", "batch_fn"])
def test_grains_deprecated_operations_give_grains_batches(workers: int, batch_fn: Any, ours: bool) -> None:
    """`MapOperation`, `FilterOperation`, `RandomMapOperation` and `BatchOperation` (Grain's
    objects, or aioloader's of those names: only the import changes) run as the
    transforms of the same meaning (Grain's per-worker stream at `worker_count=0` is the
    stream), with a DeprecationWarning that names the successor at the user's line."""
    gp = grain_python()
    wanted = list(
        gp.DataLoader(
            data_source=gp.RangeDataSource(0, 20, 1),
            sampler=gp.IndexSampler(20, gp.NoSharding(), shuffle=True, num_epochs=2, seed=4),
            operations=legacy_operations(gp, batch_fn),
        )
    )
    with pytest.warns(DeprecationWarning, match="is deprecated") as warned:
        loader = al.DataLoader(
            data_source=al.RangeDataSource(0, 20, 1),
            sampler=al.IndexSampler(20, al.NoSharding(), shuffle=True, num_epochs=2, seed=4),
            operations=legacy_operations(al if ours else gp, batch_fn),
            worker_count=workers,
        )
    assert {str(w.message).split(" is ")[0] for w in warned} == {
        "Grain's MapOperation",
        "Grain's FilterOperation",
        "Grain's RandomMapOperation",
        "Grain's BatchOperation",
    }
    assert {w.filename for w in warned} == {__file__}
    assert len(wanted) == 9  # 26 of the 40 records are kept, in batches of 3
    assert_same_outputs(list(loader), wanted)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("drop_remainder", [False, True])
def test_no_two_records_of_any_two_shards_share_a_generator(workers: int, drop_remainder: bool) -> None:
    draws: list[int] = []
    for shard in range(4):
        sampler = al.IndexSampler(43, al.ShardOptions(shard, 4, drop_remainder), True, 2, seed=12)
        loader = al.DataLoader(
            data_source=al.RangeDataSource(0, 43),
            sampler=sampler,
            operations=[Tag(), Draw(), al.Batch(1), Draw()],
            worker_count=workers,
        )
        for batch in loader:
            draws.append(int(batch["draw"][0]))
    assert len(draws) == 4 * (86 // 4 if not drop_remainder else 2 * (43 // 4))
    assert len(set(draws)) == len(draws)


def test_the_records_of_a_batch_and_the_batches_after_it_have_their_own_generators() -> None:
    draws = []
    for shard in range(3):
        loader = al.DataLoader(
            data_source=al.RangeDataSource(0, 30),
            sampler=al.IndexSampler(30, al.ShardOptions(shard, 3), True, 1, seed=4),
            operations=[Tag(), Draw(), al.Batch(5), Halve(), Draw()],
            worker_count=0,
        )
        for batch in loader:
            draws += batch["draw"].tolist()
    assert len(draws) == 30
    assert len(set(draws)) == 30


def test_a_random_map_needs_a_seed_and_says_so_when_the_loader_is_built() -> None:
    for operations, name in (
        ([Tag(), Draw()], r"operations\[1\]"),
        ([al.Batch(2), Tag(), Draw()], r"operations\[2\]"),
    ):
        with pytest.raises(
            ValueError, match=name + r"` \(Draw.random_map\) needs each record's generator.*seed=None"
        ):
            al.DataLoader(
                data_source=al.RangeDataSource(0, 5),
                sampler=al.IndexSampler(5, num_epochs=1),
                operations=operations,
            )
    with pytest.raises(ValueError, match="seed=None"):
        al.DataLoader(
            data_source=al.RangeDataSource(0, 5), sampler=al.SequentialSampler(5), operations=[Draw()]
        )
    al.DataLoader(
        data_source=al.RangeDataSource(0, 5), sampler=al.IndexSampler(5, num_epochs=1), operations=[Tag()]
    )


class Every3rd:
    """A sampler of the protocol alone: record keys 0, 3, 6, ... with generators keyed on 100 + index;
    no __len__: it ends where lookups raise IndexError."""

    def __init__(self, count: int, shard_options: Any = None) -> None:
        self.count, self._shard_options = count, shard_options

    def __getitem__(self, index: int) -> al.RecordMetadata:
        if not 0 <= index < self.count:
            raise IndexError(index)
        return al.RecordMetadata(
            index, 3 * index % 50, np.random.Generator(np.random.Philox(key=100 + index))
        )

    def __repr__(self) -> str:
        return f"Every3rd({self.count}, {self._shard_options!r})"


def expected_every_3rd(indices: Iterable[int]) -> list[Any]:
    return [
        {
            "key": np.int64(3 * i % 50),
            "draw": np.random.Generator(np.random.Philox(key=100 + i)).integers(0, 2**62),
        }
        for i in indices
    ]


@pytest.mark.parametrize("workers", [0, 2])
def test_any_object_with_getitem_is_a_sampler(workers: int) -> None:
    loader = al.DataLoader(
        data_source=al.RangeDataSource(0, 50),
        sampler=Every3rd(23),
        operations=[Tag(), Draw()],
        worker_count=workers,
    )
    assert_same_outputs(list(loader), expected_every_3rd(range(23)))


def test_a_protocol_sampler_is_sharded_as_grain_shards_it() -> None:
    loader = al.DataLoader(
        data_source=al.RangeDataSource(0, 50),
        sampler=Every3rd(23, al.ShardOptions(1, 3)),
        operations=[Tag(), Draw()],
    )
    assert_same_outputs(list(loader), expected_every_3rd(range(1, 23 // 3 * 3, 3)))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_protocol_sampler_resumes_from_a_state(workers: int) -> None:
    def make() -> al.DataLoader:
        return al.DataLoader(
            data_source=al.RangeDataSource(0, 50),
            sampler=Every3rd(23),
            operations=[Tag(), Draw(), al.Batch(4)],
            worker_count=workers,
        )

    with iter(make()) as iterator:
        for _ in range(2):
            next(iterator)
        state = iterator.get_state()
        rest = list(iterator)
    with iter(make()) as resumed:
        resumed.set_state(state)
        assert_same_outputs(list(resumed), rest)
    assert len(rest) == 4


class ShortOf(Every3rd):
    """Says it has `count` indices but raises IndexError from `broken` on: a sampler that lies."""

    def __init__(self, count: int, broken: int) -> None:
        super().__init__(count)
        self.broken = broken

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> al.RecordMetadata:
        if index >= self.broken:
            raise IndexError(f"no index {index}")
        return super().__getitem__(index)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_sampler_that_fails_within_its_length_is_an_error_in_order(workers: int) -> None:
    loader = al.DataLoader(
        data_source=al.RangeDataSource(0, 50),
        sampler=ShortOf(20, 12),
        operations=[Tag()],
        worker_count=workers,
    )
    got, error = drain(loader)
    assert [int(x["key"]) for x in got] == [3 * i % 50 for i in range(12)]
    assert isinstance(error, IndexError)
    assert "sampler[12] failed on the record with index=12" in notes(error)


class NoRng(Every3rd):
    def __getitem__(self, index: int) -> al.RecordMetadata:
        return al.RecordMetadata(super().__getitem__(index).index, 0)


def test_a_random_map_over_a_sampler_without_generators_names_the_record() -> None:
    loader = al.DataLoader(
        data_source=al.RangeDataSource(0, 50), sampler=NoRng(5), operations=[Tag(), Draw()]
    )
    got, error = drain(loader)
    assert got == []
    assert isinstance(error, ValueError)
    assert "rng=None" in str(error)
    assert "index=0" in notes(error)


def test_a_sequence_is_not_a_sampler() -> None:
    with pytest.raises(TypeError, match=r"`sampler\[0\]` must return a RecordMetadata"):
        al.DataLoader(data_source=al.RangeDataSource(0, 5), sampler=[0, 1, 2])


@pytest.mark.parametrize("asynchronous", [False, True])
def test_str_of_an_iterator_is_its_name_and_state_as_in_grain(asynchronous: bool) -> None:
    import asyncio
    import json

    def parts(text: str) -> tuple[str, dict[str, Any]]:
        name, _, rest = text.partition("(state=")
        assert rest.endswith(")")
        assert "\n    " in rest  # indented, as Grain's
        return name, json.loads(rest[:-1])

    loader = al.DataLoader(
        data_source=al.RangeDataSource(0, 8, 1), sampler=al.SequentialSampler(8, al.NoSharding(), seed=1)
    )
    if asynchronous:

        async def first_then_str() -> str:
            iterator = loader.__aiter__()
            await iterator.__anext__()
            text = str(iterator)
            await iterator.aclose()
            return text

        name, state = parts(asyncio.run(first_then_str()))
        assert name == "AsyncDataLoaderIterator"
    else:
        iterator = iter(loader)
        next(iterator)
        name, state = parts(str(iterator))
        assert name == "DataLoaderIterator"
        assert state == json.loads(iterator.get_state())
    gp = grain_python()
    theirs = iter(
        gp.DataLoader(
            data_source=gp.RangeDataSource(0, 8, 1), sampler=gp.SequentialSampler(8, gp.NoSharding(), seed=1)
        )
    )
    next(theirs)
    their_name, their_state = parts(str(theirs))
    assert their_name == "PyGrainDatasetIterator"
    assert {k: v for k, v in state.items() if k != "aioloader"} == their_state
