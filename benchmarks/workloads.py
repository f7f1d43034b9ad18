"""The workloads: each a source whose records are derived from their key, a transform and a batch size.

Every loader reads the same records (a pure function of the key), applies
the same transform object (its own copy per thread or process) and batches
with the same `collate`, so the loaders differ only in how they schedule the
work. Every batch is one NumPy array; `checksum` is summed over a run and
must agree between loaders, whatever their order.

Sources and transforms are module-level classes so that process-based peers
can pickle them, and they avoid per-record shared objects (a record is made
fresh on each read, as a real decoder would) so that free-threaded runs
measure the loader, not refcount contention on the benchmark's own data.
"""

from __future__ import annotations

import io
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

PREFETCH = 500  # records read ahead of the consumer, for every loader (aioloader's default)
IN_FLIGHT = 16  # reads awaited at once from an async source (aioloader's default num_threads)


@dataclass(frozen=True)
class Workload:
    """One benchmark pipeline: source -> transform (per record) -> collate (per batch)."""

    name: str
    title: str  # one line for the table
    records: int  # sized so that the plain loop runs for about a second
    batch_size: int
    make_source: Callable[[int], Any]
    make_transform: Callable[[], Any]
    collate: Callable[[Sequence[Any]], np.ndarray]
    checksum: Callable[[np.ndarray], float]
    is_async: bool = False  # the source defines `async aget(key)` instead of `__getitem__`
    note: str = ""
    unavailable: Callable[[], str | None] = lambda: None  # why it cannot run now, or None


def stack(items: Sequence[Any]) -> np.ndarray:
    """The batch of array records."""
    return np.stack(items)


def ints(items: Sequence[Any]) -> np.ndarray:
    """The batch of int records."""
    return np.array(items, dtype=np.int64)


def int_sum(batch: np.ndarray) -> float:
    return float(batch.sum(dtype=np.int64))


def float_sum(batch: np.ndarray) -> float:
    return float(batch.sum(dtype=np.float64))


# 1. Trivial records: an int and +1. What is left is the loader's own cost.


