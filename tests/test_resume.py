"""Contract 2: `set_state(get_state())` continues with exactly the outputs still to come."""

from __future__ import annotations

import json
from typing import Any

import pytest

from aioloader import Batch, DataLoader, IndexSampler, RangeDataSource, SequentialSampler
from tests.conftest import repeated
from tests.support.outputs import states_at_every_output
from tests.support.reference import CASE_IDS, CASES, AddOne, Case, assert_same_outputs, expected

WORKER_PAIRS = [(0, 0), (0, 3), (2, 0), (1, 2), (3, 8)]


def cut_points(total: int) -> list[int]:
    """Where to checkpoint: the start, the end, and points between."""
    return sorted({0, 1, 2, total // 3, total // 2, total - 2, total - 1, total} & set(range(total + 1)))


def take(iterator: Any, count: int) -> list[Any]:
    return [next(iterator) for _ in range(count)]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize(("before", "after"), WORKER_PAIRS, ids=[f"{a}to{b}" for a, b in WORKER_PAIRS])
def test_resume_in_a_fresh_loader_at_many_points(case: Case, before: int, after: int) -> None:
    wanted = expected(case)
    for cut in cut_points(len(wanted)):
        with iter(case.loader(before)) as first:
            head = take(first, cut)
            state = first.get_state()
            assert isinstance(state, bytes)
        with iter(case.loader(after)) as second:
            second.set_state(state)
            tail = list(second)
        assert_same_outputs(head + tail, wanted)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_resume_at_every_output(case: Case) -> None:
    wanted = expected(case)
    for k, state in enumerate(states_at_every_output(case.loader(2), len(wanted))):
        resumed = iter(case.loader(0))
        resumed.set_state(state)
        assert_same_outputs(list(resumed), wanted[k:])


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.asyncio
async def test_async_resume(case: Case) -> None:
    wanted = expected(case)
    cut = len(wanted) // 2
    first = aiter(case.loader(3))
    head = [await anext(first) for _ in range(cut)]
    state = first.get_state()
    await first.aclose()
    second = aiter(case.loader(1))
    second.set_state(state)
    async with second:
        assert_same_outputs(head + [x async for x in second], wanted)


@repeated
def test_set_state_while_running_restarts_there(repeat: int) -> None:
    case = CASES[1]
    wanted = expected(case)
    with iter(case.loader(2)) as iterator:
        take(iterator, 3)
        state = iterator.get_state()
        take(iterator, 4)
        iterator.set_state(state)
        assert_same_outputs(list(iterator), wanted[3:])


@pytest.mark.parametrize("workers", [0, 2])
def test_set_state_opens_a_closed_iterator_again(workers: int) -> None:
    case = CASES[1]
    wanted = expected(case)
    with iter(case.loader(workers)) as iterator:
        take(iterator, 5)
        state = iterator.get_state()
        iterator.close()
        iterator.set_state(state)
        assert_same_outputs(list(iterator), wanted[5:])


@pytest.mark.parametrize("how", ["end", "asked-after-close"])
def test_set_state_on_a_sync_iterator_that_ended_says_to_make_a_new_one(how: str) -> None:
    case = CASES[1]
    with iter(case.loader(2)) as iterator:
        state = iterator.get_state()
        if how == "end":
            list(iterator)
        else:
            iterator.close()
            assert list(iterator) == []
        with pytest.raises(ValueError, match=r"cannot restart this DataLoaderIterator.*iter\(loader\)"):
            iterator.set_state(state)
    with iter(case.loader(2)) as fresh:
        fresh.set_state(state)
        assert_same_outputs(list(fresh), expected(case))


@pytest.mark.asyncio
async def test_set_state_opens_a_closed_async_iterator_again() -> None:
    case = CASES[1]
    wanted = expected(case)
    iterator = aiter(case.loader(2))
    head = [await anext(iterator) for _ in range(5)]
    await iterator.aclose()
    assert [x async for x in iterator] == []
    iterator.set_state(iterator.get_state())
    async with iterator:
        assert_same_outputs(head + [x async for x in iterator], wanted)


@pytest.mark.parametrize("size", [10**3, 10**9])
def test_state_is_small_json_whatever_the_dataset_size(size: int) -> None:
    loader = DataLoader(
        data_source=RangeDataSource(0, size),
        sampler=IndexSampler(size, shuffle=True, num_epochs=None, seed=1),
        operations=[AddOne(), Batch(4)],
        worker_count=2,
    )
    with iter(loader) as iterator:
        take(iterator, 5)
        encoded = iterator.get_state()
    assert len(encoded) < 700, encoded
    position = json.loads(encoded)["aioloader"]["position"]
    assert position == {"index": 20, "skip_elements": 0, "skip_outputs": 0}


@pytest.mark.parametrize(
    ("other", "part"),
    [
        (
            lambda: DataLoader(
                data_source=RangeDataSource(0, 20), sampler=IndexSampler(20, seed=2, num_epochs=1)
            ),
            "sampler",
        ),
        (
            lambda: DataLoader(
                data_source=RangeDataSource(0, 30), sampler=IndexSampler(20, seed=1, num_epochs=1)
            ),
            "data_source",
        ),
        (
            lambda: DataLoader(
                data_source=RangeDataSource(0, 20),
                sampler=IndexSampler(20, seed=1, num_epochs=1),
                operations=[Batch(2)],
            ),
            "operations",
        ),
    ],
    ids=["other-sampler", "other-source", "other-operations"],
)
def test_state_from_another_pipeline_is_rejected(other: Any, part: str) -> None:
    loader = DataLoader(data_source=RangeDataSource(0, 20), sampler=IndexSampler(20, seed=1, num_epochs=1))
    state = iter(loader).get_state()
    with pytest.raises(ValueError, match=part):
        iter(other()).set_state(state)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda s: {**s, "version": 99}, "version"),
        (lambda s: "not a state", "get_state"),
        (lambda s: {**s, "position": {"index": -1, "skip_elements": 0, "skip_outputs": 0}}, "index"),
        (
            lambda s: {**s, "position": {"index": 999, "skip_elements": 0, "skip_outputs": 0}},
            "past the sampler",
        ),
    ],
    ids=["version", "string", "negative-index", "past-the-end"],
)
@pytest.mark.parametrize("form", ["bytes", "dict"])
def test_malformed_states_are_rejected(mutate: Any, message: str, form: str) -> None:
    # "bytes": aioloader's part spoiled inside the JSON document get_state() returns;
    # "dict": the part alone, as get_state() returned it before states were bytes.
    loader = DataLoader(data_source=RangeDataSource(0, 20), sampler=SequentialSampler(20))
    document = json.loads(iter(loader).get_state())
    spoiled = mutate(document["aioloader"])
    state = json.dumps({**document, "aioloader": spoiled}).encode() if form == "bytes" else spoiled
    with iter(loader) as iterator:
        with pytest.raises(ValueError, match=message):
            iterator.set_state(state)
        assert list(iterator) == list(range(20)), "a refused state leaves the iterator where it was"


