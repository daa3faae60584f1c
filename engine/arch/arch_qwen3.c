/* arch_qwen3.c - Qwen3 dense (llama.cpp src/models/qwen3.cpp), a pure transformer:
 * attention with per-head q/k RMSNorm and NEOX rope over the whole head, SwiGLU FFN.
 *
 *   h += Attn(RMSNorm(h, attn_norm))
 *   h += FFN(RMSNorm(h, ffn_norm)) */
#include <math.h>

#include "engine/arch/arch_common.h"

static int qwen3_load(loader *L) {
    model *m = L->m;
    const int E = m->n_embd;
    const int n_head = (int)ld_u32(L, "attention.head_count", 1, 0);
    if (!ld_no_experts(L)) return 0;
    if (n_head <= 0) return ld_fail(L, "attention.head_count %d", n_head);
    const int hd = (int)ld_u32(L, "attention.key_length", 0, (uint32_t)(E / n_head));
    const attn_layer at = {.n_head = n_head, .head_dim = hd, .eps = m->eps, .kq_scale = 1.0f / sqrtf((float)hd)};
    for (int i = 0; i < m->n_layer && !L->failed; i++) /* attention with NEOX rope and q/k norms, SwiGLU FFN */
        ld_transformer_block(L, &m->blocks[i], i, &at, ROPE_NEOX, 1);
    if (L->failed) return 0;
    return ld_embeddings(L, "output_norm.weight");
}

const arch_desc arch_qwen3 = {"qwen3", qwen3_load};
