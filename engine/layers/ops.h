/* ops.h - the elementwise and normalisation primitives, computed the way llama.cpp's
 * CPU backend computes them (docs/engine-math.md §1): sums of squares in double, then one
 * float scale; softplus with its threshold at 20. */
#ifndef CHATFS_OPS_H
#define CHATFS_OPS_H

#include <math.h>
#include <stddef.h>

/* exp as llama.cpp's vector code computes it (the ARM optimized-routines polynomial,
 * max error about 1.5 ulp). Matching it bit for bit matters: activations are later
 * rounded to 8 bits for quantized weights, and a one-ulp difference can flip a
 * rounding and move the logits of a small model visibly. */
static inline float exp_vec(float x) {
    const float shift = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, shift);
    const float n = z - shift; /* round(x / ln 2) */
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    const float u = b * b;
    const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                         fmaf(0x1.ffffecp-1f, b, 1.0f));
    if (fabsf(n) > 192.0f) return n > 0 ? INFINITY : 0.0f;
    return ldexpf(j, (int)n);
}

static inline float silu(float x) { return x / (1.0f + expf(-x)); }
/* SiLU of n values the way llama.cpp's vector code does: groups of 16 through exp_vec,
 * the remainder through expf. */
void vec_silu(float *y, const float *x, int n);
/* The values at offsets o..o+n-1 of a vector of row_n values, to the bits vec_silu gives
 * them when it runs over the whole vector (those past its last group of 16 through expf) */
void vec_silu_span(float *y, const float *x, int n, int o, int row_n);
/* y = silu(x) * g, grouped likewise */
void vec_swiglu(float *y, const float *x, const float *g, int n);
/* ReLU^2 as llama.cpp chains it (ggml_relu, then ggml_sqr): x > 0 ? x : 0 (NaN gives 0),
 * squared. vec_relu2 does n values (y may alias x), branch-free: the signs of a layer's
 * values are a coin toss, and a branch per value mispredicted often enough to cost 1.3 %
 * of a one-thread Nemotron decode step. */
