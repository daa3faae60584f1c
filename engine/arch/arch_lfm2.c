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
#include "engine/arch/arch_common.h"

static int lfm2_load(loader *L) {
    model *m = L->m;
    const int E = m->n_embd;
    const int l_cache = (int)ld_u32(L, "shortconv.l_cache", 1, 0);
    const uint32_t swa = ld_u32(L, "attention.sliding_window", 0, 0);
    if (!ld_no_experts(L)) return 0;
    if (l_cache < 2 || l_cache > 64) return ld_fail(L, "shortconv.l_cache %d is not possible", l_cache);
    if (swa > 0) return ld_fail(L, "architecture 'lfm2' with sliding-window attention (%u) is not supported", swa);
    const int hd = ld_hybrid_head_dim(L);
    for (int i = 0; i < m->n_layer && !L->failed; i++) {
        block *b = &m->blocks[i];
        ld_lfm2_mixer(L, b, i, l_cache, hd); /* attn_norm; short conv, or attention */
        b->ffn_norm = ld_vector(L, 1, E, "blk.%d.ffn_norm.weight", i);
        ld_ffn(L, b, i, FFN_SWIGLU, (int)ld_layer_i64(L, "feed_forward_length", i, 0));
    }
    if (L->failed) return 0;
    return ld_embeddings(L, "token_embd_norm.weight");
}

const arch_desc arch_lfm2 = {"lfm2", lfm2_load};
