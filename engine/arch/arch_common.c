/* arch_common.c - binding the layer kinds that several architectures share (arch_common.h):
 * attention with its rope settings, the Mamba-2 mixer, the FFNs, the pre-norm transformer
 * block, mixture of experts, and what the architectures of one family share (Qwen3.5's
 * mixers, Nemotron-H's blocks, LFM2's mixer). Every tensor's shape is checked; a mismatch
 * fails the load with one line naming the tensor. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/arch/arch_common.h"

static int has_tensor(loader *L, const char *fmt, int i) {
    char name[128];
    snprintf(name, sizeof name, fmt, i);
    return gguf_find_tensor(L->m->gguf, name) != NULL;
}

int ld_no_experts(loader *L) {
    const uint32_t n_expert = ld_u32(L, "expert_count", 0, 0);
    if (L->failed) return 0;
    if (n_expert > 0)
        return ld_fail(L, "architecture '%s' with mixture-of-experts layers (expert_count %u) is not supported",
                       L->m->arch, n_expert);
    return 1;
}

int ld_skip_nextn(loader *L) {
    model *m = L->m;
    const int nextn = (int)ld_u32(L, "nextn_predict_layers", 0, 0);
    if (L->failed) return 0;
    if (nextn < 0 || nextn >= m->n_layer) return ld_fail(L, "nextn_predict_layers %d of %d blocks", nextn, m->n_layer);
    m->n_layer -= nextn;
    return 1;
}

int ld_hybrid_head_dim(loader *L) {
    const model *m = L->m;
    int n_head0 = 0;
    for (int i = 0; i < m->n_layer && !n_head0; i++) n_head0 = (int)ld_layer_i64(L, "attention.head_count", i, 0);
    return (int)ld_u32(L, "attention.key_length", 0, n_head0 > 0 ? (uint32_t)(m->n_embd / n_head0) : 0);
}

int ld_rope(loader *L, attn_layer *at, int kind) {
    at->rope = kind;
    at->rope_freq_scale = 1.0f;
    if (kind == ROPE_NONE) return !L->failed;
    at->rope_base = ld_f32(L, "rope.freq_base", 0, 10000.0f);
    at->n_rot = (int)ld_u32(L, "rope.dimension_count", 0, (uint32_t)at->head_dim);
    char key[160], type[32] = "linear";
    gguf_str s;
    snprintf(key, sizeof key, "%s.rope.scaling.type", L->m->arch);
    if (gguf_get_str(L->m->gguf, key, &s) == 1) gguf_str_copy(s, type, sizeof type);
    float factor = ld_f32(L, "rope.scaling.factor", 0, 0.0f);
    if (factor == 0.0f) factor = ld_f32(L, "rope.scale_linear", 0, 0.0f);
    if (L->failed) return 0;
    if (strcmp(type, "none") == 0)
        at->rope_freq_scale = 1.0f;
    else if (strcmp(type, "linear") == 0)
        at->rope_freq_scale = factor == 0.0f ? 1.0f : 1.0f / factor;
    else
        return ld_fail(L, "rope scaling '%s' is not supported", type);
    if (at->n_rot <= 0 || at->n_rot > at->head_dim || at->n_rot % 2)
        return ld_fail(L, "rope.dimension_count %d does not fit heads of %d", at->n_rot, at->head_dim);
    if (gguf_find_tensor(L->m->gguf, "rope_freqs.weight")) {
        if (!ld_shape(L, 1, at->n_rot / 2, 1, "rope_freqs.weight")) return 0;
        at->rope_factors = ld_vector(L, 1, at->n_rot / 2, "rope_freqs.weight");
    }
    return !L->failed;
}

int ld_attention(loader *L, block *b, int i, const attn_layer *proto, int qk_norm) {
    const int E = L->m->n_embd;
    attn_layer *at = &b->attn;
    *at = *proto;
    b->mixer = MIX_ATTN;
    if (at->n_head <= 0 || at->n_head_kv <= 0 || at->n_head % at->n_head_kv || at->head_dim <= 0 ||
        at->head_dim > 1024)
        return ld_fail(L, "layer %d: attention with %d heads, %d KV heads of %d dims is not possible", i, at->n_head,
                       at->n_head_kv, at->head_dim);
    const int nq = at->n_head * at->head_dim, nkv = at->n_head_kv * at->head_dim;
    if (has_tensor(L, "blk.%d.attn_qkv.weight", i)) {
        ld_matrix(L, &at->wqkv, 1, E, nq + 2 * nkv, "blk.%d.attn_qkv.weight", i);
        at->bqkv = ld_vector(L, 0, nq + 2 * nkv, "blk.%d.attn_qkv.bias", i);
    } else {
        ld_matrix(L, &at->wq, 1, E, nq, "blk.%d.attn_q.weight", i);
        ld_matrix(L, &at->wk, 1, E, nkv, "blk.%d.attn_k.weight", i);
        ld_matrix(L, &at->wv, 1, E, nkv, "blk.%d.attn_v.weight", i);
    }
    if (!at->bqkv) {
        at->bq = ld_vector(L, 0, nq, "blk.%d.attn_q.bias", i);
        at->bk = ld_vector(L, 0, nkv, "blk.%d.attn_k.bias", i);
        at->bv = ld_vector(L, 0, nkv, "blk.%d.attn_v.bias", i);
    }
    ld_matrix(L, &at->wo, 1, nq, E, "blk.%d.attn_output.weight", i);
    at->bo = ld_vector(L, 0, E, "blk.%d.attn_output.bias", i);
    if (qk_norm) {
        at->q_norm = ld_vector(L, 1, at->head_dim, "blk.%d.attn_q_norm.weight", i);
        at->k_norm = ld_vector(L, 1, at->head_dim, "blk.%d.attn_k_norm.weight", i);
    }
    if (L->failed) return 0;
    at->kv_slot = ld_kv_slot(L, at->n_head_kv, at->head_dim);
    return !L->failed;
}

int ld_mamba2_shape(loader *L, mamba2_layer *p) {
    memset(p, 0, sizeof *p);
    p->conv_k = (int)ld_u32(L, "ssm.conv_kernel", 1, 0);
    p->d_inner = (int)ld_u32(L, "ssm.inner_size", 1, 0);
    p->d_state = (int)ld_u32(L, "ssm.state_size", 1, 0);
    p->n_head = (int)ld_u32(L, "ssm.time_step_rank", 1, 0);
    p->n_group = (int)ld_u32(L, "ssm.group_count", 1, 0);
    p->eps = L->m->eps;
    if (L->failed) return 0;
    if (p->conv_k < 1 || p->conv_k > 64 || p->d_inner <= 0 || p->d_inner > (1 << 20) || p->d_state <= 0 ||
        p->d_state > 4096 || p->n_head <= 0 || p->d_inner % p->n_head || p->n_group <= 0 || p->n_head % p->n_group)
        return ld_fail(L, "inconsistent Mamba-2 hyper-parameters (conv_kernel %d, inner_size %d, state_size %d, "
                       "time_step_rank %d, group_count %d)",
                       p->conv_k, p->d_inner, p->d_state, p->n_head, p->n_group);
    return 1;
}

int ld_mamba2(loader *L, block *b, int i, const mamba2_layer *p) {
    const int E = L->m->n_embd;
    mamba2_layer *l = &b->m2;
    *l = *p;
    b->mixer = MIX_MAMBA2;
    const int H = l->n_head, cd = l->d_inner + 2 * l->n_group * l->d_state;
    ld_matrix(L, &l->w_in, 1, E, l->d_inner + cd + H, "blk.%d.ssm_in.weight", i);
    if (ld_shape(L, 1, l->conv_k, cd, "blk.%d.ssm_conv1d.weight", i))
        l->conv_w = ld_vector(L, 1, (int64_t)l->conv_k * cd, "blk.%d.ssm_conv1d.weight", i);
    l->conv_b = ld_vector(L, 0, cd, "blk.%d.ssm_conv1d.bias", i);
    l->dt_bias = ld_vector(L, 1, H, "blk.%d.ssm_dt.bias", i);
    l->a = ld_vector(L, 1, H, "blk.%d.ssm_a", i);
    l->d = ld_vector(L, 1, H, "blk.%d.ssm_d", i);
    if (has_tensor(L, "blk.%d.ssm_norm.weight", i) &&
        ld_shape(L, 1, l->d_inner / l->n_group, l->n_group, "blk.%d.ssm_norm.weight", i))
        l->norm = ld_vector(L, 1, l->d_inner, "blk.%d.ssm_norm.weight", i);
    ld_matrix(L, &l->w_out, 1, l->d_inner, E, "blk.%d.ssm_out.weight", i);
    if (L->failed) return 0;
    l->rec_slot = ld_rec_slot(L, mamba2_conv_floats(l), mamba2_ssm_floats(l));
    return !L->failed;
}

int ld_ffn(loader *L, block *b, int i, int kind, int n_ff) {
    const int E = L->m->n_embd;
    if (n_ff <= 0 || n_ff > (1 << 20)) return ld_fail(L, "layer %d: feed_forward_length %d", i, n_ff);
    b->ffn = (ffn_layer){.kind = kind, .n_ff = n_ff};
    if (kind == FFN_SWIGLU) {
        ld_matrix(L, &b->ffn.gate, 1, E, n_ff, "blk.%d.ffn_gate.weight", i);
        b->ffn.b_gate = ld_vector(L, 0, n_ff, "blk.%d.ffn_gate.bias", i);
    }
    ld_matrix(L, &b->ffn.up, 1, E, n_ff, "blk.%d.ffn_up.weight", i);
    b->ffn.b_up = ld_vector(L, 0, n_ff, "blk.%d.ffn_up.bias", i);
    ld_matrix(L, &b->ffn.down, 1, n_ff, E, "blk.%d.ffn_down.weight", i);
    b->ffn.b_down = ld_vector(L, 0, E, "blk.%d.ffn_down.bias", i);
    return !L->failed;
}

int ld_transformer_block(loader *L, block *b, int i, const attn_layer *proto, int rope, int qk_norm) {
    const int E = L->m->n_embd;
    attn_layer at = *proto;
    at.n_head_kv = (int)ld_layer_i64(L, "attention.head_count_kv", i, at.n_head);
    b->mixer_norm = ld_vector(L, 1, E, "blk.%d.attn_norm.weight", i);
    if (ld_rope(L, &at, rope) && at.n_rot != at.head_dim) /* as llama.cpp requires */
        return ld_fail(L, "rope.dimension_count %d differs from the head size %d", at.n_rot, at.head_dim);
    ld_attention(L, b, i, &at, qk_norm);
    b->ffn_norm = ld_vector(L, 1, E, "blk.%d.ffn_norm.weight", i);
    return ld_ffn(L, b, i, FFN_SWIGLU, (int)ld_layer_i64(L, "feed_forward_length", i, 0));
}

