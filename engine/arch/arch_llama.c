/* arch_llama.c - Llama (llama.cpp src/models/llama.cpp), a pure transformer: attention
 * with NORM rope (pairs of adjacent dims; the converter permuted q/k for it) and optional
 * rope_freqs factors (Llama 3.x), optional biases, SwiGLU FFN.
 *
 *   h += Attn(RMSNorm(h, attn_norm))
 *   h += FFN(RMSNorm(h, ffn_norm))
 *
 * Mixtral-style MoE files (llama with expert_count > 0) are not supported yet. */
#include <math.h>

#include "engine/arch/arch_common.h"

static int llama_load(loader *L) {
    model *m = L->m;
    const int E = m->n_embd;
    const int n_head = (int)ld_u32(L, "attention.head_count", 1, 0);
    const float attn_scale = ld_f32(L, "attention.scale", 0, 0.0f);
    if (!ld_no_experts(L)) return 0;
    if (n_head <= 0) return ld_fail(L, "attention.head_count %d", n_head);
    const int hd = (int)ld_u32(L, "attention.key_length", 0, (uint32_t)(E / n_head));
    const attn_layer at = {.n_head = n_head, .head_dim = hd, .eps = m->eps,
                           .kq_scale = attn_scale != 0.0f ? attn_scale : 1.0f / sqrtf((float)hd)};
    for (int i = 0; i < m->n_layer && !L->failed; i++) /* attention with NORM rope, SwiGLU FFN */
        ld_transformer_block(L, &m->blocks[i], i, &at, ROPE_NORM, 0);
    if (L->failed) return 0;
    return ld_embeddings(L, "output_norm.weight");
}

const arch_desc arch_llama = {"llama", llama_load};
