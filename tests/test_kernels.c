/* test_kernels.c - the kernel layer against its scalar reference.
 *
 *  1. Every instruction-set path's gemm equals the scalar vec_dot_ref bit for bit, for
 *     every weight type, many row lengths and row counts, T = 1..17 and large T (which
 *     takes the chunked, tiled path), row sub-ranges, and through matmul/matmul_multi
 *     with 1 and 2 threads, and as the experts of a mixture-of-experts layer (matmul_parts
 *     over gathered and single tokens).
 *  2. The reference itself is a dot product: close to the float dot of the dequantized
 *     weights and the activations (catches a wrong lane or scale bookkeeping).
 *  3. Weight quantizers: dequantize(quantize(x)) is close to x, with the error each
 *     format should have; the activation quantizers' blocks decode back to x.
 *  4. The memory-bandwidth sum agrees between paths. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels/kernels.h"
#include "engine/layers/kv_type.h"
#include "engine/layers/ops.h"
#include "cli/synth/quantize.h"
#include "engine/kernels/quant.h"
#include "engine/base/threadpool.h"
#include "tests/check.h"

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}
static float gauss(void) {
    float s = 0;
    for (int i = 0; i < 4; i++) s += frand();
    return s * 0.8660254f;
}

static const uint32_t types[] = {GGML_F32, GGML_F16, GGML_BF16, GGML_Q8_0, GGML_Q4_0, GGML_Q5_0,
                                 GGML_Q4_1, GGML_Q5_1, GGML_Q4_K, GGML_Q5_K, GGML_Q6_K};
#define N_TYPES (int)(sizeof types / sizeof types[0])

/* a random matrix of the type; some rows scaled oddly, one row all zero */
static void *make_weights(uint32_t wt, int64_t n, int64_t rows, matrix *W) {
    const size_t rb = quant_row_bytes(wt, n);
    uint8_t *data = malloc(rb * (size_t)rows + 64);
    float *row = malloc(sizeof(float) * (size_t)n);
    for (int64_t r = 0; r < rows; r++) {
        const float scale = r % 7 == 3 ? 1e-3f : r % 5 == 1 ? 40.f : 1.f;
        for (int64_t i = 0; i < n; i++) row[i] = r == 2 ? 0.f : gauss() * scale;
        REQUIRE(quantize_row_weight(wt, row, data + rb * (size_t)r, n) == 0, "cannot quantize %s",
                ggml_type_name(wt));
    }
    free(row);
    *W = (matrix){data, wt, n, rows, rb};
    return data;
}

static float *make_acts(int64_t n, int T) {
    float *x = malloc(sizeof(float) * (size_t)n * (size_t)T);
    for (int t = 0; t < T; t++)
        for (int64_t i = 0; i < n; i++) {
            float v = gauss() * (t % 3 == 1 ? 0.01f : 3.f);
            if (t == 4) v = 0; /* a zero row */
            if (t == 5 && i % 3 == 0) v = -0.0f;
            x[(size_t)t * (size_t)n + (size_t)i] = v;
        }
    return x;
}

static int same_bits(const float *a, const float *b, size_t n, size_t *where) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float))) {
            *where = i;
            return 0;
        }
    return 1;
}

/* every ISA against scalar on one shape, through kernels_gemm on a row sub-range */
static void gemm_case(uint32_t wt, int64_t n, int64_t rows, int T, int64_t r0, int64_t r1) {
    matrix W;
    void *data = make_weights(wt, n, rows, &W);
    float *X = make_acts(n, T);
    void *buf = malloc(kact_bytes(wt, n, T) + 64);
    kact x;
    kact_prepare(&x, wt, X, n, T, buf);
    float *ref = malloc(sizeof(float) * (size_t)rows * (size_t)T), *got = malloc(sizeof(float) * (size_t)rows * (size_t)T);
    float *blockint_ref = malloc(sizeof(float) * (size_t)rows * (size_t)T);
    for (size_t i = 0; i < (size_t)rows * (size_t)T; i++) ref[i] = got[i] = 12345.f;
    kernels_select("scalar");
    kernels_gemm(&W, r0, r1, &x, ref, rows);
    for (const char *const *isa = kernels_available(); *isa; isa++) {
        if (!strcmp(*isa, "scalar")) continue;
        kernels_select(*isa);
        float *want = ref;
        if (kernels_blockint(wt)) { /* this set's own order for wt: its scalar reference */
            want = blockint_ref;
            for (size_t i = 0; i < (size_t)rows * (size_t)T; i++) want[i] = 12345.f;
            kernels_gemm_reference(&W, r0, r1, &x, want, rows);
        }
        for (size_t i = 0; i < (size_t)rows * (size_t)T; i++) got[i] = 12345.f;
        kernels_gemm(&W, r0, r1, &x, got, rows);
        size_t at = 0;
        int ok = same_bits(want, got, (size_t)rows * (size_t)T, &at);
        CHECK(ok, "%s %s n=%lld rows=%lld [%lld,%lld) T=%d: token %zu row %zu: %.9g vs reference %.9g", *isa,
              ggml_type_name(wt), (long long)n, (long long)rows, (long long)r0, (long long)r1, T, at / (size_t)rows,
              at % (size_t)rows, got[at], want[at]);
    }
    kernels_select("auto");
    free(ref);
    free(got);
    free(blockint_ref);
    free(buf);
    free(X);
    free(data);
}