/* ---------------------------------------------------------------- mixture of experts */

/* llama.cpp's limit (LLAMA_MAX_EXPERTS) */
#define MAX_EXPERTS 512

int ld_moe_shape(loader *L, int i, moe_layer *p) {
    memset(p, 0, sizeof *p);
    const int64_t n_expert = ld_u32(L, "expert_count", 0, 0);
    if (L->failed || n_expert == 0) return 0;
    char key[160];
    snprintf(key, sizeof key, "%s.expert_used_count", L->m->arch);
    if (!gguf_find(L->m->gguf, key))
        return ld_fail(L, "architecture '%s' with %lld experts: metadata '%s' is missing", L->m->arch,
                       (long long)n_expert, key);
    const int64_t n_used = ld_layer_i64(L, "expert_used_count", i, 0);
    int64_t n_ff = ld_layer_i64(L, "expert_feed_forward_length", i, 0);
    if (n_ff == 0 && n_used > 0) n_ff = ld_layer_i64(L, "feed_forward_length", i, 0) / n_used;
    const uint32_t groups = ld_u32(L, "expert_group_count", 0, 0);
    if (L->failed) return 0;
    if (groups > 1) return ld_fail(L, "experts in %u groups (group-limited routing) are not supported", groups);
    if (n_expert > MAX_EXPERTS || n_used <= 0 || n_used > n_expert || n_ff <= 0 || n_ff > (1 << 20))
        return ld_fail(L, "layer %d: %lld experts, %lld used, of width %lld is not possible", i, (long long)n_expert,
                       (long long)n_used, (long long)n_ff);
    p->n_expert = (int)n_expert;
    p->n_used = (int)n_used;
    p->n_ff = (int)n_ff;
    p->n_latent = L->m->n_embd;
    p->gating = MOE_SOFTMAX;
    p->w_scale = 1.0f;
    p->act = FFN_SWIGLU;
    return 1;
}

