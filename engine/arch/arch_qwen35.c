/* arch_qwen35.c - Qwen3.5 dense (docs/engine-math.md §7; llama.cpp src/models/qwen35.cpp):
 * three Gated DeltaNet blocks then one gated attention block, repeated; every block has a
 * SwiGLU FFN. The MTP blocks (nextn) are appended after the trunk and not run.
 *
 *   h += Mixer(RMSNorm(h, attn_norm))          Mixer = GDN, or gated attention with q/k norm
 *   h += FFN(RMSNorm(h, post_attention_norm))     and partial NEOX rope (IMROPE for text)
 *
 * The converter already added 1 to the norm weights, so they are used as stored. The
 * mixers' binder (ld_qwen35_mixer) is shared with qwen35moe and qwen3next. */
#include "engine/arch/arch_common.h"

static int qwen35_load(loader *L) {
    model *m = L->m;
    const int E = m->n_embd;
    qwen35_shape s;
    if (!ld_qwen35_shape(L, &s) || !ld_skip_nextn(L)) return 0;
    for (int i = 0; i < m->n_layer; i++) {
        block *b = &m->blocks[i];
        const int n_ff = (int)ld_layer_i64(L, "feed_forward_length", i, 0);
        ld_qwen35_mixer(L, b, i, &s, 0); /* attn_norm; GDN or gated attention */
        b->ffn_norm = ld_vector(L, 1, E, "blk.%d.post_attention_norm.weight", i);
        b->ffn = (ffn_layer){.kind = FFN_SWIGLU, .n_ff = n_ff};
        ld_matrix(L, &b->ffn.gate, 1, E, n_ff, "blk.%d.ffn_gate.weight", i);
        ld_matrix(L, &b->ffn.up, 1, E, n_ff, "blk.%d.ffn_up.weight", i);
        ld_matrix(L, &b->ffn.down, 1, n_ff, E, "blk.%d.ffn_down.weight", i);
        if (L->failed) return 0;
    }
    return ld_embeddings(L, "output_norm.weight");
}

const arch_desc arch_qwen35 = {"qwen35", qwen35_load};
