/* model.h - a loaded model: hyper-parameters, blocks of layers, tokenizer, template.
 *
 * Every supported architecture is the same residual stack:
 *
 *     h = embedding_scale * token_embd[token]
 *     for each block:
 *         h += residual_scale * Mixer(RMSNorm(h, mixer_norm))       (if the block has a mixer)
 *         h += residual_scale * FFN(RMSNorm(h, ffn_norm))           (if the block has an FFN)
 *     logits = output · RMSNorm(h, output_norm) · (1 / logit_scale)
 *
 * An architecture file (arch_*.c) reads its metadata and tensors and says which
 * mixer and FFN each block has; model.c runs the stack. */
#ifndef CHATFS_MODEL_H
#define CHATFS_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/gguf/gguf.h"
#include "engine/kernels/kernels.h"
#include "engine/layers/layers.h"
#include "engine/layers/ops.h"
#include "engine/template/template.h"
#include "engine/tokenizer/tokenizer.h"

enum mixer_kind { MIX_NONE = 0, MIX_ATTN, MIX_GDN, MIX_MAMBA2, MIX_MAMBA1, MIX_SHORTCONV };

typedef struct {
    int mixer;                 /* enum mixer_kind */
    const float *mixer_norm;   /* [n_embd] */
    union {
        attn_layer attn;
        gdn_layer gdn;
        mamba2_layer m2;
        mamba1_layer m1;
        shortconv_layer sc;
    };
    const float *ffn_norm;     /* [n_embd]; NULL when the block has no FFN */
    ffn_layer ffn;
} block;

typedef struct model {
    gguf_file *gguf;
    char arch[32];
    char name[128];
    int n_vocab, n_embd, n_layer, n_ctx_train;
    float eps;
    float embedding_scale, residual_scale, logit_scale; /* 1 when the family has none */
    matrix tok_embd, output;     /* output aliases tok_embd when tied */
    int tied;
    const float *output_norm;
    block *blocks;

    /* sequence-state shape */
    int n_kv_slots;              /* attention layers */
    int *kv_dim;                 /* per slot: n_head_kv * head_dim (K and V each) */
    int n_rec_slots;             /* recurrent layers */
    rec_slot *rec;
    size_t rec_floats;           /* total recurrent floats per sequence */
    int trimmable;               /* 1 when every layer is attention (state can be cut back) */

    tokenizer *tok;
    chat_template tmpl;
    uint64_t n_params;

    /* vectors that had to be converted to floats (non-F32 1-D tensors) */
    void **owned;
    int n_owned, cap_owned;
} model;

/* Loads a GGUF model. NULL on error with one line in err ("m.gguf: ..."). */
model *model_load(const char *path, char *err, size_t errlen);
void model_free(model *m);

/* The pattern of mixers, one char per block: 'G' delta-net, 'M' Mamba-2, 'S' Mamba-1,
 * 'C' short conv, '*' attention, '-' FFN only. Writes at most n bytes. */
void model_pattern(const model *m, char *buf, size_t n);
/* Counts of tensors per ggml type, for `chatfs info`. */
int model_tensor_types(const model *m, uint32_t *types, uint64_t *counts, int max);

/* One sequence's part of a forward batch. */
typedef struct {
    struct seq_state *state;
    const int *tokens;
    int n_tokens;
    int logits;       /* 0: none, 1: last token's logits, 2: every token's */
    float *out;       /* n_vocab (logits=1) or n_tokens*n_vocab (logits=2) floats */
    /* optional: with 0 < capture < n_tokens, the recurrent blob (model->rec_floats
     * floats) as it stands after the first `capture` tokens is written to capture_rec
     * while the pass goes on: with the KV rows below that position, which the pass
     * leaves as they are, it is the state there (a checkpoint inside a prefill slice) */
    int capture;
    float *capture_rec;
} batch_seq;