int ld_moe(loader *L, block *b, int i, const moe_layer *p, int sel_bias, int gate_optional, int shared_gated) {
    const int E = L->m->n_embd, X = p->n_expert, F = p->n_ff, Le = p->n_latent;
    moe_layer *l = &b->moe;
    *l = *p;
    if (L->failed) return 0;
    if (Le <= 0 || Le > (1 << 16)) return ld_fail(L, "layer %d: moe_latent_size %d", i, Le);
    if (F <= 0 || F > (1 << 20)) return ld_fail(L, "layer %d: experts of width %d", i, F);
    ld_matrix(L, &l->router, 1, E, X, "blk.%d.ffn_gate_inp.weight", i);
    if (sel_bias) l->sel_bias = ld_vector(L, 1, X, "blk.%d.exp_probs_b.bias", i);
    if (has_tensor(L, "blk.%d.ffn_gate_up_exps.weight", i)) { /* gate rows, then up rows, per expert */
        expert_matrix gu;
        if (ld_experts(L, &gu, 1, Le, 2 * (int64_t)F, X, "blk.%d.ffn_gate_up_exps.weight", i)) {
            l->gate = l->up = gu;
            l->gate.m.n_out = l->up.m.n_out = F;
            l->up.m.data = (const uint8_t *)gu.m.data + (size_t)F * gu.m.row_bytes;
        }
    } else {
        ld_experts(L, &l->gate, !gate_optional && l->act == FFN_SWIGLU, Le, F, X, "blk.%d.ffn_gate_exps.weight", i);
        ld_experts(L, &l->up, 1, Le, F, X, "blk.%d.ffn_up_exps.weight", i);
    }
    ld_experts(L, &l->down, 1, F, Le, X, "blk.%d.ffn_down_exps.weight", i);
    if (Le != E) {
        ld_matrix(L, &l->latent_down, 1, E, Le, "blk.%d.ffn_latent_down.weight", i);
        ld_matrix(L, &l->latent_up, 1, Le, E, "blk.%d.ffn_latent_up.weight", i);
    }
    const int Fs = l->shared.n_ff;
    if (l->shared.kind != FFN_NONE) {
        if (Fs <= 0 || Fs > (1 << 20)) return ld_fail(L, "layer %d: expert_shared_feed_forward_length %d", i, Fs);
        if (l->shared.kind == FFN_SWIGLU) ld_matrix(L, &l->shared.gate, 1, E, Fs, "blk.%d.ffn_gate_shexp.weight", i);
        ld_matrix(L, &l->shared.up, 1, E, Fs, "blk.%d.ffn_up_shexp.weight", i);
        ld_matrix(L, &l->shared.down, 1, Fs, E, "blk.%d.ffn_down_shexp.weight", i);
        if (shared_gated) ld_matrix(L, &l->shared_gate, 1, E, 1, "blk.%d.ffn_gate_inp_shexp.weight", i);
    }
    return !L->failed;
}

