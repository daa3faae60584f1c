/* synth_text.c - the tensors and metadata of a text model of a published shape, per
 * architecture, as llama.cpp's loader expects them (`chatfs synth --shape`, cmd_synth.c).
 * Weights: deterministic normal values (random_rows.h), std 1/sqrt(fan-in); norms ones;
 * decay and time-step parameters drawn from the ranges the real models use. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/synth/gguf_write.h"
#include "cli/synth/random_rows.h"
#include "cli/synth/synth.h"
#include "engine/kernels/quant.h"




static void key(builder *b, char *buf, size_t n, const char *k) {
    if (k[0] == '.')
        snprintf(buf, n, "%s%s", b->c->arch, k);
    else
        snprintf(buf, n, "%s", k);
}
static void kv_u32(builder *b, const char *k, uint32_t v) {
    char s[160];
    key(b, s, sizeof s, k);
    b->failed |= gguf_w_u32(b->w, s, v) != 0;
}
static void kv_f32(builder *b, const char *k, float v) {
    char s[160];
    key(b, s, sizeof s, k);
    b->failed |= gguf_w_f32(b->w, s, v) != 0;
}
static void kv_bool(builder *b, const char *k, int v) {
    char s[160];
    key(b, s, sizeof s, k);
    b->failed |= gguf_w_bool(b->w, s, v) != 0;
}
static void kv_str(builder *b, const char *k, const char *v) {
    char s[160];
    key(b, s, sizeof s, k);
    b->failed |= gguf_w_str(b->w, s, v) != 0;
}
static void kv_arr_u32(builder *b, const char *k, const uint32_t *v, int n, uint32_t type) {
    char s[160];
    key(b, s, sizeof s, k);
    b->failed |= gguf_w_arr(b->w, s, type, v, (uint64_t)n) != 0;
}

/* llama-quantize's Q4_K_M (llama-quant.cpp, llama_tensor_get_type): the output head (the
 * token embeddings when they are tied to it) Q6_K; a fused attention input attn_qkv Q5_K;
 * attn_v and ffn_down Q6_K in the first and last eighth of their tensors and every third
 * one between (use_more_bits); everything else Q4_K */
static int more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }
static uint32_t mix_type(builder *b, const char *name) {
    if (!strcmp(name, "output.weight") || (b->c->tied && !strcmp(name, "token_embd.weight"))) return GGML_Q6_K;
    if (strstr(name, "attn_qkv.weight")) return GGML_Q5_K;
    if (strstr(name, "attn_v.weight")) return more_bits(b->i_attn_v++, b->n_attn_v) ? GGML_Q6_K : GGML_Q4_K;
    if (strstr(name, "ffn_down") && b->c->n_expert > 1) { /* with experts: by the block of the name, of all blocks */
        int layer = 0;
        sscanf(name, "blk.%d.", &layer);
        return more_bits(layer, b->n_layer) ? GGML_Q6_K : GGML_Q4_K;
    }
    if (strstr(name, "ffn_down")) return more_bits(b->i_ffn_down++, b->n_ffn_down) ? GGML_Q6_K : GGML_Q4_K;
    return GGML_Q4_K;
}

/* which type a tensor gets: llama-quantize's rule for what it quantizes, and its
 * fallbacks for rows that do not fill a block */
static uint32_t tensor_type(builder *b, const char *name, int n_dims, int64_t ne0) {
    const size_t L = strlen(name);
    const int quant = n_dims >= 2 && L > 6 && !strcmp(name + L - 6, "weight") && !strstr(name, "_norm.weight") &&
                      !strstr(name, "ssm_conv1d") && !strstr(name, "shortconv.conv") && !strstr(name, "ffn_gate_inp");
    if (!quant) return GGML_F32;
    uint32_t t = b->q4_k_m ? mix_type(b, name) : b->qtype;
    if (ne0 % ggml_blck_size(t)) {
        switch (t) {
        case GGML_Q4_K: t = GGML_Q5_0; break;
        case GGML_Q5_K: t = GGML_Q5_1; break;
        case GGML_Q6_K: t = GGML_Q8_0; break;
        default: t = GGML_F16; break;
        }
        if (ne0 % ggml_blck_size(t)) t = GGML_F16;
    }
    return t;
}

