"""Shared test setup: the interpreter banner, JAX's CPU devices, repetition, thread checks."""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

# Eight CPU devices for the sharding tests; must be set before JAX starts.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))

# Concurrency tests run this many times: more where the GIL is off, where
# races have the most room to show.
# Why the orbax tests skip where they do.
ORBAX_MISSING = (
    "needs orbax-checkpoint (the `orbax` extra), which needs tensorstore: it has free-threaded "
    "wheels for 3.14t, none for 3.13t"
)

REPEATS = int(os.environ.get("AIOLOADER_REPEATS", "10" if FREE_THREADED else "3"))
repeated = pytest.mark.parametrize("repeat", range(REPEATS), ids=lambda r: f"run{r}")


def interpreter_banner() -> str:
    """One line naming the interpreter, its build and whether the GIL is on."""
    build = "free-threaded build" if FREE_THREADED else "GIL build"
    gil = "GIL on" if getattr(sys, "_is_gil_enabled", lambda: True)() else "GIL off"
    version = sys.version.split()[0]
    return f"interpreter: {sys.implementation.name} {version}, {build}, {gil} ({sys.executable})"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "soak: minutes of random delays, errors and resumes; outside the default run (-m soak)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Soaks run only when asked for by name (`-m soak`)."""
    if "soak" in (config.getoption("markexpr") or ""):
        return
    soaks = [item for item in items if item.get_closest_marker("soak") is not None]
    if soaks:
        config.hook.pytest_deselected(items=soaks)
        items[:] = [item for item in items if item.get_closest_marker("soak") is None]


def pytest_report_header() -> str:
    return interpreter_banner()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    terminalreporter.write_line(interpreter_banner())


def aioloader_threads() -> list[threading.Thread]:
    """The live threads that aioloader started."""
    return [t for t in threading.enumerate() if t.name.startswith("aioloader")]


def wait_for_no_threads(timeout: float = 2.0) -> list[threading.Thread]:
    """Wait up to `timeout` for aioloader's threads to end; return those still alive."""
    deadline = time.monotonic() + timeout
    for thread in aioloader_threads():
        thread.join(max(0.0, deadline - time.monotonic()))
    return aioloader_threads()


@pytest.fixture(autouse=True)
def no_leftover_threads() -> Iterator[None]:
    """Every test must leave no aioloader thread behind (joined within 2 s)."""
    yield
    leftover = wait_for_no_threads(2.0)
    assert not leftover, f"threads still alive 2 s after the test: {[t.name for t in leftover]}"


@pytest.fixture(scope="session")
def uninterrupted_training(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    """examples/train.py run to the end without a stop, step by step (batch fingerprint and
    exact loss): what every interrupted and resumed run, of either example, must match."""
    from tests.support.training import job, read_log, run_to_end

    folder = tmp_path_factory.mktemp("uninterrupted")
    run_to_end(job(folder / "log.jsonl", folder / "run"))
    return {line["step"]: line for line in read_log(folder / "log.jsonl")}
