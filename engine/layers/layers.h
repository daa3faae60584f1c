/* layers.h - the layer kinds hybrid models are built from, shared by every architecture.
 *
 * Each kind holds views of its weights (no copies) and its shape, and has one
 * forward function that processes a batch: N activation rows that belong to one or
 * more sequences ("segments"). Projections run once over all N rows (one pass over
 * the weights for the whole batch); the parts that carry state (attention over the
 * KV cache, convolutions, recurrences) run per segment on that segment's own state. */
#ifndef CHATFS_LAYERS_H
#define CHATFS_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/arena.h"
#include "engine/kernels/kernels.h"
#include "engine/layers/kv_type.h"

/* Where one recurrent layer keeps its state inside a sequence's recurrent blob. */
typedef struct {
    size_t conv_off, conv_floats;
    size_t ssm_off, ssm_floats;
} rec_slot;

/* One sequence's rows inside a batch, with the parts of its state the layers read and
 * write (lent by the sequence state, model/state.h). */
typedef struct {
    uint8_t *const *k, *const *v; /* per KV slot: the attention cache, [position][kv_dim] */
    kv_type k_type, v_type;       /* the caches' row formats (kv_type.h) */
    float *rec;                 /* the recurrent blob */
    const rec_slot *rec_slots;  /* where each recurrent layer's part of rec lies */
    int row0;    /* first activation row of this segment */
    int n;       /* rows (tokens) */
    int pos0;    /* position of the first token = tokens the state has already seen */
    /* rotary positions: row r turns by pos0 + r + pos_shift, or, when rope_pos is set, by
     * (time, height, width) = rope_pos[3r .. 3r+2] (an image's rows) */
    int pos_shift;
    const int *rope_pos;
    /* Captures: with n_capture > 0, every recurrent layer also writes its conv and ssm
     * state as they stand after rows capture, capture + 1, ..., capture + n_capture - 1
     * (each at least 1 and below n) into capture_rec[0], [1], ... (blobs laid out like
     * state->rec). A checkpoint inside the rows (one capture), or the states a speculative
     * step may roll back to (one after each drafted row), cost no pass of their own. */
    int capture, n_capture;
    float *const *capture_rec;
    int keep; /* its last `keep` rows give logits: the last layer's output is needed only there */
} segment;

static inline float *seg_conv(const segment *sg, int slot) { return sg->rec + sg->rec_slots[slot].conv_off; }
static inline float *seg_ssm(const segment *sg, int slot) { return sg->rec + sg->rec_slots[slot].ssm_off; }

/* Which capture holds the state after row t (0-based, so after t + 1 rows): its index, or
 * -1 when none does. */
static inline int seg_capture_after(const segment *sg, int t) {
    const int c = t + 1 - sg->capture;
    return sg->n_capture > 0 && c >= 0 && c < sg->n_capture ? c : -1;
}
/* Where capture c of the state part at `live` (a pointer into the recurrent blob) goes:
 * the same offset in its blob. */
static inline float *seg_capture_at(const segment *sg, int c, const float *live) {
    return sg->capture_rec[c] + (live - sg->rec);
}

/* conv_causal (ops.h) of every segment of a batch over its rows (in and out hold the
 * batch's rows from row 0) on its conv slot, in one pass of the pool per 16 segments. When
 * a segment captures, the window after each capture's rows goes to that capture first (it
 * must see the state before the rows move it). */
void segs_conv_causal(const segment *segs, int n_segs, int slot, const float *w, int C, int K, const float *in,
                      size_t in_stride, float *out, size_t out_stride);

enum rope_kind { ROPE_NONE = 0, ROPE_NORM = 1, ROPE_NEOX = 2 };