class KeySource:
    """Record `k` is the int `k`."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key: int) -> int:
        return key


class PlusOne:
    def __call__(self, x: int) -> int:
        return x + 1


# 2. A pure-Python CPU-bound transform that holds the GIL, ~100 us a record.
#    Every constant is a small int (cached, immortal), so the loop scales on
#    free-threaded CPython (DESIGN.md: float or big-int constants would not).


class SpinHash:
    """A byte-wise hash of the key, iterated `rounds` times."""

    def __init__(self, rounds: int = 1100) -> None:
        self.rounds = rounds  # an attribute, not a literal: a big-int constant is shared

    def __call__(self, key: int) -> int:
        h = key & 255
        acc = 0
        for i in range(self.rounds):
            h = (h * 33 + i) & 255
            acc ^= h
        return acc


# 3. A tokenizer: a transform holding a ~20,000-entry vocabulary dict that
#    splits, normalises and looks up words. The state every thread reads is
#    what the per-thread copy of the operations is for.

_SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]
_PUNCT = ".,;:!?\"'()"
SEQUENCE_LENGTH = 64


def make_vocabulary(size: int = 20_000, seed: int = 0) -> dict[str, int]:
    """`size` distinct pseudo-words of 2 to 4 syllables, numbered from 2 (0 pads, 1 is unknown)."""
    rng = random.Random(seed)
    words: dict[str, int] = {}
    while len(words) < size:
        word = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4)))
        words.setdefault(word, len(words) + 2)
    return words


class TextSource:
    """Record `k`: sentence `k % 1024` of a fixed bank, plus the number `k`, as a fresh string."""

    BANK = 1024

    def __init__(self, n: int, words_per_text: int = 60) -> None:
        self.n = n
        rng = random.Random(1)
        vocabulary = list(make_vocabulary())
        self._bank = [self.sentence(rng, vocabulary, words_per_text) for _ in range(self.BANK)]

    @staticmethod
    def sentence(rng: random.Random, vocabulary: list[str], count: int) -> str:
        words = []
        for j in range(count):
            word = rng.choice(vocabulary) if rng.random() > 0.05 else "zq" + str(rng.randint(0, 9999))
            if j == 0 or rng.random() < 0.1:
                word = word.capitalize()
            if rng.random() < 0.12:
                word += rng.choice(_PUNCT)
            words.append(word)
        return " ".join(words)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key: int) -> str:
        return f"{self._bank[key % self.BANK]} {key}"


class Tokenizer:
    """Lower-cases, splits, strips punctuation and maps words to ids; pads to `SEQUENCE_LENGTH`."""

    def __init__(self) -> None:
        self.vocabulary = make_vocabulary()
        self.length = SEQUENCE_LENGTH

    def __call__(self, text: str) -> np.ndarray:
        get = self.vocabulary.get
        ids = [get(word.strip(_PUNCT), 1) for word in text.lower().split()]
        ids = ids[: self.length]
        ids += [0] * (self.length - len(ids))
        return np.array(ids, dtype=np.int32)


# 4. NumPy image augmentation: crop, flip and normalise 64x64x3 uint8 images.

IMAGE = 64
CROP = 56


class ImageSource:
    """Record `k`: `(k, image)`, a fresh copy of image `k % 64` of a fixed random bank."""

    BANK = 64

    def __init__(self, n: int) -> None:
        self.n = n
        self._bank = np.random.default_rng(2).integers(0, 256, (self.BANK, IMAGE, IMAGE, 3), dtype=np.uint8)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key: int) -> tuple[int, np.ndarray]:
        return key, self._bank[key % self.BANK].copy()


class Augment:
    """A crop and a flip chosen from the key (so every loader agrees), then per-channel normalisation.

    The output is channels-first float32 (3, 56, 56), the layout a model takes.
    """

    def __init__(self) -> None:
        self.mean = (np.array([0.485, 0.456, 0.406], dtype=np.float32) * 255).reshape(3, 1, 1)
        self.inv_std = 1 / (np.array([0.229, 0.224, 0.225], dtype=np.float32) * 255).reshape(3, 1, 1)
        self.span = IMAGE - CROP + 1
        self.crop = CROP

    def __call__(self, record: tuple[int, np.ndarray]) -> np.ndarray:
        key, image = record
        top, left = key % self.span, (key // self.span) % self.span
        crop = image[top : top + self.crop, left : left + self.crop]
        if key & 1:
            crop = crop[:, ::-1]
        out = crop.transpose(2, 0, 1).astype(np.float32, order="C")
        out -= self.mean
        out *= self.inv_std
        return out


# 5. Storage latency: 2 ms of waiting per record, then 4 KiB derived from the key.

LATENCY = 0.002
PAYLOAD_REPEAT = 512  # 8 bytes of key x 512 = 4 KiB


def payload(key: int) -> bytes:
    return key.to_bytes(8, "little") * PAYLOAD_REPEAT


class SleepSource:
    """`time.sleep(2 ms)` per read: blocking I/O, overlapped only by threads or processes."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key: int) -> bytes:
        time.sleep(LATENCY)
        return payload(key)


