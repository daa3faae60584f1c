/* kernels_avx512.c - AVX-512 (F, BW, VL, DQ) + VNNI kernels; compiled with the matching
 * -m flags and only called when the CPU reports all of them.
 *
 * Every kernel returns exactly what vec_dot_ref (quant.c) returns for each output: the
 * integer parts are exact whatever the grouping, and the float operations happen in the
 * reference's order on the same values. What the kernels change is how much work one
 * pass over the weights does:
 *
 *   - Two weight rows share a 512-bit register: the low 256 bits hold row r's 8 lanes,
 *     the high 256 bits row r+1's, which is exactly the reference's 8-lane layout per row
 *     (one block of 32 int8 products = 8 int32 lanes of 4, VPDPBUSD's natural output).
 *   - One row pair is multiplied with up to TT tokens while its weights are in registers
 *     (per-block setup - unpacking nibbles, scale conversion - is paid once per pair and
 *     block, not per token). Rows are taken in chunks that stay in L2 while all token
 *     tiles pass over them, so for prompt processing each weight is read from memory once.
 *   - VPDPBUSD needs one unsigned operand: the weights go in as w + 128 and each lane
 *     starts from -128 * (sum of its 4 activations), prepared once per token (kact aux),
 *     which keeps the per-token work to dpbusd, convert, scale, fma.
 *   - Q8_0/Q4_0/Q5_0 with 2 to 12 tokens (batched decode, short prompts) interleave the
 *     two rows' lanes instead, so that a token's scale pair is one broadcast load and one
 *     multiply serves 8 tokens; there x is the unsigned operand (x + 128) and the offset
 *     comes out on the weights' side (k_q80).
 *   - With 13 tokens or more, Q8_0/Q4_0/Q5_0 turn the block around: 16 rows across the
 *     lanes, one register per group of 4 products, so that one multiply gives 16 rows'
 *     scale products (k_q80_rows16; about 1.4x for prompt processing).
 *   - The K-quants (unsigned 4/5/6-bit weights) use VPMADDUBSW + VPDPWSSD so the sub-block
 *     scale multiplies inside the integer sum, as in llama.cpp's AVX2 code.
 *
 * Sections: helpers, float types (F32/F16/BF16), Q8_0-style (Q8_0, Q4_0, Q5_0), Q8_1-style
 * (Q4_1, Q5_1), Q4_K/Q5_K, Q6_K, the dispatcher. */
#include <immintrin.h>
#include <pthread.h>
#include <math.h>
#include <stdlib.h>

#include "engine/kernels/kernels.h"
#include "engine/kernels/quant.h"

#define INLINE static inline __attribute__((always_inline))

static int avx512_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

/* ---------------------------------------------------------------- helpers */

/* the reference's 16-lane tree (quant.h reduce16_ref) spelled out: halves, quarters, pairs */
INLINE float reduce16(__m512 v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

/* ggml's hsum_float_8: x[i] + x[i+4], then (0+2) + (1+3) */
INLINE float hsum8(__m256 x) {
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    return _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));
}
INLINE float hsum8_lo(__m512 v) { return hsum8(_mm512_castps512_ps256(v)); }
INLINE float hsum8_hi(__m512 v) { return hsum8(_mm512_extractf32x8_ps(v, 1)); }

/* 32 bytes at a (low half) and at b (high half) */
INLINE __m512i load_pair256(const void *a, const void *b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}

/* the same 32 bytes in both halves */
INLINE __m512i bcast256(const void *p) { return _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p)); }

/* [a x 8 | b x 8] as floats from two halves */
INLINE __m512 half_pair(fp16_t a, fp16_t b) {
    __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)a)), _mm_set1_epi16((short)b), 1);
    return _mm512_cvtph_ps(h);
}

/* (a & mask) | b in one VPTERNLOGD (0xEA is the truth table of (A & B) | C) */
INLINE __m512i and_or(__m512i a, __m512i mask, __m512i b) { return _mm512_ternarylogic_epi32(mask, a, b, 0xEA); }

/* 16 bytes at a and at b with their high nibbles moved down, before masking:
 * [a | a >> 4 | b | b >> 4] (each 16 bytes; the low nibble of each byte is the field) */
INLINE __m512i nibble_fields(const void *a, const void *b) {
    const __m512i shift = _mm512_set_epi64(0x0004000400040004, 0x0004000400040004, 0, 0, 0x0004000400040004,
                                           0x0004000400040004, 0, 0);
    __m512i v = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)a))),
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)b)), 1);
    return _mm512_srlv_epi16(v, shift);
}

/* 16 bytes at a and at b as 4-bit fields: [a & 15 | a >> 4 | b & 15 | b >> 4] (each 16 bytes) */
INLINE __m512i nibbles_pair(const void *a, const void *b) {
    return _mm512_and_si512(nibble_fields(a, b), _mm512_set1_epi8(15));
}

#ifndef PF_HINT
#define PF_HINT _MM_HINT_T0
#endif
#ifndef PF_BYTES
#define PF_BYTES 4096 /* how far ahead avx512_sum reads (the kernels: PF_AHEAD) */
#endif

/* Decode reads every weight once from memory; hardware prefetching alone leaves the
 * two-row stream well below the machine's read bandwidth, prefetching a few KB ahead
 * brings it to the bandwidth of a plain sequential read. What counts is the bytes asked
 * for ahead over all of a kernel's streams, so each row asks PF_AHEAD / streams ahead
 * (less starves the stream, more evicts what is still to be read). Called once per block
 * of bsz bytes at offset off of rows w0 and w1, with ahead = PF_AHEAD / streams. */
#define PF_AHEAD 8192
INLINE void prefetch_pair(const uint8_t *w0, const uint8_t *w1, size_t off, size_t bsz, size_t ahead) {
#pragma GCC unroll 4
    for (size_t o = 0; o < bsz; o += 64) {
        _mm_prefetch((const char *)w0 + off + o + ahead, PF_HINT);
        _mm_prefetch((const char *)w1 + off + o + ahead, PF_HINT);
    }
}

static inline uint32_t ld32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Rows [r0, r1) in chunks whose weights stay in L2 while every token tile passes over
 * them; for few tokens the chunk is the whole range (the weights stream once anyway). */
static int64_t chunk_rows(size_t row_bytes, int T, int tile) {
    if (T <= tile) return INT64_MAX / 4;
    int64_t rows = (int64_t)(KERNEL_L2_CHUNK_BYTES / (row_bytes ? row_bytes : 1));
    return rows < 2 ? 2 : rows & ~(int64_t)1;
}

/* The pairs of rows a kernel takes together, the i-th of (c1 - c0 + 1) / 2 over rows [c0, c1):
 * row r (returned) and *r2, or r alone when *two is 0 (the last row of an odd range).
 * When the weights stream once (one tile of tokens), row i of each half of the range: two
 * plain sequential streams, which the hardware prefetcher follows, where neighbouring rows
 * read side by side are interleaved streams inside the same few KB, which it follows
 * badly (see k_q80_one). More tokens pass over L2-sized chunks: neighbouring rows. */
INLINE int64_t row_pair(int64_t c0, int64_t c1, int halves, int64_t i, int64_t *r2, int *two) {
    const int64_t h = (c1 - c0) / 2;
    *two = i < h;
    if (!*two) return *r2 = c1 - 1;
    *r2 = halves ? c0 + h + i : c0 + 2 * i + 1;
    return halves ? c0 + i : c0 + 2 * i;
}

/* The row groups of the one-token kernels over rows [r0, r1): the i-th of quarter_groups
 * is row i of each quarter (two pairs: four plain streams), then the 0-3 rows left in pairs.
 * Returns the number of pairs in rows[] (2, or 1 for the rows left) and sets *n, how many
 * of rows[] are real. */
INLINE int64_t quarter_groups(int64_t r0, int64_t r1) { return (r1 - r0) / 4 + ((r1 - r0) % 4 + 1) / 2; }
INLINE int quarter_group(int64_t r0, int64_t r1, int64_t i, int64_t rows[4], int *n) {
    const int64_t q = (r1 - r0) / 4;
    if (i < q) {
        for (int k = 0; k < 4; k++) rows[k] = r0 + k * q + i;
        *n = 4;
        return 2;
    }
    rows[0] = r0 + 4 * q + 2 * (i - q);
    rows[1] = rows[0] + 1;
    *n = rows[1] < r1 ? 2 : 1;
    return 1;
}
/* KERNEL(args..., rows, P, n) for every quarter group of [r0, r1), with P a constant at
 * each call (2 with n = 4, or 1 for the rows left) so that the kernel's loops over its
 * pairs unroll */
#define FOR_QUARTER_GROUPS(r0, r1, KERNEL, ...)                                      \
    for (int64_t qg_ = 0; qg_ < quarter_groups(r0, r1); qg_++) {                     \
        int64_t rows_[4];                                                            \
        int n_;                                                                      \
        if (quarter_group(r0, r1, qg_, rows_, &n_) == 2) KERNEL(__VA_ARGS__, rows_, 2, 4); \
        else KERNEL(__VA_ARGS__, rows_, 1, n_);                                      \
    }

/* the driver of the types without their own: chunks of rows, tiles of up to TT tokens,
 * pairs of rows (row_pair). GEMM_TILES is its loop, a statement over W, r0, r1, x, Y and
 * ldy in scope; the kernel gets any further arguments (...) right after x. */
#define TILE_CASE(k, KERNEL, TT, ...) \
    case k: if (k <= TT) KERNEL(W, r, r2, two, x, ##__VA_ARGS__, t0, (k <= TT ? k : 1), Y, ldy); break;
#define GEMM_TILES(KERNEL, TT, ...)                                                                     \
    do {                                                                                                \
        const int T = x->T;                                                                         \
        const int64_t rc = chunk_rows(W->row_bytes, T, TT);                                         \
        for (int64_t c0 = r0; c0 < r1; c0 += rc) {                                                  \
            const int64_t c1 = r1 - c0 < rc ? r1 : c0 + rc;                                        \
            for (int t0 = 0; t0 < T; t0 += TT) {                                                    \
                const int c = T - t0 < TT ? T - t0 : TT;                                            \
                for (int64_t i = 0; i < (c1 - c0 + 1) / 2; i++) {                                   \
                    int64_t r2;                                                                     \
                    int two;                                                                        \
                    const int64_t r = row_pair(c0, c1, T <= TT, i, &r2, &two);                      \
                    switch (c) {                                                                    \
                        TILE_CASE(1, KERNEL, TT, ##__VA_ARGS__) TILE_CASE(2, KERNEL, TT, ##__VA_ARGS__) \
                        TILE_CASE(3, KERNEL, TT, ##__VA_ARGS__) TILE_CASE(4, KERNEL, TT, ##__VA_ARGS__) \
                        TILE_CASE(5, KERNEL, TT, ##__VA_ARGS__) TILE_CASE(6, KERNEL, TT, ##__VA_ARGS__) \
                        TILE_CASE(7, KERNEL, TT, ##__VA_ARGS__) TILE_CASE(8, KERNEL, TT, ##__VA_ARGS__) \
                        TILE_CASE(9, KERNEL, TT, ##__VA_ARGS__) TILE_CASE(10, KERNEL, TT, ##__VA_ARGS__) \
                        TILE_CASE(11, KERNEL, TT, ##__VA_ARGS__) TILE_CASE(12, KERNEL, TT, ##__VA_ARGS__) \
                        TILE_CASE(13, KERNEL, TT, ##__VA_ARGS__) TILE_CASE(14, KERNEL, TT, ##__VA_ARGS__) \
                        TILE_CASE(15, KERNEL, TT, ##__VA_ARGS__) TILE_CASE(16, KERNEL, TT, ##__VA_ARGS__) \
                    }                                                                               \
                }                                                                                   \
            }                                                                                       \
        }                                                                                           \
    } while (0)
#define GEMM_DRIVER(fname, KERNEL, TT)                                                                  \
    static void fname(const matrix *W, int64_t r0, int64_t r1, const kact *x, float *Y, int64_t ldy) { \
        GEMM_TILES(KERNEL, TT);                                                                     \
    }

/* ---------------------------------------------------------------- F32, F16, BF16
 * The reference: 16 lanes (lane = element index mod 16), one fused multiply-add per
 * element, then reduce16. One register per output holds exactly those 16 lanes; the tail
 * uses a masked FMA so untouched lanes keep their value (an FMA with zeros could turn a
 * -0 lane into +0). The activations come as floats (F16/BF16: widened in kact aux). */

INLINE __m512 load_w16(uint32_t wt, const uint8_t *w, int64_t i, __mmask16 m) {
    switch (wt) {
    case GGML_F32: return _mm512_maskz_loadu_ps(m, (const float *)w + i);
    case GGML_F16: return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const fp16_t *)w + i));
    default: /* BF16: the upper half of a float */
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const bf16_t *)w + i)), 16));
    }
}

/* rows[0..R) (R = 1..4) x C tokens (1..6) */
INLINE void k_float(uint32_t wt, const matrix *W, const int64_t *rows, const int R, const kact *x, int t0, const int C,
                    float *Y, int64_t ldy) {
    const int64_t n = W->n_in;
    const uint8_t *w[4];
    const float *xs[6];
    #pragma GCC unroll 16
    for (int i = 0; i < R; i++) w[i] = (const uint8_t *)W->data + (size_t)rows[i] * W->row_bytes;
    #pragma GCC unroll 16
    for (int t = 0; t < C; t++)
        xs[t] = wt == GGML_F32 ? (const float *)kact_row(x, t0 + t) : (const float *)kact_aux(x, t0 + t);
    __m512 acc[4][6];
    #pragma GCC unroll 16
    for (int i = 0; i < R; i++)
        #pragma GCC unroll 16
        for (int t = 0; t < C; t++) acc[i][t] = _mm512_setzero_ps();
    const size_t esz = wt == GGML_F32 ? 4 : 2;
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        __m512 wv[4];
        if (C <= 8 && (k * esz) % 64 == 0)
#pragma GCC unroll 4
            for (int i = 0; i < R; i++) _mm_prefetch((const char *)w[i] + k * esz + PF_AHEAD / R, _MM_HINT_T0);
        #pragma GCC unroll 16
        for (int i = 0; i < R; i++) wv[i] = load_w16(wt, w[i], k, 0xffff);
        #pragma GCC unroll 16
        for (int t = 0; t < C; t++) {
            const __m512 xv = _mm512_loadu_ps(xs[t] + k);
            #pragma GCC unroll 16
            for (int i = 0; i < R; i++) acc[i][t] = _mm512_fmadd_ps(wv[i], xv, acc[i][t]);
        }
    }
    if (k < n) {
        const __mmask16 m = (__mmask16)((1u << (n - k)) - 1);
        __m512 wv[4];
        #pragma GCC unroll 16
        for (int i = 0; i < R; i++) wv[i] = load_w16(wt, w[i], k, m);
        #pragma GCC unroll 16
        for (int t = 0; t < C; t++) {
            const __m512 xv = _mm512_maskz_loadu_ps(m, xs[t] + k);
            #pragma GCC unroll 16
            for (int i = 0; i < R; i++) acc[i][t] = _mm512_mask3_fmadd_ps(wv[i], xv, acc[i][t], m);
        }
    }
    #pragma GCC unroll 16
    for (int i = 0; i < R; i++)
        #pragma GCC unroll 16
        for (int t = 0; t < C; t++) Y[(size_t)(t0 + t) * ldy + rows[i]] = reduce16(acc[i][t]);
}

