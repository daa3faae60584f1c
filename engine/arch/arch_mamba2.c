/* arch_mamba2.c - Mamba-2 (docs/engine-math.md §5; llama.cpp src/models/mamba2.cpp): a
 * stack of Mamba-2 mixers, no attention, no FFN.
 *
 *   h += Mamba2(RMSNorm(h, attn_norm)) */
#include "engine/arch/arch_common.h"

static int mamba2_load(loader *L) {
    model *m = L->m;
    mamba2_layer m2;
    if (!ld_mamba2_shape(L, &m2)) return 0;
    for (int i = 0; i < m->n_layer && !L->failed; i++) {
        block *b = &m->blocks[i];
        b->mixer_norm = ld_vector(L, 1, m->n_embd, "blk.%d.attn_norm.weight", i);
        ld_mamba2(L, b, i, &m2);
    }
    if (L->failed) return 0;
    return ld_embeddings(L, "output_norm.weight");
}

const arch_desc arch_mamba2 = {"mamba2", mamba2_load};
