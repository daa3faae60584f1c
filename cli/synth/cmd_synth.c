/* cmd_synth.c - `chatfs synth`: a random-weight GGUF with the exact shape of a real model
 * (docs/engine-math.md §10), for benchmarks and tests.
 *
 *   chatfs synth --shape qwen3.5-0.8b --type q8_0 --out FILE [--layers N] [--seed S] [-t N] [--mtp]
 *   chatfs synth --mmproj tiny --n-embd 64 --type f32 --out FILE     (a vision projector:
 *                                                                    synth_mmproj.c)
 *
 * --layers N keeps the first N blocks of the shape's layer pattern (for machines that
 * cannot hold a whole mixture-of-experts model): every layer keeps its real size.
 * Metadata keys, tensor names and shapes follow what llama.cpp's loader expects (so the
 * same file runs in llama.cpp for side-by-side comparisons). Weights are deterministic
 * normal values (std 1/sqrt(fan-in), like tools' mkgguf.py) from (seed, tensor name, row),
 * converted to the requested type; norms are ones, decay and time-step parameters are
 * drawn from the ranges the real models use. Matrices whose row length does not fit the
 * type's block fall back like llama-quantize (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0,
 * then F16). Type q4_k_m is llama-quantize's Q4_K_M mix (see mix_type), the file most
 * people download. The tokenizer is byte-level (256 byte tokens, a few merges, the ChatML
 * specials), padded to the real vocabulary size. --mtp (Qwen3.5 shapes) appends the
 * multi-token-prediction block that Qwen3.5 GGUFs converted with it carry (block_count one
 * more than the trunk, nextn_predict_layers 1; docs/engine-math.md §12), for speculative
 * decoding benchmarks. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/synth/gguf_write.h"
#include "cli/synth/random_rows.h"
#include "cli/synth/synth.h"
#include "engine/kernels/quant.h"
#include "engine/base/threadpool.h"

/* ---------------------------------------------------------------- shapes of published models */

typedef struct {
    const char *name, *arch;
    int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, tied, ctx;
    float rope_base, eps;
    /* qwen35 */
    int rope_dim, lin_k, lin_v, lin_dk, conv_k;
    /* mamba / hybrid: pattern (M mamba2, * attention, - MLP) or attention layer list */
    const char *pattern;
    int ssm_heads, ssm_head_dim, ssm_groups, ssm_state, dt_rank;
    int attn_layers[8], n_attn_layers;
    /* granite */
    float emb_scale, res_scale, logit_scale, attn_scale;
    /* mixture of experts: experts per block, chosen per token, their width, the shared
     * expert's width (0: none), dense blocks before the first MoE block (lfm2moe), the
     * routing weights' scale (nemotron_h_moe) */
    int n_expert, n_used, n_ff_exp, n_ff_shexp, n_dense_lead;
    float w_scale;
} shape;

