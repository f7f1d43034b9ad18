"""LocalBlob: a close from another thread while a read is in flight."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from aioloader._sources.storage import blobs
from aioloader._sources.storage.blobs import LocalBlob


class PausingOs:
    """`os` for the blobs module, whose `pread` in thread `reader` waits, once it has its
    descriptor, until the test lets it go on: the interleaving a switch may make."""

    def __init__(self) -> None:
        self.in_read, self.go_on = threading.Event(), threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        if threading.current_thread().name == "reader":
            self.in_read.set()
            assert self.go_on.wait(10)
        return os.pread(fd, size, offset)


def test_a_close_during_a_read_waits_for_it_and_no_other_file_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a").write_bytes(b"A" * 64)
    (tmp_path / "b").write_bytes(b"B" * 64)
    paused = PausingOs()
    monkeypatch.setattr(blobs, "os", paused)
    blob = LocalBlob(str(tmp_path / "a"))
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(blob.read(0, 8)), name="reader")
    reader.start()
    assert paused.in_read.wait(10)
    blob.close()  # another thread closes the file under the read ...
    assert blob.closed
    other = LocalBlob(str(tmp_path / "b"))  # ... and opens the next: a closed number would be reused
    paused.go_on.set()
    reader.join(10)
    assert got == [b"A" * 8]
    with pytest.raises(ValueError, match=r"`.*/a` was closed"):
        blob.read(0, 8)
    assert other.read(0, 4) == b"BBBB"
    other.close()
    with pytest.raises(OSError, match="Bad file descriptor"):  # closed once the read was done
        os.fstat(blob._fd)


def test_close_is_idempotent_and_reads_after_it_name_the_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"xyz")
    blob = LocalBlob(str(tmp_path / "f"))
    assert (blob.size, blob.read(1, 5)) == (3, b"yz")
    blob.close()
    blob.close()
    with pytest.raises(ValueError, match="was closed"):
        blob.read(0, 1)
