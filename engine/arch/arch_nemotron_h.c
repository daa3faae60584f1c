/* arch_nemotron_h.c - Nemotron-H (docs/engine-math.md §7; llama.cpp
 * src/models/nemotron-h.cpp): every block is exactly one of a Mamba-2 mixer ('M'),
 * attention without rope ('*') or a ReLU² MLP ('-'), each behind the block's one norm:
 *
 *   h += Layer_i(RMSNorm(h, attn_norm_i))
 *
 * The kind comes from the per-layer metadata arrays: feed_forward_length[i] > 0 is an
 * MLP, else head_count_kv[i] > 0 is attention, else Mamba-2 (ld_nemotron_h_block, shared
 * with nemotron_h_moe). MTP blocks (nextn) are appended after the trunk and not run. */
#include <stdio.h>

#include "engine/arch/arch_common.h"

static int nemotron_h_load(loader *L) {
    model *m = L->m;
    char key[160];
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", m->arch);
    if (!gguf_find(m->gguf, key)) m->eps = ld_f32(L, "attention.layer_norm_epsilon", 0, 1e-5f);
    nemotron_h_shape s;
    if (!ld_no_experts(L) || !ld_skip_nextn(L) || !ld_nemotron_h_shape(L, &s)) return 0;
    for (int i = 0; i < m->n_layer && !L->failed; i++) /* attn_norm; MLP, attention or Mamba-2 */
        ld_nemotron_h_block(L, &m->blocks[i], i, &s);
    if (L->failed) return 0;
    return ld_embeddings(L, "output_norm.weight");
}

const arch_desc arch_nemotron_h = {"nemotron_h", nemotron_h_load};
