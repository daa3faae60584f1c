/* mamba1.c - the Mamba-1 selective scan mixer (docs/engine-math.md §5; llama.cpp
 * src/models/mamba-base.cpp build_mamba_layer).
 *
 *   [x, z]        = W_in u                      (d_inner each)
 *   x             = silu(causal_conv(x) + conv_b)
 *   [dtr, B, C]   = W_x x                       (dt_rank, N, N)
 *                   (FalconMamba: dtr, B and C RMS-normalised without weights)
 *   dt            = W_dt dtr + dt_bias          (d_inner)
 *   per channel d, per token:
 *       Δ       = softplus(dt_d)
 *       S_d[n]  = S_d[n] exp(Δ A_d[n]) + B[n] x_d Δ
 *       y_d     = Σ_n S_d[n] C[n]
 *   y   = (y + D x) * silu(z)
 *   out = W_out y
 *
 * State per sequence: conv [d_inner][K-1], ssm [d_inner][N] (N fastest). As in
 * llama.cpp's ssm_scan each state element is fma(S, exp(Δ A), B·xΔ) and the sum over N
 * is a chain of fused multiply-adds (ssm_scan1, ops.h; its vector forms run 16 or 8
 * channels side by side and compute the exponentials as libm does, simd_avx*.c). */
#include <math.h>
#include <string.h>

#include "engine/layers/layers.h"
#include "engine/layers/ops.h"
#include "engine/base/threadpool.h"

size_t mamba1_conv_floats(const mamba1_layer *l) { return (size_t)(l->conv_k - 1) * (size_t)l->d_inner; }
size_t mamba1_ssm_floats(const mamba1_layer *l) { return (size_t)l->d_inner * (size_t)l->d_state; }

typedef struct {
    const mamba1_layer *l;
    const segment *seg;
    const float *X;    /* conv outputs, rows of d_inner */
    const float *XDB;  /* rows of dt_rank + 2N: (dtr,) B, C */
    const float *DT;   /* rows of d_inner */
    float *Y;          /* rows of d_inner */
    float *S;          /* the segment's ssm state (its captures: seg->capture_rec) */
} scan_job;

static void scan_channels(void *arg, int ith, int nth) {
    const scan_job *j = arg;
    const mamba1_layer *l = j->l;
    const int D = l->d_inner, N = l->d_state, xdb = l->dt_rank + 2 * N;
    long c0, c1;
    pool_split(D, ith, nth, 16, &c0, &c1);
    for (int t = 0; t < j->seg->n; t++) {
        const int row = j->seg->row0 + t;
        const float *x = j->X + (size_t)row * D, *dt = j->DT + (size_t)row * D;
        const float *B = j->XDB + (size_t)row * xdb + l->dt_rank, *C = B + N;
        float *y = j->Y + (size_t)row * D;
        ssm_scan1(j->S, l->a, B, C, dt, x, y, (int)c0, (int)c1, N);
        const int cap = seg_capture_after(j->seg, t);
        if (cap >= 0)
            memcpy(seg_capture_at(j->seg, cap, j->S + c0 * N), j->S + c0 * N, sizeof(float) * (size_t)(c1 - c0) * N);
    }
}

void mamba1_forward(const mamba1_layer *l, const segment *segs, int n_segs, int N, int n_embd, const float *x,
                    float *out, arena *a) {
    const int D = l->d_inner, xdb = l->dt_rank + 2 * l->d_state;
    float *XZ = arena_floats(a, (size_t)N * 2 * D);
    float *X = arena_floats(a, (size_t)N * D);
    float *XDB = arena_floats(a, (size_t)N * xdb);
    float *DTR = arena_floats(a, (size_t)N * l->dt_rank);
    float *DT = arena_floats(a, (size_t)N * D);
    float *Y = arena_floats(a, (size_t)N * D);
    matmul(&l->w_in, x, N, XZ);

    segs_conv_causal(segs, n_segs, l->rec_slot, l->conv_w, D, l->conv_k, XZ, 2 * D, X, D);
    for (int r = 0; r < N; r++) {
        float *xr = X + (size_t)r * D;
        for (int c = 0; c < D; c++) xr[c] += l->conv_b[c];
        vec_silu(xr, xr, D);
    }

    matmul(&l->w_x, X, N, XDB);
    for (int r = 0; r < N; r++) {
        float *row = XDB + (size_t)r * xdb;
        if (l->dt_b_c_rms) {
            rmsnorm(row, row, NULL, l->dt_rank, l->eps);
            rmsnorm(row + l->dt_rank, row + l->dt_rank, NULL, l->d_state, l->eps);
            rmsnorm(row + l->dt_rank + l->d_state, row + l->dt_rank + l->d_state, NULL, l->d_state, l->eps);
        }
        memcpy(DTR + (size_t)r * l->dt_rank, row, (size_t)l->dt_rank * sizeof(float));
    }
    matmul(&l->w_dt, DTR, N, DT);
    for (int r = 0; r < N; r++)
        for (int c = 0; c < D; c++) DT[(size_t)r * D + c] += l->dt_bias[c];

    for (int si = 0; si < n_segs; si++) {
        float *S = seg_ssm(&segs[si], l->rec_slot);
        scan_job j = {.l = l, .seg = &segs[si], .X = X, .XDB = XDB, .DT = DT, .Y = Y, .S = S};
        pool_run(scan_channels, &j);
    }

    for (int r = 0; r < N; r++) {
        float *y = Y + (size_t)r * D;
        const float *xr = X + (size_t)r * D, *z = XZ + (size_t)r * 2 * D + D;
        for (int c = 0; c < D; c++) {
            const float xd = xr[c] * l->d[c];
            y[c] += xd;
        }
        vec_swiglu(y, z, y, D);
    }
    matmul(&l->w_out, Y, N, out);
    (void)n_embd;
}
