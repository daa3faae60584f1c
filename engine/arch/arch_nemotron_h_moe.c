/* arch_nemotron_h_moe.c - Nemotron-3-Nano-30B-A3B and Nemotron-3-Super-120B-A12B
 * (docs/engine-math.md §11; llama.cpp src/models/nemotron-h.cpp build_ffn_layer): Nemotron-H's
 * blocks, each exactly one of a Mamba-2 mixer ('M'), attention without rope ('*') or a
 * mixture of experts ('E'), behind the block's one norm:
 *
 *   h += Layer_i(RMSNorm(h, attn_norm_i))
 *   E:  MoE(x) + SharedExpert(x)     ReLU² experts (no gate) and shared expert
 *
 * The router is sigmoid with the selection bias exp_probs_b; the weights are renormalised
 * only when expert_weights_norm is true (default false), then scaled by
 * expert_weights_scale. Nemotron-3-Super's experts work in moe_latent_size dims
 * (ffn_latent_down before them, ffn_latent_up after their weighted sum); its router and
 * shared expert read the full-width x. The kind of a block comes from the per-layer
 * arrays: feed_forward_length[i] > 0 is an FFN block (a plain ReLU² MLP when the file has
 * no experts), else head_count_kv[i] > 0 attention, else Mamba-2. MTP blocks (nextn) are
 * appended after the trunk and not run. */
#include <stdio.h>

#include "engine/arch/arch_common.h"

static int nemotron_h_moe_load(loader *L) {
    model *m = L->m;
    const int E = m->n_embd;
    char key[160];
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", m->arch);
    if (!gguf_find(m->gguf, key)) m->eps = ld_f32(L, "attention.layer_norm_epsilon", 1, 1e-5f);
    const int latent = (int)ld_u32(L, "moe_latent_size", 0, 0);
    const int norm_w = ld_bool(L, "expert_weights_norm", 0);
    const float w_scale = ld_f32(L, "expert_weights_scale", 0, 0.0f);
    const int n_ff_shexp = (int)ld_u32(L, "expert_shared_feed_forward_length", 0, 0);
    nemotron_h_shape s;
    if (!ld_skip_nextn(L) || !ld_nemotron_h_shape(L, &s)) return 0;

    for (int i = 0; i < m->n_layer && !L->failed; i++) {
        block *b = &m->blocks[i];
        const int n_ff = (int)ld_layer_i64(L, "feed_forward_length", i, 0);
        moe_layer p;
        if (n_ff > 0 && ld_moe_shape(L, i, &p)) { /* 'E': the block's norm feeds the experts */
            b->ffn_norm = ld_vector(L, 1, E, "blk.%d.attn_norm.weight", i);
            p.gating = MOE_SIGMOID;
            p.norm_w = norm_w;
            p.w_scale = w_scale;
            p.act = FFN_RELU2;
            p.n_latent = latent > 0 ? latent : E;
            p.shared.kind = FFN_RELU2;
            p.shared.n_ff = n_ff_shexp;
            ld_moe(L, b, i, &p, 1, 0, 0);
        } else { /* Nemotron-H's: Mamba-2, attention, or in a file without experts the MLP */
            ld_nemotron_h_block(L, b, i, &s);
        }
    }
    if (L->failed) return 0;
    return ld_embeddings(L, "output_norm.weight");
}

const arch_desc arch_nemotron_h_moe = {"nemotron_h_moe", nemotron_h_moe_load};
