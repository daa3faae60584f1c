/* simd_avx512.c - the layer math (simd.h) with AVX-512 F/BW/VL/DQ: 16 floats a vector,
 * exactly the arithmetic of ops.c's scalar code. Built with the AVX-512 flags and
 * -ffp-contract=off; only called when the kernel set is AVX-512's (or AMX's, which
 * extends it), so only on CPUs that have them.
 *
 * Sections: exp's last step, dot_ggml, the ops shared with the AVX2 set (simd_lanes.h),
 * softmax's exponentials, the attention scores and weighted sums (one and several pairs per cache row), the update and
 * the delta rule, the causal convolution, the Mamba-2 and Mamba-1 scans (libm's expf for 16 floats). */
#include <immintrin.h>
#include <math.h>

#include "engine/layers/simd.h"

#define INLINE static inline __attribute__((always_inline))

/* the reference's 16-lane tree (quant.h reduce16_ref) spelled out: halves, quarters, pairs */
INLINE float reduce16(__m512 v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

/* exp_vec's last step (ldexpf(j, n)) on 16 lanes: VSCALEFPS rounds a subnormal result
 * once, as ldexpf does; 0 or infinity past |n| > 192 */
INLINE __m512 exp_scale(__m512 j, __m512 n) {
    __m512 r = _mm512_scalef_ps(j, n);
    const __mmask16 big = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192.0f), _CMP_GT_OQ);
    const __mmask16 pos = _mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_GT_OQ);
    r = _mm512_mask_mov_ps(r, big, _mm512_setzero_ps());
    return _mm512_mask_mov_ps(r, big & pos, _mm512_set1_ps(INFINITY));
}

/* dot_ggml: blocks of 64 into four 16-lane accumulators, (0+2) + (1+3), reduce16, then the
 * remainder with separate multiplies and adds (this file is built with -ffp-contract=off) */
INLINE float dot_ggml16(const float *x, const float *y, int n) {
    const int np = n & ~63;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int i = 0; i < np; i += 64) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 32), _mm512_loadu_ps(y + i + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 48), _mm512_loadu_ps(y + i + 48), a3);
    }
    return dot_ggml_tail(reduce16(_mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3))), x, y, np, n);
}

static float op_dot(const float *x, const float *y, int n) { return dot_ggml16(x, y, n); }

/* libm's expf of 8 doubles (simd_lanes.h's expf_libm_v takes 16 floats through it), bit
 * for bit glibc's (sysdeps/ieee754/flt-32/e_expf.c, since glibc 2.28, as its FMA build
 * compiles it: the reference's libm): x N/ln2 = k + r in double,
 * 2^(k/N) from its table of N = 32 (simd.h) and 2^(r/N) by its cubic, the same fused
 * multiply-adds, then one rounding to float. Lanes off that path take libm's expf.
 * Against Debian 12's glibc 2.36 every one of the 2^32 floats gave the same bits;
 * test_kernels compares a million of them with the libm at hand (through ssm_scan1). */
INLINE __m256 expf_libm_pd(__m512d xd) {
    const __m512d inv_ln2_n = _mm512_set1_pd(EXPF_LIBM_INV_LN2_N), shift = _mm512_set1_pd(EXPF_LIBM_SHIFT);
    __m512d kd = _mm512_fmadd_pd(inv_ln2_n, xd, shift);
    const __m512i ki = _mm512_castpd_si512(kd);
    kd = _mm512_sub_pd(kd, shift);
    const __m512d r = _mm512_fmsub_pd(inv_ln2_n, xd, kd);
    const __m512i lo = _mm512_permutex2var_epi64(_mm512_loadu_si512(expf_libm_table), ki, _mm512_loadu_si512(expf_libm_table + 8));
    const __m512i hi = _mm512_permutex2var_epi64(_mm512_loadu_si512(expf_libm_table + 16), ki, _mm512_loadu_si512(expf_libm_table + 24));
    const __m512i t = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(ki, _mm512_set1_epi64(16)), lo, hi);
    const __m512d sc = _mm512_castsi512_pd(_mm512_add_epi64(t, _mm512_slli_epi64(ki, 47)));
    const __m512d z = _mm512_fmadd_pd(_mm512_set1_pd(EXPF_LIBM_C0), r, _mm512_set1_pd(EXPF_LIBM_C1));
    const __m512d y = _mm512_fmadd_pd(z, _mm512_mul_pd(r, r), _mm512_fmadd_pd(_mm512_set1_pd(EXPF_LIBM_C2), r, _mm512_set1_pd(1.0)));
    return _mm512_cvtpd_ps(_mm512_mul_pd(y, sc));
}

