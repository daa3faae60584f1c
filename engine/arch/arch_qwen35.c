/* arch_qwen35.c - Qwen3.5 dense (docs/engine-math.md §7; llama.cpp src/models/qwen35.cpp):
 * three Gated DeltaNet blocks then one gated attention block, repeated; every block has a
 * SwiGLU FFN.
 *
 *   h += Mixer(RMSNorm(h, attn_norm))          Mixer = GDN, or gated attention with q/k norm
 *   h += FFN(RMSNorm(h, post_attention_norm))     and partial NEOX rope (IMROPE for text)
 *
 * The converter already added 1 to the norm weights, so they are used as stored. */
#include <stdio.h>
#include <stdlib.h>

#include "engine/arch/arch_common.h"

/* recurrent_layers array when present, else every full_attention_interval-th layer is attention */
static int is_recurrent(loader *L, int i, int n_layer, uint32_t interval) {
    const gguf_kv *kv = gguf_find(L->m->gguf, "qwen35.attention.recurrent_layers");
    int64_t v;
    if (kv && gguf_arr_i64(kv, (uint64_t)i, &v)) return v != 0;
    return i < n_layer && (i + 1) % (int)interval != 0;
}

/* The gated attention of block i (a trunk block or the MTP block) with proto's shape. */
static void qwen35_attention(loader *L, attn_layer *at, int i, const attn_layer *proto) {
    const int E = L->m->n_embd, hd = proto->head_dim;
    *at = *proto;
    ld_matrix(L, &at->wq, 1, E, 2 * at->n_head * hd, "blk.%d.attn_q.weight", i);
    ld_matrix(L, &at->wk, 1, E, at->n_head_kv * hd, "blk.%d.attn_k.weight", i);
    ld_matrix(L, &at->wv, 1, E, at->n_head_kv * hd, "blk.%d.attn_v.weight", i);
    ld_matrix(L, &at->wo, 1, at->n_head * hd, E, "blk.%d.attn_output.weight", i);
    at->q_norm = ld_vector(L, 1, hd, "blk.%d.attn_q_norm.weight", i);
    at->k_norm = ld_vector(L, 1, hd, "blk.%d.attn_k_norm.weight", i);
}

/* The dense SwiGLU FFN of block i and the norm before it. */
static void qwen35_ffn(loader *L, block *b, int i) {
    const int E = L->m->n_embd, n_ff = (int)ld_layer_i64(L, "feed_forward_length", i, 0);
    if (!L->failed && (n_ff <= 0 || n_ff > (1 << 20))) {
        ld_fail(L, "layer %d: feed_forward_length %d", i, n_ff);
        return;
    }
    b->ffn_norm = ld_vector(L, 1, E, "blk.%d.post_attention_norm.weight", i);
    b->ffn = (ffn_layer){.kind = FFN_SWIGLU, .n_ff = n_ff};
    ld_matrix(L, &b->ffn.gate, 1, E, n_ff, "blk.%d.ffn_gate.weight", i);
    ld_matrix(L, &b->ffn.up, 1, E, n_ff, "blk.%d.ffn_up.weight", i);
    ld_matrix(L, &b->ffn.down, 1, n_ff, E, "blk.%d.ffn_down.weight", i);
}

/* The MTP head (model.h), block n_layer - the first of the nextn blocks after the trunk
 * (llama.cpp runs only one): a gated attention block with the trunk's shape and its FFN,
 * plus nextn.eh_proj, enorm, hnorm and the optional shared_head_norm, embed_tokens and
 * shared_head_head (Qwen3.5 has none of those three: then output_norm, token_embd and the
 * output head). Its KV slot is registered only by mtp_enable, so that a model that does not
 * speculate keeps the state layout (and the checkpoints) it has without the head. A file
 * converted without the head (no nextn.eh_proj) just has none. */
