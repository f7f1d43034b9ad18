"""Find the interpreters of the test sessions: a free-threaded CPython (3.14t or
3.13t), found or else built, and pyenv's GIL builds (`pyenv_python`).

The search order is cheapest first:

1. a free-threaded interpreter already on PATH;
2. one this script built or installed before, under the cache folder;
3. `uv python install 3.14t` (the normal route on a machine with internet);
4. CPython built from Debian's source package with `./configure --disable-gil`,
   installed into the cache folder: `python3.14` first, else `python3.13`
   (a package the archive lists but does not serve costs one line and a
   second or two).

Step 4 derives the archive address from the machine's own apt configuration,
so nothing here names a package registry. A 3.14 build needs libzstd's
headers for `compression.zstd`: they are installed with apt-get when
missing, and a build without them says so.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from tools.log import say

DEBIAN_SUITE = "forky"
DEBIAN_SOURCE_PACKAGES = ("python3.14", "python3.13")  # newest first
ZSTD_HEADER = Path("/usr/include/zstd.h")
CANDIDATE_NAMES = ("python3.14t", "python3.13t")
COMPLETE_MARKER = ".aioloader-build-complete"

_PROBE = (
    "import sys, sysconfig; "
    "print(sysconfig.get_config_var('Py_GIL_DISABLED') == 1 and sys.version_info >= (3, 13))"
)


class ToolchainError(RuntimeError):
    """Something the toolchain needs is missing; the message says what."""


def cache_root() -> Path:
    """The folder outside the repository where interpreters and venvs live."""
    if os.environ.get("AIOLOADER_CACHE"):
        return Path(os.environ["AIOLOADER_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "aioloader"


def is_free_threaded(python: Path) -> bool:
    """True when `python` runs and was built with `--disable-gil`, 3.13+."""
    try:
        out = subprocess.run([str(python), "-c", _PROBE], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip() == "True"


def free_threaded_python() -> Path:
    """Return the path of a free-threaded CPython, installing one if needed."""
    for find in (_on_path, _in_cache, _from_uv, _from_debian_source):
        found = find()
        if found is not None:
            return found
    raise ToolchainError("no free-threaded CPython could be found or built (see the messages above)")


def pyenv_python(version: str) -> Path:
    """The python of pyenv's newest CPython `version`.x (a GIL build), or a ToolchainError.

    Asks `pyenv prefix` when pyenv is on PATH, else looks in `$PYENV_ROOT/versions`
    (by default `~/.pyenv/versions`).
    """
    for prefix in _pyenv_prefixes(version):
        python = prefix / "bin" / f"python{version}"
        if python.exists() and not is_free_threaded(python):
            return python
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    raise ToolchainError(
        f"no CPython {version} found by `pyenv prefix {version}` or in {root / 'versions'}: "
        f"install one with `pyenv install {version}`"
    )


def _pyenv_prefixes(version: str) -> list[Path]:
    prefixes: list[Path] = []
    pyenv = shutil.which("pyenv")
    if pyenv is not None:
        found = subprocess.run([pyenv, "prefix", version], capture_output=True, text=True)
        if found.returncode == 0:
            prefixes += [Path(part) for part in found.stdout.strip().split(":") if part]
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    installed = [p for p in (root / "versions").glob(f"{version}.*") if re.fullmatch(r"[\d.]+", p.name)]
    return prefixes + sorted(installed, key=lambda p: [int(part) for part in p.name.split(".")], reverse=True)


def _on_path() -> Path | None:
    for name in CANDIDATE_NAMES:
        where = shutil.which(name)
        if where and is_free_threaded(Path(where)):
            say(f"free-threaded CPython on PATH: {where}")
            return Path(where)
    return None


def _in_cache() -> Path | None:
    for candidate in sorted(cache_root().glob("python*t/bin/python3.1*t"), reverse=True):
        if (candidate.parent.parent / COMPLETE_MARKER).exists() and is_free_threaded(candidate):
            say(f"free-threaded CPython from the cache: {candidate}")
            return candidate
    return None


def _from_uv() -> Path | None:
    uv = shutil.which("uv")
    if uv is None:
        say("uv is not on PATH; skipping `uv python install 3.14t`")
        return None
    say("trying `uv python install 3.14t`")
    install_dir = cache_root() / "uv-python"
    env = {**os.environ, "UV_PYTHON_INSTALL_DIR": str(install_dir)}
    done = subprocess.run([uv, "python", "install", "3.14t"], env=env, timeout=600)
    if done.returncode != 0:
        say("`uv python install 3.14t` failed (no internet access to its downloads?)")
        return None
    found = subprocess.run([uv, "python", "find", "3.14t"], env=env, capture_output=True, text=True)
    path = Path(found.stdout.strip())
    return path if found.returncode == 0 and is_free_threaded(path) else None


def _from_debian_source() -> Path | None:
    for tool in ("apt-get", "make", "gcc"):
        if shutil.which(tool) is None:
            raise ToolchainError(f"building a free-threaded CPython needs `{tool}`, which is not installed")
    with tempfile.TemporaryDirectory(prefix="aioloader-cpython-") as tmp:
        version, tarball = _download_debian_source(Path(tmp))
        if version >= (3, 14):
            _ensure_zstd_headers()
        source = _unpack(tarball, Path(tmp))
        name = f"python{version[0]}.{version[1]}t"
        _build(source, cache_root() / name)
    python = cache_root() / name / "bin" / name
    if not is_free_threaded(python):
        raise ToolchainError(f"built {python}, but it does not report a free-threaded build")
    if version >= (3, 14):
        _check_zstd_module(python)
    return python


def debian_archive_uri() -> str:
    """The Debian archive address this machine's apt is configured with."""
    uris: list[str] = []
    for path in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        if path.is_file() and path.suffix in {".list", ".sources", ""}:
            uris += _uris_in(path.read_text(errors="replace"))
    main = [u for u in uris if re.search(r"/debian/?$", u)]
    if not main:
        raise ToolchainError(
            "no Debian archive found in /etc/apt/sources.list{,.d}: cannot fetch the CPython source"
        )
    return main[0].rstrip("/")


