/* matcher.c - the pushdown matcher over a compiled grammar (grammar.h): stack sets, their
 * expansion and advance by a code point, and the matcher that consumes UTF-8 bytes. */
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/grammar_impl.h"

void gstacks_clear(gstacks *s) { s->n = s->n_pos = 0; }

void gstacks_free(gstacks *s) {
    free(s->pos);
    free(s->off);
    free(s->hash);
    memset(s, 0, sizeof *s);
}

static int reserve(gstacks *s, uint32_t n_pos, uint32_t n) {
    if (n_pos > s->cap_pos) {
        uint32_t c = s->cap_pos ? s->cap_pos : 64;
        while (c < n_pos) c *= 2;
        uint32_t *p = realloc(s->pos, c * sizeof *p);
        if (!p) return -1;
        s->pos = p, s->cap_pos = c;
    }
    if (n + 1 > s->cap) {
        uint32_t c = s->cap ? s->cap : 16;
        while (c < n + 1) c *= 2;
        uint32_t *o = realloc(s->off, c * sizeof *o), *h = o ? realloc(s->hash, c * sizeof *h) : NULL;
        if (o) s->off = o;
        if (!h) return -1;
        s->hash = h, s->cap = c;
    }
    return 0;
}

int gstacks_copy(gstacks *dst, const gstacks *src) {
    if (reserve(dst, src->n_pos, src->n) != 0) return -1;
    if (src->n_pos) memcpy(dst->pos, src->pos, src->n_pos * sizeof *dst->pos);
    if (src->n) {
        memcpy(dst->off, src->off, (src->n + 1) * sizeof *dst->off);
        memcpy(dst->hash, src->hash, src->n * sizeof *dst->hash);
    } else if (dst->off)
        dst->off[0] = 0;
    dst->n = src->n, dst->n_pos = src->n_pos;
    return 0;
}

static uint32_t hash_stack(const uint32_t *st, uint32_t len) {
    uint32_t h = 2166136261u ^ len;
    for (uint32_t i = 0; i < len; i++) h = (h ^ st[i]) * 16777619u;
    return h;
}

/* adds the stack unless the set has it: 1 added, 0 there already, -1 out of memory */
static int add_stack(gstacks *s, const uint32_t *st, uint32_t len) {
    const uint32_t h = hash_stack(st, len);
    for (uint32_t i = 0; i < s->n; i++)
        if (s->hash[i] == h && s->off[i + 1] - s->off[i] == len &&
            (!len || !memcmp(s->pos + s->off[i], st, len * sizeof *st)))
            return 0;
    if (reserve(s, s->n_pos + len, s->n + 1) != 0) return -1;
    if (s->n == 0) s->off[0] = 0;
    if (len) memcpy(s->pos + s->n_pos, st, len * sizeof *st);
    s->n_pos += len;
    s->hash[s->n++] = h;
    s->off[s->n] = s->n_pos;
    return 1;
}

static int ends_alt(const gelem *e) { return e->type == GE_END || e->type == GE_ALT; }

/* seen: the stacks with a rule reference on top met in one expansion. A rule may come back
 * on top of the same stack through rules that match the empty text (( [x]* )*, which the
 * compile allows as llama.cpp does); the second time adds nothing. */
static int expand(const grammar *g, const uint32_t *stack, uint32_t len, gstacks *out, gstacks *seen);

int gstacks_expand(const grammar *g, const uint32_t *stack, uint32_t len, gstacks *out, gstacks *seen) {
    gstacks_clear(seen);
    return expand(g, stack, len, out, seen);
}

static int expand(const grammar *g, const uint32_t *stack, uint32_t len, gstacks *out, gstacks *seen) {
    if (len == 0 || g->el[stack[len - 1]].type == GE_CHAR) return add_stack(out, stack, len) < 0 ? -1 : 0;
    const int fresh = add_stack(seen, stack, len);
    if (fresh <= 0) return fresh;
    /* a rule reference on top: the rest of its alternative below, each of the rule's
     * alternatives on top of that (no left recursion: this ends) */
    const uint32_t top = stack[len - 1];
    const gelem *ref = &g->el[top];
    uint32_t small[64], *nw = len + 1 <= 64 ? small : malloc((len + 1) * sizeof *nw);
    if (!nw) return -1;
    memcpy(nw, stack, (len - 1) * sizeof *nw);
    uint32_t base = len - 1;
    if (!ends_alt(ref + 1)) nw[base++] = top + 1;
    int rc = 0;
    uint32_t a = g->rule_start[ref->value];
    for (;;) {
        uint32_t n = base;
        if (!ends_alt(&g->el[a])) nw[n++] = a;
        if ((rc = expand(g, nw, n, out, seen)) != 0) break;
        while (!ends_alt(&g->el[a])) a++;
        if (g->el[a].type == GE_END) break;
        a++;
    }
    if (nw != small) free(nw);
    return rc;
}

