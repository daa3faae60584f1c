/* arch_nemotron_h.c - Nemotron-H (docs/engine-math.md §7; llama.cpp
 * src/models/nemotron-h.cpp): every block is exactly one of a Mamba-2 mixer ('M'),
 * attention without rope ('*') or a ReLU² MLP ('-'), each behind the block's one norm:
 *
 *   h += Layer_i(RMSNorm(h, attn_norm_i))
 *
 * The kind comes from the per-layer metadata arrays: feed_forward_length[i] > 0 is an
 * MLP, else head_count_kv[i] > 0 is attention, else Mamba-2. */
#include <math.h>
#include <stdio.h>

#include "engine/arch/arch_common.h"

static int nemotron_h_load(loader *L) {
    model *m = L->m;
    const int E = m->n_embd;
    char key[160];
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", m->arch);
    if (!gguf_find(m->gguf, key)) m->eps = ld_f32(L, "attention.layer_norm_epsilon", 0, 1e-5f);
    const int nextn = (int)ld_u32(L, "nextn_predict_layers", 0, 0);
    const float attn_scale = ld_f32(L, "attention.scale", 0, 0.0f);
    mamba2_layer m2;
    if (!ld_no_experts(L) || !ld_mamba2_shape(L, &m2)) return 0;
    if (nextn < 0 || nextn >= m->n_layer) return ld_fail(L, "nextn_predict_layers %d of %d blocks", nextn, m->n_layer);
    m->n_layer -= nextn; /* MTP blocks are appended after the trunk and not run */

    int n_head0 = 0;
    for (int i = 0; i < m->n_layer && !n_head0; i++) n_head0 = (int)ld_layer_i64(L, "attention.head_count", i, 0);
    const int hd = (int)ld_u32(L, "attention.key_length", 0, n_head0 > 0 ? (uint32_t)(E / n_head0) : 0);

    for (int i = 0; i < m->n_layer && !L->failed; i++) {
        block *b = &m->blocks[i];
        const int n_head = (int)ld_layer_i64(L, "attention.head_count", i, 0);
        const int n_kv = (int)ld_layer_i64(L, "attention.head_count_kv", i, n_head);
        const int n_ff = (int)ld_layer_i64(L, "feed_forward_length", i, 0);
        const float *norm = ld_vector(L, 1, E, "blk.%d.attn_norm.weight", i);
        if (n_ff > 0) { /* '-': the norm feeds the MLP */
            b->ffn_norm = norm;
            ld_ffn(L, b, i, FFN_RELU2, n_ff);
        } else if (n_kv > 0) {
            attn_layer at = {.n_head = n_head, .n_head_kv = n_kv, .head_dim = hd, .eps = m->eps,
                             .kq_scale = attn_scale != 0.0f ? attn_scale : 1.0f / sqrtf((float)hd)};
            b->mixer_norm = norm;
            ld_rope(L, &at, ROPE_NONE);
            ld_attention(L, b, i, &at, 0);
        } else {
            b->mixer_norm = norm;
            ld_mamba2(L, b, i, &m2);
        }
    }
    if (L->failed) return 0;
    return ld_embeddings(L, "output_norm.weight");
}

const arch_desc arch_nemotron_h = {"nemotron_h", nemotron_h_load};
