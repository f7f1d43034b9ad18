"""Statistics in the log: a DEBUG record with `statistics().summary()` every N seconds.

Off unless asked for, with `aioloader.log_statistics(seconds)` or the
environment (`AIOLOADER_LOG_STATISTICS=SECONDS`), like Grain's debug mode.
The consumer's thread writes the record when it takes its next outputs and
the interval has passed: no thread of its own, nothing between two records.
The logger is `aioloader.statistics`; set it (or a parent) to DEBUG to see them.
"""

from __future__ import annotations

import math
import os
from typing import Any


def _from_environment() -> float | None:
    found = os.environ.get("AIOLOADER_LOG_STATISTICS")
    if not found:
        return None
    try:
        seconds = float(found)
    except ValueError:
        seconds = math.nan
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(
            f"the environment variable AIOLOADER_LOG_STATISTICS must be a number of seconds greater "
            f"than 0 (how often to log the statistics), got {found!r}."
        )
    return seconds


interval: float | None = _from_environment()


def log_statistics(every_seconds: float | None) -> None:
    """Log every running loader's `statistics().summary()` at DEBUG to the logger
    `aioloader.statistics` every `every_seconds` (> 0); None stops it."""
    global interval
    interval = None if every_seconds is None else _positive_seconds(every_seconds)


def debug(summary: str) -> None:
    """Write `summary` at DEBUG to the logger `aioloader.statistics`."""
    import logging  # here: `import aioloader` leaves logging out (several ms on 3.13t)

    logging.getLogger("aioloader.statistics").debug("%s", summary)


def _positive_seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"`every_seconds` must be a number or None, got {value!r} of type {type(value).__name__}."
        )
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"`every_seconds` must be a finite number greater than 0, got {value!r}.")
    return float(value)