/* the second half of transposing 16 rows (simd_lanes.h transpose_v): u[4i + j] holds in
 * its 128-bit lane L column 4L + j of rows 4i..4i+3, and the lanes move into place */
INLINE void transpose_across(const __m512 *u, __m512 *r) {
    for (int j = 0; j < 4; j++) {
        const __m512 w0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88), w1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xDD);
        const __m512 x0 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88), x1 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xDD);
        r[j] = _mm512_shuffle_f32x4(w0, x0, 0x88);
        r[4 + j] = _mm512_shuffle_f32x4(w1, x1, 0x88);
        r[8 + j] = _mm512_shuffle_f32x4(w0, x0, 0xDD);
        r[12 + j] = _mm512_shuffle_f32x4(w1, x1, 0xDD);
    }
}

/* exp, SiLU, SwiGLU, the update, the convolution's row, the delta rule's rows and Mamba-1's scan */
#define SIMD_LANES 16
#define dot_v dot_ggml16
#include "engine/layers/simd_lanes.h"

static double op_softmax_exp(float *y, const float *x, float max, int n) {
    double sum = 0;
    const __m512 m = _mm512_set1_ps(max);
    for (int i = 0; i < n; i += 16) {
        const __m512 e = exp_v(_mm512_sub_ps(_mm512_loadu_ps(x + i), m));
        _mm512_storeu_ps(y + i, e);
        sum += (double)reduce16(e);
    }
    return sum;
}

/* dot_ggml16 of q with n rows of K, for head_dim 64 <= hd < 320: q's whole blocks of 64
 * stay in registers and two rows go at once (the same fused multiply-adds per row as
 * dot_ggml16), then each row's remainder (none for 64/128/256; a vision head's 72: 8) */
INLINE void scores_hd(float *s, const float *K, size_t stride, const float *q, int n, const int hd, float scale) {
    const int nb = (hd & ~63) / 16;
    __m512 qq[16] = {0}; /* the first nb are used */
    #pragma GCC unroll 16
    for (int j = 0; j < nb; j++) qq[j] = _mm512_loadu_ps(q + 16 * j);
    int i = 0;
    for (; i + 2 <= n; i += 2) {
        const float *k0 = K + (size_t)i * stride, *k1 = k0 + stride;
        __m512 a[2][4];
        #pragma GCC unroll 16
        for (int j = 0; j < 4; j++) a[0][j] = a[1][j] = _mm512_setzero_ps();
        #pragma GCC unroll 16
        for (int j = 0; j < nb; j++) {
            a[0][j % 4] = _mm512_fmadd_ps(_mm512_loadu_ps(k0 + 16 * j), qq[j], a[0][j % 4]);
            a[1][j % 4] = _mm512_fmadd_ps(_mm512_loadu_ps(k1 + 16 * j), qq[j], a[1][j % 4]);
        }
        const float d0 = reduce16(_mm512_add_ps(_mm512_add_ps(a[0][0], a[0][2]), _mm512_add_ps(a[0][1], a[0][3])));
        const float d1 = reduce16(_mm512_add_ps(_mm512_add_ps(a[1][0], a[1][2]), _mm512_add_ps(a[1][1], a[1][3])));
        s[i] = dot_ggml_tail(d0, k0, q, 16 * nb, hd) * scale;
        s[i + 1] = dot_ggml_tail(d1, k1, q, 16 * nb, hd) * scale;
    }
    for (; i < n; i++) s[i] = dot_ggml16(K + (size_t)i * stride, q, hd) * scale;
}

/* The last 8 columns of a head of 16k + 8 (a vision encoder's 72) are one column group of
 * AVX2's weighted sum: the same chains of fused multiply-adds, in half vectors */
static void wsum_tail8(float *acc, const float *V, size_t stride, const float *p, int n, int hd) {
    layer_simd_avx2.wsum_acc(acc + (size_t)(hd / 16) * 256, V + (hd & ~15), stride, p, n, 8);
}

/* attn_wsum_acc for hd % 8 == 0: per block of 16 columns the 16 partial sums live in
 * registers while the rows pass (the rows come from L2: the caller walks the cache in
 * blocks that every head and token of a KV group shares); 8 columns left: wsum_tail8 */
