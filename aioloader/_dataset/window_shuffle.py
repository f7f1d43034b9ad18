"""`WindowShuffleIterDataset(parent, window_size=, seed=)`: a shuffle within windows, in order.

The parent's elements are taken `window_size` at a time; window `w` is permuted with
Grain's `index_shuffle` keyed by `seed + w` and given out from its end, exactly as
Grain's `WindowShuffleIterDataset` does, so the order equals Grain's. Memory is one
window of elements.

The state is the parent's state where the current window began, the window's number
and how many of its elements were given: resuming reads that window again, shuffles it
again and skips what was given (Grain's state, and Grain's way).
"""

from __future__ import annotations

from typing import Any, TypeVar

from aioloader._common.validation import require_int
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

T = TypeVar("T")

_SEEDS = 2**32


class WindowShuffleIterDataset(IterDataset[T]):
    """The parent's elements, shuffled within consecutive windows of `window_size`."""

    def __init__(self, parent: IterDataset[T], *, window_size: int, seed: int) -> None:
        parent = require_iter_dataset("parent", parent)
        super().__init__(parent)
        self._parent = parent
        self._window_size = require_int("window_size", window_size, minimum=1)
        self._seed = require_int("seed", seed, minimum=0)
        if self._seed >= _SEEDS:
            raise ValueError(f"`seed` must be less than 2**32, got {seed}.")

    def _plan(self, settings: Settings) -> Plan:
        return WindowShuffleStage(as_stage(self._parent._plan(settings)), self._window_size, self._seed)

    def __repr__(self) -> str:
        return (
            f"WindowShuffleIterDataset({self._parent!r}, window_size={self._window_size}, seed={self._seed})"
        )


def shuffle_window(window: list[Any], seed: int) -> list[Any]:
    """Grain's order of one window: position `p` holds `window[index_shuffle(p)]`."""
    # Imported here: `import aioloader` must not touch NumPy (subinterpreters import it
    # with a stand-in for NumPy), and index_shuffle does at import.
    from aioloader._sampling.index_shuffle import index_shuffle_array

    if not window:
        return []
    order = index_shuffle_array(range(len(window)), len(window) - 1, seed % _SEEDS).tolist()
    return [window[i] for i in order]


class WindowShuffleStage(Stage[Any]):
    """The window shuffle running (see the module docstring)."""

    def __init__(self, parent: Stage[Any], window_size: int, seed: int) -> None:
        super().__init__((parent,))
        self._parent, self._size, self._seed = parent, window_size, seed
        self._window: list[Any] = []
        self._window_index = 0
        self._given = 0  # elements of the current window given out
        self._window_start: Any = None  # the parent's snapshot where it began
        self._parent_ended = False

    def _fill(self) -> None:
        """Read the next window from the parent, and shuffle it."""
        window: list[Any] = []
        try:
            while len(window) < self._size:
                window.append(next(self._parent))
        except StopIteration:
            self._parent_ended = True
        self._window = shuffle_window(window, self._seed + self._window_index)

    def __next__(self) -> Any:
        if not self._window:
            if self._parent_ended:
                raise StopIteration
            self._window_start = self._parent.snapshot()
            self._fill()
            self._given = 0
            if not self._window:
                raise StopIteration
        self._given += 1
        element = self._window.pop()
        if not self._window:
            self._window_index += 1
        return element

    def snapshot(self) -> Any:
        start = self._parent.snapshot() if self._window_start is None else self._window_start
        return start, self._window_index, self._given

    def state_of(self, token: Any) -> dict[str, Any]:
        start, window, given = token
        parent = self._parent.state_of(start)
        setup = self._setup()
        return {"stage": "window_shuffle", "parent": parent, "window": window, "given": given, "setup": setup}

    def _setup(self) -> str:
        return f"window_size={self._size}, seed={self._seed}"

    def set_state(self, state: dict[str, Any]) -> None:
        start, window, given = state_fields(state, "window_shuffle", ("parent", "window", "given"))
        check_setup(state, self._setup())
        self._parent.set_state(start)
        self._window_start = self._parent.snapshot()
        self._window_index, self._given = require_count("window", window), require_count("given", given)
        self._fill()
        del self._window[len(self._window) - min(self._given, len(self._window)) :]
