"""ArrayRecordDataSource: both readers, against files from the official writer.

The files come from `array_record`'s own writer (see `tests/support/arrayrecord_files`):
in this process where it imports (the GIL build), else in the interpreter
that `AIOLOADER_GIL_PYTHON` names (`./dev test` sets it for the free-threaded
session). Every test runs with the built-in reader, and with `array_record`'s
reader where it is installed.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from aioloader import ArrayRecordDataSource, DataLoader, IndexSampler
from aioloader._sources.arrayrecord import compression as compression
from aioloader._sources.arrayrecord.highwayhash import RIEGELI_KEY
from aioloader._sources.arrayrecord.reader import ArrayRecordFile
from aioloader._sources.arrayrecord.riegeli import BLOCK_SIZE, Chunk
from aioloader._sources.arrayrecord.source import READER_ENV, array_record_installed
from aioloader._sources.cache import ByteBoundedCache
from tests.conftest import FREE_THREADED, repeated
from tests.support.arrayrecord_files import ALL, OPTIONS, SHARDS, Spec, offsets_to_damage
from tests.test_highwayhash import IMPLEMENTATIONS, Hash

REPO = Path(__file__).resolve().parent.parent
READERS = ["builtin", "array_record"] if array_record_installed() else ["builtin"]
BY_NAME = {spec.name: spec for spec in ALL}


@pytest.fixture(params=READERS)
def reader(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(autouse=True)
def fresh_codecs() -> object:
    """Codec lookups start afresh, so a test that hides a package cannot leak."""
    compression.forget_found()
    yield
    compression.forget_found()


def paths_of(directory: Path, specs: list[Spec]) -> list[Path]:
    return [directory / spec.file_name for spec in specs]


def expected_of(specs: list[Spec]) -> list[bytes]:
    return [record for spec in specs for record in spec.records()]


@pytest.mark.parametrize("spec", OPTIONS, ids=[spec.name for spec in OPTIONS])
def test_every_record_of_every_writer_option(array_record_dir: Path, spec: Spec, reader: str) -> None:
    expected = spec.records()
    with ArrayRecordDataSource(array_record_dir / spec.file_name, reader=reader) as source:
        assert source.reader == reader
        assert len(source) == len(expected)
        assert [source[key] for key in range(len(source))] == expected
        keys = random.Random(0).choices(range(len(expected)), k=50)
        assert source.__getitems__(keys) == [expected[key] for key in keys]


def test_several_files_are_read_in_the_order_of_paths(array_record_dir: Path, reader: str) -> None:
    for specs in (SHARDS, SHARDS[::-1], [BY_NAME["snappy"], *SHARDS, BY_NAME["large-default"]]):
        source = ArrayRecordDataSource(paths_of(array_record_dir, specs), reader=reader)
        expected = expected_of(specs)
        assert len(source) == len(expected)
        assert source.__getitems__(list(range(len(source)))[::-1]) == expected[::-1]
        assert [source[key] for key in range(len(source))] == expected


@pytest.mark.parametrize("workers", [0, 2, 4])
@pytest.mark.parametrize("names", [["shard-0", "shard-1", "shard-2", "shard-3"], ["large-snappy", "zstd"]])
def test_the_loader_reads_every_record(
    array_record_dir: Path, reader: str, workers: int, names: list[str]
) -> None:
    specs = [BY_NAME[name] for name in names]
    source = ArrayRecordDataSource(paths_of(array_record_dir, specs), reader=reader)
    sampler = IndexSampler(len(source), shuffle=True, num_epochs=2, seed=5)
    expected = expected_of(specs)
    wanted = [expected[key] for key in sampler.record_keys(0, 2 * len(source))]
    assert list(DataLoader(data_source=source, sampler=sampler, worker_count=workers)) == wanted


@repeated
@pytest.mark.parametrize("verify", [True, False], ids=["verified", "unverified"])
def test_many_threads_read_one_source_at_once(
    array_record_dir: Path, reader: str, verify: bool, repeat: int
) -> None:
    names = ("grouped-zstd", "grouped-snappy", "large-snappy", "default")  # chunks that span blocks too
    specs = [BY_NAME[name] for name in names]
    # A small cache, so that threads evict each other's chunks while they read.
    source = ArrayRecordDataSource(
        paths_of(array_record_dir, specs), reader=reader, cache_bytes=60_000, verify_checksums=verify
    )
    expected = expected_of(specs)
    start = threading.Barrier(8)

    def read_randomly(seed: int) -> None:
        rng = random.Random(seed)
        start.wait()
        for _ in range(100):
            keys = rng.choices(range(len(expected)), k=rng.randrange(1, 24))
            got = [source[keys[0]]] if len(keys) == 1 else source.__getitems__(keys)
            assert got == [expected[key] for key in keys]

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(read_randomly, [repeat * 8 + t for t in range(8)]))


def test_getitems_decodes_each_chunk_once(array_record_dir: Path) -> None:
    spec = BY_NAME["grouped-zstd"]  # 16 records per chunk
    source = ArrayRecordDataSource(array_record_dir / spec.file_name, reader="builtin")
    keys = [0, 17, 1, 40, 16, 2, 47]  # chunks 0, 1, 2
    assert source.__getitems__(keys) == [spec.records()[key] for key in keys]
    assert source.cache_statistics()[3:] == (0, 3)  # hits, misses: one decode per chunk
    source.__getitems__(keys)
    assert source.cache_statistics()[3:] == (3, 3)


def test_the_chunk_cache_stays_within_its_bound(array_record_dir: Path) -> None:
    spec = BY_NAME["grouped-uncompressed"]
    bound = 40_000  # about two chunks of this file
    source = ArrayRecordDataSource(array_record_dir / spec.file_name, reader="builtin", cache_bytes=bound)
    expected = spec.records()
    for key in random.Random(1).sample(range(len(expected)), len(expected)):
        assert source[key] == expected[key]
        statistics = source.cache_statistics()
        assert statistics.nbytes <= bound
    assert statistics.entries >= 1
    assert statistics.misses > len(expected) // 16  # chunks were evicted and decoded again


@pytest.mark.parametrize("cut", ["one-kib-short", "last-block", "mid-file", "first-bytes"])
def test_a_truncated_file_is_an_error_naming_it(
    array_record_dir: Path, tmp_path: Path, reader: str, cut: str
) -> None:
    whole = (array_record_dir / BY_NAME["large-default"].file_name).read_bytes()
    size = {"one-kib-short": len(whole) - 1024, "last-block": len(whole) - 65536, "mid-file": len(whole) // 2}
    path = tmp_path / "truncated.array_record"
    path.write_bytes(whole[: size.get(cut, 100)])
    with pytest.raises(ValueError, match=re.escape(str(path))):
        ArrayRecordDataSource(path, reader=reader)


def test_a_file_of_another_format_is_an_error_naming_it(tmp_path: Path, reader: str) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"not an ArrayRecord file\n" * 10_000)
    with pytest.raises(ValueError, match=re.escape(str(path))):
        ArrayRecordDataSource(path, reader=reader)


def test_a_chunk_that_disagrees_with_the_footer_is_an_error(array_record_dir: Path, tmp_path: Path) -> None:
    data = bytearray((array_record_dir / BY_NAME["uncompressed"].file_name).read_bytes())
    first_chunk = 64  # right after the file signature; one record per chunk
    assert data[first_chunk + 24 : first_chunk + 26] == b"r\x01"  # chunk_type 'r', num_records 1
    data[first_chunk + 25] = 2
    path = tmp_path / "damaged.array_record"
    path.write_bytes(bytes(data))
    # Without checksums (the header's hash would fail first), the header is checked against the footer.
    source = ArrayRecordDataSource(path, reader="builtin", verify_checksums=False)
    assert source[1] == BY_NAME["uncompressed"].records()[1]
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))}.*chunk 0 .* 2 records .* footer says 1"):
        source[0]


@pytest.mark.parametrize(
    ("name", "sample"), [("damage-single", None), ("damage-grouped", None), ("damage-spanning", 40)]
)
def test_a_changed_byte_anywhere_is_an_error_naming_the_file_and_offset(
    array_record_dir: Path, tmp_path: Path, reader: str, name: str, sample: int | None
) -> None:
    spec, path = BY_NAME[name], tmp_path / "damaged.array_record"
    whole, expected = (array_record_dir / spec.file_name).read_bytes(), spec.records()
    outcomes: dict[str, int] = {"same records": 0, "error": 0}
    for offset in offsets_to_damage(whole, sample):
        damaged = bytearray(whole)
        damaged[offset] ^= 1 << (offset % 8)  # one bit; each bit position in turn
        path.write_bytes(damaged)
        got = read_all_or_error(path, reader)
        if isinstance(got, str):
            assert str(path) in got, (offset, got)
            assert re.search(r"\bbytes? \d+", got), (offset, got)
            outcomes["error"] += 1
        else:
            assert got == expected, f"a changed bit at byte {offset} gave other records"
            outcomes["same records"] += 1
    assert outcomes["error"] > outcomes["same records"] > 0, outcomes  # padding changes nothing


def every_hash_in(path: Path) -> tuple[list[bytes | memoryview], list[int]]:
    """What each block header, chunk header and chunk data of the file hashes, and the hash
    stored with it: in the signature, every data chunk, the footer and the postscript."""
    whole = path.read_bytes()
    file = ArrayRecordFile(str(path), ByteBoundedCache(0), verify_checksums=False)
    starts = [0, *file._offsets.tolist(), int(file._ends[-1]), len(whole) - BLOCK_SIZE]
    file.close()
    checks = [
        check
        for begin, end in zip(starts, [*starts[1:], len(whole)], strict=True)
        for check in Chunk(whole[begin:end], begin).checks()
    ]
    return [hashed for _, hashed, _ in checks], [expected for _, _, expected in checks]


@pytest.mark.parametrize("hash_many", IMPLEMENTATIONS)
def test_every_hash_of_every_official_file_matches(array_record_dir: Path, hash_many: Hash) -> None:
    for spec in ALL:
        messages, expected = every_hash_in(array_record_dir / spec.file_name)
        assert len(messages) >= 8, spec.name  # 3 in the signature and the postscript, 2 in the footer
        assert hash_many(messages, RIEGELI_KEY) == expected, spec.name


def read_all_or_error(path: Path, reader: str) -> list[bytes] | str:
    """Every record of the file, or the message of the ValueError that reading it raised."""
    try:
        with ArrayRecordDataSource(path, reader=reader) as source:
            return source.__getitems__(list(range(len(source))))
    except ValueError as error:
        return str(error)


def test_without_checksums_a_changed_value_goes_unseen(array_record_dir: Path, tmp_path: Path) -> None:
    spec = BY_NAME["damage-single"]
    whole, expected = (array_record_dir / spec.file_name).read_bytes(), spec.records()
    at = whole.index(expected[-1][-10:])  # inside the last record's value, stored uncompressed
    damaged = bytearray(whole)
    damaged[at] ^= 0x20
    path = tmp_path / "damaged.array_record"
    path.write_bytes(damaged)
    unverified = ArrayRecordDataSource(path, reader="builtin", verify_checksums=False)
    assert unverified.verify_checksums is False
    assert unverified[len(expected) - 1] != expected[-1]  # what the opt-out costs
    verified = ArrayRecordDataSource(path, reader="builtin")
    assert verified.verify_checksums is True
    assert verified.__getitems__([0, 1, 2]) == expected[:3]  # other chunks stay readable
    record = len(expected) - 1
    message = (
        rf"`{re.escape(str(path))}`: chunk {record} \(record {record}\) at byte \d+ is damaged: "
        r"the chunk data \(bytes \d+ to \d+\) does not match its hash"
    )
    with pytest.raises(ValueError, match=message):
        verified[record]


def test_the_loader_names_the_damaged_file_and_record(array_record_dir: Path, tmp_path: Path) -> None:
    spec = BY_NAME["damage-grouped"]
    whole = bytearray((array_record_dir / spec.file_name).read_bytes())
    whole[200] ^= 0x10  # inside the second chunk (records 3 to 5)
    path = tmp_path / "damaged.array_record"
    path.write_bytes(whole)
    source = ArrayRecordDataSource(path, reader="builtin")
    loader = DataLoader(data_source=source, sampler=IndexSampler(len(source), num_epochs=1), worker_count=2)
    records = iter(loader)
    got = [next(records) for _ in range(3)]
    assert got == spec.records()[:3]  # everything before the damaged chunk, in order
    with pytest.raises(
        ValueError, match=rf"{re.escape(str(path))}.*chunk 1 \(records 3 to 5\) at byte"
    ) as caught:
        next(records)
    assert "index=3, record_key=3" in "".join(caught.value.__notes__)


def test_verify_checksums_must_be_a_bool(array_record_dir: Path) -> None:
    with pytest.raises(TypeError, match="`verify_checksums` must be a bool, got 'no'"):
        ArrayRecordDataSource(array_record_dir / BY_NAME["default"].file_name, verify_checksums="no")


def test_a_missing_codec_names_the_package_and_the_file(
    array_record_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in ("compression.zstd", "backports.zstd", "zstandard", "pyarrow"):
        monkeypatch.setitem(sys.modules, module, None)  # `import module` now raises ImportError
    path = array_record_dir / BY_NAME["zstd"].file_name
    with pytest.raises(ModuleNotFoundError, match=rf"{re.escape(str(path))}.*zstd.*backports\.zstd"):
        ArrayRecordDataSource(path, reader="builtin")


@pytest.mark.skipif(not FREE_THREADED, reason="only a free-threaded build can turn the GIL back on")
def test_the_codecs_keep_the_gil_off() -> None:
    # A fresh interpreter without PYTHON_GIL=0, so that an extension module
    # not marked free-threading-safe would turn the GIL on (and warn).
    code = (
        "import sys; "
        "from aioloader._sources.arrayrecord.compression import decompressor, ZSTD, SNAPPY, BROTLI; "
        "[decompressor(c, 'test') for c in (ZSTD, SNAPPY, BROTLI)]; print(sys._is_gil_enabled())"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"} | {"PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], env=env, capture_output=True, text=True
    )
    assert (done.returncode, done.stdout.strip()) == (0, "False"), done.stderr


def test_the_reader_is_chosen_by_argument_then_environment(
    array_record_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = array_record_dir / BY_NAME["default"].file_name
    monkeypatch.setenv(READER_ENV, "builtin")
    assert ArrayRecordDataSource(path).reader == "builtin"
    monkeypatch.setenv(READER_ENV, "fast")
    with pytest.raises(ValueError, match=READER_ENV):
        ArrayRecordDataSource(path)
    monkeypatch.delenv(READER_ENV)
    assert ArrayRecordDataSource(path).reader == READERS[-1]
    with pytest.raises(ValueError, match="`reader` must be one of"):
        ArrayRecordDataSource(path, reader="fast")


@pytest.mark.skipif(array_record_installed(), reason="array_record is installed here")
def test_asking_for_array_record_where_it_does_not_install(array_record_dir: Path) -> None:
    with pytest.raises(ModuleNotFoundError, match="reader='builtin'"):
        ArrayRecordDataSource(array_record_dir / BY_NAME["default"].file_name, reader="array_record")


@pytest.mark.skipif(len(READERS) < 2, reason="needs both readers")
def test_a_checkpoint_moves_between_readers(array_record_dir: Path) -> None:
    paths = paths_of(array_record_dir, SHARDS)
    sampler = IndexSampler(sum(spec.count for spec in SHARDS), shuffle=True, seed=3, num_epochs=1)

    def loader(reader: str) -> DataLoader:
        return DataLoader(
            data_source=ArrayRecordDataSource(paths, reader=reader), sampler=sampler, worker_count=2
        )

    with iter(loader("array_record")) as first:
        head = [next(first) for _ in range(30)]
        state = first.get_state()
    with iter(loader("builtin")) as second:
        second.set_state(state)
        tail = list(second)
    assert head + tail == list(loader("builtin"))


def test_bad_arguments_are_named(array_record_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="`paths` must name at least one file"):
        ArrayRecordDataSource([])
    with pytest.raises(FileNotFoundError, match=r"`paths\[1\]` is not a file"):
        ArrayRecordDataSource([array_record_dir / BY_NAME["default"].file_name, tmp_path / "missing"])
    with pytest.raises(TypeError, match="`paths`"):
        ArrayRecordDataSource(42)
    with pytest.raises(ValueError, match="`cache_bytes`"):
        ArrayRecordDataSource(array_record_dir / BY_NAME["default"].file_name, cache_bytes=-1)


def test_keys_outside_the_source_are_index_errors(array_record_dir: Path, reader: str) -> None:
    source = ArrayRecordDataSource(array_record_dir / BY_NAME["default"].file_name, reader=reader)
    for key in (-1, len(source)):
        with pytest.raises(IndexError, match=r"`key` must be in \[0, 120\)"):
            source[key]
    with pytest.raises(IndexError, match="`keys`"):
        source.__getitems__([0, 120])


def test_repr_names_the_files_and_the_reader(array_record_dir: Path) -> None:
    source = ArrayRecordDataSource(paths_of(array_record_dir, SHARDS), reader="builtin")
    assert repr(source).startswith("ArrayRecordDataSource([")
    assert "1 more], reader='builtin')" in repr(source)


def test_a_closed_source_cannot_be_read(array_record_dir: Path) -> None:
    source = ArrayRecordDataSource(array_record_dir / BY_NAME["default"].file_name, reader="builtin")
    source.close()
    source.close()  # idempotent
    with pytest.raises(ValueError, match="was closed"):
        source[0]