static const shape shapes[] = {
    {.name = "qwen3.5-0.8b", .arch = "qwen35", .n_embd = 1024, .n_layer = 24, .n_head = 8, .n_head_kv = 2,
     .head_dim = 256, .n_ff = 3584, .n_vocab = 248320, .tied = 1, .ctx = 262144, .rope_base = 1e7f, .eps = 1e-6f,
     .rope_dim = 64, .lin_k = 16, .lin_v = 16, .lin_dk = 128, .conv_k = 4},
    {.name = "qwen3.5-2b", .arch = "qwen35", .n_embd = 2048, .n_layer = 24, .n_head = 8, .n_head_kv = 2,
     .head_dim = 256, .n_ff = 6144, .n_vocab = 248320, .tied = 1, .ctx = 262144, .rope_base = 1e7f, .eps = 1e-6f,
     .rope_dim = 64, .lin_k = 16, .lin_v = 16, .lin_dk = 128, .conv_k = 4},
    {.name = "qwen3.5-4b", .arch = "qwen35", .n_embd = 2560, .n_layer = 32, .n_head = 16, .n_head_kv = 4,
     .head_dim = 256, .n_ff = 9216, .n_vocab = 248320, .tied = 1, .ctx = 262144, .rope_base = 1e7f, .eps = 1e-6f,
     .rope_dim = 64, .lin_k = 16, .lin_v = 32, .lin_dk = 128, .conv_k = 4},
    /* small enough for tests, with rows that fill 256-element blocks (K-quants) */
    {.name = "qwen3.5-small", .arch = "qwen35", .n_embd = 256, .n_layer = 4, .n_head = 2, .n_head_kv = 1,
     .head_dim = 64, .n_ff = 512, .n_vocab = 512, .tied = 1, .ctx = 4096, .rope_base = 1e7f, .eps = 1e-6f,
     .rope_dim = 16, .lin_k = 2, .lin_v = 4, .lin_dk = 64, .conv_k = 4},
    {.name = "nemotron-h-4b", .arch = "nemotron_h", .n_embd = 3136, .n_head = 40, .n_head_kv = 8, .head_dim = 128,
     .n_ff = 12544, .n_vocab = 131072, .tied = 0, .ctx = 8192, .eps = 1e-5f,
     .pattern = "M-M-M-MM-M-M*-M-M*-M-M-M*-M-M-MM*-MMM-M-M-", .ssm_heads = 96, .ssm_head_dim = 80, .ssm_groups = 8,
     .ssm_state = 128, .conv_k = 4},
    {.name = "nemotron-h-8b", .arch = "nemotron_h", .n_embd = 4096, .n_head = 32, .n_head_kv = 8, .head_dim = 128,
     .n_ff = 21504, .n_vocab = 131072, .tied = 0, .ctx = 8192, .eps = 1e-5f,
     .pattern = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-", .ssm_heads = 128, .ssm_head_dim = 64,
     .ssm_groups = 8, .ssm_state = 128, .conv_k = 4},
    {.name = "nemotron-nano-9b", .arch = "nemotron_h", .n_embd = 4480, .n_head = 40, .n_head_kv = 8, .head_dim = 128,
     .n_ff = 15680, .n_vocab = 131072, .tied = 0, .ctx = 8192, .eps = 1e-5f,
     .pattern = "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-", .ssm_heads = 128, .ssm_head_dim = 80,
     .ssm_groups = 8, .ssm_state = 128, .conv_k = 4},
    {.name = "mamba2-130m", .arch = "mamba2", .n_embd = 768, .n_layer = 24, .n_vocab = 50288, .tied = 1,
     .ctx = 1 << 20, .eps = 1e-5f, .ssm_heads = 24, .ssm_head_dim = 64, .ssm_groups = 1, .ssm_state = 128,
     .conv_k = 4},
    {.name = "mamba-130m", .arch = "mamba", .n_embd = 768, .n_layer = 24, .n_vocab = 50280, .tied = 1,
     .ctx = 1 << 20, .eps = 1e-5f, .ssm_state = 16, .dt_rank = 48, .conv_k = 4},
    {.name = "granite-4.0-h-350m", .arch = "granitehybrid", .n_embd = 768, .n_layer = 32, .n_head = 12,
     .n_head_kv = 4, .head_dim = 64, .n_ff = 2048, .n_vocab = 100352, .tied = 1, .ctx = 1 << 20, .eps = 1e-5f,
     .ssm_heads = 48, .ssm_head_dim = 32, .ssm_groups = 1, .ssm_state = 128, .conv_k = 4,
     .attn_layers = {10, 13, 17, 27}, .n_attn_layers = 4, .emb_scale = 12, .res_scale = 0.246f, .logit_scale = 3,
     .attn_scale = 0.015625f},
    {.name = "lfm2-350m", .arch = "lfm2", .n_embd = 1024, .n_layer = 16, .n_head = 16, .n_head_kv = 8,
     .head_dim = 64, .n_ff = 4608, .n_vocab = 65536, .tied = 1, .ctx = 128000, .rope_base = 1e6f, .eps = 1e-5f,
     .conv_k = 3, .attn_layers = {2, 5, 8, 10, 12, 14}, .n_attn_layers = 6},
    {.name = "qwen3-0.6b", .arch = "qwen3", .n_embd = 1024, .n_layer = 28, .n_head = 16, .n_head_kv = 8,
     .head_dim = 128, .n_ff = 3072, .n_vocab = 151936, .tied = 1, .ctx = 40960, .rope_base = 1e6f, .eps = 1e-6f},
    /* Qwen/Qwen1.5-0.5B's config.json (GGUF arch qwen2; Qwen2/2.5-0.5B differ only in sizes) */
    {.name = "qwen1.5-0.5b", .arch = "qwen2", .n_embd = 1024, .n_layer = 24, .n_head = 16, .n_head_kv = 16,
     .head_dim = 64, .n_ff = 2816, .n_vocab = 151936, .tied = 1, .ctx = 32768, .rope_base = 1e6f, .eps = 1e-6f},
    {.name = "llama-3.2-1b", .arch = "llama", .n_embd = 2048, .n_layer = 16, .n_head = 32, .n_head_kv = 8,
     .head_dim = 64, .n_ff = 8192, .n_vocab = 128256, .tied = 1, .ctx = 131072, .rope_base = 5e5f, .eps = 1e-5f},
    /* mixture-of-experts hybrids (docs/engine-math.md §11; their published configs) */
    {.name = "qwen3.5-35b-a3b", .arch = "qwen35moe", .n_embd = 2048, .n_layer = 40, .n_head = 16, .n_head_kv = 2,
     .head_dim = 256, .n_vocab = 248320, .tied = 0, .ctx = 262144, .rope_base = 1e7f, .eps = 1e-6f, .rope_dim = 64,
     .lin_k = 16, .lin_v = 32, .lin_dk = 128, .conv_k = 4, .n_expert = 256, .n_used = 8, .n_ff_exp = 512,
     .n_ff_shexp = 512},
    {.name = "nemotron-3-nano-30b-a3b", .arch = "nemotron_h_moe", .n_embd = 2688, .n_head = 32, .n_head_kv = 2,
     .head_dim = 128, .n_vocab = 131072, .tied = 0, .ctx = 262144, .eps = 1e-5f,
     .pattern = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME", .ssm_heads = 64, .ssm_head_dim = 64,
     .ssm_groups = 8, .ssm_state = 128, .conv_k = 4, .n_expert = 128, .n_used = 6, .n_ff_exp = 1856,
     .n_ff_shexp = 3712, .w_scale = 2.5f},
    {.name = "lfm2-8b-a1b", .arch = "lfm2moe", .n_embd = 2048, .n_layer = 24, .n_head = 32, .n_head_kv = 8,
     .head_dim = 64, .n_ff = 7168, .n_vocab = 65536, .tied = 1, .ctx = 128000, .rope_base = 1e6f, .eps = 1e-5f,
     .conv_k = 3, .attn_layers = {2, 6, 10, 14, 18, 21}, .n_attn_layers = 6, .n_expert = 32, .n_used = 4,
     .n_ff_exp = 1792, .n_dense_lead = 2},
    {.name = "granite-4.0-h-tiny", .arch = "granitehybrid", .n_embd = 1536, .n_layer = 40, .n_head = 12,
     .n_head_kv = 4, .head_dim = 128, .n_ff = 512, .n_vocab = 100352, .tied = 1, .ctx = 1 << 20, .eps = 1e-5f,
     .ssm_heads = 48, .ssm_head_dim = 64, .ssm_groups = 1, .ssm_state = 128, .conv_k = 4,
     .attn_layers = {5, 15, 25, 35}, .n_attn_layers = 4, .emb_scale = 12, .res_scale = 0.22f, .logit_scale = 6,
     .attn_scale = 0.0078125f, .n_expert = 64, .n_used = 6, .n_ff_exp = 512, .n_ff_shexp = 1024},
    /* small enough for tests, with expert rows that fill 256-element blocks (K-quants) */
    {.name = "qwen3.5-moe-small", .arch = "qwen35moe", .n_embd = 256, .n_layer = 4, .n_head = 2, .n_head_kv = 1,
     .head_dim = 64, .n_vocab = 512, .tied = 1, .ctx = 4096, .rope_base = 1e7f, .eps = 1e-6f, .rope_dim = 16,
     .lin_k = 2, .lin_v = 4, .lin_dk = 64, .conv_k = 4, .n_expert = 4, .n_used = 2, .n_ff_exp = 256,
     .n_ff_shexp = 256},
};
#define N_SHAPES (int)(sizeof shapes / sizeof shapes[0])

