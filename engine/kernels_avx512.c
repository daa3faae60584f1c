/* kernels_avx512.c - AVX-512 (F, BW, VL, DQ, VNNI) kernels; compiled with the matching
 * -m flags and only called when the CPU reports all of them. They sum in exactly the
 * order of vec_dot_ref (quant.h), so their results equal the scalar reference bit for
 * bit. */
#include <immintrin.h>

#include "engine/kernels.h"
#include "engine/quant.h"

static int avx512_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

/* the reduction tree of quant.c spelled out (compilers differ in how they expand
 * _mm512_reduce_add_ps) */
static inline float reduce16(__m512 v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

static inline float hsum8(__m256 x) {
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    return _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));
}

static float dot_f32(int64_t n, const float *w, const float *x) {
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), acc);
    if (i < n) { /* masked lanes add fma(0, 0, acc) = acc */
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w + i), _mm512_maskz_loadu_ps(m, x + i), acc);
    }
    return reduce16(acc);
}

static float dot_f16(int64_t n, const fp16_t *w, const fp16_t *x) { /* n % 16 == 0 */
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16)
        acc = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + i))),
                              _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i))), acc);
    return reduce16(acc);
}

/* 32 int8 products into 8 int32 lanes of 4 with VNNI: dpbusd(|w|, sign(x, w)) */
static inline __m256i dot32_i8(__m256i w, __m256i x) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
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

static int avx512_gemm(uint32_t wt, const void *W, size_t wrb, int64_t n, int64_t r0, int64_t r1, const void *Xq,
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

const kernel_isa kernels_avx512 = {"avx512", avx512_supported, avx512_gemm, NULL};
