"""The real Grain 0.2.18 as the reference, where it is installed (the 3.11 test session).

Grain has no free-threaded wheels, so on the other builds the tests that
compare with it skip, saying why.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest


def grain_python() -> ModuleType:
    """`grain.python`, or a skip that says why it is not here."""
    try:
        import grain.python as gp
    except ImportError as error:
        pytest.skip(f"needs Grain 0.2.18 (installed in the 3.11 test session only): {error}")
    return gp


def grain_index_shuffle() -> Callable[[int, int, int, int], int]:
    """Grain's C++ index_shuffle, or a skip that says why it is not here."""
    grain_python()
    from grain._src.python.experimental.index_shuffle.python import index_shuffle_module

    function: Callable[[int, int, int, int], int] = index_shuffle_module.index_shuffle
    return function
