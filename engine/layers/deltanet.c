/* deltanet.c - Gated DeltaNet, the linear-attention layer of Qwen3.5 (docs/engine-math.md
 * §4; llama.cpp src/models/qwen35.cpp build_layer_attn_linear).
 *
 *   mixed = W_qkv x ; z = W_z x ; beta = sigmoid(W_beta x) ; g = softplus(W_alpha x + dt_bias) * a
 *   c     = silu(causal_conv(mixed))                 (kernel K, state = last K-1 inputs)
 *   q, k  = L2-normalised key heads of c ; v = value heads of c
 *   per value head h (key head j = h mod Hk; h / (Hv/Hk) in Qwen3-Next), per token:
 *       S     = exp(g_h) S
 *       delta = (v_h - S^T k_j) * beta_h
 *       S    += k_j delta^T
 *       o_h   = S^T q_j / sqrt(d_k)
 *   o_h   = RMSNorm(o_h, norm) * silu(z_h)
 *   out   = W_out o
 *
 * The state of head h is stored transposed, S^T as [d_v][d_k] (as llama.cpp keeps
 * it), so each value row is contiguous: one token touches each row once. */
#include <math.h>
#include <string.h>

#include "engine/layers/layers.h"
#include "engine/layers/ops.h"
#include "engine/base/threadpool.h"

size_t gdn_conv_floats(const gdn_layer *l) {
    return (size_t)(l->conv_k - 1) * (size_t)(2 * l->n_k_heads * l->d_k + l->n_v_heads * l->d_v);
}
size_t gdn_ssm_floats(const gdn_layer *l) { return (size_t)l->n_v_heads * l->d_v * l->d_k; }

/* q, k = x / sqrt(sum(x^2) + eps), formed as llama.cpp (release 0ad4a86) forms it:
 * RMSNorm with eps/n, then a scale by 1/sqrt(n). (Older releases used
 * x / max(|x|, eps); the two differ only in rounding and for tiny |x|.) Here for heads
 * vectors of n at once (their sums run side by side). */
static void gdn_l2norm_heads(float *x, int heads, int n, float eps) {
    const float s = 1.0f / sqrtf((float)n);
    rmsnorm_many(x, x, (size_t)n, NULL, heads, n, eps / (float)n);
    for (size_t i = 0; i < (size_t)heads * (size_t)n; i++) x[i] *= s;
}

typedef struct {
    const gdn_layer *l;
    const segment *segs; /* every (segment, value head) pair is one item of the job */
    int n_items;
    const float *C;      /* conv outputs, rows of conv_dim (before the SiLU) */
    const float *beta, *g, *Z;
    float *O;            /* rows of value_dim */
} gdn_job;

/* All tokens of one segment for one value head: the head's q, k (its key head's) and v
 * out of the conv output, through the SiLU and (q, k) the L2 norm, then the step. Each
 * value head forms its own copies, so the heads of a batch share no writes and that
 * work spreads over the pool with them (a key head shared by several value heads is
 * formed by each, to the same bits). */
static void gdn_head(const gdn_job *j, const segment *seg, int h) {
    const gdn_layer *l = j->l;
    const int dk = l->d_k, dv = l->d_v, Hk = l->n_k_heads, Hv = l->n_v_heads;
    const int key_dim = Hk * dk, conv_dim = 2 * key_dim + Hv * dv, value_dim = Hv * dv;
    const float scale = 1.0f / sqrtf((float)dk);
    float *S0 = seg_ssm(seg, l->rec_slot);
    float *S = S0 + (size_t)h * dv * dk;
    const int kh = l->grouped_heads ? h / (Hv / Hk) : h % Hk;
    for (int t = 0; t < seg->n; t++) {
        const int row = seg->row0 + t;
        const float *c = j->C + (size_t)row * conv_dim;
        float qk[2 * dk], v[dv];
        float *q = qk, *k = qk + dk;
        vec_silu_span(q, c + (size_t)kh * dk, dk, kh * dk, conv_dim);
        vec_silu_span(k, c + key_dim + (size_t)kh * dk, dk, key_dim + kh * dk, conv_dim);
        vec_silu_span(v, c + 2 * key_dim + (size_t)h * dv, dv, 2 * key_dim + h * dv, conv_dim);
        gdn_l2norm_heads(qk, 2, dk, l->eps);
        const float decay = expf(j->g[(size_t)row * Hv + h]), beta = j->beta[(size_t)row * Hv + h];
        float *o = j->O + (size_t)row * value_dim + (size_t)h * dv;
        gdn_head_step(S, dk, dv, q, k, v, decay, beta, scale, o);
        /* gated RMSNorm of this head */
        const float *z = j->Z + (size_t)row * value_dim + (size_t)h * dv;
        float sz[dv];
        rmsnorm(o, o, l->norm, dv, l->eps);
        vec_silu(sz, z, dv);
        for (int cv = 0; cv < dv; cv++) o[cv] *= sz[cv];
        const int cap = seg_capture_after(seg, t);
        if (cap >= 0) memcpy(seg_capture_at(seg, cap, S), S, sizeof *S * (size_t)dv * dk);
    }
}

