/* arch_qwen35.c - Qwen3.5 dense (docs/engine-math.md §7; llama.cpp src/models/qwen35.cpp):
 * three Gated DeltaNet blocks then one gated attention block, repeated; every block has a
 * SwiGLU FFN.
 *
 *   h += Mixer(RMSNorm(h, attn_norm))          Mixer = GDN, or gated attention with q/k norm
 *   h += FFN(RMSNorm(h, post_attention_norm))     and partial NEOX rope (IMROPE for text)
 *
 * The converter already added 1 to the norm weights, so they are used as stored. The
 * mixers' binder (ld_qwen35_mixer) is shared with qwen35moe and qwen3next.
 * A file converted with the multi-token-prediction weights also has the MTP head (§12,
 * ld_qwen35_mtp), whose block has this dense FFN. */
#include "engine/arch/arch_common.h"

static int qwen35_load(loader *L) {
    model *m = L->m;
    qwen35_shape s;
    if (!ld_qwen35_shape(L, &s)) return 0;
    const int nextn = (int)ld_u32(L, "nextn_predict_layers", 0, 0);
    if (!ld_skip_nextn(L)) return 0; /* the MTP blocks come after the trunk, not in its stack */
    for (int i = 0; i < m->n_layer; i++) {
        block *b = &m->blocks[i];
        ld_qwen35_mixer(L, b, i, &s, 0); /* attn_norm; GDN or gated attention */
        ld_qwen35_ffn(L, b, i);
        if (L->failed) return 0;
    }
    if (!ld_embeddings(L, "output_norm.weight")) return 0;
    return nextn > 0 ? ld_qwen35_mtp(L, &s, ld_qwen35_ffn) : 1;
}

const arch_desc arch_qwen35 = {"qwen35", qwen35_load};
