/* strtab.c - the tokenizer's containers: a growable int vector, the string table
 * (every token text and merge side, by sid), an integer-keyed pair map (merges, the
 * special-token trie) and the queue of candidate merges. The types are in
 * tokenizer_impl.h.
 *
 * A file of its own because these are plain data structures that know nothing about
 * tokens: the loader fills them, the encoders look things up in them. */
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer/tokenizer_impl.h"

void ivec_push(ivec *a, int32_t x) {
    if (a->oom) return;
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 64;
        int32_t *p = realloc(a->v, nc * sizeof *p);
        if (!p) {
            a->oom = 1;
            return;
        }
        a->v = p;
        a->cap = nc;
    }
    a->v[a->n++] = x;
}

static uint64_t hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, then a final mix so low bits are usable */
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    h ^= h >> 31;
    h *= 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

const char *strtab_text(const strtab *st, int32_t sid) { return st->arena + st->off[sid]; }

int32_t strtab_find(const strtab *st, const char *s, size_t n) {
    uint64_t h = hash_bytes(s, n);
    size_t mask = st->nslots - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        int32_t sid = st->slot_sid[i];
        if (sid < 0) return -1;
        if (st->slot_hash[i] == (uint32_t)(h >> 32) && st->len[sid] == n &&
            memcmp(st->arena + st->off[sid], s, n) == 0)
            return sid;
    }
}

int strtab_rehash(strtab *st, size_t nslots) {
    int32_t *ns = malloc(nslots * sizeof *ns);
    uint32_t *nh = malloc(nslots * sizeof *nh);
    if (!ns || !nh) {
        free(ns);
        free(nh);
        return 0;
    }
    for (size_t i = 0; i < nslots; i++) ns[i] = -1;
    for (size_t i = 0; i < st->nslots; i++) {
        int32_t sid = st->slot_sid[i];
        if (sid < 0) continue;
        uint64_t h = hash_bytes(st->arena + st->off[sid], st->len[sid]);
        size_t j = (size_t)h & (nslots - 1);
        while (ns[j] >= 0) j = (j + 1) & (nslots - 1);
        ns[j] = sid;
        nh[j] = (uint32_t)(h >> 32);
    }
    free(st->slot_sid);
    free(st->slot_hash);
    st->slot_sid = ns;
    st->slot_hash = nh;
    st->nslots = nslots;
    return 1;
}

int32_t strtab_add_string(strtab *st, const char *s, size_t n) {
    if (st->n >= (size_t)INT32_MAX - 1 || n > UINT32_MAX / 2) return -1;
    if (st->n == st->cap) {
        size_t nc = st->cap ? st->cap * 2 : 1024;
        uint32_t *o = realloc(st->off, nc * sizeof *o);
        if (!o) return -1;
        st->off = o;
        uint32_t *l = realloc(st->len, nc * sizeof *l);
        if (!l) return -1;
        st->len = l;
        st->cap = nc;
    }
    if (st->arena_n + n + 1 > st->arena_cap) {
        size_t nc = st->arena_cap ? st->arena_cap : 4096;
        while (nc < st->arena_n + n + 1) nc *= 2;
        if (nc > UINT32_MAX) return -1; /* offsets are 32-bit */
        char *a = realloc(st->arena, nc);
        if (!a) return -1;
        st->arena = a;
        st->arena_cap = nc;
    }
    memcpy(st->arena + st->arena_n, s, n);
    st->arena[st->arena_n + n] = 0;
    st->off[st->n] = (uint32_t)st->arena_n;
    st->len[st->n] = (uint32_t)n;
    st->arena_n += n + 1;
    return (int32_t)st->n++;
}

