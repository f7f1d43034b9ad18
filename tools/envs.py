"""Virtual environments for the test sessions, cached outside the repository.

An environment holds the project's dependencies, never the project itself:
the commands run the checkout they are started from (through PYTHONPATH), so
one cached environment serves every clone. Its folder name carries a hash of
`pyproject.toml` and the interpreter, so a change to either builds a new one.
"""

from __future__ import annotations

import fcntl
import hashlib
import re
import shutil
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

from tools.interpreters import cache_root
from tools.log import say

# Bump to rebuild every environment after a change to how they are made.
RECIPE_VERSION = "1"
# Environments of one name kept side by side (several checkouts or branches
# may want different ones); the least recently used beyond this are removed.
KEEP_PER_NAME = 8


@dataclass(frozen=True)
class EnvSpec:
    """What one environment is made of."""

    name: str
    python: Path
    extras: tuple[str, ...]
    binary_only: bool = False  # free-threaded builds: never compile from source
    extra_requirements: tuple[str, ...] = ()


def requirements(pyproject: Path, extras: tuple[str, ...]) -> list[str]:
    """The project's dependencies plus those of `extras`, self-references expanded."""
    project = tomllib.loads(pyproject.read_text())["project"]
    optional: dict[str, list[str]] = project.get("optional-dependencies", {})
    name = project["name"]
    found: list[str] = list(project.get("dependencies", []))
    pending, seen = list(extras), set()
    while pending:
        extra = pending.pop()
        if extra in seen:
            continue
        seen.add(extra)
        if extra not in optional:
            raise KeyError(f"pyproject.toml has no extra named {extra!r}")
        for req in optional[extra]:
            inner = re.fullmatch(rf"{re.escape(name)}\[([^\]]+)\]", req.strip())
            if inner:
                pending += [e.strip() for e in inner.group(1).split(",")]
            else:
                found.append(req)
    return sorted(set(found))


def ensure_env(spec: EnvSpec, repo: Path) -> Path:
    """Return the python of the environment for `spec`, building it when stale."""
    pyproject = repo / "pyproject.toml"
    version = subprocess.run(
        [str(spec.python), "-c", "import sys; print(sys.version)"], capture_output=True, text=True, check=True
    ).stdout
    key = hashlib.sha256(
        "\n".join([RECIPE_VERSION, pyproject.read_text(), version, repr(spec)]).encode()
    ).hexdigest()[:12]
    home = cache_root() / "venvs" / f"{spec.name}-{key}"
    home.parent.mkdir(parents=True, exist_ok=True)
    # Two `./dev` commands started at once (two checkouts, or CI beside a
    # developer) must not build the same environment together.
    with open(home.parent / f".{spec.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure_locked(spec, pyproject, home)


def _ensure_locked(spec: EnvSpec, pyproject: Path, home: Path) -> Path:
    python = home / "bin" / "python"
    if (home / ".complete").exists():
        say(f"environment {spec.name}: reusing {home}")
        (home / ".complete").touch()  # marks it recently used
        return python
    _remove_least_recently_used(home.parent, spec.name)
    say(f"environment {spec.name}: building {home} with {spec.python}")
    subprocess.run([str(spec.python), "-m", "venv", str(home)], check=True)
    reqs = requirements(pyproject, spec.extras) + list(spec.extra_requirements)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--upgrade"]
    subprocess.run([*pip, "pip"], check=True)
    subprocess.run([*pip, *(["--only-binary", ":all:"] if spec.binary_only else []), *reqs], check=True)
    (home / ".complete").touch()
    return python


def _remove_least_recently_used(folder: Path, name: str) -> None:
    def last_used(env: Path) -> float:
        marker = env / ".complete"  # a build in progress counts from its start
        return (marker if marker.exists() else env).stat().st_mtime

    envs = sorted(folder.glob(f"{name}-" + "?" * 12), key=last_used, reverse=True)
    for old in envs[KEEP_PER_NAME - 1 :]:
        say(f"removing the environment {old}, the least recently used")
        shutil.rmtree(old, ignore_errors=True)
