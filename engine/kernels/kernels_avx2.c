/* kernels_avx2.c - AVX2 + FMA + F16C kernels (compiled with -mavx2 -mfma -mf16c; only
 * called when the CPU has them, so the binary still runs on CPUs without AVX-512).
 *
 * The reference's 8 int32 lanes per block are exactly one 256-bit register, so each row
 * of a tile gets one register per token. A tile is one weight row times up to 8 tokens
 * (with one token, two rows for some types: GEMM_DRIVER): the per-block weight work
 * (unpacking, absolute values, scales) is done once and used for every token. Products of
 * signed bytes use VPMADDUBSW on |w| and sign(x, w) as llama.cpp's AVX2 code does (in
 * dot_u8s8, see below for VNNI); the K-quants' unsigned weights go straight
 * into VPMADDUBSW, then VPMADDWD with the sub-block scale. Results equal vec_dot_ref
 * bit for bit (the integer sums are exact, the float operations in its order).
 *
 * kernels_avxvnni.c compiles this file again with AVX-VNNI (AVX2_VNNI defined): the CPUs
 * that have it without AVX-512 (Alder Lake and later laptops and desktops) then sum four
 * byte products with one VPDPBUSD instead of VPMADDUBSW + VPMADDWD, and add word products
 * to a sum with one VPDPWSSD (dot_u8s8, add_madd). The integers are the same: no pair of
 * byte products that VPMADDUBSW saturates occurs (see the callers).
 *
 * Sections: helpers, float types, Q8_0-style, Q8_1-style, Q4_K/Q5_K, Q6_K, dispatch. */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>

#include "engine/kernels/kernels.h"
#include "engine/kernels/quant.h"

#define INLINE static inline __attribute__((always_inline))

static int avx2_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")
#ifdef AVX2_VNNI
           && __builtin_cpu_supports("avxvnni")
#endif
        ;
}

/* ---------------------------------------------------------------- helpers */

/* per int32 lane, the sum of its four products of unsigned bytes u and signed bytes s (the
 * plain AVX2 form is exact only while no pair of products leaves int16) */
INLINE __m256i dot_u8s8(__m256i u, __m256i s) {
#ifdef AVX2_VNNI
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

/* acc + madd(a, b): each int32 lane plus its two products of int16 words */
INLINE __m256i add_madd(__m256i acc, __m256i a, __m256i b) {
#ifdef AVX2_VNNI
    return _mm256_dpwssd_avx_epi32(acc, a, b);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

/* the 16-lane reduction tree of quant.c, on lanes 0-7 (lo) and 8-15 (hi) */
INLINE float reduce16(__m256 lo, __m256 hi) {
    __m256 a = _mm256_add_ps(lo, hi);
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

/* ggml's hsum_float_8 */
INLINE float hsum8(__m256 x) {
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    return _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));
}

INLINE float h2f(fp16_t h) { return _cvtsh_ss(h); }

INLINE __m256i load256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* 16 bytes as 32 4-bit fields: [p & 15 | p >> 4] */
INLINE __m256i nibbles(const void *p) {
    const __m128i q = _mm_loadu_si128((const __m128i *)p);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(15));
}

/* 32 bits -> 32 bytes, 0xff where the bit is set */
INLINE __m256i bytes_from_bits(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)v), shuf);
    b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1));
}

/* decode streams the weights from memory: prefetching a few KB ahead keeps the reads at
 * the machine's bandwidth (see kernels_avx512.c) */
#define PF_BYTES 4096
INLINE void prefetch_row(const uint8_t *w, size_t off, size_t bsz) {
#pragma GCC unroll 4
    for (size_t o = 0; o < bsz; o += 64) _mm_prefetch((const char *)w + off + o + PF_BYTES, _MM_HINT_T0);
}

static int64_t chunk_rows(size_t row_bytes, int T, int tile) {
    if (T <= tile) return INT64_MAX / 4;
    int64_t rows = (int64_t)(KERNEL_L2_CHUNK_BYTES / (row_bytes ? row_bytes : 1));
    return rows < 1 ? 1 : rows;
}

#define TILE_CASE(k, KERNEL, TT) \
    case k: if (k <= TT) KERNEL(W, r, r, 1, x, t0, (k <= TT ? k : 1), Y, ldy); break;
