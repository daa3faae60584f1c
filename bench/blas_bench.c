/* blas_bench.c - OpenBLAS side by side with chatfs's own kernels, at Qwen3.5-0.8B's shapes
 * (docs/performance.md, "OpenBLAS"; make bench-blas):
 *
 *  weights    a 512-token prompt through F32, F16 and BF16 weight matrices (1024x3584,
 *             3584x1024, 1024x6144): our kernels (llama.cpp's order) against cblas_sgemm on
 *             each thread's share of the rows, with the activations rounded to the weight
 *             type as ours are and F16/BF16 rows widened to F32 for it
 *  attention  the attention core (Q K^T, softmax, P V; 8 query heads, 2 KV heads of 256) for
 *             a 512-token prompt chunk and for one decode row after 2K, 8K and 32K cached
 *             positions: attention.c's kernels (llama.cpp's order) against cblas_sgemm, and
 *             how far OpenBLAS's outputs are from ours
 *  deltanet   the Gated DeltaNet recurrence for 512 tokens (16 heads of 128x128, token by
 *             token as llama.cpp), against the matrix products alone that a chunked form
 *             (64-token chunks) would need, by OpenBLAS: a bound on what it could gain
 *
 * Each comparison alternates the two sides in this process, PAIRS times (default 5), and
 * prints the median time of each and the median and range of the ratios; on a shared
 * machine, the ratios of neighbouring runs are what holds.
 * usage: blas_bench [PAIRS [SECTIONS [THREADS]]]   SECTIONS: any of "wad" (weights, attention,
 * deltanet; default all), THREADS: default 2 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/base/threadpool.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/quant.h"
#include "engine/layers/ops.h"
#include "engine/layers/layers.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint32_t seed = 12345;
static float rnd(void) {
    seed = seed * 1664525u + 1013904223u;
    return (float)(seed >> 8 & 0xffff) / 32768.0f - 1.0f;
}
static float *rnd_floats(size_t n, float scale) {
    float *x = malloc(sizeof(float) * n);
    if (!x) abort();
    for (size_t i = 0; i < n; i++) x[i] = rnd() * scale;
    return x;
}

static unsigned long long fnv1a(const void *p, size_t n) {
    unsigned long long h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
    return h;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* runs a and b alternately `pairs` times; prints medians and the ratio a/b */
typedef void (*side_fn)(void *ctx);
static void compare(const char *what, const char *name_a, side_fn a, const char *name_b, side_fn b, void *ctx,
                    int pairs) {
    double ta[64], tb[64], r[64];
    a(ctx), b(ctx); /* warm: caches, the arena, OpenBLAS's buffers */
    for (int i = 0; i < pairs; i++) {
        double t0 = now();
        a(ctx);
        double t1 = now();
        b(ctx);
        double t2 = now();
        ta[i] = t1 - t0, tb[i] = t2 - t1, r[i] = ta[i] / tb[i];
    }
    const double ma = median(ta, pairs), mb = median(tb, pairs), mr = median(r, pairs);
    printf("%-34s %-9s %9.2f ms  %-9s %9.2f ms  %s/%s %.2f (%.2f-%.2f)\n", what, name_a, ma * 1e3, name_b, mb * 1e3,
           name_a, name_b, mr, r[0], r[pairs - 1]);
    fflush(stdout);
}

/* ---------------------------------------------------------------- weights */

typedef struct {
    matrix W;
    const float *X, *Xr; /* activations; rounded to the weight type */
    float *Y;
    int T;
} weights_case;

static void weights_ours(void *ctx) {
    weights_case *c = ctx;
    matmul(&c->W, c->X, c->T, c->Y);
}

/* each pool chunk: its share of the rows (widened to F32 for F16/BF16), one sgemm */
static void weights_blas_rows(void *ctx, int ith, int nth) {
    weights_case *c = ctx;
    long r0, r1;
    pool_split(c->W.n_out, ith, nth, 16, &r0, &r1);
    if (r1 <= r0) return;
    const int n = (int)c->W.n_in;
    const float *w = (const float *)((const uint8_t *)c->W.data + (size_t)r0 * c->W.row_bytes);
    float *wide = NULL;
    if (c->W.type != GGML_F32) {
        wide = malloc(sizeof(float) * (size_t)(r1 - r0) * (size_t)n);
        if (!wide) abort();
        for (long r = r0; r < r1; r++) matrix_get_row(&c->W, r, wide + (size_t)(r - r0) * n);
        w = wide;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, c->T, (int)(r1 - r0), n, 1.0f, c->Xr, n, w, n, 0.0f,
                c->Y + r0, (int)c->W.n_out);
    free(wide);
}
static void weights_blas(void *ctx) { pool_run(weights_blas_rows, ctx); }

