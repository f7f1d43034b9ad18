"""ArrayRecord test files, written by the official `array_record` writer.

The writer only installs on the GIL build, so the free-threaded session runs
this module in the GIL interpreter (`python -m tests.arrayrecord_files DIR`,
see the `array_record_dir` fixture); both sides regenerate the expected
records from the same seeds, so nothing but the files crosses over.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Spec:
    """One file: the writer's options and the records it holds."""

    name: str
    options: str
    count: int
    large: bool = False

    @property
    def file_name(self) -> str:
        return f"{self.name}.array_record"

    def records(self) -> list[bytes]:
        """The records, the same on every interpreter (seeded by the name)."""
        rng = random.Random(self.name)
        sizes = (10, 70_000, 200_000, 300_000) if self.large else (0, 1, 7, 100, 1000, 3000)
        out = []
        for i in range(self.count):
            size = rng.choice(sizes)
            # Half random (incompressible), half repetitive (compressible).
            body = rng.randbytes(size) if i % 2 else bytes([i % 251]) * size
            out.append(f"{self.name}:{i}:".encode() + body)
        return out


# Each writer option alone, with several records per chunk, and large records
# (larger than a 64 KiB Riegeli block even once compressed).
OPTIONS = [
    Spec("default", "", 120),
    Spec("group-size", "group_size:16", 120),
    Spec("uncompressed", "uncompressed", 120),
    Spec("zstd", "zstd", 120),
    Spec("snappy", "snappy", 120),
    Spec("brotli", "brotli", 120),
    Spec("grouped-uncompressed", "group_size:16,uncompressed", 120),
    Spec("grouped-zstd", "group_size:16,zstd:5", 120),
    Spec("grouped-snappy", "group_size:16,snappy", 120),
    Spec("grouped-brotli", "group_size:16,brotli", 120),
    Spec("one-chunk", "group_size:1000", 120),
    Spec("large-default", "", 12, large=True),
    Spec("large-uncompressed", "group_size:4,uncompressed", 12, large=True),
    Spec("large-snappy", "group_size:4,snappy", 12, large=True),
]
# A data set in several files, one of them empty.
SHARDS = [Spec(f"shard-{i}", "group_size:7", count) for i, count in enumerate([50, 1, 0, 33])]
# Grain's layout: one record per chunk, so a batch of keys is a range request per record.
GRAIN_LAYOUT = Spec("grain-layout", "group_size:1", 300)
ALL = [*OPTIONS, *SHARDS, GRAIN_LAYOUT]


def write_all(directory: Path) -> None:
    """Write every file of `ALL` into `directory` with `array_record`'s writer."""
    from array_record.python.array_record_module import ArrayRecordWriter

    for spec in ALL:
        path = str(directory / spec.file_name)
        writer = ArrayRecordWriter(path, spec.options) if spec.options else ArrayRecordWriter(path)
        for record in spec.records():
            writer.write(record)
        writer.close()


if __name__ == "__main__":
    write_all(Path(sys.argv[1]))