static const struct {
    const char *name;
    uint32_t type, ftype; /* ggml type, llama_ftype for general.file_type */
} types[] = {
    {"f32", GGML_F32, 0},     {"f16", GGML_F16, 1},     {"bf16", GGML_BF16, 32}, {"q8_0", GGML_Q8_0, 7},
    {"q4_0", GGML_Q4_0, 2},   {"q4_1", GGML_Q4_1, 3},   {"q5_0", GGML_Q5_0, 8},  {"q5_1", GGML_Q5_1, 9},
    {"q4_k", GGML_Q4_K, 14},  {"q5_k", GGML_Q5_K, 16},  {"q6_k", GGML_Q6_K, 18},
    {"q4_k_m", GGML_Q4_K, 15}, /* a mix: mix_type */
};
#define FTYPE_Q4_K_M 15
#define N_TYPES (int)(sizeof types / sizeof types[0])

/* ---------------------------------------------------------------- builder */

typedef struct {
    gguf_writer *w;
    const shape *c;
    uint32_t qtype;
    int n_layer;             /* blocks written: the shape's, or --layers */
    int q4_k_m;              /* llama-quantize's Q4_K_M mix instead of qtype everywhere */
    int i_attn_v, n_attn_v;  /* the mix's counters: tensors seen so far, and in all (a */
    int i_ffn_down, n_ffn_down; /* first pass over the model counts them) */
    uint64_t seed;
    init_spec *specs; /* one per tensor, alive until the file is written */
    int n_specs, cap_specs;
    int n_tensors;
    uint64_t n_params, n_bytes;
    int mtp;                 /* --mtp: Qwen3.5's MTP block after the trunk */
    int failed;
} builder;

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