/* ---------------------------------------------------------------- Qwen3.5's mixers */

int ld_qwen35_shape(loader *L, qwen35_shape *s) {
    const int E = L->m->n_embd;
    memset(s, 0, sizeof *s);
    s->n_head = (int)ld_u32(L, "attention.head_count", 1, 0);
    s->n_head_kv = (int)ld_u32(L, "attention.head_count_kv", 0, (uint32_t)s->n_head);
    s->head_dim = (int)ld_u32(L, "attention.key_length", 0, s->n_head ? (uint32_t)(E / s->n_head) : 0);
    s->n_rot = (int)ld_u32(L, "rope.dimension_count", 0, (uint32_t)s->head_dim);
    s->rope_base = ld_f32(L, "rope.freq_base", 0, 10000.0f);
    s->conv_k = (int)ld_u32(L, "ssm.conv_kernel", 1, 0);
    s->d_k = (int)ld_u32(L, "ssm.state_size", 1, 0);
    s->n_k_heads = (int)ld_u32(L, "ssm.group_count", 1, 0);
    s->n_v_heads = (int)ld_u32(L, "ssm.time_step_rank", 1, 0);
    const int inner = (int)ld_u32(L, "ssm.inner_size", 1, 0);
    s->interval = ld_u32(L, "full_attention_interval", 0, 4);
    if (L->failed) return 0;
    if (s->n_head <= 0 || s->n_head_kv <= 0 || s->n_head % s->n_head_kv || s->head_dim <= 0 ||
        s->head_dim > 1024 || s->n_rot <= 0 || s->n_rot > s->head_dim || s->n_rot % 2 || s->conv_k < 1 ||
        s->conv_k > 16 || s->d_k <= 0 || s->d_k > 1024 || s->n_k_heads <= 0 || s->n_v_heads <= 0 ||
        s->n_v_heads % s->n_k_heads || inner != s->n_v_heads * s->d_k || s->interval == 0)
        return ld_fail(L, "inconsistent %s hyper-parameters", L->m->arch);
    return 1;
}

