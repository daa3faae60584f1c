/* model.h - a loaded model: hyper-parameters, blocks of layers, tokenizer, template.
 *
 * Every supported architecture is the same residual stack:
 *
 *     h = embedding_scale * token_embd[token]
 *     for each block:
 *         h += residual_scale * Mixer(RMSNorm(h, mixer_norm))       (if the block has a mixer)
 *         h += residual_scale * FFN(RMSNorm(h, ffn_norm))           (if the block has an FFN)
 *     logits = output · RMSNorm(h, output_norm) · (1 / logit_scale) (+ output_bias)
 *
 * An architecture file (arch/arch_*.c) reads its metadata and tensors through the loader
 * (loader.h) and says which mixer and FFN each block has; model.c runs the stack. */
#ifndef CHATFS_MODEL_H
#define CHATFS_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/gguf/gguf.h"
#include "engine/kernels/kernels.h"
#include "engine/layers/kv_type.h"
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
    moe_layer moe;             /* the FFN is a mixture of experts when moe.n_expert > 0 */
} block;

/* Qwen3.5's multi-token prediction head ("MTP", "NextN"; docs/engine-math.md §12): one
 * more block after the trunk that guesses the token after next from a token and the
 * trunk's final hidden row before it. Speculative decoding drafts with it (model/mtp.h).
 *
 *   c   = eh_proj · [RMSNorm(embed(x), enorm) ; RMSNorm(h, hnorm)]
 *   c  += Attn(RMSNorm(c, attn_norm))      gated attention with its own KV cache
 *   c  += FFN(RMSNorm(c, ffn_norm))        the block's FFN, dense or MoE
 *   h'  = RMSNorm(c, head_norm)            the next draft row's h
 *   logits = head · h' */
typedef struct {
    block blk;                   /* the attention and the FFN, bound like a trunk block's */
    matrix eh_proj;              /* [2 n_embd -> n_embd] */
    const float *enorm, *hnorm;  /* [n_embd] */
    const float *head_norm;      /* nextn.shared_head_norm, else output_norm */
    matrix embed, head;          /* nextn.embed_tokens / shared_head_head, else token_embd / output */
    int draft_vocab;             /* draft rows score the first draft_vocab tokens only (mtp.h); n_vocab: all */
} mtp_head;

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
    const float *output_bias;    /* [n_vocab], added to the logits; NULL when none */
    block *blocks;

    /* sequence-state shape */
    int n_kv_slots;              /* attention layers */
    int *kv_dim;                 /* per slot: n_head_kv * head_dim (K and V each) */
    int *kv_head_dim;            /* per slot: head_dim */
    kv_type kv_k, kv_v;          /* the caches' row formats (model_set_kv_types; F32 at load) */
    int n_rec_slots;             /* recurrent layers */
    rec_slot *rec;
    size_t rec_floats;           /* total recurrent floats per sequence */
    int trimmable;               /* 1 when every layer is attention (state can be cut back) */

    /* the MTP head, when the file has one (NULL otherwise); mtp_on once model_enable_mtp
     * gave it its place in the sequence state: its KV cache (slot mtp->blk.attn.kv_slot)
     * and, at rec[mtp_h_off], the trunk's last hidden row (n_embd floats) */
    mtp_head *mtp;
    int mtp_on;
    size_t mtp_h_off;

    tokenizer *tok;
    chat_template *tmpl;         /* the file's chat template, compiled (ChatML when it has none);
                                    NULL when it does not compile: tmpl_error says why */
    char tmpl_error[256];
    uint64_t n_params;

    /* vectors that had to be converted to floats (non-F32 1-D tensors) */
    void **owned;
    int n_owned, cap_owned;
} model;

/* Frees a model (model_load, arch/arch.h) and everything it owns. */
void model_free(model *m);

/* One more attention cache slot of n_head_kv heads of head_dim. 0, or -1 out of memory. */
int model_add_kv_slot(model *m, int n_head_kv, int head_dim);
/* The formats the attention caches keep K and V rows in, chosen before any sequence
 * state of the model exists (states and checkpoints hold rows of one format: the types
 * are part of the model fingerprint). The quantized types store a head's slice in whole
 * blocks, so every head dimension must be a multiple of 32. 0, or -1 with the reason in err. */
