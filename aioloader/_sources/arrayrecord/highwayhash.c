/* HighwayHash-64 (Alakuijala, Cox, Wassenberg: "Fast keyed hash/pseudo-random
 * function using SIMD multiply and permute", 2016), the checksum of the Riegeli
 * format, written from the published algorithm in portable C99.
 *
 * A plain C library with no Python in it: aioloader compiles it on first use
 * and calls it through ctypes, which releases the GIL around the call, so one
 * build serves every interpreter on the machine (GIL or free-threaded) and
 * threads hash in parallel. Bytes are read one at a time and assembled
 * little-endian, so the result does not depend on the machine's byte order or
 * alignment; compilers turn that into plain loads where they can.
 *
 * The state is four lanes of four 64-bit words. A message is fed in 32-byte
 * packets; its last 1 to 31 bytes are padded into one more packet (how is part
 * of the algorithm); four rounds of a permuted update then finish the hash.
 * All arithmetic is on uint64_t, which wraps modulo 2^64 as the algorithm
 * requires.
 */

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    uint64_t v0[4];
    uint64_t v1[4];
    uint64_t mul0[4];
    uint64_t mul1[4];
} hh_state;

static const uint64_t HH_INIT0[4] = {
    0xdbe6d5d5fe4cce2fULL, 0xa4093822299f31d0ULL, 0x13198a2e03707344ULL, 0x243f6a8885a308d3ULL};
static const uint64_t HH_INIT1[4] = {
    0x3bd39e10cb0ef593ULL, 0xc0acf169b5f18a8cULL, 0xbe5466cf34e90c6cULL, 0x452821e638d01377ULL};

static inline uint64_t swap_halves(uint64_t word) { return (word >> 32) | (word << 32); }

static inline uint64_t load_le64(const unsigned char *bytes) {
    return (uint64_t)bytes[0] | ((uint64_t)bytes[1] << 8) | ((uint64_t)bytes[2] << 16) |
           ((uint64_t)bytes[3] << 24) | ((uint64_t)bytes[4] << 32) | ((uint64_t)bytes[5] << 40) |
           ((uint64_t)bytes[6] << 48) | ((uint64_t)bytes[7] << 56);
}

static void hh_reset(const uint64_t key[4], hh_state *s) {
    for (int i = 0; i < 4; i++) {
        s->mul0[i] = HH_INIT0[i];
        s->mul1[i] = HH_INIT1[i];
        s->v0[i] = HH_INIT0[i] ^ key[i];
        s->v1[i] = HH_INIT1[i] ^ swap_halves(key[i]);
    }
}

/* The "zipper merge": a fixed shuffle of the 16 bytes of the lane pair
 * (high, low), added to the other vector's pair. It moves the bytes that the
 * multiplications mixed best to where the next multiplications use them. */
static inline void zipper_merge_add(uint64_t high, uint64_t low, uint64_t *add_high, uint64_t *add_low) {
    *add_low += (((low & 0xff000000ULL) | (high & 0xff00000000ULL)) >> 24) |
                (((low & 0xff0000000000ULL) | (high & 0xff000000000000ULL)) >> 16) |
                (low & 0xff0000ULL) | ((low & 0xff00ULL) << 32) |
                ((high & 0xff00000000000000ULL) >> 8) | (low << 56);
    *add_high += (((high & 0xff000000ULL) | (low & 0xff00000000ULL)) >> 24) |
                 (high & 0xff0000ULL) | ((high & 0xff0000000000ULL) >> 16) |
                 ((high & 0xff00ULL) << 24) | ((low & 0xff000000000000ULL) >> 8) |
                 ((high & 0xffULL) << 48) | (low & 0xff00000000000000ULL);
}