/* Chunks of rows that stay in L2, tiles of up to TT tokens, one row at a time. A kernel's
 * arguments after W: row r, a second row r2 and R, how many of the two it computes (R is
 * a constant at every call, so the kernel's loops over rows unroll away).
 *
 * With PAIRS, one token takes two rows at a time, row i of each half of the range (two
 * plain streams, see kernels_avx512.c): each row's sum is a chain of dependent FMAs, one
 * per block, and one row alone waits on the FMA's latency every block. The others go
 * without (Q4_K/Q5_K and Q6_K are bound by their operation count, not by a chain's
 * latency): they are only ever given R = 1 and ignore r2. */
#define GEMM_DRIVER(fname, KERNEL, TT, PAIRS)                                                           \
    static void fname(const matrix *W, int64_t r0, int64_t r1, const kact *x, float *Y, int64_t ldy) { \
        const int T = x->T;                                                                         \
        if (PAIRS && T == 1) {                                                                      \
            const int64_t h = (r1 - r0) / 2;                                                        \
            for (int64_t i = 0; i < h; i++) KERNEL(W, r0 + i, r0 + h + i, 2, x, 0, 1, Y, ldy);     \
            if ((r1 - r0) % 2) KERNEL(W, r1 - 1, r1 - 1, 1, x, 0, 1, Y, ldy);                      \
            return;                                                                                 \
        }                                                                                           \
        const int64_t rc = chunk_rows(W->row_bytes, T, TT);                                         \
        for (int64_t c0 = r0; c0 < r1; c0 += rc) {                                                  \
            const int64_t c1 = r1 - c0 < rc ? r1 : c0 + rc;                                        \
            for (int t0 = 0; t0 < T; t0 += TT) {                                                    \
                const int c = T - t0 < TT ? T - t0 : TT;                                            \
                for (int64_t r = c0; r < c1; r++) {                                                 \
                    switch (c) {                                                                    \
                        TILE_CASE(1, KERNEL, TT) TILE_CASE(2, KERNEL, TT) TILE_CASE(3, KERNEL, TT)  \
                        TILE_CASE(4, KERNEL, TT) TILE_CASE(5, KERNEL, TT) TILE_CASE(6, KERNEL, TT)  \
                        TILE_CASE(7, KERNEL, TT) TILE_CASE(8, KERNEL, TT)                           \
                    }                                                                               \
                }                                                                                   \
            }                                                                                       \
        }                                                                                           \
    }

/* ---------------------------------------------------------------- F32, F16, BF16
 * Reference: 16 lanes (element index mod 16) of fused multiply-adds, then reduce16. Two
 * registers per output hold lanes 0-7 and 8-15; the tail (n % 16) is done lane by lane
 * on the stored accumulators so untouched lanes keep their exact value. */

INLINE __m256 load_w8(uint32_t wt, const uint8_t *w, int64_t i) {
    switch (wt) {
    case GGML_F32: return _mm256_loadu_ps((const float *)w + i);
    case GGML_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const fp16_t *)w + i)));
    default:
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const bf16_t *)w + i))), 16));
    }
}

INLINE float w_at(uint32_t wt, const uint8_t *w, int64_t i) {
    switch (wt) {
    case GGML_F32: return ((const float *)w)[i];
    case GGML_F16: return fp16_to_f32(((const fp16_t *)w)[i]);
    default: return bf16_to_f32(((const bf16_t *)w)[i]);
    }
}