static void test_gemm_bits(void) {
    for (int k = 0; k < N_TYPES; k++) {
        const uint32_t wt = types[k];
        const int blk = (int)ggml_blck_size(wt);
        int64_t ns[6];
        int nn = 0;
        if (blk == 1) {
            const int64_t f[] = {1, 15, 16, 17, 100, 1024};
            for (int i = 0; i < 6; i++) ns[nn++] = f[i];
        } else {
            ns[nn++] = blk;
            ns[nn++] = 2 * blk;
            ns[nn++] = 3 * blk;
            ns[nn++] = blk == 32 ? 1024 : 1024;
        }
        for (int i = 0; i < nn; i++) {
            for (int T = 1; T <= 17; T++) gemm_case(wt, ns[i], T % 4 == 0 ? 6 : 5, T, 0, T % 4 == 0 ? 6 : 5);
            gemm_case(wt, ns[i], 7, 1, 1, 6);  /* sub-range starting on an odd row */
            gemm_case(wt, ns[i], 9, 33, 2, 9); /* many tokens */
        }
        /* whole tiles of 16 rows (the AMX set, AVX-512's many-token Q8_0-style kernel) and a
         * tail, from an odd first row, for one token, a few, one and two full token groups
         * and partial ones (16-33 tokens end in tiles of 1 to 4 of AVX-512's 5) */
        const int tile_T[] = {1, 2, 7, 16, 17, 19, 33};
        for (size_t i = 0; i < sizeof tile_T / sizeof tile_T[0]; i++) gemm_case(wt, 2 * blk * 16, 53, tile_T[i], 3, 53);
        /* enough rows for several L2 chunks with many tokens */
        gemm_case(wt, blk == 1 ? 512 : 1024, blk == 1 ? 130 : 401, 29, 0, blk == 1 ? 130 : 401);
    }
}

/* The K-quants at their extremes: every weight at its largest value (Q4_K 15, Q5_K 31, Q6_K
 * 63 and the same with the sign of the scales flipped) against activations that quantize to
 * -127 or +127 in runs of 4, so that a lane of 4 products reaches 4 * 63 * 127 = 32004 and the
 * lanes do not cancel each other out: the
 * one-token kernels hold such a lane in a 16-bit word (word_pairs in kernels_avx512.c), and a
 * wider lane or a saturating step would show here. 1, 2 and 3 tokens, every set against the
 * scalar reference. */
static void test_kquant_extremes(void) {
    const uint32_t wts[] = {GGML_Q4_K, GGML_Q5_K, GGML_Q6_K};
    const int64_t n = 2 * QK_K, rows = 6;
    for (size_t k = 0; k < sizeof wts / sizeof wts[0]; k++) {
        const uint32_t wt = wts[k];
        const size_t rb = quant_row_bytes(wt, n);
        uint8_t *data = malloc(rb * (size_t)rows);
        memset(data, 0xFF, rb * (size_t)rows); /* every quant bit and packed scale/min at its maximum */
        for (int64_t r = 0; r < rows; r++)
            for (int64_t b = 0; b < n / QK_K; b++) {
                uint8_t *blk = data + (size_t)r * rb + (size_t)b * ggml_type_size(wt);
                const fp16_t one = 0x3C00, half = 0x3800;
                if (wt == GGML_Q6_K) {
                    block_q6_K *q = (block_q6_K *)blk;
                    q->d = one;
                    for (int j = 0; j < QK_K / 16; j++) q->scales[j] = (int8_t)(r % 2 ? -128 : 127);
                } else {
                    memcpy(blk, &one, 2); /* d */
                    memcpy(blk + 2, &half, 2); /* dmin */
                }
            }
        matrix W = {data, wt, n, rows, rb};
        for (int T = 1; T <= 3; T++) {
            float *X = malloc(sizeof(float) * (size_t)n * (size_t)T);
            for (int t = 0; t < T; t++)
                for (int64_t i = 0; i < n; i++) /* all +1, all -1, then runs of 4 of mostly +1 */
                    X[(size_t)t * (size_t)n + (size_t)i] = t == 1 || (t == 2 && i / 4 % 3 == 0) ? -1.0f : 1.0f;
            void *buf = malloc(kact_bytes(wt, n, T) + 64);
            kact x;
            kact_prepare(&x, wt, X, n, T, buf);
            float ref[3 * 6], got[3 * 6];
            kernels_select("scalar");
            kernels_gemm(&W, 0, rows, &x, ref, rows);
            for (const char *const *isa = kernels_available(); *isa; isa++) {
                kernels_select(*isa);
                if (kernels_blockint(wt)) continue;
                kernels_gemm(&W, 0, rows, &x, got, rows);
                size_t at = 0;
                CHECK(same_bits(ref, got, (size_t)rows * (size_t)T, &at), "%s %s extremes T=%d: token %zu row %zu: %.9g vs %.9g",
                      *isa, ggml_type_name(wt), T, at / rows, at % rows, got[at], ref[at]);
            }
            kernels_select("auto");
            free(buf);
            free(X);
        }
        free(data);
    }
}

