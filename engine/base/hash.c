/* hash.c - hash64 and the token chain (see hash.h). */
#include "engine/base/hash.h"

#include <string.h>

#define P1 0x9E3779B185EBCA87ULL
#define P2 0xC2B2AE3D27D4EB4FULL
#define P3 0x165667B19E3779F9ULL
#define P4 0x85EBCA77C2B2AE63ULL
#define P5 0x27D4EB2F165667C5ULL

static inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static inline uint64_t rd64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static inline uint64_t round1(uint64_t acc, uint64_t in) { return rotl(acc + in * P2, 31) * P1; }

void hash64_init(hash64_state *s, uint64_t seed) {
    s->seed = seed;
    s->v[0] = seed + P1 + P2;
    s->v[1] = seed + P2;
    s->v[2] = seed;
    s->v[3] = seed - P1;
    s->total = 0;
    s->n_tail = 0;
}

static void stripe(uint64_t *v, const unsigned char *p) {
    v[0] = round1(v[0], rd64(p));
    v[1] = round1(v[1], rd64(p + 8));
    v[2] = round1(v[2], rd64(p + 16));
    v[3] = round1(v[3], rd64(p + 24));
}

void hash64_update(hash64_state *s, const void *data, size_t len) {
    if (!len) return; /* data may be NULL then (the empty KV of a model without attention) */
    const unsigned char *p = data;
    s->total += len;
    if (s->n_tail) {
        size_t k = 32 - s->n_tail < len ? 32 - s->n_tail : len;
        memcpy(s->tail + s->n_tail, p, k);
        s->n_tail += k;
        p += k;
        len -= k;
        if (s->n_tail < 32) return;
        stripe(s->v, s->tail);
        s->n_tail = 0;
    }
    for (; len >= 32; p += 32, len -= 32) stripe(s->v, p);
    memcpy(s->tail, p, len);
    s->n_tail = len;
}

uint64_t hash64_final(const hash64_state *s) {
    uint64_t h;
    if (s->total >= 32) {
        h = rotl(s->v[0], 1) + rotl(s->v[1], 7) + rotl(s->v[2], 12) + rotl(s->v[3], 18);
        for (int i = 0; i < 4; i++) h = (h ^ round1(0, s->v[i])) * P1 + P4;
    } else {
        h = s->seed + P5;
    }
    h += s->total;
    const unsigned char *p = s->tail;
    size_t len = s->n_tail;
    for (; len >= 8; p += 8, len -= 8) h = rotl(h ^ round1(0, rd64(p)), 27) * P1 + P4;
    for (; len > 0; p++, len--) h = rotl(h ^ (*p * P5), 11) * P1;
    return mix64(h ^ (h >> 33) ^ P3);
}

uint64_t hash64(const void *data, size_t len, uint64_t seed) {
    hash64_state s;
    hash64_init(&s, seed);
    hash64_update(&s, data, len);
    return hash64_final(&s);
}

void token_chain_all(uint64_t seed, const int *t, int n, uint64_t *out) {
    out[0] = seed;
    for (int i = 0; i < n; i++) out[i + 1] = token_chain(out[i], t[i]);
}