static int qwen35_mtp(loader *L, const attn_layer *proto) {
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
    qwen35_attention(L, &b->attn, i, proto);
    b->attn.kv_slot = -1;
    qwen35_ffn(L, b, i);
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

static int qwen35_load(loader *L) {
    model *m = L->m;
    const int E = m->n_embd;
    const int n_head = (int)ld_u32(L, "attention.head_count", 1, 0);
    const int n_head_kv = (int)ld_u32(L, "attention.head_count_kv", 0, (uint32_t)n_head);
    const int hd = (int)ld_u32(L, "attention.key_length", 0, n_head ? (uint32_t)(E / n_head) : 0);
    const int n_rot = (int)ld_u32(L, "rope.dimension_count", 0, (uint32_t)hd);
    const float rope_base = ld_f32(L, "rope.freq_base", 0, 10000.0f);
    const int conv_k = (int)ld_u32(L, "ssm.conv_kernel", 1, 0);
    const int dk = (int)ld_u32(L, "ssm.state_size", 1, 0);
    const int Hk = (int)ld_u32(L, "ssm.group_count", 1, 0);
    const int Hv = (int)ld_u32(L, "ssm.time_step_rank", 1, 0);
    const int inner = (int)ld_u32(L, "ssm.inner_size", 1, 0);
    const uint32_t interval = ld_u32(L, "full_attention_interval", 0, 4);
    const int nextn = (int)ld_u32(L, "nextn_predict_layers", 0, 0);
    if (L->failed) return 0;
    if (n_head <= 0 || n_head_kv <= 0 || n_head % n_head_kv || hd <= 0 || n_rot <= 0 || n_rot > hd || n_rot % 2 ||
        conv_k < 1 || conv_k > 16 || dk <= 0 || Hk <= 0 || Hv <= 0 || Hv % Hk || inner != Hv * dk || interval == 0 ||
        nextn < 0 || nextn >= m->n_layer)
        return ld_fail(L, "inconsistent qwen35 hyper-parameters");
    /* MTP blocks (nextn) are appended after the trunk: not part of its stack */
    m->n_layer -= nextn;
    const attn_layer attn = {.n_head = n_head, .n_head_kv = n_head_kv, .head_dim = hd, .gated = 1,
                             .rope = ROPE_NEOX, .n_rot = n_rot, .rope_base = rope_base, .rope_freq_scale = 1.0f,
                             .kq_scale = 1.0f / sqrtf((float)hd), .eps = m->eps};

    for (int i = 0; i < m->n_layer; i++) {
        block *b = &m->blocks[i];
        b->mixer_norm = ld_vector(L, 1, E, "blk.%d.attn_norm.weight", i);
        if (is_recurrent(L, i, m->n_layer, interval)) {
            gdn_layer *g = &b->gdn;
            const int key_dim = Hk * dk, value_dim = Hv * dk, conv_dim = 2 * key_dim + value_dim;
            b->mixer = MIX_GDN;
            *g = (gdn_layer){.n_k_heads = Hk, .n_v_heads = Hv, .d_k = dk, .d_v = dk, .conv_k = conv_k, .eps = m->eps};
            ld_matrix(L, &g->w_qkv, 1, E, conv_dim, "blk.%d.attn_qkv.weight", i);
            ld_matrix(L, &g->w_z, 1, E, value_dim, "blk.%d.attn_gate.weight", i);
            ld_matrix(L, &g->w_beta, 1, E, Hv, "blk.%d.ssm_beta.weight", i);
            ld_matrix(L, &g->w_alpha, 1, E, Hv, "blk.%d.ssm_alpha.weight", i);
            ld_matrix(L, &g->w_out, 1, value_dim, E, "blk.%d.ssm_out.weight", i);
            g->conv_w = ld_vector(L, 1, (int64_t)conv_k * conv_dim, "blk.%d.ssm_conv1d.weight", i);
            g->dt_bias = ld_vector(L, 1, Hv, "blk.%d.ssm_dt.bias", i);
            g->a = ld_vector(L, 1, Hv, "blk.%d.ssm_a", i);
            g->norm = ld_vector(L, 1, dk, "blk.%d.ssm_norm.weight", i);
            g->rec_slot = ld_rec_slot(L, gdn_conv_floats(g), gdn_ssm_floats(g));
        } else {
            b->mixer = MIX_ATTN;
            qwen35_attention(L, &b->attn, i, &attn);
            if (!L->failed) b->attn.kv_slot = ld_kv_slot(L, n_head_kv * hd);
        }
        qwen35_ffn(L, b, i);
        if (L->failed) return 0;
    }
    if (!ld_embeddings(L, "output_norm.weight")) return 0;
    return nextn > 0 ? qwen35_mtp(L, &attn) : 1;
}

const arch_desc arch_qwen35 = {"qwen35", qwen35_load};
