/* matcher_impl.h - the matcher's state, shared by matcher.c (consuming text) and mask.c
 * (the token mask and its cache). */
#ifndef CHATFS_GRAMMAR_MATCHER_IMPL_H
#define CHATFS_GRAMMAR_MATCHER_IMPL_H

#include "engine/grammar/grammar_impl.h"

#define MASK_CACHE 8 /* masks kept per matcher, the least recently used replaced */

typedef struct {
    uint32_t *key;   /* the state: partial UTF-8, stack count, offsets, positions */
    uint32_t n_key, hash;
    uint32_t *bits;  /* the mask */
    int n_allowed;
    uint64_t used;
} mask_entry;

struct grammar_matcher {
    const grammar *g;
    gstacks cur;       /* the state */
    gutf8 utf8;        /* a code point begun by the last bytes */
    gstacks tmp[2];    /* scratch of grammar_matcher_accept */
    gstacks seen;      /* scratch of every expansion (gstacks_expand) */
    gstacks *levels;   /* scratch of the mask's walk: the stacks after each depth's code point */
    int n_levels;
    mask_entry cache[MASK_CACHE];
    uint64_t clock;
    const grammar_vocab *cache_vocab; /* the vocabulary the cached masks are over */
};

void mask_cache_free(grammar_matcher *m);

#endif
