"""The `./dev` commands: one line each for the main job, the tests and the benchmarks.

./dev train [--gil]  set up, then train the example model fed by aioloader, on the
                     free-threaded build with the GIL off (--gil: on the GIL build)
./dev test [ARGS]    set up, then lint, type-check and run pytest on every
                     interpreter session at once: 3.11 and 3.13t (each in two
                     parts), and pyenv's 3.13 for the subinterpreters (ARGS go
                     to each pytest run)
./dev bench [ARGS]   set up, then run the benchmark suite
./dev python-ft      print the path of a free-threaded CPython (building one if needed)
./dev env NAME       print the python of the environment NAME (gil, ft, gil313)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tools.envs import EnvSpec, ensure_env
from tools.interpreters import ToolchainError, free_threaded_python, pyenv_python
from tools.log import say

REPO = Path(__file__).resolve().parent.parent


def gil_spec() -> EnvSpec:
    """The machine's default CPython, with every extra and the benchmark peers."""
    return EnvSpec("gil", Path(sys.executable), ("all", "dev", "peers", "s3-fast", "hf", "polars"))


def ft_spec() -> EnvSpec:
    """A free-threaded CPython, with what the README tells a free-threaded user to install
    (the `free-threaded` extra: orbax too from 3.14t on) and the test tools."""
    return EnvSpec("ft", free_threaded_python(), ("free-threaded", "dev", "bench"), binary_only=True)


def gil313_spec() -> EnvSpec:
    """pyenv's CPython 3.13 (GIL build): the subinterpreter session (`_interpreters`)."""
    extras = ("jax", "parquet", "zstd", "arrayrecord-builtin", "dev")
    return EnvSpec("gil313", pyenv_python("3.13"), extras, binary_only=True)


SPECS: dict[str, Callable[[], EnvSpec]] = {"gil": gil_spec, "ft": ft_spec, "gil313": gil313_spec}


def run(python: Path, args: Sequence[str], **env: str) -> int:
    """Run `python args...` in the repository with the checkout importable."""
    return subprocess.run([str(python), *args], cwd=REPO, env=_environment(env)).returncode