/* One tile of tokens (the weights stream once) takes row i of each quarter of the range
 * (quarter_group: four plain streams), more tokens pass over L2-sized chunks of
 * neighbouring rows, four at a time. */
static void gemm_float(const matrix *W, int64_t r0, int64_t r1, const kact *x, float *Y, int64_t ldy) {
    const uint32_t wt = W->type;
    const int T = x->T;
#define FLOAT_TILE(R, C)                                                                    \
    do {                                                                                    \
        if (wt == GGML_F32) k_float(GGML_F32, W, rows, R, x, t0, C, Y, ldy);                \
        else if (wt == GGML_F16) k_float(GGML_F16, W, rows, R, x, t0, C, Y, ldy);           \
        else k_float(GGML_BF16, W, rows, R, x, t0, C, Y, ldy);                              \
    } while (0)
#define FLOAT_TILES(R)                   \
    switch (c) {                         \
    case 1: FLOAT_TILE(R, 1); break;     \
    case 2: FLOAT_TILE(R, 2); break;     \
    case 3: FLOAT_TILE(R, 3); break;     \
    case 4: FLOAT_TILE(R, 4); break;     \
    case 5: FLOAT_TILE(R, 5); break;     \
    default: FLOAT_TILE(R, 6); break;    \
    }
    const int64_t rc = chunk_rows(W->row_bytes, T, 6);
    for (int64_t c0 = r0; c0 < r1; c0 += rc) {
        const int64_t c1 = r1 - c0 < rc ? r1 : c0 + rc;
        for (int t0 = 0; t0 < T; t0 += 6) {
            const int c = T - t0 < 6 ? T - t0 : 6;
            if (T <= 6) {
                for (int64_t i = 0; i < quarter_groups(c0, c1); i++) {
                    int64_t rows[4];
                    int n;
                    if (quarter_group(c0, c1, i, rows, &n) == 2) FLOAT_TILES(4)
                    else if (n == 2) FLOAT_TILES(2)
                    else FLOAT_TILES(1)
                }
                continue;
            }
            int64_t r = c0;
            for (; r + 4 <= c1; r += 4) {
                const int64_t rows[4] = {r, r + 1, r + 2, r + 3};
                FLOAT_TILES(4)
            }
            for (; r < c1; r++) {
                const int64_t rows[1] = {r};
                FLOAT_TILES(1)
            }
        }
    }
#undef FLOAT_TILES
#undef FLOAT_TILE
}

/* ---------------------------------------------------------------- Q8_0, Q4_0, Q5_0
 * Reference (dot_blocks_i8): per 32-block, 8 int32 lanes of 4 products;
 * acc[l] = fma(d_w * d_x, (float)lane, acc[l]); then hsum8. VPDPBUSD multiplies unsigned by
 * signed bytes: the weights go in as w + 128 and each lane starts from -128 * (sum of its 4
 * activations), prepared once per token (kact aux), so per token and block the work is
 * one dpbusd, a convert, the scale product and the fma. */

/* block b of rows w0/w1 as signed bytes [row0 | row1], and their scales */
INLINE __m512i q80_weights_s8(uint32_t wt, const uint8_t *w0, const uint8_t *w1, int64_t b, fp16_t *d0, fp16_t *d1) {
    if (wt == GGML_Q8_0) {
        const block_q8_0 *a = (const block_q8_0 *)w0 + b, *c = (const block_q8_0 *)w1 + b;
        *d0 = a->d;
        *d1 = c->d;
        return load_pair256(a->qs, c->qs);
    }
    if (wt == GGML_Q4_0) { /* nibble - 8 */
        const block_q4_0 *a = (const block_q4_0 *)w0 + b, *c = (const block_q4_0 *)w1 + b;
        *d0 = a->d;
        *d1 = c->d;
        return _mm512_sub_epi8(nibbles_pair(a->qs, c->qs), _mm512_set1_epi8(8));
    }
    const block_q5_0 *a = (const block_q5_0 *)w0 + b, *c = (const block_q5_0 *)w1 + b;
    *d0 = a->d;
    *d1 = c->d;
    /* (nibble | bit << 4) - 16; the 5th bit of element j is bit j of qh */
    const __mmask64 hb = (__mmask64)ld32(a->qh) | (__mmask64)ld32(c->qh) << 32;
    const __m512i v = _mm512_sub_epi8(nibbles_pair(a->qs, c->qs), _mm512_set1_epi8(16));
    return _mm512_mask_add_epi8(v, hb, v, _mm512_set1_epi8(16));
}

/* the same as w + 128, unsigned bytes (the one-token and many-token kernels' operand), each
 * type in as few operations as it takes: Q8_0 w ^ 0x80 (flipping the sign bit of a two's
 * complement byte adds 128 modulo 256); Q4_0 nibble - 8 + 128 = nibble + 120; Q5_0 (nibble |
 * bit << 4) - 16 + 128 = nibble + 112 = nibble | 0x70, and 16 more where the fifth bit is set
 * (nibble | 0x80): the mask and the OR in one VPTERNLOGD, one operation where the signed
 * form takes a subtract, a masked add and an XOR */
INLINE __m512i q80_weights(uint32_t wt, const uint8_t *w0, const uint8_t *w1, int64_t b, fp16_t *d0, fp16_t *d1) {
    if (wt == GGML_Q8_0) return _mm512_xor_si512(q80_weights_s8(wt, w0, w1, b, d0, d1), _mm512_set1_epi8((char)0x80));
    if (wt == GGML_Q4_0) {
        const block_q4_0 *a = (const block_q4_0 *)w0 + b, *c = (const block_q4_0 *)w1 + b;
        *d0 = a->d;
        *d1 = c->d;
        return _mm512_add_epi8(nibbles_pair(a->qs, c->qs), _mm512_set1_epi8(120));
    }
    const block_q5_0 *a = (const block_q5_0 *)w0 + b, *c = (const block_q5_0 *)w1 + b;
    *d0 = a->d;
    *d1 = c->d;
    const __mmask64 hb = (__mmask64)ld32(a->qh) | (__mmask64)ld32(c->qh) << 32;
    const __m512i v = and_or(nibble_fields(a->qs, c->qs), _mm512_set1_epi8(15), _mm512_set1_epi8(0x70));
    return _mm512_mask_add_epi8(v, hb, v, _mm512_set1_epi8(16));
}

/* The kernels read their activations from a panel: per block, each token's 32 values and
 * 8 corrections (64 bytes), then the tile's C scales. Every operand of a block is then at
 * a fixed offset from one pointer. With a pointer per token and stream (3 per token), a
 * tile of 12 needs more registers than there are, and reloading the spilled pointers
 * inside the loop cost about half the kernel's speed. These panels serve one token
 * (k_q80_one: a copy of its row, small next to the weights) and the many-token kernel;
 * 2 to 12 tokens have their own layout (pair_panels). */
#define Q80_PANEL_TOKEN 64
static __thread uint8_t *q80_panel_buf, *pair_panel_buf, *q8k_panel_buf, *q6k_panel_buf, *r16_buf; /* r16: the many-token Q8_0 kernel's weights */
static __thread size_t q80_panel_cap, pair_panel_cap, q8k_panel_cap, q6k_panel_cap, r16_cap;
static __thread uint64_t q8k_panel_serial, q80_panel_serial, pair_panel_serial, q6k_panel_serial; /* the preparation a buffer holds (0: none) */
static __thread int q80_panel_tile, pair_panel_tile;                           /* and the tile size it was built for */

/* Each thread's panel buffers live as long as the thread: a key's destructor frees them
 * when a pool thread ends (engine_close), so nothing leaks. */
static pthread_key_t panel_key;
static pthread_once_t panel_once = PTHREAD_ONCE_INIT;
static void panel_free(void *unused) {
    (void)unused;
    free(q80_panel_buf);
    free(pair_panel_buf);
    free(q8k_panel_buf);
    free(q6k_panel_buf);
    free(r16_buf);
    q80_panel_buf = pair_panel_buf = q8k_panel_buf = q6k_panel_buf = r16_buf = NULL;
    q80_panel_cap = pair_panel_cap = q8k_panel_cap = q6k_panel_cap = r16_cap = 0;
    q8k_panel_serial = q80_panel_serial = pair_panel_serial = q6k_panel_serial = 0;
}
static void panel_key_make(void) { pthread_key_create(&panel_key, panel_free); }

/* *buf with room for need bytes (64-byte aligned), or NULL */
static uint8_t *panel_room(uint8_t **buf, size_t *cap, size_t need) {
    if (need <= *cap) return *buf;
    uint8_t *p = aligned_alloc(64, (need + 63) & ~(size_t)63);
    if (!p) return NULL;
    pthread_once(&panel_once, panel_key_make);
    pthread_setspecific(panel_key, &panel_once); /* any non-NULL value: run panel_free at exit */
    free(*buf);
    *buf = p;
    *cap = need;
    return p;
}

/* The panels of every tile of TILE tokens, one after the other (the last tile may be
 * shorter); built once per preparation of the activations, since the rows pass in several
 * L2 chunks and matmul_multi's matrices share the activations. */
