"""ArrayRecord test files, written by the official `array_record` writer.

The writer only installs on the GIL build, so the free-threaded session runs
this module in the GIL interpreter (`python -m tests.support.arrayrecord_files DIR`,
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
    sizes: tuple[int, ...] = ()  # record body sizes to draw from, instead of the defaults

    @property
    def file_name(self) -> str:
        return f"{self.name}.array_record"

    def records(self) -> list[bytes]:
        """The records, the same on every interpreter (seeded by the name)."""
        rng = random.Random(self.name)
        sizes = self.sizes or ((10, 70_000, 200_000, 300_000) if self.large else (0, 1, 7, 100, 1000, 3000))
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
# Small files to damage one byte at a time: Grain's layout (a record per chunk),
# compressed groups, and chunks that span a 64 KiB block boundary.
DAMAGE = [
    Spec("damage-single", "group_size:1,uncompressed", 4, sizes=(0, 5, 40)),
    Spec("damage-grouped", "group_size:3,zstd", 7, sizes=(0, 9, 50)),
    Spec("damage-spanning", "group_size:2,uncompressed", 3, sizes=(40_000,)),
]
# Grain's layout: one record per chunk, so a batch of keys is a range request per record.
GRAIN_LAYOUT = Spec("grain-layout", "group_size:1", 300)
ALL = [*OPTIONS, *SHARDS, *DAMAGE, GRAIN_LAYOUT]


def offsets_to_damage(whole: bytes, sample: int | None) -> list[int]:
    """Every byte that holds something (up to the padding before the last block, and the
    postscript at its start), or `sample` of them plus every byte of the block headers;
    and a few bytes of padding."""
    last_block = len(whole) - 65536
    end = max(i for i in range(last_block) if whole[i]) + 8  # zeros after this are padding
    held = [*range(end), *range(last_block, last_block + 160)]
    rng = random.Random(len(whole))
    if sample is not None:
        headers = [b + i for b in range(65536, len(whole), 65536) for i in range(24)]
        held = sorted({*rng.sample(held, sample), *headers})
    padding = rng.sample(range(end, last_block), 20)
    return held + padding


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
