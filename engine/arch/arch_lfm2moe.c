/* arch_lfm2moe.c - Liquid LFM2-8B-A1B and LFM2-24B-A2B (docs/engine-math.md §11; llama.cpp
 * src/models/lfm2moe.cpp, graph of src/models/lfm2.cpp): LFM2's blocks (gated short
 * convolution, or attention with q/k norm and NEOX rope) whose FFN is a SwiGLU in the
 * first leading_dense_block_count blocks and a mixture of experts after them:
 *
 *   h += Mixer(RMSNorm(h, attn_norm))      short conv when head_count_kv[i] = 0
 *   h += FFN(RMSNorm(h, ffn_norm))           FFN = SwiGLU (i < leading), else MoE
 *   logits = output · RMSNorm(h, token_embd_norm)
 *
 * The router's gating comes from the file (expert_gating_func; the converter writes
 * sigmoid), with the selection bias exp_probs_b; weights renormalised, no scale, no
 * shared expert. */
#include <stdio.h>

#include "engine/arch/arch_common.h"

static int lfm2moe_load(loader *L) {
    model *m = L->m;
    const int E = m->n_embd;
    const int l_cache = (int)ld_u32(L, "shortconv.l_cache", 1, 0);
    const uint32_t swa = ld_u32(L, "attention.sliding_window", 0, 0);
    const int leading = (int)ld_u32(L, "leading_dense_block_count", 0, 0);
    const uint32_t gating = ld_u32(L, "expert_gating_func", 1, 0);
    ld_layer_i64(L, "expert_feed_forward_length", 0, 0);
    if (L->failed) return 0;
    if (l_cache < 2 || l_cache > 64) return ld_fail(L, "shortconv.l_cache %d is not possible", l_cache);
    if (swa > 0) return ld_fail(L, "architecture 'lfm2moe' with sliding-window attention (%u) is not supported", swa);
    if (gating < MOE_SOFTMAX || gating > MOE_SQRT_SOFTPLUS) return ld_fail(L, "expert_gating_func %u is not known", gating);
    char key[160];
    snprintf(key, sizeof key, "%s.expert_feed_forward_length", m->arch);
    if (!gguf_find(m->gguf, key)) return ld_fail(L, "metadata '%s' is missing", key);
    const int hd = ld_hybrid_head_dim(L);
    for (int i = 0; i < m->n_layer && !L->failed; i++) {
        block *b = &m->blocks[i];
        ld_lfm2_mixer(L, b, i, l_cache, hd); /* attn_norm; short conv, or attention */
        b->ffn_norm = ld_vector(L, 1, E, "blk.%d.ffn_norm.weight", i);
        if (i < leading) {
            ld_ffn(L, b, i, FFN_SWIGLU, (int)ld_layer_i64(L, "feed_forward_length", i, 0));
        } else {
            moe_layer p;
            if (!ld_moe_shape(L, i, &p)) return ld_fail(L, "expert_count is missing or 0");
            p.gating = (int)gating;
            p.norm_w = 1;
            ld_moe(L, b, i, &p, 1, 0, 0);
        }
    }
    if (L->failed) return 0;
    return ld_embeddings(L, "token_embd_norm.weight");
}

const arch_desc arch_lfm2moe = {"lfm2moe", lfm2moe_load};