static const uint8_t *q80_panels(const kact *x, int TILE, int64_t nb) {
    if (x->serial && q80_panel_serial == x->serial && q80_panel_tile == TILE && q80_panel_buf) return q80_panel_buf;
    q80_panel_serial = 0;
    if (!panel_room(&q80_panel_buf, &q80_panel_cap, (size_t)x->T * (size_t)nb * (Q80_PANEL_TOKEN + 4))) return NULL;
    q80_panel_serial = x->serial;
    q80_panel_tile = TILE;
    const int64_t n = x->n;
    for (int t0 = 0; t0 < x->T; t0 += TILE) {
        const int C = x->T - t0 < TILE ? x->T - t0 : TILE;
        const size_t block = (size_t)C * (Q80_PANEL_TOKEN + 4);
        uint8_t *panel = q80_panel_buf + (size_t)t0 * (size_t)nb * (Q80_PANEL_TOKEN + 4);
        for (int t = 0; t < C; t++) {
            const int8_t *xs = (const int8_t *)kact_aux(x, t0 + t);
            const int32_t *corr = (const int32_t *)(xs + n);
            const float *dx = (const float *)(xs + 2 * n);
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *p = panel + (size_t)b * block;
                memcpy(p + (size_t)t * Q80_PANEL_TOKEN, xs + 32 * b, 32);
                memcpy(p + (size_t)t * Q80_PANEL_TOKEN + 32, corr + 8 * b, 32);
                memcpy(p + (size_t)C * Q80_PANEL_TOKEN + 4 * (size_t)t, dx + b, 4);
            }
        }
    }
    return q80_panel_buf;
}

/* The row-pair kernel for a tile of 2 to 12 tokens. The two rows sit in the register's
 * halves, as in the one-token kernel: lanes 0-7 are row 0's acc[0..7] (lane l the sum of
 * its products 4l..4l+3), lanes 8-15 row 1's, each accumulating exactly the reference's
 * acc[l], block after block. Per token and block that is a dpbusd, a convert, the scale
 * product (d_w0 d_x | d_w1 d_x) and the fma; the weights' side (their bytes, the offset,
 * the scales) is done once per block for all tokens.
 *
 * The scale product is a multiply by the token's d_x read as a broadcast memory operand.
 * Forming the products of 8 tokens in one multiply and spreading them with broadcast loads
 * from a stack buffer costs fewer vector operations, but each such load waits on the store
 * just before it, so the direct multiply is faster wherever several tokens share a block.
 *
 * Its panels, per block: each token's 32 values as unsigned bytes x + 128 (broadcast to
 * both halves when read), then the tile's C scales d_x padded to 64 bytes. The offset
 * comes out on the weights' side, once per block for all tokens: (x + 128) . w - 128 . w
 * = x . w. */
#define PAIR_TOKEN 32
INLINE size_t pair_scales(int C) { return ((size_t)C * sizeof(float) + 63) / 64 * 64; }
INLINE size_t pair_block(int C) { return (size_t)C * PAIR_TOKEN + pair_scales(C); }
INLINE size_t pair_tile_offset(int t0, int TILE, int64_t nb) { return (size_t)(t0 / TILE) * (size_t)nb * pair_block(TILE); }

static const uint8_t *pair_panels(const kact *x, int TILE, int64_t nb) {
    if (x->serial && pair_panel_serial == x->serial && pair_panel_tile == TILE && pair_panel_buf) return pair_panel_buf;
    pair_panel_serial = 0;
    const int tiles = (x->T + TILE - 1) / TILE;
    if (!panel_room(&pair_panel_buf, &pair_panel_cap, (size_t)tiles * (size_t)nb * pair_block(TILE))) return NULL;
    pair_panel_serial = x->serial;
    pair_panel_tile = TILE;
    const int64_t n = x->n;
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    for (int t0 = 0; t0 < x->T; t0 += TILE) {
        const int C = x->T - t0 < TILE ? x->T - t0 : TILE;
        const size_t block = pair_block(C);
        uint8_t *panel = pair_panel_buf + pair_tile_offset(t0, TILE, nb);
        for (int t = 0; t < C; t++) {
            const int8_t *xs = (const int8_t *)kact_aux(x, t0 + t);
            const float *dx = (const float *)(xs + 2 * n);
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *p = panel + (size_t)b * block;
                const __m256i v = _mm256_loadu_si256((const __m256i *)(xs + 32 * b));
                _mm256_store_si256((__m256i *)(p + (size_t)t * PAIR_TOKEN), _mm256_xor_si256(v, flip));
                ((float *)(p + (size_t)C * PAIR_TOKEN))[t] = dx[b];
            }
        }
    }
    return pair_panel_buf;
}

INLINE void k_q80(uint32_t wt, const matrix *W, int64_t r, int64_t r2, int two, const uint8_t *panel, int t0,
                  const int C, float *Y, int64_t ldy) {
    const int64_t nb = W->n_in / QK8_0;
    const uint8_t *w0 = (const uint8_t *)W->data + (size_t)r * W->row_bytes;
    const uint8_t *w1 = two ? (const uint8_t *)W->data + (size_t)r2 * W->row_bytes : w0;
    const size_t block = pair_block(C);
    const __m512i zero = _mm512_setzero_si512(), x128 = _mm512_set1_epi8((char)0x80);
    __m512 acc[16];
#pragma GCC unroll 16
    for (int t = 0; t < C; t++) acc[t] = _mm512_setzero_ps();
    const size_t bsz = wt == GGML_Q8_0 ? sizeof(block_q8_0) : wt == GGML_Q4_0 ? sizeof(block_q4_0) : sizeof(block_q5_0);
    for (int64_t b = 0; b < nb; b++) {
        fp16_t d0, d1;
        if (C <= 8) prefetch_pair(w0, w1, (size_t)b * bsz, bsz, PF_AHEAD / 2);
        const __m512i wq = q80_weights_s8(wt, w0, w1, b, &d0, &d1);
        const __m512i off = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, x128, wq)); /* -128 . w per lane */
        const __m512 dw = half_pair(d0, d1);
        const uint8_t *p = panel + (size_t)b * block;
        const float *dx = (const float *)(p + (size_t)C * PAIR_TOKEN);
#pragma GCC unroll 16
        for (int t = 0; t < C; t++) {
            const __m512i q = _mm512_dpbusd_epi32(off, bcast256(p + (size_t)t * PAIR_TOKEN), wq);
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(dx[t])), _mm512_cvtepi32_ps(q), acc[t]);
        }
    }
#pragma GCC unroll 16
    for (int t = 0; t < C; t++) {
        float *y = Y + (size_t)(t0 + t) * ldy;
        y[r] = hsum8_lo(acc[t]);
        if (two) y[r2] = hsum8_hi(acc[t]);
    }
}

/* One token (decode): the same layout, rows in the register's halves, with the weights as
 * the unsigned operand (w + 128) and each block's correction read from the panel, since
 * there is no tile of tokens to share the weights' offset. Its operands are q80_panels'.
 *
 * How the rows are read matters as much as the arithmetic. Each row pair's accumulator is
 * a chain of dependent FMAs, one per block, so one pair at a time waits on the FMA's
 * latency every block: two pairs (independent chains sharing the activations' loads) keep
 * the vector units busy. But neighbouring rows read side by side are four interleaved
 * streams inside the same few KB, which the hardware prefetcher follows badly. So
 * gemm_q80_one cuts its range into four quarters and takes row i of each: four plain
 * sequential streams, each prefetched PF_AHEAD / 4 (2 KB) ahead (prefetch_pair). Four
 * streams read as fast as a plain read of the same bytes; one row at a time in 8 lanes
 * (llama.cpp's form, one stream) reads as fast but computes too slowly once the rows are
 * in cache. */
INLINE void k_q80_one(uint32_t wt, const matrix *W, const uint8_t *panel, float *Y, const int64_t *rows, const int P,
                      int n) {
    const int64_t nb = W->n_in / QK8_0;
    const uint8_t *w[2 * 2];
#pragma GCC unroll 4
    for (int k = 0; k < 2 * P; k++) w[k] = (const uint8_t *)W->data + (size_t)rows[k < n ? k : n - 1] * W->row_bytes;
    const size_t block = Q80_PANEL_TOKEN + 4;
    const size_t bsz = wt == GGML_Q8_0 ? sizeof(block_q8_0) : wt == GGML_Q4_0 ? sizeof(block_q4_0) : sizeof(block_q5_0);
    __m512 acc[2];
#pragma GCC unroll 2
    for (int i = 0; i < P; i++) acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = panel + (size_t)b * block;
        const __m512i corr = bcast256(p + 32), xs = bcast256(p);
        const __m512 dx = _mm512_set1_ps(*(const float *)(p + Q80_PANEL_TOKEN));
#pragma GCC unroll 2
        for (int i = 0; i < P; i++) {
            fp16_t d0, d1;
            prefetch_pair(w[2 * i], w[2 * i + 1], (size_t)b * bsz, bsz, PF_AHEAD / (2 * P));
            const __m512i wq = q80_weights(wt, w[2 * i], w[2 * i + 1], b, &d0, &d1);
            const __m512i q = _mm512_dpbusd_epi32(corr, wq, xs);
            acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(half_pair(d0, d1), dx), _mm512_cvtepi32_ps(q), acc[i]);
        }
    }
#pragma GCC unroll 2
    for (int i = 0; i < P; i++) {
        if (2 * i < n) Y[rows[2 * i]] = hsum8_lo(acc[i]);
        if (2 * i + 1 < n) Y[rows[2 * i + 1]] = hsum8_hi(acc[i]);
    }
}

/* rows [r0, r1) for one token (quarter_group) */
INLINE void gemm_q80_one(uint32_t wt, const matrix *W, int64_t r0, int64_t r1, const uint8_t *panel, float *Y) {
    FOR_QUARTER_GROUPS(r0, r1, k_q80_one, wt, W, panel, Y)
}

#define Q80_TILE 12
#define Q80_CASE(k) \
    case k: k_q80(wt, W, r, r2, two, panel, t0, k, Y, ldy); break;
/* rows r and r2 (r alone when !two) for the C tokens of one tile */
INLINE void k_q80_tile(uint32_t wt, const matrix *W, int64_t r, int64_t r2, int two, const uint8_t *panel, int t0,
                       int C, float *Y, int64_t ldy) {
    switch (C) {
        Q80_CASE(1) Q80_CASE(2) Q80_CASE(3) Q80_CASE(4) Q80_CASE(5) Q80_CASE(6)
        Q80_CASE(7) Q80_CASE(8) Q80_CASE(9) Q80_CASE(10) Q80_CASE(11) Q80_CASE(12)
    }
}
#undef Q80_CASE
/* 0 without writing when there is no memory for the panels (the reference runs then) */
INLINE int gemm_q80(uint32_t wt, const matrix *W, int64_t r0, int64_t r1, const kact *x, float *Y, int64_t ldy) {
    const int T = x->T;
    const int64_t rc = chunk_rows(W->row_bytes, T, Q80_TILE), nb = W->n_in / QK8_0;
    if (T == 1) {
        const uint8_t *panel = q80_panels(x, 1, nb);
        if (!panel) return 0;
        gemm_q80_one(wt, W, r0, r1, panel, Y);
        return 1;
    }
    const uint8_t *panels = pair_panels(x, Q80_TILE, nb);
    if (!panels) return 0;
    /* One tile of tokens streams the weights once: the rows of the range's halves together
     * (row_pair). More tokens pass over L2-sized chunks of neighbouring rows instead. */
    for (int64_t c0 = r0; c0 < r1; c0 += rc) {
        const int64_t c1 = r1 - c0 < rc ? r1 : c0 + rc;
        for (int t0 = 0; t0 < T; t0 += Q80_TILE) {
            const int c = T - t0 < Q80_TILE ? T - t0 : Q80_TILE;
            const uint8_t *panel = panels + pair_tile_offset(t0, Q80_TILE, nb);
            for (int64_t i = 0; i < (c1 - c0 + 1) / 2; i++) {
                int64_t r2;
                int two;
                const int64_t r = row_pair(c0, c1, T <= Q80_TILE, i, &r2, &two);
                k_q80_tile(wt, W, r, r2, two, panel, t0, c, Y, ldy);
            }
        }
    }
    return 1;
}

/* ---------------------------------------------------------------- Q8_0-style, many tokens
 * The kernel above puts two rows in a register, 8 lanes each, so the scale product
 * d_w * d_x is a whole multiply per row pair, token and block - one of every four vector
 * operations. With several tokens per row it pays to turn the block around: lane r holds
 * row r's group l (of 16 rows), one register per group l = 0..7. Each lane still
 * accumulates exactly the reference's acc[l] of its own row, block after block, and the
 * final hsum8 tree becomes 7 vector adds that finish 16 rows at once; but now one
 * multiply gives the scale products of 16 rows and serves all 8 groups. Per token and
 * 16-row block that is 8 x (dpbusd, convert, fma) + 1 multiply instead of 8 x 4.
 *
 * The turned-around weights are a re-layout of a few rows at a time into a per-thread
 * buffer (about the bytes of the rows: 512 bytes of w + 128 and 64 of scales per 16-row
 * block), made once per chunk of rows that stays in L2 while every token passes; the
 * mapping stays the only copy of the model. The activation operands are the one-token
 * kernel's panels, q80_panels (per block and token: 32 values, 8 corrections; then the
 * scales). */
