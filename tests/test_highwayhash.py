"""HighwayHash-64, Riegeli's checksum: the C library and the NumPy fallback.

Both give HighwayHash's published test vectors and the same hashes on
messages of every length; the C library is built once into the cache folder
(in children with their own cache, so that the build itself is tested); a
missing, failing or faulty compiler gives the fallback and one warning.
The official writer's files are checked in `test_arrayrecord.py`.
"""

from __future__ import annotations

import json
import os
import random
import shlex
import stat
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from aioloader._sources.arrayrecord import highwayhash, highwayhash_numpy, native
from aioloader._sources.arrayrecord.highwayhash import RIEGELI_KEY
from aioloader._sources.arrayrecord.riegeli import FILE_SIGNATURE
from tests.conftest import FREE_THREADED, repeated

REPO = Path(__file__).resolve().parent.parent

# The test vectors of HighwayHash's C implementation (c/highwayhash_test.c): the
# hash of bytes 0, 1, ..., n-1 under the key below, for n = 0..64.
TEST_KEY = (0x0706050403020100, 0x0F0E0D0C0B0A0908, 0x1716151413121110, 0x1F1E1D1C1B1A1918)
EXPECTED = [
    0x907A56DE22C26E53, 0x7EAB43AAC7CDDD78, 0xB8D0569AB0B53D62, 0x5C6BEFAB8A463D80,
    0xF205A46893007EDA, 0x2B8A1668E4A94541, 0xBD4CCC325BEFCA6F, 0x4D02AE1738F59482,
    0xE1205108E55F3171, 0x32D2644EC77A1584, 0xF6E10ACDB103A90B, 0xC3BBF4615B415C15,
    0x243CC2040063FA9C, 0xA89A58CE65E641FF, 0x24B031A348455A23, 0x40793F86A449F33B,
    0xCFAB3489F97EB832, 0x19FE67D2C8C5C0E2, 0x04DD90A69C565CC2, 0x75D9518E2371C504,
    0x38AD9B1141D3DD16, 0x0264432CCD8A70E0, 0xA9DB5A6288683390, 0xD7B05492003F028C,
    0x205F615AEA59E51E, 0xEEE0C89621052884, 0x1BFC1A93A7284F4F, 0x512175B5B70DA91D,
    0xF71F8976A0A2C639, 0xAE093FEF1F84E3E7, 0x22CA92B01161860F, 0x9FC7007CCF035A68,
    0xA0C964D9ECD580FC, 0x2C90F73CA03181FC, 0x185CF84E5691EB9E, 0x4FC1F5EF2752AA9B,
    0xF5B7391A5E0A33EB, 0xB9B84B83B4E96C9C, 0x5E42FE712A5CD9B4, 0xA150F2F90C3F97DC,
    0x7FA522D75E2D637D, 0x181AD0CC0DFFD32B, 0x3889ED981E854028, 0xFB4297E8C586EE2D,
    0x6D064A45BB28059C, 0x90563609B3EC860C, 0x7AA4FCE94097C666, 0x1326BAC06B911E08,
    0xB926168D2B154F34, 0x9919848945B1948D, 0xA2A98FC534825EBE, 0xE9809095213EF0B6,
    0x582E5483707BC0E9, 0x086E9414A88A6AF5, 0xEE86B98D20F6743D, 0xF89B7FF609B1C0A7,
    0x4C7D9CC19E22C3E8, 0x9A97005024562A6F, 0x5DD41CF423E6EBEF, 0xDF13609C0468E227,
    0x6E0DA4F64188155A, 0xB755BA4B50D7D4A1, 0x887A3484647479BD, 0xAB8EEBE9BF2139A0,
    0x75542C5D4CD2A6FF,
]  # fmt: skip

Hash = Callable[[Sequence[bytes | memoryview], Sequence[int]], list[int]]


def has_compiler() -> bool:
    try:
        native.compiler()
    except native.BuildError:
        return False
    return True