INLINE void k_float(uint32_t wt, const matrix *W, int64_t r, int64_t r2, const int R, const kact *x, int t0,
                    const int C, float *Y, int64_t ldy) {
    const int64_t n = W->n_in;
    const int64_t rows[2] = {r, r2};
    const uint8_t *w[2];
    const float *xs[4];
    __m256 lo[2][4], hi[2][4];
    #pragma GCC unroll 2
    for (int i = 0; i < R; i++) w[i] = (const uint8_t *)W->data + (size_t)rows[i] * W->row_bytes;
    #pragma GCC unroll 16
    for (int t = 0; t < C; t++) {
        xs[t] = wt == GGML_F32 ? (const float *)kact_row(x, t0 + t) : (const float *)kact_aux(x, t0 + t);
        #pragma GCC unroll 2
        for (int i = 0; i < R; i++) lo[i][t] = hi[i][t] = _mm256_setzero_ps();
    }
    int64_t k = 0;
    const size_t esz = wt == GGML_F32 ? 4 : 2;
    for (; k + 16 <= n; k += 16)
        #pragma GCC unroll 2
        for (int i = 0; i < R; i++) {
            if (C <= 8 && (k * esz) % 64 == 0) _mm_prefetch((const char *)w[i] + k * esz + PF_BYTES, _MM_HINT_T0);
            const __m256 w0 = load_w8(wt, w[i], k), w1 = load_w8(wt, w[i], k + 8);
            #pragma GCC unroll 16
            for (int t = 0; t < C; t++) {
                lo[i][t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xs[t] + k), lo[i][t]);
                hi[i][t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xs[t] + k + 8), hi[i][t]);
            }
        }
    #pragma GCC unroll 2
    for (int i = 0; i < R; i++)
        #pragma GCC unroll 16
        for (int t = 0; t < C; t++) {
            if (k < n) {
                float l[16];
                _mm256_storeu_ps(l, lo[i][t]);
                _mm256_storeu_ps(l + 8, hi[i][t]);
                for (int64_t j = k; j < n; j++) l[j - k] = fmaf(w_at(wt, w[i], j), xs[t][j], l[j - k]);
                lo[i][t] = _mm256_loadu_ps(l);
                hi[i][t] = _mm256_loadu_ps(l + 8);
            }
            Y[(size_t)(t0 + t) * ldy + rows[i]] = reduce16(lo[i][t], hi[i][t]);
        }
}

#define K_F32(...) k_float(GGML_F32, __VA_ARGS__)
#define K_F16(...) k_float(GGML_F16, __VA_ARGS__)
#define K_BF16(...) k_float(GGML_BF16, __VA_ARGS__)
GEMM_DRIVER(gemm_f32, K_F32, 4, 1)
GEMM_DRIVER(gemm_f16, K_F16, 4, 1)
GEMM_DRIVER(gemm_bf16, K_BF16, 4, 1)

/* ---------------------------------------------------------------- Q8_0, Q4_0, Q5_0
 * Reference: per 32-block 8 int32 lanes of 4 products, acc[l] = fma(d_w*d_x, lane, acc[l]),
 * hsum8. Signed products as dot_u8s8(|w|, sign(x, w)). With AVX-VNNI the sign step per
 * token goes: VPDPBUSD takes the weights as w + 128 (one XOR per block for all tokens)
 * and starts from the token's prepared correction -128 . x, so each lane is exactly
 * x . w again. (Without VNNI, VPMADDUBSW would saturate on (w + 128) x pairs.) */

INLINE __m256i q80_weights(uint32_t wt, const uint8_t *w, int64_t b, float *d) {
    if (wt == GGML_Q8_0) {
        const block_q8_0 *a = (const block_q8_0 *)w + b;
        *d = h2f(a->d);
        return load256(a->qs);
    }
    if (wt == GGML_Q4_0) {
        const block_q4_0 *a = (const block_q4_0 *)w + b;
        *d = h2f(a->d);
        return _mm256_sub_epi8(nibbles(a->qs), _mm256_set1_epi8(8));
    }
    const block_q5_0 *a = (const block_q5_0 *)w + b;
    *d = h2f(a->d);
    /* where the 5th bit is clear the value is nibble - 16: set the upper bits */
    return _mm256_or_si256(nibbles(a->qs), _mm256_andnot_si256(bytes_from_bits(a->qh), _mm256_set1_epi8((char)0xf0)));
}

