/* simd.h - the layer math per instruction set.
 *
 * The float primitives of ops.h that the layers spend their time in - llama.cpp's dot
 * product and update (the delta rule), the attention scores and weighted sums, the causal
 * convolution, SiLU, ReLU^2 and softmax's exponentials - have vector versions for AVX2 and
 * AVX-512 (simd_avx2.c, simd_avx512.c, each built with its instruction set's flags and
 * -ffp-contract=off), with exactly the arithmetic of ops.c's scalar code. The scalar code
 * is the reference: it runs for every member a set leaves NULL, and everywhere with
 * CHATFS_ISA=scalar. Which set runs follows the kernel set (kernels_vector_bits), so
 * choosing the weight kernels chooses this too and tests can run both on every path.
 *
 * The pieces of scalar arithmetic the vector sets fall back on (a convolution's channels
 * one at a time, the end of a dot product) are written once, below: as inline functions
 * they compile into each set with its own flags. */
#ifndef CHATFS_SIMD_H
#define CHATFS_SIMD_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/layers/ops.h"

/* silu/swiglu/softmax_exp take n % 16 == 0 (the groups llama.cpp runs through its vector
 * exp; ops.c does the tail). */
typedef struct {
    float (*dot)(const float *x, const float *y, int n);           /* dot_ggml */
    void (*mad)(float *y, const float *x, float v, int n);         /* mad_ggml */
    void (*silu)(float *y, const float *x, int n);                 /* x / (1 + exp_vec(-x)) */
    void (*swiglu)(float *y, const float *x, const float *g, int n);
    double (*softmax_exp)(float *y, const float *x, float max, int n);
    void (*gdn_step)(float *S, int dk, int dv, const float *q, const float *k, const float *v, float decay,
                     float beta, float scale, float *o);
    void (*conv)(float *state, const float *w, int C, int K, const float *in, size_t in_stride, float *out,
                 size_t out_stride, int n);
    void (*scores)(float *s, const float *K, size_t stride, const float *q, int n, int hd, float scale);
    void (*wsum_acc)(float *acc, const float *V, size_t stride, const float *p, int n, int hd);
    /* attn_scores_multi / attn_wsum_acc_multi; NULL: ops.c calls scores / wsum_acc per pair */
    void (*scores_multi)(float *const *s, const float *K, size_t stride, const float *const *q, int nq, int n, int hd,
                         float scale);
    void (*wsum_multi)(float *const *acc, const float *V, size_t stride, const float *const *p, int np, int n,
                       int hd);
    /* ssm_scan_row (ops.h): one row of a Mamba-2 head's state for one token */
    float (*scan_row)(float *s, const float *B, const float *C, float dA, float x_dt, int n);
    /* ssm_scan1 (ops.h): channels of a Mamba-1 layer for one token */
    void (*scan1)(float *S, const float *A, const float *B, const float *C, const float *dt, const float *x, float *y,
                  int d0, int d1, int n);
    void (*relu2)(float *y, const float *x, size_t n); /* vec_relu2 */
    /* half <-> float rows (F16C; round to nearest even), exact like quant.h's scalar
     * conversions: an F16 attention cache's rows */
    void (*f16_to_f32)(float *y, const uint16_t *x, size_t n);
    void (*f32_to_f16)(uint16_t *y, const float *x, size_t n);
    void (*scores_lanes)(float *s, const float *K, size_t stride, const float *q, int n, int hd, float scale);
} layer_simd;

extern const layer_simd layer_simd_avx2, layer_simd_avx512;

/* the set that goes with the active kernel set (never NULL; members may be) */
const layer_simd *layer_simd_active(void);

/* ---- scalar arithmetic shared by the reference and the vector sets ---- */

/* The end of dot_ggml after its blocks of 64 (sum so far, i = the first element left), as
 * GCC vectorised llama.cpp's loop: rounded products added one by one for whole blocks of 8,
 * fused multiply-adds for the last n % 8. The products must stay unfused: the vector sets
 * are built with -ffp-contract=off, and ops.c has no FMA instructions to contract to. */
static inline float dot_ggml_tail(float sum, const float *x, const float *y, int i, int n) {
    const int unfused = i + ((n - i) & ~7);
    for (; i < unfused; i++) sum += x[i] * y[i];
    for (; i < n; i++) sum = fmaf(x[i], y[i], sum);
    return sum;
}

/* The end of ssm_scan_row after its blocks of 64 (sum so far, e = the first element
 * left): each state element fma(s, dA, B x_dt) with the product rounded, then added to the
 * sum by one more fused multiply-add. */
