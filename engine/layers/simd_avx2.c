/* simd_avx2.c - the layer math (simd.h) with AVX2 + FMA: 8 floats a vector, exactly the
 * arithmetic of ops.c's scalar code (a 16-lane accumulator of the reference is two
 * registers). Built with -mavx2 -mfma -mf16c -ffp-contract=off; only called when the
 * kernel set is AVX2's or AVX-VNNI's, so only on CPUs that have them. */
#include <immintrin.h>
#include <math.h>

#include "engine/layers/simd.h"

#define INLINE static inline __attribute__((always_inline))

/* the 16-lane reduction tree of quant.h's reduce16_ref, on lanes 0-7 (lo) and 8-15 (hi) */
INLINE float reduce16(__m256 lo, __m256 hi) {
    __m256 a = _mm256_add_ps(lo, hi);
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

INLINE __m256 pow2i(__m256i e) { /* 2^e for e in [-126, 127] */
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23));
}

/* exp_vec's last step (ldexpf(j, n)) on 8 lanes: j * 2^n rounded once, as (j * 2^n1) *
 * 2^n2 with the first product exact (n1 in the normal range) and the second rounding
 * once; 0 or infinity past |n| > 192 */
INLINE __m256 exp_scale(__m256 j, __m256 n) {
    const __m256 nc = _mm256_min_ps(_mm256_max_ps(n, _mm256_set1_ps(-192.0f)), _mm256_set1_ps(192.0f));
    const __m256i ni = _mm256_cvtps_epi32(nc);
    const __m256i lo = _mm256_cmpgt_epi32(_mm256_set1_epi32(-126), ni), hi = _mm256_cmpgt_epi32(ni, _mm256_set1_epi32(127));
    const __m256i n2 = _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi32(-100)), _mm256_and_si256(hi, _mm256_set1_epi32(100)));
    __m256 r = _mm256_mul_ps(_mm256_mul_ps(j, pow2i(_mm256_sub_epi32(ni, n2))), pow2i(n2));
    const __m256 absn = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
    const __m256 big = _mm256_cmp_ps(absn, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
    const __m256 pos = _mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_GT_OQ);
    r = _mm256_blendv_ps(r, _mm256_and_ps(pos, _mm256_set1_ps(INFINITY)), big);
    return r;
}

/* dot_ggml: blocks of 64 into four 16-lane accumulators (two registers each) */
INLINE float dot_ggml8(const float *x, const float *y, int n) {
    const int np = n & ~63;
    __m256 a[8];
    #pragma GCC unroll 16
    for (int j = 0; j < 8; j++) a[j] = _mm256_setzero_ps();
    for (int i = 0; i < np; i += 64)
        #pragma GCC unroll 16
        for (int j = 0; j < 8; j++) a[j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * j), _mm256_loadu_ps(y + i + 8 * j), a[j]);
    /* accumulator j = a[2j] (lanes 0-7), a[2j+1] (lanes 8-15) */
    const __m256 lo = _mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6]));
    const __m256 hi = _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7]));
    return dot_ggml_tail(reduce16(lo, hi), x, y, np, n);
}

static float op_dot(const float *x, const float *y, int n) { return dot_ggml8(x, y, n); }

/* libm's expf of 4 doubles (simd_lanes.h's expf_libm_v takes 8 floats through it), as
 * simd_avx512.c's expf_libm_pd (the algorithm and its checks are told there), the table
 * read by a gather */
