"""`InMemoryDataSource`: Grain's names, reprs, `close()` and `unlink()`, over elements of any type."""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np
import pytest

import aioloader as al
from tests.grain_reference import grain_python


def test_str_and_repr_equal_grains() -> None:
    gp = grain_python()
    elements = [1, "two", b"three", 4.5, None]
    theirs = gp.InMemoryDataSource(elements, name="aioloader_repr_test")
    try:
        ours = al.InMemoryDataSource(elements, name="aioloader_repr_test")
        assert str(ours) == str(theirs) == "InMemoryDataSource(name=aioloader_repr_test, len=5)"
        assert repr(ours) == repr(theirs)
    finally:
        theirs.close()
        theirs.unlink()


def test_a_made_up_name_looks_like_grains() -> None:
    gp = grain_python()
    theirs = gp.InMemoryDataSource([1])
    try:
        assert al.InMemoryDataSource([1]).name[:4] == theirs.shm.name[:4] == "psm_"
    finally:
        theirs.close()
        theirs.unlink()


def test_elements_of_any_type_are_read_without_a_copy() -> None:
    arrays = [np.arange(3), {"a": 1}, (b"x", "y")]
    source = al.InMemoryDataSource(arrays)
    assert source[0] is arrays[0]
    assert source.__getitems__([2, 1]) == [arrays[2], arrays[1]]
    assert len(source) == 3


def test_close_ends_this_sources_reads_only() -> None:
    first = al.InMemoryDataSource([10, 20], name="aioloader_close_test")
    second = al.InMemoryDataSource(name="aioloader_close_test")  # attached, as in Grain
    first.close()
    first.close()  # idempotent
    with pytest.raises(ValueError, match="'aioloader_close_test' is closed"):
        first[0]
    assert second[1] == 20
    assert str(first) == "InMemoryDataSource(name=aioloader_close_test, len=closed)"
    second.unlink()


def test_unlink_removes_the_name_and_open_sources_keep_reading() -> None:
    source = al.InMemoryDataSource([1, 2, 3], name="aioloader_unlink_test")
    source.unlink()
    with pytest.raises(FileNotFoundError, match="aioloader_unlink_test"):
        al.InMemoryDataSource(name="aioloader_unlink_test")
    with pytest.raises(FileNotFoundError):
        source.unlink()
    assert source[2] == 3
    again = al.InMemoryDataSource([4], name="aioloader_unlink_test")  # the name is free again
    assert again[0] == 4
    again.unlink()


@pytest.mark.parametrize("module", ["grain", "aioloader"])
def test_close_then_unlink_as_grains_users_write_it(module: str) -> None:
    pg: Any = grain_python() if module == "grain" else al
    source = pg.InMemoryDataSource([1, 2], name=f"aioloader_close_unlink_{os.getpid()}")
    assert source[1] == 2
    source.close()
    source.unlink()  # the last source of the name is closed: the name goes all the same
    with pytest.raises(FileNotFoundError):
        source.unlink()


def test_a_name_in_use_and_no_name_nor_elements_are_grains_errors() -> None:
    source = al.InMemoryDataSource([1], name="aioloader_exists_test")
    with pytest.raises(FileExistsError, match="aioloader_exists_test"):
        al.InMemoryDataSource([2], name="aioloader_exists_test")
    with pytest.raises(ValueError, match="`elements` or `name` must be given"):
        al.InMemoryDataSource()
    source.unlink()


# Grain's SharedMemoryDataSource.__del__ fails on an object its __init__ refused.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda gp: gp.InMemoryDataSource(), ValueError),
        (lambda gp: gp.InMemoryDataSource(name="aioloader_never_made"), FileNotFoundError),
    ],
    ids=["neither", "unknown-name"],
)
def test_grain_raises_those_types_too(call: Any, error: type) -> None:
    with pytest.raises(error):
        call(grain_python())


def test_a_name_is_released_when_its_last_source_is_collected() -> None:
    al.InMemoryDataSource([1], name="aioloader_collected_test")
    source = al.InMemoryDataSource([2], name="aioloader_collected_test")  # the first one is gone
    assert source[0] == 2
    source.unlink()


@pytest.mark.parametrize("workers", [0, 3])
def test_a_loader_reads_it_from_every_thread(workers: int) -> None:
    elements = [f"record {i}" for i in range(100)]
    loader = al.DataLoader(
        data_source=al.InMemoryDataSource(elements),
        sampler=al.IndexSampler(100, shuffle=True, num_epochs=1, seed=2),
        worker_count=workers,
    )
    assert sorted(loader) == sorted(elements)


def test_sources_are_made_and_unlinked_from_many_threads() -> None:
    errors: list[BaseException] = []

    def churn(thread: int) -> None:
        try:
            for i in range(200):
                source = al.InMemoryDataSource([thread, i], name=f"aioloader_churn_{thread}")
                assert al.InMemoryDataSource(name=f"aioloader_churn_{thread}")[1] == i
                source.unlink()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=churn, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