/* Runs the model over the tokens of every sequence in the batch, advancing each
 * sequence's state. Returns 0, or -1 if a sequence would exceed its capacity
 * (nothing is changed then). The arena holds temporaries (reset at the end). */
int model_forward(const model *m, batch_seq *seqs, int n_seqs, arena *a);

/* Feeds n tokens to one sequence in chunks of at most `chunk` tokens (0: 512) and
 * writes the last token's logits to logits (may be NULL). Returns 0 or -1. */
int model_prefill(const model *m, struct seq_state *s, const int *tokens, int n, int chunk, float *logits, arena *a);

/* ---- used by arch_*.c to describe a model ---- */

typedef struct {
    model *m;
    char *err;
    size_t errlen;
    int failed;
    const char *file; /* base name for messages */
} loader;

/* Binds a 2-D weight named by printf(fmt, ...) with shape [n_in, n_out]. Missing
 * required tensors, wrong shapes and unsupported types fail the loader. Returns 1 if
 * bound. */
int ld_matrix(loader *L, matrix *w, int required, int64_t n_in, int64_t n_out, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* Binds a tensor of n elements as floats (any shape with that element count). */
const float *ld_vector(loader *L, int required, int64_t n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Checks that the tensor printf(fmt, ...) has shape [ne0, ne1] (1-D: [ne0, 1]). Missing
 * fails only when required. Returns 1 when present with that shape. */
int ld_shape(loader *L, int required, int64_t ne0, int64_t ne1, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Metadata with the architecture prefix: ld_u32(L, "embedding_length", ...) reads
 * "<arch>.embedding_length". */
uint32_t ld_u32(loader *L, const char *key, int required, uint32_t def);
float ld_f32(loader *L, const char *key, int required, float def);
int ld_bool(loader *L, const char *key, int def);
/* Per-layer value: a scalar key applies to every layer, an array key gives one per layer. */
int64_t ld_layer_i64(loader *L, const char *key, int layer, int64_t def);
int ld_fail(loader *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Binds token_embd.weight, the final norm (named output_norm_name) and output.weight
 * (tied to token_embd when absent). */
int ld_embeddings(loader *L, const char *output_norm_name);

/* Registers a recurrent layer's state: returns its slot index. */
int ld_rec_slot(loader *L, size_t conv_floats, size_t ssm_floats);
int ld_kv_slot(loader *L, int kv_dim);

/* ---- binders shared by the architectures (arch_common.c) ----
 * Each binds the tensors of one kind of layer of block i, checking every shape. */

/* Rope settings common to all families: rope.freq_base (default 10000), the linear
 * rope.scaling.* factor, rope.dimension_count (default head_dim) and the optional
 * rope_freqs.weight factors; kind is the family's rope kind. Other scaling types fail. */
int ld_rope(loader *L, attn_layer *at, int kind);
/* Attention of block i with the shape, rope and scale already set in *proto: attn_q/k/v
 * (or fused attn_qkv), attn_output, their optional biases, and attn_q_norm/attn_k_norm
 * when qk_norm. Registers the KV slot. */
int ld_attention(loader *L, block *b, int i, const attn_layer *proto, int qk_norm);
/* The Mamba-2 shape from <arch>.ssm.* into proto (checked). */
int ld_mamba2_shape(loader *L, mamba2_layer *proto);
/* The Mamba-2 mixer of block i with proto's shape; registers its recurrent state. */
int ld_mamba2(loader *L, block *b, int i, const mamba2_layer *proto);
/* FFN of block i (its norm is bound by the caller): ffn_up/ffn_down (and ffn_gate for
 * SwiGLU) of width n_ff, with optional biases. */
int ld_ffn(loader *L, block *b, int i, int kind, int n_ff);
/* Fails (naming the architecture) when <arch>.expert_count > 0: MoE is not supported. */
int ld_no_experts(loader *L);

typedef struct {
    const char *name;
    int (*load)(loader *L);
} arch_desc;

const arch_desc *arch_find(const char *name);

#endif