static inline void hh_update(const uint64_t lanes[4], hh_state *s) {
    for (int i = 0; i < 4; i++) {
        s->v1[i] += s->mul0[i] + lanes[i];
        s->mul0[i] ^= (s->v1[i] & 0xffffffffULL) * (s->v0[i] >> 32);
        s->v0[i] += s->mul1[i];
        s->mul1[i] ^= (s->v0[i] & 0xffffffffULL) * (s->v1[i] >> 32);
    }
    zipper_merge_add(s->v1[1], s->v1[0], &s->v0[1], &s->v0[0]);
    zipper_merge_add(s->v1[3], s->v1[2], &s->v0[3], &s->v0[2]);
    zipper_merge_add(s->v0[1], s->v0[0], &s->v1[1], &s->v1[0]);
    zipper_merge_add(s->v0[3], s->v0[2], &s->v1[3], &s->v1[2]);
}

static inline void hh_update_packet(const unsigned char *packet, hh_state *s) {
    uint64_t lanes[4];
    for (int i = 0; i < 4; i++) lanes[i] = load_le64(packet + 8 * i);
    hh_update(lanes, s);
}

/* Rotates each 32-bit half of `word` left by `count` (1 to 31). */
static inline uint64_t rotate_halves(uint64_t word, unsigned count) {
    uint64_t low = word & 0xffffffffULL, high = word >> 32;
    low = ((low << count) | (low >> (32 - count))) & 0xffffffffULL;
    high = ((high << count) | (high >> (32 - count))) & 0xffffffffULL;
    return low | (high << 32);
}

/* The last `size` (1 to 31) bytes at `tail`: whole 4-byte groups go first in
 * the packet; of the 1 to 3 bytes left, the packet takes either the message's
 * last four bytes at 28-31 (when `size` >= 16) or the first, middle and last
 * of them at 16-18. The size itself is mixed into the state. */
static void hh_update_remainder(const unsigned char *tail, size_t size, hh_state *s) {
    size_t whole = size & ~(size_t)3, left = size & 3;
    unsigned char packet[32] = {0};
    for (int i = 0; i < 4; i++) {
        s->v0[i] += ((uint64_t)size << 32) + size;
        s->v1[i] = rotate_halves(s->v1[i], (unsigned)size);
    }
    memcpy(packet, tail, whole);
    if (size & 16) {
        memcpy(packet + 28, tail + size - 4, 4);
    } else if (left) {
        packet[16] = tail[whole];
        packet[17] = tail[whole + (left >> 1)];
        packet[18] = tail[whole + left - 1];
    }
    hh_update_packet(packet, s);
}

static uint64_t hh_finish(hh_state *s) {
    for (int round = 0; round < 4; round++) {
        uint64_t permuted[4] = {
            swap_halves(s->v0[2]), swap_halves(s->v0[3]), swap_halves(s->v0[0]), swap_halves(s->v0[1])};
        hh_update(permuted, s);
    }
    return s->v0[0] + s->v1[0] + s->mul0[0] + s->mul1[0];
}

static uint64_t hh_hash64(const uint64_t key[4], const unsigned char *data, size_t size) {
    hh_state s;
    size_t whole = size & ~(size_t)31;
    hh_reset(key, &s);
    for (size_t i = 0; i < whole; i += 32) hh_update_packet(data + i, &s);
    if (size & 31) hh_update_remainder(data + whole, size & 31, &s);
    return hh_finish(&s);
}

/* The hashes of `count` messages under `key`, laid end to end at `data`:
 * message i is bytes offsets[i] to offsets[i + 1] (so `offsets` holds
 * count + 1 entries), its hash goes to hashes[i]. Reads the messages and
 * writes only `hashes`: any number of threads may call it at once. */
void aioloader_highwayhash64_many(const uint64_t key[4], const unsigned char *data, const uint64_t *offsets,
                                  size_t count, uint64_t *hashes) {
    for (size_t i = 0; i < count; i++) {
        hashes[i] = hh_hash64(key, data + offsets[i], (size_t)(offsets[i + 1] - offsets[i]));
    }
}