int qwen35_is_recurrent(loader *L, int i, int n_layer, uint32_t interval) {
    char key[160];
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", L->m->arch);
    const gguf_kv *kv = gguf_find(L->m->gguf, key);
    int64_t v;
    if (kv && gguf_arr_i64(kv, (uint64_t)i, &v)) return v != 0;
    return i < n_layer && (i + 1) % (int)interval != 0;
}

int ld_gdn(loader *L, block *b, int i, const qwen35_shape *s, int qwen3next) {
    const int E = L->m->n_embd, dk = s->d_k, Hk = s->n_k_heads, Hv = s->n_v_heads;
    const int key_dim = Hk * dk, value_dim = Hv * dk, conv_dim = 2 * key_dim + value_dim;
    gdn_layer *g = &b->gdn;
    b->mixer = MIX_GDN;
    *g = (gdn_layer){.n_k_heads = Hk, .n_v_heads = Hv, .d_k = dk, .d_v = dk, .conv_k = s->conv_k,
                     .eps = L->m->eps, .grouped_heads = qwen3next};
    if (qwen3next && !has_tensor(L, "blk.%d.attn_qkv.weight", i)) {
        ld_matrix(L, &g->w_qkvz, 1, E, 2 * key_dim + 2 * value_dim, "blk.%d.ssm_in.weight", i);
    } else {
        ld_matrix(L, &g->w_qkv, 1, E, conv_dim, "blk.%d.attn_qkv.weight", i);
        ld_matrix(L, &g->w_z, 1, E, value_dim, "blk.%d.attn_gate.weight", i);
    }
    if (qwen3next) {
        ld_matrix(L, &g->w_ba, 1, E, 2 * Hv, "blk.%d.ssm_ba.weight", i);
    } else {
        ld_matrix(L, &g->w_beta, 1, E, Hv, "blk.%d.ssm_beta.weight", i);
        ld_matrix(L, &g->w_alpha, 1, E, Hv, "blk.%d.ssm_alpha.weight", i);
    }
    ld_matrix(L, &g->w_out, 1, value_dim, E, "blk.%d.ssm_out.weight", i);
    g->conv_w = ld_vector(L, 1, (int64_t)s->conv_k * conv_dim, "blk.%d.ssm_conv1d.weight", i);
    g->dt_bias = ld_vector(L, 1, Hv, "blk.%d.ssm_dt.bias", i);
    g->a = ld_vector(L, 1, Hv, "blk.%d.ssm_a", i);
    g->norm = ld_vector(L, 1, dk, "blk.%d.ssm_norm.weight", i);
    if (L->failed) return 0;
    g->rec_slot = ld_rec_slot(L, gdn_conv_floats(g), gdn_ssm_floats(g));
    return !L->failed;
}

int ld_gated_attention_weights(loader *L, attn_layer *at, int i, const qwen35_shape *s) {
    const int E = L->m->n_embd, hd = s->head_dim;
    *at = (attn_layer){.n_head = s->n_head, .n_head_kv = s->n_head_kv, .head_dim = hd, .gated = 1,
                       .rope = ROPE_NEOX, .n_rot = s->n_rot, .rope_base = s->rope_base, .rope_freq_scale = 1.0f,
                       .kq_scale = 1.0f / sqrtf((float)hd), .eps = L->m->eps};
    ld_matrix(L, &at->wq, 1, E, 2 * s->n_head * hd, "blk.%d.attn_q.weight", i);
    ld_matrix(L, &at->wk, 1, E, s->n_head_kv * hd, "blk.%d.attn_k.weight", i);
    ld_matrix(L, &at->wv, 1, E, s->n_head_kv * hd, "blk.%d.attn_v.weight", i);
    ld_matrix(L, &at->wo, 1, s->n_head * hd, E, "blk.%d.attn_output.weight", i);
    at->q_norm = ld_vector(L, 1, hd, "blk.%d.attn_q_norm.weight", i);
    at->k_norm = ld_vector(L, 1, hd, "blk.%d.attn_k_norm.weight", i);
    /* Qwen3.5's IMROPE sections (Qwen3-Next has none: one position), for image rows */
    char key[160];
    snprintf(key, sizeof key, "%s.rope.dimension_sections", L->m->arch);
    const gguf_kv *kv = gguf_find(L->m->gguf, key);
    for (int k = 0; kv && k < 4; k++) {
        int64_t v = 0;
        if (!gguf_arr_i64(kv, (uint64_t)k, &v) || v < 0 || v > s->n_rot) return ld_fail(L, "%s is not 4 section sizes", key);
        at->mrope[k] = (int)v;
    }
    return !L->failed;
}