INLINE void k_q80(uint32_t wt, const matrix *W, int64_t r, int64_t r2, const int R, const kact *x, int t0, const int C,
                  float *Y, int64_t ldy) {
    const int64_t nb = W->n_in / QK8_0;
    const int64_t rows[2] = {r, r2};
    const uint8_t *w[2];
    const int8_t *xq[8];
    const float *dx[8];
    __m256 acc[2][8];
    #pragma GCC unroll 2
    for (int i = 0; i < R; i++) w[i] = (const uint8_t *)W->data + (size_t)rows[i] * W->row_bytes;
    #pragma GCC unroll 16
    for (int t = 0; t < C; t++) {
        xq[t] = (const int8_t *)kact_aux(x, t0 + t);
        dx[t] = (const float *)(xq[t] + 2 * W->n_in);
        #pragma GCC unroll 2
        for (int i = 0; i < R; i++) acc[i][t] = _mm256_setzero_ps();
    }
    const size_t bsz = wt == GGML_Q8_0 ? sizeof(block_q8_0) : wt == GGML_Q4_0 ? sizeof(block_q4_0) : sizeof(block_q5_0);
    for (int64_t b = 0; b < nb; b++) {
        #pragma GCC unroll 2
        for (int i = 0; i < R; i++) {
            float dw;
            if (C <= 8) prefetch_row(w[i], (size_t)b * bsz, bsz);
            const __m256i wq = q80_weights(wt, w[i], b, &dw);
#ifdef AVX2_VNNI
            const __m256i wu = _mm256_xor_si256(wq, _mm256_set1_epi8((char)0x80));
#else
            const __m256i aw = _mm256_sign_epi8(wq, wq);
#endif
            #pragma GCC unroll 16
            for (int t = 0; t < C; t++) {
#ifdef AVX2_VNNI
                const __m256i corr = load256(xq[t] + W->n_in + 32 * b); /* int32 corr[8 * b ..] */
                const __m256i p = _mm256_dpbusd_avx_epi32(corr, wu, load256(xq[t] + 32 * b));
#else
                const __m256i sx = _mm256_sign_epi8(load256(xq[t] + 32 * b), wq);
                const __m256i p = dot_u8s8(aw, sx); /* |w| <= 128, |x| <= 127: pairs fit int16 */
#endif
                acc[i][t] = _mm256_fmadd_ps(_mm256_set1_ps(dw * dx[t][b]), _mm256_cvtepi32_ps(p), acc[i][t]);
            }
        }
    }
    #pragma GCC unroll 2
    for (int i = 0; i < R; i++)
        #pragma GCC unroll 16
        for (int t = 0; t < C; t++) Y[(size_t)(t0 + t) * ldy + rows[i]] = hsum8(acc[i][t]);
}

#define K_Q8_0(...) k_q80(GGML_Q8_0, __VA_ARGS__)
#define K_Q4_0(...) k_q80(GGML_Q4_0, __VA_ARGS__)
#define K_Q5_0(...) k_q80(GGML_Q5_0, __VA_ARGS__)
GEMM_DRIVER(gemm_q8_0, K_Q8_0, 8, 1)
GEMM_DRIVER(gemm_q4_0, K_Q4_0, 8, 1)
GEMM_DRIVER(gemm_q5_0, K_Q5_0, 8, 1)

/* ---------------------------------------------------------------- Q4_1, Q5_1
 * Reference: unsigned weights, acc[l] = fma(d_w*d_x, lane, acc[l]) and a separate
 * summs = fma(m_w, s_x, summs); hsum8(acc) + summs. */

INLINE void k_q81(uint32_t wt, const matrix *W, int64_t r, int64_t r2, const int R, const kact *x, int t0, const int C, float *Y, int64_t ldy) {
    const int64_t nb = W->n_in / QK8_0;
    const uint8_t *w = (const uint8_t *)W->data + (size_t)r * W->row_bytes;
    const block_q8_1 *xq[8];
    const float *dx[8], *sx[8];
    __m256 acc[8];
    float summs[8];
    #pragma GCC unroll 16
    for (int t = 0; t < C; t++) {
        xq[t] = (const block_q8_1 *)kact_row(x, t0 + t);
        dx[t] = (const float *)kact_aux(x, t0 + t);
        sx[t] = dx[t] + nb;
        acc[t] = _mm256_setzero_ps();
        summs[t] = 0;
    }
    for (int64_t b = 0; b < nb; b++) {
        __m256i wq;
        float dw, mw;
        if (C <= 8) prefetch_row(w, (size_t)b * (wt == GGML_Q4_1 ? sizeof(block_q4_1) : sizeof(block_q5_1)),
                                 wt == GGML_Q4_1 ? sizeof(block_q4_1) : sizeof(block_q5_1));
        if (wt == GGML_Q4_1) {
            const block_q4_1 *a = (const block_q4_1 *)w + b;
            wq = nibbles(a->qs);
            dw = h2f(a->d);
            mw = h2f(a->m);
        } else {
            const block_q5_1 *a = (const block_q5_1 *)w + b;
            wq = _mm256_or_si256(nibbles(a->qs), _mm256_and_si256(bytes_from_bits(a->qh), _mm256_set1_epi8(16)));
            dw = h2f(a->d);
            mw = h2f(a->m);
        }
        #pragma GCC unroll 16
        for (int t = 0; t < C; t++) {
            const __m256i p = dot_u8s8(wq, load256(xq[t][b].qs)); /* w <= 31 */
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dw * dx[t][b]), _mm256_cvtepi32_ps(p), acc[t]);
            summs[t] = fmaf(mw, sx[t][b], summs[t]);
        }
    }
    #pragma GCC unroll 16
    for (int t = 0; t < C; t++) Y[(size_t)(t0 + t) * ldy + r] = hsum8(acc[t]) + summs[t];
}