static void op_wsum_acc(float *acc, const float *V, size_t stride, const float *p, int n, int hd) {
    if (hd % 16) wsum_tail8(acc, V, stride, p, n, hd);
    for (int cb = 0; cb < hd / 16; cb++) {
        float *A = acc + (size_t)cb * 256;
        const float *v = V + 16 * cb;
        __m512 a[16];
        #pragma GCC unroll 16
        for (int k = 0; k < 16; k++) a[k] = _mm512_loadu_ps(A + 16 * k);
        int i = 0;
        for (; i + 16 <= n; i += 16)
            #pragma GCC unroll 16
            for (int k = 0; k < 16; k++)
                a[k] = _mm512_fmadd_ps(_mm512_loadu_ps(v + (size_t)(i + k) * stride), _mm512_set1_ps(p[i + k]), a[k]);
        #pragma GCC unroll 16
        for (int k = 0; k < 16; k++) _mm512_storeu_ps(A + 16 * k, a[k]);
        for (; i < n; i++) {
            float *ak = A + 16 * (i % 16);
            _mm512_storeu_ps(ak, _mm512_fmadd_ps(_mm512_loadu_ps(v + (size_t)i * stride), _mm512_set1_ps(p[i]),
                                                 _mm512_loadu_ps(ak)));
        }
    }
}

static void op_scores(float *s, const float *K, size_t stride, const float *q, int n, int hd, float scale) {
    switch (hd) {
    case 64: scores_hd(s, K, stride, q, n, 64, scale); return;
    case 128: scores_hd(s, K, stride, q, n, 128, scale); return;
    case 256: scores_hd(s, K, stride, q, n, 256, scale); return;
    default:
        if (hd >= 64 && hd < 320) {
            scores_hd(s, K, stride, q, n, hd, scale);
            return;
        }
        for (int i = 0; i < n; i++) s[i] = dot_ggml16(K + (size_t)i * stride, q, hd) * scale;
    }
}

/* reduce16 of 16 vectors at once, the same additions as 16 calls: each stage adds the
 * lanes reduce16 adds (halves, quarters, pairs, then the last pair), two or four vectors
 * packed per register. Lane 4j+e of the result is w[4e+j]'s sum. */
INLINE __m512 reduce16x16(const __m512 *w) {
    __m512 x[8], y[4], z[2];
    #pragma GCC unroll 8
    for (int m = 0; m < 8; m++) /* v[i] + v[i+8]: w[2m]'s in lanes 0-7, w[2m+1]'s in 8-15 */
        x[m] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * m], w[2 * m + 1], 0x44),
                             _mm512_shuffle_f32x4(w[2 * m], w[2 * m + 1], 0xEE));
    #pragma GCC unroll 4
    for (int m = 0; m < 4; m++) /* a[i] + a[i+4]: 128-bit block j holds w[4m+j]'s */
        y[m] = _mm512_add_ps(_mm512_shuffle_f32x4(x[2 * m], x[2 * m + 1], 0x88),
                             _mm512_shuffle_f32x4(x[2 * m], x[2 * m + 1], 0xDD));
    #pragma GCC unroll 2
    for (int m = 0; m < 2; m++) /* b[i] + b[i+2]: block j holds w[8m+j]'s, then w[8m+4+j]'s */
        z[m] = _mm512_add_ps(_mm512_shuffle_ps(y[2 * m], y[2 * m + 1], 0x44),
                             _mm512_shuffle_ps(y[2 * m], y[2 * m + 1], 0xEE));
    /* c[0] + c[1]: block j holds w[j], w[4+j], w[8+j], w[12+j] */
    return _mm512_add_ps(_mm512_shuffle_ps(z[0], z[1], 0x88), _mm512_shuffle_ps(z[0], z[1], 0xDD));
}

/* The dot_ggml16 sums of NQ query vectors (NQ <= 4) with one K row, hd % 64 == 0, before
 * reduce16: each query keeps its own four accumulators, and each 16 floats of the row,
 * loaded once, go into all of them (the queries come from L1, the row from L2) */