/* activation preparation (quantize_activation + aux) is identical on every path */
static void test_prep(void) {
    const uint32_t wts[] = {GGML_Q8_0, GGML_Q4_K, GGML_Q4_1, GGML_F16, GGML_BF16, GGML_F32};
    const int64_t n = 1024;
    const int T = 9;
    float *X = make_acts(n, T);
    /* edge cases: halves that round to even, equal magnitudes of both signs (Q8_K takes the
     * first), a lone tiny value, huge values */
    for (int64_t i = 0; i < 64; i++) X[n * 6 + i] = (float)(i % 7) - 3.5f;
    X[n * 7 + 3] = -2.0f, X[n * 7 + 9] = 2.0f;
    X[n * 7 + 300] = 2.0f, X[n * 7 + 301] = -2.0f;
    X[n * 8 + 5] = 1e-30f;
    X[n * 8 + 700] = 3e38f;
    for (size_t k = 0; k < sizeof wts / sizeof wts[0]; k++) {
        const size_t bytes = kact_bytes(wts[k], n, T);
        if (!bytes) continue;
        uint8_t *ref = calloc(1, bytes), *got = calloc(1, bytes);
        kact x;
        kernels_select("scalar");
        kact_prepare(&x, wts[k], X, n, T, ref);
        for (const char *const *isa = kernels_available(); *isa; isa++) {
            kernels_select(*isa);
            memset(got, 0, bytes);
            kact_prepare(&x, wts[k], X, n, T, got);
            size_t at = 0;
            while (at < bytes && ref[at] == got[at]) at++;
            CHECK(at == bytes, "activations for %s prepared on %s differ at byte %zu (row %zu)", ggml_type_name(wts[k]),
                  *isa, at, at / x.stride);
        }
        free(ref);
        free(got);
    }
    kernels_select("auto");
    free(X);
}

/* matmul / matmul_multi through the pool with 1 and 2 threads equal the scalar result */
/* Y = W X by the active set's scalar reference (kernels_gemm_reference) */
static void reference_matmul(const matrix *W, const float *X, int T, float *Y) {
    void *buf = malloc(kact_bytes(W->type, W->n_in, T) + 64);
    kact x;
    kact_prepare(&x, W->type, X, W->n_in, T, buf);
    kernels_gemm_reference(W, 0, W->n_out, &x, Y, W->n_out);
    free(buf);
}

static void test_matmul_threads(void) {
    const int64_t n = 512;
    const int T_list[] = {1, 3, 40};
    for (int k = 0; k < N_TYPES; k++) {
        const uint32_t wt = types[k];
        matrix A, B;
        void *da = make_weights(wt, n, 70, &A), *db = make_weights(types[(k + 3) % N_TYPES], n, 33, &B);
        for (size_t ti = 0; ti < sizeof T_list / sizeof T_list[0]; ti++) {
            const int T = T_list[ti];
            float *X = make_acts(n, T);
            float *ra = malloc(sizeof(float) * 70 * (size_t)T), *rb = malloc(sizeof(float) * 33 * (size_t)T);
            float *ga = malloc(sizeof(float) * 70 * (size_t)T), *gb = malloc(sizeof(float) * 33 * (size_t)T);
            for (const char *const *isa = kernels_available(); *isa; isa++) {
                kernels_select(*isa);
                reference_matmul(&A, X, T, ra);
                reference_matmul(&B, X, T, rb);
                for (int th = 1; th <= 2; th++) {
                    pool_set_threads(th);
                    const matrix *Ws[2] = {&A, &B};
                    float *Ys[2] = {ga, gb};
                    matmul_multi(2, Ws, Ys, X, T);
                    size_t at;
                    CHECK(same_bits(ra, ga, 70 * (size_t)T, &at) && same_bits(rb, gb, 33 * (size_t)T, &at),
                          "matmul_multi %s+%s on %s with %d threads, T=%d differs from the scalar reference",
                          ggml_type_name(wt), ggml_type_name(B.type), *isa, th, T);
                }
            }
            free(X);
            free(ra);
            free(rb);
            free(ga);
            free(gb);
        }
        free(da);
        free(db);
    }
    kernels_select("auto");
    pool_set_threads(2);
}

/* Mixture-of-experts products (matmul_parts): tokens routed to 3 of 7 experts each, each
 * chosen expert run over its tokens (gathered out of a per-token preparation, or the
 * token's own row when alone) in one job, equal each token's product with its expert by
 * the scalar reference, bit for bit, on every path with 1 and 2 threads. */
static void test_matmul_parts(void) {
    enum { X = 7, K = 3, T = 13, ROWS = 40 };
    const int64_t n = 512;
    for (int k = 0; k < N_TYPES; k++) {
        const uint32_t wt = types[k];
        matrix all;
        void *data = make_weights(wt, n, (int64_t)X * ROWS, &all);
        const expert_matrix ex = {{all.data, wt, n, ROWS, all.row_bytes}, X, all.row_bytes * ROWS};
        float *Xs = make_acts(n, T);
        int sel[T][K];
        for (int t = 0; t < T; t++)
            for (int j = 0; j < K; j++) sel[t][j] = (t + 2 * j) % (X - 2);
        sel[7][2] = X - 2, sel[3][2] = X - 1; /* two experts with one token each (not the first) */
        float *ref = malloc(sizeof(float) * T * K * ROWS), *got = malloc(sizeof(float) * T * K * ROWS);
        void *buf = malloc(kact_bytes(wt, n, T) + 64);
        for (const char *const *isa = kernels_available(); *isa; isa++) {
            kernels_select(*isa);
            kact x;
            kact_prepare(&x, wt, Xs, n, T, buf);
            uint8_t *gbuf = malloc(kact_gather_bytes(&x, T * K)); /* room for every (token, slot) */
            for (int t = 0; t < T; t++)
                for (int j = 0; j < K; j++) {
                    const matrix W = expert_view(&ex, sel[t][j]);
                    const kact one = kact_slice(&x, t, 1);
                    kernels_gemm_reference(&W, 0, ROWS, &one, ref + (size_t)(t * K + j) * ROWS, ROWS);
                }
            for (int th = 1; th <= 2; th++) {
                pool_set_threads(th);
                /* grouped rows: expert e's (token, slot) pairs in token order */
                matmul_part parts[X];
                int np = 0, row = 0, where[T][K], toks[T];
                uint8_t *g = gbuf;
                for (int e = 0; e < X; e++) {
                    int cnt = 0;
                    for (int t = 0; t < T; t++)
                        for (int j = 0; j < K; j++)
                            if (sel[t][j] == e) toks[cnt++] = t, where[t][j] = row + cnt - 1;
                    if (!cnt) continue;
                    kact xe;
                    if (cnt == 1) {
                        xe = kact_slice(&x, toks[0], 1);
                    } else {
                        kact_gather(&xe, &x, toks, cnt, g);
                        g += kact_gather_bytes(&x, cnt);
                    }
                    parts[np++] = (matmul_part){expert_view(&ex, e), 0, ROWS, xe, got + (size_t)row * ROWS, ROWS};
                    row += cnt;
                }
                matmul_parts(parts, np);
                int bad = 0;
                for (int t = 0; t < T; t++)
                    for (int j = 0; j < K; j++)
                        bad += memcmp(got + (size_t)where[t][j] * ROWS, ref + (size_t)(t * K + j) * ROWS,
                                      sizeof(float) * ROWS) != 0;
                CHECK(bad == 0, "matmul_parts %s on %s with %d threads: %d of %d products differ from the reference",
                      ggml_type_name(wt), *isa, th, bad, T * K);
            }
            free(gbuf);
        }
        free(ref);
        free(got);
        free(buf);
        free(Xs);
        free(data);
    }
    kernels_select("auto");
    pool_set_threads(2);
}

