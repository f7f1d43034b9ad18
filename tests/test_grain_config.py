"""`aioloader.config`: Grain's `grain.config`, names, defaults and errors; debug mode logs statistics."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

import aioloader as al
from aioloader._observability import logs
from aioloader._observability.config import _DEFAULTS, DEBUG_SECONDS, Config


@pytest.fixture
def config() -> Iterator[Config]:
    """A fresh configuration, and the statistics log as it was after the test."""
    interval = logs.interval
    yield Config()
    logs.interval = interval


def test_every_option_has_grains_name_and_default(grain: ModuleType) -> None:
    from absl import flags
    from grain._src.core import config as grains

    theirs = {
        flag.name.removeprefix("grain_"): flags.FLAGS[flag.name].default for flag in grains._GRAIN_FLAGS
    }
    assert theirs == _DEFAULTS
    for name, default in theirs.items():
        assert al.config.get_or_default(name) == default == grain.config.get_or_default(name)


def test_update_sets_and_debug_mode_logs_the_statistics(config: Config) -> None:
    config.update("tf_lookup_batch_size", 7)
    config.update("py_traceback_filtering", "off")
    assert (config.tf_lookup_batch_size, config.get_or_default("py_traceback_filtering")) == (7, "off")
    config.update("py_debug_mode", True)
    assert (config.py_debug_mode, logs.interval) == (True, DEBUG_SECONDS)
    config.update("py_debug_mode", False)
    assert logs.interval is None


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda c: c.update("py_nope", 1), "Unrecognized config option: py_nope"),
        (lambda c: c.get_or_default("nope"), "Unrecognized config option: nope"),
        (lambda c: c.nope, "Unrecognized config option: nope"),
        (lambda c: setattr(c, "py_debug_mode", True), r"Please use update\(\)"),
        (lambda c: c.update("py_debug_mode", 1), "py_debug_mode must be bool"),
        (lambda c: c.update("tf_lookup_batch_size", True), "tf_lookup_batch_size must be int"),
        (lambda c: c.update("py_traceback_filtering", "all"), "py_traceback_filtering must be one of auto"),
        (lambda c: c.update("py_dataset_visualization_output_dir", 3), "must be a str or None"),
    ],
)
def test_bad_names_and_values_are_refused(config: Config, change: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        change(config)
    assert config.py_debug_mode is False  # nothing changed