#define R16_TILE 5                 /* tokens per pass: 4 groups x 5 tokens = 20 accumulators */
#define R16_BLOCK (8 * 64 + 64)    /* bytes of one 16-row block: W_0..W_7, then 16 float scales */
#define R16_MIN_TOKENS 13          /* fewer tokens: the re-layout costs more than it saves
                                      (k_q80 is as fast at 12 tokens) */

/* rows r..r+15, all nb blocks, turned around into out (nb * R16_BLOCK bytes). The 16 x 8
 * dwords (row, group) of a block transpose in three permute stages: 4 rows x 4 groups,
 * then 8 rows x 2 groups, then 16 rows x 1 group per register. */
static void r16_relayout(uint32_t wt, const matrix *W, int64_t r, int64_t nb, uint8_t *out) {
    const __m512i s1a = _mm512_setr_epi32(0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27);
    const __m512i s1b = _mm512_add_epi32(s1a, _mm512_set1_epi32(4));
    const __m512i s2a = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    const __m512i s2b = _mm512_add_epi32(s2a, _mm512_set1_epi32(8));
    /* each row's block starts with its fp16 scale: one gather reads the 16 of a block */
    const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32((int)W->row_bytes));
    const uint8_t *w = (const uint8_t *)W->data + (size_t)r * W->row_bytes;
    const size_t bsz = wt == GGML_Q8_0 ? sizeof(block_q8_0) : wt == GGML_Q4_0 ? sizeof(block_q4_0) : sizeof(block_q5_0);
    for (int64_t b = 0; b < nb; b++) {
        __m512i z[8], t[8], v[8];
        fp16_t unused[16];
        /* the first read of these weights: 16 streams at once are more than the hardware
         * prefetcher follows well (see prefetch_pair) */
#pragma GCC unroll 8
        for (int j = 0; j < 16; j += 2)
            prefetch_pair(w + (size_t)j * W->row_bytes, w + (size_t)(j + 1) * W->row_bytes, (size_t)b * bsz, bsz,
                          PF_AHEAD / 2); /* 16 streams: not tuned, the distance that suits two */
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) /* rows 2j, 2j+1: [8 groups | 8 groups] */
            z[j] = q80_weights(wt, w + (size_t)(2 * j) * W->row_bytes, w + (size_t)(2 * j + 1) * W->row_bytes, b,
                               &unused[2 * j], &unused[2 * j + 1]);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) { /* rows 4j..4j+3: groups 0-3 (t[j]) and 4-7 (t[j+4]), row fastest */
            t[j] = _mm512_permutex2var_epi32(z[2 * j], s1a, z[2 * j + 1]);
            t[j + 4] = _mm512_permutex2var_epi32(z[2 * j], s1b, z[2 * j + 1]);
        }
#pragma GCC unroll 2
        for (int k = 0; k < 2; k++) /* rows 8k..8k+7: groups (0,1), (2,3), (4,5), (6,7) */
#pragma GCC unroll 2
            for (int g = 0; g < 2; g++) {
                v[4 * k + 2 * g] = _mm512_permutex2var_epi32(t[2 * k + 4 * g], s2a, t[2 * k + 1 + 4 * g]);
                v[4 * k + 2 * g + 1] = _mm512_permutex2var_epi32(t[2 * k + 4 * g], s2b, t[2 * k + 1 + 4 * g]);
            }
        uint8_t *o = out + (size_t)b * R16_BLOCK;
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) { /* group 2p and 2p+1: rows 0-7 from v[p], rows 8-15 from v[p+4] */
            _mm512_storeu_si512(o + 64 * (2 * p), _mm512_shuffle_i32x4(v[p], v[p + 4], 0x44));
            _mm512_storeu_si512(o + 64 * (2 * p + 1), _mm512_shuffle_i32x4(v[p], v[p + 4], 0xEE));
        }
        const __m512i d = _mm512_i32gather_epi32(rows, w + (size_t)b * bsz, 1);
        _mm512_storeu_ps(o + 512, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d)));
    }
}

/* dpbusd(set1(init), u, set1(*x)) with *x read as the instruction's broadcast memory operand
 * (compilers load it into a register first, one more load and one more register per use) */
INLINE __m512i dpbusd_bcast(int32_t init, __m512i u, const int32_t *x) {
    __m512i acc = _mm512_set1_epi32(init);
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*x));
    return acc;
}

/* 16 rows (turned around at wv) x C tokens of one panel: groups 0-3 in a first pass over
 * the blocks, 4-7 in a second (8 groups x 5 tokens would not fit in the registers) */
INLINE void k_q80_rows16(const uint8_t *wv, int64_t nb, const uint8_t *panel, int t0, const int C, float *Y,
                         int64_t ldy, int64_t r) {
    const size_t block = (size_t)C * (Q80_PANEL_TOKEN + 4);
    __m512 first[4 * R16_TILE];
    for (int h = 0; h < 2; h++) {
        __m512 acc[4 * R16_TILE];
#pragma GCC unroll 20
        for (int i = 0; i < 4 * C; i++) acc[i] = _mm512_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *wb = wv + (size_t)b * R16_BLOCK;
            const __m512i w0 = _mm512_loadu_si512(wb + 64 * (4 * h)), w1 = _mm512_loadu_si512(wb + 64 * (4 * h + 1));
            const __m512i w2 = _mm512_loadu_si512(wb + 64 * (4 * h + 2)), w3 = _mm512_loadu_si512(wb + 64 * (4 * h + 3));
            const __m512 dw = _mm512_loadu_ps(wb + 512);
            const uint8_t *p = panel + (size_t)b * block;
            const float *dx = (const float *)(p + (size_t)C * Q80_PANEL_TOKEN);
#pragma GCC unroll 5
            for (int c = 0; c < C; c++) {
                const int32_t *xq = (const int32_t *)(p + (size_t)c * Q80_PANEL_TOKEN) + 4 * h;
                const int32_t *corr = xq + 8;
                const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(dx[c]));
                acc[4 * c + 0] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(dpbusd_bcast(corr[0], w0, xq)), acc[4 * c + 0]);
                acc[4 * c + 1] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(dpbusd_bcast(corr[1], w1, xq + 1)), acc[4 * c + 1]);
                acc[4 * c + 2] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(dpbusd_bcast(corr[2], w2, xq + 2)), acc[4 * c + 2]);
                acc[4 * c + 3] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(dpbusd_bcast(corr[3], w3, xq + 3)), acc[4 * c + 3]);
            }
        }
        if (h == 0) {
#pragma GCC unroll 20
            for (int i = 0; i < 4 * C; i++) first[i] = acc[i];
            continue;
        }
        /* hsum8 per lane: ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)) */
#pragma GCC unroll 5
        for (int c = 0; c < C; c++) {
            const __m512 s0 = _mm512_add_ps(first[4 * c + 0], acc[4 * c + 0]), s1 = _mm512_add_ps(first[4 * c + 1], acc[4 * c + 1]);
            const __m512 s2 = _mm512_add_ps(first[4 * c + 2], acc[4 * c + 2]), s3 = _mm512_add_ps(first[4 * c + 3], acc[4 * c + 3]);
            _mm512_storeu_ps(Y + (size_t)(t0 + c) * ldy + r, _mm512_add_ps(_mm512_add_ps(s0, s2), _mm512_add_ps(s1, s3)));
        }
    }
}

#define R16_CASE(k) \
    case k: k_q80_rows16(wv, nb, panel, t0, k, Y, ldy, r); break;
/* rows in chunks (a multiple of 16 that stays in L2): turn the chunk's 16-row blocks
 * around, then pass every token tile over them; rows past the last whole 16 (only where
 * n_out is not a multiple of 16) take the row-pair driver. 0 when there is no memory for
 * the buffers (then the reference computes the rows again, to the same bits). */
INLINE int gemm_q80_rows16(uint32_t wt, const matrix *W, int64_t r0, int64_t r1, const kact *x, float *Y,
                           int64_t ldy) {
    const int T = x->T;
    const int64_t nb = W->n_in / QK8_0, r16 = r0 + ((r1 - r0) & ~(int64_t)15);
    int64_t rc = (KERNEL_L2_CHUNK_BYTES / (int64_t)W->row_bytes) & ~(int64_t)15;
    if (rc < 16 || T <= R16_TILE) rc = 16;
    const uint8_t *panels = q80_panels(x, R16_TILE, nb);
    uint8_t *wv0 = panel_room(&r16_buf, &r16_cap, (size_t)rc / 16 * (size_t)nb * R16_BLOCK);
    if (!panels || !wv0) return 0;
    for (int64_t c0 = r0; c0 < r16; c0 += rc) {
        const int64_t c1 = r16 - c0 < rc ? r16 : c0 + rc;
        for (int64_t r = c0; r < c1; r += 16) r16_relayout(wt, W, r, nb, wv0 + (size_t)(r - c0) / 16 * (size_t)nb * R16_BLOCK);
        /* while the tokens pass over this chunk, the next one comes into L2 a slice per
         * kernel call, so that its re-layout does not wait for memory */
        const uint8_t *next = (const uint8_t *)W->data + (size_t)c1 * W->row_bytes;
        const size_t next_bytes = (size_t)(r16 - c1 < rc ? r16 - c1 : rc) * W->row_bytes;
        const size_t calls = (size_t)((T + R16_TILE - 1) / R16_TILE) * (size_t)((c1 - c0) / 16);
        const size_t slice = (next_bytes / calls + 64) & ~(size_t)63;
        size_t ahead = 0;
        for (int t0 = 0; t0 < T; t0 += R16_TILE) {
            const int c = T - t0 < R16_TILE ? T - t0 : R16_TILE;
            const uint8_t *panel = panels + (size_t)t0 * (size_t)nb * (Q80_PANEL_TOKEN + 4);
            for (int64_t r = c0; r < c1; r += 16) {
                for (size_t o = 0; o < slice && ahead < next_bytes; o += 64, ahead += 64)
                    _mm_prefetch((const char *)next + ahead, _MM_HINT_T1);
                const uint8_t *wv = wv0 + (size_t)(r - c0) / 16 * (size_t)nb * R16_BLOCK;
                switch (c) { R16_CASE(1) R16_CASE(2) R16_CASE(3) R16_CASE(4) R16_CASE(5) }
            }
        }
    }
    return r16 < r1 ? gemm_q80(wt, W, r16, r1, x, Y, ldy) : 1;
}
#undef R16_CASE

/* the row-pair kernel for few tokens, 16 rows across the lanes for many */
INLINE int gemm_q80_any(uint32_t wt, const matrix *W, int64_t r0, int64_t r1, const kact *x, float *Y, int64_t ldy) {
    if (x->T >= R16_MIN_TOKENS && r1 - r0 >= 16) return gemm_q80_rows16(wt, W, r0, r1, x, Y, ldy);
    return gemm_q80(wt, W, r0, r1, x, Y, ldy);
}
static int gemm_q8_0(const matrix *W, int64_t r0, int64_t r1, const kact *x, float *Y, int64_t ldy) {
    return gemm_q80_any(GGML_Q8_0, W, r0, r1, x, Y, ldy);
}
static int gemm_q4_0(const matrix *W, int64_t r0, int64_t r1, const kact *x, float *Y, int64_t ldy) {
    return gemm_q80_any(GGML_Q4_0, W, r0, r1, x, Y, ldy);
}
static int gemm_q5_0(const matrix *W, int64_t r0, int64_t r1, const kact *x, float *Y, int64_t ldy) {
    return gemm_q80_any(GGML_Q5_0, W, r0, r1, x, Y, ldy);
}

/* ---------------------------------------------------------------- Q4_1, Q5_1
 * Reference (dot_q8_1_act): unsigned weights; per block acc[l] = fma(d_w*d_x, lane, acc[l])
 * and summs = fma(m_w, s_x, summs); result hsum8(acc) + summs. The weights are the unsigned
 * operand of dpbusd, the activations (signed) are used as they are. */