int model_set_kv_types(model *m, kv_type k, kv_type v, char *err, size_t errlen);

/* The pattern of mixers, one char per block: 'G' delta-net, 'M' Mamba-2, 'S' Mamba-1,
 * 'C' short conv, '*' attention, '-' FFN only, 'E' mixture of experts only. Writes at
 * most n bytes. */
void model_pattern(const model *m, char *buf, size_t n);

/* How much of a model a step uses. Total: every tensor of the file. Active: what one step
 * of `tokens` independent tokens (one each of several sequences) reads - of each MoE
 * layer's expert tensors only the chosen experts: n_used / n_expert of them for one token,
 * for several the share the expected number of distinct experts of random routing takes,
 * 1 - (1 - n_used/n_expert)^tokens; of the token embeddings one row per token unless they
 * are the output head too; nothing of blocks that are not run (MTP). */
typedef struct {
    uint64_t params, params_active;
    uint64_t bytes, bytes_active;
    int moe_layers;        /* blocks whose FFN is a mixture of experts */
    int n_expert, n_used;  /* of the first of them (llama.cpp allows n_used per layer) */
    int n_shared;          /* shared experts per MoE layer: 0 or 1 */
} model_usage;
void model_usage_of(const model *m, int tokens, model_usage *u);
/* Counts of tensors per ggml type, for `chatfs info`. */
int model_tensor_types(const model *m, uint32_t *types, uint64_t *counts, int max);

/* One sequence's part of a forward batch. */
typedef struct {
    struct seq_state *state;
    const int *tokens;
    int n_tokens;
    int logits;       /* 0: none, 1: last token's logits, 2: every token's */
    float *out;       /* n_vocab (logits=1) or n_tokens*n_vocab (logits=2) floats */
    /* optional captures: with n_capture > 0 and 0 < capture, capture + n_capture <= n_tokens,
     * the recurrent blob (model->rec_floats floats) as it stands after the first capture,
     * capture + 1, ..., capture + n_capture - 1 tokens is written to capture_rec[0], [1], ...
     * while the pass goes on: with the KV rows below that position, which the pass leaves
     * as they are, each is the state there (a checkpoint inside a prefill slice; the states
     * a speculative step rolls back to) */
    int capture, n_capture;
    float *const *capture_rec;
    /* an image's rows instead of tokens: with embd set, row t is embd[t * n_embd ..] as it
     * is (a projector's output; tokens is not read), turned by the rotary positions
     * rope_pos[3t .. 3t+2] (time, height, width; layers.h segment), and the text after it
     * continues at position rope_next. Refused (-1) while the MTP head is on (mtp_on): its
     * catch-up embeds each row's token */
    const float *embd;
    const int *rope_pos;
    int rope_next;
} batch_seq;

/* The rotary positions of an image's nx x ny rows (row by row) when the text before it
 * ends at position p0: (time, height, width) = (p0, p0 + row, p0 + column), 3 ints a row
 * into rope_pos, as llama.cpp's M-RoPE lays them out; returns the position the text after
 * it takes, p0 + max(nx, ny) (batch_seq.rope_next). */
int model_image_positions(int p0, int nx, int ny, int *rope_pos);

/* A block's FFN over `rows` rows of normalised input x into y: the one place that says
 * which kind a block's FFN is, for the trunk and the MTP head alike. */
void block_ffn(const block *b, int rows, int n_embd, const float *x, float *y, arena *a);

/* Runs the model over the tokens of every sequence in the batch, advancing each
 * sequence's state. Returns 0, or -1 if a sequence would exceed its capacity
 * (nothing is changed then). The arena holds temporaries (reset at the end). */
int model_forward(const model *m, batch_seq *seqs, int n_seqs, arena *a);

/* Feeds n tokens to one sequence in chunks of at most `chunk` tokens (0: 512) and
 * writes the last token's logits to logits (may be NULL). Returns 0 or -1. */
int model_prefill(const model *m, struct seq_state *s, const int *tokens, int n, int chunk, float *logits, arena *a);

#endif
