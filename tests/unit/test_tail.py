"""`TailBatcher`: elements in order, cut into batch jobs; resumes, failures, the end."""

from __future__ import annotations

import pytest

from aioloader import Batch
from aioloader._common.failures import Failure
from aioloader._program.jobs import BatchJob, Elements
from aioloader._scheduling.tail import TailBatcher


def records(start: int, stop: int, failure: Failure | None = None) -> Elements:
    """One element per record `start..stop-1`, the element being the index."""
    indices = list(range(start, stop))
    return Elements(
        items=list(indices),
        before=[(i, 0, 0) for i in indices],
        after=[(i + 1, 0, 0) for i in indices],
        indices=indices,
        rngs=[None] * len(indices),
        failure=failure,
    )


def groups(jobs: list[BatchJob]) -> list[list[int]]:
    return [group for job in jobs for group in job.plan.groups]


def test_batches_are_cut_once_full_across_pushes() -> None:
    tail = TailBatcher(Batch(3))
    assert tail.push(records(0, 2)) == []
    assert tail.buffered == 2
    jobs = tail.push(records(2, 7))
    assert groups(jobs) == [[0, 1, 2], [3, 4, 5]]
    assert jobs[0].plan.before == [(0, 0, 0), (3, 0, 0)]
    assert jobs[0].plan.after == [(3, 0, 0), (6, 0, 0)]
    assert tail.buffered == 1
    assert groups(tail.finish()) == [[6]]


def test_skip_outputs_of_a_resume_goes_to_the_first_batch_only() -> None:
    tail = TailBatcher(Batch(2), skip_outputs=1)
    first = tail.push(records(0, 2))
    second = tail.push(records(2, 4))
    assert first[0].skip_outputs == 1
    assert first[0].plan.before == [(0, 0, 1)]
    assert second[0].skip_outputs == 0
    assert second[0].plan.before == [(2, 0, 0)]


def test_a_failure_mid_stream_ends_it_after_the_batches_before_it() -> None:
    tail = TailBatcher(Batch(2))
    failure = Failure(ValueError("record 5"))
    jobs = tail.push(records(0, 5, failure))  # records 0..4 arrived, then the failure
    assert groups(jobs) == [[0, 1], [2, 3]]
    assert jobs[-1].failure is failure
    assert jobs[-1].plan.groups == []
    assert tail.failed
    assert tail.finish() == []  # record 4 would be a short batch: it never comes


@pytest.mark.parametrize(("drop_remainder", "last"), [(False, [[8, 9]]), (True, [])])
def test_finish_gives_the_short_last_batch_unless_drop_remainder(
    drop_remainder: bool, last: list[list[int]]
) -> None:
    tail = TailBatcher(Batch(4, drop_remainder=drop_remainder))
    assert groups(tail.push(records(0, 10))) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert groups(tail.finish()) == last


def test_finish_with_nothing_left_gives_nothing() -> None:
    tail = TailBatcher(Batch(2))
    tail.push(records(0, 4))
    assert tail.finish() == []


def test_clear_drops_what_waits() -> None:
    tail = TailBatcher(Batch(4))
    tail.push(records(0, 3))
    tail.clear()
    assert tail.buffered == 0
    assert tail.finish() == []
