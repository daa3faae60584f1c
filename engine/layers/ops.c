/* ops.c - primitives of ops.h. */
#include "engine/layers/ops.h"

#include "engine/base/threadpool.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/quant.h"
#include "engine/layers/layers.h"
#include "engine/layers/simd.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    float *y;
    const float *x, *w;
    int rows, n;
    float eps;
} rmsnorm_job;

/* the sums of squares of K vectors at once (K a constant: each chain stays in a register) */
static inline void sums_of_squares(const float *const *v, int n, double *sum, const int K) {
    for (int k = 0; k < K; k++) sum[k] = 0;
    for (int i = 0; i < n; i++)
#pragma GCC unroll 8
        for (int k = 0; k < K; k++) sum[k] += (double)(v[k][i] * v[k][i]);
}

/* llama.cpp's RMSNorm: the sum of squares in double, element after element, its mean as a
 * float, then x * 1/sqrt(mean + eps) (* w). That sum is one chain of dependent double
 * additions (the order kept exactly), so one vector takes the adder's latency per element;
 * several vectors' chains are independent, and running up to 8 side by side gives each the
 * same order and bits in about the time of one. */
void rmsnorm_many(float *y, const float *x, size_t stride, const float *w, int count, int n, float eps) {
    for (int k0 = 0; k0 < count; k0 += 8) {
        const int c = count - k0 < 8 ? count - k0 : 8, K = c > 4 ? 8 : c > 2 ? 4 : c;
        const float *v[8];
        double sum[8];
        for (int k = 0; k < K; k++) v[k] = x + (size_t)(k0 + (k < c ? k : c - 1)) * stride; /* padding: repeats */
        switch (K) {
        case 8: sums_of_squares(v, n, sum, 8); break;
        case 4: sums_of_squares(v, n, sum, 4); break;
        case 2: sums_of_squares(v, n, sum, 2); break;
        default: sums_of_squares(v, n, sum, 1); break;
        }
        for (int k = 0; k < c; k++) {
            const float mean = (float)(sum[k] / n), scale = 1.0f / sqrtf(mean + eps);
            const float *xk = v[k];
            float *yk = y + (size_t)(k0 + k) * stride;
            if (w)
                for (int i = 0; i < n; i++) yk[i] = (xk[i] * scale) * w[i];
            else
                for (int i = 0; i < n; i++) yk[i] = xk[i] * scale;
        }
    }
}

void rmsnorm(float *y, const float *x, const float *w, int n, float eps) { rmsnorm_many(y, x, (size_t)n, w, 1, n, eps); }

static void rmsnorm_some(void *arg, int ith, int nth) {
    const rmsnorm_job *j = arg;
    long r0, r1;
    pool_split(j->rows, ith, nth, 1, &r0, &r1);
    if (r1 > r0)
        rmsnorm_many(j->y + (size_t)r0 * j->n, j->x + (size_t)r0 * j->n, (size_t)j->n, j->w, (int)(r1 - r0), j->n,
                     j->eps);
}

/* rows are independent: a prompt's rows split over the pool (a few rows are not worth a job) */
void rmsnorm_rows(float *y, const float *x, const float *w, int rows, int n, float eps) {
    rmsnorm_job j = {y, x, w, rows, n, eps};
    pool_run_rows(rmsnorm_some, &j, rows);
}

void l2norm(float *y, const float *x, int n, float eps) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float scale = 1.0f / fmaxf(sqrtf((float)sum), eps);
    for (int i = 0; i < n; i++) y[i] = x[i] * scale;
}

void add_scaled(float *y, const float *x, float s, size_t n) {
    if (s == 1.0f)
        for (size_t i = 0; i < n; i++) y[i] += x[i];
    else
        for (size_t i = 0; i < n; i++) y[i] += s * x[i];
}

