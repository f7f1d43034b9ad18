"""`experimental.TFRecordIterDataset`: TFRecord files read record by record, both checksums verified.

The official file is Grain's test data, written by TensorFlow's writer (read where
Grain is installed, and compared with Grain's reader); the others are written here
by the format's definition: length, its masked CRC-32C, data, its masked CRC-32C.
"""

from __future__ import annotations

import logging
import os
import random
import struct
import threading
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import pytest

import aioloader as al
from aioloader._sources import crc32c as checksums
from aioloader.experimental import TFRecordIterDataset, assert_equal_output_after_checkpoint

MORRIS = [b"1", b"1 1", b"2 1", b"1 2 1 1", b"1 1 1 2 2 1"]


def write_tfrecord(path: Path, records: Sequence[bytes]) -> list[int]:
    """Write `records` as a TFRecord file; the offset of each record."""
    offsets, position = [], 0
    with open(path, "wb") as file:
        for data in records:
            length = struct.pack("<Q", len(data))
            framed = length + struct.pack("<I", checksums.masked_crc32c(length)) + data
            framed += struct.pack("<I", checksums.masked_crc32c(data))
            file.write(framed)
            offsets.append(position)
            position += len(framed)
    return offsets


def flip(data: bytes, at: int) -> bytes:
    """`data` with one bit of byte `at` flipped."""
    return data[:at] + bytes([data[at] ^ 0x10]) + data[at + 1 :]


def records(count: int, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    sizes = [0, 1, 4, 100_000, *(rng.randrange(0, 3000) for _ in range(count - 4))]
    return [rng.randbytes(size) for size in sizes]


def morris(grain: ModuleType) -> Path:
    return Path(grain.__file__).parent / "_src" / "python" / "testdata" / "morris_sequence_first_5.tfrecord"


def test_tensorflows_file_reads_as_grain_reads_it(grain: ModuleType) -> None:
    path = morris(grain)
    assert list(grain.experimental.TFRecordIterDataset(str(path))) == MORRIS
    assert list(TFRecordIterDataset(path)) == MORRIS
    assert_equal_output_after_checkpoint(TFRecordIterDataset(str(path)))


def test_records_of_every_size_come_back_in_order_and_resume_anywhere(tmp_path: Path) -> None:
    written = records(40)
    write_tfrecord(tmp_path / "a.tfrecord", written)
    ds = TFRecordIterDataset(tmp_path / "a.tfrecord")
    assert list(ds) == written
    assert_equal_output_after_checkpoint(ds)
    # In a pipeline: parsed and batched after it, resumed from a state taken mid-way.
    pipeline = ds.map(len).batch(8, batch_fn=list)
    iterator = iter(pipeline)
    first = [next(iterator) for _ in range(2)]
    resumed = iter(pipeline)
    resumed.set_state(iterator.get_state())
    assert first + list(resumed) == list(pipeline)


def test_an_empty_file_has_no_records_and_a_missing_one_fails_when_read(tmp_path: Path) -> None:
    (tmp_path / "empty.tfrecord").write_bytes(b"")
    assert list(TFRecordIterDataset(tmp_path / "empty.tfrecord")) == []
    missing = TFRecordIterDataset(tmp_path / "missing.tfrecord")  # made: opened at the first element
    with pytest.raises(FileNotFoundError, match=r"missing\.tfrecord"):
        list(missing)


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        (lambda b, at: b[: at + 3], r"record 2 \(at byte {at}\) ends inside its header \(3 of 12 bytes\)"),
        (lambda b, at: b[: at + 15], r"record 2 \(at byte {at}\) ends inside it \(3 of"),
        (
            lambda b, at: flip(b, at + 1),
            r"record 2 \(at byte {at}\) has a length that does not match its checksum",
        ),
        (lambda b, at: flip(b, at + 13), r"record 2 \(at byte {at}\) does not match its checksum"),
        (lambda b, at: flip(b, len(b) - 1), r"record 4 \(at byte \d+\) does not match its checksum"),
    ],
)
def test_a_damaged_file_gives_the_records_before_then_an_error_naming_it(
    tmp_path: Path, damage: object, match: str
) -> None:
    path = tmp_path / "damaged.tfrecord"
    written = [b"alpha", b"beta", b"gamma" * 10, b"delta", b"epsilon"]
    offsets = write_tfrecord(path, written)
    path.write_bytes(damage(path.read_bytes(), offsets[2]))  # type: ignore[operator]
    got: list[bytes] = []
    with pytest.raises(ValueError, match=f"'{path}' is damaged: " + match.format(at=offsets[2])):
        got.extend(TFRecordIterDataset(path))
    assert got == written[: len(got)]  # what came before the damage came whole, in order
    assert len(got) in (2, 4)


