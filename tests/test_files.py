"""FilesDataSource: whole files through `for` and `async for`, with bounded reads in flight."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from aioloader import AsyncDataSource, DataLoader, FilesDataSource, IndexSampler, ReadOptions
from tests.support.outputs import collect_async


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], list[bytes]]:
    """40 files: empty, small and a few of 100 KiB, each with distinct bytes."""
    directory = tmp_path_factory.mktemp("files")
    contents = [
        f"file {i}\n".encode() * (0 if i % 13 == 0 else 12_000 if i % 7 == 0 else i) for i in range(40)
    ]
    paths = [directory / f"{i:02}.bin" for i in range(40)]
    for path, content in zip(paths, contents, strict=True):
        path.write_bytes(content)
    return paths, contents


class CountingFiles(FilesDataSource):
    """Counts reads in flight; one coroutine at a time runs on the loop, so plain ints do."""

    def __init__(self, paths: list[Path]) -> None:
        super().__init__(paths)
        self.in_flight = self.most_in_flight = 0

    async def aget(self, key: int) -> bytes:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            return await super().aget(key)
        finally:
            self.in_flight -= 1


def loader_of(source: FilesDataSource, workers: int, **kwargs: object) -> tuple[DataLoader, list[int]]:
    sampler = IndexSampler(len(source), shuffle=True, seed=4, num_epochs=1)
    keys = sampler.record_keys(0, len(source))
    return DataLoader(data_source=source, sampler=sampler, worker_count=workers, **kwargs), keys  # type: ignore[arg-type]


def test_it_is_an_async_source(files: tuple[list[Path], list[bytes]]) -> None:
    source = FilesDataSource(files[0])
    assert isinstance(source, AsyncDataSource)
    assert len(source) == 40
    assert source[3] == files[1][3]
    assert asyncio.run(source.aget(7)) == files[1][7]


@pytest.mark.parametrize("workers", [0, 2])
def test_for_reads_every_file(files: tuple[list[Path], list[bytes]], workers: int) -> None:
    loader, keys = loader_of(FilesDataSource(files[0]), workers)
    assert list(loader) == [files[1][key] for key in keys]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.asyncio
async def test_async_for_reads_every_file(files: tuple[list[Path], list[bytes]], workers: int) -> None:
    loader, keys = loader_of(FilesDataSource(files[0]), workers)
    assert await collect_async(loader) == [files[1][key] for key in keys]


@pytest.mark.parametrize("num_threads", [1, 3, 8])
@pytest.mark.parametrize("workers", [0, 2])
def test_reads_in_flight_are_bounded_by_num_threads(
    files: tuple[list[Path], list[bytes]], num_threads: int, workers: int
) -> None:
    source = CountingFiles(files[0])
    loader, keys = loader_of(source, workers, read_options=ReadOptions(num_threads=num_threads))
    assert list(loader) == [files[1][key] for key in keys]
    # Chunks after the first hold more keys than that, so the bound is reached, and never passed.
    assert source.most_in_flight == num_threads


def test_a_missing_file_is_an_error_naming_it(files: tuple[list[Path], list[bytes]], tmp_path: Path) -> None:
    missing = tmp_path / "gone.bin"
    source = FilesDataSource([*files[0][:5], missing])  # not checked until read: starting stays instant
    loader = DataLoader(data_source=source, sampler=IndexSampler(6, num_epochs=1), worker_count=0)
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing))):
        list(loader)


def test_bad_arguments_and_keys_are_named(files: tuple[list[Path], list[bytes]]) -> None:
    with pytest.raises(ValueError, match="`paths` must name at least one file"):
        FilesDataSource(())
    with pytest.raises(TypeError, match=r"`paths\[1\]`"):
        FilesDataSource([files[0][0], 3])
    source = FilesDataSource(files[0])
    with pytest.raises(IndexError, match=r"`key` must be in \[0, 40\), got 40"):
        asyncio.run(source.aget(40))
    with pytest.raises(IndexError, match=r"got -1"):
        source[-1]
    assert repr(source).startswith("FilesDataSource([")
    assert "37 more" in repr(source)


@pytest.mark.parametrize("url", ["s3://bucket", "s3://bucket/"])
def test_a_url_with_no_key_is_refused_when_the_source_is_made(
    files: tuple[list[Path], list[bytes]], url: str
) -> None:
    # Not at the first read of it, thousands of steps into a run.
    with pytest.raises(
        ValueError, match=re.escape(f"`paths[1]` must be an s3://bucket/key URL, got {url!r}")
    ):
        FilesDataSource([files[0][0], url], storage_options={"anon": True})


@pytest.mark.parametrize("key", [1.0, "2", True, None])
def test_keys_that_are_not_integers_are_type_errors(
    files: tuple[list[Path], list[bytes]], key: object
) -> None:
    source = FilesDataSource(files[0])
    with pytest.raises(TypeError, match="`key` must be an integer"):
        source[key]  # type: ignore[index]
    with pytest.raises(TypeError, match="`key` must be an integer"):
        asyncio.run(source.aget(key))  # type: ignore[arg-type]
