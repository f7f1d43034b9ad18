"""`aioloader.config`: Grain's `grain.config`, so that `config.update("py_debug_mode", True)` works.

Grain's options are absl flags; here they are plain values, with Grain's names and
defaults. One acts: `py_debug_mode=True` logs every running loader's statistics at
DEBUG every `DEBUG_SECONDS` (see `log_statistics`), Grain's debug mode, and False stops
it. The others are kept and change nothing: the `tf_*` ones are for Grain's TensorFlow
pipelines, aioloader draws no pipeline graph, relays no signal (its workers are
threads) and leaves tracebacks whole.
"""

from __future__ import annotations

from typing import Any

DEBUG_SECONDS = 60.0  # how often debug mode logs the statistics
_TRACEBACK_MODES = ("auto", "off", "tracebackhide", "quiet_remove_frames", "remove_frames")
_DEFAULTS: dict[str, Any] = {
    "tf_interleaved_shuffle": False,
    "tf_interleaved_shuffle_block_size": 10,
    "tf_interleaved_shuffle_parallel_blocks": 10,
    "tf_lookup_batch_size": 100,
    "tf_lookup_num_parallel_calls": -1,
    "tf_lookup_fast_warmup": False,
    "tf_optimized_sequential_read": False,
    "tf_prefetch_buffer_size": -1,
    "py_debug_mode": False,
    "py_dataset_visualization_output_dir": None,
    "py_relay_sigterm_to_main": False,
    "py_traceback_filtering": "auto",
}


class Config:
    """Grain's configuration: `update(name, value)`, `get_or_default(name)`, `config.name`."""

    def __init__(self) -> None:
        object.__setattr__(self, "_values", dict(_DEFAULTS))

    def __getattr__(self, name: str) -> Any:
        values: dict[str, Any] = object.__getattribute__(self, "_values")
        if name not in values:
            raise ValueError(f"Unrecognized config option: {name}")
        return values[name]

    def get_or_default(self, name: str) -> Any:
        """The option's value (its default until `update` sets it)."""
        return self.__getattr__(name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise ValueError("Please use update().")

    def update(self, name: str, value: Any) -> None:
        """Set option `name` (Grain's name) to `value`, checked against its kind."""
        values: dict[str, Any] = object.__getattribute__(self, "_values")
        if name not in values:
            raise ValueError(f"Unrecognized config option: {name}")
        values[name] = _checked(name, value)
        if name == "py_debug_mode":
            from aioloader._observability.logs import log_statistics

            log_statistics(DEBUG_SECONDS if values[name] else None)


def _checked(name: str, value: Any) -> Any:
    default = _DEFAULTS[name]
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif name == "py_traceback_filtering":
        ok = value in _TRACEBACK_MODES
    else:
        ok = value is None or isinstance(value, str)
    if not ok:
        kinds = {
            "py_traceback_filtering": "one of " + ", ".join(_TRACEBACK_MODES),
            "py_dataset_visualization_output_dir": "a str or None",
        }
        kind = kinds.get(name, type(default).__name__)
        raise ValueError(f"config option {name} must be {kind}, got {value!r}.")
    return value


config = Config()