def _environment(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment with the checkout importable, and `extra`."""
    return {**os.environ, "PYTHONPATH": str(REPO), **extra}


# Each build's pytest session runs as this many parts at once (`--shard K/N`,
# tests/conftest.py): most of a session's time is its tests waiting (joins,
# slow reads and servers: the free-threaded session alone kept 0.7 of a core
# busy), so one part's waits leave the cores to the others.
SHARDS = 2
# pytest's exit code when it selected no test: a part of a run narrowed by ARGS may have none.
NO_TESTS = 5


def test(pytest_args: Sequence[str]) -> int:
    """Lint, type-check and run pytest on the GIL and free-threaded builds, and on pyenv's
    CPython 3.13 (GIL), where `executor="interpreter"` runs: all at the same time, each
    in its own process with its own temporary folder. Each one's output is printed
    whole when it ends; its log stays in the folder named at the start.
    """
    gil, ft, gil313 = prepare(gil_spec, ft_spec, gil313_spec)
    runs = [
        Session("ruff check", gil, ["-m", "ruff", "check", "."]),
        Session("ruff format", gil, ["-m", "ruff", "format", "--check", "."]),
        Session("mypy", gil, ["-m", "mypy"]),
        *parts("pytest (GIL)", gil, pytest_args),
        # The free-threaded session gets its ArrayRecord test files from the
        # official writer, which only installs on the GIL build.
        *parts(
            "pytest (free-threaded, PYTHON_GIL=0)",
            ft,
            pytest_args,
            {"PYTHON_GIL": "0", "AIOLOADER_GIL_PYTHON": str(gil)},
        ),
        # For the subinterpreters on a GIL build: the tests marked
        # `subinterpreters` (the sessions above run them too, and everything
        # else). A `-m` in ARGS comes later and wins.
        Session(
            "pytest (CPython 3.13, GIL: subinterpreters)",
            gil313,
            ["-m", "pytest", "-m", "subinterpreters and not slow", *pytest_args],
            {"AIOLOADER_GIL_PYTHON": str(gil)},
            pytest=True,
        ),
    ]
    results = run_at_once(runs)
    passed = True
    for run_, (seconds, code) in zip(runs, results, strict=True):
        # A part with no test to run passes only where ARGS chose the tests.
        ok = code == 0 or (run_.pytest and code == NO_TESTS and bool(pytest_args))
        passed &= ok
        note = " (no test selected)" if code == NO_TESTS else ""
        say(f"{'ok  ' if ok else 'FAIL'} {run_.name} ({seconds:.0f} s){note}")
    return 0 if passed else 1


def prepare(*specs: Callable[[], EnvSpec]) -> list[Path]:
    """The python of each environment in `specs`, built at once where missing: the
    free-threaded CPython compiles (the CPUs' work) while pip fetches the other
    environments' packages (the network's)."""
    with ThreadPoolExecutor(len(specs)) as pool:
        return list(pool.map(lambda spec: ensure_env(spec(), REPO), specs))


@dataclass
class Session:
    """One command of `./dev test`: its name, interpreter, arguments and extra environment."""

    name: str
    python: Path
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    pytest: bool = False  # gets a temporary folder of its own (--basetemp)


def parts(
    name: str, python: Path, pytest_args: Sequence[str], env: dict[str, str] | None = None
) -> list[Session]:
    """One pytest session as SHARDS sessions that split its tests."""
    return [
        Session(
            f"{name}, part {k}/{SHARDS}",
            python,
            ["-m", "pytest", f"--shard={k}/{SHARDS}", *pytest_args],
            env or {},
            pytest=True,
        )
        for k in range(1, SHARDS + 1)
    ]


def run_at_once(sessions: Sequence[Session]) -> list[tuple[float, int]]:
    """Run `sessions` concurrently, each logging to a file; print each log as it ends.
    Returns each one's seconds and exit code, in the order given."""
    folder = Path(tempfile.mkdtemp(prefix="aioloader-test-"))
    say(f"{len(sessions)} commands at once; their logs: {folder}")
    started = time.monotonic()
    running: dict[subprocess.Popen[bytes], tuple[int, Path]] = {}
    for i, session in enumerate(sessions):
        log = folder / f"session-{i}.log"
        command = [str(session.python), *session.args]
        if session.pytest:  # pytest empties its own folder; never another session's
            command.append(f"--basetemp={folder / f'tmp-{i}'}")
        with log.open("wb") as out:
            process = subprocess.Popen(
                command, cwd=REPO, env=_environment(session.env), stdout=out, stderr=subprocess.STDOUT
            )
        running[process] = (i, log)
    results: dict[int, tuple[float, int]] = {}
    while running:
        time.sleep(0.5)
        for process in [p for p in running if p.poll() is not None]:
            i, log = running.pop(process)
            say(f"{sessions[i].name}: ended ({process.returncode}); its output:")
            sys.stdout.write(log.read_text(errors="replace"))
            sys.stdout.flush()
            results[i] = (time.monotonic() - started, process.returncode)
    return [results[i] for i in range(len(sessions))]


def train(args: Sequence[str]) -> int:
    """The main job, examples/train.py: on the free-threaded build with the GIL off, what
    aioloader is made for; with `--gil`, on the GIL build. Each build has its own
    checkpoints folder (runs/train-free-threaded, runs/train-gil) unless --workdir says."""
    gil = "--gil" in args
    args = [arg for arg in args if arg != "--gil"]
    if not any(arg.startswith("--workdir") for arg in args):
        args += ["--workdir", f"runs/train-{'gil' if gil else 'free-threaded'}"]
    if gil:
        return run(ensure_env(gil_spec(), REPO), ["examples/train.py", *args])
    return run(ensure_env(ft_spec(), REPO), ["examples/train.py", *args], PYTHON_GIL="0")


def main(argv: Sequence[str]) -> int:
    """Dispatch one `./dev` command."""
    command, rest = (argv[0], list(argv[1:])) if argv else ("help", [])
    try:
        if command == "test":
            return test(rest)
        if command == "train":
            return train(rest)
        if command == "bench":
            gil, ft = prepare(gil_spec, ft_spec)
            return run(gil, ["-m", "benchmarks", "--python-gil", str(gil), "--python-ft", str(ft), *rest])
        if command == "python-ft":
            print(free_threaded_python())
            return 0
        if command == "env" and rest and rest[0] in SPECS:
            print(ensure_env(SPECS[rest[0]](), REPO))
            return 0
    except ToolchainError as error:
        say(f"error: {error}")
        return 2
    print(__doc__)
    return 0 if command in {"help", "-h", "--help"} else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