INLINE void k_q81(uint32_t wt, const matrix *W, int64_t r, int64_t r2, int two, const kact *x, int t0, const int C,
                  float *Y, int64_t ldy) {
    const int64_t nb = W->n_in / QK8_0;
    const uint8_t *w0 = (const uint8_t *)W->data + (size_t)r * W->row_bytes;
    const uint8_t *w1 = two ? (const uint8_t *)W->data + (size_t)r2 * W->row_bytes : w0;
    const block_q8_1 *xq[16];
    const float *dx[16], *sx[16];
    __m512 acc[16], sacc[16];
    #pragma GCC unroll 16
    for (int t = 0; t < C; t++) {
        xq[t] = (const block_q8_1 *)kact_row(x, t0 + t);
        dx[t] = (const float *)kact_aux(x, t0 + t);
        sx[t] = dx[t] + nb;
        acc[t] = sacc[t] = _mm512_setzero_ps();
    }
    const __m512i zero = _mm512_setzero_si512();
    for (int64_t b = 0; b < nb; b++) {
        __m512i wq;
        __m512 dw, mw;
        if (C <= 8) {
            const size_t bs = wt == GGML_Q4_1 ? sizeof(block_q4_1) : sizeof(block_q5_1);
            prefetch_pair(w0, w1, (size_t)b * bs, bs, PF_AHEAD / 2);
        }
        if (wt == GGML_Q4_1) {
            const block_q4_1 *a = (const block_q4_1 *)w0 + b, *c = (const block_q4_1 *)w1 + b;
            wq = nibbles_pair(a->qs, c->qs);
            dw = half_pair(a->d, c->d);
            mw = half_pair(a->m, c->m);
        } else {
            const block_q5_1 *a = (const block_q5_1 *)w0 + b, *c = (const block_q5_1 *)w1 + b;
            const __mmask64 hb = (__mmask64)ld32(a->qh) | (__mmask64)ld32(c->qh) << 32;
            wq = nibbles_pair(a->qs, c->qs);
            wq = _mm512_mask_add_epi8(wq, hb, wq, _mm512_set1_epi8(16));
            dw = half_pair(a->d, c->d);
            mw = half_pair(a->m, c->m);
        }
        #pragma GCC unroll 16
        for (int t = 0; t < C; t++) {
            const __m512i p = _mm512_dpbusd_epi32(zero, wq, bcast256(xq[t][b].qs));
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(dx[t][b])), _mm512_cvtepi32_ps(p), acc[t]);
            sacc[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(sx[t][b]), sacc[t]);
        }
    }
    #pragma GCC unroll 16
    for (int t = 0; t < C; t++) {
        float *y = Y + (size_t)(t0 + t) * ldy;
        float s[16];
        _mm512_storeu_ps(s, sacc[t]);
        y[r] = hsum8_lo(acc[t]) + s[0];
        if (two) y[r2] = hsum8_hi(acc[t]) + s[8];
    }
}

#define K_Q4_1(...) k_q81(GGML_Q4_1, __VA_ARGS__)
#define K_Q5_1(...) k_q81(GGML_Q5_1, __VA_ARGS__)
GEMM_DRIVER(gemm_q4_1, K_Q4_1, 8)
GEMM_DRIVER(gemm_q5_1, K_Q5_1, 8)

/* ---------------------------------------------------------------- Q4_K, Q5_K
 * Reference (dot_q45_K): lane L of a super-block = sum_j sc_j * (products of elements
 * 32j+4L..+3), each sub-block's 8 lanes by VPDPBUSD and the scales by VPDPWSSD over word
 * pairs (one token: word_pairs; several: q45k_tile_superblock's VPACKSSDW);
 * acc[L] = fma(d_x*d_w, lane, acc[L]) per super-block.
 * Mins: 4 lanes k = madd(m, bs32) per super-block, fused by -d_x*dmin_w (Q4_K), or summed
 * to one integer first and fused into a scalar (Q5_K). */

/* The first 16 bytes of two Q4_K/Q5_K super-blocks (d, dmin, the 12 packed scale bytes)
 * as [block 0 | block 1]; the scales, mins and factors all come out of this register. */
INLINE __m256i khead_pair(const void *b0, const void *b1) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)b0)),
                                   _mm_loadu_si128((const __m128i *)b1), 1);
}

/* the scales and mins of the two super-blocks of khead_pair as int16
 * [sc0..7 m0..7 | sc0..7 m0..7], from their 12 packed bytes q (at byte 4 of each half):
 *   sc_j = q[j] & 63, m_j = q[j+4] & 63                                  (j < 4)
 *   sc_j = (q[j+4] & 15) | (q[j-4] >> 6) << 4, m_j = (q[j+4] >> 4) | (q[j] >> 6) << 4   (j >= 4) */
INLINE __m512i kscales_pair(__m256i head) {
    const __m256i lo_idx = _mm256_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15, 4, 5, 6, 7, 12,
                                            13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m256i hi_idx = _mm256_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, 8, 9, 10, 11, -1, -1, -1, -1, 4,
                                            5, 6, 7, -1, -1, -1, -1, 8, 9, 10, 11);
    const __m256i lo_mask = _mm256_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15, 63, 63,
                                             63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15);
    __m256i a = _mm256_shuffle_epi8(head, lo_idx);
    /* m4..7 take the high nibble of q[8..11] */
    a = _mm256_blend_epi32(a, _mm256_srli_epi16(a, 4), 0x88);
    const __m256i h = _mm256_and_si256(_mm256_srli_epi16(_mm256_shuffle_epi8(head, hi_idx), 2), _mm256_set1_epi8(0x30));
    return _mm512_cvtepu8_epi16(_mm256_or_si256(_mm256_and_si256(a, lo_mask), h));
}

/* the fp16 words w and w+8 of khead_pair (d: 0, dmin: 1) as floats, in groups of n (8: [block 0
 * x 8 | block 1 x 8], the layout of the lanes; 4: the mins lanes' [block 0 x 4, block 1 x 4] x 2) */
INLINE __m512 khead_factor(__m256i head, int w, int n) {
    const __m256i idx = n == 8 ? _mm256_setr_epi16(0, 0, 0, 0, 0, 0, 0, 0, 8, 8, 8, 8, 8, 8, 8, 8)
                               : _mm256_setr_epi16(0, 0, 0, 0, 8, 8, 8, 8, 0, 0, 0, 0, 8, 8, 8, 8);
    return _mm512_cvtph_ps(_mm256_permutexvar_epi16(_mm256_add_epi16(idx, _mm256_set1_epi16((short)w)), head));
}

/* permutation indices, as tables so the compiler loads them instead of building them
 * in the loop: the one-token kernels' word pairs (see word_pairs): pair2[c] = [2c, 2c+1
 * (x 8) | 16+2c, 17+2c (x 8)]; q6p[p] = [k, k+2 (x 4), k+1, k+3 (x 4) | the same + 16],
 * k = 4p; the many-token Q4_K/Q5_K pairs of one row (q45k_tile_superblock): q45p =
 * [j, j+1 (x 8) | j+2, j+3 (x 8)] for j = 0, 4 (row 0's halves) and 16, 20 (row 1's) */
static const struct {
    _Alignas(64) int16_t pair2[4][32];
    _Alignas(64) int16_t q6p[4][32];
    _Alignas(64) int16_t q45p[4][32];
} perm = {
#define P2(j) {j, j + 1, j, j + 1, j, j + 1, j, j + 1, j, j + 1, j, j + 1, j, j + 1, j, j + 1, 16 + j, 17 + j, 16 + j, \
               17 + j, 16 + j, 17 + j, 16 + j, 17 + j, 16 + j, 17 + j, 16 + j, 17 + j, 16 + j, 17 + j, 16 + j, 17 + j}
    {P2(0), P2(2), P2(4), P2(6)},
#undef P2
#define Q6P(k) {k, k + 2, k, k + 2, k, k + 2, k, k + 2, k + 1, k + 3, k + 1, k + 3, k + 1, k + 3, k + 1, k + 3,     \
                16 + k, 18 + k, 16 + k, 18 + k, 16 + k, 18 + k, 16 + k, 18 + k, 17 + k, 19 + k, 17 + k, 19 + k, \
                17 + k, 19 + k, 17 + k, 19 + k}
    {Q6P(0), Q6P(4), Q6P(8), Q6P(12)},
#undef Q6P
#define Q45P(j) {j, j + 1, j, j + 1, j, j + 1, j, j + 1, j, j + 1, j, j + 1, j, j + 1, j, j + 1, j + 2, j + 3, j + 2, \
                 j + 3, j + 2, j + 3, j + 2, j + 3, j + 2, j + 3, j + 2, j + 3, j + 2, j + 3, j + 2, j + 3}
    {Q45P(0), Q45P(4), Q45P(16), Q45P(20)},
#undef Q45P
};

/* One token's two groups of 32 products at once, for the one-token kernels. A and B are
 * VPDPBUSD sums (each lane 4 products of a group, |sum| < 2^15, so it fits a word); A goes to
 * the low word of each lane, B to the high word, and one VPDPWSSD with the word pairs of
 * scales s adds sc_A * A + sc_B * B to the lane: 2 VPDPBUSD + 1 VPDPWSSD per two groups
 * instead of 2 VPMADDUBSW + 2 VPDPWSSD, and one scale vector instead of two. Integers, so the
 * lanes are the reference's whatever the grouping. */
INLINE __m512i word_pairs(__m512i isum, __m512i a, __m512i b, __m512i s) {
    return _mm512_dpwssd_epi32(isum, _mm512_mask_blend_epi16(0xAAAAAAAA, a, _mm512_slli_epi32(b, 16)), s);
}
INLINE __m512i pick_perm(const int16_t *idx, __m512i v) { return _mm512_permutexvar_epi16(_mm512_load_si512(idx), v); }

/* The panels of Q8_K tiles (as q80_panels, for the same reason). Per super-block: each
 * token's 256 values (in order for one token, in q45k_panel_values' order for several),
 * then per pair of tokens (the second zero when C is odd) their pair
 * sums of bsums and their negated scales, laid out as the mins lanes of a row pair
 * [row 0, token a | row 1, token a | row 0, token b | row 1, token b] (each 128 bits: 8
 * int16 sums, 4 floats), then the tile's C scales. The mins term of a row pair and two
 * tokens is then one 512-bit multiply-add, instead of a 256-bit pass per token. */
#define Q8K_GROUP 128 /* bytes per 2 tokens: bs32 [2][2][8] int16, -d [2][2][4] float */
INLINE int q8k_groups(int C) { return (C + 1) / 2; }
/* a block's bytes, rounded up to cache lines so that every token's values start on one */
INLINE size_t q8k_block(int C) { return ((size_t)C * (QK_K + 4) + (size_t)q8k_groups(C) * Q8K_GROUP + 63) & ~(size_t)63; }

/* A token's 256 values in the order of the many-token Q4_K/Q5_K kernel (q45k_tile_superblock):
 * per half h (sub-blocks 4h..4h+3), the low nibbles of a row's 64 bytes qs[64h..] are
 * [sub-block 4h | 4h+2] and the high nibbles [4h+1 | 4h+3]; both are dword-interleaved
 * (VPUNPCKLDQ, VPUNPCKHDQ), and so are the activations here, so that one plain load meets
 * each register of either row. */
INLINE void q45k_panel_values(uint8_t *dst, const int8_t *qs) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const int8_t *g = qs + 128 * h;
        const __m512i lo = load_pair256(g, g + 64), hi = load_pair256(g + 32, g + 96);
        _mm512_storeu_si512(dst + 128 * h, _mm512_unpacklo_epi32(lo, hi));
        _mm512_storeu_si512(dst + 128 * h + 64, _mm512_unpackhi_epi32(lo, hi));
    }
}

/* Built once per preparation and thread: the matrices of one matmul_multi job share the
 * activations, and one matrix's rows may come to a thread in several calls. */
