/* grammar_impl.h - what the grammar room's files share: the compiled grammar (parse.c
 * makes it), the stack sets the matcher (matcher.c) and the mask (mask.c) work on. */
#ifndef CHATFS_GRAMMAR_IMPL_H
#define CHATFS_GRAMMAR_IMPL_H

#include "engine/grammar/grammar.h"

/* A rule's elements: alternatives of GE_CHAR and GE_RULE elements, each alternative ended
 * by GE_ALT, the last by GE_END. */
enum { GE_END = 0, GE_ALT, GE_RULE, GE_CHAR };

typedef struct {
    uint32_t type;  /* GE_* */
    uint32_t value; /* GE_RULE: the rule; GE_CHAR: the class */
} gelem;

/* A character class: code points in any of ranges [first, first + n), or in none when
 * negate is set; ascii[] the answer for code points below 128. */
typedef struct {
    uint32_t first, n;
    int negate;
    uint64_t ascii[2];
} gclass;

typedef struct {
    uint32_t lo, hi; /* inclusive */
} grange;

struct grammar {
    gelem *el;            /* every rule's elements, one after the other */
    uint32_t *rule_start; /* n_rules: where each rule's elements begin in el */
    int n_rules, root;
    gclass *cls;
    int n_cls;
    grange *rng;
};

/* A set of stacks: stack i is pos[off[i] .. off[i + 1]), its top last; every top is a
 * GE_CHAR element's index in el (an empty stack: the text may end here). */
typedef struct {
    uint32_t *pos, *off, *hash;
    uint32_t n_pos, cap_pos, n, cap;
} gstacks;

void gstacks_clear(gstacks *s);
void gstacks_free(gstacks *s);
int gstacks_copy(gstacks *dst, const gstacks *src);
/* The stacks the stack (len positions, its top last) stands for once every rule reference
 * on top is expanded into its alternatives, added to out (each once). seen: the caller's
 * scratch. 0 or -1 (memory). */
int gstacks_expand(const grammar *g, const uint32_t *stack, uint32_t len, gstacks *out, gstacks *seen);
/* out = the stacks of in after the code point cp (out cleared first; seen: scratch). 0 or
 * -1 (memory). */
int gstacks_advance(const grammar *g, const gstacks *in, uint32_t cp, gstacks *out, gstacks *seen);
/* 1 when some stack's top could match a code point in [lo, hi] */
int gstacks_may_match(const grammar *g, const gstacks *s, uint32_t lo, uint32_t hi);
int gstacks_can_end(const gstacks *s);

static inline int gclass_match(const grammar *g, const gclass *c, uint32_t cp) {
    if (cp < 128) return (int)(c->ascii[cp >> 6] >> (cp & 63) & 1);
    int in = 0;
    for (uint32_t i = 0; i < c->n && !in; i++) in = g->rng[c->first + i].lo <= cp && cp <= g->rng[c->first + i].hi;
    return in != c->negate;
}

/* A pending partial UTF-8 sequence: the bits so far, the continuation bytes still due, the
 * least code point its length may encode (shorter encodings are overlong, invalid) */
typedef struct {
    uint32_t value;
    int remain;
    uint32_t min;
} gutf8;

/* Feeds byte b: 1 when a code point is complete (*cp), 0 when more bytes are due, -1 when
 * b is not valid UTF-8 here. */
static inline int gutf8_byte(gutf8 *u, unsigned char b, uint32_t *cp) {
    if (u->remain == 0) {
        if (b < 0x80) return *cp = b, 1;
        if (b >= 0xc2 && b <= 0xdf) u->value = b & 0x1f, u->remain = 1, u->min = 0x80;
        else if (b >= 0xe0 && b <= 0xef) u->value = b & 0x0f, u->remain = 2, u->min = 0x800;
        else if (b >= 0xf0 && b <= 0xf4) u->value = b & 0x07, u->remain = 3, u->min = 0x10000;
        else return -1;
        return 0;
    }
    if ((b & 0xc0) != 0x80) return -1;
    u->value = u->value << 6 | (b & 0x3f);
    if (--u->remain) return 0;
    *cp = u->value;
    u->value = 0;
    if (*cp < u->min || *cp > 0x10ffff || (*cp >= 0xd800 && *cp <= 0xdfff)) return -1;
    return 1;
}

/* The code points a pending sequence may still become: [lo, hi]; 0 when none (an overlong
 * or out-of-range start) */
static inline int gutf8_span(const gutf8 *u, uint32_t *lo, uint32_t *hi) {
    const int bits = 6 * u->remain;
    *lo = u->value << bits;
    *hi = *lo | ((1u << bits) - 1);
    if (*lo < u->min) *lo = u->min;
    if (*hi > 0x10ffff) *hi = 0x10ffff;
    return *lo <= *hi;
}

#endif
