"""What travels between the scheduler, the workers and the consumer: jobs in, results out.

A `ChunkJob` (sampler indices) enters the `RECORDS` stage and leaves it as
`Outputs` for the consumer, or, in the tail plan, as `Elements` for the
`TailBatcher`, which cuts them into `BatchJob`s for the `BATCHES` stage,
which gives `Outputs`. A failure rides in the result, after every item
before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from aioloader._common.failures import Failure
from aioloader._common.positions import Position
from aioloader._operations.batching import BatchPlan


@dataclass(slots=True)
class ChunkJob:
    """Stage-1 work: `count` walk positions from `start`.

    `skip` and `skip_outputs` are non-zero only for the first job after a
    resume inside a record's or a batch's outputs.
    """

    start: int
    count: int
    skip: int = 0
    skip_outputs: int = 0


@dataclass(slots=True)
class BatchJob:
    """Stage-2 work (tail plan): batches cut by the ordered tail."""

    plan: BatchPlan
    skip_outputs: int = 0
    failure: Failure | None = None


@dataclass(slots=True)
class Elements:
    """Stage-1 result of the tail plan: elements with their positions."""

    items: list[Any]
    before: list[Position]
    after: list[Position]
    indices: list[int]  # the global index of each element's record
    rngs: list[np.random.Generator | None]
    failure: Failure | None

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


@dataclass(slots=True)
class Outputs:
    """Consecutive outputs for the consumer; `after[j]` is the position just past `items[j]`.

    `failure`, if any, is raised once every item has been delivered.
    """

    items: list[Any]
    after: Sequence[Position]
    failure: Failure | None