# States exactly as get_state() wrote them before the package moved into
# subpackages (main at 0fa32dd), each after `delivered` outputs of a shared case.
# A state names no module, so they must restore unchanged.
SAVED_BEFORE_THE_LAYOUT = [
    (
        "ops-after-batch",
        7,
        '{"version":1,"position":{"index":18,"skip_elements":0,"skip_outputs":1},"pipeline":'
        '{"sampler":{"type":"IndexSampler","num_records":47,"shard":[0,1,false],"shuffle":true,'
        '"num_epochs":3,"seed":11},"data_source":{"type":"RangeDataSource","len":47},'
        '"operations":["map","batch(6,False)","random_map","flat_map","map"]}}',
    ),
    (
        "flatmap-batch",
        3,
        '{"version":1,"position":{"index":6,"skip_elements":2,"skip_outputs":0},"pipeline":'
        '{"sampler":{"type":"IndexSampler","num_records":41,"shard":[0,1,false],"shuffle":true,'
        '"num_epochs":3,"seed":11},"data_source":{"type":"RangeDataSource","len":41},'
        '"operations":["flat_map","random_map","batch(4,False)"]}}',
    ),
    (
        "records",
        17,
        '{"version":1,"position":{"index":17,"skip_elements":0,"skip_outputs":0},"pipeline":'
        '{"sampler":{"type":"IndexSampler","num_records":53,"shard":[0,1,false],"shuffle":true,'
        '"num_epochs":3,"seed":11},"data_source":{"type":"RangeDataSource","len":53},'
        '"operations":["map","random_map","map"]}}',
    ),
]


@pytest.mark.parametrize(
    ("name", "delivered", "saved"), SAVED_BEFORE_THE_LAYOUT, ids=[s[0] for s in SAVED_BEFORE_THE_LAYOUT]
)
def test_a_shuffled_state_saved_before_grains_shuffle_is_refused(
    name: str, delivered: int, saved: str
) -> None:
    # Those states name positions of aioloader's old shuffle: resuming them
    # under Grain's would repeat some records and skip others.
    case = next(case for case in CASES if case.name == name)
    with iter(case.loader(0)) as iterator, pytest.raises(ValueError, match="version 1"):
        iterator.set_state(json.loads(saved))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_version_1_state_of_an_unshuffled_sampler_restores(workers: int) -> None:
    def loader() -> DataLoader:
        return DataLoader(
            data_source=RangeDataSource(0, 30),
            sampler=IndexSampler(30, num_epochs=2),
            operations=[Batch(4)],
            worker_count=workers,
        )

    with iter(loader()) as first:
        wanted = [next(first) for _ in range(5)]
        state = json.loads(first.get_state())["aioloader"]
        wanted += list(first)
    old = {**state, "version": 1}  # what the previous release wrote for this loader
    with iter(loader()) as resumed:
        resumed.set_state(old)
        assert_same_outputs(list(resumed), wanted[5:])