needs_compiler = pytest.mark.skipif(not has_compiler(), reason="no C compiler ($CC, cc, gcc, clang) here")


def compiled_hash(messages: Sequence[bytes | memoryview], key: Sequence[int]) -> list[int]:
    assert highwayhash.implementation() == "C", "a compiler is here, yet the C library did not load"
    return highwayhash.hash64_many(messages, key)


IMPLEMENTATIONS = [
    pytest.param(compiled_hash, id="C", marks=needs_compiler),
    pytest.param(highwayhash_numpy.hash64_many, id="NumPy"),
]


@pytest.mark.parametrize("hash_many", IMPLEMENTATIONS)
def test_the_reference_vectors_in_one_batch_and_one_by_one(hash_many: Hash) -> None:
    messages = [bytes(range(n)) for n in range(65)]
    assert hash_many(messages, TEST_KEY) == EXPECTED
    assert [hash_many([message], TEST_KEY)[0] for message in messages] == EXPECTED
    assert hash_many([bytes(range(128, 161))], (1, 2, 3, 4)) == [0x53C516CCE478CAD7]
    assert hash_many([], TEST_KEY) == []


@pytest.mark.parametrize("hash_many", IMPLEMENTATIONS)
def test_the_hashes_of_the_riegeli_file_signature(hash_many: Hash) -> None:
    # Its block header hashes (previous_chunk, next_chunk); its chunk header hashes
    # the rest of the header, which holds the hash of the (empty) data.
    block_hash, previous_and_next = struct.unpack_from("<Q16s", FILE_SIGNATURE)
    chunk_hash, chunk_rest = struct.unpack_from("<Q32s", FILE_SIGNATURE, 24)
    data_hash = struct.unpack_from("<Q", FILE_SIGNATURE, 24 + 16)[0]
    assert hash_many([previous_and_next, chunk_rest, b""], RIEGELI_KEY) == [block_hash, chunk_hash, data_hash]


def random_messages(seed: int) -> list[bytes | memoryview]:
    """Every length 0..200, and long ones around where the C side stops copying (64 KiB),
    as bytes, bytearray and memoryviews that start inside a larger buffer."""
    rng = random.Random(seed)
    lengths = [*range(201), 65535, 65536, 65537, 300_007]
    rng.shuffle(lengths)
    kinds: list[Callable[[bytes], bytes | memoryview]] = [
        bytes,
        bytearray,
        lambda b: memoryview(b"x" * 3 + b + b"y")[3:-1],
    ]
    return [rng.choice(kinds)(rng.randbytes(n)) for n in lengths]


@needs_compiler
@pytest.mark.parametrize("seed", range(3))
def test_c_and_numpy_agree_on_every_length_alone_and_together(seed: int) -> None:
    messages = random_messages(seed)
    key = tuple(random.Random(seed).getrandbits(64) for _ in range(4))
    together = compiled_hash(messages, key)
    assert together == highwayhash_numpy.hash64_many(messages, key)
    assert together == [compiled_hash([message], key)[0] for message in messages]
    assert together == [highwayhash_numpy.hash64_many([message], key)[0] for message in messages]
    assert len(set(together)) == len({bytes(m) for m in messages})


@needs_compiler
@repeated
def test_eight_threads_hashing_at_once_get_the_same_hashes(repeat: int) -> None:
    batches = [random_messages(repeat * 8 + t)[:60] for t in range(8)]
    expected = [compiled_hash(batch, RIEGELI_KEY) for batch in batches]
    start = threading.Barrier(8)

    def hash_often(t: int) -> list[list[int]]:
        start.wait()
        return [highwayhash.hash64_many(batches[t]) for _ in range(20)]

    with ThreadPoolExecutor(8) as pool:
        for t, results in enumerate(pool.map(hash_often, range(8))):
            assert results == [expected[t]] * 20


