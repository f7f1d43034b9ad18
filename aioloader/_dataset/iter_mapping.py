"""`IterDataset.map`, `random_map`, `map_with_index`, `filter` and `batch`.

Right after a parallel part, each joins it and runs on the engine's workers, in chunks
(see `parallel`); after something that runs in order (a mix, a packer, a second batch),
it runs in order too, as a stage of its own here. The elements are the same either way,
and Grain's: a map skips a `None` (kept by `allow_nones`), a filter keeps what its
predicate is true for, a batch stacks `batch_size` consecutive elements across epochs
(the last one shorter unless `drop_remainder`).

`random_map`'s generator is Grain's for its seed (Philox, counter `[0, 0, 0, index]`).
In order, `index` counts the elements the map has seen, as in Grain. In a parallel part
it is the index of the element's record in the MapDataset (of its batch, after the
part's batch: the batch's first record index over the batch size), which keeps the
workers independent: the same as Grain's count unless a filter or a `None` hole came
before the map, and, either way, the same for every worker count. `map_with_index` is
given Grain's count always: in a parallel part where no element can have been dropped
before it, the record index, which is then that count (the engine runs it as a random
map whose "generator" is the index itself); after a filter or a MapDataset that may hold
holes, in order, after the part.

Errors from the user's function keep their type and traceback, with a note naming the
transformation and the element; a StopIteration from it becomes a RuntimeError (it
would otherwise end the iteration and lose the elements after it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from aioloader._common.calls import stray_stop
from aioloader._common.failures import note
from aioloader._common.validation import require_int
from aioloader._dataset.base import require_seed
from aioloader._dataset.filter_checks import FilterThresholds
from aioloader._dataset.functions import add_note, resolve
from aioloader._dataset.iter_base import IterDataset
from aioloader._dataset.mapping import GrainRngs
from aioloader._dataset.stages import Part, Plan, Settings, Stage, as_stage, check_setup, state_fields
from aioloader._operations.apply import filter_verdict
from aioloader._operations.batching import stack
from aioloader._operations.transforms import Batch, Kind, Prepared

T = TypeVar("T")


class _ElementwiseIterDataset(IterDataset[Any]):
    """One of map, random_map and filter: it joins a parallel part, or runs in order."""

    kind: Kind
    method = ""  # the dataset method, when it is not named after the kind

    def __init__(self, parent: IterDataset[Any], transform: Any) -> None:
        super().__init__(parent)
        self._parent = parent
        self._method = self.method or self.kind.value
        self._function, self._what = resolve(self._method, transform)
        self._name = f"IterDataset.{self._method}"

    def _plan(self, settings: Settings) -> Plan:
        plan = self._parent._plan(settings)
        if isinstance(plan, Part) and self._may_join(plan):
            joined = plan.joined(self._prepared(plan))
            if joined is not None:
                return joined
        return self._stage(as_stage(plan), settings)

    def _may_join(self, part: Part) -> bool:
        """False where this transformation must run in order, after `part`."""
        return True

    def _prepared(self, part: Part) -> Prepared:
        """This transformation for the engine, at the end of `part`."""
        return Prepared(self.kind, self._function, self._name, self._what)

    def _stage(self, parent: Stage[Any], settings: Settings) -> Stage[Any]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{self._parent!r}.{self._method}({self._what})"


class MapIterDataset(_ElementwiseIterDataset):
    """`function(x)` for every element `x`."""

    kind = Kind.MAP

    def _stage(self, parent: Stage[Any], settings: Settings) -> Stage[Any]:
        return MapStage(parent, self._function, f"{self._name} ({self._what})")


class RandomMapIterDataset(_ElementwiseIterDataset):
    """`function(x, rng)` for every element `x`, with Grain's generator for its index."""

    kind = Kind.RANDOM_MAP

    def __init__(self, parent: IterDataset[Any], transform: Any, seed: int | None) -> None:
        super().__init__(parent, transform)
        self._seed = require_seed(seed, self._default_seed, "random_map")
        self._new_rng = GrainRngs(self._seed)

    def _may_join(self, part: Part) -> bool:
        # Grain seeds element n's generator with n counted in order: after a filter, the
        # record's position is not that count, so the map runs in order (as map_with_index).
        return part.counts_elements()

    def _prepared(self, part: Part) -> Prepared:
        size = getattr(part, "batch_size", None)
        new_rng = self._new_rng if size is None else _BatchRngs(self._new_rng, size)
        return Prepared(self.kind, self._function, self._name, self._what, new_rng)

    def _stage(self, parent: Stage[Any], settings: Settings) -> Stage[Any]:
        label = f"{self._name} ({self._what})"
        return RandomMapStage(parent, self._function, label, self._new_rng, setup=f"seed={self._seed}")


