"""`distinct`, the sorted distinct blocks of a read, as `np.unique` gives them."""

from __future__ import annotations

import numpy as np
import pytest

from aioloader._sources.keys import KeyIndex, distinct
from tests.test_lazy_imports import last_line_after


@pytest.mark.parametrize("seed", range(20))
def test_distinct_is_np_unique(seed: int) -> None:
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, int(rng.integers(1, 50)), size=int(rng.integers(0, 300)), dtype=np.int64)
    assert distinct(blocks) == np.unique(blocks).tolist()
    assert all(type(block) is int for block in distinct(blocks))


def test_distinct_of_the_blocks_of_keys() -> None:
    blocks, _ = KeyIndex([3, 3, 2]).locate_many([7, 0, 4, 1, 7, 3])
    assert distinct(blocks) == [0, 1, 2]
    assert distinct(np.zeros(0, dtype=np.int64)) == []


def test_distinct_leaves_numpy_ma_unloaded() -> None:
    # np.unique's first call imports numpy.ma (~25 ms), paid before a loader's first batch.
    code = "import numpy as np\nfrom aioloader._sources.keys import distinct\ndistinct(np.array([2, 1, 2]))"
    assert last_line_after(code, "print('numpy.ma' in sys.modules)") == "False"