static void tensor3(builder *b, const char *name, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2, int kind, float a,
                    float bb) {
    if (b->n_specs == b->cap_specs) { /* specs are referenced by the writer: allocated up front */
        b->failed = 1;
        return;
    }
    init_spec *sp = &b->specs[b->n_specs++];
    *sp = (init_spec){kind, a, bb, b->seed};
    if (kind == I_NORMAL && a == 0) sp->a = 1.0f / sqrtf((float)ne0);
    const int64_t ne[3] = {ne0, ne1, ne2};
    const uint32_t t = tensor_type(b, name, n_dims, ne0);
    const uint64_t n = (uint64_t)(ne0 * (n_dims > 1 ? ne1 : 1) * (n_dims > 2 ? ne2 : 1));
    b->failed |= gguf_w_tensor(b->w, name, t, n_dims, ne, random_rows, sp) != 0;
    b->n_tensors++;
    b->n_params += n;
    b->n_bytes += n / ggml_blck_size(t) * ggml_type_size(t);
}
static void tensor(builder *b, const char *name, int n_dims, int64_t ne0, int64_t ne1, int kind, float a, float bb) {
    tensor3(b, name, n_dims, ne0, ne1, 1, kind, a, bb);
}

/* name helpers */
#define W(...) (snprintf(nm, sizeof nm, __VA_ARGS__), nm)
static void mat(builder *b, const char *name, int64_t in, int64_t out) { tensor(b, name, 2, in, out, I_NORMAL, 0, 0); }
static void mat_std(builder *b, const char *name, int64_t in, int64_t out, float std) {
    tensor(b, name, 2, in, out, I_NORMAL, std, 0);
}
static void ones(builder *b, const char *name, int64_t n) { tensor(b, name, 1, n, 1, I_CONST, 1, 0); }
/* n_expert matrices [in, out] as one 3-D tensor */
static void experts(builder *b, const char *name, int64_t in, int64_t out) {
    tensor3(b, name, 3, in, out, b->c->n_expert, I_NORMAL, 0, 0);
}

/* The keys every MoE architecture reads: expert_count, expert_used_count, the experts'
 * and the shared expert's widths. */
static void moe_kv(builder *b) {
    const shape *c = b->c;
    kv_u32(b, ".expert_count", (uint32_t)c->n_expert);
    kv_u32(b, ".expert_used_count", (uint32_t)c->n_used);
    kv_u32(b, ".expert_feed_forward_length", (uint32_t)c->n_ff_exp);
    if (c->n_ff_shexp) kv_u32(b, ".expert_shared_feed_forward_length", (uint32_t)c->n_ff_shexp);
}

/* An MoE FFN of block i: router (F32), selection bias (sigmoid routers), the experts
 * (gate only for SwiGLU), the shared expert (gated by ffn_gate_inp_shexp for Qwen). */
static void moe_tensors(builder *b, int i, int swiglu, int sel_bias, int shexp_gate) {
    const shape *c = b->c;
    const int E = c->n_embd, F = c->n_ff_exp, Fs = c->n_ff_shexp;
    char nm[128];
#define N(...) (snprintf(nm, sizeof nm, __VA_ARGS__), nm)
    mat(b, N("blk.%d.ffn_gate_inp.weight", i), E, c->n_expert);
    if (sel_bias) tensor(b, N("blk.%d.exp_probs_b.bias", i), 1, c->n_expert, 1, I_NORMAL, 0.01f, 0);
    if (swiglu) experts(b, N("blk.%d.ffn_gate_exps.weight", i), E, F);
    experts(b, N("blk.%d.ffn_up_exps.weight", i), E, F);
    experts(b, N("blk.%d.ffn_down_exps.weight", i), F, E);
    if (Fs) {
        if (shexp_gate) tensor(b, N("blk.%d.ffn_gate_inp_shexp.weight", i), 1, E, 1, I_NORMAL, 1.0f / sqrtf((float)E), 0);
        if (swiglu) mat(b, N("blk.%d.ffn_gate_shexp.weight", i), E, Fs);
        mat(b, N("blk.%d.ffn_up_shexp.weight", i), E, Fs);
        mat(b, N("blk.%d.ffn_down_shexp.weight", i), Fs, E);
    }
#undef N
}

/* byte-level BPE vocabulary: 256 byte tokens (GPT-2's byte-to-unicode mapping), a few
 * merges, the ChatML specials, then unused padding tokens up to n_vocab */
