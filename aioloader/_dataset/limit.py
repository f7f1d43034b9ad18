"""`LimitIterDataset(parent, count)`: the first `count` elements of the parent, in order
(Grain's `grain.experimental.LimitIterDataset`).

The limit runs in the consumer's iterator and never asks the parent for more than
`count` elements: once `count` were given it ends without reading on (a parent that
would block or fail after them is not touched). A parent shorter than `count` ends
the limit where it ends. The parent may be a MapDataset, read as `to_iter_dataset()`
as Grain reads it; `parents` keeps it as given, so that seeds derived by `seed()`
upstream equal Grain's.

The state is the parent's state and the number of elements given. As in Grain, a state
resumes in a limit with another `count` too: the elements given count against the new
one (the rest of the pipeline must be the same, as always).

Deliberate differences from Grain: `count` must be an int (Grain also takes a float, and
`True` as 1), at least 1, else an error naming `count`.
"""

from __future__ import annotations

from typing import Any, TypeVar

from aioloader._common.validation import require_int
from aioloader._dataset.base import MapDataset
from aioloader._dataset.iter_base import IterDataset, require_iter_dataset
from aioloader._dataset.stages import Plan, Settings, Stage, as_stage, require_count, state_fields

T = TypeVar("T")


class LimitIterDataset(IterDataset[T]):
    """At most the first `count` elements of `parent`."""

    def __init__(self, parent: IterDataset[T] | MapDataset[T], count: int) -> None:
        super().__init__(parent)
        self._parent: IterDataset[T] = require_iter_dataset("parent", parent)
        self._count = require_int("count", count, minimum=1)

    def _plan(self, settings: Settings) -> Plan:
        return LimitStage(as_stage(self._parent._plan(settings)), self._count)

    def __repr__(self) -> str:
        return f"LimitIterDataset({self._parent!r}, count={self._count})"


class LimitStage(Stage[Any]):
    """The limit running: the parent's elements until `count` were given."""

    def __init__(self, parent: Stage[Any], count: int) -> None:
        super().__init__((parent,))
        self._parent, self._count = parent, count
        self._given = 0

    def __next__(self) -> Any:
        if self._given >= self._count:
            raise StopIteration  # without reading the parent on
        element = next(self._parent)
        self._given += 1
        return element

    def snapshot(self) -> tuple[Any, int]:
        return self._parent.snapshot(), self._given

    def state_of(self, token: tuple[Any, int]) -> dict[str, Any]:
        parent, given = token
        return {"stage": "limit", "parent": self._parent.state_of(parent), "given": given}

    def set_state(self, state: dict[str, Any]) -> None:
        parent, given = state_fields(state, "limit", ("parent", "given"))
        self._given = require_count("given", given)
        self._parent.set_state(parent)