/* The items assigned to this chunk: heads are independent, and so are the segments (each
 * its own state), so one job serves a whole batch of sequences. */
static void gdn_heads(void *arg, int ith, int nth) {
    const gdn_job *j = arg;
    const int Hv = j->l->n_v_heads;
    long i0, i1;
    pool_split(j->n_items, ith, nth, 1, &i0, &i1);
    for (long i = i0; i < i1; i++) gdn_head(j, &j->segs[i / Hv], (int)(i % Hv));
}

/* Qwen3-Next's projections, into the layout of the others: M = [q heads, k heads, v heads]
 * and Z from w_qkv and w_z, or from the older fused w_qkvz ([q, k, v, z] per key head);
 * B and G (before their activations) from w_ba ([r betas, r alphas] per key head). */
static void qwen3next_projections(const gdn_layer *l, int N, const float *x, float *M, float *Z, float *B, float *G,
                                  arena *a) {
    const int dk = l->d_k, dv = l->d_v, Hk = l->n_k_heads, Hv = l->n_v_heads, r = Hv / Hk;
    const int key_dim = Hk * dk, value_dim = Hv * dv, conv_dim = 2 * key_dim + value_dim;
    float *BA = arena_floats(a, (size_t)N * 2 * Hv);
    if (l->w_qkvz.data) {
        const int per_head = 2 * dk + 2 * r * dv; /* q, k, v, z of one key head */
        float *QKVZ = arena_floats(a, (size_t)N * Hk * per_head);
        const matrix *W[2] = {&l->w_qkvz, &l->w_ba};
        float *Y[2] = {QKVZ, BA};
        matmul_multi(2, W, Y, x, N);
        for (int t = 0; t < N; t++)
            for (int j = 0; j < Hk; j++) {
                const float *src = QKVZ + ((size_t)t * Hk + j) * per_head;
                float *m = M + (size_t)t * conv_dim, *z = Z + (size_t)t * value_dim;
                memcpy(m + (size_t)j * dk, src, sizeof(float) * dk);
                memcpy(m + key_dim + (size_t)j * dk, src + dk, sizeof(float) * dk);
                memcpy(m + 2 * key_dim + (size_t)j * r * dv, src + 2 * dk, sizeof(float) * r * dv);
                memcpy(z + (size_t)j * r * dv, src + 2 * dk + r * dv, sizeof(float) * r * dv);
            }
    } else {
        const matrix *W[3] = {&l->w_qkv, &l->w_z, &l->w_ba};
        float *Y[3] = {M, Z, BA};
        matmul_multi(3, W, Y, x, N);
    }
    for (int t = 0; t < N; t++)
        for (int j = 0; j < Hk; j++)
            for (int i = 0; i < r; i++) {
                const float *ba = BA + (size_t)t * 2 * Hv + (size_t)j * 2 * r;
                B[(size_t)t * Hv + j * r + i] = ba[i];
                G[(size_t)t * Hv + j * r + i] = ba[r + i];
            }
}

void gdn_forward(const gdn_layer *l, const segment *segs, int n_segs, int N, int n_embd, const float *x, float *out,
                 arena *a) {
    const arena_mark mark = arena_save(a); /* temporaries go back at the end */
    const int dk = l->d_k, Hk = l->n_k_heads, Hv = l->n_v_heads;
    const int key_dim = Hk * dk, value_dim = Hv * l->d_v, conv_dim = 2 * key_dim + value_dim;
    float *M = arena_floats(a, (size_t)N * conv_dim);
    float *C = arena_floats(a, (size_t)N * conv_dim);
    float *Z = arena_floats(a, (size_t)N * value_dim);
    float *B = arena_floats(a, (size_t)N * Hv);
    float *G = arena_floats(a, (size_t)N * Hv);
    float *O = arena_floats(a, (size_t)N * value_dim);
    if (l->w_ba.data || l->w_qkvz.data) {
        qwen3next_projections(l, N, x, M, Z, B, G, a);
    } else {
        const matrix *W[4] = {&l->w_qkv, &l->w_z, &l->w_beta, &l->w_alpha};
        float *Y[4] = {M, Z, B, G};
        matmul_multi(4, W, Y, x, N); /* x quantized once, one pass of the pool */
    }
    for (int r = 0; r < N; r++)
        for (int h = 0; h < Hv; h++) {
            B[(size_t)r * Hv + h] = sigmoid(B[(size_t)r * Hv + h]);
            G[(size_t)r * Hv + h] = softplus(G[(size_t)r * Hv + h] + l->dt_bias[h]) * l->a[h];
        }
    segs_conv_causal(segs, n_segs, l->rec_slot, l->conv_w, conv_dim, l->conv_k, M, conv_dim, C, conv_dim);
    gdn_job j = {.l = l, .segs = segs, .n_items = n_segs * Hv, .C = C, .beta = B, .g = G, .Z = Z, .O = O};
    pool_run_n(gdn_heads, &j, j.n_items); /* one (segment, head) per chunk */
    matmul(&l->w_out, O, N, out);
    (void)n_embd;
    arena_restore(a, mark);
}