static int tokenizer_kv(builder *b, const char *pre) {
    const int n = b->c->n_vocab;
    static const char *const merges[] = {"Ġ t", "h e", "i n", "Ġ a", "e r", "o n", "Ġ s", "r e", "Ġt he", "a t"};
    const int n_merges = (int)(sizeof merges / sizeof merges[0]);
    char **tok = calloc((size_t)n, sizeof *tok);
    int32_t *ty = calloc((size_t)n, sizeof *ty);
    if (!tok || !ty) {
        free(tok);
        free(ty);
        return -1;
    }
    int k = 0, extra = 0;
    for (int byte = 0; byte < 256; byte++) { /* bytes_to_unicode */
        int cp;
        if ((byte >= '!' && byte <= '~') || (byte >= 0xa1 && byte <= 0xac) || (byte >= 0xae && byte <= 0xff))
            cp = byte;
        else
            cp = 256 + extra++;
        char *s = malloc(4);
        if (cp < 0x80) {
            s[0] = (char)cp, s[1] = 0;
        } else {
            s[0] = (char)(0xc0 | (cp >> 6)), s[1] = (char)(0x80 | (cp & 0x3f)), s[2] = 0;
        }
        tok[k] = s;
        ty[k++] = 1;
    }
    for (int i = 0; i < n_merges; i++) { /* "a b" -> "ab" */
        char *s = malloc(16);
        int o = 0;
        for (const char *p = merges[i]; *p; p++)
            if (*p != ' ') s[o++] = *p;
        s[o] = 0;
        tok[k] = s;
        ty[k++] = 1;
    }
    static const char *const specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    const int first_special = k;
    for (int i = 0; i < 3; i++) {
        tok[k] = strdup(specials[i]);
        ty[k++] = 3; /* control */
    }
    for (; k < n; k++) {
        tok[k] = malloc(24);
        snprintf(tok[k], 24, "[PAD%d]", k);
        ty[k] = 5; /* unused */
    }
    kv_u32(b, ".vocab_size", (uint32_t)n);
    kv_str(b, "tokenizer.ggml.model", "gpt2");
    kv_str(b, "tokenizer.ggml.pre", pre);
    b->failed |= gguf_w_arr_str(b->w, "tokenizer.ggml.tokens", (const char *const *)tok, (uint64_t)n) != 0;
    b->failed |= gguf_w_arr(b->w, "tokenizer.ggml.token_type", GGUF_I32, ty, (uint64_t)n) != 0;
    b->failed |= gguf_w_arr_str(b->w, "tokenizer.ggml.merges", merges, (uint64_t)n_merges) != 0;
    kv_u32(b, "tokenizer.ggml.bos_token_id", (uint32_t)first_special);
    kv_u32(b, "tokenizer.ggml.eos_token_id", (uint32_t)first_special + 2);
    kv_u32(b, "tokenizer.ggml.padding_token_id", (uint32_t)first_special);
    kv_bool(b, "tokenizer.ggml.add_bos_token", 0);
    kv_str(b, "tokenizer.chat_template",
           "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
           "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}");
    for (int i = 0; i < n; i++) free(tok[i]);
    free(tok);
    free(ty);
    return 0;
}

static void embeddings(builder *b, const char *out_norm, float emb_std, float logit_std) {
    const shape *c = b->c;
    mat_std(b, "token_embd.weight", c->n_embd, c->n_vocab, emb_std);
    ones(b, out_norm, c->n_embd);
    if (!c->tied) mat_std(b, "output.weight", c->n_embd, c->n_vocab, logit_std / sqrtf((float)c->n_embd));
}

static void attn_common(builder *b) {
    const shape *c = b->c;
    kv_u32(b, ".context_length", (uint32_t)c->ctx);
    kv_u32(b, ".embedding_length", (uint32_t)c->n_embd);
    kv_f32(b, ".attention.layer_norm_rms_epsilon", c->eps);
    if (c->rope_base > 0) kv_f32(b, ".rope.freq_base", c->rope_base);
}

/* Block i's FFN in Qwen3.5: dense SwiGLU, or (qwen35moe) the softmax-routed experts and
 * the sigmoid-gated shared expert */
static void qwen35_ffn(builder *b, int i) {
    const shape *c = b->c;
    const int E = c->n_embd;
    char nm[128];
    if (c->n_expert) {
        moe_tensors(b, i, 1, 0, 1);
        return;
    }
    mat(b, W("blk.%d.ffn_gate.weight", i), E, c->n_ff);
    mat(b, W("blk.%d.ffn_up.weight", i), E, c->n_ff);
    mat(b, W("blk.%d.ffn_down.weight", i), c->n_ff, E);
}

/* Block i of Qwen3.5: its two norms, the mixer - Gated DeltaNet, or (attention) gated
 * attention with attn_q holding [q, gate] per head and q/k norms - and its FFN. The trunk's
 * every fourth block and the MTP block are attention blocks. */
