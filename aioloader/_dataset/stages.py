"""The running form of an `IterDataset`: a tree of stages, each an iterator with a state.

`iter(ds)` compiles the dataset graph into *parts* and *stages*:

* a parallel part (`parallel.Part`) is a MapDataset read by index, with the maps,
  filters and batch that follow it, run on aioloader's engine (a `DataLoader` inside);
  operations join a part while it is being compiled (`Part.joined`), and it becomes a
  stage (`Part.build`) when something that must run in order comes after it;
* a stage runs in order in the consumer's iterator: a mix, a window shuffle, an
  interleave, a packer, and the maps, filters and batches that follow one of them.

A stage gives its elements with `next()`. Where it stands is taken in two steps:
`snapshot()` is a cheap immutable token (positions, no JSON), taken as often as needed
(before each element a packer reads, with each output a background thread hands over);
`state_of(token)` makes the small JSON-serialisable dict from it, only when a state is
asked for, from any thread (it reads only the token and what never changes).
`get_state()` is both at once. A *fresh* stage of the same pipeline given a state with
`set_state()` continues exactly after the last element given then. One thread drives a
stage at a time; `close()` may come from another thread, and stops every engine below
it (its `next()` then ends).
"""

from __future__ import annotations

import abc
import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from aioloader._dataset.options import DatasetOptions
from aioloader._device.device_put import DevicePut
from aioloader._observability.statistics import LoaderStatistics

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


@dataclass(frozen=True)
class Settings:
    """How the parallel parts below a `prefetch` run (worker threads and executor), and the
    pipeline's `DatasetOptions` (see `with_options`)."""

    worker_count: int = 0
    executor: str = "thread"
    options: DatasetOptions = DatasetOptions()  # noqa: RUF009 - frozen: one shared default is safe


class Stage(abc.ABC, Generic[T_co]):
    """One running node: an iterator over its elements, with a resumable state."""

    def __init__(self, parents: Sequence[Stage[Any]] = ()) -> None:
        self.parents = tuple(parents)

    def __iter__(self) -> Stage[T_co]:
        return self

    @abc.abstractmethod
    def __next__(self) -> T_co:
        """The next element; StopIteration at the end; the user's errors as they are."""

    @abc.abstractmethod
    def snapshot(self) -> Any:
        """Where the stage stands now, after the last element it gave: an immutable token."""

    @abc.abstractmethod
    def state_of(self, token: Any) -> dict[str, Any]:
        """The state for a token `snapshot` gave (any time later, from any thread)."""

    def get_state(self) -> dict[str, Any]:
        """Where the stage stands, after the last element it gave: small JSON."""
        return self.state_of(self.snapshot())

    @abc.abstractmethod
    def set_state(self, state: dict[str, Any]) -> None:
        """Continue after the element `state` was taken after (on a fresh stage only).

        A state of another kind of stage is a ValueError naming what was expected.
        """

    def close(self) -> None:
        """Stop every engine below (from any thread); idempotent."""
        for parent in self.parents:
            parent.close()

    def statistics(self) -> list[LoaderStatistics]:
        """The figures of the parallel parts below, in graph order (any thread)."""
        return [figures for parent in self.parents for figures in parent.statistics()]

    def start_prefetch(self) -> None:
        """Start the parallel parts below (see `DatasetIterator.start_prefetch`)."""
        for parent in self.parents:
            parent.start_prefetch()


class ForeignStage(Stage[Any]):
    """A user's iterator (from a Grain-style `IterDataset.__iter__`), run in order: its own
    `get_state()` / `set_state()` make the state."""

    def __init__(self, iterator: Any) -> None:
        super().__init__()
        for method in ("__next__", "get_state", "set_state"):
            if not callable(getattr(iterator, method, None)):
                raise TypeError(
                    f"an IterDataset's `__iter__` must return an iterator with {method}, "
                    f"got {type(iterator).__name__}."
                )
        self._iterator = iterator

    def __next__(self) -> Any:
        return next(self._iterator)

    def snapshot(self) -> Any:
        # A copy: a token must not change after it is taken, and a user's iterator may
        # answer its live dict (a background thread reading ahead would move it on).
        return copy.deepcopy(self._iterator.get_state())

    def state_of(self, token: Any) -> dict[str, Any]:
        return {"stage": "iterator", "state": token}

    def set_state(self, state: dict[str, Any]) -> None:
        (inner,) = state_fields(state, "iterator", ("state",))
        self._iterator.set_state(inner)

    def close(self) -> None:
        close = getattr(self._iterator, "close", None)
        if callable(close):
            close()


class Part(abc.ABC):
    """A parallel part being compiled: operations may still join it."""

    @abc.abstractmethod
    def joined(self, operation: Any) -> Part | None:
        """This part with `operation` (a `Prepared` or a `Batch`) at its end, or None if
        it cannot run there (then it runs in order, after the part)."""

    @abc.abstractmethod
    def build(self, device_put: DevicePut | None = None) -> Stage[Any]:
        """The running part, as a stage (its outputs put on the device by `device_put`)."""

    def counts_elements(self) -> bool:
        """True when no element is dropped before the part's end, so that the record index
        of each element there (over the batch size, after a batch) is its count from the
        start: the index `map_with_index` must give, as Grain counts."""
        return False


Plan = Stage[Any] | Part  # what compiling an IterDataset node gives


def as_stage(plan: Plan) -> Stage[Any]:
    """`plan` as a stage: a part is built; a stage is itself."""
    return plan if isinstance(plan, Stage) else plan.build()


def state_fields(state: Any, stage: str, fields: Sequence[str]) -> list[Any]:
    """The `fields` of `state`, checked to be the state of a `stage` stage."""
    if not isinstance(state, dict) or state.get("stage") != stage or any(f not in state for f in fields):
        raise ValueError(
            f"`state` must be the state of a {stage} stage (with {', '.join(fields)}), got {state!r:.300}."
        )
    return [state[field] for field in fields]


def check_setup(state: dict[str, Any], setup: str) -> None:
    """A stage's state records what the stage was made with (`setup`: its arguments, as
    text), so that it resumes only a stage made the same way: else a ValueError naming
    both. A state saved before stages wrote theirs is taken as it is."""
    theirs = state.get("setup", setup)
    if theirs != setup:
        # Long setups (a packer's features) differ far in: show both from a little before.
        text = str(theirs)
        pairs = enumerate(zip(text, setup, strict=False))
        common = next((i for i, (a, b) in pairs if a != b), min(len(text), len(setup)))
        start = max(0, common - 60)
        cut = "..." if start else ""
        raise ValueError(
            f"`state` was made by a stage with {cut}{text[start:]!r:.300}, "
            f"but this one has {cut}{setup[start:]!r:.300}."
        )


def require_count(name: str, value: Any) -> int:
    """An int of at least 0 read from a state, or a ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"`state` has {name}={value!r}; it must be an int >= 0.")
    return value