def test_the_cache_folder_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AIOLOADER_CACHE", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert native.library_path(highwayhash.SOURCE).parent == tmp_path / "mine" / "native"
    monkeypatch.delenv("AIOLOADER_CACHE")
    assert native.cache_root() == tmp_path / "xdg" / "aioloader"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert native.cache_root() == tmp_path / "home" / ".cache" / "aioloader"
    name = native.library_path(highwayhash.SOURCE).name
    assert name.startswith("highwayhash-")
    assert name.endswith(".so" if sys.platform != "win32" else ".dll")


# In a child process: what implementation the first hash picked, the hashes it gave
# (from several threads starting at once), what the "aioloader" logger said, the GIL.
CHILD = """
import json, logging, random, sys, threading
logged = []
class Keep(logging.Handler):
    def emit(self, record):
        logged.append([record.levelname, record.getMessage()])
logging.getLogger("aioloader").addHandler(Keep())
from aioloader._sources.arrayrecord import highwayhash
messages = [random.Random(n).randbytes(n) for n in (0, 5, 31, 100, 70_000)]
threads = int(sys.argv[1])
start = threading.Barrier(threads)
hashes = [None] * threads
def work(i):
    start.wait()
    hashes[i] = highwayhash.hash64_many(messages)
workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
for worker in workers:
    worker.start()
for worker in workers:
    worker.join()
gil = getattr(sys, "_is_gil_enabled", lambda: True)()
implementation = highwayhash.implementation()
print(json.dumps({"implementation": implementation, "hashes": hashes, "logged": logged, "gil": gil}))
"""
CHILD_MESSAGES = [random.Random(n).randbytes(n) for n in (0, 5, 31, 100, 70_000)]


