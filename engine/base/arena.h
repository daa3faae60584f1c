/* arena.h - a bump allocator for the temporaries of one forward pass.
 *
 * Allocation bumps a pointer in the newest block (a new block is chained when it does
 * not fit); arena_save/arena_restore give back everything allocated since the mark (a
 * layer frees its temporaries so the next layer reuses the same, cache-warm memory: a
 * 512-token prefill then needs one layer's temporaries, not all of them). Blocks are kept
 * between passes; arena_reset makes them reusable. */
#ifndef CHATFS_ARENA_H
#define CHATFS_ARENA_H

#include <stddef.h>

typedef struct arena {
    struct arena_block *blocks, *spare; /* in use (newest first); emptied, kept for reuse */
    size_t used_total, peak;
} arena;
typedef struct {
    struct arena_block *block;
    size_t used, total;
} arena_mark;
void *arena_alloc(arena *a, size_t bytes);            /* 64-byte aligned, not zeroed */
float *arena_floats(arena *a, size_t n);
arena_mark arena_save(const arena *a);
void arena_restore(arena *a, arena_mark m);
void arena_reset(arena *a);
void arena_free(arena *a);

#endif
