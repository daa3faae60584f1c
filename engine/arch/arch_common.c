/* arch_common.c - binding the layer kinds that several architectures share (arch_common.h):
 * attention with its rope settings, the Mamba-2 mixer, the FFNs. Every tensor's shape
 * is checked; a mismatch fails the load with one line naming the tensor. */
#include <math.h>
#include <stdio.h>
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
    at->kv_slot = ld_kv_slot(L, nkv);
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
