/* kernels_avx2.c - AVX2/FMA/F16C kernels (compiled with -mavx2 -mfma -mf16c; only
 * called when the CPU has them). They sum in exactly the order of vec_dot_ref
 * (quant.h), so their results equal the scalar reference bit for bit. */
#include <immintrin.h>

#include "engine/kernels.h"
#include "engine/quant.h"

static int avx2_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

/* the 16-lane reduction tree of quant.c, on lanes 0-7 (lo) and 8-15 (hi) */
static inline float reduce16(__m256 lo, __m256 hi) {
    __m256 a = _mm256_add_ps(lo, hi);                                              /* v[i] + v[i+8] */
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1)); /* a[i] + a[i+4] */
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));                                 /* b0+b2, b1+b3 */
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

/* the 8-lane tree of ggml's hsum_float_8 */
static inline float hsum8(__m256 x) {
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    return _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));
}

static inline __m256i tail_mask(int64_t k) { /* the first k of 8 lanes */
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static float dot_f32(int64_t n, const float *w, const float *x) {
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        lo = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), lo);
        hi = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), hi);
    }
    if (i < n) { /* masked lanes add fma(0, 0, acc) = acc */
        int64_t r = n - i;
        __m256i m0 = tail_mask(r), m1 = tail_mask(r - 8);
        lo = _mm256_fmadd_ps(_mm256_maskload_ps(w + i, m0), _mm256_maskload_ps(x + i, m0), lo);
        if (r > 8) hi = _mm256_fmadd_ps(_mm256_maskload_ps(w + i + 8, m1), _mm256_maskload_ps(x + i + 8, m1), hi);
    }
    return reduce16(lo, hi);
}

static float dot_f16(int64_t n, const fp16_t *w, const fp16_t *x) { /* n % 16 == 0 */
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        lo = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i))),
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))), lo);
        hi = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i + 8))),
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i + 8))), hi);
    }
    return reduce16(lo, hi);
}

/* 32 int8 products as 8 int32 lanes of 4 products each: |w| * sign(x, w) */
static inline __m256i dot32_i8(__m256i w, __m256i x) {
    __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

static inline __m256i load_q4_0(const block_q4_0 *b) {
    __m128i q = _mm_loadu_si128((const __m128i *)b->qs);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    return _mm256_sub_epi8(_mm256_and_si256(v, _mm256_set1_epi8(15)), _mm256_set1_epi8(8));
}

static float dot_q8(uint32_t wt, int64_t n, const void *w, const block_q8_0 *x) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; i++) {
        __m256i qw = wt == GGML_Q8_0 ? _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)w)[i].qs)
                                     : load_q4_0((const block_q4_0 *)w + i);
        float dw = fp16_to_f32(wt == GGML_Q8_0 ? ((const block_q8_0 *)w)[i].d : ((const block_q4_0 *)w)[i].d);
        __m256 p = _mm256_cvtepi32_ps(dot32_i8(qw, _mm256_loadu_si256((const __m256i *)x[i].qs)));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * fp16_to_f32(x[i].d)), p, acc);
    }
    return hsum8(acc);
}

static int avx2_gemm(uint32_t wt, const void *W, size_t wrb, int64_t n, int64_t r0, int64_t r1, const void *Xq,
                     size_t xrb, int T, float *Y, int64_t ldy) {
    if (wt != GGML_F32 && wt != GGML_Q8_0 && wt != GGML_Q4_0 && !(wt == GGML_F16 && n % 16 == 0)) return 0;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *w = (const uint8_t *)W + (size_t)r * wrb;
        for (int t = 0; t < T; t++) {
            const void *x = (const uint8_t *)Xq + (size_t)t * xrb;
            float s;
            switch (wt) {
            case GGML_F32: s = dot_f32(n, (const float *)w, x); break;
            case GGML_F16: s = dot_f16(n, (const fp16_t *)w, x); break;
            default: s = dot_q8(wt, n, w, x); break;
            }
            Y[t * ldy + r] = s;
        }
    }
    return 1;
}

const kernel_isa kernels_avx2 = {"avx2", avx2_supported, avx2_gemm, NULL};