static void qwen35_block(builder *b, int i, int attention) {
    const shape *c = b->c;
    const int E = c->n_embd, hd = c->head_dim, key_dim = c->lin_k * c->lin_dk, value_dim = c->lin_v * c->lin_dk;
    const int conv_dim = 2 * key_dim + value_dim;
    char nm[128];
    ones(b, W("blk.%d.attn_norm.weight", i), E);
    ones(b, W("blk.%d.post_attention_norm.weight", i), E);
    if (attention) {
        mat(b, W("blk.%d.attn_q.weight", i), E, 2 * hd * c->n_head);
        mat(b, W("blk.%d.attn_k.weight", i), E, hd * c->n_head_kv);
        mat(b, W("blk.%d.attn_v.weight", i), E, hd * c->n_head_kv);
        mat(b, W("blk.%d.attn_output.weight", i), hd * c->n_head, E);
        ones(b, W("blk.%d.attn_q_norm.weight", i), hd);
        ones(b, W("blk.%d.attn_k_norm.weight", i), hd);
    } else {
        mat(b, W("blk.%d.attn_qkv.weight", i), E, conv_dim);
        mat(b, W("blk.%d.attn_gate.weight", i), E, value_dim);
        tensor(b, W("blk.%d.ssm_conv1d.weight", i), 2, c->conv_k, conv_dim, I_NORMAL, 1.0f / sqrtf((float)c->conv_k), 0);
        tensor(b, W("blk.%d.ssm_dt.bias", i), 1, c->lin_v, 1, I_CONST, 1, 0);
        tensor(b, W("blk.%d.ssm_a", i), 1, c->lin_v, 1, I_UNIFORM, -0.5f, -0.02f);
        mat(b, W("blk.%d.ssm_beta.weight", i), E, c->lin_v);
        mat(b, W("blk.%d.ssm_alpha.weight", i), E, c->lin_v);
        ones(b, W("blk.%d.ssm_norm.weight", i), c->lin_dk);
        mat(b, W("blk.%d.ssm_out.weight", i), value_dim, E);
    }
    qwen35_ffn(b, i);
}

static void build_qwen35(builder *b) {
    const shape *c = b->c;
    const int E = c->n_embd, hd = c->head_dim, value_dim = c->lin_v * c->lin_dk;
    char nm[128];
    attn_common(b);
    kv_u32(b, ".block_count", (uint32_t)(b->n_layer + (b->mtp ? 1 : 0)));
    if (b->mtp) kv_u32(b, ".nextn_predict_layers", 1);
    if (c->n_expert) moe_kv(b);
    else kv_u32(b, ".feed_forward_length", (uint32_t)c->n_ff);
    kv_u32(b, ".attention.head_count", (uint32_t)c->n_head);
    kv_u32(b, ".attention.head_count_kv", (uint32_t)c->n_head_kv);
    kv_u32(b, ".attention.key_length", (uint32_t)hd);
    kv_u32(b, ".attention.value_length", (uint32_t)hd);
    kv_u32(b, ".rope.dimension_count", (uint32_t)c->rope_dim);
    const uint32_t sections[4] = {11, 11, 10, 0};
    kv_arr_u32(b, ".rope.dimension_sections", sections, 4, GGUF_I32);
    kv_u32(b, ".ssm.conv_kernel", (uint32_t)c->conv_k);
    kv_u32(b, ".ssm.state_size", (uint32_t)c->lin_dk);
    kv_u32(b, ".ssm.group_count", (uint32_t)c->lin_k);
    kv_u32(b, ".ssm.time_step_rank", (uint32_t)c->lin_v);
    kv_u32(b, ".ssm.inner_size", (uint32_t)value_dim);
    kv_u32(b, ".full_attention_interval", 4);
    if (tokenizer_kv(b, "qwen35")) b->failed = 1;
    embeddings(b, "output_norm.weight", c->tied ? 0.3f : 1.0f, 3.0f);
    for (int i = 0; i < b->n_layer; i++) qwen35_block(b, i, (i + 1) % 4 == 0);
    if (b->mtp) { /* the MTP block: a gated attention block with the trunk's FFN, and nextn.* */
        const int i = b->n_layer;
        qwen35_block(b, i, 1);
        mat(b, W("blk.%d.nextn.eh_proj.weight", i), 2 * E, E);
        ones(b, W("blk.%d.nextn.enorm.weight", i), E);
        ones(b, W("blk.%d.nextn.hnorm.weight", i), E);
        ones(b, W("blk.%d.nextn.shared_head_norm.weight", i), E);
    }
}