float dot_f32(const float *a, const float *b, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* the vector set of the active kernel set's width (simd.h); the scalar set leaves every
 * member NULL, so the reference code below runs */
const layer_simd *layer_simd_active(void) {
    static const layer_simd scalar;
    switch (kernels_vector_bits()) {
    case 512: return &layer_simd_avx512;
    case 256: return &layer_simd_avx2;
    default: return &scalar;
    }
}

/* llama.cpp's AVX-512 build (the reference) handles 16 floats at a time */
#define VEC_GROUP 16

static inline float silu_vec(float x) { return x / (1.0f + exp_vec(0.0f - x)); }

/* each value's result depends only on whether it falls in a group of 16 of the whole
 * vector: the vector form (exp_vec, whatever the kernel's own grouping) or the remainder */
void vec_silu_span(float *y, const float *x, int n, int o, int row_n) {
    int grouped = row_n - row_n % VEC_GROUP - o;
    grouped = grouped < 0 ? 0 : grouped > n ? n : grouped;
    const int whole = grouped - grouped % VEC_GROUP;
    int i = 0;
    const layer_simd *k = layer_simd_active();
    if (k->silu && whole) k->silu(y, x, whole), i = whole;
    for (; i < grouped; i++) y[i] = silu_vec(x[i]);
    for (; i < n; i++) y[i] = silu(x[i]);
}

void vec_silu(float *y, const float *x, int n) { vec_silu_span(y, x, n, 0, n); }

void vec_swiglu(float *y, const float *x, const float *g, int n) {
    const int full = n - n % VEC_GROUP;
    int i = 0;
    const layer_simd *k = layer_simd_active();
    if (k->swiglu && full) k->swiglu(y, x, g, full), i = full;
    for (; i < full; i++) y[i] = silu_vec(x[i]) * g[i];
    for (; i < n; i++) y[i] = silu(x[i]) * g[i];
}

void vec_relu2(float *y, const float *x, size_t n) {
    const layer_simd *k = layer_simd_active();
    if (k->relu2) {
        k->relu2(y, x, n);
        return;
    }
    for (size_t i = 0; i < n; i++) y[i] = relu2(x[i]);
}

double vec_softmax_exp(float *y, const float *x, float max, int n) {
    double sum = 0;
    int i = 0;
    const layer_simd *k = layer_simd_active();
    if (k->softmax_exp && n >= VEC_GROUP) {
        i = n - n % VEC_GROUP;
        sum = k->softmax_exp(y, x, max, i);
    }
    for (; i + VEC_GROUP <= n; i += VEC_GROUP) {
        for (int j = 0; j < VEC_GROUP; j++) y[i + j] = exp_vec(x[i + j] - max);
        sum += (double)reduce16_ref(y + i);
    }
    for (; i < n; i++) {
        y[i] = expf(x[i] - max);
        sum += (double)y[i];
    }
    return sum;
}

static float dot_ggml_ref(const float *x, const float *y, int n) {
    const int np = n & ~63;
    float acc[4][16] = {{0}};
    for (int i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++) acc[j][l] = fmaf(x[i + 16 * j + l], y[i + 16 * j + l], acc[j][l]);
    for (int l = 0; l < 16; l++) {
        acc[0][l] += acc[2][l];
        acc[1][l] += acc[3][l];
    }
    for (int l = 0; l < 16; l++) acc[0][l] += acc[1][l];
    return dot_ggml_tail(reduce16_ref(acc[0]), x, y, np, n);
}

float dot_ggml(const float *x, const float *y, int n) {
    const layer_simd *k = layer_simd_active();
    return k->dot ? k->dot(x, y, n) : dot_ggml_ref(x, y, n);
}

void mad_ggml(float *y, const float *x, float v, int n) {
    const layer_simd *k = layer_simd_active();
    if (k->mad) {
        k->mad(y, x, v, n);
        return;
    }
    for (int i = 0; i < n; i++) y[i] = fmaf(x[i], v, y[i]);
}

void gdn_head_step(float *S, int dk, int dv, const float *q, const float *k, const float *v, float decay, float beta,
                   float scale, float *o) {
    const layer_simd *ko = layer_simd_active();
    if (ko->gdn_step) {
        ko->gdn_step(S, dk, dv, q, k, v, decay, beta, scale, o);
        return;
    }
    for (int c = 0; c < dv; c++) {
        float *s = S + (size_t)c * dk;
        for (int i = 0; i < dk; i++) s[i] *= decay;
        const float delta = (v[c] - dot_ggml_ref(s, k, dk)) * beta;
        for (int i = 0; i < dk; i++) s[i] = fmaf(k[i], delta, s[i]);
        o[c] = dot_ggml_ref(s, q, dk) * scale;
    }
}

void ssm_scan1(float *S, const float *A, const float *B, const float *C, const float *dt, const float *x, float *y,
               int d0, int d1, int n) {
    const layer_simd *ko = layer_simd_active();
    if (ko->scan1) ko->scan1(S, A, B, C, dt, x, y, d0, d1, n);
    else ssm_scan1_ref(S, A, B, C, dt, x, y, d0, d1, n);
}

static float ssm_scan_row_ref(float *s, const float *B, const float *C, float dA, float x_dt, int n) {
    const int np = n & ~63;
    float sum = 0;
    if (np) {
        float acc[4][16] = {{0}};
        for (int i = 0; i < np; i += 64)
            for (int j = 0; j < 4; j++)
                for (int k = 0; k < 16; k++) {
                    const int e = i + 16 * j + k;
                    const float st = fmaf(s[e], dA, B[e] * x_dt);
                    acc[j][k] = fmaf(st, C[e], acc[j][k]);
                    s[e] = st;
                }
        for (int k = 0; k < 16; k++) {
            acc[0][k] += acc[2][k];
            acc[1][k] += acc[3][k];
        }
        for (int k = 0; k < 16; k++) acc[0][k] += acc[1][k];
        sum = reduce16_ref(acc[0]);
    }
    return ssm_scan_tail(sum, s, B, C, dA, x_dt, np, n);
}

typedef float (*scan_row_fn)(float *s, const float *B, const float *C, float dA, float x_dt, int n);

/* the active set's ssm_scan_row, or the reference */
static scan_row_fn scan_row_active(void) {
    const layer_simd *ko = layer_simd_active();
    return ko->scan_row ? ko->scan_row : ssm_scan_row_ref;
}

float ssm_scan_row(float *s, const float *B, const float *C, float dA, float x_dt, int n) {
    return scan_row_active()(s, B, C, dA, x_dt, n);
}

void ssm_scan_head(float *S, const float *B, const float *C, float dA, const float *x, float dt, int P, int n,
                   float *y) {
    const scan_row_fn row = scan_row_active();
    for (int p = 0; p < P; p++) y[p] = row(S + (size_t)p * n, B, C, dA, x[p] * dt, n);
}

void attn_scores(float *s, const float *K, size_t stride, const float *q, int n, int hd, float scale) {
    const layer_simd *ko = layer_simd_active();
    if (ko->scores) {
        ko->scores(s, K, stride, q, n, hd, scale);
        return;
    }
    for (int i = 0; i < n; i++) s[i] = dot_ggml(K + (size_t)i * stride, q, hd) * scale;
}

void attn_scores_lanes(float *s, const float *K, size_t stride, const float *q, int n, int hd, float scale) {
    const layer_simd *ko = layer_simd_active();
    if (ko->scores_lanes) {
        ko->scores_lanes(s, K, stride, q, n, hd, scale);
        return;
    }
    for (int i = 0; i < n; i++) {
        const float *k = K + (size_t)i * stride;
        float lane[16] = {0};
        for (int c = 0; c < hd; c++) lane[c % 16] = fmaf(k[c], q[c], lane[c % 16]);
        s[i] = reduce16_ref(lane) * scale;
    }
}

void attn_wsum_acc(float *acc, const float *V, size_t stride, const float *p, int n, int hd) {
    const layer_simd *ko = layer_simd_active();
    if (ko->wsum_acc && hd % 8 == 0) {
        ko->wsum_acc(acc, V, stride, p, n, hd);
        return;
    }
    for (int c = 0; c < hd; c++) {
        float *a = acc + (size_t)(c / 16) * 256 + c % 16;
        for (int i = 0; i < n; i++) a[(i % 16) * 16] = fmaf(V[(size_t)i * stride + c], p[i], a[(i % 16) * 16]);
    }
}

void attn_scores_multi(float *const *s, const float *K, size_t stride, const float *const *q, int nq, int n, int hd,
                       float scale) {
    const layer_simd *ko = layer_simd_active();
    if (ko->scores_multi) {
        ko->scores_multi(s, K, stride, q, nq, n, hd, scale);
        return;
    }
    for (int h = 0; h < nq; h++) attn_scores(s[h], K, stride, q[h], n, hd, scale);
}

void attn_wsum_acc_multi(float *const *acc, const float *V, size_t stride, const float *const *p, int np, int n,
                         int hd) {
    const layer_simd *ko = layer_simd_active();
    if (ko->wsum_multi && hd % 8 == 0) {
        ko->wsum_multi(acc, V, stride, p, np, n, hd);
        return;
    }
    for (int h = 0; h < np; h++) attn_wsum_acc(acc[h], V, stride, p[h], n, hd);
}

/* reduce16_ref of each column, for 16 columns at once: lane k of the block's columns is
 * the 16 floats at 16k, so the tree's adds run down the block, the same adds per column
 * (the compiler makes them vector adds; ATTN_ACC_FLOATS keeps whole blocks) */
void attn_wsum_finish(float *o, const float *acc, int hd) {
    for (int c0 = 0; c0 < hd; c0 += 16) {
        const float *v = acc + (size_t)(c0 / 16) * 256;
        float a[8][16], b[4][16];
        for (int i = 0; i < 8; i++)
            for (int j = 0; j < 16; j++) a[i][j] = v[16 * i + j] + v[16 * (i + 8) + j];
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 16; j++) b[i][j] = a[i][j] + a[i + 4][j];
        float r[16];
        for (int j = 0; j < 16; j++) r[j] = (b[0][j] + b[2][j]) + (b[1][j] + b[3][j]);
        memcpy(o + c0, r, sizeof(float) * (size_t)(hd - c0 < 16 ? hd - c0 : 16));
    }
}

