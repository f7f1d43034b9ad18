"""`ZipMapDataset(parents)` and `ZipIterDataset(parents, strict=)`: several datasets read
side by side, one tuple per position (Grain's `grain.experimental` zips).

`ZipMapDataset` takes MapDatasets of one length: element `i` is the tuple of the
parents' elements `i` (past the length too, each parent answering for its own later
epochs). As in Grain, a parent's `None` hole (a filter's) stays inside the tuple: the
tuple itself is never a hole, so iterating keeps it.

`ZipIterDataset` reads one element of each parent in turn for each tuple, in the
consumer's iterator. With `strict=True` (Grain's default) parents that end at
different times are a ValueError with Grain's message, raised where the shortest
ends; with `strict=False` the zip ends with its shortest parent, as Python's `zip`
does. Its parents may be MapDatasets (read as `to_iter_dataset()`, as Grain reads
them); `parents` keeps them as given, so that seeds derived by `seed()` upstream
equal Grain's.

The state of a `ZipIterDataset` is its parents' states, in order: resuming resumes
each where it was. One deliberate difference from Grain: `strict` must be a bool
(Grain takes any truthy value), as every flag of aioloader's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from aioloader._common.failures import note
from aioloader._common.validation import require_bool
from aioloader._dataset.base import MapDataset
from aioloader._dataset.iter_base import IterDataset, require_iter_dataset
from aioloader._dataset.stages import Plan, Settings, Stage, as_stage, state_fields


class ZipMapDataset(MapDataset[tuple[Any, ...]]):
    """The tuples of the parents' elements at each index; the parents have one length."""

    def __init__(self, parents: MapDataset[Any] | Sequence[MapDataset[Any]]) -> None:
        parents = _require_parents(parents, "a MapDataset", (MapDataset,))
        super().__init__(parents)
        lengths = [len(parent) for parent in self._parents]
        if any(length != lengths[0] for length in lengths):
            raise ValueError(f"`parents` must all have the same length, got lengths {lengths}.")
        self._length = lengths[0]

    def __len__(self) -> int:
        return self._length

    def _get(self, index: int) -> tuple[Any, ...]:
        return tuple(parent[index] for parent in self._parents)

    def _getitems(self, indices: Sequence[int]) -> list[tuple[Any, ...] | None]:
        # Each parent reads its own batch (a source with `__getitems__` stays batched).
        columns = [parent._getitems(indices) for parent in self._parents]
        return list(zip(*columns, strict=True))

    def __repr__(self) -> str:  # every parent: a state's digest of the graph must see them all
        return f"ZipMapDataset({list(self._parents)!r})"


class ZipIterDataset(IterDataset[tuple[Any, ...]]):
    """The tuples of the parents' next elements, until they end (Grain's zip of iterators)."""

    def __init__(
        self,
        parents: IterDataset[Any] | MapDataset[Any] | Sequence[IterDataset[Any] | MapDataset[Any]],
        *,
        strict: bool = True,
    ) -> None:
        given = _require_parents(parents, "an IterDataset or a MapDataset", (IterDataset, MapDataset))
        super().__init__(given)
        self._inputs = tuple(require_iter_dataset(f"parents[{i}]", p) for i, p in enumerate(given))
        self._strict = require_bool("strict", strict)

    def _plan(self, settings: Settings) -> Plan:
        stages = [as_stage(parent._plan(settings)) for parent in self._inputs]
        return ZipStage(stages, strict=self._strict)

    def __repr__(self) -> str:
        return f"ZipIterDataset({list(self._inputs)!r}, strict={self._strict})"


class ZipStage(Stage[tuple[Any, ...]]):
    """The zip running: one element of each parent stage, in order, per tuple."""

    def __init__(self, parents: Sequence[Stage[Any]], *, strict: bool) -> None:
        super().__init__(parents)
        self._strict = strict
        # Set by `close` (any thread): the parents then end where the close cut them, not
        # together, and that is no length mismatch to report.
        self._closed = False

    def __next__(self) -> tuple[Any, ...]:
        items: list[Any] = []
        for which, parent in enumerate(self.parents):
            try:
                items.append(next(parent))
            except StopIteration:
                if self._strict and not self._closed:
                    self._check_ends_together(which)
                raise
            except BaseException as error:
                note(error, f"aioloader: raised by parents[{which}] of ZipIterDataset")
                raise
        return tuple(items)

    def _check_ends_together(self, which: int) -> None:
        """`strict`: parent `which` has ended; every other must end at the same place.

        The parents before it gave an element for this tuple, so they are longer; if it is
        the first, the others are read once more to see whether they end too (Grain's way,
        and Python's `zip(strict=True)`)."""
        if which > 0:
            raise ValueError(_uneven(which, "shorter"))
        for later in range(1, len(self.parents)):
            try:
                next(self.parents[later])
            except StopIteration:
                continue
            if not self._closed:
                raise ValueError(_uneven(later, "longer"))

    def close(self) -> None:
        self._closed = True  # before the parents' close, which ends their `next()` early
        super().close()

    def snapshot(self) -> tuple[Any, ...]:
        return tuple(parent.snapshot() for parent in self.parents)

    def state_of(self, token: tuple[Any, ...]) -> dict[str, Any]:
        states = [parent.state_of(t) for parent, t in zip(self.parents, token, strict=True)]
        return {"stage": "zip", "parents": states}

    def set_state(self, state: dict[str, Any]) -> None:
        (states,) = state_fields(state, "zip", ("parents",))
        if not isinstance(states, list) or len(states) != len(self.parents):
            count = len(states) if isinstance(states, list) else repr(states)
            raise ValueError(
                f"`state` holds the states of {count} zipped datasets, but this zip has {len(self.parents)}."
            )
        for parent, parent_state in zip(self.parents, states, strict=True):
            parent.set_state(parent_state)


def _uneven(which: int, how: str) -> str:
    """Grain's message, word for word (a user's test may match it), for parent `which`
    ending apart from the ones before it."""
    before = "argument 1" if which == 1 else f"arguments 1-{which}"
    return f"ZipIterDataset argument {which + 1} is {how} than {before}"


def _require_parents(parents: Any, what: str, kinds: tuple[type, ...]) -> tuple[Any, ...]:
    """`parents` as a non-empty tuple of datasets of `kinds` (one dataset alone is taken, as
    in Grain), or an error naming the parameter and the first wrong entry."""
    if isinstance(parents, kinds):
        return (parents,)
    if isinstance(parents, (str, bytes)) or not isinstance(parents, Iterable):
        raise TypeError(f"`parents` must be a sequence of datasets, got {type(parents).__name__}.")
    found = tuple(parents)  # any iterable, as Grain takes it
    if not found:
        raise ValueError(f"`parents` must hold at least one dataset ({what}), got none.")
    for i, parent in enumerate(found):
        if not isinstance(parent, kinds):
            raise TypeError(f"`parents[{i}]` must be {what}, got {type(parent).__name__}.")
    return found