static void mamba2_tensors(builder *b, int i, int d_inner, int n_head, int groups, int state, int conv_k) {
    const int E = b->c->n_embd, conv_dim = d_inner + 2 * groups * state;
    char nm[128];
    mat(b, W("blk.%d.ssm_in.weight", i), E, 2 * d_inner + 2 * groups * state + n_head);
    tensor(b, W("blk.%d.ssm_conv1d.weight", i), 2, conv_k, conv_dim, I_NORMAL, 1.0f / sqrtf((float)conv_k), 0);
    tensor(b, W("blk.%d.ssm_conv1d.bias", i), 1, conv_dim, 1, I_NORMAL, 0.1f, 0);
    tensor(b, W("blk.%d.ssm_dt.bias", i), 1, n_head, 1, I_DT_BIAS, 1e-3f, 1e-1f);
    tensor(b, W("blk.%d.ssm_a", i), 2, 1, n_head, I_UNIFORM, -16.f, -1.f);
    tensor(b, W("blk.%d.ssm_d", i), 2, 1, n_head, I_CONST, 1, 0);
    tensor(b, W("blk.%d.ssm_norm.weight", i), 2, d_inner / groups, groups, I_CONST, 1, 0);
    mat(b, W("blk.%d.ssm_out.weight", i), d_inner, E);
}

static void ssm_kv(builder *b, int d_inner, int n_head, int groups, int state) {
    kv_u32(b, ".ssm.conv_kernel", (uint32_t)b->c->conv_k);
    kv_u32(b, ".ssm.state_size", (uint32_t)state);
    kv_u32(b, ".ssm.group_count", (uint32_t)groups);
    kv_u32(b, ".ssm.inner_size", (uint32_t)d_inner);
    kv_u32(b, ".ssm.time_step_rank", (uint32_t)n_head);
}

static void build_nemotron_h(builder *b) { /* and nemotron_h_moe: 'E' blocks are experts */
    const shape *c = b->c;
    const int E = c->n_embd, L = b->n_layer, d_inner = c->ssm_heads * c->ssm_head_dim;
    char nm[128];
    uint32_t ff[128], kvh[128];
    for (int i = 0; i < L; i++) {
        ff[i] = c->pattern[i] == '-' ? (uint32_t)c->n_ff : c->pattern[i] == 'E' ? (uint32_t)c->n_ff_exp : 0;
        kvh[i] = c->pattern[i] == '*' ? (uint32_t)c->n_head_kv : 0;
    }
    kv_u32(b, ".context_length", (uint32_t)c->ctx);
    kv_u32(b, ".embedding_length", (uint32_t)E);
    kv_u32(b, ".block_count", (uint32_t)L);
    kv_arr_u32(b, ".feed_forward_length", ff, L, GGUF_U32);
    kv_u32(b, ".attention.head_count", (uint32_t)c->n_head);
    kv_arr_u32(b, ".attention.head_count_kv", kvh, L, GGUF_U32);
    kv_u32(b, ".attention.key_length", (uint32_t)c->head_dim);
    kv_u32(b, ".attention.value_length", (uint32_t)c->head_dim);
    kv_f32(b, ".attention.layer_norm_epsilon", c->eps);
    kv_f32(b, ".attention.layer_norm_rms_epsilon", c->eps);
    ssm_kv(b, d_inner, c->ssm_heads, c->ssm_groups, c->ssm_state);
    if (c->n_expert) { /* sigmoid router with selection bias, renormalised, scaled */
        moe_kv(b);
        kv_u32(b, ".expert_shared_count", 1);
        kv_bool(b, ".expert_weights_norm", 1);
        kv_f32(b, ".expert_weights_scale", c->w_scale);
        kv_u32(b, ".expert_group_count", 1);
    }
    if (tokenizer_kv(b, "qwen2")) b->failed = 1;
    embeddings(b, "output_norm.weight", c->tied ? 0.3f : 1.0f, 3.0f);
    for (int i = 0; i < L; i++) {
        ones(b, W("blk.%d.attn_norm.weight", i), E);
        if (c->pattern[i] == 'M') {
            mamba2_tensors(b, i, d_inner, c->ssm_heads, c->ssm_groups, c->ssm_state, c->conv_k);
        } else if (c->pattern[i] == '*') {
            mat(b, W("blk.%d.attn_q.weight", i), E, c->head_dim * c->n_head);
            mat(b, W("blk.%d.attn_k.weight", i), E, c->head_dim * c->n_head_kv);
            mat(b, W("blk.%d.attn_v.weight", i), E, c->head_dim * c->n_head_kv);
            mat(b, W("blk.%d.attn_output.weight", i), c->head_dim * c->n_head, E);
        } else if (c->pattern[i] == 'E') {
            moe_tensors(b, i, 0, 1, 0); /* ReLU² experts and shared expert */
        } else {
            mat(b, W("blk.%d.ffn_up.weight", i), E, c->n_ff);
            mat(b, W("blk.%d.ffn_down.weight", i), c->n_ff, E);
        }
    }
}