int ld_gated_attention(loader *L, block *b, int i, const qwen35_shape *s) {
    b->mixer = MIX_ATTN;
    if (!ld_gated_attention_weights(L, &b->attn, i, s)) return 0;
    b->attn.kv_slot = ld_kv_slot(L, s->n_head_kv, s->head_dim);
    return !L->failed;
}

int ld_qwen35_mixer(loader *L, block *b, int i, const qwen35_shape *s, int qwen3next) {
    b->mixer_norm = ld_vector(L, 1, L->m->n_embd, "blk.%d.attn_norm.weight", i);
    if (qwen35_is_recurrent(L, i, L->m->n_layer, s->interval)) return ld_gdn(L, b, i, s, qwen3next);
    return ld_gated_attention(L, b, i, s);
}

int ld_qwen35_moe_ffn(loader *L, block *b, int i) {
    const int n_ff_shexp = (int)ld_u32(L, "expert_shared_feed_forward_length", 0, 0);
    b->ffn_norm = ld_vector(L, 1, L->m->n_embd, "blk.%d.post_attention_norm.weight", i);
    moe_layer p;
    if (!ld_moe_shape(L, i, &p)) return ld_fail(L, "expert_count is missing or 0");
    p.norm_w = 1;
    p.shared.kind = FFN_SWIGLU;
    p.shared.n_ff = n_ff_shexp > 0 ? n_ff_shexp : (int)ld_layer_i64(L, "feed_forward_length", i, 0);
    return ld_moe(L, b, i, &p, 0, 0, 1);
}

int ld_qwen35_ffn(loader *L, block *b, int i) {
    b->ffn_norm = ld_vector(L, 1, L->m->n_embd, "blk.%d.post_attention_norm.weight", i);
    return ld_ffn(L, b, i, FFN_SWIGLU, (int)ld_layer_i64(L, "feed_forward_length", i, 0));
}

/* The MTP head (model.h), block n_layer - the first of the nextn blocks after the trunk
 * (llama.cpp runs only one): a gated attention block with the trunk's shape and its FFN,
 * plus nextn.eh_proj, enorm, hnorm and the optional shared_head_norm, embed_tokens and
 * shared_head_head (Qwen3.5 has none of those three: then output_norm, token_embd and the
 * output head). Its KV slot is registered only by mtp_enable, so that a model that does not
 * speculate keeps the state layout (and the checkpoints) it has without the head. A file
 * converted without the head (no nextn.eh_proj) just has none. */
int ld_qwen35_mtp(loader *L, const qwen35_shape *s, int (*ffn)(loader *L, block *b, int i)) {
    model *m = L->m;
    const int i = m->n_layer, E = m->n_embd;
    char name[64];
    snprintf(name, sizeof name, "blk.%d.nextn.eh_proj.weight", i);
    if (!gguf_find_tensor(m->gguf, name)) return 1;
    mtp_head *p = calloc(1, sizeof *p);
    if (!p) return ld_fail(L, "out of memory");
    m->mtp = p;
    block *b = &p->blk;
    b->mixer = MIX_ATTN;
    b->mixer_norm = ld_vector(L, 1, E, "blk.%d.attn_norm.weight", i);
    ld_gated_attention_weights(L, &b->attn, i, s);
    b->attn.kv_slot = -1;
    ffn(L, b, i);
    ld_matrix(L, &p->eh_proj, 1, 2 * E, E, "blk.%d.nextn.eh_proj.weight", i);
    p->enorm = ld_vector(L, 1, E, "blk.%d.nextn.enorm.weight", i);
    p->hnorm = ld_vector(L, 1, E, "blk.%d.nextn.hnorm.weight", i);
    p->head_norm = ld_vector(L, 0, E, "blk.%d.nextn.shared_head_norm.weight", i);
    if (!p->head_norm) p->head_norm = m->output_norm;
    if (!ld_matrix(L, &p->embed, 0, E, m->n_vocab, "blk.%d.nextn.embed_tokens.weight", i)) p->embed = m->tok_embd;
    if (!ld_matrix(L, &p->head, 0, E, m->n_vocab, "blk.%d.nextn.shared_head_head.weight", i)) p->head = m->output;
    p->draft_vocab = m->n_vocab;
    return !L->failed;
}

