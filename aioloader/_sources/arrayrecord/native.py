"""Build a C file that ships with aioloader into a shared library, once per machine, and load it.

The library is plain C with no Python in it (ctypes calls it), so one build
serves every interpreter on the machine, GIL or free-threaded. It lives in
`cache_root() / "native"`, named by a hash of the C source, the compiler
flags and the machine, and is compiled with the system's C compiler the
first time it is needed: to a temporary name, then renamed into place, under
a file lock. So concurrent processes and threads never load a half-written
library, and it is built once, not once per process.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shlex
import struct
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# -O3 rather than -O2: gcc 12 then inlines the hash's updates and keeps its four
# lanes in vector registers, about a quarter faster (measured on x86-64).
FLAGS = ("-O3", "-shared", "-fPIC")
COMPILERS = ("cc", "gcc", "clang")  # looked for on PATH, in this order, when $CC is not set
_BUILD_SECONDS = 120
_ERROR_CHARACTERS = 600  # of the compiler's output, in a BuildError


class BuildError(Exception):
    """The library could not be built or loaded; the message says why."""


def cache_root() -> Path:
    """`$AIOLOADER_CACHE`, else `$XDG_CACHE_HOME/aioloader`, else `~/.cache/aioloader`.

    The same folder as the developer tools use (`tools/interpreters.py`).
    """
    if os.environ.get("AIOLOADER_CACHE"):
        return Path(os.environ["AIOLOADER_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "aioloader"


def library_path(source: Path) -> Path:
    """Where the library built from `source` is kept: named by the source, the flags and the machine."""
    machine = f"{sys.platform}-{platform.machine()}-{8 * struct.calcsize('P')}bit"
    digest = hashlib.sha256(b"\0".join([source.read_bytes(), shlex.join(FLAGS).encode(), machine.encode()]))
    suffix = ".dll" if sys.platform == "win32" else ".so"
    return cache_root() / "native" / f"{source.stem}-{digest.hexdigest()[:16]}{suffix}"


def load(source: Path) -> ctypes.CDLL:
    """The library built from `source`: from the cache, else compiled now. Raises BuildError.

    A cached library that does not load (a damaged file) is compiled again, once.
    """
    target = library_path(source)
    if not target.exists():
        build(source, target)
    try:
        return ctypes.CDLL(str(target))
    except OSError:
        build(source, target, replace=True)
    try:
        return ctypes.CDLL(str(target))
    except OSError as error:
        raise BuildError(f"the library built from {source.name} does not load ({error})") from None


def build(source: Path, target: Path, *, replace: bool = False) -> None:
    """Compile `source` to `target` under a file lock; if another process built it meanwhile,
    keep that one, unless `replace`."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with _locked(target.with_name(target.name + ".lock")):
            if replace or not target.exists():
                _compile(source, target)
    except OSError as error:
        raise BuildError(
            f"cannot write to {target.parent} ({error}); set AIOLOADER_CACHE elsewhere"
        ) from None


def compiler() -> list[str]:
    """The C compiler's command: `$CC` (split as a shell would) if set, else the first of
    `COMPILERS` on PATH. Raises BuildError if there is none."""
    if os.environ.get("CC"):
        return shlex.split(os.environ["CC"])
    import shutil  # here, not at the top: a library built already needs neither it nor subprocess

    for name in COMPILERS:
        found = shutil.which(name)
        if found:
            return [found]
    raise BuildError(f"no C compiler found ($CC is not set, and none of {', '.join(COMPILERS)} is on PATH)")


def _compile(source: Path, target: Path) -> None:
    """Compile to a name of this thread's own, then rename it: `target` appears whole or not at all."""
    import subprocess

    partial = target.with_name(f"{target.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    command = [*compiler(), *FLAGS, "-o", str(partial), str(source)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=_BUILD_SECONDS, check=False)
        if done.returncode != 0:
            output = (done.stderr + done.stdout).strip()[-_ERROR_CHARACTERS:]
            raise BuildError(f"`{shlex.join(command)}` failed with exit status {done.returncode}: {output}")
        os.replace(partial, target)
    except (OSError, subprocess.SubprocessError) as error:  # no such program, timed out, no output file
        raise BuildError(f"`{shlex.join(command)}` failed: {error}") from None
    finally:
        partial.unlink(missing_ok=True)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive `flock` on `path` (the system drops it if the process dies).

    Where there is no `flock` (Windows), nothing is locked: the rename alone
    still keeps the library whole; it may only be compiled twice.
    """
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield  # closing the file releases the lock