/* the reference is a dot product: compare with the float dot of dequantized values */
static void test_ref_is_dot(void) {
    const int64_t n = 1024;
    float *w = malloc(sizeof(float) * n), *xd = malloc(sizeof(float) * n);
    for (int k = 0; k < N_TYPES; k++) {
        const uint32_t wt = types[k], dt = quant_dot_type(wt);
        matrix W;
        void *data = make_weights(wt, n, 4, &W);
        float *X = make_acts(n, 1);
        void *xq = malloc(quant_row_bytes(dt, n));
        quantize_activation(dt, X, xq, n);
        dequantize_row(dt == GGML_Q8_1 ? GGML_Q8_0 : dt, xq, xd, n); /* q8_1 starts like q8_0 with 2 more bytes */
        if (dt == GGML_Q8_1) {
            const block_q8_1 *b = xq;
            for (int64_t i = 0; i < n; i++) xd[i] = fp16_to_f32(b[i / 32].d) * b[i / 32].qs[i % 32];
        }
        if (dt == GGML_Q8_K) {
            const block_q8_K *b = xq;
            for (int64_t i = 0; i < n; i++) xd[i] = b[i / 256].d * b[i / 256].qs[i % 256];
        }
        for (int r = 0; r < 4; r++) {
            dequantize_row(wt, (const uint8_t *)data + W.row_bytes * (size_t)r, w, n);
            double exact = 0, mag = 0;
            for (int64_t i = 0; i < n; i++) {
                exact += (double)w[i] * xd[i];
                mag += fabs((double)w[i] * xd[i]);
            }
            if (dt == GGML_Q8_1) { /* llama.cpp uses s = fp16(d * sum(q)) for the min term */
                const block_q8_1 *b = xq;
                for (int64_t i = 0; i < n / 32; i++) {
                    const uint8_t *wb = (const uint8_t *)data + W.row_bytes * (size_t)r +
                                        (size_t)i * ggml_type_size(wt);
                    const float m = fp16_to_f32(((const fp16_t *)wb)[1]); /* d, m lead both Q4_1 and Q5_1 */
                    double sx = 0;
                    for (int j = 0; j < 32; j++) sx += xd[32 * i + j];
                    exact += m * (fp16_to_f32(b[i].s) - sx);
                }
            }
            const float got = vec_dot_ref(wt, n, (const uint8_t *)data + W.row_bytes * (size_t)r, xq);
            CHECK(fabs(got - exact) <= 1e-4 * mag + 1e-6, "%s row %d: reference dot %.7g vs %.7g", ggml_type_name(wt),
                  r, got, exact);
        }
        free(xq);
        free(X);
        free(data);
    }
    free(w);
    free(xd);
}