/* channels [c0, c1) of conv_causal */
static void conv_channels(float *state, const float *w, int c0, int c1, int K, const float *in, size_t in_stride,
                          float *out, size_t out_stride, int n) {
    const layer_simd *ko = layer_simd_active();
    state += (size_t)c0 * (K - 1), w += (size_t)c0 * K, in += c0, out += c0;
    const int C = c1 - c0;
    if (ko->conv)
        ko->conv(state, w, C, K, in, in_stride, out, out_stride, n);
    else
        conv_channels_ref(state, w, 0, C, K, in, in_stride, out, out_stride, n);
}

void conv_transposed(float *state, const float *w, int C, int K, const float *in, size_t in_stride, float *out,
                     size_t out_stride, int n,
                     void (*row)(float *y, const float *wt, const float *const *rows, int C, int K)) {
    float *wt = malloc(sizeof(float) * (size_t)C * (size_t)(2 * K - 1));
    if (!wt) abort();
    float *hist = wt + (size_t)K * C; /* the K-1 state values per channel as rows, oldest first */
    for (int ch = 0; ch < C; ch++) {
        for (int k = 0; k < K; k++) wt[(size_t)k * C + ch] = w[(size_t)ch * K + k];
        for (int k = 0; k < K - 1; k++) hist[(size_t)k * C + ch] = state[(size_t)ch * (K - 1) + k];
    }
    const float *rows[32];
    for (int t = 0; t < n; t++) {
        for (int k = 0; k < K; k++) { /* window position t+k of [state rows | inputs] */
            const int p = t + k;
            rows[k] = p < K - 1 ? hist + (size_t)p * C : in + (size_t)(p - (K - 1)) * in_stride;
        }
        row(out + (size_t)t * out_stride, wt, rows, C, K);
    }
    for (int ch = 0; ch < C; ch++) /* new state: the last K-1 inputs */
        for (int k = 0; k < K - 1; k++) {
            const int p = n + k;
            state[(size_t)ch * (K - 1) + k] =
                p < K - 1 ? hist[(size_t)p * C + ch] : in[(size_t)(p - (K - 1)) * in_stride + ch];
        }
    free(wt);
}