static void bench_weights(int pairs) {
    const uint32_t types[3] = {GGML_F32, GGML_F16, GGML_BF16};
    const char *names[3] = {"F32", "F16", "BF16"};
    const int shapes[3][2] = {{1024, 3584}, {3584, 1024}, {1024, 6144}};
    const int T = 512;
    for (int ti = 0; ti < 3; ti++)
        for (int si = 0; si < 3; si++) {
            const int n_in = shapes[si][0], n_out = shapes[si][1];
            const size_t es = types[ti] == GGML_F32 ? 4 : 2, n = (size_t)n_in * n_out;
            void *data = malloc(es * n);
            if (!data) abort();
            for (size_t i = 0; i < n; i++) {
                const float v = rnd() / sqrtf((float)n_in);
                if (types[ti] == GGML_F32) ((float *)data)[i] = v;
                else if (types[ti] == GGML_F16) ((fp16_t *)data)[i] = f32_to_fp16(v);
                else ((bf16_t *)data)[i] = f32_to_bf16(v);
            }
            weights_case c = {.W = {.data = data, .type = types[ti], .n_in = n_in, .n_out = n_out,
                                    .row_bytes = es * (size_t)n_in},
                              .T = T};
            float *X = rnd_floats((size_t)T * n_in, 1.0f), *Xr = malloc(sizeof(float) * (size_t)T * n_in);
            c.Y = malloc(sizeof(float) * (size_t)T * n_out);
            if (!Xr || !c.Y) abort();
            for (size_t i = 0; i < (size_t)T * n_in; i++)
                Xr[i] = types[ti] == GGML_F16    ? fp16_to_f32(f32_to_fp16(X[i]))
                        : types[ti] == GGML_BF16 ? bf16_to_f32(f32_to_bf16(X[i]))
                                                 : X[i];
            c.X = X, c.Xr = Xr;
            char what[64];
            snprintf(what, sizeof what, "weights %s %dx%d, 512 tokens", names[ti], n_in, n_out);
            compare(what, "ours", weights_ours, "openblas", weights_blas, &c, pairs);
            free(data), free(X), free(Xr), free(c.Y);
        }
}

/* ---------------------------------------------------------------- attention */

/* The attention core of one layer (8 query heads, 2 KV heads of 256, as Qwen3.5-0.8B) for
 * T new tokens after C - T cached ones: per KV group and run of 32 tokens, the run's
 * (token, head) pairs are the rows of S = kq_scale Q K^T over the cache, then softmax as
 * attention.c (llama.cpp's: vector exp, padded to 16, 1/sum in double), then O = P V.
 *   ours      the two products with attention.c's kernels in llama.cpp's order
 *             (attn_scores_multi, attn_wsum_acc_multi + attn_wsum_finish, cache blocks of
 *             128 positions, 32 pairs a call)
 *   openblas  each product one cblas_sgemm, one OpenBLAS thread inside each pool chunk
 * Both compute every row over the run's whole range (attention.c skips the blocks the
 * causal mask cuts, a little less work for ours), so OpenBLAS's gain here is an upper bound. */
typedef struct {
    const float *Q, *K, *V; /* Q: T rows of 8 heads x 256; K, V: C rows of 2 heads x 256 */
    float *O;               /* T rows of 8 x 256 */
    float *scratch;         /* per chunk */
    size_t scratch_n;
    int T, C, blas;
} core_case;

enum { CORE_HD = 256, CORE_R = 4, CORE_KVD = 512, CORE_RUN = 32, CORE_BLOCK = 128, CORE_MULTI = 32 };

