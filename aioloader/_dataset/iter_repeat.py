"""`RepeatIterDataset(parent, num_epochs=None)`: the parent's elements, epoch after epoch
(Grain's `grain.experimental.RepeatIterDataset`).

Each epoch reads the parent anew from its start: the finished run of the parent is
closed and a fresh one is built from the same dataset, with the same worker settings.
As in Grain, every epoch is the same: a shuffle or a `random_map` upstream draws in
the second epoch what it drew in the first (Grain resets the parent to its starting
state; a fresh run starts there too). `num_epochs=None` repeats without end. The
repeat runs in the consumer's iterator; the parent may be a MapDataset, read as
`to_iter_dataset()` as Grain reads it; `parents` keeps it as given, so that seeds
derived by `seed()` upstream equal Grain's.

The state is the epoch and the state of the parent's current run. As in Grain, a state
resumes in a repeat with another `num_epochs` too: the epochs done count against the
new one (the rest of the pipeline must be the same, as always). A `close()` from
another thread ends the iteration: no epoch starts after it.

Deliberate differences from Grain:

* an epoch that gives no element ends the repeat: Grain repeats an empty parent
  without end (`num_epochs=None`) and never returns; a finite repeat of it is empty
  in both;
* `num_epochs` must be an int of at least 1 or None (Grain also takes a float, and
  `True` as 1), else an error naming `num_epochs`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from aioloader._common.failures import note
from aioloader._common.validation import require_int
from aioloader._dataset.base import MapDataset
from aioloader._dataset.iter_base import IterDataset, require_iter_dataset
from aioloader._dataset.stages import Plan, Settings, Stage, as_stage, require_count, state_fields

T = TypeVar("T")


class RepeatIterDataset(IterDataset[T]):
    """The elements of `parent`, `num_epochs` times over (without end for None)."""

    def __init__(self, parent: IterDataset[T] | MapDataset[T], num_epochs: int | None = None) -> None:
        super().__init__(parent)
        self._parent: IterDataset[T] = require_iter_dataset("parent", parent)
        self._num_epochs = None if num_epochs is None else require_int("num_epochs", num_epochs, minimum=1)

    def _plan(self, settings: Settings) -> Plan:
        def fresh_run() -> Stage[Any]:
            return as_stage(self._parent._plan(settings))

        return RepeatStage(fresh_run, self._num_epochs)

    def __repr__(self) -> str:
        return f"RepeatIterDataset({self._parent!r}, num_epochs={self._num_epochs})"


class RepeatStage(Stage[Any]):
    """The repeat running: a fresh run of the parent for each epoch (see the module
    docstring for its state and its end)."""

    def __init__(self, fresh_run: Callable[[], Stage[Any]], num_epochs: int | None) -> None:
        first = fresh_run()
        super().__init__((first,))
        self._fresh_run, self._num_epochs = fresh_run, num_epochs
        self._parent = first  # the current epoch's run; `parents` holds it too
        self._epoch = 0
        self._gave = False  # whether this epoch gave an element (else the parent is empty)
        # `close` may come from another thread while an epoch starts: the swap of runs and
        # the flag are read and written together, so that no fresh run is left open.
        self._lock = threading.Lock()
        self._closed = False

    def __next__(self) -> Any:
        while not self._closed and not self._done():
            try:
                element = next(self._parent)
            except StopIteration:
                self._next_epoch()
                continue
            except BaseException as error:
                note(error, f"aioloader: raised by the parent of RepeatIterDataset in epoch {self._epoch}")
                raise
            self._gave = True
            return element
        raise StopIteration

    def _done(self) -> bool:
        return self._num_epochs is not None and self._epoch >= self._num_epochs

    def _next_epoch(self) -> None:
        """The current run ended: start the next epoch's, unless the repeat ends here."""
        self._epoch += 1
        if not self._gave or self._done() or self._closed:
            # An empty epoch would be followed by empty epochs: Grain spins on them forever.
            raise StopIteration
        fresh = self._fresh_run()
        with self._lock:
            finished, self._parent = self._parent, fresh
            self.parents = (fresh,)
            closed = self._closed
        finished.close()
        if closed:  # the close came while the fresh run was built: it closed the finished one
            fresh.close()
            raise StopIteration
        self._gave = False

    def close(self) -> None:
        with self._lock:
            self._closed = True
            current = self._parent
        current.close()

    def snapshot(self) -> tuple[int, Stage[Any], Any]:
        # The run goes with its token: after an epoch starts, a token of the last one may
        # still be asked for its state (from another thread), which that run's `state_of` reads.
        return self._epoch, self._parent, self._parent.snapshot()

    def state_of(self, token: tuple[int, Stage[Any], Any]) -> dict[str, Any]:
        epoch, run, parent = token
        return {"stage": "repeat", "epoch": epoch, "parent": run.state_of(parent)}

    def set_state(self, state: dict[str, Any]) -> None:
        epoch, parent = state_fields(state, "repeat", ("epoch", "parent"))
        self._epoch = require_count("epoch", epoch)
        self._parent.set_state(parent)
        # Resumed within an epoch that gave elements before the state: its end is no sign
        # of an empty parent (a state from before any element costs one more empty epoch).
        self._gave = True
