"""The `paths` argument of the file-backed sources: one path, or a sequence of them."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from typing import Any

from aioloader._sources.storage.urls import check_scheme, is_url


def require_paths(paths: Any, *, must_exist: bool = True) -> tuple[str, ...]:
    """`paths` as a non-empty tuple of strings, in order.

    Accepts a `str` or `os.PathLike` (one file) or a sequence of them; a
    str may be an `s3://` URL (any other scheme is rejected). With
    `must_exist`, a local path that is not a regular file is rejected at
    once, naming it (an object's existence is checked when it is opened).
    """
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    if not isinstance(paths, Sequence) or isinstance(paths, bytes):
        raise TypeError(f"`paths` must be a path or a sequence of paths, got {type(paths).__name__}.")
    if not paths:
        raise ValueError("`paths` must name at least one file, got an empty sequence.")
    found: list[str] = []
    for i, given in enumerate(paths):
        path = require_path(f"paths[{i}]", given)
        check_scheme(path, f"paths[{i}]")
        if must_exist and not is_url(path) and not os.path.isfile(path):
            raise FileNotFoundError(f"`paths[{i}]` is not a file: {path!r}.")
        found.append(path)
    return tuple(found)


def require_path(name: str, path: Any) -> str:
    """One path as a str: a str or os.PathLike (whose `__fspath__` gives a str or bytes)
    without a NUL byte, else an error naming `name`."""
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"`{name}` must be a str or os.PathLike, got {path!r:.200}.")
    try:
        text = os.fsdecode(path)
    except TypeError as error:  # an `__fspath__` that returns neither str nor bytes
        raise TypeError(f"`{name}` {path!r:.200} is not a usable path: {error}") from None
    if "\x00" in text:
        raise ValueError(f"`{name}` holds a NUL byte, which no file name may: {text!r}.")
    return text


def regular_file_opener(path: str, flags: int) -> int:
    """An `opener` for `open()`: the descriptor of `path` if it is a regular file, else a
    ValueError naming it (a folder: IsADirectoryError, as `open()` raises). A pipe or a
    device is no file to read records from (a pipe with no writer would block `open()`
    for ever, `/dev/zero` never ends): it is opened without blocking, refused, and closed."""
    fd = os.open(path, flags | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if not stat.S_ISREG(mode):
            raise ValueError(f"{path!r} is not a regular file (a pipe or a device?).")
        if hasattr(os, "set_blocking"):  # not on Windows, where O_NONBLOCK is not either
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def describe_paths(paths: Sequence[str], shown: int = 3) -> str:
    """A short form of `paths` for a repr: the first few and how many more."""
    head = ", ".join(repr(p) for p in paths[:shown])
    more = len(paths) - shown
    return f"[{head}, ... {more} more]" if more > 0 else f"[{head}]"