typedef struct {
    const conv_seq *seqs;
    int n_seqs, C, K;
    const float *w;
    size_t in_stride, out_stride;
} conv_job;

static void conv_share(void *arg, int ith, int nth) {
    const conv_job *j = arg;
    long c0, c1;
    pool_split(j->C, ith, nth, 16, &c0, &c1);
    if (c0 < c1)
        for (int i = 0; i < j->n_seqs; i++) {
            const conv_seq *q = &j->seqs[i];
            conv_channels(q->state, j->w, (int)c0, (int)c1, j->K, q->in, j->in_stride, q->out, j->out_stride, q->n);
        }
}

/* Channels are independent, so wide convolutions split them over the pool: in a decode
 * step this is otherwise the longest stretch the other threads wait through. */
void conv_causal_seqs(const conv_seq *seqs, int n_seqs, const float *w, int C, int K, size_t in_stride,
                      size_t out_stride) {
    conv_job j = {seqs, n_seqs, C, K, w, in_stride, out_stride};
    if (C >= 2048 && pool_threads() > 1)
        pool_run(conv_share, &j);
    else
        conv_share(&j, 0, 1);
}

void conv_causal(float *state, const float *w, int C, int K, const float *in, size_t in_stride, float *out,
                 size_t out_stride, int n) {
    const conv_seq one = {state, in, out, n};
    conv_causal_seqs(&one, 1, w, C, K, in_stride, out_stride);
}