def child_env(cache: Path, **changes: str) -> dict[str, str]:
    """This environment with its own cache folder, without PYTHON_GIL (so a free-threaded
    child shows whether anything turned the GIL on) and without CC unless given."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHON_GIL", "CC")}
    return {**env, "PYTHONPATH": str(REPO), "AIOLOADER_CACHE": str(cache), **changes}


def start_child(env: dict[str, str], threads: int = 1) -> subprocess.Popen[str]:
    command = [sys.executable, "-W", "error", "-c", CHILD, str(threads)]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish_child(child: subprocess.Popen[str]) -> dict[str, object]:
    out, err = child.communicate(timeout=300)
    assert child.returncode == 0, err
    result: dict[str, object] = json.loads(out)
    expected = highwayhash_numpy.hash64_many(CHILD_MESSAGES, RIEGELI_KEY)
    assert all(hashes == expected for hashes in result["hashes"]), result
    assert result["gil"] is not FREE_THREADED, f"the GIL came on: {result}"
    return result


def in_child(env: dict[str, str], threads: int = 1) -> dict[str, object]:
    return finish_child(start_child(env, threads))


def script(folder: Path, name: str, body: str) -> str:
    """An executable shell script standing in for a compiler: it gets FLAGS, -o OUTPUT, SOURCE."""
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def library_files(cache: Path) -> list[str]:
    return sorted(path.name for path in (cache / "native").iterdir() if not path.name.endswith(".lock"))


@needs_compiler
def test_built_once_into_the_cache_then_loaded_without_a_compiler(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    built = in_child(child_env(cache))
    assert (built["implementation"], built["logged"]) == ("C", [])
    (library,) = library_files(cache)  # nothing else: no temporary file left
    assert library.startswith("highwayhash-")
    # A later process loads it without a compiler.
    assert in_child(child_env(cache, CC=str(tmp_path / "no-such-cc"))) == built
    # A damaged library is built again.
    (cache / "native" / library).write_bytes(b"\x7fELF, cut short")
    assert in_child(child_env(cache)) == built
    assert library_files(cache) == [library]
    assert (cache / "native" / library).stat().st_size > 1000


@needs_compiler
def test_processes_and_threads_starting_together_build_it_once(tmp_path: Path) -> None:
    cache, log = tmp_path / "cache", tmp_path / "compiles.log"
    real = shlex.join(native.compiler())  # the real one, behind a log of its runs
    counting = script(tmp_path, "counting-cc", f'echo "$@" >> "{log}"\nexec {real} "$@"\n')
    children = [start_child(child_env(cache, CC=counting), threads=4) for _ in range(4)]
    results = [finish_child(child) for child in children]
    assert [(r["implementation"], r["logged"]) for r in results] == [("C", [])] * 4
    assert len(log.read_text().splitlines()) == 1
    assert len(library_files(cache)) == 1


def fallback_warning(result: dict[str, object]) -> str:
    """The one warning a fallback logs, which says what is slow and the two ways out."""
    assert result["implementation"] == "NumPy"
    ((level, message),) = result["logged"]
    assert level == "WARNING"
    assert "Verifying ArrayRecord checksums will be slow" in message
    assert "Install a C compiler" in message
    assert "verify_checksums=False" in message
    return str(message)


def test_no_compiler_gives_the_fallback_and_one_warning(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    message = fallback_warning(in_child(child_env(tmp_path / "cache", PATH=str(tmp_path / "empty")), 4))
    assert "no C compiler found" in message


def test_a_failing_compiler_gives_the_fallback_and_says_why(tmp_path: Path) -> None:
    failing = script(tmp_path, "failing-cc", "echo 'cc1: out of cheese' >&2\nexit 3\n")
    message = fallback_warning(in_child(child_env(tmp_path / "cache", CC=failing)))
    assert "exit status 3" in message
    assert "out of cheese" in message
    assert not (tmp_path / "cache" / "native").exists() or library_files(tmp_path / "cache") == []


def test_a_compiler_that_writes_no_library_gives_the_fallback(tmp_path: Path) -> None:
    garbage = script(tmp_path, "garbage-cc", 'echo "not a library" > "$5"\n')
    message = fallback_warning(in_child(child_env(tmp_path / "cache", CC=garbage)))
    assert "does not load" in message


@needs_compiler
def test_a_library_that_hashes_wrong_is_not_used(tmp_path: Path) -> None:
    # A "compiler" that builds HighwayHash with one bit of one constant changed.
    real, change = shlex.join(native.compiler()), "s/0xdbe6d5d5fe4cce2fULL/0xdbe6d5d5fe4cce2eULL/"
    body = f'sed {change} "$6" > "$5.c"\nexec {real} "$1" "$2" "$3" -o "$5" "$5.c"\n'
    faulty = script(tmp_path, "faulty-cc", body)
    message = fallback_warning(in_child(child_env(tmp_path / "cache", CC=faulty)))
    assert f"{tmp_path / 'cache' / 'native'}/highwayhash-" in message
    assert "gives wrong hashes for the test vectors" in message


def test_an_unwritable_cache_gives_the_fallback(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    message = fallback_warning(in_child(child_env(tmp_path / "a-file")))
    assert "cannot write to" in message
    assert "AIOLOADER_CACHE" in message


def test_the_variable_forces_the_fallback_without_a_warning(tmp_path: Path) -> None:
    result = in_child(child_env(tmp_path / "cache", AIOLOADER_PURE_HIGHWAYHASH="1"))
    assert (result["implementation"], result["logged"]) == ("NumPy", [])
    assert not (tmp_path / "cache").exists()


@needs_compiler
@pytest.mark.skipif(not FREE_THREADED, reason="only the free-threaded build can run with the GIL off")
def test_the_gil_stays_off_after_loading_the_library(tmp_path: Path) -> None:
    # Without PYTHON_GIL and with -W error: ctypes (and anything it loads) must not turn the GIL on.
    result = in_child(child_env(tmp_path / "cache"), threads=8)
    assert (result["implementation"], result["gil"]) == ("C", False)
