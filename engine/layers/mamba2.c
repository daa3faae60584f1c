/* mamba2.c - the Mamba-2 mixer (docs/engine-math.md §5; llama.cpp src/models/mamba-base.cpp
 * build_mamba2_layer), shared by mamba2, nemotron_h and granitehybrid.
 *
 *   [z, xBC, dt] = W_in u                         z: d_inner, xBC: d_inner + 2GN, dt: H
 *   xBC = silu(causal_conv(xBC) + conv_b)         (kernel K, state = last K-1 inputs)
 *   x   = xBC[0 : d_inner] as H heads of P = d_inner/H
 *   B,C = the next two G*N values, as G groups of N
 *   per head h (group g = h / (H/G)), per token:
 *       Δ      = softplus(dt_h + dt_bias_h),   dA = exp(Δ a_h)
 *       S_h    = S_h dA + x_h Δ B_g^T          (S_h is P x N)
 *       y_h    = S_h C_g
 *   y   = (y + D_h x_h) * silu(z_h)            per head
 *   y   = RMSNorm of each of the G groups of d_inner/G values (weight norm, when present)
 *   out = W_out y
 *
 * State per sequence: conv [d_inner+2GN][K-1], ssm [H][P][N] (N fastest), as llama.cpp
 * keeps them. The arithmetic follows llama.cpp's ssm_scan: each state element is
 * fma(S, dA, B·xΔ), the sum over N runs in four 16-lane FMA accumulators for whole
 * blocks of 64 and goes on with fused multiply-adds for the rest. */
#include <math.h>
#include <string.h>

#include "engine/kernels/quant.h"
#include "engine/layers/layers.h"
#include "engine/layers/ops.h"
#include "engine/base/threadpool.h"

static int conv_dim(const mamba2_layer *l) { return l->d_inner + 2 * l->n_group * l->d_state; }

size_t mamba2_conv_floats(const mamba2_layer *l) { return (size_t)(l->conv_k - 1) * (size_t)conv_dim(l); }
size_t mamba2_ssm_floats(const mamba2_layer *l) { return (size_t)l->d_inner * (size_t)l->d_state; }

typedef struct {
    const mamba2_layer *l;
    const segment *seg;
    const float *XBC;  /* conv outputs, rows of conv_dim */
    const float *DT;   /* rows of n_head: dt + dt_bias */
    float *Y;          /* rows of d_inner */
    float *S;          /* the segment's ssm state (its captures: seg->capture_rec) */
} scan_job;

static void scan_heads(void *arg, int ith, int nth) {
    const scan_job *j = arg;
    const mamba2_layer *l = j->l;
    const int H = l->n_head, P = l->d_inner / H, N = l->d_state, cd = conv_dim(l);
    const int heads_per_group = H / l->n_group;
    long h0, h1;
    pool_split(H, ith, nth, 1, &h0, &h1);
    for (int t = 0; t < j->seg->n; t++) {
        const int row = j->seg->row0 + t;
        const float *xbc = j->XBC + (size_t)row * cd;
        for (int h = (int)h0; h < (int)h1; h++) {
            const int g = h / heads_per_group;
            const float *x = xbc + (size_t)h * P;
            const float *B = xbc + l->d_inner + (size_t)g * N;
            const float *C = xbc + l->d_inner + (size_t)l->n_group * N + (size_t)g * N;
            const float dt = softplus(j->DT[(size_t)row * H + h]);
            const float dA = expf(dt * l->a[h]);
            float *y = j->Y + (size_t)row * l->d_inner + (size_t)h * P;
            float *S = j->S + (size_t)h * P * N;
            ssm_scan_head(S, B, C, dA, x, dt, P, N, y);
            const int cap = seg_capture_after(j->seg, t);
            if (cap >= 0) memcpy(seg_capture_at(j->seg, cap, S), S, sizeof *S * (size_t)P * N);
        }
    }
}

void mamba2_forward(const mamba2_layer *l, const segment *segs, int n_segs, int N, int n_embd, const float *x,
                    float *out, arena *a) {
    const int H = l->n_head, P = l->d_inner / H, cd = conv_dim(l);
    const int d_in_proj = l->d_inner + cd + H, gsize = l->d_inner / l->n_group;
    float *Z = arena_floats(a, (size_t)N * d_in_proj);
    float *XBC = arena_floats(a, (size_t)N * cd);
    float *DT = arena_floats(a, (size_t)N * H);
    float *Y = arena_floats(a, (size_t)N * l->d_inner);
    matmul(&l->w_in, x, N, Z);

    for (int r = 0; r < N; r++)
        for (int h = 0; h < H; h++)
            DT[(size_t)r * H + h] = Z[(size_t)r * d_in_proj + l->d_inner + cd + h] + l->dt_bias[h];

    segs_conv_causal(segs, n_segs, l->rec_slot, l->conv_w, cd, l->conv_k, Z + l->d_inner, d_in_proj, XBC, cd);
    for (int si = 0; si < n_segs; si++) {
        const segment *sg = &segs[si];
        for (int t = 0; t < sg->n; t++) {
            float *r = XBC + (size_t)(sg->row0 + t) * cd;
            if (l->conv_b)
                for (int c = 0; c < cd; c++) r[c] += l->conv_b[c];
            vec_silu(r, r, cd);
        }
        float *S = seg_ssm(sg, l->rec_slot);
        scan_job j = {.l = l, .seg = sg, .XBC = XBC, .DT = DT, .Y = Y, .S = S};
        pool_run(scan_heads, &j);
    }

    for (int r = 0; r < N; r++) {
        float *y = Y + (size_t)r * l->d_inner;
        const float *xr = XBC + (size_t)r * cd, *z = Z + (size_t)r * d_in_proj;
        for (int h = 0; h < H; h++) {
            for (int p = 0; p < P; p++) {
                const float xd = xr[h * P + p] * l->d[h];
                y[h * P + p] += xd;
            }
            vec_swiglu(y + (size_t)h * P, z + (size_t)h * P, y + (size_t)h * P, P);
        }
        for (int g = 0; l->norm && g < l->n_group; g++)
            rmsnorm(y + (size_t)g * gsize, y + (size_t)g * gsize, l->norm + (size_t)g * gsize, gsize, l->eps);
    }
    matmul(&l->w_out, Y, N, out);
    (void)n_embd;
}