INLINE __m128 expf_libm_pd(__m256d xd) {
    const __m256d inv_ln2_n = _mm256_set1_pd(EXPF_LIBM_INV_LN2_N), shift = _mm256_set1_pd(EXPF_LIBM_SHIFT);
    __m256d kd = _mm256_fmadd_pd(inv_ln2_n, xd, shift);
    const __m256i ki = _mm256_castpd_si256(kd);
    kd = _mm256_sub_pd(kd, shift);
    const __m256d r = _mm256_fmsub_pd(inv_ln2_n, xd, kd);
    const __m256i t = _mm256_i64gather_epi64((const long long *)expf_libm_table,
                                             _mm256_and_si256(ki, _mm256_set1_epi64x(31)), 8);
    const __m256d sc = _mm256_castsi256_pd(_mm256_add_epi64(t, _mm256_slli_epi64(ki, 47)));
    const __m256d z = _mm256_fmadd_pd(_mm256_set1_pd(EXPF_LIBM_C0), r, _mm256_set1_pd(EXPF_LIBM_C1));
    const __m256d y = _mm256_fmadd_pd(z, _mm256_mul_pd(r, r), _mm256_fmadd_pd(_mm256_set1_pd(EXPF_LIBM_C2), r, _mm256_set1_pd(1.0)));
    return _mm256_cvtpd_ps(_mm256_mul_pd(y, sc));
}

/* the second half of transposing 8 rows (simd_lanes.h transpose_v): u[4i + j] holds in
 * its 128-bit half L column 4L + j of rows 4i..4i+3, and the halves move into place */
INLINE void transpose_across(const __m256 *u, __m256 *r) {
    for (int j = 0; j < 4; j++) {
        r[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
        r[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
    }
}

/* exp, SiLU, SwiGLU, the update, the convolution's row, the delta rule's rows and Mamba-1's scan */
#define SIMD_LANES 8
#define dot_v dot_ggml8
#include "engine/layers/simd_lanes.h"

static double op_softmax_exp(float *y, const float *x, float max, int n) {
    double sum = 0;
    const __m256 m = _mm256_set1_ps(max);
    for (int i = 0; i < n; i += 16) {
        const __m256 e0 = exp_v(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
        const __m256 e1 = exp_v(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), m));
        _mm256_storeu_ps(y + i, e0);
        _mm256_storeu_ps(y + i + 8, e1);
        sum += (double)reduce16(e0, e1);
    }
    return sum;
}

static void op_gdn_step(float *S, int dk, int dv, const float *q, const float *k, const float *v, float decay,
                        float beta, float scale, float *o) {
    gdn_rows(S, dk, dv, q, k, v, decay, beta, scale, o);
}

/* Causal conv over n tokens. Fewer than 4: the per-channel fused multiply-add chain.
 * More: the weights transposed to [K][C] and the K-1 state columns to rows, so each token
 * is K vector fused multiply-adds over channels (same chain per channel: oldest tap first). */
static void op_conv(float *state, const float *w, int C, int K, const float *in, size_t in_stride, float *out,
                    size_t out_stride, int n) {
    if (n < 4 || K < 2 || K > 16)
        conv_channels_ref(state, w, 0, C, K, in, in_stride, out, out_stride, n);
    else
        conv_transposed(state, w, C, K, in, in_stride, out, out_stride, n, conv_row);
}

/* ssm_scan_row: per element fma(s, dA, B x_dt) with the product rounded, into the four
 * 16-lane accumulators (two registers each: acc j = a[2j] lanes 0-7, a[2j+1] lanes 8-15) */
static float op_scan_row(float *s, const float *B, const float *C, float dA, float x_dt, int n) {
    const int np = n & ~63;
    float sum = 0;
    if (np) {
        const __m256 da = _mm256_set1_ps(dA), xd = _mm256_set1_ps(x_dt);
        __m256 a[8];
        #pragma GCC unroll 16
        for (int j = 0; j < 8; j++) a[j] = _mm256_setzero_ps();
        for (int i = 0; i < np; i += 64)
            #pragma GCC unroll 16
            for (int j = 0; j < 8; j++) {
                const int e = i + 8 * j;
                const __m256 st = _mm256_fmadd_ps(_mm256_loadu_ps(s + e), da, _mm256_mul_ps(_mm256_loadu_ps(B + e), xd));
                a[j] = _mm256_fmadd_ps(st, _mm256_loadu_ps(C + e), a[j]);
                _mm256_storeu_ps(s + e, st);
            }
        const __m256 lo = _mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6]));
        const __m256 hi = _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7]));
        sum = reduce16(lo, hi);
    }
    return ssm_scan_tail(sum, s, B, C, dA, x_dt, np, n);
}

