"""Decompressors for Riegeli's compression types, from whatever this interpreter has.

Free-threaded builds lack some compression packages (zstandard, cramjam and so
python-snappy have no wheels for them), so each codec is a list of candidate
modules tried in order, the first that imports wins, and a missing codec is
an error naming what to install. pyarrow, which has free-threaded wheels and
bundles zstd, snappy and brotli, is the last candidate of each.

Every decompressor is a one-shot call with no shared state, so it is safe to
call from many threads at once.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

# Riegeli's `compression_type` bytes.
NONE = 0
BROTLI = ord("b")
ZSTD = ord("z")
SNAPPY = ord("s")

# (compressed bytes, decompressed size) -> decompressed bytes.
Decompress = Callable[[memoryview, int], bytes]


def _stdlib_style_zstd(module: ModuleType) -> Decompress:
    return lambda data, size: module.decompress(data)


def _zstandard(module: ModuleType) -> Decompress:
    # A ZstdDecompressor is not thread-safe: make one per call (it is cheap).
    return lambda data, size: module.ZstdDecompressor().decompress(data, max_output_size=size)


def _plain(function: str) -> Callable[[ModuleType], Decompress]:
    return lambda module: lambda data, size: getattr(module, function)(data)


def _arrow(codec_name: str) -> Callable[[ModuleType], Decompress]:
    def make(pyarrow: Any) -> Decompress:
        # Arrow's one-shot Decompress is stateless, so one Codec serves every thread.
        codec = pyarrow.Codec(codec_name)
        return lambda data, size: codec.decompress(data, decompressed_size=size, asbytes=True)

    return make


@dataclass(frozen=True)
class _Codec:
    name: str
    candidates: tuple[tuple[str, Callable[[ModuleType], Decompress]], ...]
    install: str


_CODECS = {
    ZSTD: _Codec(
        "zstd",
        (
            ("compression.zstd", _stdlib_style_zstd),
            ("backports.zstd", _stdlib_style_zstd),
            ("zstandard", _zstandard),
            ("pyarrow", _arrow("zstd")),
        ),
        "backports.zstd (pip install 'aioloader[zstd]'; Python 3.14 has it built in)",
    ),
    SNAPPY: _Codec(
        "snappy",
        (("snappy", _plain("uncompress")), ("pyarrow", _arrow("snappy"))),
        "python-snappy or, on free-threaded builds, pyarrow (pip install 'aioloader[arrayrecord-builtin]')",
    ),
    BROTLI: _Codec(
        "brotli",
        (("brotli", _plain("decompress")), ("pyarrow", _arrow("brotli"))),
        "brotli or pyarrow (pip install 'aioloader[arrayrecord-builtin]')",
    ),
}

# Found once per process; two threads racing here both find the same thing.
_found: dict[int, Decompress] = {}


def decompressor(compression: int, where: str) -> Decompress:
    """The decompressor for Riegeli compression type `compression`.

    Raises ValueError for a type Riegeli does not define and
    ModuleNotFoundError naming the package to install when no candidate
    imports; `where` (a file) opens both messages.
    """
    found = _found.get(compression)
    if found is not None:
        return found
    codec = _CODECS.get(compression)
    if codec is None:
        raise ValueError(f"{where}: unknown Riegeli compression type {compression:#04x}")
    for module_name, make in codec.candidates:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        found = _found[compression] = make(module)
        return found
    names = ", ".join(name for name, _ in codec.candidates)
    raise ModuleNotFoundError(
        f"{where} holds {codec.name}-compressed data, and no {codec.name} decompressor is installed "
        f"(tried {names}): install {codec.install}."
    )


def forget_found() -> None:
    """Look the codecs up again on next use (after installing a package)."""
    _found.clear()