#define K_Q4_1(...) k_q81(GGML_Q4_1, __VA_ARGS__)
#define K_Q5_1(...) k_q81(GGML_Q5_1, __VA_ARGS__)
GEMM_DRIVER(gemm_q4_1, K_Q4_1, 8, 0)
GEMM_DRIVER(gemm_q5_1, K_Q5_1, 8, 0)

/* ---------------------------------------------------------------- Q4_K, Q5_K
 * Reference: lane L = sum_j sc_j * (products of elements 32j+4L..+3), per super-block
 * acc[L] = fma(d_x*d_w, lane, acc[L]); mins as 4 lanes (Q4_K) or one sum (Q5_K). This is
 * llama.cpp's own AVX2 loop, with the tokens of a tile sharing the unpacked weights. */

/* sc[0..7] then m[0..7] as int16, from the 12 packed bytes (16 are read; the 4 after
 * belong to the block). Shuffles, no stores: a byte-wise unpack through memory would stall
 * on store forwarding once per super-block. See kernels_avx512.c kscales_pair. */
INLINE __m256i kscales(const uint8_t *s) {
    const __m128i q = _mm_loadu_si128((const __m128i *)s);
    __m128i a = _mm_shuffle_epi8(q, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    a = _mm_blend_epi32(a, _mm_srli_epi16(a, 4), 0x8);
    const __m128i h = _mm_and_si128(
        _mm_srli_epi16(_mm_shuffle_epi8(q, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7)), 2),
        _mm_set1_epi8(0x30));
    const __m128i lo = _mm_and_si128(a, _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15));
    return _mm256_cvtepu8_epi16(_mm_or_si128(lo, h));
}