def _uris_in(text: str) -> list[str]:
    deb822 = re.findall(r"^URIs:\s*(.+)$", text, flags=re.MULTILINE)
    one_line = re.findall(r"^deb(?:-src)?\s+(?:\[[^\]]*\]\s+)?(\S+)", text, flags=re.MULTILINE)
    return [u for line in deb822 for u in line.split()] + one_line


def _download_debian_source(tmp: Path) -> tuple[tuple[int, int], Path]:
    """The version and upstream tarball of the newest of DEBIAN_SOURCE_PACKAGES the archive serves."""
    uri = debian_archive_uri()
    say(f"downloading the index of Debian's source packages ({DEBIAN_SUITE}) from {uri}")
    (tmp / "lists" / "partial").mkdir(parents=True)
    sources = tmp / "sources.list"
    sources.write_text(f"deb-src {uri} {DEBIAN_SUITE} main\n")
    apt = [
        "apt-get", "-q",
        f"-oDir::Etc::SourceList={sources}", "-oDir::Etc::SourceParts=/nonexistent",
        f"-oDir::State::Lists={tmp / 'lists'}", f"-oDir::Cache={tmp / 'cache'}",
        "-oAPT::Sandbox::User=root",
    ]  # fmt: skip
    subprocess.run([*apt, "update"], check=True, cwd=tmp, stdout=subprocess.DEVNULL)
    for package in DEBIAN_SOURCE_PACKAGES:
        tarball = _download_source_package(apt, package, tmp)
        if tarball is not None:
            major, minor = package.removeprefix("python").split(".")
            return (int(major), int(minor)), tarball
    raise ToolchainError(f"Debian's archive at {uri} serves none of {', '.join(DEBIAN_SOURCE_PACKAGES)}")


def _download_source_package(apt: list[str], package: str, tmp: Path) -> Path | None:
    """`package`'s upstream tarball, or None after one line saying why it is not there."""
    done = subprocess.run(
        [*apt, "source", "--download-only", package], cwd=tmp, capture_output=True, text=True
    )
    tarballs = sorted(tmp.glob(f"{package}_*.orig.tar.*"))
    if done.returncode == 0 and tarballs:
        say(f"downloaded Debian's {package} source package: {tarballs[-1].name}")
        return tarballs[-1]
    errors = [line for line in done.stderr.splitlines() if line.startswith("E:")] or ["no upstream tarball"]
    reason = "404 Not Found" if "404" in done.stderr else errors[0].removeprefix("E:").strip()
    say(f"Debian's {package} source package is not available here ({reason}); trying the next one")
    return None


def _ensure_zstd_headers() -> None:
    """Install libzstd-dev for `compression.zstd` (new in 3.14) when its header is missing."""
    if ZSTD_HEADER.exists():
        return
    say("installing libzstd-dev (apt-get), which CPython 3.14 needs for compression.zstd")
    for command in (["apt-get", "-q", "update"], ["apt-get", "-q", "-y", "install", "libzstd-dev"]):
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            say(
                f"MISSING libzstd-dev: `{' '.join(command)}` failed ({done.stderr.strip()[-200:]}); "
                "CPython 3.14 will build without compression.zstd, so zstd-compressed ArrayRecord "
                "files cannot be read on it. Install libzstd-dev and delete the build to redo it."
            )
            return


def _check_zstd_module(python: Path) -> None:
    done = subprocess.run([str(python), "-c", "import compression.zstd"], capture_output=True)
    if done.returncode != 0:
        say(f"MISSING compression.zstd in {python} (was libzstd-dev installed when it was built?)")


def _unpack(tarball: Path, into: Path) -> Path:
    say(f"unpacking {tarball.name}")
    with tarfile.open(tarball) as archive:
        archive.extractall(into, filter="data")
    configure = sorted(into.glob("*/configure"))
    if not configure:
        raise ToolchainError(f"{tarball.name} holds no `configure` script")
    return configure[0].parent


def _build(source: Path, prefix: Path) -> None:
    jobs = str(os.cpu_count() or 2)
    say(f"building CPython with --disable-gil into {prefix} (about 5 minutes on 2 cores)")
    shutil.rmtree(prefix, ignore_errors=True)
    subprocess.run(
        ["./configure", "--disable-gil", f"--prefix={prefix}", "--with-ensurepip=install"],
        check=True,
        cwd=source,
    )
    subprocess.run(["make", f"-j{jobs}"], check=True, cwd=source)
    subprocess.run(["make", "install"], check=True, cwd=source)
    # Written last, so that an interrupted build is never mistaken for a
    # usable interpreter by `_in_cache`.
    (prefix / COMPLETE_MARKER).touch()
