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
    qwen35_shape s;
    if (!ld_qwen35_shape(L, &s) || !ld_skip_nextn(L)) return 0;
    for (int i = 0; i < m->n_layer && !L->failed; i++) {
        ld_qwen35_mixer(L, &m->blocks[i], i, &s, 1); /* attn_norm; GDN (Qwen3-Next's layouts) or gated attention */
        ld_qwen35_moe_ffn(L, &m->blocks[i], i);      /* post_attention_norm; MoE + shared expert */
    }
    return !L->failed && ld_embeddings(L, "output_norm.weight");
}

const arch_desc arch_qwen3next = {"qwen3next", qwen3next_load};