INLINE void k_q45k(uint32_t wt, const matrix *W, int64_t r, int64_t r2, const int R, const kact *x, int t0, const int C, float *Y,
                   int64_t ldy) {
    const int five = wt == GGML_Q5_K;
    const int64_t nsb = W->n_in / QK_K;
    const uint8_t *w = (const uint8_t *)W->data + (size_t)r * W->row_bytes;
    const block_q8_K *xq[6];
    const int16_t *bs[6];
    __m256 acc[6];
    __m128 accm[6];
    #pragma GCC unroll 16
    for (int t = 0; t < C; t++) {
        xq[t] = (const block_q8_K *)kact_row(x, t0 + t);
        bs[t] = (const int16_t *)kact_aux(x, t0 + t);
        acc[t] = _mm256_setzero_ps();
        accm[t] = _mm_setzero_ps();
    }
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int64_t i = 0; i < nsb; i++) {
        const uint8_t *qs, *scp;
        if (C <= 8) prefetch_row(w, (size_t)i * (five ? sizeof(block_q5_K) : sizeof(block_q4_K)),
                                 five ? sizeof(block_q5_K) : sizeof(block_q4_K));
        float d, dmin;
        __m256i qh = _mm256_setzero_si256();
        if (five) {
            const block_q5_K *a = (const block_q5_K *)w + i;
            qs = a->qs, scp = a->scales, d = h2f(a->d), dmin = h2f(a->dmin);
            qh = load256(a->qh);
        } else {
            const block_q4_K *a = (const block_q4_K *)w + i;
            qs = a->qs, scp = a->scales, d = h2f(a->d), dmin = h2f(a->dmin);
        }
        const __m256i scm = kscales(scp);
        /* every 16-bit scale broadcast: word j of scm -> all lanes (j < 8: low 128 bits) */
        const __m128i sc8 = _mm256_castsi256_si128(scm);
        __m256i isum[6];
        #pragma GCC unroll 16
        for (int t = 0; t < C; t++) isum[t] = _mm256_setzero_si256();
        #pragma GCC unroll 16
        for (int c = 0; c < 4; c++) {
            const __m256i q = load256(qs + 32 * c);
            __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (five) {
                const __m256i blo = _mm256_and_si256(qh, _mm256_set1_epi8((char)(1 << (2 * c))));
                const __m256i bhi = _mm256_and_si256(qh, _mm256_set1_epi8((char)(1 << (2 * c + 1))));
                const __m256i z = _mm256_setzero_si256(), c16 = _mm256_set1_epi8(16);
                lo = _mm256_or_si256(lo, _mm256_andnot_si256(_mm256_cmpeq_epi8(blo, z), c16));
                hi = _mm256_or_si256(hi, _mm256_andnot_si256(_mm256_cmpeq_epi8(bhi, z), c16));
            }
            /* scale words 2c and 2c+1 of sc8 (a shuffle, not a byte shift: that needs an
             * immediate, and unoptimised builds do not unroll c) */
            const __m256i slo = _mm256_broadcastw_epi16(_mm_shuffle_epi8(sc8, _mm_set1_epi16((short)(((4 * c + 1) << 8) | (4 * c)))));
            const __m256i shi = _mm256_broadcastw_epi16(_mm_shuffle_epi8(sc8, _mm_set1_epi16((short)(((4 * c + 3) << 8) | (4 * c + 2)))));
            #pragma GCC unroll 16
            for (int t = 0; t < C; t++) {
                const int8_t *a = xq[t][i].qs + 64 * c;
                isum[t] = add_madd(isum[t], _mm256_maddubs_epi16(lo, load256(a)), slo);
                isum[t] = add_madd(isum[t], _mm256_maddubs_epi16(hi, load256(a + 32)), shi);
            }
        }
        const __m128i mins = _mm256_extracti128_si256(scm, 1);
        #pragma GCC unroll 16
        for (int t = 0; t < C; t++) {
            const float yd = xq[t][i].d;
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(yd * d), _mm256_cvtepi32_ps(isum[t]), acc[t]);
            __m128i prod = _mm_madd_epi16(mins, _mm_loadu_si128((const __m128i *)(bs[t] + 8 * i)));
            if (five) {
                prod = _mm_hadd_epi32(prod, prod);
                prod = _mm_hadd_epi32(prod, prod);
            }
            accm[t] = _mm_fmadd_ps(_mm_set1_ps(-yd * dmin), _mm_cvtepi32_ps(prod), accm[t]);
        }
    }
    #pragma GCC unroll 16
    for (int t = 0; t < C; t++) {
        float m[4];
        _mm_storeu_ps(m, accm[t]);
        Y[(size_t)(t0 + t) * ldy + r] = hsum8(acc[t]) + (five ? m[0] : (m[0] + m[2]) + (m[1] + m[3]));
    }
}

#define K_Q4_K(...) k_q45k(GGML_Q4_K, __VA_ARGS__)
#define K_Q5_K(...) k_q45k(GGML_Q5_K, __VA_ARGS__)
GEMM_DRIVER(gemm_q4_k, K_Q4_K, 6, 0)
GEMM_DRIVER(gemm_q5_k, K_Q5_K, 6, 0)

/* ---------------------------------------------------------------- Q6_K
 * Reference: unsigned 6-bit weights, scale per 16 elements, lanes minus
 * 32 * madd(bsums, scales); acc[L] = fma(d, lane, acc[L]). llama.cpp's AVX2 loop. */

