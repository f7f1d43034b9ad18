"""`FlatMapMapDataset(parent, transform)` and `FlatMapIterDataset(parent, transform)`: each
element becomes any number of elements, `transform.flat_map(element)`, kept in order.

`transform` is a `FlatMapTransform` (aioloader's or Grain's, or any object with a
`flat_map` method): `flat_map` returns or yields the outputs of one element, and
`max_fan_out` bounds how many it may give.

The MapDataset keeps random access, as Grain's does: every element owns `max_fan_out`
slots, so `len(ds)` is `len(parent) * max_fan_out` (at most `sys.maxsize`) and `ds[i]`
is output `i % max_fan_out` of element `i // max_fan_out`, or a `None` hole where the
element gave fewer (or was itself a hole); iterating skips the holes. `max_fan_out` is
required, an int of at least 1, and an element that gives more outputs is a ValueError,
as in Grain. One deliberate difference: Grain calls `flat_map` once per slot asked for;
`_getitems` (how iteration reads, in chunks) calls it once per element of the chunk.

The IterDataset runs in order, after the parallel part of its parent: the part's
workers read and map, and the consumer's iterator expands each element as it comes.
Grain's needs no `max_fan_out` there (`Unbatch` has none), nor does this one; where a
transform sets one, it is enforced here too, unlike Grain's iterator: Grain's FlatMap
promises the error, the MapDataset and aioloader's DataLoader raise it, and one
transform should act alike in all three. `flat_map` may return any iterable (Grain's
iterator wants a sequence); a `None` hole kept by `allow_nones` passes as one `None`,
as a map passes it.

An element's outputs are taken whole before the first is given (as Grain does, and
aioloader's DataLoader): memory is one element's outputs. They are taken in slices, so
that a `close()` from another thread stops a generator without end that no
`max_fan_out` bounds. The state is the parent's
state before the element being given out and how many of its outputs were given;
resuming reads that element again, expands it again and skips those (Grain's way, so
`flat_map` must be deterministic). Once an element's last output is given, the state
is the parent's after it: no element is expanded again for nothing.

Errors from `flat_map` keep their type and traceback, with a note naming the transform
and the element; a StopIteration from it becomes a RuntimeError, which would otherwise
end the iteration and lose the elements after it. Returning something that is not
iterable is a TypeError naming the transform.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from aioloader._common.calls import stray_stop
from aioloader._common.failures import note
from aioloader._common.validation import require_int
from aioloader._dataset.base import MapDataset
from aioloader._dataset.iter_base import IterDataset, require_iter_dataset
from aioloader._dataset.stages import (
    Plan,
    Settings,
    Stage,
    as_stage,
    check_setup,
    require_count,
    state_fields,
)
from aioloader._operations.transforms import is_async, refuse_class

T = TypeVar("T")

_STEP = 1024  # outputs of one element taken between two looks at a close


class FanOut:
    """One element's outputs: `transform.flat_map(element)` taken whole, checked against
    `limit`, the transform's `max_fan_out` (None for no bound, allowed unless `required`)."""

    def __init__(self, transform: Any, *, required: bool) -> None:
        self._function = _flat_map_of(transform)  # checked first: is it a transform at all?
        self.what = f"{type(transform).__name__}.flat_map"
        self.limit = _required_fan_out(transform) if required else _optional_fan_out(transform)

    def __call__(self, element: Any, closed: Callable[[], bool] = lambda: False) -> list[Any]:
        """The outputs of `element`; cut short (the caller then ends) once `closed()`."""
        try:
            outputs = self._take(self._iterate(self._function(element)), closed)
        except StopIteration as error:  # from a plain function: it would end the iteration
            raise stray_stop(error, self.what) from error
        if self.limit is not None and len(outputs) > self.limit:
            raise ValueError(
                f"{self.what} gave more than max_fan_out={self.limit} elements for one element: "
                "raise the transform's `max_fan_out`, or split the data beforehand."
            )
        return outputs

    def _take(self, iterator: Iterator[Any], closed: Callable[[], bool]) -> list[Any]:
        """Up to one past the bound (enough to know it was passed), in slices: a generator
        without end stops there, or at a close when there is no bound."""
        outputs: list[Any] = []
        while self.limit is None or len(outputs) <= self.limit:
            wanted = _STEP if self.limit is None else min(_STEP, self.limit + 1 - len(outputs))
            piece = list(itertools.islice(iterator, wanted))
            outputs += piece
            if len(piece) < wanted or closed():
                break
        return outputs

    def _iterate(self, produced: Any) -> Iterator[Any]:
        try:
            return iter(produced)
        except TypeError:
            raise TypeError(
                f"{self.what} must return an iterable of elements (a list, a generator), "
                f"got {produced!r:.100} of type {type(produced).__name__}."
            ) from None

    def setup(self) -> str:
        """What a state records of it (see `check_setup`)."""
        return f"transform={self.what}, max_fan_out={self.limit}"