static void core_softmax(float *p, int n, int n_max) {
    const int padded = (n + 15) & ~15;
    float max = -INFINITY;
    for (int i = 0; i < n; i++) max = p[i] > max ? p[i] : max;
    for (int i = n; i < padded; i++) p[i] = -INFINITY;
    const float inv = (float)(1.0 / vec_softmax_exp(p, p, max, padded));
    for (int i = 0; i < n; i++) p[i] *= inv;
    for (int i = padded; i < n_max; i++) p[i] = 0;
}

static void core_job(void *ctx, int ith, int nth) {
    const core_case *c = ctx;
    const int hd = CORE_HD, R = CORE_R, kvd = CORE_KVD, n_pad = (c->C + 15) & ~15;
    const int runs = (c->T + CORE_RUN - 1) / CORE_RUN;
    const size_t accn = ATTN_ACC_FLOATS(CORE_HD);
    float *Q = c->scratch + (size_t)ith * c->scratch_n, *O = Q + (size_t)CORE_RUN * R * hd;
    float *S = O + (size_t)CORE_RUN * R * accn;
    for (int it = ith; it < 2 * runs; it += nth) {
        const int g = it % 2, t0 = it / 2 * CORE_RUN, t1 = t0 + CORE_RUN < c->T ? t0 + CORE_RUN : c->T;
        const int M = (t1 - t0) * R, pos0 = c->C - c->T, n_max = pos0 + t1;
        const float *K = c->K + g * hd, *V = c->V + g * hd;
        /* row k: token t0 + k/R, head gR + k%R, side by side for OpenBLAS's one stride */
#define ROW(X, k) ((X) + (size_t)(t0 + (k) / R) * 8 * hd + (size_t)(g * R + (k) % R) * hd)
        for (int k = 0; k < M; k++) memcpy(Q + (size_t)k * hd, ROW(c->Q, k), sizeof(float) * hd);
        if (c->blas) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, n_max, hd, 1.0f / 16, Q, hd, K, kvd, 0.0f, S, n_pad);
        } else {
            for (int i0 = 0; i0 < n_max; i0 += CORE_BLOCK)
                for (int k0 = 0; k0 < M; k0 += CORE_MULTI) {
                    const int nr = M - k0 < CORE_MULTI ? M - k0 : CORE_MULTI;
                    const int cnt = n_max - i0 < CORE_BLOCK ? n_max - i0 : CORE_BLOCK;
                    float *sr[CORE_MULTI];
                    const float *qr[CORE_MULTI];
                    for (int k = 0; k < nr; k++) sr[k] = S + (size_t)(k0 + k) * n_pad + i0, qr[k] = Q + (size_t)(k0 + k) * hd;
                    attn_scores_multi(sr, K + (size_t)i0 * kvd, kvd, qr, nr, cnt, hd, 1.0f / 16);
                }
        }
        for (int k = 0; k < M; k++) core_softmax(S + (size_t)k * n_pad, pos0 + t0 + k / R + 1, n_max);
        if (c->blas) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, hd, n_max, 1.0f, S, n_pad, V, kvd, 0.0f, O, hd);
            for (int k = 0; k < M; k++) memcpy(ROW(c->O, k), O + (size_t)k * hd, sizeof(float) * hd);
        } else {
            memset(O, 0, sizeof(float) * (size_t)M * accn);
            for (int i0 = 0; i0 < n_max; i0 += CORE_BLOCK)
                for (int k0 = 0; k0 < M; k0 += CORE_MULTI) {
                    const int nr = M - k0 < CORE_MULTI ? M - k0 : CORE_MULTI;
                    const int cnt = n_max - i0 < CORE_BLOCK ? n_max - i0 : CORE_BLOCK;
                    float *ar[CORE_MULTI];
                    const float *pr[CORE_MULTI];
                    for (int k = 0; k < nr; k++) ar[k] = O + (size_t)(k0 + k) * accn, pr[k] = S + (size_t)(k0 + k) * n_pad + i0;
                    attn_wsum_acc_multi(ar, V + (size_t)i0 * kvd, kvd, pr, nr, cnt, hd);
                }
            for (int k = 0; k < M; k++) attn_wsum_finish(ROW(c->O, k), O + (size_t)k * accn, hd);
        }
