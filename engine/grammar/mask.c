/* mask.c - which tokens a grammar allows next (grammar.h): the vocabulary's byte trie, the
 * walk of the trie with the matcher's stacks, the masks kept per state. */
#define _GNU_SOURCE /* qsort_r */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/matcher_impl.h"

struct grammar_vocab {
    int n;
    char *blob;          /* every token's bytes, one after the other */
    size_t *off;         /* n + 1: token i is blob[off[i] .. off[i + 1]) */
    unsigned char *eog;  /* n */
    int *eog_ids, n_eog;
    int max_len;         /* the longest token's bytes */
    /* The trie: node 0 the root; node i's children are the nodes child[i] .. child[i] +
     * n_child[i] - 1 (by byte, ascending), byte[i] the byte that leads to it, and the
     * tokens whose bytes end at it are toks[tok[i] .. tok[i] + n_tok[i]). */
    uint32_t n_nodes;
    uint32_t *child, *n_child, *tok, *n_tok;
    unsigned char *byte;
    int *toks;
};

static int by_bytes(const void *a, const void *b, void *arg) {
    const grammar_vocab *v = arg;
    const int x = *(const int *)a, y = *(const int *)b;
    const size_t lx = v->off[x + 1] - v->off[x], ly = v->off[y + 1] - v->off[y];
    const int c = memcmp(v->blob + v->off[x], v->blob + v->off[y], lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x - y;
}

/* Node `node` (at depth d) over the sorted tokens ids[lo, hi), which all share their first
 * d bytes: those of exactly d bytes end here, the others go to one child per next byte,
 * the children numbered together from *next. */
static void build_node(grammar_vocab *v, const int *ids, int lo, int hi, size_t d, uint32_t node, uint32_t *next) {
    int i = lo;
    v->tok[node] = (uint32_t)lo;
    while (i < hi && v->off[ids[i] + 1] - v->off[ids[i]] == d) i++;
    v->n_tok[node] = (uint32_t)(i - lo);
    uint32_t groups = 0;
    for (int j = i; j < hi;) {
        const unsigned char b = (unsigned char)v->blob[v->off[ids[j]] + d];
        while (j < hi && (unsigned char)v->blob[v->off[ids[j]] + d] == b) j++;
        groups++;
    }
    v->child[node] = *next;
    v->n_child[node] = groups;
    const uint32_t first = *next;
    *next += groups;
    uint32_t c = first;
    for (int j = i; j < hi; c++) {
        const int s = j;
        const unsigned char b = (unsigned char)v->blob[v->off[ids[j]] + d];
        while (j < hi && (unsigned char)v->blob[v->off[ids[j]] + d] == b) j++;
        v->byte[c] = b;
        build_node(v, ids, s, j, d + 1, c, next);
    }
}

void grammar_vocab_free(grammar_vocab *v) {
    if (!v) return;
    free(v->blob);
    free(v->off);
    free(v->eog);
    free(v->eog_ids);
    free(v->child);
    free(v->n_child);
    free(v->tok);
    free(v->n_tok);
    free(v->byte);
    free(v->toks);
    free(v);
}

int grammar_vocab_size(const grammar_vocab *v) { return v->n; }

grammar_vocab *grammar_vocab_new(int n, const char *const *bytes, const size_t *lens, const unsigned char *is_eog) {
    grammar_vocab *v = calloc(1, sizeof *v);
    if (!v || n <= 0) goto fail;
    v->n = n;
    size_t total = 0;
    int n_text = 0;
    for (int i = 0; i < n; i++)
        if (!is_eog[i]) total += lens[i], n_text += lens[i] > 0;
    v->blob = malloc(total + 1);
    v->off = malloc(((size_t)n + 1) * sizeof *v->off);
    v->eog = malloc((size_t)n);
    v->eog_ids = malloc((size_t)n * sizeof *v->eog_ids);
    v->toks = malloc(((size_t)n_text + 1) * sizeof *v->toks);
    const size_t max_nodes = total + 1;
    v->child = malloc(max_nodes * sizeof *v->child);
    v->n_child = malloc(max_nodes * sizeof *v->n_child);
    v->tok = malloc(max_nodes * sizeof *v->tok);
    v->n_tok = malloc(max_nodes * sizeof *v->n_tok);
    v->byte = malloc(max_nodes);
    if (!v->blob || !v->off || !v->eog || !v->eog_ids || !v->toks || !v->child || !v->n_child || !v->tok ||
        !v->n_tok || !v->byte)
        goto fail;
    size_t at = 0;
    int k = 0;
    for (int i = 0; i < n; i++) {
        v->off[i] = at;
        v->eog[i] = is_eog[i] != 0;
        if (v->eog[i]) {
            v->eog_ids[v->n_eog++] = i;
            continue;
        }
        memcpy(v->blob + at, bytes[i], lens[i]);
        at += lens[i];
        if (lens[i] > 0) v->toks[k++] = i;
        if ((int)lens[i] > v->max_len) v->max_len = (int)lens[i];
    }
    v->off[n] = at;
    qsort_r(v->toks, (size_t)k, sizeof *v->toks, by_bytes, v);
    uint32_t next = 1;
    build_node(v, v->toks, 0, k, 0, 0, &next);
    v->n_nodes = next;
    v->byte[0] = 0;
    return v;
fail:
    grammar_vocab_free(v);
    return NULL;
}

grammar_vocab *grammar_vocab_from_tokenizer(const tokenizer *t) {
    const int n = tokenizer_n_vocab(t);
    char **bytes = calloc((size_t)n, sizeof *bytes);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    unsigned char *eog = calloc((size_t)n, 1);
    grammar_vocab *v = NULL;
    char buf[1024];
    if (!bytes || !lens || !eog) goto out;
    for (int i = 0; i < n; i++) {
        eog[i] = tokenizer_is_eog(t, i) != 0;
        size_t k = tokenizer_token_bytes(t, i, 0, buf, sizeof buf);
        if (!(bytes[i] = malloc(k ? k : 1))) goto out;
        if (k > sizeof buf) tokenizer_token_bytes(t, i, 0, bytes[i], k);
        else memcpy(bytes[i], buf, k);
        lens[i] = k;
    }
    v = grammar_vocab_new(n, (const char *const *)bytes, lens, eog);
out:
    for (int i = 0; bytes && i < n; i++) free(bytes[i]);
    free(bytes);
    free(lens);
    free(eog);
    return v;
}

/* ---------------------------------------------------------------- the mask */

void mask_cache_free(grammar_matcher *m) {
    for (int i = 0; i < MASK_CACHE; i++) {
        free(m->cache[i].key);
        free(m->cache[i].bits);
        memset(&m->cache[i], 0, sizeof m->cache[i]);
    }
}

typedef struct {
    grammar_matcher *m;
    const grammar_vocab *v;
    uint32_t *bits;
    int allowed, oom;
} walk;

/* The children of node at depth d, the stacks s and the partial code point u standing
 * for the bytes of the path to it: a child's tokens are allowed when the grammar takes
 * its byte, and its children are walked from there. */
static void walk_node(walk *w, uint32_t node, int d, const gstacks *s, gutf8 u) {
    const grammar_vocab *v = w->v;
    const grammar *g = w->m->g;
    const uint32_t first = v->child[node], end = first + v->n_child[node];
    for (uint32_t c = first; c < end && !w->oom; c++) {
        gutf8 cu = u;
        uint32_t cp;
        const int k = gutf8_byte(&cu, v->byte[c], &cp);
        if (k < 0) continue;
        const gstacks *next = s;
        if (k > 0) {
            gstacks *out = &w->m->levels[d + 1];
            if (gstacks_advance(g, s, cp, out, &w->m->seen) != 0) {
                w->oom = 1;
                return;
            }
            if (out->n == 0) continue;
            next = out;
        } else {
            uint32_t lo, hi;
            if (!gutf8_span(&cu, &lo, &hi) || !gstacks_may_match(g, s, lo, hi)) continue;
        }
        for (uint32_t i = 0; i < v->n_tok[c]; i++) {
            const int id = v->toks[v->tok[c] + i];
            w->bits[id >> 5] |= 1u << (id & 31);
        }
        w->allowed += (int)v->n_tok[c];
        if (v->n_child[c]) walk_node(w, c, d + 1, next, cu);
    }
}

/* The matcher's state as a key: partial UTF-8, then the stacks' offsets and positions. */
static uint32_t *state_key(const grammar_matcher *m, uint32_t *n_key, uint32_t *hash) {
    const gstacks *s = &m->cur;
    const uint32_t n = 4 + s->n + 1 + s->n_pos;
    uint32_t *k = malloc(n * sizeof *k);
    if (!k) return NULL;
    k[0] = (uint32_t)m->utf8.remain, k[1] = m->utf8.value, k[2] = m->utf8.remain ? m->utf8.min : 0, k[3] = s->n;
    for (uint32_t i = 0; i <= s->n; i++) k[4 + i] = s->n ? s->off[i] : 0;
    if (s->n_pos) memcpy(k + 5 + s->n, s->pos, s->n_pos * sizeof *k);
    uint32_t h = 2166136261u;
    for (uint32_t i = 0; i < n; i++) h = (h ^ k[i]) * 16777619u;
    *n_key = n, *hash = h;
    return k;
}

/* The mask of the matcher's state: from the cache, or walked now into the least recently
 * used entry. NULL when out of memory. */
static const mask_entry *mask_of(grammar_matcher *m, const grammar_vocab *v) {
    if (m->cache_vocab != v) {
        mask_cache_free(m);
        m->cache_vocab = v;
    }
    uint32_t n_key, hash;
    uint32_t *key = state_key(m, &n_key, &hash);
    if (!key) return NULL;
    mask_entry *slot = &m->cache[0];
    for (int i = 0; i < MASK_CACHE; i++) {
        mask_entry *e = &m->cache[i];
        if (e->key && e->hash == hash && e->n_key == n_key && !memcmp(e->key, key, n_key * sizeof *key)) {
            free(key);
            e->used = ++m->clock;
            return e;
        }
        if (e->used < slot->used) slot = e;
    }
    const size_t words = ((size_t)v->n + 31) / 32;
    if (m->n_levels < v->max_len + 2) {
        gstacks *l = realloc(m->levels, ((size_t)v->max_len + 2) * sizeof *l);
        if (!l) return free(key), NULL;
        memset(l + m->n_levels, 0, ((size_t)v->max_len + 2 - (size_t)m->n_levels) * sizeof *l);
        m->levels = l, m->n_levels = v->max_len + 2;
    }
    if (!slot->bits && !(slot->bits = malloc(words * sizeof *slot->bits))) return free(key), NULL;
    memset(slot->bits, 0, words * sizeof *slot->bits);
    walk w = {m, v, slot->bits, 0, 0};
    walk_node(&w, 0, 0, &m->cur, m->utf8);
    if (w.oom) {
        free(key);
        free(slot->key);
        slot->key = NULL;
        slot->used = 0;
        return NULL;
    }
    if (grammar_matcher_can_end(m))
        for (int i = 0; i < v->n_eog; i++) slot->bits[v->eog_ids[i] >> 5] |= 1u << (v->eog_ids[i] & 31), w.allowed++;
    free(slot->key);
    slot->key = key, slot->n_key = n_key, slot->hash = hash;
    slot->n_allowed = w.allowed;
    slot->used = ++m->clock;
    return slot;
}

int grammar_mask(grammar_matcher *m, const grammar_vocab *v, uint32_t *allowed) {
    const mask_entry *e = mask_of(m, v);
    if (!e) return -1;
    memcpy(allowed, e->bits, ((size_t)v->n + 31) / 32 * sizeof *allowed);
    return e->n_allowed;
}

int grammar_mask_logits(grammar_matcher *m, const grammar_vocab *v, float *logits) {
    const mask_entry *e = mask_of(m, v);
    if (!e) return -1;
    for (int w = 0; w * 32 < v->n; w++) {
        const uint32_t b = e->bits[w];
        if (b == 0xffffffffu) continue;
        const int end = w * 32 + 32 < v->n ? w * 32 + 32 : v->n;
        for (int i = w * 32; i < end; i++)
            if (!(b >> (i & 31) & 1)) logits[i] = -INFINITY;
    }
    return e->n_allowed;
}

int grammar_accept_token(grammar_matcher *m, const grammar_vocab *v, int id) {
    if (id < 0 || id >= v->n) return -1;
    if (v->eog[id]) return grammar_matcher_can_end(m) ? 0 : -1;
    const size_t len = v->off[id + 1] - v->off[id];
    if (!len) return -1;
    return grammar_matcher_accept(m, v->blob + v->off[id], len);
}