static void build_mamba2(builder *b) {
    const shape *c = b->c;
    const int E = c->n_embd, d_inner = c->ssm_heads * c->ssm_head_dim;
    char nm[128];
    kv_u32(b, ".context_length", (uint32_t)c->ctx);
    kv_u32(b, ".embedding_length", (uint32_t)E);
    kv_u32(b, ".feed_forward_length", 0);
    kv_u32(b, ".attention.head_count", 0);
    kv_u32(b, ".block_count", (uint32_t)b->n_layer);
    ssm_kv(b, d_inner, c->ssm_heads, c->ssm_groups, c->ssm_state);
    kv_f32(b, ".attention.layer_norm_rms_epsilon", c->eps);
    if (tokenizer_kv(b, "qwen2")) b->failed = 1;
    embeddings(b, "output_norm.weight", c->tied ? 0.3f : 1.0f, 3.0f);
    for (int i = 0; i < b->n_layer; i++) {
        ones(b, W("blk.%d.attn_norm.weight", i), E);
        mamba2_tensors(b, i, d_inner, c->ssm_heads, c->ssm_groups, c->ssm_state, c->conv_k);
    }
}

static void build_mamba(builder *b) {
    const shape *c = b->c;
    const int E = c->n_embd, d_inner = 2 * E, N = c->ssm_state, R = c->dt_rank;
    char nm[128];
    kv_u32(b, ".context_length", (uint32_t)c->ctx);
    kv_u32(b, ".embedding_length", (uint32_t)E);
    kv_u32(b, ".feed_forward_length", 0);
    kv_u32(b, ".attention.head_count", 0);
    kv_u32(b, ".block_count", (uint32_t)b->n_layer);
    kv_u32(b, ".ssm.conv_kernel", (uint32_t)c->conv_k);
    kv_u32(b, ".ssm.inner_size", (uint32_t)d_inner);
    kv_u32(b, ".ssm.state_size", (uint32_t)N);
    kv_u32(b, ".ssm.time_step_rank", (uint32_t)R);
    kv_f32(b, ".attention.layer_norm_rms_epsilon", c->eps);
    kv_bool(b, ".ssm.dt_b_c_rms", 0);
    if (tokenizer_kv(b, "qwen2")) b->failed = 1;
    embeddings(b, "output_norm.weight", c->tied ? 0.3f : 1.0f, 3.0f);
    for (int i = 0; i < b->n_layer; i++) {
        ones(b, W("blk.%d.attn_norm.weight", i), E);
        mat(b, W("blk.%d.ssm_in.weight", i), E, 2 * d_inner);
        tensor(b, W("blk.%d.ssm_conv1d.weight", i), 2, c->conv_k, d_inner, I_NORMAL, 1.0f / sqrtf((float)c->conv_k), 0);
        tensor(b, W("blk.%d.ssm_conv1d.bias", i), 1, d_inner, 1, I_NORMAL, 0.1f, 0);
        mat(b, W("blk.%d.ssm_x.weight", i), d_inner, R + 2 * N);
        mat_std(b, W("blk.%d.ssm_dt.weight", i), R, d_inner, 1.0f / sqrtf((float)R));
        tensor(b, W("blk.%d.ssm_dt.bias", i), 1, d_inner, 1, I_DT_BIAS, 1e-3f, 1e-1f);
        tensor(b, W("blk.%d.ssm_a", i), 2, N, d_inner, I_A_RANGE_ROW, 0, 0);
        tensor(b, W("blk.%d.ssm_d", i), 1, d_inner, 1, I_CONST, 1, 0);
        mat(b, W("blk.%d.ssm_out.weight", i), d_inner, E);
    }
}

static int is_attn_layer(const shape *c, int i) {
    for (int k = 0; k < c->n_attn_layers; k++)
        if (c->attn_layers[k] == i) return 1;
    return 0;
}