static inline float ssm_scan_tail(float sum, float *s, const float *B, const float *C, float dA, float x_dt, int e,
                                  int n) {
    for (; e < n; e++) {
        const float st = fmaf(s[e], dA, B[e] * x_dt);
        sum = fmaf(st, C[e], sum);
        s[e] = st;
    }
    return sum;
}

/* ssm_scan1 (ops.h), one channel after the other. The vector sets run it, compiled with
 * FMA (fmaf one instruction instead of a call into libm, where a Mamba-1 prompt spent 17 %
 * of its time), for what their forms of 16 or 8 channels side by side leave: state sizes
 * other than 16, the last channels. */
static inline void ssm_scan1_ref(float *S, const float *A, const float *B, const float *C, const float *dt,
                                 const float *x, float *y, int d0, int d1, int n) {
    for (int d = d0; d < d1; d++) {
        const float delta = softplus(dt[d]), x_dt = x[d] * delta;
        const float *a = A + (size_t)d * n;
        float *s = S + (size_t)d * n, sum = 0;
        for (int e = 0; e < n; e++) {
            const float st = fmaf(s[e], expf(delta * a[e]), B[e] * x_dt);
            sum = fmaf(st, C[e], sum);
            s[e] = st;
        }
        y[d] = sum;
    }
}

/* glibc's expf (sysdeps/ieee754/flt-32/e_expf.c) takes 2^(k/32) from this table: the bits
 * of 2^(i/32) less i << 47, so that adding k << 47 puts k / 32's whole part in the exponent
 * (__exp2f_data's tab, as read from Debian 12's libm.so.6). The vector sets' expf_libm_pd
 * (simd_avx2.c, simd_avx512.c) use it to give libm's bits. */
static const uint64_t expf_libm_table[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b,
    0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb,
    0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429,
    0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da, 0x3fefd0765b6e4540};
/* the rest of its main path: k = round(x N/ln2) by adding 1.5 * 2^52, the cubic in r */
#define EXPF_LIBM_INV_LN2_N 0x1.71547652b82fep+5
#define EXPF_LIBM_SHIFT 0x1.8p+52
#define EXPF_LIBM_C0 0x1.c6af84b912394p-20
#define EXPF_LIBM_C1 0x1.ebfce50fac4f3p-13
#define EXPF_LIBM_C2 0x1.62e42ff0c52d6p-6
/* a float's bits 20-30 above this: off that path (|x| >= 88 or so, infinities, NaNs) */
#define EXPF_LIBM_TOP 0x42a

/* conv_causal (ops.h) for channels [c0, C) of n tokens, one channel at a time: per channel
 * the K-1 state values (oldest first) then the input, times its K weights in one chain of
 * fused multiply-adds from 0; then the state moves down by one and takes the input. */
static inline void conv_channels_ref(float *state, const float *w, int c0, int C, int K, const float *in,
                                     size_t in_stride, float *out, size_t out_stride, int n) {
    for (int t = 0; t < n; t++) {
        const float *u = in + (size_t)t * in_stride;
        float *y = out + (size_t)t * out_stride;
        for (int ch = c0; ch < C; ch++) {
            float *st = state + (size_t)ch * (K - 1);
            const float *wc = w + (size_t)ch * K;
            float acc = 0;
            for (int k = 0; k < K - 1; k++) acc = fmaf(wc[k], st[k], acc);
            acc = fmaf(wc[K - 1], u[ch], acc);
            for (int k = 0; k < K - 2; k++) st[k] = st[k + 1];
            if (K > 1) st[K - 2] = u[ch];
            y[ch] = acc;
        }
    }
}

/* One token of the convolution for channels [c0, C) with the weights transposed to [K][C]
 * and rows[k] the k-th value of each channel's window: the same chain per channel. */
static inline void conv_row_ref(float *y, const float *wt, const float *const *rows, int c0, int C, int K) {
    for (int ch = c0; ch < C; ch++) {
        float acc = 0;
        for (int k = 0; k < K; k++) acc = fmaf(wt[(size_t)k * C + ch], rows[k][ch], acc);
        y[ch] = acc;
    }
}

/* The convolution over n tokens (2 <= K <= 32) with the weights transposed to [K][C] and
 * the K-1 state columns to rows, so that each token is one call of row(), which a vector
 * set writes as K vector fused multiply-adds over the channels (conv_row_ref's chain per
 * channel); then the new state is the last K-1 inputs. Moves data only: the arithmetic is
 * row()'s. */
void conv_transposed(float *state, const float *w, int C, int K, const float *in, size_t in_stride, float *out,
                     size_t out_stride, int n,
                     void (*row)(float *y, const float *wt, const float *const *rows, int C, int K));

#endif