int gstacks_advance(const grammar *g, const gstacks *in, uint32_t cp, gstacks *out, gstacks *seen) {
    gstacks_clear(out);
    for (uint32_t i = 0; i < in->n; i++) {
        const uint32_t len = in->off[i + 1] - in->off[i];
        if (!len) continue;
        const uint32_t *st = in->pos + in->off[i];
        const uint32_t top = st[len - 1];
        if (!gclass_match(g, &g->cls[g->el[top].value], cp)) continue;
        /* the character is consumed: the rest of its alternative, if any, takes its place */
        uint32_t small[64], *nw = len <= 64 ? small : malloc(len * sizeof *nw);
        if (!nw) return -1;
        memcpy(nw, st, (len - 1) * sizeof *nw);
        uint32_t n = len - 1;
        if (!ends_alt(&g->el[top + 1])) nw[n++] = top + 1;
        int rc = gstacks_expand(g, nw, n, out, seen);
        if (nw != small) free(nw);
        if (rc) return -1;
    }
    return 0;
}

int gstacks_may_match(const grammar *g, const gstacks *s, uint32_t lo, uint32_t hi) {
    for (uint32_t i = 0; i < s->n; i++) {
        const uint32_t len = s->off[i + 1] - s->off[i];
        if (!len) continue;
        const gclass *c = &g->cls[g->el[s->pos[s->off[i + 1] - 1]].value];
        if (c->negate) {
            /* all of [lo, hi] excluded only when one range covers it */
            int covered = 0;
            for (uint32_t k = 0; k < c->n && !covered; k++)
                covered = g->rng[c->first + k].lo <= lo && hi <= g->rng[c->first + k].hi;
            if (!covered) return 1;
        } else
            for (uint32_t k = 0; k < c->n; k++)
                if (g->rng[c->first + k].lo <= hi && lo <= g->rng[c->first + k].hi) return 1;
    }
    return 0;
}

int gstacks_can_end(const gstacks *s) {
    for (uint32_t i = 0; i < s->n; i++)
        if (s->off[i + 1] == s->off[i]) return 1;
    return 0;
}

/* ---------------------------------------------------------------- the matcher */

#include "engine/grammar/matcher_impl.h"

grammar_matcher *grammar_matcher_new(const grammar *g) {
    grammar_matcher *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->g = g;
    uint32_t start = g->rule_start[g->root];
    /* the root's alternatives, as a reference to root would expand */
    for (uint32_t a = start;;) {
        int bad = ends_alt(&g->el[a]) ? gstacks_expand(g, &a, 0, &m->cur, &m->seen)
                                         : gstacks_expand(g, &a, 1, &m->cur, &m->seen);
        if (bad) {
            grammar_matcher_free(m);
            return NULL;
        }
        while (!ends_alt(&g->el[a])) a++;
        if (g->el[a].type == GE_END) break;
        a++;
    }
    return m;
}

void grammar_matcher_free(grammar_matcher *m) {
    if (!m) return;
    gstacks_free(&m->cur);
    gstacks_free(&m->tmp[0]);
    gstacks_free(&m->tmp[1]);
    gstacks_free(&m->seen);
    mask_cache_free(m);
    for (int i = 0; i < m->n_levels; i++) gstacks_free(&m->levels[i]);
    free(m->levels);
    free(m);
}

int grammar_matcher_assign(grammar_matcher *dst, const grammar_matcher *src) {
    if (dst->g != src->g) return -1;
    if (dst == src) return 0;
    if (gstacks_copy(&dst->cur, &src->cur) != 0) return -1;
    dst->utf8 = src->utf8;
    return 0;
}

int grammar_matcher_accept(grammar_matcher *m, const char *s, size_t n) {
    gutf8 u = m->utf8;
    const gstacks *at = &m->cur;
    int which = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp;
        int k = gutf8_byte(&u, (unsigned char)s[i], &cp);
        if (k < 0) return -1;
        if (k == 0) {
            uint32_t lo, hi;
            if (!gutf8_span(&u, &lo, &hi) || !gstacks_may_match(m->g, at, lo, hi)) return -1;
            continue;
        }
        gstacks *out = &m->tmp[which];
        if (gstacks_advance(m->g, at, cp, out, &m->seen) != 0 || out->n == 0) return -1;
        at = out;
        which ^= 1;
    }
    if (at != &m->cur) { /* the result becomes the state: swapped in, not copied */
        gstacks t = m->cur;
        m->cur = *(gstacks *)at;
        *(gstacks *)at = t;
    }
    m->utf8 = u;
    return 0;
}

int grammar_matcher_can_end(const grammar_matcher *m) { return m->utf8.remain == 0 && gstacks_can_end(&m->cur); }

int grammar_matcher_must_end(const grammar_matcher *m) {
    for (uint32_t i = 0; i < m->cur.n; i++)
        if (m->cur.off[i + 1] != m->cur.off[i]) return 0;
    return m->utf8.remain == 0;
}

int grammar_accepts(const grammar *g, const char *s, size_t n) {
    grammar_matcher *m = grammar_matcher_new(g);
    if (!m) return -1;
    int ok = grammar_matcher_accept(m, s, n) == 0 && grammar_matcher_can_end(m);
    grammar_matcher_free(m);
    return ok;
}
