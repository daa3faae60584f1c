/* arch_qwen35.c - Qwen3.5 dense (docs/engine-math.md §7; llama.cpp src/models/qwen35.cpp):
 * three Gated DeltaNet blocks then one gated attention block, repeated; every block has a
 * SwiGLU FFN.
 *
 *   h += Mixer(RMSNorm(h, attn_norm))          Mixer = GDN, or gated attention with q/k norm
 *   h += FFN(RMSNorm(h, post_attention_norm))     and partial NEOX rope (IMROPE for text)
 *
 * The converter already added 1 to the norm weights, so they are used as stored. The
 * mixers' binders (ld_gdn, ld_gated_attention) are shared with qwen35moe and qwen3next. */
#include "engine/arch/arch_common.h"

static int qwen35_load(loader *L) {
    model *m = L->m;
    const int E = m->n_embd;
    qwen35_shape s;
    if (!ld_qwen35_shape(L, &s)) return 0;
    const int nextn = (int)ld_u32(L, "nextn_predict_layers", 0, 0);
    if (L->failed) return 0;
    if (nextn < 0 || nextn >= m->n_layer) return ld_fail(L, "inconsistent qwen35 hyper-parameters");
    /* MTP blocks (nextn) are appended after the trunk and not run */
    m->n_layer -= nextn;

    for (int i = 0; i < m->n_layer; i++) {
        block *b = &m->blocks[i];
        const int n_ff = (int)ld_layer_i64(L, "feed_forward_length", i, 0);
        b->mixer_norm = ld_vector(L, 1, E, "blk.%d.attn_norm.weight", i);
        if (qwen35_is_recurrent(L, i, m->n_layer, s.interval))
            ld_gdn(L, b, i, &s, 0);
        else
            ld_gated_attention(L, b, i, &s);
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