static void usage_lists(void) {
    fprintf(stderr, "shapes:");
    for (int i = 0; i < N_SHAPES; i++) fprintf(stderr, " %s", shapes[i].name);
    fprintf(stderr, "\ntypes:");
    for (int i = 0; i < N_TYPES; i++) fprintf(stderr, " %s", types[i].name);
    fprintf(stderr, "\n");
}

int cmd_synth(int argc, char **argv) {
    const char *shape_name = NULL, *type_name = NULL, *out = NULL, *mmproj = NULL;
    long seed = 1234, threads = 0, layers = 0, n_embd_text = 0;
    int quiet = 0, mtp = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--shape")) shape_name = v, i++;
        else if (!strcmp(a, "--mtp")) mtp = 1;
        else if (!strcmp(a, "--mmproj")) mmproj = v, i++;
        else if (!strcmp(a, "--n-embd")) { if (!cli_int(a, v, 1, 1 << 20, &n_embd_text)) return 1; i++; }
        else if (!strcmp(a, "--type")) type_name = v, i++;
        else if (!strcmp(a, "--out")) out = v, i++;
        else if (!strcmp(a, "--seed")) { if (!cli_int(a, v, 0, 0x7fffffffL, &seed)) return 1; i++; }
        else if (!strcmp(a, "--layers")) { if (!cli_int(a, v, 1, 1024, &layers)) return 1; i++; }
        else if (!strcmp(a, "-t")) { if (!cli_int(a, v, 0, 256, &threads)) return 1; i++; }
        else if (!strcmp(a, "-q")) quiet = 1;
        else { cli_error("synth: unknown option '%s'", a); return 1; }
    }
    const shape *c = NULL;
    for (int i = 0; shape_name && i < N_SHAPES; i++)
        if (!strcmp(shapes[i].name, shape_name)) c = &shapes[i];
    int ti = -1;
    for (int i = 0; type_name && i < N_TYPES; i++)
        if (!strcasecmp(types[i].name, type_name)) ti = i;
    if (mmproj && ti >= 0 && out) {
        if (types[ti].ftype == FTYPE_Q4_K_M) {
            cli_error("synth: a projector takes one type (f32, f16, bf16, q8_0), not the q4_k_m mix");
            return 1;
        }
        return synth_mmproj(mmproj, types[ti].type, types[ti].name, n_embd_text, seed, out, quiet);
    }
    if (!c || ti < 0 || !out) {
        cli_error("synth needs --shape SHAPE --type TYPE --out FILE%s", (shape_name && !c) || (type_name && ti < 0) ? " (unknown shape or type)" : "");
        usage_lists();
        return 1;
    }
    if (mtp && strcmp(c->arch, "qwen35") && strcmp(c->arch, "qwen35moe")) {
        cli_error("synth: --mtp is for Qwen3.5 shapes (%s is %s)", c->name, c->arch);
        return 1;
    }
    pool_set_threads((int)threads);
    const int full = c->pattern ? (int)strlen(c->pattern) : c->n_layer;
    builder b = {.w = gguf_writer_new(),
                 .c = c,
                 .n_layer = layers > 0 && layers < full ? (int)layers : full,
                 .qtype = types[ti].type,
                 .q4_k_m = types[ti].ftype == FTYPE_Q4_K_M,
                 .mtp = mtp,
                 .seed = (uint64_t)seed * 0x9e3779b97f4a7c15ULL};
    b.cap_specs = 4096;
    b.specs = calloc((size_t)b.cap_specs, sizeof *b.specs);
    if (!b.w || !b.specs) {
        cli_error("out of memory");
        gguf_writer_free(b.w);
        free(b.specs);
        return 1;
    }
    char name[160];
    if (b.n_layer < full)
        snprintf(name, sizeof name, "chatfs-synth-%s-%dL-%s%s", c->name, b.n_layer, types[ti].name, mtp ? "-mtp" : "");
    else
        snprintf(name, sizeof name, "chatfs-synth-%s-%s%s", c->name, types[ti].name, mtp ? "-mtp" : "");
    /* the Q4_K_M mix needs how many attn_v and ffn_down tensors there are: a first pass
     * describes the model to a writer that is thrown away, and counts them */
    for (int pass = b.q4_k_m ? 0 : 1; pass < 2; pass++) {
        if (pass == 1 && b.q4_k_m) {
            gguf_writer_free(b.w);
            b.w = gguf_writer_new();
            b.n_attn_v = b.i_attn_v, b.n_ffn_down = b.i_ffn_down;
            b.i_attn_v = b.i_ffn_down = b.n_specs = b.n_tensors = 0;
            b.n_params = b.n_bytes = 0;
            if (!b.w) {
                cli_error("out of memory");
                free(b.specs);
                return 1;
            }
        }
        gguf_w_str(b.w, "general.architecture", c->arch);
        gguf_w_str(b.w, "general.type", "model");
        gguf_w_str(b.w, "general.name", name);
        gguf_w_u32(b.w, "general.file_type", types[ti].ftype);
        gguf_w_u32(b.w, "general.quantization_version", 2);
        gguf_w_u32(b.w, "general.alignment", 32);
        if (!strcmp(c->arch, "qwen35") || !strcmp(c->arch, "qwen35moe")) build_qwen35(&b);
        else if (!strcmp(c->arch, "nemotron_h") || !strcmp(c->arch, "nemotron_h_moe")) build_nemotron_h(&b);
        else if (!strcmp(c->arch, "mamba2")) build_mamba2(&b);
        else if (!strcmp(c->arch, "mamba")) build_mamba(&b);
        else if (!strcmp(c->arch, "granitehybrid")) build_granitehybrid(&b);
        else if (!strcmp(c->arch, "lfm2") || !strcmp(c->arch, "lfm2moe")) build_lfm2(&b);
        else build_dense(&b, !strcmp(c->arch, "qwen3"));
    }
    char err[512];
    int rc = 0;
    if (b.failed) {
        cli_error("synth: could not describe %s", c->name);
        rc = 1;
    } else if (gguf_writer_save(b.w, out, err, sizeof err) != 0) {
        cli_error("%s", err);
        rc = 1;
    } else if (!quiet) {
        fprintf(stderr, "wrote %s: %s (%d of %d blocks) %s, %d tensors, %llu parameters, %.1f MB of tensor data\n",
                out, c->name, b.n_layer, full, types[ti].name, b.n_tensors, (unsigned long long)b.n_params,
                (double)b.n_bytes / 1e6);
    }
    gguf_writer_free(b.w);
    free(b.specs);
    return rc;
}