def _flat_map_of(transform: Any) -> Callable[[Any], Any]:
    """`transform.flat_map`, or a TypeError naming `transform`."""
    refuse_class("transform", transform)
    function: Callable[[Any], Any] | None = getattr(transform, "flat_map", None)
    if not callable(function):
        raise TypeError(
            "`transform` must be a FlatMapTransform (aioloader's or Grain's) or have a `flat_map` "
            f"method, got {transform!r:.200}."
        )
    if is_async(function):
        raise TypeError(
            f"`transform.flat_map` ({type(transform).__name__}.flat_map) must not be `async def`: "
            "the Dataset API awaits nothing."
        )
    return function


def _required_fan_out(transform: Any) -> int:
    """The transform's `max_fan_out`, which a FlatMapMapDataset needs: an int of at least 1."""
    value = getattr(transform, "max_fan_out", None)
    if value is None:
        raise TypeError(
            "`transform.max_fan_out` must be set: a FlatMapMapDataset gives each element "
            f"max_fan_out slots, got {type(transform).__name__} without one."
        )
    return require_int("transform.max_fan_out", value, minimum=1)


def _optional_fan_out(transform: Any) -> int | None:
    """The transform's `max_fan_out` if it sets one (checked as above), else None."""
    value = getattr(transform, "max_fan_out", None)
    return None if value is None else require_int("transform.max_fan_out", value, minimum=1)


class FlatMapMapDataset(MapDataset[T]):
    """Output `i % max_fan_out` of element `i // max_fan_out` of `parent` (or `None`)."""

    def __init__(self, parent: MapDataset[Any], transform: Any) -> None:
        if not isinstance(parent, MapDataset):
            raise TypeError(f"`parent` must be a MapDataset, got {type(parent).__name__}.")
        super().__init__(parent)
        self._parent = parent
        self._fan_out = FanOut(transform, required=True)
        assert self._fan_out.limit is not None  # `required`
        self._slots = self._fan_out.limit
        self._label = f"FlatMapMapDataset({self._fan_out.what})"

    def __len__(self) -> int:
        # A parent repeated forever has sys.maxsize elements: the product stays there.
        return min(len(self._parent) * self._slots, sys.maxsize)

    def _get(self, index: int) -> T | None:
        element_index, slot = divmod(index, self._slots)
        element = self._parent[element_index]
        picked: T | None = _pick(self._expand(element, element_index, index), slot)
        return picked

    def _getitems(self, indices: Sequence[int]) -> list[T | None]:
        # Consecutive indices share elements: each element is read and expanded once.
        places = [divmod(index, self._slots) for index in indices]
        wanted = list(dict.fromkeys(element_index for element_index, _ in places))
        elements = self._parent._getitems(wanted)
        first_asked: dict[int, int] = {}
        for index, (element_index, _) in zip(indices, places, strict=True):
            first_asked.setdefault(element_index, index)
        outputs = {e: self._expand(x, e, first_asked[e]) for e, x in zip(wanted, elements, strict=True)}
        return [_pick(outputs[e], slot) for e, slot in places]

    def _expand(self, element: Any, element_index: int, index: int) -> list[Any] | None:
        """The element's outputs (None for a hole), its errors noted with where it was."""
        if element is None:
            return None
        try:
            return self._fan_out(element)
        except Exception as error:
            note(
                error,
                f"aioloader: {self._label} failed on the parent's element at index {element_index} "
                f"(for index {index})",
            )
            raise

    def __repr__(self) -> str:
        return f"FlatMapMapDataset({self._parent!r}, {self._fan_out.setup()})"


