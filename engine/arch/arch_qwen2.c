/* arch_qwen2.c - Qwen1.5 / Qwen2 / Qwen2.5 (llama.cpp src/models/qwen2.cpp), a pure
 * transformer: a llama block with biases on q, k and v, NEOX rope over the whole head
 * (the converter does not permute q/k rows as llama's does) and no q/k norms.
 *
 *   q, k, v = W_q x + b_q, W_k x + b_k, W_v x + b_v    (x = RMSNorm(h, attn_norm))
 *   h += W_o Attn(RoPE_neox(q), RoPE_neox(k), v)        (scale 1/sqrt(head_dim))
 *   h += FFN(RMSNorm(h, ffn_norm))                       (SwiGLU)
 *   logits = output RMSNorm(h, output_norm) (+ output.bias)
 *
 * The K bias is not a softmax no-op: rope turns it differently at every key position.
 * The converter writes only the generic keys: the head size is n_embd / head_count and
 * rope covers all of it. */
#include <math.h>

#include "engine/arch/arch_common.h"

static int qwen2_load(loader *L) {
    model *m = L->m;
    const int E = m->n_embd;
    const int n_head = (int)ld_u32(L, "attention.head_count", 1, 0);
    ld_f32(L, "attention.layer_norm_rms_epsilon", 1, 0.0f); /* required, as llama.cpp's loader has it */
    if (!ld_no_experts(L)) return 0;
    if (n_head <= 0) return ld_fail(L, "attention.head_count %d", n_head);
    const int hd = (int)ld_u32(L, "attention.key_length", 0, (uint32_t)(E / n_head));
    const attn_layer at = {.n_head = n_head, .head_dim = hd, .eps = m->eps, .kq_scale = 1.0f / sqrtf((float)hd)};
    for (int i = 0; i < m->n_layer && !L->failed; i++) /* attention with NEOX rope (q/k/v biases optional, */
        ld_transformer_block(L, &m->blocks[i], i, &at, ROPE_NEOX, 0); /* as in llama.cpp), SwiGLU FFN */
    if (L->failed || !ld_embeddings(L, "output_norm.weight")) return 0;
    m->output_bias = ld_vector(L, 0, m->n_vocab, "output.bias");
    return !L->failed;
}

const arch_desc arch_qwen2 = {"qwen2", qwen2_load};