/* ---------------------------------------------------------------- Nemotron-H's blocks */

int ld_nemotron_h_shape(loader *L, nemotron_h_shape *s) {
    memset(s, 0, sizeof *s);
    s->attn_scale = ld_f32(L, "attention.scale", 0, 0.0f);
    if (!ld_mamba2_shape(L, &s->m2)) return 0;
    s->head_dim = ld_hybrid_head_dim(L);
    return !L->failed;
}

int ld_nemotron_h_block(loader *L, block *b, int i, const nemotron_h_shape *s) {
    const int n_head = (int)ld_layer_i64(L, "attention.head_count", i, 0);
    const int n_kv = (int)ld_layer_i64(L, "attention.head_count_kv", i, n_head);
    const int n_ff = (int)ld_layer_i64(L, "feed_forward_length", i, 0);
    const float *norm = ld_vector(L, 1, L->m->n_embd, "blk.%d.attn_norm.weight", i);
    if (n_ff > 0) { /* '-': the norm feeds the MLP */
        b->ffn_norm = norm;
        return ld_ffn(L, b, i, FFN_RELU2, n_ff);
    }
    b->mixer_norm = norm;
    if (n_kv == 0) return ld_mamba2(L, b, i, &s->m2);
    const int hd = s->head_dim;
    attn_layer at = {.n_head = n_head, .n_head_kv = n_kv, .head_dim = hd, .eps = L->m->eps,
                     .kq_scale = s->attn_scale != 0.0f ? s->attn_scale : 1.0f / sqrtf((float)hd)};
    ld_rope(L, &at, ROPE_NONE);
    return ld_attention(L, b, i, &at, 0);
}

/* ---------------------------------------------------------------- LFM2's short convolution */

int ld_shortconv(loader *L, block *b, int i, int l_cache) {
    const int E = L->m->n_embd;
    shortconv_layer *sc = &b->sc;
    *sc = (shortconv_layer){.n_embd = E, .l_cache = l_cache};
    b->mixer = MIX_SHORTCONV;
    ld_matrix(L, &sc->in_proj, 1, E, 3 * E, "blk.%d.shortconv.in_proj.weight", i);
    ld_matrix(L, &sc->out_proj, 1, E, E, "blk.%d.shortconv.out_proj.weight", i);
    if (ld_shape(L, 1, l_cache, E, "blk.%d.shortconv.conv.weight", i))
        sc->conv_w = ld_vector(L, 1, (int64_t)l_cache * E, "blk.%d.shortconv.conv.weight", i);
    if (!L->failed) sc->rec_slot = ld_rec_slot(L, shortconv_conv_floats(sc), 0);
    return !L->failed;
}

int ld_lfm2_mixer(loader *L, block *b, int i, int l_cache, int head_dim) {
    const int n_head = (int)ld_layer_i64(L, "attention.head_count", i, 0);
    const int n_kv = (int)ld_layer_i64(L, "attention.head_count_kv", i, n_head);
    b->mixer_norm = ld_vector(L, 1, L->m->n_embd, "blk.%d.attn_norm.weight", i);
    if (n_kv == 0) return ld_shortconv(L, b, i, l_cache);
    attn_layer at = {.n_head = n_head, .n_head_kv = n_kv, .head_dim = head_dim, .eps = L->m->eps,
                     .kq_scale = 1.0f / sqrtf((float)head_dim)};
    ld_rope(L, &at, ROPE_NEOX);
    return ld_attention(L, b, i, &at, 1);
}