class MapWithIndexIterDataset(_ElementwiseIterDataset):
    """`function(index, x)` for every element `x` (see the module docstring for `index`)."""

    kind = Kind.RANDOM_MAP  # the engine's random map, given the index for a generator
    method = "map_with_index"

    def _may_join(self, part: Part) -> bool:
        return part.counts_elements()  # elements were dropped: only a count in order is Grain's index

    def _prepared(self, part: Part) -> Prepared:
        size = getattr(part, "batch_size", None)
        index: Callable[[int], int] = same_index if size is None else _BatchIndex(size)
        return Prepared(self.kind, IndexFirst(self._function), self._name, self._what, index)

    def _stage(self, parent: Stage[Any], settings: Settings) -> Stage[Any]:
        label = f"{self._name} ({self._what})"
        return RandomMapStage(parent, IndexFirst(self._function), label, same_index, "map_with_index")


class FilterIterDataset(_ElementwiseIterDataset):
    """The elements for which `predicate(element)` is true."""

    kind = Kind.FILTER

    def _stage(self, parent: Stage[Any], settings: Settings) -> Stage[Any]:
        label = f"FilterDatasetIterator(transform={self._what.removesuffix('.filter')})"
        checks = FilterThresholds(label, settings.options)
        return FilterStage(parent, self._function, f"{self._name} ({self._what})", checks)


class BatchIterDataset(IterDataset[Any]):
    """Batches of `batch_size` consecutive elements."""

    def __init__(
        self,
        parent: IterDataset[Any],
        batch_size: int,
        drop_remainder: bool,
        batch_fn: Callable[[list[Any]], Any] | None,
    ) -> None:
        super().__init__(parent)
        self._parent = parent
        self._batch = Batch(batch_size, drop_remainder, batch_fn)  # its checks of the three

    def _plan(self, settings: Settings) -> Plan:
        plan = self._parent._plan(settings)
        if isinstance(plan, Part):
            joined = plan.joined(self._batch)
            if joined is not None:
                return joined
        return BatchStage(as_stage(plan), self._batch)

    def __repr__(self) -> str:
        return (
            f"{self._parent!r}.batch({self._batch.batch_size}, drop_remainder={self._batch.drop_remainder})"
        )


