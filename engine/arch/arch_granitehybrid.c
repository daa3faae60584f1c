/* arch_granitehybrid.c - Granite 4.0-H (docs/engine-math.md §7; llama.cpp
 * src/models/granite-hybrid.cpp): Mamba-2 blocks and attention blocks, a SwiGLU FFN in
 * every block, and Granite's scales:
 *
 *   h  = embedding_scale * token_embd[token]
 *   h += residual_scale * Mixer(RMSNorm(h, attn_norm))     Mixer = Mamba-2 when
 *   h += residual_scale * FFN(RMSNorm(h, ffn_norm))          head_count_kv[i] = 0, else attention
 *   logits = output · RMSNorm(h, output_norm) / logit_scale
 *
 * Attention scores use attention.scale and no rope when rope.scaling.finetuned is false
 * (Granite 4.0-H); with it true (the default) rope is NORM. Granite-4.0-H-Tiny and -Small
 * (expert_count > 0) have a mixture of experts as every block's FFN instead (softmax
 * router, weights renormalised, no scale; SwiGLU experts of width feed_forward_length, or
 * silu(up) without ffn_gate_exps) plus, when expert_shared_feed_forward_length > 0, an
 * ungated SwiGLU shared expert:
 *
 *   h += residual_scale * (MoE(y) + SharedExpert(y)),   y = RMSNorm(h, ffn_norm) */
#include <math.h>

#include "engine/arch/arch_common.h"

/* a scale key, 1 when absent or 0 (llama.cpp applies a scale only when it is non-zero) */
static float scale_key(loader *L, const char *key) {
    const float v = ld_f32(L, key, 0, 0.0f);
    return v != 0.0f ? v : 1.0f;
}

static int granitehybrid_load(loader *L) {
    model *m = L->m;
    const int E = m->n_embd;
    m->embedding_scale = scale_key(L, "embedding_scale");
    m->residual_scale = scale_key(L, "residual_scale");
    m->logit_scale = scale_key(L, "logit_scale");
    const float attn_scale = ld_f32(L, "attention.scale", 0, 0.0f);
    const int rope = ld_bool(L, "rope.scaling.finetuned", 1) ? ROPE_NORM : ROPE_NONE;
    const int n_ff_shexp = (int)ld_u32(L, "expert_shared_feed_forward_length", 0, 0);
    mamba2_layer m2;
    if (!ld_mamba2_shape(L, &m2)) return 0;
    if (m2.d_inner != 2 * E) /* as llama.cpp: only an expansion factor of 2 */
        return ld_fail(L, "ssm.inner_size %d is not twice embedding_length %d", m2.d_inner, E);

    const int hd = ld_hybrid_head_dim(L);

    for (int i = 0; i < m->n_layer && !L->failed; i++) {
        block *b = &m->blocks[i];
        const int n_head = (int)ld_layer_i64(L, "attention.head_count", i, 0);
        const int n_kv = (int)ld_layer_i64(L, "attention.head_count_kv", i, n_head);
        b->mixer_norm = ld_vector(L, 1, E, "blk.%d.attn_norm.weight", i);
        if (n_kv == 0) {
            ld_mamba2(L, b, i, &m2);
        } else {
            attn_layer at = {.n_head = n_head, .n_head_kv = n_kv, .head_dim = hd, .eps = m->eps,
                             .kq_scale = attn_scale != 0.0f ? attn_scale : 1.0f / sqrtf((float)hd)};
            ld_rope(L, &at, rope);
            ld_attention(L, b, i, &at, 0);
        }
        b->ffn_norm = ld_vector(L, 1, E, "blk.%d.ffn_norm.weight", i);
        const int n_ff = (int)ld_layer_i64(L, "feed_forward_length", i, 0);
        moe_layer p;
        if (ld_moe_shape(L, i, &p)) {
            p.n_ff = n_ff; /* Granite's experts have the FFN's width */
            p.norm_w = 1;
            p.shared.kind = n_ff_shexp > 0 ? FFN_SWIGLU : FFN_NONE;
            p.shared.n_ff = n_ff_shexp;
            ld_moe(L, b, i, &p, 0, 1, 0);
        } else {
            ld_ffn(L, b, i, FFN_SWIGLU, n_ff);
        }
    }
    if (L->failed) return 0;
    return ld_embeddings(L, "output_norm.weight");
}

const arch_desc arch_granitehybrid = {"granitehybrid", granitehybrid_load};