#undef ROW
    }
}
static void core_ours(void *ctx) {
    ((core_case *)ctx)->blas = 0;
    pool_run_n(core_job, ctx, 2 * pool_threads());
}
static void core_blas(void *ctx) {
    ((core_case *)ctx)->blas = 1;
    pool_run_n(core_job, ctx, 2 * pool_threads());
}

static void bench_attention(int pairs) {
    const int hd = CORE_HD, ctx[3] = {2048, 8192, 32768};
    const size_t accn = ATTN_ACC_FLOATS(CORE_HD);
    for (int ci = 0; ci < 3; ci++) {
        const int C = ctx[ci];
        float *K = rnd_floats((size_t)C * CORE_KVD, 1.0f), *V = rnd_floats((size_t)C * CORE_KVD, 1.0f);
        for (int decode = 0; decode < 2; decode++) {
            const int T = decode ? 1 : 512;
            core_case cc = {.K = K, .V = V, .T = T, .C = C};
            float *Q = rnd_floats((size_t)T * 8 * hd, 1.0f), *O0 = malloc(sizeof(float) * T * 8 * hd);
            float *O1 = malloc(sizeof(float) * T * 8 * hd);
            cc.Q = Q, cc.O = O1;
            cc.scratch_n = (size_t)CORE_RUN * CORE_R * (hd + accn + ((C + 15) & ~15));
            cc.scratch = malloc(sizeof(float) * cc.scratch_n * 2 * (size_t)pool_threads());
            if (!O0 || !O1 || !cc.scratch) abort();
            char what[64];
            snprintf(what, sizeof what, "attention %s at %dK", decode ? "decode row" : "512-token chunk", C / 1024);
            compare(what, "ours", core_ours, "openblas", core_blas, &cc, pairs);
            core_ours(&cc);
            memcpy(O0, O1, sizeof(float) * T * 8 * hd);
            core_blas(&cc);
            size_t differ = 0;
            double worst = 0;
            for (size_t i = 0; i < (size_t)T * 8 * hd; i++) {
                differ += memcmp(&O0[i], &O1[i], sizeof(float)) != 0;
                const double d = fabs((double)O0[i] - O1[i]);
                worst = d > worst ? d : worst;
            }
            /* the outputs' hashes tell runs under other kernel sets apart (CHATFS_ISA for
             * ours, OPENBLAS_CORETYPE for OpenBLAS) */
            printf("  OpenBLAS's outputs differ from ours (llama.cpp's order) in %zu of %d values, by up to %.2g;"
                   " hashes ours %016llx, openblas %016llx\n",
                   differ, T * 8 * hd, worst, fnv1a(O0, sizeof(float) * T * 8 * hd),
                   fnv1a(O1, sizeof(float) * T * 8 * hd));
            free(Q), free(O0), free(O1), free(cc.scratch);
        }
        free(K), free(V);
    }
}

static matrix f32_matrix(int n_in, int n_out) {
    matrix m = {.data = rnd_floats((size_t)n_in * n_out, 1.0f / sqrtf((float)n_in)), .type = GGML_F32, .n_in = n_in,
                .n_out = n_out, .row_bytes = sizeof(float) * (size_t)n_in};
    return m;
}

/* ---------------------------------------------------------------- the delta rule */

typedef struct {
    gdn_layer l;
    segment seg;
    rec_slot slot;
    const float *x;
    float *out;
    arena a;
    float *bufs[8]; /* the chunked form's operands */
} gdn_case;

static void gdn_run(void *ctx) {
    gdn_case *c = ctx;
    memset(c->seg.rec, 0, sizeof(float) * (c->slot.conv_floats + c->slot.ssm_floats));
    gdn_forward(&c->l, &c->seg, 1, c->seg.n, 64, c->x, c->out, &c->a);
    arena_reset(&c->a);
}

/* per 64-token chunk and head, the products of the chunked (WY) form: K K^T, the two
 * products with the inverted triangle (W, U), W S, the output's Q S, Q K^T and its product
 * with U, and the state's K^T U: each a cblas_sgemm of its shape, nothing else */
