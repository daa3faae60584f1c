/* arch_qwen35moe.c - Qwen3.5 with mixture-of-experts FFNs: Qwen3.5-35B-A3B, -122B-A10B,
 * -397B-A17B, Qwen3.6-35B-A3B (docs/engine-math.md §11; llama.cpp src/models/qwen35moe.cpp).
 * The blocks of qwen35 (three Gated DeltaNet blocks, then one gated attention block) with
 * an MoE FFN in every block:
 *
 *   h += Mixer(RMSNorm(h, attn_norm))
 *   y  = RMSNorm(h, post_attention_norm)
 *   h += MoE(y) + sigmoid(ffn_gate_inp_shexp . y) * SharedExpert(y)
 *
 * The router is a softmax over all experts, the chosen weights renormalised to sum 1, no
 * scale (llama.cpp hard-codes these and reads no key for them); experts and the shared
 * expert are SwiGLU. A file with the multi-token-prediction weights also has the MTP head
 * (ld_qwen35_mtp): qwen35's, with this MoE FFN in its block (llama.cpp src/models/qwen35moe.cpp
 * graph_mtp). */
#include "engine/arch/arch_common.h"

static int qwen35moe_load(loader *L) {
    model *m = L->m;
    qwen35_shape s;
    if (!ld_qwen35_shape(L, &s)) return 0;
    const int nextn = (int)ld_u32(L, "nextn_predict_layers", 0, 0);
    if (!ld_skip_nextn(L)) return 0; /* the MTP blocks come after the trunk, not in its stack */
    for (int i = 0; i < m->n_layer && !L->failed; i++) {
        ld_qwen35_mixer(L, &m->blocks[i], i, &s, 0); /* attn_norm; GDN or gated attention */
        ld_qwen35_moe_ffn(L, &m->blocks[i], i);      /* post_attention_norm; MoE + shared expert */
    }
    if (L->failed || !ld_embeddings(L, "output_norm.weight")) return 0;
    return nextn > 0 ? ld_qwen35_mtp(L, &s, ld_qwen35_moe_ffn) : 1;
}

const arch_desc arch_qwen35moe = {"qwen35moe", qwen35moe_load};