/* Multi-head attention with grouped KV heads, and the options the families differ in. */
typedef struct {
    matrix wq, wk, wv, wo;
    matrix wqkv;                    /* fused [q, k, v] projection, used instead of wq/wk/wv when set */
    const float *bq, *bk, *bv, *bo; /* optional biases */
    const float *bqkv;              /* optional bias of the fused projection */
    const float *q_norm, *k_norm;   /* optional per-head RMSNorm weights [head_dim] */
    int n_head, n_head_kv, head_dim;
    int gated;                      /* Qwen3.5: wq rows hold [q, gate] per head; out *= sigmoid(gate) */
    int rope;                       /* enum rope_kind */
    int n_rot;                      /* rotated dims per head (partial rope when < head_dim) */
    float rope_base, rope_freq_scale;
    const float *rope_factors;      /* optional [n_rot/2] divisors of theta (Llama-3) */
    /* Qwen3.5's interleaved multi-axis rope (IMROPE): pairs sector = i mod (sum of the
     * sections) turn by the row's height position when sector % 3 == 1 and sector <
     * 3 mrope[1], its width position when % 3 == 2 and < 3 mrope[2], its time position when
     * % 3 == 0 and < 3 mrope[0]; all zero: one position. A text row's three are equal,
     * and so is its rotation to the one-position rope. */
    int mrope[4];
    float kq_scale;
    float eps;                      /* for q/k norms */
    int kv_slot;                    /* which KV cache of the sequence state */
} attn_layer;

/* Gated DeltaNet (Qwen3.5 linear attention). */
typedef struct {
    matrix w_qkv, w_z, w_beta, w_alpha, w_out;
    /* Qwen3-Next's layouts instead: w_ba holds beta and alpha per key head j (the r = Hv/Hk
     * betas, then the r alphas, of value heads j*r .. j*r+r-1) in place of w_beta/w_alpha;
     * w_qkvz (older files) holds per key head [q, k, v (r heads), z (r heads)] in place of
     * w_qkv and w_z */
    matrix w_ba, w_qkvz;
    int grouped_heads;              /* value head h reads key head h / r (Qwen3-Next), not h mod Hk */
    const float *conv_w;            /* [conv_dim][K] */
    const float *dt_bias, *a;       /* [n_v_heads]; a = -exp(A_log) */
    const float *norm;              /* [d_v], shared by heads */
    int n_k_heads, n_v_heads, d_k, d_v, conv_k;
    float eps;
    int rec_slot;                   /* which recurrent slot of the sequence state */
} gdn_layer;

/* Mamba-2 mixer (Mamba2, Nemotron-H, Granite-4.0-H). */
typedef struct {
    matrix w_in, w_out;
    const float *conv_w, *conv_b;   /* [conv_dim][K], [conv_dim] (bias optional) */
    const float *dt_bias, *a, *d;   /* [n_head] */
    const float *norm;              /* [d_inner] as n_group groups */
    int d_inner, n_head, n_group, d_state, conv_k;
    float eps;
    int rec_slot;
} mamba2_layer;

/* Mamba-1 selective scan. */
typedef struct {
    matrix w_in, w_x, w_dt, w_out;
    const float *conv_w, *conv_b;   /* [d_inner][K], [d_inner] */
    const float *dt_bias;           /* [d_inner] */
    const float *a;                 /* [d_inner][d_state] */
    const float *d;                 /* [d_inner] */
    int d_inner, d_state, dt_rank, conv_k;
    int dt_b_c_rms;                 /* FalconMamba: RMS-normalise dt, B, C */
    float eps;
    int rec_slot;
} mamba1_layer;

/* LFM2 gated short convolution. */
typedef struct {
    matrix in_proj, out_proj;
    const float *conv_w;            /* [n_embd][L] */
    int n_embd, l_cache;
    int rec_slot;
} shortconv_layer;

enum ffn_kind { FFN_NONE = 0, FFN_SWIGLU, FFN_RELU2 };

typedef struct {
    int kind;                       /* enum ffn_kind */
    matrix gate, up, down;
    const float *b_gate, *b_up, *b_down; /* optional biases */
    int n_ff;
} ffn_layer;

/* How a mixture-of-experts router turns its logits into probabilities (llama.cpp's
 * llama_expert_gating_func_type, the numbers the GGUF key expert_gating_func holds). */
enum moe_gating { MOE_SOFTMAX = 1, MOE_SIGMOID = 2, MOE_SOFTMAX_WEIGHT = 3, MOE_SQRT_SOFTPLUS = 4 };

