"""Shared test setup: the interpreter banner, JAX's CPU devices, repetition, thread checks,
and the S3 server on loopback (see tests/support/object_store.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from aioloader._executors.threads import closes_in_flight
from aioloader._sources.arrayrecord.source import array_record_installed
from tests.support.arrayrecord_files import write_all
from tests.support.object_store import FaultProxy, S3Place, serve
from tools.seaweedfs import SeaweedServer

# Eight CPU devices for the sharding tests; must be set before JAX starts.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

# The object-storage tests reach only the server on 127.0.0.1 that they start:
# no credentials, endpoint or config of the person running them, and no
# instance-metadata lookup (which would leave the machine).
for _name in [name for name in os.environ if name.startswith("AWS_")]:
    del os.environ[_name]
os.environ |= {
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
REPO = Path(__file__).resolve().parent.parent

# Why the orbax tests skip where they do.
ORBAX_MISSING = (
    "needs orbax-checkpoint (the `orbax` extra), which needs tensorstore: it has free-threaded "
    "wheels for 3.14t, none for 3.13t"
)

# Concurrency tests run this many times: more where the GIL is off, where
# races have the most room to show (AIOLOADER_REPEATS=50 for a long hunt).
REPEATS = int(os.environ.get("AIOLOADER_REPEATS", "6" if FREE_THREADED else "3"))
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
    config.addinivalue_line(
        "markers", "subinterpreters: runs executor='interpreter'; the only tests of the CPython 3.13 session"
    )


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--shard",
        metavar="K/N",
        help="run the K-th of N interleaved parts of the selected tests (1 <= K <= N); "
        "`./dev test` runs a session's parts at once, so that one part's waits overlap another's work",
    )


@pytest.hookimpl(trylast=True)  # after -m and -k: the parts split what would run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Soaks run only when asked for by name (`-m soak`); `--shard K/N` keeps every N-th test."""
    if "soak" not in (config.getoption("markexpr") or ""):
        deselect(config, items, [item for item in items if item.get_closest_marker("soak") is not None])
    shard = config.getoption("shard")
    if shard:
        k, n = parse_shard(shard)
        # Interleaved, not by file: the repeats of one test, and a file's slow
        # tests, spread over the parts, which then take about as long each.
        deselect(config, items, [item for i, item in enumerate(items) if i % n != k - 1])


def parse_shard(text: str) -> tuple[int, int]:
    """`K/N` as two ints, or a usage error that names `--shard`."""
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise pytest.UsageError(
            f"--shard: expected K/N (two whole numbers, like 1/2), got {text!r}"
        ) from None
    if not 1 <= k <= n:
        raise pytest.UsageError(f"--shard: K/N needs 1 <= K <= N, got {text!r}")
    return k, n


def deselect(config: pytest.Config, items: list[pytest.Item], dropped: list[pytest.Item]) -> None:
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        gone = {id(item) for item in dropped}
        items[:] = [item for item in items if id(item) not in gone]


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
    while closes_in_flight() and time.monotonic() < deadline:  # a closer thread may be yet to start
        time.sleep(0.001)
    for thread in aioloader_threads():
        thread.join(max(0.0, deadline - time.monotonic()))
    return aioloader_threads()


@pytest.fixture(autouse=True)
def no_leftover_threads() -> Iterator[None]:
    """Every test must leave no aioloader thread behind (joined within 2 s)."""
    yield
    leftover = wait_for_no_threads(2.0)
    assert not leftover, f"threads still alive 2 s after the test: {[t.name for t in leftover]}"


@pytest.fixture
def grain() -> ModuleType:
    """Grain 0.2.18, for the tests that compare with it (installed on the GIL 3.11 build only)."""
    return pytest.importorskip(
        "grain", reason="Grain 0.2.18 is installed on the GIL build of CPython 3.11 only"
    )


@pytest.fixture(scope="session")
def uninterrupted_training(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    """examples/train.py run to the end without a stop, step by step (batch fingerprint and
    exact loss): what every interrupted and resumed run, of either example, must match."""
    from tests.support.training import job, read_log, run_to_end

    folder = tmp_path_factory.mktemp("uninterrupted")
    run_to_end(job(folder / "log.jsonl", folder / "run"))
    return {line["step"]: line for line in read_log(folder / "log.jsonl")}


@pytest.fixture(scope="session")
def array_record_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files of `tests.support.arrayrecord_files`, from the official writer: in this process
    where it imports, else in the GIL interpreter that AIOLOADER_GIL_PYTHON names."""
    directory = tmp_path_factory.mktemp("array_record")
    if array_record_installed():
        write_all(directory)
    elif os.environ.get("AIOLOADER_GIL_PYTHON"):
        env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}  # a GIL build rejects PYTHON_GIL=0
        writer = "tests.support.arrayrecord_files"
        command = [os.environ["AIOLOADER_GIL_PYTHON"], "-m", writer, str(directory)]
        subprocess.run(command, cwd=REPO, env={**env, "PYTHONPATH": str(REPO)}, check=True)
    else:
        pytest.skip(
            "array_record (the official writer) does not import here and AIOLOADER_GIL_PYTHON names no "
            "interpreter that has it; `./dev test` sets it for the free-threaded session"
        )
    return directory


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
    """SeaweedFS on 127.0.0.1, once per session (tests skip where `weed` cannot run)."""
    yield from serve(tmp_path_factory.mktemp("seaweedfs"))


@pytest.fixture
def s3(s3_server: SeaweedServer) -> S3Place:
    """A fresh folder in the session's bucket."""
    return S3Place(s3_server)


@pytest.fixture
def fault_proxy(s3_server: SeaweedServer) -> Iterator[FaultProxy]:
    """A proxy in front of the session's server that counts requests and fails them on demand."""
    proxy = FaultProxy(("127.0.0.1", s3_server.s3_port))
    yield proxy
    proxy.close()


@pytest.fixture(scope="module")
def restartable_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
    """A server of the module's own, that its tests may stop and start again (`restart()`)."""
    yield from serve(tmp_path_factory.mktemp("seaweedfs-faults"))
