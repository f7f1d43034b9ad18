"""A warning when a filter drops nearly every element, as Grain's filters give one.

A filter that keeps almost nothing is most often a bug (a condition turned
round, a field renamed): the loader then reads the whole dataset to deliver a
few elements, and a training step waits. Grain logs a warning when a filter
drops `filter_warn_threshold_ratio` (0.9) of a window of 1000 elements; so does
this, at most once a minute per filter, on the logger `aioloader`. The counts
go by chunk (one lock per filter and chunk, nothing per element), so a window
holds at least `WINDOW` elements.
"""

from __future__ import annotations

import math
import threading
import time

WINDOW = 1000  # elements a ratio is measured on, at least
WARN_RATIO = 0.9  # Grain's default `filter_warn_threshold_ratio`
WARN_EVERY_SECONDS = 60.0

_lock = threading.Lock()
_windows: dict[str, list[int]] = {}  # per filter (its label): [seen, dropped] in the window so far
_warned: dict[str, float] = {}  # per filter: when it was last warned about


def note_filtered(label: str, seen: int, dropped: int) -> None:
    """Count `seen` elements of which filter `label` dropped `dropped`; warn once a window is full
    and the filter dropped `WARN_RATIO` of it (at most every `WARN_EVERY_SECONDS`)."""
    with _lock:
        window = _windows.setdefault(label, [0, 0])
        window[0] += seen
        window[1] += dropped
        if window[0] < WINDOW:
            return
        seen, dropped = window
        window[:] = [0, 0]
        now = time.monotonic()
        if dropped < WARN_RATIO * seen or now - _warned.get(label, -math.inf) < WARN_EVERY_SECONDS:
            return
        _warned[label] = now
    import logging  # here: `import aioloader` leaves logging out (several ms on 3.13t)

    logging.getLogger("aioloader").warning(
        "%s dropped %.2f%% of the last %d elements it saw. Please check the filtering logic; if it is "
        "meant, consider filtering the dataset once before training (statistics() counts what each "
        "operation dropped).",
        label,
        100 * dropped / seen,
        seen,
    )
