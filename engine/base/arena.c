/* arena.c - the bump allocator of arena.h. */
#include "engine/base/arena.h"

#include <stdio.h>
#include <stdlib.h>

struct arena_block {
    struct arena_block *next;
    size_t size, used;
    _Alignas(64) unsigned char data[];
};

#define ARENA_MIN_BLOCK ((size_t)4 << 20)

void *arena_alloc(arena *a, size_t bytes) {
    bytes = (bytes + 63) & ~(size_t)63;
    struct arena_block *b = a->blocks;
    if (!b || b->size - b->used < bytes) {
        /* a spare block that fits, else a new one */
        struct arena_block **pp = &a->spare;
        while (*pp && (*pp)->size < bytes) pp = &(*pp)->next;
        if (*pp) {
            b = *pp;
            *pp = b->next;
        } else {
            size_t size = bytes > ARENA_MIN_BLOCK ? bytes : ARENA_MIN_BLOCK;
            b = aligned_alloc(64, (sizeof *b + size + 63) & ~(size_t)63);
            if (!b) {
                fprintf(stderr, "chatfs: out of memory (arena of %zu bytes)\n", size);
                abort();
            }
            b->size = size;
        }
        b->used = 0;
        b->next = a->blocks;
        a->blocks = b;
    }
    void *p = b->data + b->used;
    b->used += bytes;
    a->used_total += bytes;
    if (a->used_total > a->peak) a->peak = a->used_total;
    return p;
}

float *arena_floats(arena *a, size_t n) { return arena_alloc(a, n * sizeof(float)); }

arena_mark arena_save(const arena *a) {
    return (arena_mark){a->blocks, a->blocks ? a->blocks->used : 0, a->used_total};
}

void arena_restore(arena *a, arena_mark m) {
    while (a->blocks && a->blocks != m.block) { /* blocks chained after the mark become spares */
        struct arena_block *b = a->blocks;
        a->blocks = b->next;
        b->next = a->spare;
        a->spare = b;
    }
    if (a->blocks) a->blocks->used = m.used;
    a->used_total = m.total;
}

void arena_reset(arena *a) {
    /* when a pass needed several blocks, replace them by one block of the peak size so
     * the next pass allocates nothing */
    arena_restore(a, (arena_mark){NULL, 0, 0});
    if (a->spare && a->spare->next) {
        size_t peak = a->peak;
        arena_free(a);
        a->peak = peak;
        struct arena_block *b = aligned_alloc(64, (sizeof *b + peak + 63) & ~(size_t)63);
        if (b) {
            b->size = peak;
            b->used = 0;
            b->next = NULL;
            a->spare = b;
        }
    }
}

void arena_free(arena *a) {
    arena_restore(a, (arena_mark){NULL, 0, 0});
    while (a->spare) {
        struct arena_block *n = a->spare->next;
        free(a->spare);
        a->spare = n;
    }
    a->used_total = 0;
}