def test_a_file_that_is_not_tfrecord_is_refused_at_its_first_record(tmp_path: Path) -> None:
    path = tmp_path / "text.tfrecord"
    path.write_bytes(b"this is not a TFRecord file at all\n" * 4)
    with pytest.raises(ValueError, match=r"record 0 \(at byte 0\) has a length that does not match"):
        next(iter(TFRecordIterDataset(path)))


def test_a_state_resumes_only_its_file_at_an_offset_inside_it(tmp_path: Path) -> None:
    write_tfrecord(tmp_path / "a.tfrecord", [b"x"] * 3)
    write_tfrecord(tmp_path / "b.tfrecord", [b"x"] * 3)
    iterator = iter(TFRecordIterDataset(tmp_path / "a.tfrecord"))
    next(iterator)
    state = iterator.get_state()
    with pytest.raises(ValueError, match=r"'a\.tfrecord'.* 'b\.tfrecord'"):
        iter(TFRecordIterDataset(tmp_path / "b.tfrecord")).set_state(state)
    past = {**state, "dataset": {**state["dataset"], "offset": 10**6}}
    with pytest.raises(ValueError, match="past the end"):
        iter(TFRecordIterDataset(tmp_path / "a.tfrecord")).set_state(past)
    negative = {**state, "dataset": {**state["dataset"], "offset": -1}}
    with pytest.raises(ValueError, match="offset=-1"):
        iter(TFRecordIterDataset(tmp_path / "a.tfrecord")).set_state(negative)
    mixed = iter(al.IterDataset.mix([TFRecordIterDataset(tmp_path / "a.tfrecord")]))
    with pytest.raises(ValueError, match="must be the state of a mix stage"):
        mixed.set_state(state)


def test_a_close_from_another_thread_ends_the_run(tmp_path: Path) -> None:
    write_tfrecord(tmp_path / "big.tfrecord", [bytes(1000)] * 20_000)
    iterator = iter(TFRecordIterDataset(tmp_path / "big.tfrecord"))
    next(iterator)
    closer = threading.Thread(target=iterator.close)
    closer.start()
    closer.join()
    assert list(iterator) == []


def test_bad_arguments_are_named() -> None:
    with pytest.raises(TypeError, match="`path`"):
        TFRecordIterDataset(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="NUL"):
        TFRecordIterDataset("a\x00b")
    with pytest.raises(TypeError, match="`verify_checksums`"):
        TFRecordIterDataset("a", verify_checksums=1)  # type: ignore[arg-type]


def test_without_verification_a_changed_byte_passes_but_a_broken_frame_does_not(tmp_path: Path) -> None:
    path = tmp_path / "a.tfrecord"
    offsets = write_tfrecord(path, [b"alpha", b"beta"])
    intact = path.read_bytes()
    path.write_bytes(flip(intact, offsets[1] + 13))  # a byte of "beta"
    assert list(TFRecordIterDataset(path, verify_checksums=False)) == [b"alpha", b"buta"]
    path.write_bytes(flip(intact, offsets[1] + 2))  # a byte of its length
    with pytest.raises(ValueError, match="length that does not match"):
        list(TFRecordIterDataset(path, verify_checksums=False))


def test_plain_python_checksums_warn_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    write_tfrecord(tmp_path / "a.tfrecord", [b"alpha", b"beta"])
    monkeypatch.setattr(checksums, "crc32c", checksums._python_warning_once)
    with caplog.at_level(logging.WARNING, logger="aioloader"):
        assert list(TFRecordIterDataset(tmp_path / "a.tfrecord")) == [b"alpha", b"beta"]
        assert list(TFRecordIterDataset(tmp_path / "a.tfrecord")) == [b"alpha", b"beta"]
    assert [r.getMessage()[:60] for r in caplog.records] == [
        "TFRecord checksums are computed in plain Python (about 10 MB"
    ]


def test_both_checksum_implementations_agree() -> None:
    assert checksums.crc32c_python(b"123456789") == 0xE3069283  # the standard check value
    data = [os.urandom(n) for n in (0, 1, 7, 64, 1000, 4097)]
    expected = [checksums.crc32c_python(d) for d in data]
    if checksums._NATIVE is None:
        pytest.skip("the `crc32c` package is not installed here (the tfrecord extra): one implementation")
    assert [checksums._NATIVE(d) for d in data] == expected