INLINE void scores_sums(__m512 *w, const float *k, const float *const *q, const int NQ, const int hd) {
    __m512 a[4][4];
    #pragma GCC unroll 16
    for (int h = 0; h < NQ; h++)
        #pragma GCC unroll 16
        for (int j = 0; j < 4; j++) a[h][j] = _mm512_setzero_ps();
    #pragma GCC unroll 4
    for (int j0 = 0; j0 < hd; j0 += 64)
        #pragma GCC unroll 16
        for (int j = 0; j < 4; j++) {
            const __m512 kv = _mm512_loadu_ps(k + j0 + 16 * j);
            #pragma GCC unroll 16
            for (int h = 0; h < NQ; h++) a[h][j] = _mm512_fmadd_ps(kv, _mm512_loadu_ps(q[h] + j0 + 16 * j), a[h][j]);
        }
    #pragma GCC unroll 16
    for (int h = 0; h < NQ; h++)
        w[16 * h] = _mm512_add_ps(_mm512_add_ps(a[h][0], a[h][2]), _mm512_add_ps(a[h][1], a[h][3]));
}

/* scores of NQ queries for rows [i, i1) (at most 16): 16 rows' sums are finished
 * together by reduce16x16 (row r goes to slot 4(r%4) + r/4, so the result lanes come out
 * in row order), fewer one by one */
INLINE void scores_rows(float *const *s, const float *K, size_t stride, const float *const *q, int i, int i1,
                        const int NQ, const int hd, float scale) {
    __m512 w[4 * 16];
    if (i1 - i == 16) {
        #pragma GCC unroll 1
        for (int r = 0; r < 16; r++) scores_sums(w + 4 * (r % 4) + r / 4, K + (size_t)(i + r) * stride, q, NQ, hd);
        #pragma GCC unroll 4
        for (int h = 0; h < NQ; h++)
            _mm512_storeu_ps(s[h] + i, _mm512_mul_ps(reduce16x16(w + 16 * h), _mm512_set1_ps(scale)));
        return;
    }
    for (; i < i1; i++) {
        scores_sums(w, K + (size_t)i * stride, q, NQ, hd);
        #pragma GCC unroll 4
        for (int h = 0; h < NQ; h++) s[h][i] = reduce16(w[16 * h]) * scale;
    }
}

/* all queries by 4 for rows [i, i1); the head dims of the models we run get their loops
 * unrolled */
INLINE void scores_queries(float *const *s, const float *K, size_t stride, const float *const *q, int nq, int i,
                           int i1, const int hd, float scale) {
    for (int u = 0; u < nq; u += 4) switch (nq - u) {
        case 1: scores_rows(s + u, K, stride, q + u, i, i1, 1, hd, scale); break;
        case 2: scores_rows(s + u, K, stride, q + u, i, i1, 2, hd, scale); break;
        case 3: scores_rows(s + u, K, stride, q + u, i, i1, 3, hd, scale); break;
        default: scores_rows(s + u, K, stride, q + u, i, i1, 4, hd, scale); break;
        }
}

/* by 16 rows (16 KB of K for head dim 256, in L1 while every query reads them) */
static void op_scores_multi(float *const *s, const float *K, size_t stride, const float *const *q, int nq, int n,
                            int hd, float scale) {
    if (hd % 64 || nq == 1) { /* dot_ggml16's scalar tail; or one query: scores_hd keeps it in registers */
        for (int h = 0; h < nq; h++) op_scores(s[h], K, stride, q[h], n, hd, scale);
        return;
    }
    for (int i = 0; i < n; i += 16) {
        const int i1 = i + 16 < n ? i + 16 : n;
        switch (hd) {
        case 64: scores_queries(s, K, stride, q, nq, i, i1, 64, scale); break;
        case 128: scores_queries(s, K, stride, q, nq, i, i1, 128, scale); break;
        case 256: scores_queries(s, K, stride, q, nq, i, i1, 256, scale); break;
        default: scores_queries(s, K, stride, q, nq, i, i1, hd, scale);
        }
    }
}

/* One residue class k of attn_wsum_acc's 16 partial sums (positions i = k, k+16, ...) for
 * NP pairs and NC column vectors from column 16*cb: NP*NC accumulators in registers, each
 * the same chain of fused multiply-adds as in op_wsum_acc; each V row's 16*NC floats are
 * loaded once for all NP pairs. */
