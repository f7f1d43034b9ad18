"""The free-threaded session really runs with the GIL off, after every import, and says so.

`PYTHON_GIL=0` (how the session runs) keeps the GIL off whatever is imported,
so it would hide an extension module that turns the GIL back on for a user
who never set it: that check runs in a child without it, with -W error.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FREE_THREADED, interpreter_banner

REPO = Path(__file__).resolve().parent.parent

# The optional dependencies aioloader imports on some path, where installed.
OPTIONAL = [
    "numpy", "aiofiles", "jax", "jax.numpy", "pyarrow", "pyarrow.parquet", "backports.zstd",
    "compression.zstd", "s3fs", "tqdm", "prometheus_client", "orbax.checkpoint", "tensorstore",
]  # fmt: skip

# Every module of aioloader and every installed optional dependency, then what the GIL is.
IMPORT_EVERYTHING = """
import importlib, importlib.util, json, pkgutil, sys
import aioloader

def missing(error):
    for cause in (error, error.__cause__):
        name = getattr(cause, "name", None)
        if name and importlib.util.find_spec(name.split(".")[0]) is None:
            return name
    return None

def installed(name):
    return importlib.util.find_spec(name.split(".")[0]) is not None

imported, skipped = [], {}
names = [m.name for m in pkgutil.walk_packages(aioloader.__path__, "aioloader.")]
for name in names + [name for name in sys.argv[1:] if installed(name)]:
    try:
        importlib.import_module(name)
        imported.append(name)
    except ImportError as error:
        if missing(error) is None:
            raise
        skipped[name] = missing(error)
for name in dir(aioloader):
    getattr(aioloader, name)
print(json.dumps({"gil": sys._is_gil_enabled(), "imported": imported, "skipped": skipped}))
"""


def child_env(**changes: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHON_GIL"}
    return {**env, "PYTHONPATH": str(REPO), **changes}


@pytest.mark.skipif(not FREE_THREADED, reason="only the free-threaded build can run with the GIL off")
def test_importing_everything_leaves_the_gil_off_without_python_gil() -> None:
    command = [sys.executable, "-W", "error", "-c", IMPORT_EVERYTHING, *OPTIONAL]
    done = subprocess.run(command, env=child_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert "aioloader._loader" in result["imported"], result
    assert "jax" in result["imported"], result
    assert set(result["skipped"].values()) <= {"orbax"}, result  # aioloader.checkpoint, where orbax is not
    assert result["gil"] is False, f"an import turned the GIL on: {result}"


@pytest.mark.skipif(not FREE_THREADED, reason="only the free-threaded build can run with the GIL off")
def test_gil_stays_off_in_this_session_after_importing_everything() -> None:
    for name in OPTIONAL:
        try:
            importlib.import_module(name)
        except ImportError:
            continue  # not installed here
    import aioloader

    for name in dir(aioloader):
        getattr(aioloader, name)
    assert sys._is_gil_enabled() is False, interpreter_banner()


def banner_in_child(**env: str) -> str:
    code = "from tests.conftest import interpreter_banner; print(interpreter_banner())"
    done = subprocess.run(
        [sys.executable, "-c", code], env=child_env(**env), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_banner_names_the_build() -> None:
    banner = interpreter_banner()
    assert sys.version.split()[0] in banner
    assert sys.executable in banner
    # sys.abiflags ("t") and the banner's sysconfig variable are two separate records of the build.
    assert ("free-threaded build" in banner) == ("t" in sys.abiflags), banner
    if not FREE_THREADED:
        assert "GIL build, GIL on" in banner_in_child()
        return
    assert "free-threaded build, GIL on" in banner_in_child(PYTHON_GIL="1")
    assert "free-threaded build, GIL off" in banner_in_child(PYTHON_GIL="0")
    if os.environ.get("PYTHON_GIL") == "0":  # how ./dev test runs this session
        assert "GIL off" in banner
