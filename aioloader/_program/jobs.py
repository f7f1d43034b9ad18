"""What travels between the scheduler, the workers and the consumer: jobs in, results out.

A `ChunkJob` (sampler indices) enters the `RECORDS` stage and leaves it as
`Outputs` for the consumer, or, in the tail plan, as `Elements` for the
`TailBatcher`, which cuts them into `BatchJob`s for the `BATCHES` stage,
which gives `Outputs`. A failure rides in the result, after every item
before it.

Plain classes with `__slots__`, not dataclasses, which take 0.3-1.4 ms each
to make at import on 3.13t (see "What loads when" in the package's README).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from aioloader._common.failures import Failure
from aioloader._common.positions import Position
from aioloader._operations.batching import BatchPlan


class ChunkJob:
    """Stage-1 work: `count` walk positions from `start`.

    `skip` and `skip_outputs` are non-zero only for the first job after a
    resume inside a record's or a batch's outputs.
    """

    __slots__ = ("count", "skip", "skip_outputs", "start")

    def __init__(self, start: int, count: int, skip: int = 0, skip_outputs: int = 0) -> None:
        self.start, self.count, self.skip, self.skip_outputs = start, count, skip, skip_outputs

    def _fields(self) -> tuple[int, int, int, int]:
        return (self.start, self.count, self.skip, self.skip_outputs)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ChunkJob) and self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # mutable, as a dataclass's

    def __repr__(self) -> str:
        return "ChunkJob(start={}, count={}, skip={}, skip_outputs={})".format(*self._fields())


class BatchJob:
    """Stage-2 work (tail plan): batches cut by the ordered tail."""

    __slots__ = ("failure", "plan", "skip_outputs")

    def __init__(self, plan: BatchPlan, skip_outputs: int = 0, failure: Failure | None = None) -> None:
        self.plan, self.skip_outputs, self.failure = plan, skip_outputs, failure


class Elements:
    """Stage-1 result of the tail plan: elements with their positions, the global
    index of each element's record (`indices`) and its generator, if one was made."""

    __slots__ = ("after", "before", "failure", "indices", "items", "rngs")

    def __init__(
        self,
        items: list[Any],
        before: list[Position],
        after: list[Position],
        indices: list[int],
        rngs: list[np.random.Generator | None],
        failure: Failure | None,
    ) -> None:
        self.items, self.before, self.after = items, before, after
        self.indices, self.rngs, self.failure = indices, rngs, failure

    def columns(self) -> tuple[list[Any], ...]:
        """The per-element lists, in one order, to extend or cut them together."""
        return (self.items, self.before, self.after, self.indices, self.rngs)

    # `ElementColumns`, for `BatchPlan.cut`.

    def positions_before(self, js: Sequence[int]) -> list[Position]:
        before = self.before
        return [before[j] for j in js]

    def positions_after(self, js: Sequence[int]) -> list[Position]:
        after = self.after
        return [after[j] for j in js]

    def record_indices(self, js: Sequence[int]) -> list[int]:
        indices = self.indices
        return [indices[j] for j in js]

    def record_rngs(self, js: Sequence[int]) -> list[np.random.Generator | None]:
        rngs = self.rngs
        return [rngs[j] for j in js]


class Outputs:
    """Consecutive outputs for the consumer; `after[j]` is the position just past `items[j]`.

    `failure`, if any, is raised once every item has been delivered.
    """

    __slots__ = ("after", "failure", "items")

    def __init__(self, items: list[Any], after: Sequence[Position], failure: Failure | None) -> None:
        self.items, self.after, self.failure = items, after, failure