static void build_granitehybrid(builder *b) {
    const shape *c = b->c;
    const int E = c->n_embd, L = b->n_layer, d_inner = c->ssm_heads * c->ssm_head_dim, hd = c->head_dim;
    char nm[128];
    uint32_t kvh[128];
    for (int i = 0; i < L; i++) kvh[i] = is_attn_layer(c, i) ? (uint32_t)c->n_head_kv : 0;
    kv_u32(b, ".context_length", (uint32_t)c->ctx);
    kv_u32(b, ".embedding_length", (uint32_t)E);
    kv_u32(b, ".block_count", (uint32_t)L);
    kv_u32(b, ".feed_forward_length", (uint32_t)c->n_ff);
    kv_u32(b, ".attention.head_count", (uint32_t)c->n_head);
    kv_arr_u32(b, ".attention.head_count_kv", kvh, L, GGUF_U32);
    kv_f32(b, ".attention.layer_norm_rms_epsilon", c->eps);
    kv_bool(b, ".rope.scaling.finetuned", 0);
    kv_f32(b, ".embedding_scale", c->emb_scale);
    kv_f32(b, ".residual_scale", c->res_scale);
    kv_f32(b, ".attention.scale", c->attn_scale);
    kv_f32(b, ".logit_scale", c->logit_scale);
    ssm_kv(b, d_inner, c->ssm_heads, c->ssm_groups, c->ssm_state);
    if (c->n_expert) moe_kv(b); /* the experts' width is feed_forward_length */
    if (tokenizer_kv(b, "qwen2")) b->failed = 1;
    embeddings(b, "output_norm.weight", 0.3f / c->emb_scale, 3.0f * c->logit_scale);
    for (int i = 0; i < L; i++) {
        ones(b, W("blk.%d.attn_norm.weight", i), E);
        if (is_attn_layer(c, i)) {
            mat(b, W("blk.%d.attn_q.weight", i), E, hd * c->n_head);
            mat(b, W("blk.%d.attn_k.weight", i), E, hd * c->n_head_kv);
            mat(b, W("blk.%d.attn_v.weight", i), E, hd * c->n_head_kv);
            mat(b, W("blk.%d.attn_output.weight", i), hd * c->n_head, E);
        } else {
            mamba2_tensors(b, i, d_inner, c->ssm_heads, c->ssm_groups, c->ssm_state, c->conv_k);
        }
        ones(b, W("blk.%d.ffn_norm.weight", i), E);
        if (c->n_expert) {
            moe_tensors(b, i, 1, 0, 0); /* softmax router, ungated shared expert */
            continue;
        }
        mat(b, W("blk.%d.ffn_gate.weight", i), E, c->n_ff);
        mat(b, W("blk.%d.ffn_up.weight", i), E, c->n_ff);
        mat(b, W("blk.%d.ffn_down.weight", i), c->n_ff, E);
    }
}

static void build_lfm2(builder *b) { /* and lfm2moe: experts after the leading dense blocks */
    const shape *c = b->c;
    const int E = c->n_embd, L = b->n_layer, hd = c->head_dim;
    char nm[128];
    uint32_t kvh[128];
    for (int i = 0; i < L; i++) kvh[i] = is_attn_layer(c, i) ? (uint32_t)c->n_head_kv : 0;
    attn_common(b);
    kv_u32(b, ".block_count", (uint32_t)L);
    kv_u32(b, ".feed_forward_length", (uint32_t)c->n_ff);
    kv_u32(b, ".attention.head_count", (uint32_t)c->n_head);
    kv_arr_u32(b, ".attention.head_count_kv", kvh, L, GGUF_U32);
    kv_u32(b, ".shortconv.l_cache", (uint32_t)c->conv_k);
    if (c->n_expert) { /* sigmoid router with selection bias (the converter's gating func 2) */
        moe_kv(b);
        kv_u32(b, ".leading_dense_block_count", (uint32_t)c->n_dense_lead);
        kv_u32(b, ".expert_gating_func", 2);
    }
    if (tokenizer_kv(b, "qwen2")) b->failed = 1;
    embeddings(b, "token_embd_norm.weight", c->tied ? 0.3f : 1.0f, 3.0f);
    for (int i = 0; i < L; i++) {
        ones(b, W("blk.%d.attn_norm.weight", i), E);
        if (is_attn_layer(c, i)) {
            mat(b, W("blk.%d.attn_q.weight", i), E, E);
            mat(b, W("blk.%d.attn_k.weight", i), E, hd * c->n_head_kv);
            mat(b, W("blk.%d.attn_v.weight", i), E, hd * c->n_head_kv);
            mat(b, W("blk.%d.attn_output.weight", i), E, E);
            ones(b, W("blk.%d.attn_q_norm.weight", i), hd);
            ones(b, W("blk.%d.attn_k_norm.weight", i), hd);
        } else {
            tensor(b, W("blk.%d.shortconv.conv.weight", i), 2, c->conv_k, E, I_NORMAL, 1.0f / sqrtf((float)c->conv_k), 0);
            mat(b, W("blk.%d.shortconv.in_proj.weight", i), E, 3 * E);
            mat(b, W("blk.%d.shortconv.out_proj.weight", i), E, E);
        }
        ones(b, W("blk.%d.ffn_norm.weight", i), E);
        if (c->n_expert && i >= c->n_dense_lead) {
            moe_tensors(b, i, 1, 1, 0);
            continue;
        }
        mat(b, W("blk.%d.ffn_gate.weight", i), E, c->n_ff);
        mat(b, W("blk.%d.ffn_up.weight", i), E, c->n_ff);
        mat(b, W("blk.%d.ffn_down.weight", i), c->n_ff, E);
    }
}

