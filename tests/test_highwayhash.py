"""HighwayHash-64, Riegeli's checksum: the reference vectors, and batches against lone messages."""

from __future__ import annotations

import random
import struct

import pytest

from aioloader._sources.arrayrecord.highwayhash import RIEGELI_KEY, hash64, hash64_many
from aioloader._sources.arrayrecord.riegeli import FILE_SIGNATURE

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


def test_the_reference_vectors_in_one_batch_and_one_by_one() -> None:
    messages = [bytes(range(n)) for n in range(65)]
    assert hash64_many(messages, TEST_KEY) == EXPECTED
    assert [hash64(message, TEST_KEY) for message in messages] == EXPECTED
    assert hash64(bytes(range(128, 161)), (1, 2, 3, 4)) == 0x53C516CCE478CAD7


def test_the_hashes_of_the_riegeli_file_signature() -> None:
    # Its block header hashes (previous_chunk, next_chunk); its chunk header hashes
    # the rest of the header, which holds the hash of the (empty) data.
    block_hash, previous_and_next = struct.unpack_from("<Q16s", FILE_SIGNATURE)
    chunk_hash, chunk_rest = struct.unpack_from("<Q32s", FILE_SIGNATURE, 24)
    data_hash = struct.unpack_from("<Q", FILE_SIGNATURE, 24 + 16)[0]
    assert hash64_many([previous_and_next, chunk_rest, b""], RIEGELI_KEY) == [
        block_hash,
        chunk_hash,
        data_hash,
    ]


@pytest.mark.parametrize("seed", range(3))
def test_a_message_hashes_the_same_alone_and_among_others(seed: int) -> None:
    # In a batch, numpy runs the packets that several messages share; a lone
    # message's last packets run on Python integers: both must agree.
    rng = random.Random(seed)
    messages = [
        rng.randbytes(rng.choice([0, 1, 15, 16, 31, 32, 33, 64, rng.randrange(1000)])) for _ in range(40)
    ]
    messages.append(rng.randbytes(5000))
    together = hash64_many([memoryview(m) for m in messages])
    assert together == [hash64(message) for message in messages]
    assert len(set(together)) == len(set(messages))
    assert hash64_many([]) == []
