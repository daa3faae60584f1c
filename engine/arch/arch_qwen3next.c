/* arch_qwen3next.c - Qwen3-Next-80B-A3B and Qwen3-Coder-Next (docs/engine-math.md §11;
 * llama.cpp src/models/qwen3next.cpp): the blocks and the MoE FFN of qwen35moe, with
 * Qwen3-Next's own Gated DeltaNet layouts (ld_gdn's qwen3next: beta and alpha in one
 * ssm_ba, value head h reading key head h / (Hv/Hk), or the older fused ssm_in):
 *
 *   h += Mixer(RMSNorm(h, attn_norm))              GDN, or gated attention (NEOX rope)
 *   y  = RMSNorm(h, post_attention_norm)
 *   h += MoE(y) + sigmoid(ffn_gate_inp_shexp . y) * SharedExpert(y)
 *
 * Router: softmax over all experts, chosen weights renormalised, no scale. Every block
 * must have experts (llama.cpp refuses expert_count 0). */
#include "engine/arch/arch_common.h"

static int qwen3next_load(loader *L) {
    model *m = L->m;
    const int E = m->n_embd;
    qwen35_shape s;
    if (!ld_qwen35_shape(L, &s)) return 0;
    const int nextn = (int)ld_u32(L, "nextn_predict_layers", 0, 0);
    const int n_ff_shexp = (int)ld_u32(L, "expert_shared_feed_forward_length", 0, 0);
    if (L->failed) return 0;
    if (nextn < 0 || nextn >= m->n_layer) return ld_fail(L, "nextn_predict_layers %d of %d blocks", nextn, m->n_layer);
    m->n_layer -= nextn; /* MTP blocks are appended after the trunk and not run */

    for (int i = 0; i < m->n_layer && !L->failed; i++) {
        block *b = &m->blocks[i];
        b->mixer_norm = ld_vector(L, 1, E, "blk.%d.attn_norm.weight", i);
        if (qwen35_is_recurrent(L, i, m->n_layer, s.interval))
            ld_gdn(L, b, i, &s, 1);
        else
            ld_gated_attention(L, b, i, &s);
        b->ffn_norm = ld_vector(L, 1, E, "blk.%d.post_attention_norm.weight", i);
        moe_layer p;
        if (!ld_moe_shape(L, i, &p)) return ld_fail(L, "expert_count is missing or 0");
        p.norm_w = 1;
        p.shared.kind = FFN_SWIGLU;
        p.shared.n_ff = n_ff_shexp > 0 ? n_ff_shexp : (int)ld_layer_i64(L, "feed_forward_length", i, 0);
        ld_moe(L, b, i, &p, 0, 0, 1);
    }
    if (L->failed) return 0;
    return ld_embeddings(L, "output_norm.weight");
}

const arch_desc arch_qwen3next = {"qwen3next", qwen3next_load};
