"""`InterleaveIterDataset(datasets, cycle_length=)`: several datasets read in turn, in order.

At most `cycle_length` datasets are open at once, each in a slot; the slots take turns,
one element each. A slot whose dataset ends opens the next dataset at its next turn,
and the interleave ends when every dataset has ended: Grain's order, element for element.

Each dataset (an IterDataset, or a MapDataset, read as `to_iter_dataset()`) is compiled
and opened when its turn comes, with its own parallel parts on the engine (as many
workers each as a `prefetch` above says). Grain's `num_make_iter_threads`,
`make_iter_buffer_size` and `iter_buffer_size` are checked and accepted; here opening a
dataset costs no thread, and its engine reads ahead by its own `ReadOptions`.

The state names the datasets opened so far, the slot whose turn is next, and each
slot's dataset and state (or that it ended): small JSON for any number of datasets.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, TypeVar

from aioloader._common.validation import require_int
from aioloader._dataset.base import MapDataset
from aioloader._dataset.iter_base import IterDataset, require_iter_dataset
from aioloader._dataset.stages import Plan, Settings, Stage, as_stage, require_count, state_fields
from aioloader._observability.statistics import LoaderStatistics

T = TypeVar("T")


class InterleaveIterDataset(IterDataset[T]):
    """The elements of `datasets`, `cycle_length` of them read in turn (Grain's interleave)."""

    def __init__(
        self,
        datasets: Sequence[IterDataset[T] | MapDataset[T]] | MapDataset[Any],
        *,
        cycle_length: int,
        num_make_iter_threads: int = 1,
        make_iter_buffer_size: int = 1,
        iter_buffer_size: int = 1,
    ) -> None:
        super().__init__()  # the datasets are not parents: a MapDataset of them is evaluated lazily
        if isinstance(datasets, (str, bytes)) or not hasattr(datasets, "__getitem__"):
            raise TypeError(
                f"`datasets` must be a sequence or a MapDataset of datasets, got {datasets!r:.200}."
            )
        self._datasets = datasets
        self._cycle = require_int("cycle_length", cycle_length, minimum=1)
        require_int("num_make_iter_threads", num_make_iter_threads, minimum=1)
        require_int("make_iter_buffer_size", make_iter_buffer_size, minimum=1)
        require_int("iter_buffer_size", iter_buffer_size, minimum=1)

    def _plan(self, settings: Settings) -> Plan:
        return InterleaveStage(self._datasets, self._cycle, settings)

    def __repr__(self) -> str:
        return f"InterleaveIterDataset([{len(self._datasets)} datasets], cycle_length={self._cycle})"


class InterleaveStage(Stage[Any]):
    """The interleave running: the open datasets' stages, one per slot."""

    def __init__(self, datasets: Any, cycle_length: int, settings: Settings) -> None:
        super().__init__()
        self._datasets, self._settings = datasets, settings
        self._count = len(datasets)
        size = min(cycle_length, self._count)
        self._slots: list[Stage[Any] | None] = [None] * size
        self._which = list(range(size))  # the dataset each slot holds (or held last)
        self._ended: list[dict[str, Any] | None] = [None] * size  # an ended slot's last state
        self._turn = 0  # the slot whose turn is next
        self._opened = 0  # datasets opened so far
        self._lock = threading.Lock()  # `close` may come from another thread while one opens
        self._closed = False

    def _open(self, slot: int, which: int, state: dict[str, Any] | None = None) -> None:
        """Compile dataset `which` into `slot`, resumed from `state` if given."""
        dataset = require_iter_dataset(f"datasets[{which}]", self._datasets[which])
        stage = as_stage(dataset._plan(self._settings))
        if state is not None:
            stage.set_state(state)
        with self._lock:  # put in its slot before `close` may look, or not at all
            if self._closed:
                stage.close()
                raise StopIteration
            self._slots[slot] = stage
        self._which[slot], self._ended[slot] = which, None

    def __next__(self) -> Any:
        while True:
            slot = self._turn
            stage = self._slots[slot]
            if stage is not None:
                try:
                    element = next(stage)
                except StopIteration:
                    self._ended[slot] = stage.get_state()
                    stage.close()
                    self._slots[slot] = None
                    self._turn = (slot + 1) % len(self._slots)
                    continue
                self._turn = (slot + 1) % len(self._slots)
                return element
            if self._opened < self._count:
                self._open(slot, self._opened)
                self._opened += 1
            elif not any(self._slots):
                raise StopIteration
            else:
                self._turn = (slot + 1) % len(self._slots)

    def snapshot(self) -> Any:
        slots: list[tuple[int, Stage[Any] | None, Any] | None] = []
        for slot, stage in enumerate(self._slots):
            if stage is not None:
                slots.append((self._which[slot], stage, stage.snapshot()))
            elif self._ended[slot] is not None:
                slots.append((self._which[slot], None, self._ended[slot]))
            else:
                slots.append(None)  # not opened yet
        return self._turn, self._opened, tuple(slots)

    def state_of(self, token: Any) -> dict[str, Any]:
        turn, opened, slots = token
        states: list[list[Any] | None] = [None if slot is None else _slot_state(*slot) for slot in slots]
        return {"stage": "interleave", "turn": turn, "opened": opened, "slots": states}

    def set_state(self, state: dict[str, Any]) -> None:
        turn, opened, slots = state_fields(state, "interleave", ("turn", "opened", "slots"))
        if not isinstance(slots, list) or len(slots) != len(self._slots):
            raise ValueError(
                f"`state` has {len(slots) if isinstance(slots, list) else slots!r} interleave slots, "
                f"but this interleave has {len(self._slots)}: its cycle_length or its number of "
                "datasets differs."
            )
        self._turn, self._opened = require_count("turn", turn), require_count("opened", opened)
        if self._turn >= len(self._slots) or self._opened > self._count:
            raise ValueError(f"`state` (turn={turn}, opened={opened}) does not fit this interleave.")
        for slot, saved in enumerate(slots):
            if saved is not None:
                self._restore(slot, saved)

    def _restore(self, slot: int, saved: Any) -> None:
        if not (isinstance(saved, list) and len(saved) == 3 and isinstance(saved[0], int)):
            raise ValueError(f"`state` has slot {slot} as {saved!r:.200}; expected [dataset, state, ended].")
        which, inner, ended = saved
        if not 0 <= which < self._opened:
            raise ValueError(f"`state` has slot {slot} holding dataset {which}, not one opened yet.")
        if ended:
            self._which[slot], self._ended[slot] = which, inner
        else:
            self._open(slot, which, inner)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            open_stages = [stage for stage in self._slots if stage is not None]
        for stage in open_stages:
            stage.close()

    def statistics(self) -> list[LoaderStatistics]:
        """The figures of the parts of the datasets open in the slots now."""
        with self._lock:
            open_stages = [stage for stage in self._slots if stage is not None]
        return [figures for stage in open_stages for figures in stage.statistics()]


def _slot_state(which: int, stage: Stage[Any] | None, token: Any) -> list[Any]:
    """A slot's state: its dataset, and its stage's state or (ended) its last state."""
    return [which, token, True] if stage is None else [which, stage.state_of(token), False]