class AsyncSleepSource:
    """`await asyncio.sleep(2 ms)` per read: asynchronous I/O, overlapped on an event loop."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    async def aget(self, key: int) -> bytes:
        import asyncio  # here, so that importing the workloads leaves asyncio out (first_batch.py)

        await asyncio.sleep(LATENCY)
        return payload(key)


class Decode:
    """The bytes as a uint8 array."""

    def __call__(self, data: bytes) -> np.ndarray:
        return np.frombuffer(data, dtype=np.uint8)


def key_sum(batch: np.ndarray) -> float:
    """The keys the payloads were made from, summed: proves every record was read once."""
    return float(batch[:, :8].copy().view(np.int64).sum())


# 6. Real storage formats, read through aioloader's sources by every loader:
#    the files of `sources_bench` (ArrayRecord: 1 KiB records, half random,
#    half repetitive, the writer's default options; Parquet: id, score, name
#    and 16 tokens per row, row groups of 1000), written once per record
#    count under benchmarks/results/tmp/. Record `k` is the same whoever
#    reads it. The sources pickle as their paths (`sources_bench.Reopening`),
#    so Grain's spawned workers open the files themselves.

TMP = Path(__file__).resolve().parent / "results" / "tmp"


def cached_file(name: str, write: Callable[[Path], object]) -> Path:
    """`TMP/name`, written by `write` the first time (under another name until complete)."""
    path = TMP / name
    if not path.exists():
        TMP.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{name}.part")
        write(part)
        part.replace(path)
    return path


def array_record_source(n: int) -> Any:
    from benchmarks import sources_bench

    def write(path: Path) -> None:
        if not sources_bench.make_array_record(path, n):
            raise RuntimeError(
                "array_record does not install here: set AIOLOADER_GIL_PYTHON to a GIL python with it"
            )

    return sources_bench.ArrayRecordFiles(cached_file(f"records-{n}.array_record", write))


def parquet_source(n: int) -> Any:
    from benchmarks import sources_bench

    return sources_bench.ParquetFiles(
        cached_file(f"rows-{n}.parquet", lambda path: sources_bench.make_parquet(path, n))
    )


# 7. LLM training: documents of 8 to 400 words (log-uniform) from an ArrayRecord
#    file, tokenised (the vocabulary dict of `Tokenizer`), cut at 256 tokens,
#    batched padded to the longest sequence of the batch.

MAX_TOKENS = 256


def documents_source(n: int) -> Any:
    from benchmarks import sources_bench

    def write(path: Path) -> None:
        if not sources_bench.make_array_record(path, n, kind="text"):
            raise RuntimeError(
                "array_record does not install here: set AIOLOADER_GIL_PYTHON to a GIL python with it"
            )

    return sources_bench.ArrayRecordFiles(cached_file(f"documents-{n}.array_record", write))


def documents(count: int) -> Iterator[bytes]:
    """The LLM workload's records: UTF-8 documents of 8 to 400 words, a pure function of `count`."""
    rng = random.Random(7)
    vocabulary = list(make_vocabulary())
    for _ in range(count):
        words = int(8 * 50 ** rng.random())
        yield TextSource.sentence(rng, vocabulary, words).encode()


class TokenizeDocument(Tokenizer):
    """A document's bytes to at most `MAX_TOKENS` int32 ids (variable length)."""

    def __call__(self, data: bytes) -> np.ndarray:  # type: ignore[override]
        get = self.vocabulary.get
        ids = [get(word.strip(_PUNCT), 1) for word in data.decode().lower().split()]
        return np.array(ids[:MAX_TOKENS], dtype=np.int32)


def pad(items: Sequence[np.ndarray]) -> np.ndarray:
    """The batch of sequences, padded with 0 to the longest."""
    out = np.zeros((len(items), max(len(x) for x in items)), dtype=np.int32)
    for row, ids in zip(out, items, strict=True):
        row[: len(ids)] = ids
    return out


# 8. Images from their encoded files: decode a 128x128 PNG with Pillow, crop
#    112x112 at a place chosen from the key, to CHW float32, normalise.

PNG_SIDE = 128
PNG_CROP = 112


def encode_png_bank(count: int = 32) -> list[bytes]:
    """`count` photo-like PNGs (gradients + noise: they compress as photos do, partly)."""
    from PIL import Image

    rng = np.random.default_rng(5)
    y, x = np.mgrid[0:PNG_SIDE, 0:PNG_SIDE]
    bank = []
    for i in range(count):
        base = np.stack([(x * (i + 1) + y * c * 3) % 256 for c in range(1, 4)], axis=-1)
        noise = rng.integers(0, 24, (PNG_SIDE, PNG_SIDE, 3))
        pixels = np.clip(base + noise, 0, 255).astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="PNG")
        bank.append(buffer.getvalue())
    return bank


