"""Contract 2: `set_state(get_state())` continues with exactly the outputs still to come."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from aioloader import Batch, DataLoader, IndexSampler, RangeDataSource, SequentialSampler
from tests.conftest import repeated
from tests.pipelines import (
    CASE_IDS,
    CASES,
    AddOne,
    Case,
    assert_same_outputs,
    expected,
    states_at_every_output,
)

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
            state = json.loads(json.dumps(first.get_state()))
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
def test_async_resume(case: Case) -> None:
    wanted = expected(case)
    cut = len(wanted) // 2

    async def run() -> list[Any]:
        first = aiter(case.loader(3))
        head = [await anext(first) for _ in range(cut)]
        state = first.get_state()
        await first.aclose()
        second = aiter(case.loader(1))
        second.set_state(state)
        async with second:
            return head + [x async for x in second]

    assert_same_outputs(asyncio.run(run()), wanted)


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


def test_state_is_small_json_whatever_the_dataset_size() -> None:
    loader = DataLoader(
        data_source=RangeDataSource(0, 10**9),
        sampler=IndexSampler(10**9, shuffle=True, num_epochs=None, seed=1),
        operations=[AddOne(), Batch(4)],
        worker_count=2,
    )
    with iter(loader) as iterator:
        take(iterator, 5)
        encoded = json.dumps(iterator.get_state())
    assert len(encoded) < 600, encoded
    assert json.loads(encoded)["position"] == {"index": 20, "skip_elements": 0, "skip_outputs": 0}


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
def test_malformed_states_are_rejected(mutate: Any, message: str) -> None:
    loader = DataLoader(data_source=RangeDataSource(0, 20), sampler=SequentialSampler(20))
    state = iter(loader).get_state()
    with pytest.raises(ValueError, match=message):
        iter(loader).set_state(mutate(state))
