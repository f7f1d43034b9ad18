"""The free-threaded session really runs with the GIL off, after every import."""

from __future__ import annotations

import importlib
import sys

import pytest

from tests.conftest import FREE_THREADED, interpreter_banner

# What the package and its optional parts import on this interpreter.
MODULES = ["aioloader", "numpy", "aiofiles", "jax", "jax.numpy", "pyarrow", "pyarrow.parquet"]


@pytest.mark.skipif(not FREE_THREADED, reason="only the free-threaded build can run with the GIL off")
def test_gil_stays_off_after_importing_everything() -> None:
    for name in MODULES:
        importlib.import_module(name)
    import aioloader

    for name in dir(aioloader):
        getattr(aioloader, name)
    assert sys._is_gil_enabled() is False, interpreter_banner()


def test_banner_names_the_build() -> None:
    banner = interpreter_banner()
    assert ("free-threaded build" in banner) == FREE_THREADED