class PngSource:
    """Record `k`: `(k, the bytes of PNG k % 32)`, a fresh bytes object (a slice of one blob)."""

    def __init__(self, n: int) -> None:
        self.n = n
        bank = encode_png_bank()
        self._blob = b"".join(bank)
        ends = np.cumsum([len(b) for b in bank]).tolist()
        self._spans = list(zip([0, *ends[:-1]], ends, strict=True))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key: int) -> tuple[int, bytes]:
        start, end = self._spans[key % len(self._spans)]
        return key, self._blob[start:end]


class DecodeCrop(Augment):
    """Decode with Pillow, then `Augment`'s crop, flip and normalisation at 112 of 128."""

    def __init__(self) -> None:
        super().__init__()
        self.span = PNG_SIDE - PNG_CROP + 1
        self.crop = PNG_CROP

    def __call__(self, record: tuple[int, bytes]) -> np.ndarray:  # type: ignore[override]
        from PIL import Image

        key, data = record
        with Image.open(io.BytesIO(data)) as image:
            pixels = np.asarray(image.convert("RGB"))
        return super().__call__((key, pixels))


def pillow_missing() -> str | None:
    try:
        import PIL  # noqa: F401
    except ImportError:
        return "Pillow is not installed (the `bench` extra)"
    return None


class RowFeatures:
    """A Parquet row as 19 float32: id, score, the name's length and the 16 tokens."""

    def __call__(self, row: dict[str, Any]) -> np.ndarray:
        out = np.empty(19, dtype=np.float32)
        out[0], out[1], out[2] = row["id"], row["score"], len(row["name"])
        out[3:] = row["tokens"]
        return out


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in [
        Workload(
            "trivial",
            "trivial records (int + 1)",
            4_000_000,
            32,
            KeySource,
            PlusOne,
            ints,
            int_sum,
        ),
        Workload(
            "cpu",
            "pure-Python CPU loop, ~100 us/record",
            24_000,
            32,
            KeySource,
            SpinHash,
            ints,
            int_sum,
        ),
        Workload(
            "tokenize",
            "tokenizer, 20,000-word vocabulary dict",
            60_000,
            32,
            TextSource,
            Tokenizer,
            stack,
            int_sum,
        ),
        Workload(
            "image",
            "NumPy crop/flip/normalise 64x64x3",
            60_000,
            64,
            ImageSource,
            Augment,
            stack,
            float_sum,
        ),
        Workload(
            "storage",
            "2 ms blocking read (time.sleep), 4 KiB",
            1_500,
            32,
            SleepSource,
            Decode,
            stack,
            key_sum,
            note="sync source: reads overlap only as far as threads/processes do",
        ),
        Workload(
            "storage-async",
            "2 ms async read (asyncio.sleep), 4 KiB",
            1_500,
            32,
            AsyncSleepSource,
            Decode,
            stack,
            key_sum,
            is_async=True,
            note="async source: 16 reads in flight for every loader that can await",
        ),
        Workload(
            "arrayrecord",
            "ArrayRecord file, 1 KiB records (aioloader.ArrayRecordDataSource)",
            20_000,
            32,
            array_record_source,
            Decode,
            stack,
            int_sum,
            note="the builtin reader on the free-threaded build, array_record's on the GIL build",
        ),
        Workload(
            "parquet",
            "Parquet file, 4 columns (aioloader.ParquetDataSource)",
            60_000,
            32,
            parquet_source,
            RowFeatures,
            stack,
            float_sum,
        ),
        Workload(
            "llm",
            "LLM: documents of 8-400 words from ArrayRecord, tokenised, padded batches",
            30_000,
            32,
            documents_source,
            TokenizeDocument,
            pad,
            int_sum,
            note="variable-length token sequences, cut at 256, padded to the longest of each batch",
        ),
        Workload(
            "png",
            "PNG decode (Pillow) 128x128, crop 112, normalise",
            5_000,
            32,
            PngSource,
            DecodeCrop,
            stack,
            float_sum,
            unavailable=pillow_missing,
        ),
    ]
}