static const uint8_t *q8k_panels(const kact *x, int TILE, int64_t nsb) {
    const int tiles = (x->T + TILE - 1) / TILE;
    if (x->serial && q8k_panel_serial == x->serial && q8k_panel_buf) return q8k_panel_buf;
    q8k_panel_serial = 0;
    if (!panel_room(&q8k_panel_buf, &q8k_panel_cap, (size_t)tiles * (size_t)nsb * q8k_block(TILE))) return NULL;
    for (int t0 = 0; t0 < x->T; t0 += TILE) {
        const int C = x->T - t0 < TILE ? x->T - t0 : TILE;
        const size_t block = q8k_block(C), groups = (size_t)C * QK_K;
        uint8_t *panel = q8k_panel_buf + (size_t)(t0 / TILE) * (size_t)nsb * q8k_block(TILE);
        for (int64_t i = 0; i < nsb; i++) memset(panel + (size_t)i * block + groups, 0, block - groups);
        for (int t = 0; t < C; t++) {
            const block_q8_K *xq = (const block_q8_K *)kact_row(x, t0 + t);
            const int16_t *bs = (const int16_t *)kact_aux(x, t0 + t);
            for (int64_t i = 0; i < nsb; i++) {
                uint8_t *p = panel + (size_t)i * block, *g = p + groups + (size_t)(t / 2) * Q8K_GROUP + 32 * (t % 2);
                const float nd[4] = {-xq[i].d, -xq[i].d, -xq[i].d, -xq[i].d};
                if (x->T > 1) q45k_panel_values(p + (size_t)t * QK_K, xq[i].qs);
                else memcpy(p + (size_t)t * QK_K, xq[i].qs, QK_K);
                memcpy(g, bs + 8 * i, 16);
                memcpy(g + 16, bs + 8 * i, 16);
                memcpy(g + 64, nd, 16);
                memcpy(g + 80, nd, 16);
                memcpy(p + groups + (size_t)q8k_groups(C) * Q8K_GROUP + 4 * (size_t)t, &xq[i].d, 4);
            }
        }
    }
    q8k_panel_serial = x->serial;
    return q8k_panel_buf;
}

/* The mins lanes of a row pair for the 2 tokens of a group, one row and token per 128-bit
 * lane: k = m_2k*bs32_2k + m_2k+1*bs32_2k+1 (Q4_K), or for Q5_K their sum in every lane of
 * the row and token (integers: the grouping does not change the value). */
INLINE __m512i mins_group(__m512i m, __m512i bs32, int five) {
    __m512i p = _mm512_madd_epi16(m, bs32);
    if (five) {
        p = _mm512_add_epi32(p, _mm512_shuffle_epi32(p, _MM_PERM_BADC));
        p = _mm512_add_epi32(p, _mm512_shuffle_epi32(p, _MM_PERM_CDAB));
    }
    return p;
}

/* the sum of a row's and token's 4 mins lanes */
INLINE float mins_out(const float *m, int five) { return five ? m[0] : (m[0] + m[2]) + (m[1] + m[3]); }

/* Tokens per tile: the per-super-block setup (scales, nibbles) is paid once per tile, so
 * larger tiles pay it less often, up to what the registers and L1 hold. */
#ifndef Q45K_TILE
#define Q45K_TILE 16
#endif
/* The mins of super-block i of a row pair for the G groups of two tokens at pg (the panel
 * block's groups), added to accm[g]: -d_x*dmin_w times the mins lanes (mins_group). */
INLINE void q45k_mins(int five, __m256i head, __m512i scm, const uint8_t *pg, const int G, __m512 *accm) {
    /* [m0..7 of row 0 | m0..7 of row 1] x 2 out of kscales_pair's layout */
    const __m512i pick_m = _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 15, 14, 13, 12, 11, 10, 9, 8, 31, 30, 29,
                                            28, 27, 26, 25, 24, 15, 14, 13, 12, 11, 10, 9, 8);
    const __m512 dm = khead_factor(head, 1, 4);
    const __m512i mr = _mm512_permutexvar_epi16(pick_m, scm);
    #pragma GCC unroll 8
    for (int g = 0; g < G; g++) {
        const __m512i bs32 = _mm512_loadu_si512(pg + (size_t)g * Q8K_GROUP);
        const __m512 nd = _mm512_loadu_ps(pg + (size_t)g * Q8K_GROUP + 64);
        accm[g] = _mm512_fmadd_ps(_mm512_mul_ps(nd, dm), _mm512_cvtepi32_ps(mins_group(mr, bs32, five)), accm[g]);
    }
}

/* Super-block i of the row pair w0/w1 times one token, its panel block p (q8k_panels of one
 * token: the values in order), added to acc and accm: sub-blocks 2c and 2c + 1 as a word
 * pair (word_pairs; |lane| <= 4 * 31 * 127). */
INLINE void q45k_superblock_one(int five, const uint8_t *w0, const uint8_t *w1, int64_t i, const uint8_t *p,
                                size_t ahead, __m512 *acc, __m512 *accm) {
    const __m512i m4 = _mm512_set1_epi8(15);
    const size_t bs = five ? sizeof(block_q5_K) : sizeof(block_q4_K);
    prefetch_pair(w0, w1, (size_t)i * bs, bs, ahead);
    const __m256i head = khead_pair(w0 + (size_t)i * bs, w1 + (size_t)i * bs);
    const uint8_t *qs0, *qs1;
    __m512i qh = _mm512_setzero_si512();
    if (five) {
        const block_q5_K *a = (const block_q5_K *)w0 + i, *c = (const block_q5_K *)w1 + i;
        qs0 = a->qs, qs1 = c->qs;
        qh = load_pair256(a->qh, c->qh);
    } else {
        const block_q4_K *a = (const block_q4_K *)w0 + i, *c = (const block_q4_K *)w1 + i;
        qs0 = a->qs, qs1 = c->qs;
    }
    const __m512i scm = kscales_pair(head);
    __m512i isum = _mm512_setzero_si512();
    #pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        const __m512i q = load_pair256(qs0 + 32 * c, qs1 + 32 * c);
        __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
        if (five) {
            const __mmask64 blo = _mm512_test_epi8_mask(qh, _mm512_set1_epi8((char)(1 << (2 * c))));
            const __mmask64 bhi = _mm512_test_epi8_mask(qh, _mm512_set1_epi8((char)(1 << (2 * c + 1))));
            lo = _mm512_mask_add_epi8(lo, blo, lo, _mm512_set1_epi8(16));
            hi = _mm512_mask_add_epi8(hi, bhi, hi, _mm512_set1_epi8(16));
        }
        const int8_t *x = (const int8_t *)p + 64 * c;
        const __m512i a = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, bcast256(x));
        const __m512i b = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi, bcast256(x + 32));
        isum = word_pairs(isum, a, b, pick_perm(perm.pair2[c], scm));
    }
    const float *pd = (const float *)(p + QK_K + Q8K_GROUP);
    *acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(pd[0]), khead_factor(head, 0, 8)), _mm512_cvtepi32_ps(isum), *acc);
    q45k_mins(five, head, scm, p + QK_K, 1, accm);
}

/* One row's super-block for the many-token kernel: per half h, the low and high nibbles of
 * qs[64h..64h+63] ([sub-block 4h | 4h+2], [4h+1 | 4h+3]; Q5_K: plus 16 where the bit of qh
 * for that sub-block is set), dword-interleaved as q45k_panel_values lays out the
 * activations: q[2h] = VPUNPCKLDQ, q[2h+1] = VPUNPCKHDQ. */
INLINE void q45k_row_unpack(int five, const uint8_t *qs, const uint8_t *qh, __m512i q[4]) {
    const __m512i m4 = _mm512_set1_epi8(15), sixteen = _mm512_set1_epi8(16);
    const __m512i bits = five ? bcast256(qh) : _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m512i v = _mm512_loadu_si512(qs + 64 * h);
        __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        if (five) { /* sub-block j's fifth bits are bit j of qh */
            const __m512i blo = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << 4 * h)), _mm256_set1_epi8((char)(4 << 4 * h)), 1);
            const __m512i bhi = _mm512_inserti64x4(_mm512_set1_epi8((char)(2 << 4 * h)), _mm256_set1_epi8((char)(8 << 4 * h)), 1);
            lo = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(bits, blo), lo, sixteen);
            hi = _mm512_mask_add_epi8(hi, _mm512_test_epi8_mask(bits, bhi), hi, sixteen);
        }
        q[2 * h] = _mm512_unpacklo_epi32(lo, hi);
        q[2 * h + 1] = _mm512_unpackhi_epi32(lo, hi);
    }
}

/* One half of a row's super-block times one token: isum + the scale pairs s times the
 * VPDPBUSD sums of the two interleaved registers, packed to words */
INLINE __m512i q45k_half(__m512i isum, __m512i qa, __m512i qb, __m512i xa, __m512i xb, __m512i s) {
    const __m512i zero = _mm512_setzero_si512();
    return _mm512_dpwssd_epi32(isum, _mm512_packs_epi32(_mm512_dpbusd_epi32(zero, qa, xa), _mm512_dpbusd_epi32(zero, qb, xb)), s);
}

/* Super-block i of the row pair w0/w1 times the C tokens of its panel block p (q8k_panels of
 * more than one token), added to acc[t] and accm[g] (as q45k_superblock_one for one token).
 * Each row's registers meet a token's activations by plain loads (no broadcast, no second
 * copy): per half, two VPDPBUSD give lane L of sub-blocks (4h, 4h+1) side by side in dwords
 * 0-7 and of (4h+2, 4h+3) in dwords 8-15, VPACKSSDW makes them words (|lane| <= 4 * 31 *
 * 128 < 2^15: exact), and one VPDPWSSD with the scale pairs (perm.q45p) sums each pair
 * times its scales; the two halves of the row's sums then add to the reference's 8 lanes.
 * 12 multiplies per token and row pair against VPMADDUBSW + VPDPWSSD's 16. */
INLINE void q45k_tile_superblock(int five, const uint8_t *w0, const uint8_t *w1, int64_t i, const uint8_t *p,
                                 const int C, size_t ahead, __m512 *acc, __m512 *accm) {
    const int G = q8k_groups(C);
    const size_t bs = five ? sizeof(block_q5_K) : sizeof(block_q4_K);
    if (C <= 8) prefetch_pair(w0, w1, (size_t)i * bs, bs, ahead);
    const __m256i head = khead_pair(w0 + (size_t)i * bs, w1 + (size_t)i * bs);
    __m512i qa[4], qc[4];
    if (five) {
        const block_q5_K *a = (const block_q5_K *)w0 + i, *c = (const block_q5_K *)w1 + i;
        q45k_row_unpack(1, a->qs, a->qh, qa);
        q45k_row_unpack(1, c->qs, c->qh, qc);
    } else {
        const block_q4_K *a = (const block_q4_K *)w0 + i, *c = (const block_q4_K *)w1 + i;
        q45k_row_unpack(0, a->qs, NULL, qa);
        q45k_row_unpack(0, c->qs, NULL, qc);
    }
    const __m512i scm = kscales_pair(head), zero = _mm512_setzero_si512();
    const __m512i sa0 = pick_perm(perm.q45p[0], scm), sa1 = pick_perm(perm.q45p[1], scm);
    const __m512i sc0 = pick_perm(perm.q45p[2], scm), sc1 = pick_perm(perm.q45p[3], scm);
    const uint8_t *pg = p + (size_t)C * QK_K;
    const float *pd = (const float *)(pg + (size_t)G * Q8K_GROUP);
    const __m512 dw = khead_factor(head, 0, 8);
    #pragma GCC unroll 16
    for (int t = 0; t < C; t++) {
        const uint8_t *x = p + (size_t)t * QK_K;
        const __m512i x0 = _mm512_load_si512(x), x1 = _mm512_load_si512(x + 64);
        const __m512i x2 = _mm512_load_si512(x + 128), x3 = _mm512_load_si512(x + 192);
        const __m512i ia = q45k_half(q45k_half(zero, qa[0], qa[1], x0, x1, sa0), qa[2], qa[3], x2, x3, sa1);
        const __m512i ic = q45k_half(q45k_half(zero, qc[0], qc[1], x0, x1, sc0), qc[2], qc[3], x2, x3, sc1);
        /* [row 0's lanes | row 1's lanes]: dwords 0-7 plus 8-15 of each */
        const __m512i isum = _mm512_add_epi32(_mm512_shuffle_i64x2(ia, ic, 0x44), _mm512_shuffle_i64x2(ia, ic, 0xEE));
        acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(pd[t]), dw), _mm512_cvtepi32_ps(isum), acc[t]);
    }
    q45k_mins(five, head, scm, pg, G, accm);
}

