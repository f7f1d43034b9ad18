"""The work of `interpreters_bench`, in a module of its own: subinterpreters import
functions by module name, and the benchmark itself runs as `__main__`."""

from __future__ import annotations

import pickle

LOOP = 1_000


def spin(record: int) -> int:
    """Pure-Python work on small ints only (no shared, refcounted constants): about 40 us."""
    total = 0
    for i in range(LOOP):
        total += (i ^ record) & 7
    return total


def spin_range(request: bytes) -> bytes:
    """`spin` over `range(*request)`, for a subinterpreter (bytes in, bytes out)."""
    start, stop = pickle.loads(request)
    return pickle.dumps(sum(spin(r) for r in range(start, stop)))
