"""CRC-32C (Castagnoli), masked as TFRecord files store it.

The `crc32c` package (the `tfrecord` extra: wheels for every build, free-threaded
ones included, about 16 GB/s here) computes it where it is installed; else a table
in plain Python does, at 8-10 MB/s (3.11, 3.13t): correct, and slow for large
records, so its first use logs a WARNING that says so.
"""

from __future__ import annotations

from collections.abc import Callable

_POLYNOMIAL = 0x82F63B78  # Castagnoli's, bit-reversed
_MASK_DELTA = 0xA282EAD8  # TFRecord's mask: the checksum rotated right by 15, plus this
_U32 = 0xFFFFFFFF


def _table() -> tuple[int, ...]:
    rows = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (_POLYNOMIAL if crc & 1 else 0)
        rows.append(crc)
    return tuple(rows)


_TABLE = _table()


def crc32c_python(data: bytes) -> int:
    """CRC-32C of `data`, byte by byte."""
    crc, table = _U32, _TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ _U32


def _native() -> Callable[[bytes], int] | None:
    try:
        import crc32c as package
    except ImportError:
        return None
    native: Callable[[bytes], int] = package.crc32c
    return native


def _python_warning_once(data: bytes) -> int:
    """`crc32c_python`, after one WARNING (the first call) that it is slow."""
    global crc32c
    crc32c = crc32c_python
    import logging  # here: `import aioloader` leaves logging out

    logging.getLogger("aioloader").warning(
        "TFRecord checksums are computed in plain Python (about 10 MB/s): install the `crc32c` "
        "package (pip install 'aioloader[tfrecord]'), or pass verify_checksums=False for storage you trust."
    )
    return crc32c_python(data)


_NATIVE = _native()
crc32c: Callable[[bytes], int] = _NATIVE or _python_warning_once  # for data of any size
crc32c_small: Callable[[bytes], int] = _NATIVE or crc32c_python  # for a few bytes: no warning


def masked_crc32c(data: bytes, crc: Callable[[bytes], int] | None = None) -> int:
    """The checksum of `data` as a TFRecord stores it (by `crc`, else the fastest here)."""
    value = (crc or crc32c)(data)
    return ((((value >> 15) | (value << 17)) & _U32) + _MASK_DELTA) & _U32
