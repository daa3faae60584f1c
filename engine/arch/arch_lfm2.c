/* arch_lfm2.c - Liquid LFM2 (docs/engine-math.md §7; llama.cpp src/models/lfm2.cpp): gated
 * short-convolution blocks and attention blocks (q/k norm, NEOX rope), a SwiGLU FFN in
 * every block:
 *
 *   h += Mixer(RMSNorm(h, attn_norm))      Mixer = short conv when head_count_kv[i] = 0,
 *   h += FFN(RMSNorm(h, ffn_norm))           else attention
 *   logits = output · RMSNorm(h, token_embd_norm)
 *
 * (the final norm is stored as token_embd_norm.weight). Sliding-window attention
 * (attention.sliding_window) is not supported yet. */
#include <math.h>

#include "engine/arch/arch_common.h"

static int lfm2_load(loader *L) {
    model *m = L->m;
    const int E = m->n_embd;
    const int l_cache = (int)ld_u32(L, "shortconv.l_cache", 1, 0);
    const uint32_t swa = ld_u32(L, "attention.sliding_window", 0, 0);
    if (!ld_no_experts(L)) return 0;
    if (l_cache < 2 || l_cache > 64) return ld_fail(L, "shortconv.l_cache %d is not possible", l_cache);
    if (swa > 0) return ld_fail(L, "architecture 'lfm2' with sliding-window attention (%u) is not supported", swa);

    int n_head0 = 0;
    for (int i = 0; i < m->n_layer && !n_head0; i++) n_head0 = (int)ld_layer_i64(L, "attention.head_count", i, 0);
    const int hd = (int)ld_u32(L, "attention.key_length", 0, n_head0 > 0 ? (uint32_t)(E / n_head0) : 0);

    for (int i = 0; i < m->n_layer && !L->failed; i++) {
        block *b = &m->blocks[i];
        const int n_head = (int)ld_layer_i64(L, "attention.head_count", i, 0);
        const int n_kv = (int)ld_layer_i64(L, "attention.head_count_kv", i, n_head);
        b->mixer_norm = ld_vector(L, 1, E, "blk.%d.attn_norm.weight", i);
        if (n_kv == 0) {
            ld_shortconv(L, b, i, l_cache);
        } else {
            attn_layer at = {.n_head = n_head, .n_head_kv = n_kv, .head_dim = hd, .eps = m->eps,
                             .kq_scale = 1.0f / sqrtf((float)hd)};
            ld_rope(L, &at, ROPE_NEOX);
            ld_attention(L, b, i, &at, 1);
        }
        b->ffn_norm = ld_vector(L, 1, E, "blk.%d.ffn_norm.weight", i);
        ld_ffn(L, b, i, FFN_SWIGLU, (int)ld_layer_i64(L, "feed_forward_length", i, 0));
    }
    if (L->failed) return 0;
    return ld_embeddings(L, "token_embd_norm.weight");
}

const arch_desc arch_lfm2 = {"lfm2", lfm2_load};