int strtab_index(strtab *st, int32_t sid) {
    if ((st->used + 1) * 2 > st->nslots && !strtab_rehash(st, st->nslots ? st->nslots * 2 : 1024)) return 0;
    const char *s = st->arena + st->off[sid];
    size_t n = st->len[sid];
    uint64_t h = hash_bytes(s, n);
    size_t mask = st->nslots - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        int32_t old = st->slot_sid[i];
        if (old < 0) {
            st->slot_sid[i] = sid;
            st->slot_hash[i] = (uint32_t)(h >> 32);
            st->used++;
            return 1;
        }
        if (st->slot_hash[i] == (uint32_t)(h >> 32) && st->len[old] == n &&
            memcmp(st->arena + st->off[old], s, n) == 0) {
            st->slot_sid[i] = sid;
            return 1;
        }
    }
}

int32_t strtab_intern(strtab *st, const char *s, size_t n) {
    int32_t sid = strtab_find(st, s, n);
    if (sid >= 0) return sid;
    sid = strtab_add_string(st, s, n);
    if (sid < 0 || !strtab_index(st, sid)) return -1;
    return sid;
}

void strtab_free(strtab *st) {
    free(st->arena);
    free(st->off);
    free(st->len);
    free(st->slot_sid);
    free(st->slot_hash);
}

#define PAIR_EMPTY UINT64_MAX

int pairmap_init(pairmap *m, size_t expected) {
    m->nslots = pow2_at_least(expected * 2 + 16);
    m->used = 0;
    m->s = malloc(m->nslots * sizeof *m->s);
    if (!m->s) return 0;
    for (size_t i = 0; i < m->nslots; i++) m->s[i].key = PAIR_EMPTY;
    return 1;
}

const pairslot *pairmap_get(const pairmap *m, uint64_t key) {
    size_t mask = m->nslots - 1;
    for (size_t i = (size_t)hash_u64(key) & mask;; i = (i + 1) & mask) {
        if (m->s[i].key == key) return &m->s[i];
        if (m->s[i].key == PAIR_EMPTY) return NULL;
    }
}

pairslot *pairmap_put(pairmap *m, uint64_t key, int32_t a, int32_t b) {
    if ((m->used + 1) * 2 > m->nslots) {
        pairmap bigger = {0};
        bigger.nslots = m->nslots * 2;
        bigger.s = malloc(bigger.nslots * sizeof *bigger.s);
        if (!bigger.s) return NULL;
        for (size_t i = 0; i < bigger.nslots; i++) bigger.s[i].key = PAIR_EMPTY;
        for (size_t i = 0; i < m->nslots; i++)
            if (m->s[i].key != PAIR_EMPTY) {
                size_t j = (size_t)hash_u64(m->s[i].key) & (bigger.nslots - 1);
                while (bigger.s[j].key != PAIR_EMPTY) j = (j + 1) & (bigger.nslots - 1);
                bigger.s[j] = m->s[i];
            }
        bigger.used = m->used;
        free(m->s);
        *m = bigger;
    }
    size_t mask = m->nslots - 1;
    for (size_t i = (size_t)hash_u64(key) & mask;; i = (i + 1) & mask) {
        if (m->s[i].key == key) return &m->s[i];
        if (m->s[i].key == PAIR_EMPTY) {
            m->s[i].key = key;
            m->s[i].a = a;
            m->s[i].b = b;
            m->used++;
            return &m->s[i];
        }
    }
}

static int bigram_before(const bigram *x, const bigram *y) {
    return x->key < y->key || (x->key == y->key && x->left < y->left);
}

void bigram_push(bigram_heap *h, bigram g, int *oom) {
    h->v = grow(h->v, &h->cap, h->n + 1, sizeof *h->v, oom);
    if (*oom) return;
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_before(&g, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = g;
}

bigram bigram_pop(bigram_heap *h) {
    bigram top = h->v[0], last = h->v[--h->n];
    size_t i = 0, n = h->n;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        const bigram *best = &last;
        if (l < n && bigram_before(&h->v[l], best)) {
            m = l;
            best = &h->v[l];
        }
        if (l + 1 < n && bigram_before(&h->v[l + 1], best)) m = l + 1;
        if (m == i) break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (n) h->v[i] = last;
    return top;
}