void segs_conv_causal(const segment *segs, int n_segs, int slot, const float *w, int C, int K, const float *in,
                      size_t in_stride, float *out, size_t out_stride) {
    for (int s0 = 0; s0 < n_segs; s0 += 16) {
        conv_seq q[16];
        const int n = n_segs - s0 < 16 ? n_segs - s0 : 16;
        for (int i = 0; i < n; i++) {
            const segment *sg = &segs[s0 + i];
            float *state = seg_conv(sg, slot);
            const float *rows = in + (size_t)sg->row0 * in_stride;
            for (int c = 0; c < sg->n_capture; c++)
                conv_state_after(seg_capture_at(sg, c, state), state, C, K, rows, in_stride, sg->capture + c);
            q[i] = (conv_seq){state, rows, out + (size_t)sg->row0 * out_stride, sg->n};
        }
        conv_causal_seqs(q, n, w, C, K, in_stride, out_stride);
    }
}

void conv_state_after(float *dst, const float *state, int C, int K, const float *in, size_t in_stride, int n) {
    const int w = K - 1; /* values each channel keeps */
    for (int ch = 0; ch < C; ch++)
        for (int k = 0; k < w; k++) {
            const int i = n + k; /* index in (state values, then rows): the window ends at n + w */
            dst[(size_t)ch * w + k] = i < w ? state[(size_t)ch * w + i] : in[(size_t)(i - w) * in_stride + ch];
        }
}

void conv_step(float *state, const float *w, int C, int K, const float *u, float *y) {
    conv_causal(state, w, C, K, u, 0, y, 0, 1);
}

void rope_cache(float *cs, int p, int n_rot, float base, float freq_scale, const float *factors) {
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    float theta = (float)p;
    for (int k = 0; k < n_rot / 2; k++) {
        float t = factors ? theta / factors[k] : theta;
        t = freq_scale * t;
        cs[2 * k] = cosf(t);
        cs[2 * k + 1] = sinf(t);
        theta *= theta_scale;
    }
}

void rope_cache_imrope(float *cs, int t, int h, int w, const int sections[4], int n_rot, float base,
                       float freq_scale) {
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    const int dims = sections[0] + sections[1] + sections[2] + sections[3];
    float tt = (float)t, th = (float)h, tw = (float)w, te = 0.0f;
    for (int k = 0; k < n_rot / 2; k++) {
        const int sector = dims > 0 ? k % dims : 0;
        float theta = te;
        if (sector % 3 == 1 && sector < 3 * sections[1]) theta = th;
        else if (sector % 3 == 2 && sector < 3 * sections[2]) theta = tw;
        else if (sector % 3 == 0 && sector < 3 * sections[0]) theta = tt;
        theta = freq_scale * theta;
        cs[2 * k] = cosf(theta);
        cs[2 * k + 1] = sinf(theta);
        tt *= theta_scale, th *= theta_scale, tw *= theta_scale, te *= theta_scale;
    }
}

void rope_apply(float *x, int kind, int n_rot, const float *cs) {
    const int half = n_rot / 2;
    for (int k = 0; k < half; k++) {
        const float c = cs[2 * k], s = cs[2 * k + 1];
        float *a, *b;
        if (kind == 1) { /* ROPE_NORM: adjacent pairs */
            a = &x[2 * k];
            b = &x[2 * k + 1];
        } else {         /* ROPE_NEOX: halves */
            a = &x[k];
            b = &x[k + half];
        }
        const float x0 = *a, x1 = *b;
        /* the contraction GCC makes of x0*c - x1*s and x0*s + x1*c in llama.cpp */
        *a = fmaf(x0, c, -(x1 * s));
        *b = fmaf(x0, s, x1 * c);
    }
}