/* rows r and r2 (r alone when !two) times the C tokens of a panel */
INLINE void k_q45k(const matrix *W, int64_t r, int64_t r2, int two, const kact *x, uint32_t wt, const uint8_t *panels,
                   int t0, const int C, float *Y, int64_t ldy) {
    (void)x; /* the activations are in the panels */
    const int five = wt == GGML_Q5_K, G = q8k_groups(C);
    const int64_t nsb = W->n_in / QK_K;
    const uint8_t *panel = panels + (size_t)(t0 / Q45K_TILE) * (size_t)nsb * q8k_block(Q45K_TILE);
    const uint8_t *w0 = (const uint8_t *)W->data + (size_t)r * W->row_bytes;
    const uint8_t *w1 = two ? (const uint8_t *)W->data + (size_t)r2 * W->row_bytes : w0;
    const size_t block = q8k_block(C);
    __m512 acc[Q45K_TILE], accm[(Q45K_TILE + 1) / 2];
    #pragma GCC unroll 16
    for (int t = 0; t < C; t++) acc[t] = _mm512_setzero_ps();
    #pragma GCC unroll 8
    for (int g = 0; g < G; g++) accm[g] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nsb; i++)
        q45k_tile_superblock(five, w0, w1, i, panel + (size_t)i * block, C, PF_AHEAD / 2, acc, accm);
    float ms[8 * Q45K_TILE + 8];
    #pragma GCC unroll 8
    for (int g = 0; g < G; g++) _mm512_storeu_ps(ms + 16 * g, accm[g]);
    #pragma GCC unroll 16
    for (int t = 0; t < C; t++) {
        float *y = Y + (size_t)(t0 + t) * ldy;
        y[r] = hsum8_lo(acc[t]) + mins_out(ms + 8 * t, five);
        if (two) y[r2] = hsum8_hi(acc[t]) + mins_out(ms + 8 * t + 4, five);
    }
}

/* One token, rows[0..2P) (n of them real) in P pairs at once (quarter_group) */
INLINE void k_q45k_one(uint32_t wt, const matrix *W, const uint8_t *panel, float *Y, const int64_t *rows, const int P,
                       int n) {
    const int five = wt == GGML_Q5_K;
    const int64_t nsb = W->n_in / QK_K;
    const uint8_t *w[2 * 2];
#pragma GCC unroll 4
    for (int k = 0; k < 2 * P; k++) w[k] = (const uint8_t *)W->data + (size_t)rows[k < n ? k : n - 1] * W->row_bytes;
    const size_t block = q8k_block(1);
    __m512 acc[2], accm[2];
#pragma GCC unroll 2
    for (int p = 0; p < P; p++) acc[p] = accm[p] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nsb; i++)
#pragma GCC unroll 2
        for (int p = 0; p < P; p++)
            q45k_superblock_one(five, w[2 * p], w[2 * p + 1], i, panel + (size_t)i * block, PF_AHEAD / (2 * P), &acc[p],
                                &accm[p]);
#pragma GCC unroll 2
    for (int p = 0; p < P; p++) {
        float ms[16];
        _mm512_storeu_ps(ms, accm[p]);
        if (2 * p < n) Y[rows[2 * p]] = hsum8_lo(acc[p]) + mins_out(ms, five);
        if (2 * p + 1 < n) Y[rows[2 * p + 1]] = hsum8_hi(acc[p]) + mins_out(ms + 4, five);
    }
}

/* 0 without writing when there is no memory for the panels (the reference runs then).
 * One token takes quarter_groups, two pairs in one kernel (four plain streams, as
 * k_q80_one; as two calls per step the quarters would cost a second pass over the
 * activations); several tokens go in GEMM_TILES of up to Q45K_TILE. */
INLINE int gemm_q45k(uint32_t wt, const matrix *W, int64_t r0, int64_t r1, const kact *x, float *Y, int64_t ldy) {
    const uint8_t *panels = q8k_panels(x, Q45K_TILE, W->n_in / QK_K);
    if (!panels) return 0;
    if (x->T == 1) {
        FOR_QUARTER_GROUPS(r0, r1, k_q45k_one, wt, W, panels, Y)
        return 1;
    }
    GEMM_TILES(k_q45k, Q45K_TILE, wt, panels);
    return 1;
}

static int gemm_q4_k(const matrix *W, int64_t r0, int64_t r1, const kact *x, float *Y, int64_t ldy) {
    return gemm_q45k(GGML_Q4_K, W, r0, r1, x, Y, ldy);
}
static int gemm_q5_k(const matrix *W, int64_t r0, int64_t r1, const kact *x, float *Y, int64_t ldy) {
    return gemm_q45k(GGML_Q5_K, W, r0, r1, x, Y, ldy);
}


/* ---------------------------------------------------------------- Q6_K
 * Reference (dot_q6_K): unsigned 6-bit weights q; group g of 32 in half h uses scale
 * sc[8h + 2g] for its first 16 elements and sc[8h + 2g + 1] for the rest; lanes minus
 * 32 * madd(bsums, sc) (lane L: sub-blocks 2L and 2L+1); acc[L] = fma(d, lane, acc[L]). */

/* the 8-bit scales of super-blocks a and c as int16 [a's 16 | c's 16] */
INLINE __m512i q6k_scales(const block_q6_K *a, const block_q6_K *c) {
    return _mm512_cvtepi8_epi16(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)a->scales)),
                                                        _mm_loadu_si128((const __m128i *)c->scales), 1));
}

/* the 6-bit weights of half h of super-blocks a and c, groups g = 0..3 of 32: q[g] = [a | c].
 * Group g's low four bits are the low (g < 2) or high (g >= 2) nibbles of ql[64h + 32(g & 1)..],
 * its top two bits 2g, 2g+1 of qh[32h..], shifted straight to bits 4-5 (a 16-bit shift
 * carries the neighbouring byte's bits in; the masks drop them) */
INLINE void q6k_unpack(const block_q6_K *a, const block_q6_K *c, int h, __m512i q[4]) {
    const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
    const __m512i qla = load_pair256(a->ql + 64 * h, c->ql + 64 * h);
    const __m512i qlb = load_pair256(a->ql + 64 * h + 32, c->ql + 64 * h + 32);
    const __m512i qh = load_pair256(a->qh + 32 * h, c->qh + 32 * h);
    q[0] = and_or(qla, m4, _mm512_and_si512(_mm512_slli_epi16(qh, 4), m30));
    q[1] = and_or(qlb, m4, _mm512_and_si512(_mm512_slli_epi16(qh, 2), m30));
    q[2] = and_or(_mm512_srli_epi16(qla, 4), m4, _mm512_and_si512(qh, m30));
    q[3] = and_or(_mm512_srli_epi16(qlb, 4), m4, _mm512_and_si512(_mm512_srli_epi16(qh, 2), m30));
}

/* -32 * the scales, int16 (|-32 sc| <= 4096): once per super-block pair, so that each
 * token's offset is one VPMADDWD */
INLINE __m512i q6k_offset_scales(__m512i sc) { return _mm512_sub_epi16(_mm512_setzero_si512(), _mm512_slli_epi16(sc, 5)); }

/* the -32 offset of the weights per lane, madd(bsums, -32 sc): the reference's
 * -32 * madd(bsums, sc) as the same integers (|bsum| <= 2032, so no lane overflows);
 * bsums: the 16 sums in both halves */
INLINE __m512i q6k_offset(__m512i bsums, __m512i nsc32) { return _mm512_madd_epi16(bsums, nsc32); }

/* The activations of the many-token kernel. Per tile of up to Q6K_TILE tokens and super-block,
 * a block (q6k_block) of each token's Q6K_PANEL_TOKEN bytes, then the tile's scales d_x, so
 * that the kernel for C tokens finds token t at a constant offset (no pointer per token
 * to load). A token's bytes: for half h and pair p of groups
 * (2p, 2p + 1), k = 2h + p, the two groups' 32 bytes with their dwords interleaved
 * (VPUNPCKLDQ, VPUNPCKHDQ: lanes 0, 1, 4, 5 | 2, 3, 6, 7 of both), then the 16 bsums; each
 * stored twice, so that one plain 512-bit load serves both rows of a pair (a broadcast
 * from memory, VBROADCASTI64X4, costs more than the multiplies it feeds). 512 tokens over
 * n_in 2048 take 2.4 MB; like the other panels,
 * each thread keeps its buffer for the next call. */
#define Q6K_TILE 8 /* tokens per tile */
#define Q6K_PANEL_TOKEN 576
INLINE size_t q6k_block(int C) { return (size_t)C * Q6K_PANEL_TOKEN + ((size_t)C * sizeof(float) + 63) / 64 * 64; }
INLINE size_t q6k_tile_offset(int t0, int64_t nsb) { return (size_t)(t0 / Q6K_TILE) * (size_t)nsb * q6k_block(Q6K_TILE); }

INLINE void dup256_store(uint8_t *dst, __m256i v) { _mm512_store_si512(dst, _mm512_inserti64x4(_mm512_castsi256_si512(v), v, 1)); }

static const uint8_t *q6k_panels(const kact *x, int64_t nsb) {
    if (x->serial && q6k_panel_serial == x->serial && q6k_panel_buf) return q6k_panel_buf;
    q6k_panel_serial = 0;
    const int tiles = (x->T + Q6K_TILE - 1) / Q6K_TILE;
    if (!panel_room(&q6k_panel_buf, &q6k_panel_cap, (size_t)tiles * (size_t)nsb * q6k_block(Q6K_TILE))) return NULL;
    for (int t0 = 0; t0 < x->T; t0 += Q6K_TILE) {
        const int C = x->T - t0 < Q6K_TILE ? x->T - t0 : Q6K_TILE;
        uint8_t *panel = q6k_panel_buf + q6k_tile_offset(t0, nsb);
        for (int t = 0; t < C; t++) {
            const block_q8_K *xq = (const block_q8_K *)kact_row(x, t0 + t);
            for (int64_t i = 0; i < nsb; i++) {
                uint8_t *block = panel + (size_t)i * q6k_block(C), *dst = block + (size_t)t * Q6K_PANEL_TOKEN;
                for (int k = 0; k < 4; k++) { /* k = 2h + p: groups 2p, 2p + 1 of half h at qs + 64k */
                    const __m256i g0 = _mm256_loadu_si256((const __m256i *)(xq[i].qs + 64 * k));
                    const __m256i g1 = _mm256_loadu_si256((const __m256i *)(xq[i].qs + 64 * k + 32));
                    dup256_store(dst + 128 * k, _mm256_unpacklo_epi32(g0, g1));
                    dup256_store(dst + 128 * k + 64, _mm256_unpackhi_epi32(g0, g1));
                }
                dup256_store(dst + 512, _mm256_loadu_si256((const __m256i *)xq[i].bsums));
                ((float *)(block + (size_t)C * Q6K_PANEL_TOKEN))[t] = xq[i].d;
            }
        }
    }
    q6k_panel_serial = x->serial;
    return q6k_panel_buf;
}

/* Half h of super-blocks a and c, unpacked and with the dwords of groups 2p and 2p + 1
 * interleaved (VPUNPCKLDQ, VPUNPCKHDQ) as in the panel: qi[2p], qi[2p + 1] */
INLINE void q6k_half_interleaved(const block_q6_K *a, const block_q6_K *c, int h, __m512i qi[4]) {
    __m512i q[4];
    q6k_unpack(a, c, h, q);
    for (int p = 0; p < 2; p++) {
        qi[2 * p] = _mm512_unpacklo_epi32(q[2 * p], q[2 * p + 1]);
        qi[2 * p + 1] = _mm512_unpackhi_epi32(q[2 * p], q[2 * p + 1]);
    }
}

/* Group pair k = 2h + p of a super-block (weights qa, qb from q6k_half_interleaved) times
 * the C tokens of its q6k_panels block xp, added to isum[t]: two VPDPBUSD over the
 * interleaved dwords (lane L of both groups side by side), VPACKSSDW to words (|lane| <= 4
 * * 63 * 127 < 2^15: exact), one VPDPWSSD with the word pairs of scales s (perm.q6p: the
 * one-token kernels' word pairs), so the lanes are the reference's. */
INLINE void q6k_group_pair(__m512i qa, __m512i qb, __m512i s, const uint8_t *xp, int k, const int C, __m512i *isum) {
    #pragma GCC unroll 16
    for (int t = 0; t < C; t++) {
        const uint8_t *x = xp + (size_t)t * Q6K_PANEL_TOKEN + 128 * k;
        const __m512i A = _mm512_dpbusd_epi32(_mm512_setzero_si512(), qa, _mm512_load_si512(x));
        const __m512i B = _mm512_dpbusd_epi32(_mm512_setzero_si512(), qb, _mm512_load_si512(x + 64));
        isum[t] = _mm512_dpwssd_epi32(isum[t], _mm512_packs_epi32(A, B), s);
    }
}

/* rows r and r2 (r alone when !two) times C tokens; panels: q6k_panels. Software-pipelined
 * by half super-blocks: the next half's weights (and the next super-block's scales) are
 * unpacked between the current half's two group pairs, so that their loads and bit work
 * run while this half's multiplies do, instead of in a gap at the start of each half. */