/* dequantize(quantize(x)) ~ x with the precision of each format */
static void test_roundtrip(void) {
    const int64_t n = 4096;
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    void *q = malloc(n * 4);
    for (int64_t i = 0; i < n; i++) x[i] = gauss();
    static const struct {
        uint32_t t;
        double rel; /* rms error / rms value at most */
    } lim[] = {{GGML_F32, 0}, {GGML_F16, 1e-3}, {GGML_BF16, 5e-3}, {GGML_Q8_0, 0.01}, {GGML_Q4_0, 0.15},
               {GGML_Q5_0, 0.08}, {GGML_Q4_1, 0.15}, {GGML_Q5_1, 0.08}, {GGML_Q4_K, 0.12}, {GGML_Q5_K, 0.06},
               {GGML_Q6_K, 0.03}};
    for (size_t k = 0; k < sizeof lim / sizeof lim[0]; k++) {
        REQUIRE(quantize_row_weight(lim[k].t, x, q, n) == 0, "quantize %s", ggml_type_name(lim[k].t));
        dequantize_row(lim[k].t, q, y, n);
        double e = 0, s = 0;
        for (int64_t i = 0; i < n; i++) {
            e += (double)(y[i] - x[i]) * (y[i] - x[i]);
            s += (double)x[i] * x[i];
        }
        const double rel = sqrt(e / s);
        printf("  %-5s round trip: rms error %.4f of rms value\n", ggml_type_name(lim[k].t), rel);
        CHECK(rel <= lim[k].rel, "%s round trip error %g > %g", ggml_type_name(lim[k].t), rel, lim[k].rel);
    }
    /* a block of zeros stays zero, and a constant block is exact in the formats with a min */
    memset(x, 0, sizeof(float) * 256);
    for (size_t k = 0; k < sizeof lim / sizeof lim[0]; k++) {
        quantize_row_weight(lim[k].t, x, q, 256);
        dequantize_row(lim[k].t, q, y, 256);
        int zero = 1;
        for (int i = 0; i < 256; i++) zero &= y[i] == 0;
        CHECK(zero, "%s: zeros do not round-trip", ggml_type_name(lim[k].t));
    }
    /* activation quantizers: blocks decode back to x */
    for (int64_t i = 0; i < n; i++) x[i] = gauss();
    quantize_activation(GGML_Q8_K, x, q, n);
    const block_q8_K *bk = q;
    double e = 0;
    int bs_ok = 1;
    for (int64_t b = 0; b < n / 256; b++) {
        for (int j = 0; j < 16; j++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += bk[b].qs[16 * j + l];
            bs_ok &= s == bk[b].bsums[j];
        }
        for (int l = 0; l < 256; l++) e = fmax(e, fabs(bk[b].d * bk[b].qs[l] - x[256 * b + l]));
    }
    CHECK(bs_ok, "Q8_K bsums are not the sums of their 16 values");
    CHECK(e < 0.05, "Q8_K activations decode with error %g", e);
    quantize_activation(GGML_Q8_0, x, q, n);
    dequantize_row(GGML_Q8_0, q, y, n);
    e = 0;
    for (int64_t i = 0; i < n; i++) e = fmax(e, fabs(y[i] - x[i]));
    CHECK(e < 0.05, "Q8_0 activations decode with error %g", e);
    free(x);
    free(y);
    free(q);
}

static void test_sum(void) {
    const size_t n = 100003;
    float *x = malloc(sizeof(float) * n);
    double exact = 0;
    for (size_t i = 0; i < n; i++) exact += x[i] = (float)(i % 17);
    for (const char *const *isa = kernels_available(); *isa; isa++) {
        kernels_select(*isa);
        CHECK(fabs(kernels_sum_floats(x, n) - exact) < 1, "%s: sum %g vs %g", *isa, kernels_sum_floats(x, n), exact);
    }
    kernels_select("auto");
    free(x);
}

/* ---- vector ops: every ISA's version equals ops.c's scalar reference bit for bit ---- */

#define N_ISA_MAX 4
typedef void (*op_case)(float *out, size_t *n_out); /* runs an op, writes its results */

static void compare_isas(const char *what, op_case f, size_t cap) {
    float *ref = malloc(sizeof(float) * cap), *got = malloc(sizeof(float) * cap);
    size_t nr = 0, ng = 0, at = 0;
    kernels_select("scalar");
    f(ref, &nr);
    for (const char *const *isa = kernels_available(); *isa; isa++) {
        if (!strcmp(*isa, "scalar")) continue;
        kernels_select(*isa);
        f(got, &ng);
        int ok = ng == nr && same_bits(ref, got, nr, &at);
        CHECK(ok, "%s on %s differs from the reference at %zu: %.9g vs %.9g", what, *isa, at, got[at], ref[at]);
    }
    kernels_select("auto");
    free(ref);
    free(got);
}

/* exp_vec over a sweep of bit patterns (through vec_softmax_exp with max 0) */
#define EXP_N (1 << 20)
static float *exp_in;
static void case_exp(float *out, size_t *n) {
    double s = vec_softmax_exp(out, exp_in, 0.0f, EXP_N);
    out[EXP_N] = (float)s;
    *n = EXP_N + 1;
}

static float *vx, *vg; /* inputs of the elementwise cases */
static void case_silu(float *out, size_t *n) {
    size_t k = 0;
    for (int len = 1; len <= 70; len += 3) {
        vec_silu(out + k, vx, len);
        k += (size_t)len;
        vec_swiglu(out + k, vx + 100, vg, len);
        k += (size_t)len;
        const double sum = vec_softmax_exp(out + k, vx + 7, 0.5f, len);
        k += (size_t)len;
        out[k++] = (float)sum;
    }
    *n = k;
}

/* ReLU^2 over every length to 70 (the vector body and the tail), with NaN, -0, infinities
 * and subnormals among the values */
static void case_relu2(float *out, size_t *n) {
    float in[80];
    memcpy(in, vx, sizeof in);
    const float special[] = {NAN, -0.0f, 0.0f, INFINITY, -INFINITY, 1e-30f, -1e-30f, 1e-40f, -NAN};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) in[7 * i + 3] = special[i];
    size_t k = 0;
    for (int len = 1; len <= 70; len++) {
        vec_relu2(out + k, in, (size_t)len);
        k += (size_t)len;
    }
    *n = k;
}

static void case_dot(float *out, size_t *n) {
    size_t k = 0;
    const int lens[] = {1, 15, 16, 63, 64, 65, 80, 127, 128, 129, 200, 256, 333};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        out[k++] = dot_ggml(vx, vg, lens[i]);
        float y[400];
        memcpy(y, vg, sizeof y);
        mad_ggml(y, vx, 0.37f, lens[i]);
        memcpy(out + k, y, sizeof(float) * (size_t)lens[i]);
        k += (size_t)lens[i];
    }
    *n = k;
}