class _BatchRngs:
    """A random map's generators after a part's batch: batch `b` (first record `f`) draws
    from index `f // batch_size`, which is `b` when nothing was dropped before it."""

    def __init__(self, new_rng: GrainRngs, batch_size: int) -> None:
        self._new_rng, self._size = new_rng, batch_size
        self.seed = new_rng.seed  # named by a state, as the factory's

    def __call__(self, first_record: int) -> np.random.Generator:
        return self._new_rng(first_record // self._size)


class _BatchIndex:
    """`map_with_index`'s index after a part's batch: `first_record // batch_size`, as
    `_BatchRngs` draws (`b` for batch `b` when nothing was dropped before it)."""

    def __init__(self, batch_size: int) -> None:
        self._size = batch_size

    def __call__(self, first_record: int) -> int:
        return first_record // self._size


def same_index(index: int) -> int:
    """A record's index as it is: `map_with_index`'s "generator" before a batch."""
    return index


class IndexFirst:
    """`function(index, element)`, called as the engine calls a random map: with the
    element first (module level, so that it pickles for subinterpreters)."""

    def __init__(self, function: Callable[[int, Any], Any]) -> None:
        self.function = function

    def __call__(self, element: Any, index: int) -> Any:
        return self.function(index, element)


class _CountingStage(Stage[Any]):
    """A stage over one parent that counts the elements it took (for error notes)."""

    def __init__(self, parent: Stage[Any], label: str) -> None:
        super().__init__((parent,))
        self._parent, self._label, self._taken = parent, label, 0
        self._resumed = False  # the count starts where the state was: not an index then

    def _call(self, function: Callable[..., Any], *args: Any) -> Any:
        """`function(*args)` on the element just taken, its errors named and noted."""
        try:
            return function(*args)
        except StopIteration as error:
            wrapped = stray_stop(error, self._label)
            self._note(wrapped)
            raise wrapped from error
        except Exception as error:
            self._note(error)
            raise

    def _note(self, error: BaseException) -> None:
        if not self._resumed:
            add_note(error, self._label, self._taken - 1)
            return
        taken = self._taken - 1
        note(error, f"aioloader: {self._label} failed on element {taken} after the state it resumed at")

    def _take(self) -> Any:
        element = next(self._parent)
        self._taken += 1
        return element

    def snapshot(self) -> Any:
        return self._parent.snapshot()  # nothing of its own: Grain's map, filter and batch

    def state_of(self, token: Any) -> dict[str, Any]:
        return self._parent.state_of(token)

    def set_state(self, state: dict[str, Any]) -> None:
        self._parent.set_state(state)
        self._resumed = True


class MapStage(_CountingStage):
    def __init__(self, parent: Stage[Any], function: Callable[[Any], Any], label: str) -> None:
        super().__init__(parent, label)
        self._function = function

    def __next__(self) -> Any:
        element = self._take()
        return None if element is None else self._call(self._function, element)


class FilterStage(_CountingStage):
    """A filter in order, with Grain's checks of what it drops (see `filter_checks`)."""

    def __init__(
        self, parent: Stage[Any], predicate: Callable[[Any], Any], label: str, checks: FilterThresholds
    ) -> None:
        super().__init__(parent, label)
        self._predicate, self._checks = predicate, checks

    def __next__(self) -> Any:
        while True:
            element = self._take()
            kept = self._call(self._verdict, element)
            self._checks.check(kept)
            if kept:
                return element

    def _verdict(self, element: Any) -> bool:
        return filter_verdict(self._predicate(element), self._label)


class RandomMapStage(_CountingStage):
    """A random map in order: element `n` (counted from the start) draws from index `n`
    (`map_with_index`'s stage too, whose `new_rng` gives the index itself)."""

    def __init__(
        self,
        parent: Stage[Any],
        function: Callable[[Any, Any], Any],
        label: str,
        new_rng: Callable[[int], Any],
        stage: str = "random_map",
        setup: str = "",
    ) -> None:
        super().__init__(parent, label)
        self._function, self._new_rng, self._index = function, new_rng, 0
        self._stage_name, self._setup = stage, setup  # the seed: see `check_setup`

    def __next__(self) -> Any:
        element = self._take()
        index, self._index = self._index, self._index + 1
        return None if element is None else self._call(self._function, element, self._new_rng(index))

    def snapshot(self) -> Any:
        return self._parent.snapshot(), self._index

    def state_of(self, token: Any) -> dict[str, Any]:
        parent, index = token
        state = {"stage": self._stage_name, "parent": self._parent.state_of(parent), "index": index}
        return {**state, "setup": self._setup} if self._setup else state

    def set_state(self, state: dict[str, Any]) -> None:
        parent, index = state_fields(state, self._stage_name, ("parent", "index"))
        check_setup(state, self._setup)
        self._parent.set_state(parent)
        self._index = self._taken = require_int("state['index']", index, minimum=0)


class BatchStage(_CountingStage):
    """A batch in order: up to `batch_size` elements, stacked (or given to `batch_fn`)."""

    def __init__(self, parent: Stage[Any], batch: Batch) -> None:
        super().__init__(parent, f"IterDataset.batch({batch.batch_size})")
        self._batch = batch
        self._combine = batch.batch_fn or stack

    def __next__(self) -> Any:
        elements: list[Any] = []
        try:
            while len(elements) < self._batch.batch_size:
                elements.append(self._take())
        except StopIteration:
            if not elements or self._batch.drop_remainder:
                raise
        return self._call(self._combine, elements)