INLINE void wsum_tile(float *const *acc, const float *V, size_t stride, const float *const *p, int n, int k, int cb,
                      const int NP, const int NC) {
    __m512 a[4][4];
    #pragma GCC unroll 16
    for (int u = 0; u < NP; u++)
        #pragma GCC unroll 16
        for (int c = 0; c < NC; c++) a[u][c] = _mm512_loadu_ps(acc[u] + (size_t)(cb + c) * 256 + 16 * k);
    for (int i = k; i < n; i += 16) {
        const float *v = V + (size_t)i * stride + 16 * cb;
        __m512 x[4];
        #pragma GCC unroll 16
        for (int c = 0; c < NC; c++) x[c] = _mm512_loadu_ps(v + 16 * c);
        #pragma GCC unroll 16
        for (int u = 0; u < NP; u++) {
            const __m512 pu = _mm512_set1_ps(p[u][i]);
            #pragma GCC unroll 16
            for (int c = 0; c < NC; c++) a[u][c] = _mm512_fmadd_ps(x[c], pu, a[u][c]);
        }
    }
    #pragma GCC unroll 16
    for (int u = 0; u < NP; u++)
        #pragma GCC unroll 16
        for (int c = 0; c < NC; c++) _mm512_storeu_ps(acc[u] + (size_t)(cb + c) * 256 + 16 * k, a[u][c]);
}

/* all 16 residues of NC column vectors from 16*cb for NP pairs */
INLINE void wsum_cols(float *const *acc, const float *V, size_t stride, const float *const *p, int n, int cb,
                      const int NP, const int NC) {
    for (int k = 0; k < (n < 16 ? n : 16); k++) wsum_tile(acc, V, stride, p, n, k, cb, NP, NC);
}

#define WSUM_PAIRS(NC)                                                                                                 \
    for (int u = 0; u < np; u += 4) switch (np - u) {                                                                  \
        case 1: wsum_cols(acc + u, V, stride, p + u, n, cb, 1, NC); break;                                             \
        case 2: wsum_cols(acc + u, V, stride, p + u, n, cb, 2, NC); break;                                             \
        case 3: wsum_cols(acc + u, V, stride, p + u, n, cb, 3, NC); break;                                             \
        default: wsum_cols(acc + u, V, stride, p + u, n, cb, 4, NC); break;                                            \
        }

/* attn_wsum_acc_multi for hd % 8 == 0: by 64 columns (then 16), and within them by 4
 * pairs, so that those columns of the block's rows (32 KB for 128 rows) stay in L1 while
 * every pair reads them; 8 columns left: wsum_tail8 per pair */
static void op_wsum_multi(float *const *acc, const float *V, size_t stride, const float *const *p, int np, int n,
                          int hd) {
    if (np % 4 == 1) { /* a pair alone: op_wsum_acc keeps all 16 partial sums in registers */
        op_wsum_acc(acc[np - 1], V, stride, p[np - 1], n, hd);
        if (--np == 0) return;
    }
    int cb = 0;
    for (; cb + 4 <= hd / 16; cb += 4) WSUM_PAIRS(4)
    for (; cb < hd / 16; cb++) WSUM_PAIRS(1)
    for (int u = 0; hd % 16 && u < np; u++) wsum_tail8(acc[u], V, stride, p[u], n, hd);
}

/* the delta rule, one row of S at a time; for d_k = 128 the row, k and q live in registers */
static void op_gdn_step(float *S, int dk, int dv, const float *q, const float *k, const float *v, float decay,
                        float beta, float scale, float *o) {
    if (dk != 128) {
        gdn_rows(S, dk, dv, q, k, v, decay, beta, scale, o);
        return;
    }
    const __m512 dec = _mm512_set1_ps(decay), zero = _mm512_setzero_ps();
    __m512 kk[8], qq[8];
    #pragma GCC unroll 16
    for (int i = 0; i < 8; i++) {
        kk[i] = _mm512_loadu_ps(k + 16 * i);
        qq[i] = _mm512_loadu_ps(q + 16 * i);
    }
    for (int c = 0; c < dv; c++) {
        float *row = S + (size_t)c * 128;
        __m512 s[8];
        #pragma GCC unroll 16
        for (int i = 0; i < 8; i++) s[i] = _mm512_mul_ps(_mm512_loadu_ps(row + 16 * i), dec);
        __m512 a[4];
        #pragma GCC unroll 16
        for (int j = 0; j < 4; j++) a[j] = _mm512_fmadd_ps(s[4 + j], kk[4 + j], _mm512_fmadd_ps(s[j], kk[j], zero));
        const float kv = reduce16(_mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3])));
        const __m512 delta = _mm512_set1_ps((v[c] - kv) * beta);
        #pragma GCC unroll 16
        for (int i = 0; i < 8; i++) {
            s[i] = _mm512_fmadd_ps(kk[i], delta, s[i]);
            _mm512_storeu_ps(row + 16 * i, s[i]);
        }
        #pragma GCC unroll 16
        for (int j = 0; j < 4; j++) a[j] = _mm512_fmadd_ps(s[4 + j], qq[4 + j], _mm512_fmadd_ps(s[j], qq[j], zero));
        o[c] = reduce16(_mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3]))) * scale;
    }
}