static void case_gdn(float *out, size_t *n) {
    size_t k = 0;
    const int dks[] = {128, 64, 16, 80};
    for (size_t i = 0; i < sizeof dks / sizeof dks[0]; i++) {
        const int dk = dks[i], dv = dk;
        float *S = malloc(sizeof(float) * (size_t)dk * dv), o[128];
        for (int j = 0; j < dk * dv; j++) S[j] = vx[j % 1000] * 0.3f;
        for (int tok = 0; tok < 3; tok++) {
            gdn_head_step(S, dk, dv, vx + 10 * tok, vg + 5 * tok, vx + 500 + tok, 0.97f - 0.1f * tok, 0.6f,
                          1.0f / sqrtf((float)dk), o);
            memcpy(out + k, o, sizeof(float) * (size_t)dv);
            k += (size_t)dv;
        }
        memcpy(out + k, S, sizeof(float) * (size_t)dk * dv);
        k += (size_t)dk * dv;
        free(S);
    }
    *n = k;
}

/* the weighted sum in one piece (as a single (token, head) over its whole cache) */
static void wsum_whole(float *o, const float *V, size_t stride, const float *p, int n, int hd) {
    float *acc = calloc(ATTN_ACC_FLOATS(hd), sizeof(float));
    attn_wsum_acc(acc, V, stride, p, n, hd);
    attn_wsum_finish(o, acc, hd);
    free(acc);
}

static void case_wsum(float *out, size_t *n) {
    size_t k = 0;
    const int hds[] = {256, 64, 72, 20};
    for (size_t h = 0; h < 4; h++)
        for (int len = 1; len <= 40; len += 3) {
            wsum_whole(out + k, vx, 300, vg, len, hds[h]);
            k += (size_t)hds[h];
        }
    const int hl[] = {256, 128, 48, 20};
    for (size_t h = 0; h < 4; h++)
        for (int len = 60; len <= 71; len++) {
            wsum_whole(out + k, vx, 260, vg, len, hl[h]);
            k += (size_t)hl[h];
        }
    *n = k;
}

/* the weighted sum in pieces of 16k positions (blocked attention) == in one go, per ISA */
static void case_wsum_pieces(float *out, size_t *n) {
    size_t k = 0;
    const int hds[] = {256, 64, 48, 20};
    float *acc = malloc(sizeof(float) * ATTN_ACC_FLOATS(256));
    for (size_t h = 0; h < 4; h++)
        for (int len = 1; len <= 71; len += 7) {
            memset(acc, 0, sizeof(float) * ATTN_ACC_FLOATS(hds[h]));
            for (int i0 = 0; i0 < len; i0 += 32)
                attn_wsum_acc(acc, vx + (size_t)i0 * 260, 260, vg + i0, len - i0 < 32 ? len - i0 : 32, hds[h]);
            attn_wsum_finish(out + k, acc, hds[h]);
            float whole[256];
            wsum_whole(whole, vx, 260, vg, len, hds[h]);
            CHECK(!memcmp(whole, out + k, sizeof(float) * (size_t)hds[h]), "wsum in pieces == whole (hd %d, n %d)",
                  hds[h], len);
            k += (size_t)hds[h];
        }
    free(acc);
    *n = k;
}

static void case_scores(float *out, size_t *n) {
    size_t k = 0;
    const int hds[] = {256, 128, 64, 20, 96, 72, 200};
    for (size_t h = 0; h < 7; h++)
        for (int len = 1; len <= 70; len += 3) {
            attn_scores(out + k, vx, 260, vg + 7, len, hds[h], 0.0625f);
            k += (size_t)len;
        }
    *n = k;
}

/* the scores in tinyBLAS's lane order (an F16/BF16 cache): the vector sets as the scalar */
static void case_scores_lanes(float *out, size_t *n) {
    size_t k = 0;
    const int hds[] = {256, 128, 64, 16, 48};
    for (size_t h = 0; h < 5; h++)
        for (int len = 1; len <= 70; len += 3) {
            attn_scores_lanes(out + k, vx, 260, vg + 7, len, hds[h], 0.0625f);
            k += (size_t)len;
        }
    *n = k;
}

/* a row of an F16 cache stored and widened again (kv_type.h): every set rounds to nearest
 * even and widens exactly, including subnormals, infinities and what overflows */
static void case_kv_f16(float *out, size_t *n) {
    const int N = 1003;
    uint16_t *h = malloc(sizeof(uint16_t) * N);
    float *x = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) x[i] = vx[i] * (i % 5 == 0 ? 1e-6f : i % 7 == 0 ? 3e4f : 1.0f);
    x[0] = INFINITY, x[1] = -0.0f, x[2] = 70000.f, x[3] = 6e-8f;
    kv_row_store(KV_F16, x, h, N);
    kv_rows_to_f32(KV_F16, (const uint8_t *)h, 0, out, 1, N);
    for (int i = 0; i < N; i++) {
        const uint16_t want = f32_to_fp16(x[i]);
        if (h[i] != want || memcmp(&out[i], &(float){fp16_to_f32(want)}, sizeof(float))) {
            CHECK(0, "half %d: %g stored as %04x (want %04x)", i, x[i], h[i], want);
            break;
        }
    }
    free(h);
    free(x);
    *n = (size_t)N;
}

/* attn_scores_multi == attn_scores per query, bit for bit (the multi-query kernels load
 * each K row once for several queries; each keeps its own sums), for 1..8 queries */
