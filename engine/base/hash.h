/* hash.h - the two hashes checkpoints rely on (the engine keys them, store/ checks its blobs).
 *
 * hash64: a fast 64-bit hash of a byte buffer (four 64-bit lanes of multiply-rotate
 * rounds, then an avalanche), used as the checksum of every blob written to the
 * database and for the model fingerprint. It is not cryptographic: it detects torn
 * writes, flipped bits and truncation, not an adversary.
 *
 * token_chain: the chained hash of a token prefix. h[0] is a seed derived from the
 * model fingerprint and h[i+1] = mix(h[i], t[i]), so h[n] names the prefix t[0..n) of
 * one model and two prefixes share h[k] exactly when they share their first k tokens
 * (up to 64-bit collisions, which the store rules out by comparing tokens). */
#ifndef CHATFS_HASH_H
#define CHATFS_HASH_H

#include <stddef.h>
#include <stdint.h>

uint64_t hash64(const void *data, size_t len, uint64_t seed);
/* Continues a hash64-style digest over several buffers: init, update..., final. */
typedef struct {
    uint64_t v[4];
    uint64_t total;
    unsigned char tail[32];
    size_t n_tail;
    uint64_t seed;
} hash64_state;
void hash64_init(hash64_state *s, uint64_t seed);
void hash64_update(hash64_state *s, const void *data, size_t len);
uint64_t hash64_final(const hash64_state *s);

static inline uint64_t mix64(uint64_t z) {
    /* splitmix64's finalizer: every input bit affects every output bit */
    z ^= z >> 30;
    z *= 0xbf58476d1ce4e5b9ULL;
    z ^= z >> 27;
    z *= 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return z;
}

static inline uint64_t token_chain(uint64_t h, int token) {
    return mix64(h ^ (((uint64_t)(uint32_t)token + 1) * 0x9e3779b97f4a7c15ULL));
}

/* out[0] = seed, out[i+1] = token_chain(out[i], t[i]) for i < n. */
void token_chain_all(uint64_t seed, const int *t, int n, uint64_t *out);

#endif