@pytest.mark.parametrize("length", [13, 1 << 31, 1 << 40, (1 << 63) + 5, (1 << 64) - 1])
def test_a_length_longer_than_the_file_is_refused_before_it_is_read(tmp_path: Path, length: int) -> None:
    """A length whose checksum matches (by chance, or written so) but which the file cannot
    hold: an error naming the file, before any read of that size is tried."""
    path = tmp_path / "long.tfrecord"
    offsets = write_tfrecord(path, [b"first", b"second"])
    header = struct.pack("<Q", length)
    forged = header + struct.pack("<I", checksums.masked_crc32c(header)) + b"twelve bytes" + b"\x00" * 4
    path.write_bytes(path.read_bytes() + forged)
    got: list[bytes] = []
    match = rf"record 2 \(at byte {offsets[1] + 22}\) ends inside it \(16 of its {length + 4} bytes"
    with pytest.raises(ValueError, match=match):
        got.extend(TFRecordIterDataset(path, verify_checksums=False))
    assert got == [b"first", b"second"]


def test_a_resumed_run_names_the_damaged_record_by_its_number_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "damaged.tfrecord"
    offsets = write_tfrecord(path, [b"alpha", b"beta", b"gamma", b"delta"])
    path.write_bytes(flip(path.read_bytes(), offsets[3] + 13))
    first = iter(TFRecordIterDataset(path))
    assert [next(first), next(first)] == [b"alpha", b"beta"]
    state = first.get_state()
    assert state["dataset"]["record"] == 2
    resumed = iter(TFRecordIterDataset(path))
    resumed.set_state(state)
    assert next(resumed) == b"gamma"
    with pytest.raises(ValueError, match=rf"record 3 \(at byte {offsets[3]}\) does not match its checksum"):
        next(resumed)
    # A state saved before states held the number still resumes; messages then say "a record".
    older = {**state, "dataset": {k: v for k, v in state["dataset"].items() if k != "record"}}
    resumed = iter(TFRecordIterDataset(path))
    resumed.set_state(older)
    assert next(resumed) == b"gamma"
    with pytest.raises(ValueError, match=rf"a record \(at byte {offsets[3]}\) does not match"):
        next(resumed)


@pytest.mark.parametrize("record", [-1, "2", True, 2.0])
def test_a_state_with_a_bad_record_number_is_refused(tmp_path: Path, record: object) -> None:
    write_tfrecord(tmp_path / "a.tfrecord", [b"x"] * 3)
    iterator = iter(TFRecordIterDataset(tmp_path / "a.tfrecord"))
    next(iterator)
    state = iterator.get_state()
    state["dataset"]["record"] = record
    with pytest.raises(ValueError, match=r"`state` has record="):
        iter(TFRecordIterDataset(tmp_path / "a.tfrecord")).set_state(state)


def test_a_state_resumes_only_where_a_record_starts(tmp_path: Path) -> None:
    """Every offset of the file is tried: the starts of records and the file's end resume,
    every other offset (inside a header, inside data) is refused before a record is read."""
    path = tmp_path / "a.tfrecord"
    written = records(12, seed=3)[4:]  # small records: every offset of the file is tried
    offsets = write_tfrecord(path, written)
    size = path.stat().st_size
    state = iter(TFRecordIterDataset(path)).get_state()
    starts = [*offsets, size]
    for offset in range(size + 1):
        state["dataset"].update(offset=offset, record=None)
        iterator = iter(TFRecordIterDataset(path))
        if offset in starts:
            iterator.set_state(state)
            assert list(iterator) == written[starts.index(offset) :]
        else:
            with pytest.raises(ValueError, match=rf"offset={offset}, where no record of '{path}' starts"):
                iterator.set_state(state)


def test_a_pipe_a_device_or_a_folder_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.tfrecord"
    os.mkfifo(fifo)  # no writer: a blocking open would hang here
    for path in (fifo, Path(os.devnull), tmp_path):
        with pytest.raises(ValueError, match=f"'{path}' is not a regular file"):
            next(iter(TFRecordIterDataset(path)))


def test_a_path_that_is_empty_or_whose_fspath_lies_is_named() -> None:
    class Lying:
        def __fspath__(self) -> object:
            return 3

    with pytest.raises(TypeError, match=r"`path` .* is not a usable path"):
        TFRecordIterDataset(Lying())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`path` is empty"):
        TFRecordIterDataset("")