static inline float relu2(float x) {
    const float v = x > 0 ? x : 0.0f;
    return v * v;
}
void vec_relu2(float *y, const float *x, size_t n);
/* y = exp(x - max) for n values, returning the sum (in double, summed per group of 16) */
double vec_softmax_exp(float *y, const float *x, float max, int n);
static inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float softplus(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

/* y = x * 1/sqrt(mean(x^2) + eps) * w   (w may be NULL: no weight). y may alias x. */
void rmsnorm(float *y, const float *x, const float *w, int n, float eps);
/* rmsnorm of `count` vectors of n floats, vector k at x + k * stride (y alike), each to the
 * same bits as rmsnorm() */
void rmsnorm_many(float *y, const float *x, size_t stride, const float *w, int count, int n, float eps);
/* rmsnorm of each of `rows` rows of n floats (stride n) */
void rmsnorm_rows(float *y, const float *x, const float *w, int rows, int n, float eps);
/* y = x / max(||x||, eps) */
void l2norm(float *y, const float *x, int n, float eps);
/* y += s * x */
void add_scaled(float *y, const float *x, float s, size_t n);
float dot_f32(const float *a, const float *b, int n);
/* The dot product and y += v*x exactly as llama.cpp's AVX-512 build forms them: the
 * dot in blocks of 64 with four 16-lane FMA accumulators and a fixed reduction tree,
 * then the remainder as the compiler vectorised it: rounded products added one by one
 * for whole blocks of 8, fused multiply-adds for the last n % 8; the update as one fused multiply-add
 * per element. Used where llama.cpp uses ggml_vec_dot_f32/ggml_vec_mad_f32 (the
 * delta rule) so that our floats round the same way. */
float dot_ggml(const float *x, const float *y, int n);
void mad_ggml(float *y, const float *x, float v, int n);

/* The delta rule for one head and one token (Gated DeltaNet), row by row of the state
 * stored transposed, S^T as [dv][dk]: for each value row c
 *     S_c *= decay;  delta = (v[c] - dot_ggml(S_c, k)) * beta;
 *     S_c += k * delta (mad_ggml);  o[c] = dot_ggml(S_c, q) * scale
 * (llama.cpp decays all rows, then forms all deltas, then updates, then outputs; each row
 * only involves itself, so doing them row by row gives the same floats). */
void gdn_head_step(float *S, int dk, int dv, const float *q, const float *k, const float *v, float decay, float beta,
                   float scale, float *o);
/* One row of a Mamba-2 head's state for one token, as llama.cpp's ssm_scan forms it:
 * s[e] = fma(s[e], dA, B[e] * x_dt) (the product rounded, then one fused multiply-add);
 * returns s . C summed in four 16-lane fused multiply-add accumulators for whole blocks
 * of 64, combined (0+2) + (1+3) and by reduce16_ref, then fused multiply-adds for the rest. */
float ssm_scan_row(float *s, const float *B, const float *C, float dA, float x_dt, int n);
/* A Mamba-2 head's P rows (S: P rows of n): y[p] = ssm_scan_row(S + p n, B, C, dA, x[p] * dt, n),
 * the instruction set chosen once for the head instead of once a row */
void ssm_scan_head(float *S, const float *B, const float *C, float dA, const float *x, float dt, int P, int n,
                   float *y);
/* Channels [d0, d1) of a Mamba-1 layer's state for one token, as llama.cpp's ssm_scan forms
 * them: delta = softplus(dt[d]); for the channel's n state elements (S and A rows of n)
 * s = fma(s, expf(delta * a), B * (x[d] * delta)) with the product rounded; y[d] = the sum
 * of s * C by fused multiply-adds in element order. */
void ssm_scan1(float *S, const float *A, const float *B, const float *C, const float *dt, const float *x, float *y,
               int d0, int d1, int n);
/* s[i] = dot_ggml(K_i, q, hd) * scale for i < n, K_i at K + i*stride (attention scores). */
void attn_scores(float *s, const float *K, size_t stride, const float *q, int n, int hd, float scale);
/* The same scores summed as llama.cpp's tinyBLAS sums a half-precision K cache's rows
 * (hd a multiple of 16): lane c mod 16 by fused multiply-adds, then reduce16_ref. */
void attn_scores_lanes(float *s, const float *K, size_t stride, const float *q, int n, int hd, float scale);
/* o[c] = sum_i p[i] * V_i[c] for c < hd and i < n, V_i at V + i*stride, summed as llama.cpp
 * does: 16 partial sums (fused multiply-adds) by i mod 16, combined by reduce16_ref
 * (quant.h); in pieces, so that a block of the cache can serve several heads and tokens:
 * the partial sums are kept in acc, ATTN_ACC_FLOATS(hd) floats (column c, lane k at
 * acc[(c/16)*256 + k*16 + c%16]), zeroed before the first piece; each piece starts at a
 * multiple of 16 positions. Then attn_wsum_finish reduces each column's 16 partial sums
 * with reduce16_ref. */
#define ATTN_ACC_FLOATS(hd) ((size_t)(((hd) + 15) / 16) * 256)
void attn_wsum_acc(float *acc, const float *V, size_t stride, const float *p, int n, int hd);
void attn_wsum_finish(float *o, const float *acc, int hd);
/* The same for nq (query, scores) pairs over the same cache rows (the heads of a KV group,
 * the tokens of a run): s[h] gets q[h]'s scores, acc[h] takes p[h]'s weighted sum. Every
 * pair's result is that of the one-pair call, bit for bit; the kernels may load each K or
 * V row once for several pairs. */
void attn_scores_multi(float *const *s, const float *K, size_t stride, const float *const *q, int nq, int n, int hd,
                       float scale);
void attn_wsum_acc_multi(float *const *acc, const float *V, size_t stride, const float *const *p, int np, int n,
                         int hd);
/* One token of a causal depthwise convolution without bias: y[c] = sum_k w[c][k] * window,
 * window = the K-1 values in state[c] (oldest first) then u[c], summed oldest first with
 * fused multiply-adds; the state then shifts by one and takes u[c]. */
void conv_step(float *state, const float *w, int C, int K, const float *u, float *y);
/* The same for n tokens: rows in[t*in_stride .. +C) give out[t*out_stride .. +C). */
void conv_causal(float *state, const float *w, int C, int K, const float *in, size_t in_stride, float *out,
                 size_t out_stride, int n);
/* conv_causal of several independent sequences in one pass of the pool (a batch's decode
 * step: one split of the channels instead of one per sequence); all share w, C, K and
 * the strides. */
typedef struct {
    float *state;
    const float *in;
    float *out;
    int n;
} conv_seq;
void conv_causal_seqs(const conv_seq *seqs, int n_seqs, const float *w, int C, int K, size_t in_stride,
                      size_t out_stride);
/* The state conv_causal would leave after the first n rows of in, written to dst
 * (state itself untouched): per channel the last K-1 values of state then rows. */
void conv_state_after(float *dst, const float *state, int C, int K, const float *in, size_t in_stride, int n);

/* Rotary embedding of one head vector in place: pairs (x[2k], x[2k+1]) for ROPE_NORM,
 * (x[k], x[k + n_rot/2]) for ROPE_NEOX; dims >= n_rot untouched. cs holds cos/sin
 * per pair (rope_cache). */
void rope_apply(float *x, int kind, int n_rot, const float *cs);
/* cos/sin for position p: theta_k = p * base^(-2k/n_rot) / factor_k, computed by
 * incremental float multiplication like ggml. cs gets n_rot/2 (cos, sin) pairs. */
void rope_cache(float *cs, int p, int n_rot, float base, float freq_scale, const float *factors);
/* The same for IMROPE (layers.h attn_layer.mrope) at positions t, h, w: each pair takes
 * the angle of its sector's position, every angle advanced by the same repeated
 * multiplication (ggml_mrope_cache_init). */
void rope_cache_imrope(float *cs, int t, int h, int w, const int sections[4], int n_rot, float base,
                       float freq_scale);

#endif