/* A few tokens with K = 4 (Qwen3.5, Mamba, Nemotron-H), 16 channels at a time: the state
 * ([ch][3]) and weights ([ch][4]) interleave the channels, so permutes gather tap k of 16
 * channels, and the new state is the old one moved down by one value, each channel's last
 * value replaced by its input. Per channel the same fused chain as the scalar loop (oldest
 * tap first, from 0). Returns the channels done (a multiple of 16). */
static int conv_few_k4(float *state, const float *w, int C, const float *in, size_t in_stride, float *out,
                       size_t out_stride, int n) {
    static const _Alignas(64) int32_t idx[] = {
        /* state tap k: lanes whose value 3j + k lies in the first two registers, then the rest from the third */
        0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 0, 0, 0, 0, 0,
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 17, 20, 23, 26, 29,
        1, 4, 7, 10, 13, 16, 19, 22, 25, 28, 31, 0, 0, 0, 0, 0,
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 18, 21, 24, 27, 30,
        2, 5, 8, 11, 14, 17, 20, 23, 26, 29, 0, 0, 0, 0, 0, 0,
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 19, 22, 25, 28, 31,
        /* which channel's input lands on the last value 3j + 2 of each of the three registers */
        0, 0, 0, 0, 0, 1, 0, 0, 2, 0, 0, 3, 0, 0, 4, 0,
        0, 5, 0, 0, 6, 0, 0, 7, 0, 0, 8, 0, 0, 9, 0, 0,
        10, 0, 0, 11, 0, 0, 12, 0, 0, 13, 0, 0, 14, 0, 0, 15,
        /* weight tap k: 4j + k of the pair of registers (channels 0-7 from the first pair, 8-15 the second) */
        0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28};
    const __mmask16 last[3] = {0x4924, 0x2492, 0x9249}; /* bits 3j + 2 - 16i */
    int c = 0;
    for (; c + 16 <= C; c += 16) {
        float *st = state + (size_t)c * 3;
        const float *wc = w + (size_t)c * 4;
        __m512 s0 = _mm512_loadu_ps(st), s1 = _mm512_loadu_ps(st + 16), s2 = _mm512_loadu_ps(st + 32), wk[4];
        const __m512 w0 = _mm512_loadu_ps(wc), w1 = _mm512_loadu_ps(wc + 16), w2 = _mm512_loadu_ps(wc + 32),
                     w3 = _mm512_loadu_ps(wc + 48);
        for (int k = 0; k < 4; k++) {
            const __m512i ik = _mm512_add_epi32(_mm512_load_si512(idx + 144), _mm512_set1_epi32(k));
            wk[k] = _mm512_mask_blend_ps(0xff00, _mm512_permutex2var_ps(w0, ik, w1), _mm512_permutex2var_ps(w2, ik, w3));
        }
        for (int t = 0; t < n; t++) {
            const __m512 u = _mm512_loadu_ps(in + (size_t)t * in_stride + c);
            __m512 y = _mm512_setzero_ps();
            for (int k = 0; k < 3; k++) {
                const __m512 a = _mm512_permutex2var_ps(s0, _mm512_load_si512(idx + 32 * k), s1);
                y = _mm512_fmadd_ps(wk[k], _mm512_permutex2var_ps(a, _mm512_load_si512(idx + 32 * k + 16), s2), y);
            }
            y = _mm512_fmadd_ps(wk[3], u, y);
            _mm512_storeu_ps(out + (size_t)t * out_stride + c, y);
            /* move down by one value (across the three registers), then the inputs in */
            const __m512 n0 = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(s1), _mm512_castps_si512(s0), 1));
            const __m512 n1 = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(s2), _mm512_castps_si512(s1), 1));
            const __m512 n2 = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(s2), _mm512_castps_si512(s2), 1));
            s0 = _mm512_mask_permutexvar_ps(n0, last[0], _mm512_load_si512(idx + 96), u);
            s1 = _mm512_mask_permutexvar_ps(n1, last[1], _mm512_load_si512(idx + 112), u);
            s2 = _mm512_mask_permutexvar_ps(n2, last[2], _mm512_load_si512(idx + 128), u);
        }
        _mm512_storeu_ps(st, s0);
        _mm512_storeu_ps(st + 16, s1);
        _mm512_storeu_ps(st + 32, s2);
    }
    return c;
}