/* attn_wsum_acc for hd % 8 == 0: per 8 columns and 8 of the 16 partial sums at a time */
static void op_wsum_acc(float *acc, const float *V, size_t stride, const float *p, int n, int hd) {
    for (int c0 = 0; c0 < hd; c0 += 8) {
        float *A = acc + (size_t)(c0 / 16) * 256 + c0 % 16;
        const float *v = V + c0;
        const int full = n & ~15;
        for (int k0 = 0; k0 < 16; k0 += 8) {
            __m256 a[8];
            for (int k = 0; k < 8; k++) a[k] = _mm256_loadu_ps(A + 16 * (k0 + k));
            for (int i = 0; i < full; i += 16)
                for (int k = 0; k < 8; k++)
                    a[k] = _mm256_fmadd_ps(_mm256_loadu_ps(v + (size_t)(i + k0 + k) * stride),
                                           _mm256_set1_ps(p[i + k0 + k]), a[k]);
            for (int k = 0; k < 8; k++) _mm256_storeu_ps(A + 16 * (k0 + k), a[k]);
        }
        for (int i = full; i < n; i++) {
            float *ak = A + 16 * (i % 16);
            _mm256_storeu_ps(ak, _mm256_fmadd_ps(_mm256_loadu_ps(v + (size_t)i * stride), _mm256_set1_ps(p[i]),
                                                 _mm256_loadu_ps(ak)));
        }
    }
}

/* two rows at a time (four chains of fused multiply-adds), each row's sum the one-row order */
static void op_scores_lanes(float *s, const float *K, size_t stride, const float *q, int n, int hd, float scale) {
    int i = 0;
    for (; i + 2 <= n; i += 2) {
        const float *k = K + (size_t)i * stride, *k1 = k + stride;
        __m256 lo = _mm256_setzero_ps(), hi = lo, lo1 = lo, hi1 = lo;
        for (int c = 0; c < hd; c += 16) {
            const __m256 ql = _mm256_loadu_ps(q + c), qh = _mm256_loadu_ps(q + c + 8);
            lo = _mm256_fmadd_ps(_mm256_loadu_ps(k + c), ql, lo);
            hi = _mm256_fmadd_ps(_mm256_loadu_ps(k + c + 8), qh, hi);
            lo1 = _mm256_fmadd_ps(_mm256_loadu_ps(k1 + c), ql, lo1);
            hi1 = _mm256_fmadd_ps(_mm256_loadu_ps(k1 + c + 8), qh, hi1);
        }
        s[i] = reduce16(lo, hi) * scale, s[i + 1] = reduce16(lo1, hi1) * scale;
    }
    for (; i < n; i++) {
        const float *k = K + (size_t)i * stride;
        __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
        for (int c = 0; c < hd; c += 16) {
            lo = _mm256_fmadd_ps(_mm256_loadu_ps(k + c), _mm256_loadu_ps(q + c), lo);
            hi = _mm256_fmadd_ps(_mm256_loadu_ps(k + c + 8), _mm256_loadu_ps(q + c + 8), hi);
        }
        s[i] = reduce16(lo, hi) * scale;
    }
}

const layer_simd layer_simd_avx2 = {op_dot,      op_mad,  op_silu, op_swiglu, op_softmax_exp,
                                    op_gdn_step, op_conv, NULL /* scores: ops.c loops op_dot */,
                                    op_wsum_acc, NULL, NULL /* multi: ops.c loops the above */,
                                    op_scan_row, op_scan1, op_relu2, op_f16_to_f32, op_f32_to_f16,
                                    op_scores_lanes};