static const int multi_lens[] = {1, 2, 15, 16, 17, 33, 70};
static void case_scores_multi(float *out, size_t *n) {
    size_t k = 0;
    const int hds[] = {256, 128, 64, 192, 20};
    float one[70];
    for (size_t h = 0; h < 5; h++)
        for (size_t li = 0; li < sizeof multi_lens / sizeof *multi_lens; li++)
            for (int nq = 1; nq <= 8; nq++) {
                const int len = multi_lens[li];
                float *s[8];
                const float *q[8];
                for (int r = 0; r < nq; r++) s[r] = out + k + (size_t)r * len, q[r] = vg + 300 * r + 5;
                attn_scores_multi(s, vx, 260, q, nq, len, hds[h], 0.0625f);
                for (int r = 0; r < nq; r++) {
                    attn_scores(one, vx, 260, q[r], len, hds[h], 0.0625f);
                    CHECK(!memcmp(one, s[r], sizeof(float) * (size_t)len),
                          "scores of query %d of %d == alone (hd %d, n %d)", r, nq, hds[h], len);
                }
                k += (size_t)nq * len;
            }
    *n = k;
}

/* attn_wsum_acc_multi == attn_wsum_acc per pair, in two pieces (the second adds to the
 * partial sums of the first), for 1..8 pairs */
static void case_wsum_multi(float *out, size_t *n) {
    size_t k = 0;
    const int hds[] = {256, 128, 72, 64, 48, 40, 20};
    const size_t accn = ATTN_ACC_FLOATS(256);
    float *acc = malloc(sizeof(float) * accn * 9), *one = acc + 8 * accn;
    for (size_t h = 0; h < 7; h++)
        for (size_t li = 0; li < sizeof multi_lens / sizeof *multi_lens; li++)
            for (int np = 1; np <= 8; np++) {
                const int len = multi_lens[li], hd = hds[h];
                float *a[8];
                const float *p[8], *p2[8];
                memset(acc, 0, sizeof(float) * accn * 8);
                for (int r = 0; r < np; r++) a[r] = acc + r * accn, p[r] = vg + 100 * r + 3, p2[r] = p[r] + 32;
                attn_wsum_acc_multi(a, vx, 260, p, np, len < 32 ? len : 32, hd);
                if (len > 32) attn_wsum_acc_multi(a, vx + 32 * 260, 260, p2, np, len - 32, hd);
                for (int r = 0; r < np; r++) {
                    memset(one, 0, sizeof(float) * accn);
                    attn_wsum_acc(one, vx, 260, p[r], len < 32 ? len : 32, hd);
                    if (len > 32) attn_wsum_acc(one, vx + 32 * 260, 260, p2[r], len - 32, hd);
                    CHECK(!memcmp(one, a[r], sizeof(float) * ATTN_ACC_FLOATS(hd)),
                          "wsum of pair %d of %d == alone (hd %d, n %d)", r, np, hd, len);
                    attn_wsum_finish(out + k, a[r], hd);
                    k += (size_t)hd;
                }
            }
    free(acc);
    *n = k;
}

static void case_conv(float *out, size_t *n) {
    float st[300 * 3], w[300 * 4];
    for (int i = 0; i < 900; i++) st[i] = vx[i];
    for (int i = 0; i < 1200; i++) w[i] = vg[i];
    size_t k = 0;
    for (int t = 0; t < 5; t++) {
        conv_step(st, w, 300, 4, vx + 1000 + 300 * t, out + k);
        k += 300;
    }
    memcpy(out + k, st, sizeof st);
    k += 900;
    /* several tokens at once (the vectorized prefill form), including fewer than K (the
     * 16-channel form of few tokens, and its scalar tail: 300 = 18 x 16 + 12) */
    const int lens[] = {9, 2, 3, 5};
    for (int i = 0; i < 4; i++) {
        conv_causal(st, w, 300, 4, vx + 3000, 310, out + k, 300, lens[i]);
        k += 300 * (size_t)lens[i];
        memcpy(out + k, st, sizeof st);
        k += 900;
    }
    *n = k;
}

/* Mamba-2's state rows: whole blocks of 64, a tail, both; three tokens so the state carries */
static void case_scan(float *out, size_t *n) {
    size_t k = 0;
    const int lens[] = {1, 7, 64, 100, 128, 256};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        const int len = lens[i];
        float st[256];
        for (int e = 0; e < len; e++) st[e] = vx[2000 + e] * 0.5f;
        for (int tok = 0; tok < 3; tok++) {
            out[k++] = ssm_scan_row(st, vx + 300 * tok, vg + 700 + 300 * tok, 0.93f - 0.2f * tok, vx[50 + tok], len);
            memcpy(out + k, st, sizeof(float) * (size_t)len);
            k += (size_t)len;
        }
    }
    *n = k;
}

/* Mamba-1's channels: d_state 16 (the vector sets' own form, 37 channels: two blocks of 16
 * or four of 8 and a rest) and an odd 5 (the reference everywhere), dt across softplus's
 * threshold (20), A negative as -exp(A_log); three tokens so the state carries. The same
 * bits on every set; the reference against llama.cpp is test_parity_archs' mamba fixture. */
static void case_scan1(float *out, size_t *n) {
    size_t k = 0;
    const int states[] = {16, 5};
    for (size_t i = 0; i < sizeof states / sizeof states[0]; i++) {
        const int N = states[i], D = 40;
        float S[40 * 16], A[40 * 16], dt[40], y[40];
        for (int e = 0; e < D * N; e++) S[e] = vx[3000 + e] * 0.5f, A[e] = -expf(vg[4000 + e]);
        for (int tok = 0; tok < 3; tok++) {
            for (int d = 0; d < D; d++) dt[d] = vx[5000 + 40 * tok + d] * (d == 7 ? 12.f : 1.f);
            ssm_scan1(S, A, vx + 6000 + 50 * tok, vg + 6000 + 50 * tok, dt, vx + 7000 + 50 * tok, y, 3, D, N);
            memcpy(out + k, y + 3, sizeof(float) * (D - 3));
            k += D - 3;
            memcpy(out + k, S, sizeof(float) * (size_t)(D * N));
            k += (size_t)(D * N);
        }
    }
    *n = k;
}