/* A mixture-of-experts FFN (llama.cpp's build_moe_ffn and the shared expert around it):
 *
 *   p   = gating(router x)                          (F32: the router is never quantized)
 *   sel = the n_used experts of highest p + sel_bias  (the bias only chooses)
 *   w   = p[sel], / max(sum, 2^-14) when norm_w, * w_scale
 *   moe = sum over slots j, in order:  w_j * down_e( act(gate_e xl, up_e xl) ),  e = sel_j
 *         (xl = latent_down x when there is one, and moe = latent_up moe after the sum)
 *   out = moe + shared(x) [* sigmoid(shared_gate x)]
 *
 * Experts are views into the mapped 3-D tensors (expert_matrix); with one token only the
 * chosen experts' rows are read, with many each chosen expert runs once over its tokens. */
typedef struct {
    matrix router;                  /* ffn_gate_inp [n_embd, n_expert] */
    const float *sel_bias;          /* exp_probs_b [n_expert], or NULL */
    int gating;                     /* enum moe_gating */
    int norm_w;                     /* normalise the chosen weights to sum 1 */
    float w_scale;                  /* then multiply them by this (1: none) */
    int n_expert, n_used, n_ff;
    int act;                        /* FFN_SWIGLU: silu(gate) * up, or silu(up) without gate; FFN_RELU2: relu(up)^2 */
    expert_matrix gate, up, down;   /* gate.m.data NULL: none */
    matrix latent_down, latent_up;  /* optional (Nemotron-3-Super): the experts work in n_latent dims */
    int n_latent;                   /* their input width: n_embd without latent projections */
    ffn_layer shared;               /* kind FFN_NONE: no shared expert */
    matrix shared_gate;             /* [n_embd] -> 1 (Qwen): the shared expert times sigmoid of it; data NULL: none */
} moe_layer;

/* Sizes of the recurrent state a kind keeps per sequence (floats). */
size_t gdn_conv_floats(const gdn_layer *l);
size_t gdn_ssm_floats(const gdn_layer *l);
size_t mamba2_conv_floats(const mamba2_layer *l);
size_t mamba2_ssm_floats(const mamba2_layer *l);
size_t mamba1_conv_floats(const mamba1_layer *l);
size_t mamba1_ssm_floats(const mamba1_layer *l);
size_t shortconv_conv_floats(const shortconv_layer *l);

/* Forward functions: x holds N rows of n_embd inputs (already normalised), out gets N
 * rows of n_embd outputs. Attention with `kept` set writes only each segment's last
 * `keep` rows, one after the other (its cache still takes every row). */
void attention_forward(const attn_layer *l, const segment *segs, int n_segs, int N, int n_embd, const float *x,
                       float *out, int kept, struct arena *a);
/* The cache rows alone: k and v of every row, normalised and rotated, into each segment's
 * cache at its positions, to the bits attention_forward stores (a layer whose output
 * nobody reads but whose cache later rows attend to: the MTP head's catch-up). */
void attention_store_kv(const attn_layer *l, const segment *segs, int n_segs, int N, const float *x,
                        struct arena *a);
void gdn_forward(const gdn_layer *l, const segment *segs, int n_segs, int N, int n_embd, const float *x, float *out,
                 struct arena *a);
void mamba2_forward(const mamba2_layer *l, const segment *segs, int n_segs, int N, int n_embd, const float *x,
                    float *out, struct arena *a);
void mamba1_forward(const mamba1_layer *l, const segment *segs, int n_segs, int N, int n_embd, const float *x,
                    float *out, struct arena *a);
void shortconv_forward(const shortconv_layer *l, const segment *segs, int n_segs, int N, const float *x, float *out,
                       struct arena *a);
void ffn_forward(const ffn_layer *l, int N, int n_embd, const float *x, float *out, struct arena *a);
/* The mixture-of-experts FFN over N rows of x (n_embd each, normalised) into out. */
void moe_forward(const moe_layer *l, int N, int n_embd, const float *x, float *out, struct arena *a);

#endif
