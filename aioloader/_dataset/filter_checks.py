"""Grain's filter checks: a warning, or a ValueError, when a filter drops nearly everything.

Each filter counts what it sees in windows of `WINDOW` elements, in order; when a window
is full and the filter dropped at least `filter_warn_threshold_ratio` of it, it logs a
warning (at most once a minute), and at least `filter_raise_threshold_ratio`, it raises
a ValueError, at the element that fills the window, as Grain's `FilterThresholdChecker`
does. A filter that runs in order counts its own (`FilterThresholds`, in `FilterStage`).

A filter in a parallel part runs on the workers, in chunks: its windows would end where
the chunks end, which timing chooses. So where the options ask for a check (a raise
ratio, or a warn ratio of the user's), the part's filters mark what they drop instead of
dropping it (`Mark`: a `Dropped` naming the filter, which the maps after it pass on
untouched), and `CheckedPartStage`, in order after the part, counts every filter's
windows from the marks and drops them: the same error at the same element, for any
worker count. A batch then waits for the marks to be gone: it runs in order after the
part. Elsewhere the engine's own warning at 0.9 (`FilterWindows`) stands for Grain's.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from aioloader._dataset.options import DatasetOptions
from aioloader._dataset.stages import Stage
from aioloader._operations.apply import filter_verdict
from aioloader._operations.transforms import Kind

WINDOW = 1000  # elements a ratio is measured on (Grain's `_CHECK_FILTERED_INTERVAL`)
WARN_EVERY_SECONDS = 60.0


def checks_filters(options: DatasetOptions) -> bool:
    """True when `options` ask for checks the engine's filters cannot make in chunks: a
    raise ratio, or a warn ratio the user set (its own ratio, or None for no warning)."""
    return bool(options.filter_raise_threshold_ratio) or (
        "filter_warn_threshold_ratio" in options.user_set_fields
    )


class FilterThresholds:
    """One filter's windows: `check(passed)` for each element it sees, in order."""

    def __init__(self, label: str, options: DatasetOptions) -> None:
        self._label = label  # Grain's name of the filter, for the messages
        # A ratio of None or 0 checks nothing, as in Grain.
        self._warn = options.filter_warn_threshold_ratio or math.inf
        self._raise = options.filter_raise_threshold_ratio or math.inf
        self._passed = self._dropped = 0
        self._warned = -math.inf

    def check(self, passed: bool) -> None:
        """Count one element; raise ValueError if it fills a window dropped past the bound."""
        if passed:
            self._passed += 1
        else:
            self._dropped += 1
        seen = self._passed + self._dropped
        if seen < WINDOW:
            return
        ratio = self._dropped / seen
        self._passed = self._dropped = 0
        if ratio >= self._raise:
            raise ValueError(
                f"{self._message(ratio, seen)} To turn this check off, set `filter_raise_threshold_ratio` "
                "to None in the DatasetOptions given to WithOptionsIterDataset."
            )
        now = time.monotonic()
        if ratio >= self._warn and now - self._warned >= WARN_EVERY_SECONDS:
            self._warned = now
            logging.getLogger("aioloader").warning(
                "%s To turn this warning off, set `filter_warn_threshold_ratio` to None in the "
                "DatasetOptions given to WithOptionsIterDataset.",
                self._message(ratio, seen),
            )

    def _message(self, ratio: float, seen: int) -> str:
        return (
            f"Transformation {self._label} skipped {ratio * 100:.2f} % of the last seen {seen} elements. "
            "Please check the filtering logic; if it is meant, consider filtering the dataset once "
            "before training."
        )


class Dropped(NamedTuple):
    """What a marking filter gives for an element it drops: which filter (its number in
    the part), so that the ones after it do not count the element."""

    filter: int


class Mark:
    """A part's filter `number` as a map: the element if `predicate` keeps it, else a
    `Dropped`; a `Dropped` from a filter before passes on (module level: it pickles)."""

    stands_for = Kind.FILTER  # what a state describes it as

    def __init__(self, predicate: Callable[[Any], Any], number: int, what: str) -> None:
        self.predicate, self.number, self.what = predicate, number, what

    def __call__(self, element: Any) -> Any:
        if isinstance(element, Dropped):
            return element
        return element if filter_verdict(self.predicate(element), self.what) else Dropped(self.number)


class PassDropped:
    """`function(x, ...)`, but a `Dropped` passes untouched (a map after a marking filter)."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function

    def __call__(self, element: Any, *rest: Any) -> Any:
        return element if isinstance(element, Dropped) else self.function(element, *rest)


class CheckedPartStage(Stage[Any]):
    """A parallel part whose filters mark: the kept elements, each filter's windows
    counted in order from the marks. The state is the part's."""

    def __init__(self, part: Stage[Any], labels: Sequence[str], options: DatasetOptions) -> None:
        super().__init__((part,))
        self._part = part
        self._checks = [FilterThresholds(label, options) for label in labels]

    def __next__(self) -> Any:
        while True:
            element = next(self._part)
            dropped_by = element.filter if isinstance(element, Dropped) else len(self._checks)
            # Filter i saw the element unless one before it dropped it; it kept it unless it
            # is the one that dropped it.
            for number, check in enumerate(self._checks[: dropped_by + 1]):
                check.check(number != dropped_by)
            if not isinstance(element, Dropped):
                return element

    def snapshot(self) -> Any:
        return self._part.snapshot()

    def state_of(self, token: Any) -> dict[str, Any]:
        return self._part.state_of(token)

    def set_state(self, state: dict[str, Any]) -> None:
        self._part.set_state(state)