def _pick(outputs: list[Any] | None, slot: int) -> Any:
    """Output `slot` of an element, or None (a hole) where it gave fewer or was one."""
    return None if outputs is None or slot >= len(outputs) else outputs[slot]


class FlatMapIterDataset(IterDataset[T]):
    """The outputs of `transform.flat_map` for each element of `parent`, in order."""

    def __init__(self, parent: IterDataset[Any] | MapDataset[Any], transform: Any) -> None:
        parent = require_iter_dataset("parent", parent)
        super().__init__(parent)
        self._parent = parent
        self._fan_out = FanOut(transform, required=False)

    def _plan(self, settings: Settings) -> Plan:
        return FlatMapStage(as_stage(self._parent._plan(settings)), self._fan_out)

    def __repr__(self) -> str:
        return f"FlatMapIterDataset({self._parent!r}, {self._fan_out.setup()})"


class FlatMapStage(Stage[Any]):
    """The flat map running in order (see the module docstring for its state)."""

    def __init__(self, parent: Stage[Any], fan_out: FanOut) -> None:
        super().__init__((parent,))
        self._parent, self._fan_out = parent, fan_out
        self._label = f"FlatMapIterDataset({fan_out.what})"
        self._pending: list[Any] = []  # the current element's outputs not given yet, last first
        self._given = 0  # outputs of the current element given
        self._start: Any = None  # the parent's snapshot before the current element
        self._taken = 0  # the parent's elements taken, for error notes
        self._resumed = False  # then `_taken` counts from the state, not from the start
        self._closed = False  # set by `close` from any thread: a plain flag, read between slices

    def __next__(self) -> Any:
        while not self._pending:
            self._open(self._parent.snapshot())
        self._given += 1
        return self._pending.pop()

    def _open(self, start: Any) -> None:
        """Take the parent's next element (StopIteration at its end) and expand it."""
        element = next(self._parent)
        self._taken += 1
        outputs = [None] if element is None else self._expand(element)
        if self._closed:
            raise StopIteration  # an element cut short by a close is not given out
        # Set together, after `flat_map` succeeded: a failed element leaves no half state.
        self._start, self._pending, self._given = start, outputs[::-1], 0

    def _expand(self, element: Any) -> list[Any]:
        try:
            return self._fan_out(element, self._is_closed)
        except Exception as error:
            where = "after the state it resumed at" if self._resumed else "of its parent"
            note(error, f"aioloader: {self._label} failed on element {self._taken - 1} {where}")
            raise

    def _is_closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True
        super().close()

    def snapshot(self) -> Any:
        if self._pending:
            return self._start, self._given
        return self._parent.snapshot(), 0  # between elements: resume after the last one

    def state_of(self, token: Any) -> dict[str, Any]:
        start, given = token
        return {
            "stage": "flat_map",
            "parent": self._parent.state_of(start),
            "given": given,
            "setup": self._fan_out.setup(),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        parent, given = state_fields(state, "flat_map", ("parent", "given"))
        check_setup(state, self._fan_out.setup())
        given = require_count("given", given)
        self._parent.set_state(parent)
        self._resumed = True
        if given:
            self._resume_within(given)

    def _resume_within(self, given: int) -> None:
        """Expand the element the state stopped in again, and drop the `given` outputs."""
        try:
            self._open(self._parent.snapshot())
        except StopIteration:
            raise ValueError(
                f"`state` says {given} outputs of an element were given, but the parent has no "
                "element there: it is a state of another pipeline."
            ) from None
        produced = len(self._pending)
        if given >= produced:
            raise ValueError(
                f"`state` says {given} outputs of an element were given, but {self._fan_out.what} "
                f"gives it {produced} now: a state of another pipeline, or a flat_map that is not "
                "deterministic."
            )
        del self._pending[produced - given :]
        self._given = given