/* qwen3 (q/k norms, explicit head size), qwen2 (q/k/v biases; only the generic keys, as
 * its converter writes them: head size n_embd / head_count, rope over all of it) and llama */
static void build_dense(builder *b, int qk_norm) {
    const shape *c = b->c;
    const int E = c->n_embd, hd = c->head_dim, qkv_bias = !strcmp(c->arch, "qwen2");
    char nm[128];
    attn_common(b);
    kv_u32(b, ".block_count", (uint32_t)b->n_layer);
    kv_u32(b, ".feed_forward_length", (uint32_t)c->n_ff);
    kv_u32(b, ".attention.head_count", (uint32_t)c->n_head);
    kv_u32(b, ".attention.head_count_kv", (uint32_t)c->n_head_kv);
    if (qk_norm) {
        kv_u32(b, ".attention.key_length", (uint32_t)hd);
        kv_u32(b, ".attention.value_length", (uint32_t)hd);
    } else if (!qkv_bias) {
        kv_u32(b, ".rope.dimension_count", (uint32_t)hd);
    }
    if (tokenizer_kv(b, "qwen2")) b->failed = 1;
    embeddings(b, "output_norm.weight", c->tied ? 0.3f : 1.0f, 3.0f);
    for (int i = 0; i < b->n_layer; i++) {
        ones(b, W("blk.%d.attn_norm.weight", i), E);
        mat(b, W("blk.%d.attn_q.weight", i), E, hd * c->n_head);
        mat(b, W("blk.%d.attn_k.weight", i), E, hd * c->n_head_kv);
        mat(b, W("blk.%d.attn_v.weight", i), E, hd * c->n_head_kv);
        mat(b, W("blk.%d.attn_output.weight", i), hd * c->n_head, E);
        if (qkv_bias) { /* large q/k biases (rope turns them with the position), a small v bias */
            tensor(b, W("blk.%d.attn_q.bias", i), 1, hd * c->n_head, 1, I_NORMAL, 0.5f, 0);
            tensor(b, W("blk.%d.attn_k.bias", i), 1, hd * c->n_head_kv, 1, I_NORMAL, 0.5f, 0);
            tensor(b, W("blk.%d.attn_v.bias", i), 1, hd * c->n_head_kv, 1, I_NORMAL, 0.1f, 0);
        }
        if (qk_norm) {
            ones(b, W("blk.%d.attn_q_norm.weight", i), hd);
            ones(b, W("blk.%d.attn_k_norm.weight", i), hd);
        }
        ones(b, W("blk.%d.ffn_norm.weight", i), E);
        mat(b, W("blk.%d.ffn_gate.weight", i), E, c->n_ff);
        mat(b, W("blk.%d.ffn_up.weight", i), E, c->n_ff);
        mat(b, W("blk.%d.ffn_down.weight", i), c->n_ff, E);
    }
}
#undef W

void synth_text_build(builder *b) {
    const char *arch = b->c->arch;
    if (!strcmp(arch, "qwen35") || !strcmp(arch, "qwen35moe")) build_qwen35(b);
    else if (!strcmp(arch, "nemotron_h") || !strcmp(arch, "nemotron_h_moe")) build_nemotron_h(b);
    else if (!strcmp(arch, "mamba2")) build_mamba2(b);
    else if (!strcmp(arch, "mamba")) build_mamba(b);
    else if (!strcmp(arch, "granitehybrid")) build_granitehybrid(b);
    else if (!strcmp(arch, "lfm2") || !strcmp(arch, "lfm2moe")) build_lfm2(b);
    else build_dense(b, !strcmp(arch, "qwen3"));
}