INLINE void k_q6k(const matrix *W, int64_t r, int64_t r2, int two, const kact *x, const uint8_t *panels, int t0,
                  const int C, float *Y, int64_t ldy) {
    const int64_t nsb = W->n_in / QK_K;
    const block_q6_K *w0 = (const block_q6_K *)((const uint8_t *)W->data + (size_t)r * W->row_bytes);
    const block_q6_K *w1 = two ? (const block_q6_K *)((const uint8_t *)W->data + (size_t)r2 * W->row_bytes) : w0;
    const uint8_t *tile = panels + q6k_tile_offset(t0, nsb);
    __m512 acc[Q6K_TILE];
    #pragma GCC unroll 16
    for (int t = 0; t < C; t++) acc[t] = _mm512_setzero_ps();
    __m512i cur[4], next[4], sc = q6k_scales(w0, w1), sc_next = sc;
    q6k_half_interleaved(w0, w1, 0, cur);
    for (int64_t i = 0; i < nsb; i++) {
        const block_q6_K *a = w0 + i, *c = w1 + i;
        if (C <= 8)
            prefetch_pair((const uint8_t *)w0, (const uint8_t *)w1, (size_t)i * sizeof *a, sizeof *a, PF_AHEAD / 2);
        const uint8_t *xp = tile + (size_t)i * q6k_block(C);
        const __m512i nsc32 = q6k_offset_scales(sc);
        __m512i isum[Q6K_TILE];
        #pragma GCC unroll 16
        for (int t = 0; t < C; t++) isum[t] = q6k_offset(_mm512_load_si512(xp + (size_t)t * Q6K_PANEL_TOKEN + 512), nsc32);
        #pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            q6k_group_pair(cur[0], cur[1], pick_perm(perm.q6p[2 * h], sc), xp, 2 * h, C, isum);
            if (h == 0) q6k_half_interleaved(a, c, 1, next);
            else if (i + 1 < nsb) {
                q6k_half_interleaved(a + 1, c + 1, 0, next);
                sc_next = q6k_scales(a + 1, c + 1);
            }
            q6k_group_pair(cur[2], cur[3], pick_perm(perm.q6p[2 * h + 1], sc), xp, 2 * h + 1, C, isum);
            #pragma GCC unroll 4
            for (int j = 0; j < 4; j++) cur[j] = next[j];
        }
        sc = sc_next;
        const __m512 dw = half_pair(a->d, c->d);
        const float *dx = (const float *)(xp + (size_t)C * Q6K_PANEL_TOKEN);
        #pragma GCC unroll 16
        for (int t = 0; t < C; t++)
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(dx[t]), dw), _mm512_cvtepi32_ps(isum[t]), acc[t]);
    }
    #pragma GCC unroll 16
    for (int t = 0; t < C; t++) {
        float *y = Y + (size_t)(t0 + t) * ldy;
        y[r] = hsum8_lo(acc[t]);
        if (two) y[r2] = hsum8_hi(acc[t]);
    }
}

/* Super-block i of the row pair w0/w1 times one token xq, added to acc: q6k_superblock's
 * sums by word_pairs (|lane| <= 4 * 63 * 127 < 2^15) */
INLINE void q6k_superblock_one(const block_q6_K *w0, const block_q6_K *w1, int64_t i, const block_q8_K *xq,
                               size_t ahead, __m512 *acc) {
    const block_q6_K *a = w0 + i, *c = w1 + i;
    prefetch_pair((const uint8_t *)w0, (const uint8_t *)w1, (size_t)i * sizeof *a, sizeof *a, ahead);
    const __m512i sc = q6k_scales(a, c);
    const int8_t *x = xq[i].qs;
    const __m512i zero = _mm512_setzero_si512();
    __m512i isum = q6k_offset(bcast256(xq[i].bsums), q6k_offset_scales(sc));
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m512i q[4];
        q6k_unpack(a, c, h, q);
#pragma GCC unroll 2
        for (int p = 0; p < 2; p++) { /* groups g = 2p and 2p + 1 of half h */
            const int g = 2 * p, e = 128 * h + 32 * g;
            const __m512i ga = _mm512_dpbusd_epi32(zero, q[g], bcast256(x + e));
            const __m512i gb = _mm512_dpbusd_epi32(zero, q[g + 1], bcast256(x + e + 32));
            isum = word_pairs(isum, ga, gb, pick_perm(perm.q6p[2 * h + p], sc));
        }
    }
    const __m512 dw = half_pair(a->d, c->d);
    *acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(xq[i].d), dw), _mm512_cvtepi32_ps(isum), *acc);
}

/* One token: two row pairs at once, rows[0..2P) (n of them real), like k_q80_one: two
 * independent chains and four plain streams when the pairs come from the range's quarters */
INLINE void k_q6k_one(const matrix *W, const kact *x, float *Y, const int64_t *rows, const int P, int n) {
    const int64_t nsb = W->n_in / QK_K;
    const block_q6_K *w[2 * 2];
#pragma GCC unroll 4
    for (int k = 0; k < 2 * P; k++)
        w[k] = (const block_q6_K *)((const uint8_t *)W->data + (size_t)rows[k < n ? k : n - 1] * W->row_bytes);
    const block_q8_K *xq = (const block_q8_K *)kact_row(x, 0);
    __m512 acc[2];
#pragma GCC unroll 2
    for (int p = 0; p < P; p++) acc[p] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nsb; i++)
#pragma GCC unroll 2
        for (int p = 0; p < P; p++) q6k_superblock_one(w[2 * p], w[2 * p + 1], i, xq, PF_AHEAD / (2 * P), &acc[p]);
#pragma GCC unroll 2
    for (int p = 0; p < P; p++) {
        if (2 * p < n) Y[rows[2 * p]] = hsum8_lo(acc[p]);
        if (2 * p + 1 < n) Y[rows[2 * p + 1]] = hsum8_hi(acc[p]);
    }
}

/* rows [r0, r1); one token in quarter_groups (four plain streams, as k_q80_one),
 * several in GEMM_TILES of up to 8 tokens; 0 without writing when there is no memory for
 * the panels (the reference runs then) */
static int gemm_q6_k(const matrix *W, int64_t r0, int64_t r1, const kact *x, float *Y, int64_t ldy) {
    if (x->T == 1) {
        FOR_QUARTER_GROUPS(r0, r1, k_q6k_one, W, x, Y)
        return 1;
    }
    const uint8_t *panels = q6k_panels(x, W->n_in / QK_K);
    if (!panels) return 0;
    GEMM_TILES(k_q6k, Q6K_TILE, panels);
    return 1;
}

/* ---------------------------------------------------------------- activation rows
 * quantize_activation's Q8_0 and Q8_K (quant.c) with the same arithmetic: max of |x|,
 * one float division for the scale, products rounded to nearest even (VCVTPS2DQ in the
 * default rounding mode, as lrintf), half-precision rounding by VCVTPS2PH; plus the kact
 * aux data in the same pass. */

INLINE float hmax16(__m512 v) {
    __m256 a = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_max_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_max_ss(b, _mm_movehdup_ps(b)));
}

static void prep_q8_0(const float *x, block_q8_0 *y, uint8_t *aux, int64_t n) {
    int8_t *qs = (int8_t *)aux;
    int32_t *corr = (int32_t *)(aux + n);
    float *dd = (float *)(aux + 2 * n);
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        const __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16);
        const float amax = hmax16(_mm512_max_ps(_mm512_andnot_ps(sign, a), _mm512_andnot_ps(sign, b)));
        const float d = amax / 127.f, id = amax != 0.f ? 127.f / amax : 0.f;
        const fp16_t dh = (fp16_t)_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        const __m512 vid = _mm512_set1_ps(id);
        const __m128i qa = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(a, vid)));
        const __m128i qb = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(b, vid)));
        const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(qa), qb, 1);
        y[i].d = dh;
        _mm256_storeu_si256((__m256i *)y[i].qs, q);
        _mm256_storeu_si256((__m256i *)(qs + 32 * i), q);
        /* -128 * (sum of each group of 4) */
        const __m256i s4 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), q);
        _mm256_storeu_si256((__m256i *)(corr + 8 * i), _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(s4, 7)));
        dd[i] = fp16_to_f32(dh);
    }
}

static void prep_q8_K(const float *x, block_q8_K *y, int16_t *bs32, int64_t n) {
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        __m512 v[16], m = _mm512_setzero_ps();
        for (int k = 0; k < 16; k++) {
            v[k] = _mm512_loadu_ps(x + 16 * k);
            m = _mm512_max_ps(m, _mm512_andnot_ps(sign, v[k]));
        }
        const float amax = hmax16(m);
        if (amax == 0.f) {
            memset(&y[i], 0, sizeof y[i]);
            memset(bs32 + 8 * i, 0, 8 * sizeof *bs32);
            continue;
        }
        /* the signed value of the first element of largest magnitude */
        float max = 0;
        for (int k = 0; k < 16; k++) {
            const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, v[k]), _mm512_set1_ps(amax), _CMP_EQ_OQ);
            if (hit) {
                max = x[16 * k + __builtin_ctz(hit)];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m512 vs = _mm512_set1_ps(iscale);
        int sums[16];
        for (int k = 0; k < 16; k++) {
            __m512i q = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(vs, v[k])), _mm512_set1_epi32(127));
            _mm_storeu_si128((__m128i *)(y[i].qs + 16 * k), _mm512_cvtepi32_epi8(q));
            sums[k] = _mm512_reduce_add_epi32(q);
            y[i].bsums[k] = (int16_t)sums[k];
        }
        for (int j = 0; j < 8; j++) bs32[8 * i + j] = (int16_t)(sums[2 * j] + sums[2 * j + 1]);
        y[i].d = 1 / iscale;
    }
}

static int avx512_prep_row(uint32_t dt, const float *x, void *row, void *aux, int64_t n) {
    switch (dt) {
    case GGML_Q8_0: prep_q8_0(x, row, aux, n); return 1;
    case GGML_Q8_K: prep_q8_K(x, row, aux, n); return 1;
    default: return 0;
    }
}

/* ---------------------------------------------------------------- dispatch */

static int avx512_gemm(const matrix *W, int64_t r0, int64_t r1, const kact *x, float *Y, int64_t ldy) {
    switch (W->type) {
    case GGML_F32: case GGML_F16: case GGML_BF16: gemm_float(W, r0, r1, x, Y, ldy); return 1;
    case GGML_Q8_0: return gemm_q8_0(W, r0, r1, x, Y, ldy);
    case GGML_Q4_0: return gemm_q4_0(W, r0, r1, x, Y, ldy);
    case GGML_Q5_0: return gemm_q5_0(W, r0, r1, x, Y, ldy);
    case GGML_Q4_1: gemm_q4_1(W, r0, r1, x, Y, ldy); return 1;
    case GGML_Q5_1: gemm_q5_1(W, r0, r1, x, Y, ldy); return 1;
    case GGML_Q4_K: return gemm_q4_k(W, r0, r1, x, Y, ldy);
    case GGML_Q5_K: return gemm_q5_k(W, r0, r1, x, Y, ldy);
    case GGML_Q6_K: return gemm_q6_k(W, r0, r1, x, Y, ldy);
    default: return 0;
    }
}

static float avx512_sum(const float *x, size_t n) {
    __m512 a = _mm512_setzero_ps(), b = a, c = a, d = a;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        _mm_prefetch((const char *)(x + i) + PF_BYTES, _MM_HINT_T0);
        _mm_prefetch((const char *)(x + i) + PF_BYTES + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)(x + i) + PF_BYTES + 128, _MM_HINT_T0);
        _mm_prefetch((const char *)(x + i) + PF_BYTES + 192, _MM_HINT_T0);
        a = _mm512_add_ps(a, _mm512_loadu_ps(x + i));
        b = _mm512_add_ps(b, _mm512_loadu_ps(x + i + 16));
        c = _mm512_add_ps(c, _mm512_loadu_ps(x + i + 32));
        d = _mm512_add_ps(d, _mm512_loadu_ps(x + i + 48));
    }
    float s = reduce16(_mm512_add_ps(_mm512_add_ps(a, b), _mm512_add_ps(c, d)));
    for (; i < n; i++) s += x[i];
    return s;
}

const kernel_isa kernels_avx512 = {.name = "avx512",
                                   .supported = avx512_supported,
                                   .gemm = avx512_gemm,
                                   .sum = avx512_sum,
                                   .vector_bits = 512,
                                   .prep_row = avx512_prep_row};
