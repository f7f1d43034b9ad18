"""A warning when a filter drops nearly every element, as Grain's filters give one.

A filter that keeps almost nothing is most often a bug (a condition turned
round, a field renamed): the loader then reads the whole dataset to deliver a
few elements, and a training step waits. Grain logs a warning when a filter
drops `filter_warn_threshold_ratio` (0.9) of a window of 1000 elements; so does
this, at most once a minute per filter, on the logger `aioloader`. The counts
go by chunk (nothing per element), so a window holds at least `WINDOW`
elements; each program copy (the consumer's, each worker's) keeps its own.
"""

from __future__ import annotations

import math
import time

WINDOW = 1000  # elements a ratio is measured on, at least
WARN_RATIO = 0.9  # Grain's default `filter_warn_threshold_ratio`
WARN_EVERY_SECONDS = 60.0


class FilterWindows:
    """The windows of one program copy's filters, by filter operation. Used by the thread
    that runs the copy (one at a time): no lock."""

    def __init__(self) -> None:
        self._windows: dict[int, list[float]] = {}  # id(op): [seen, dropped, when last warned]

    def note(self, op: object, label: str, seen: int, dropped: int) -> None:
        """Count `seen` elements of which filter `op` (named `label`) dropped `dropped`; warn
        once a window is full and it dropped `WARN_RATIO` of it."""
        window = self._windows.get(id(op))  # the copy holds its operations: ids stay theirs
        if window is None:
            window = self._windows[id(op)] = [0, 0, -math.inf]
        window[0] += seen
        window[1] += dropped
        if window[0] < WINDOW:
            return
        seen, dropped = int(window[0]), int(window[1])
        window[0] = window[1] = 0
        now = time.monotonic()
        if dropped < WARN_RATIO * seen or now - window[2] < WARN_EVERY_SECONDS:
            return
        window[2] = now
        import logging  # here: `import aioloader` leaves logging out (several ms on 3.13t)

        logging.getLogger("aioloader").warning(  # Grain's words, which its users' tests match
            "Transformation %s skipped %.2f %% of the last seen %d elements. Please check the "
            "filtering logic. If this is intended, consider pre-filtering the input dataset before "
            "training (statistics() counts what each operation dropped).",
            label,
            100 * dropped / seen,
            seen,
        )