static void gdn_products_job(void *ctx, int ith, int nth) {
    gdn_case *c = ctx;
    const int C = 64, d = 128, heads = 16, chunks = 512 / C;
    float *A = c->bufs[0], *B = c->bufs[1], *Ct = c->bufs[2] + (size_t)ith * d * d;
    for (int it = ith; it < heads * chunks; it += nth) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, C, C, d, 1.0f, A, d, B, d, 0.0f, Ct, C);      /* K K^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, C, d, C, 1.0f, A, C, B, d, 0.0f, Ct, d);    /* W */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, C, d, C, 1.0f, A, C, B, d, 0.0f, Ct, d);    /* U */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, C, d, d, 1.0f, A, d, B, d, 0.0f, Ct, d);    /* W S */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, C, d, d, 1.0f, A, d, B, d, 0.0f, Ct, d);    /* Q S */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, C, C, d, 1.0f, A, d, B, d, 0.0f, Ct, C);      /* Q K^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, C, d, C, 1.0f, A, C, B, d, 0.0f, Ct, d);    /* (QK^T) U */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d, d, C, 1.0f, A, d, B, d, 0.0f, Ct, d);      /* K^T U */
    }
}
static void gdn_products(void *ctx) { pool_run(gdn_products_job, ctx); }

static void bench_deltanet(int pairs) {
    const int Hk = 16, Hv = 16, dk = 128, dv = 128, conv_dim = 2 * Hk * dk + Hv * dv, N = 512;
    static float ones[128], dt_bias[16], a[16];
    for (int i = 0; i < 128; i++) ones[i] = 1.0f;
    for (int h = 0; h < 16; h++) dt_bias[h] = 0.5f, a[h] = -0.5f;
    gdn_case c = {.l = {.w_qkv = f32_matrix(64, conv_dim), .w_z = f32_matrix(64, Hv * dv), .w_beta = f32_matrix(64, Hv),
                        .w_alpha = f32_matrix(64, Hv), .w_out = f32_matrix(Hv * dv, 64),
                        .conv_w = rnd_floats((size_t)conv_dim * 4, 0.5f), .dt_bias = dt_bias, .a = a, .norm = ones,
                        .n_k_heads = Hk, .n_v_heads = Hv, .d_k = dk, .d_v = dv, .conv_k = 4, .eps = 1e-6f}};
    c.slot = (rec_slot){.conv_off = 0, .conv_floats = gdn_conv_floats(&c.l)};
    c.slot.ssm_off = c.slot.conv_floats, c.slot.ssm_floats = gdn_ssm_floats(&c.l);
    float *rec = calloc(c.slot.conv_floats + c.slot.ssm_floats, sizeof(float));
    c.seg = (segment){.rec = rec, .rec_slots = &c.slot, .row0 = 0, .n = N, .pos0 = 0};
    float *x = rnd_floats((size_t)N * 64, 1.0f);
    c.x = x;
    c.out = malloc(sizeof(float) * (size_t)N * 64);
    c.bufs[0] = rnd_floats(128 * 128, 0.1f), c.bufs[1] = rnd_floats(128 * 128, 0.1f);
    c.bufs[2] = malloc(sizeof(float) * 128 * 128 * 64);
    compare("delta rule, 512 tokens", "ours", gdn_run, "chunked", gdn_products, &c, pairs);
    free(rec), free(x), free(c.out), free(c.bufs[0]), free(c.bufs[1]), free(c.bufs[2]);
    arena_free(&c.a);
}

int main(int argc, char **argv) {
    const int pairs = argc > 1 ? atoi(argv[1]) : 5;
    const char *sections = argc > 2 ? argv[2] : "wad";
    const int threads = argc > 3 ? atoi(argv[3]) : 2;
    if (pairs < 1 || pairs > 64 || threads < 1 || threads > 64) {
        fprintf(stderr, "usage: blas_bench [PAIRS (1-64) [SECTIONS: w a d [THREADS]]]\n");
        return 2;
    }
    pool_set_threads(threads);
    openblas_set_num_threads(1); /* called from inside the pool's jobs, one thread each */
    printf("%s; kernels %s; %d pairs, %d threads\n", openblas_get_config(), kernels_name(), pairs, threads);
    if (strchr(sections, 'w')) bench_weights(pairs);
    if (strchr(sections, 'a')) bench_attention(pairs);
    if (strchr(sections, 'd')) bench_deltanet(pairs);
    pool_shutdown();
    return 0;
}