/* ssm_scan1's exponentials over a sweep like exp_vec's: with state 1, B = 0 and dt = 32
 * (softplus passes it through) a channel's new state is expf(32 a) for each of its a */
#define SCAN1_EXP_D 65536
static void case_scan1_exp(float *out, size_t *n) {
    const int N = 16, D = SCAN1_EXP_D;
    float *A = malloc(sizeof(float) * (size_t)(D * N)), *dt = malloc(sizeof(float) * D), *x = malloc(sizeof(float) * D);
    float B[16] = {0}, C[16] = {0};
    for (int i = 0; i < D * N; i++) A[i] = exp_in[i % EXP_N] / 32.f, out[i] = 1.0f;
    for (int d = 0; d < D; d++) dt[d] = 32.f, x[d] = 1.f;
    ssm_scan1(out, A, B, C, dt, x, out + D * N, 0, D, N);
    *n = (size_t)(D * N + D);
    free(A), free(dt), free(x);
}

static void test_ops(void) {
    exp_in = malloc(sizeof(float) * EXP_N);
    for (uint32_t i = 0; i < EXP_N; i++) {
        uint32_t bits = i * 4099u + 17u; /* all exponents and signs */
        float f;
        memcpy(&f, &bits, 4);
        if (f != f) f = 1.0f; /* no NaNs */
        if (i % 4 == 0) f = -110.f + 220.f * (float)i / EXP_N; /* dense over the interesting range */
        exp_in[i] = f;
    }
    exp_in[0] = INFINITY, exp_in[1] = -INFINITY, exp_in[2] = 0.0f, exp_in[3] = -0.0f;
    compare_isas("exp_vec", case_exp, EXP_N + 1);
    vx = malloc(sizeof(float) * 20000);
    vg = malloc(sizeof(float) * 20000);
    for (int i = 0; i < 20000; i++) {
        vx[i] = gauss() * (i % 9 == 0 ? 30.f : 2.f);
        vg[i] = gauss();
    }
    compare_isas("silu/swiglu/softmax", case_silu, 10000);
    compare_isas("relu2", case_relu2, 3000);
    compare_isas("dot_ggml/mad_ggml", case_dot, 10000);
    compare_isas("gdn_head_step", case_gdn, 40000);
    compare_isas("attention weighted sum", case_wsum, 20000);
    compare_isas("attn_scores", case_scores, 20000);
    compare_isas("attn_scores_lanes", case_scores_lanes, 20000);
    compare_isas("an F16 cache row", case_kv_f16, 1003);
    compare_isas("attn_wsum_acc/attn_wsum_finish", case_wsum_pieces, 20000);
    compare_isas("attn_scores_multi", case_scores_multi, 40000);
    compare_isas("attn_wsum_acc_multi", case_wsum_multi, 200000);
    compare_isas("conv_step/conv_causal", case_conv, 12000);
    compare_isas("ssm_scan_row", case_scan, 3000);
    compare_isas("ssm_scan1", case_scan1, 3 * (40 * 16 + 40) + 3 * (40 * 5 + 40));
    compare_isas("ssm_scan1's exponentials", case_scan1_exp, SCAN1_EXP_D * 17);
    /* attn_wsum_finish reduces each column's 16 lanes as reduce16_ref does */
    {
        const int hds[] = {256, 48, 20};
        float *acc = malloc(sizeof(float) * ATTN_ACC_FLOATS(256)), o[256];
        for (size_t h = 0; h < 3; h++) {
            for (size_t i = 0; i < ATTN_ACC_FLOATS(hds[h]); i++) acc[i] = vx[i % 20000] * (i % 7 == 0 ? 1e4f : 1.0f);
            attn_wsum_finish(o, acc, hds[h]);
            int same = 1;
            for (int c = 0; c < hds[h]; c++) {
                float lanes[16];
                for (int k = 0; k < 16; k++) lanes[k] = acc[(size_t)(c / 16) * 256 + k * 16 + c % 16];
                const float want = reduce16_ref(lanes);
                same &= !memcmp(&want, &o[c], sizeof want);
            }
            CHECK(same, "attn_wsum_finish == reduce16_ref of each column (hd %d)", hds[h]);
        }
        free(acc);
    }
    /* the ops agree with plain math */
    kernels_select("auto");
    float y[64];
    vec_silu(y, vx, 64);
    double e = 0;
    for (int i = 0; i < 64; i++) e = fmax(e, fabs(y[i] - vx[i] / (1 + exp(-(double)vx[i]))));
    CHECK(e < 1e-4, "silu is off by %g", e);
    free(exp_in);
    free(vx);
    free(vg);
}

int main(void) {
    printf("  kernel sets on this CPU:");
    for (const char *const *isa = kernels_available(); *isa; isa++) printf(" %s", *isa);
    printf("\n");
    pool_set_threads(2);
    test_roundtrip();
    test_ref_is_dot();
    test_prep();
    test_gemm_bits();
    test_kquant_extremes();
    test_matmul_threads();
    test_matmul_parts();
    test_sum();
    test_ops();
    pool_shutdown();
    return check_report("test_kernels");
}
