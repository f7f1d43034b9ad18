"""`DatasetOptions` and `ExecutionTrackingMode`: Grain's options of a Dataset pipeline.

`WithOptionsIterDataset(ds, options)` (see `with_options`) sets them for the whole
pipeline, before and after it. Of Grain's four options, two act here: a filter that
drops at least `filter_warn_threshold_ratio` of a window of 1000 elements logs a
warning, and at least `filter_raise_threshold_ratio` raises a ValueError (see
`filter_checks`). `execution_tracking_mode` changes nothing (aioloader's statistics are
always counted: `statistics()`), nor does `min_shm_size` (threads share memory: nothing
is copied between processes).

Options set at several places merge as Grain merges them: a field the user set wins
over one left at its default, and of two set fields the later (outer) one wins.
"""

from __future__ import annotations

import dataclasses
import enum
import numbers
from typing import Any

from aioloader._common.validation import require_int


class ExecutionTrackingMode(enum.Enum):
    """Grain's modes of collecting execution statistics (aioloader always counts its own)."""

    DISABLED = 1
    STAGE_TIMING = 2


class _Unset(enum.Enum):
    UNSET = 0  # an option the caller did not give


_UNSET = _Unset.UNSET
_DEFAULTS: dict[str, Any] = {
    "filter_warn_threshold_ratio": 0.9,
    "filter_raise_threshold_ratio": None,
    "execution_tracking_mode": ExecutionTrackingMode.DISABLED,
    "min_shm_size": 0,
}


@dataclasses.dataclass(frozen=True, init=False)
class DatasetOptions:
    """Options of a Dataset pipeline, Grain's fields with Grain's defaults.

    `filter_warn_threshold_ratio` (0.9) and `filter_raise_threshold_ratio` (None): a
    filter that drops at least this share of a window of 1000 elements it sees logs a
    warning, or raises a ValueError; None (or 0, as in Grain) turns the check off.
    `execution_tracking_mode` and `min_shm_size` are taken and change nothing here.
    `user_set_fields` names the fields given: they win when options merge.
    """

    filter_warn_threshold_ratio: float | None
    filter_raise_threshold_ratio: float | None
    execution_tracking_mode: ExecutionTrackingMode
    min_shm_size: int
    user_set_fields: frozenset[str] = dataclasses.field(init=False, repr=False)

    def __init__(
        self,
        *,
        filter_warn_threshold_ratio: float | _Unset | None = _UNSET,
        filter_raise_threshold_ratio: float | _Unset | None = _UNSET,
        execution_tracking_mode: ExecutionTrackingMode | _Unset = _UNSET,
        min_shm_size: int | _Unset = _UNSET,
    ) -> None:
        given = {
            "filter_warn_threshold_ratio": filter_warn_threshold_ratio,
            "filter_raise_threshold_ratio": filter_raise_threshold_ratio,
            "execution_tracking_mode": execution_tracking_mode,
            "min_shm_size": min_shm_size,
        }
        for name, value in given.items():
            checked = _DEFAULTS[name] if value is _UNSET else _CHECKS[name](name, value)
            object.__setattr__(self, name, checked)
        user_set = frozenset(name for name, value in given.items() if value is not _UNSET)
        object.__setattr__(self, "user_set_fields", user_set)

    def merge(self, other: DatasetOptions | None) -> DatasetOptions:
        """These options over `other`'s: a field set here wins, then one set in `other`,
        then the default (Grain's `merge`)."""
        if other is None:
            return self
        if not isinstance(other, DatasetOptions):
            raise TypeError(f"`other` must be a DatasetOptions or None, got {other!r}.")
        fields: dict[str, Any] = {}
        for name in _DEFAULTS:
            if name in self.user_set_fields:
                fields[name] = getattr(self, name)
            elif name in other.user_set_fields:
                fields[name] = getattr(other, name)
        return DatasetOptions(**fields)


def _ratio(name: str, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # NumPy's numbers are Real
        raise TypeError(f"`{name}` must be None or a number, got {value!r} of type {type(value).__name__}.")
    ratio = float(value)
    if not 0 <= ratio <= 1:  # nan too
        raise ValueError(f"`{name}` must be None or a number from 0 to 1, got {value!r}.")
    return value if _numpy_float(value) else ratio


def _numpy_float(value: Any) -> bool:
    """A NumPy float scalar, kept as given: Grain compares `dropped / seen >= ratio` with the
    user's ratio, which NumPy 2 makes a float32 comparison for a float32 ratio (300/1000
    reaches np.float32(0.3), but not its float(), 0.3000000119...)."""
    kind = type(value)
    return kind.__module__ == "numpy" and not isinstance(value, numbers.Integral)


def _mode(name: str, value: Any) -> ExecutionTrackingMode:
    if isinstance(value, ExecutionTrackingMode):
        return value
    # Grain's own enum (a shared library may build the options with it): by name.
    if type(value).__name__ == "ExecutionTrackingMode" and getattr(value, "name", None) in _MODES:
        return ExecutionTrackingMode[value.name]
    raise TypeError(f"`{name}` must be an ExecutionTrackingMode, got {value!r}.")


def _size(name: str, value: Any) -> int:
    return require_int(name, value, minimum=0)


_MODES = frozenset(mode.name for mode in ExecutionTrackingMode)
_CHECKS = {
    "filter_warn_threshold_ratio": _ratio,
    "filter_raise_threshold_ratio": _ratio,
    "execution_tracking_mode": _mode,
    "min_shm_size": _size,
}