INLINE void k_q6k(const matrix *W, int64_t r, int64_t r2, const int R, const kact *x, int t0, const int C, float *Y, int64_t ldy) {
    const int64_t nsb = W->n_in / QK_K;
    const block_q6_K *w = (const block_q6_K *)((const uint8_t *)W->data + (size_t)r * W->row_bytes);
    const block_q8_K *xq[6];
    __m256 acc[6];
    #pragma GCC unroll 16
    for (int t = 0; t < C; t++) {
        xq[t] = (const block_q8_K *)kact_row(x, t0 + t);
        acc[t] = _mm256_setzero_ps();
    }
    const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
    for (int64_t i = 0; i < nsb; i++) {
        const block_q6_K *a = w + i;
        if (C <= 8) prefetch_row((const uint8_t *)w, (size_t)i * sizeof *a, sizeof *a);
        /* -32 * scales as int16 (|.| <= 4096): each token's offset is one VPMADDWD, the same
         * integers as -32 * madd(bsums, scales) */
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)a->scales));
        const __m256i nsc32 = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sc16, 5));
        __m256i isum[6];
        #pragma GCC unroll 16
        for (int t = 0; t < C; t++) isum[t] = _mm256_madd_epi16(load256(xq[t][i].bsums), nsc32);
        #pragma GCC unroll 16
        for (int h = 0; h < 2; h++) {
            const __m256i qla = load256(a->ql + 64 * h), qlb = load256(a->ql + 64 * h + 32);
            const __m256i qh = load256(a->qh + 32 * h);
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(qla, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(qlb, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qla, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qlb, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4));
            #pragma GCC unroll 16
            for (int g = 0; g < 4; g++) {
                const int k = 8 * h + 2 * g;
                const __m256i s = _mm256_set_m128i(_mm_set1_epi16(a->scales[k + 1]), _mm_set1_epi16(a->scales[k]));
                #pragma GCC unroll 16
                for (int t = 0; t < C; t++)
                    isum[t] = add_madd(isum[t], _mm256_maddubs_epi16(q[g], load256(xq[t][i].qs + 128 * h + 32 * g)), s);
            }
        }
        const float d = h2f(a->d);
        #pragma GCC unroll 16
        for (int t = 0; t < C; t++)
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(xq[t][i].d * d), _mm256_cvtepi32_ps(isum[t]), acc[t]);
    }
    #pragma GCC unroll 16
    for (int t = 0; t < C; t++) Y[(size_t)(t0 + t) * ldy + r] = hsum8(acc[t]);
}

GEMM_DRIVER(gemm_q6_k, k_q6k, 6, 0)

/* ---------------------------------------------------------------- dispatch */

static int avx2_gemm(const matrix *W, int64_t r0, int64_t r1, const kact *x, float *Y, int64_t ldy) {
    switch (W->type) {
    case GGML_F32: gemm_f32(W, r0, r1, x, Y, ldy); return 1;
    case GGML_F16: gemm_f16(W, r0, r1, x, Y, ldy); return 1;
    case GGML_BF16: gemm_bf16(W, r0, r1, x, Y, ldy); return 1;
    case GGML_Q8_0: gemm_q8_0(W, r0, r1, x, Y, ldy); return 1;
    case GGML_Q4_0: gemm_q4_0(W, r0, r1, x, Y, ldy); return 1;
    case GGML_Q5_0: gemm_q5_0(W, r0, r1, x, Y, ldy); return 1;
    case GGML_Q4_1: gemm_q4_1(W, r0, r1, x, Y, ldy); return 1;
    case GGML_Q5_1: gemm_q5_1(W, r0, r1, x, Y, ldy); return 1;
    case GGML_Q4_K: gemm_q4_k(W, r0, r1, x, Y, ldy); return 1;
    case GGML_Q5_K: gemm_q5_k(W, r0, r1, x, Y, ldy); return 1;
    case GGML_Q6_K: gemm_q6_k(W, r0, r1, x, Y, ldy); return 1;
    default: return 0;
    }
}

static float avx2_sum(const float *x, size_t n) {
    __m256 a = _mm256_setzero_ps(), b = a, c = a, d = a;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a = _mm256_add_ps(a, _mm256_loadu_ps(x + i));
        b = _mm256_add_ps(b, _mm256_loadu_ps(x + i + 8));
        c = _mm256_add_ps(c, _mm256_loadu_ps(x + i + 16));
        d = _mm256_add_ps(d, _mm256_loadu_ps(x + i + 24));
    }
    float s = hsum8(_mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, d)));
    for (; i < n; i++) s += x[i];
    return s;
}

#ifdef AVX2_VNNI
const kernel_isa kernels_avxvnni = {
    .name = "avxvnni", .supported = avx2_supported, .gemm = avx2_gemm, .sum = avx2_sum, .vector_bits = 256};
#else
const kernel_isa kernels_avx2 = {
    .name = "avx2", .supported = avx2_supported, .gemm = avx2_gemm, .sum = avx2_sum, .vector_bits = 256};
#endif