/* Causal conv over n tokens. Fewer than 4: the per-channel fused multiply-add chain (16
 * channels at a time by conv_few_k4 when K = 4). More: the weights transposed to [K][C]
 * and the K-1 state columns to rows, so each token is K vector fused multiply-adds over
 * channels (same chain per channel: oldest tap first). */
static void op_conv(float *state, const float *w, int C, int K, const float *in, size_t in_stride, float *out,
                    size_t out_stride, int n) {
    if (n < 4 || K < 2 || K > 16) {
        const int c0 = n < 4 && K == 4 ? conv_few_k4(state, w, C, in, in_stride, out, out_stride, n) : 0;
        conv_channels_ref(state, w, c0, C, K, in, in_stride, out, out_stride, n);
    } else {
        conv_transposed(state, w, C, K, in, in_stride, out, out_stride, n, conv_row);
    }
}

/* ssm_scan_row: per element fma(s, dA, B x_dt) with the product rounded, into the four
 * 16-lane accumulators, (0+2) + (1+3), reduce16, then the scalar tail */
static float op_scan_row(float *s, const float *B, const float *C, float dA, float x_dt, int n) {
    const int np = n & ~63;
    float sum = 0;
    if (np) {
        const __m512 da = _mm512_set1_ps(dA), xd = _mm512_set1_ps(x_dt);
        __m512 a[4];
        #pragma GCC unroll 16
        for (int j = 0; j < 4; j++) a[j] = _mm512_setzero_ps();
        for (int i = 0; i < np; i += 64)
            #pragma GCC unroll 16
            for (int j = 0; j < 4; j++) {
                const int e = i + 16 * j;
                const __m512 st = _mm512_fmadd_ps(_mm512_loadu_ps(s + e), da, _mm512_mul_ps(_mm512_loadu_ps(B + e), xd));
                a[j] = _mm512_fmadd_ps(st, _mm512_loadu_ps(C + e), a[j]);
                _mm512_storeu_ps(s + e, st);
            }
        sum = reduce16(_mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3])));
    }
    return ssm_scan_tail(sum, s, B, C, dA, x_dt, np, n);
}

/* four rows at a time: four independent chains of fused multiply-adds, each row's sum
 * the one-row order */
static void op_scores_lanes(float *s, const float *K, size_t stride, const float *q, int n, int hd, float scale) {
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        const float *k = K + (size_t)i * stride;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int c = 0; c < hd; c += 16) {
            const __m512 qc = _mm512_loadu_ps(q + c);
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(k + c), qc, a0);
            a1 = _mm512_fmadd_ps(_mm512_loadu_ps(k + stride + c), qc, a1);
            a2 = _mm512_fmadd_ps(_mm512_loadu_ps(k + 2 * stride + c), qc, a2);
            a3 = _mm512_fmadd_ps(_mm512_loadu_ps(k + 3 * stride + c), qc, a3);
        }
        s[i] = reduce16(a0) * scale, s[i + 1] = reduce16(a1) * scale;
        s[i + 2] = reduce16(a2) * scale, s[i + 3] = reduce16(a3) * scale;
    }
    for (; i < n; i++) {
        const float *k = K + (size_t)i * stride;
        __m512 acc = _mm512_setzero_ps();
        for (int c = 0; c < hd; c += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(k + c), _mm512_loadu_ps(q + c), acc);
        s[i] = reduce16(acc) * scale;
    }
}

const layer_simd layer_simd_avx512 = {op_dot,  op_mad,    op_silu,     op_swiglu,       op_softmax_exp, op_gdn_step,
                                       op_conv, op_scores, op_wsum_acc, op_scores_multi, op_wsum_multi,
                                       op_scan_row, op_scan1,     op_relu2,        op_f16_to_f32,  op_f32_to_f16,
                                       op_scores_lanes};
