/* kernels_amx.c - Intel AMX (tile matrix multiply) for Q8_0 weights; everything else is
 * the AVX-512 set's (this set names it as its base).
 *
 * Why a different arithmetic. AVX-512 reproduces llama.cpp's order for Q8_0: per 32-block,
 * 8 lanes of 4 integer products, each converted and fused into its own float lane. That
 * costs a convert, a scale product and a fused multiply-add per 4 products and token, and
 * that float work, not memory, bounds prompt processing and batched decode. A tile multiply
 * instead yields each block's whole integer sum for 16 rows and up to 16 tokens in one
 * instruction, and the float work shrinks to one fused multiply-add per block, row and
 * token. So this set computes every Q8_0 product in the block-integer order
 * (vec_dot_q8_0_blockint, quant.c):
 *
 *     acc = fma((float)isum_b, d_w * d_x, acc)   for b = 0, 1, ...   (isum_b exact)
 *
 * for every number of tokens alike, so a row's result never depends on which other rows
 * share the pass (batching and chunking stay exact, as the prefix and burst tests demand).
 * It differs from llama.cpp's order in the last bits, and on a small model the 8-bit
 * re-quantization of the activations can turn that into visible logit differences (0.17
 * on the 64-wide qwen35-tiny-q8_0 fixture, over the 0.1 that llama.cpp parity asks), so
 * this set is opt-in: CHATFS_ISA=amx. (llama.cpp's own AMX backend sums whole blocks the
 * same way; the prebuilt zen4 reference does not use it.)
 *
 * Per block and 16 weight rows, one tile multiply C += A B:
 *   A  the 16 rows' 32 int8 weights, loaded straight from the mapping (stride = row
 *      bytes; the block's 2-byte scale is skipped by the offset), so weights stay mmapped
 *      and are read once;
 *   B  the block of C tokens (C <= 16) in the tile unit's layout, B[k][4t + j] =
 *      x_t[4k + j] (k < 8), re-laid out once per prepared activation (kact.serial);
 *   C  16 rows x C tokens of int32 block sums, stored to a small buffer, then converted
 *      and fused into float accumulators (one vector per row, lanes = tokens).
 * One token (decode) needs no re-layout: its B is the block's 32 bytes with a 4-byte
 * stride. Tile loads straight from memory stall, so the next 16 rows are prefetched
 * (they are the next 16 row-lengths of bytes) while the current ones multiply. */
#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine/kernels/kernels.h"
#include "engine/kernels/quant.h"

#define INLINE static inline __attribute__((always_inline))

extern const kernel_isa kernels_avx512;

/* ---------------------------------------------------------------- availability */

#define ARCH_REQ_XCOMP_PERM 0x1023 /* Linux: ask for an extended state component */
#define XFEATURE_XTILEDATA 18      /* the 8 KB of tile registers */

static int amx_ok;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

/* The CPU must have AMX-TILE and AMX-INT8, and Linux must let this process use the tile
 * state (it is off by default because it enlarges every context switch's save area). */
static void amx_probe(void) {
    unsigned a, b, c, d;
    if (!kernels_avx512.supported() || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
    if (!(d & (1u << 24)) || !(d & (1u << 25))) return;
    amx_ok = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

static int amx_supported(void) {
    pthread_once(&amx_once, amx_probe);
    return amx_ok;
}

/* ---------------------------------------------------------------- tiles */

typedef struct __attribute__((aligned(64))) {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* Tiles 0/3: A (16 rows x 32 bytes), 1/4: B (8 rows x C tokens' 4 bytes), 2/5: C (16 rows x
 * C int32); two sets, so that one block's multiply can run while the other's sums are
 * converted. */
static __thread int tiles_C; /* the token count the thread's tiles are configured for, 0 = none */

static void tiles_configure(int C) {
    if (tiles_C == C) return;
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int s = 0; s < 2; s++) {
        cfg.rows[3 * s] = 16, cfg.colsb[3 * s] = 32;
        cfg.rows[3 * s + 1] = 8, cfg.colsb[3 * s + 1] = (uint16_t)(4 * C);
        cfg.rows[3 * s + 2] = 16, cfg.colsb[3 * s + 2] = (uint16_t)(4 * C);
    }
    _tile_loadconfig(&cfg);
    tiles_C = C;
}

/* Hands the tile state back at the end of a call: a thread holding configured tiles makes
 * every context switch save 8 KB more. */
static void tiles_release(void) {
    _tile_release();
    tiles_C = 0;
}

/* ---------------------------------------------------------------- Q8_0 */

#define Q80_BLOCK 34 /* sizeof(block_q8_0): fp16 d, then 32 int8 */

INLINE __m512i row_offsets(size_t rb) {
    return _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                              _mm512_set1_epi32((int)rb));
}

/* the 16 rows' scales of block b as floats (the fp16 is the first 2 bytes of each block) */
INLINE __m512 row_scales(const uint8_t *w, __m512i offs, int64_t b) {
    const __m512i h = _mm512_i32gather_epi32(offs, (const void *)(w + (size_t)b * Q80_BLOCK), 1);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h));
}

/* Tiles ta, tb, tc: tc = the block sums of block b of the 16 rows at w (stride rb; the
 * block's 2-byte scale is skipped) with B at bsrc (row stride bstride), to be stored. A
 * macro: the tile numbers are spelled into the instructions, so they must be literals. */
#define TILE_BLOCK_SUMS(ta, tb, tc, w, rb, b, bsrc, bstride)       \
    do {                                                           \
        _tile_loadd(ta, (w) + (size_t)(b) * Q80_BLOCK + 2, (rb));  \
        _tile_loadd(tb, (bsrc), (bstride));                        \
        _tile_zero(tc);                                            \
        _tile_dpbssd(tc, ta, tb);                                  \
    } while (0)

/* Tile loads straight from memory stall (16 rows, a line each). The next 16 rows are
 * the next 16 * rb bytes: fetch them sequentially, 2 blocks' share (16 * 68 bytes) per
 * step of blocks b, b + 1, so they are in cache one tile ahead. */
INLINE void prefetch_next_tile(const uint8_t *w, size_t rb, int64_t b) {
    const char *next = (const char *)w + 16 * rb + (size_t)b * 16 * Q80_BLOCK;
    for (int o = 0; o < 16 * 2 * Q80_BLOCK; o += 64) _mm_prefetch(next + o, _MM_HINT_T0);
}

/* One token: B = the token's block with a 4-byte stride, and C (16 rows x 1 sum) stored
 * with a 4-byte stride is one vector of the 16 rows' sums, so the accumulator runs over
 * rows. */
static void q80_rows16_one(const uint8_t *w, size_t rb, int64_t nb, const int8_t *xq, const float *dx, float *y) {
    int32_t sums[2][16] __attribute__((aligned(64)));
    const __m512i offs = row_offsets(rb);
    __m512 acc = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        prefetch_next_tile(w, rb, b);
        TILE_BLOCK_SUMS(0, 1, 2, w, rb, b, xq + 32 * b, 4);
        TILE_BLOCK_SUMS(3, 4, 5, w, rb, b + 1, xq + 32 * (b + 1), 4);
        _tile_stored(2, sums[0], 4);
        _tile_stored(5, sums[1], 4);
        const __m512 d0 = _mm512_mul_ps(row_scales(w, offs, b), _mm512_set1_ps(dx[b]));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums[0])), d0, acc);
        const __m512 d1 = _mm512_mul_ps(row_scales(w, offs, b + 1), _mm512_set1_ps(dx[b + 1]));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums[1])), d1, acc);
    }
    if (b < nb) {
        TILE_BLOCK_SUMS(0, 1, 2, w, rb, b, xq + 32 * b, 4);
        _tile_stored(2, sums[0], 4);
        const __m512 d0 = _mm512_mul_ps(row_scales(w, offs, b), _mm512_set1_ps(dx[b]));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums[0])), d0, acc);
    }
    _mm512_storeu_ps(y, acc);
}

/* The sums of one block for 16 rows and the group's tokens, fused into acc[row] (lanes =
 * tokens): sums[i] holds row i's C int32 sums. */
INLINE void q80_fuse(__m512 acc[16], const int32_t sums[16][16], __m512 dw, __m512 dx) {
    float s[16] __attribute__((aligned(64)));
    _mm512_store_ps(s, dw);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums[i])), _mm512_mul_ps(dx, _mm512_set1_ps(s[i])),
                                 acc[i]);
}

/* C tokens (2..16): Y[t][r + i] for the 16 rows at w; bp = the group's re-laid-out blocks
 * (512 bytes each), dp = its scales (16 floats per block, lanes = tokens). */
static void q80_rows16_many(const uint8_t *w, size_t rb, int64_t nb, const int8_t *bp, const float *dp, int C, float *Y,
                            int64_t ldy) {
    int32_t sums[2][16][16] __attribute__((aligned(64)));
    const __m512i offs = row_offsets(rb);
    __m512 acc[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        prefetch_next_tile(w, rb, b);
        TILE_BLOCK_SUMS(0, 1, 2, w, rb, b, bp + 512 * b, 64);
        TILE_BLOCK_SUMS(3, 4, 5, w, rb, b + 1, bp + 512 * (b + 1), 64);
        _tile_stored(2, sums[0], 64);
        _tile_stored(5, sums[1], 64);
        q80_fuse(acc, (const int32_t(*)[16])sums[0], row_scales(w, offs, b), _mm512_load_ps(dp + 16 * b));
        q80_fuse(acc, (const int32_t(*)[16])sums[1], row_scales(w, offs, b + 1), _mm512_load_ps(dp + 16 * (b + 1)));
    }
    if (b < nb) {
        TILE_BLOCK_SUMS(0, 1, 2, w, rb, b, bp + 512 * b, 64);
        _tile_stored(2, sums[0], 64);
        q80_fuse(acc, (const int32_t(*)[16])sums[0], row_scales(w, offs, b), _mm512_load_ps(dp + 16 * b));
    }
    float out[16][16] __attribute__((aligned(64)));
    for (int i = 0; i < 16; i++) _mm512_store_ps(out[i], acc[i]);
    for (int t = 0; t < C; t++)
        for (int i = 0; i < 16; i++) Y[(size_t)t * ldy + i] = out[i][t];
}

/* The activations re-laid out for B, per group of 16 tokens: nb blocks of 8 x 64 bytes,
 * then nb x 16 scales. Kept per thread and rebuilt only for a new preparation: the rows
 * of one matmul come to a thread in several calls. */
static __thread uint8_t *relay_buf;
static __thread size_t relay_cap;
static __thread uint64_t relay_serial;

static pthread_key_t relay_key;
static pthread_once_t relay_once = PTHREAD_ONCE_INIT;
static void relay_free(void *unused) {
    (void)unused;
    free(relay_buf);
    relay_buf = NULL;
    relay_cap = 0;
    relay_serial = 0;
}
static void relay_key_make(void) { pthread_key_create(&relay_key, relay_free); }

static size_t group_bytes(int64_t nb) { return (size_t)nb * (512 + 64); }

static const uint8_t *q80_relayout(const kact *x, int64_t nb) {
    const int groups = (x->T + 15) / 16;
    if (relay_serial == x->serial && relay_buf) return relay_buf;
    const size_t need = (size_t)groups * group_bytes(nb);
    if (need > relay_cap) {
        uint8_t *p = aligned_alloc(64, (need + 63) & ~(size_t)63);
        if (!p) return NULL;
        pthread_once(&relay_once, relay_key_make);
        pthread_setspecific(relay_key, &relay_once); /* any non-NULL value: free at thread exit */
        free(relay_buf);
        relay_buf = p;
        relay_cap = need;
    }
    for (int g = 0; g < groups; g++) {
        uint8_t *bp = relay_buf + (size_t)g * group_bytes(nb);
        float *dp = (float *)(bp + (size_t)nb * 512);
        memset(bp, 0, group_bytes(nb));
        const int C = x->T - 16 * g < 16 ? x->T - 16 * g : 16;
        for (int t = 0; t < C; t++) {
            const uint8_t *xs = kact_aux(x, 16 * g + t);
            const float *dx = (const float *)(xs + 2 * x->n);
            for (int64_t b = 0; b < nb; b++) {
                for (int k = 0; k < 8; k++) memcpy(bp + 512 * b + 64 * k + 4 * t, xs + 32 * b + 4 * k, 4);
                dp[16 * b + t] = dx[b];
            }
        }
    }
    relay_serial = x->serial;
    return relay_buf;
}

/* rows per L2 chunk when many token groups pass over the same weights */
static int64_t chunk_rows(size_t rb, int T) {
    if (T <= 16) return INT64_MAX / 4;
    const int64_t rows = (int64_t)((256 * 1024) / rb) & ~(int64_t)15;
    return rows < 16 ? 16 : rows;
}

static void gemm_q8_0(const matrix *W, int64_t r0, int64_t r1, const kact *x, float *Y, int64_t ldy) {
    const int64_t nb = W->n_in / QK8_0, full = r0 + (r1 - r0) / 16 * 16;
    const size_t rb = W->row_bytes;
    const uint8_t *base = W->data;
    const int T = x->T;
    const uint8_t *relay = T > 1 ? q80_relayout(x, nb) : NULL;
    if (T > 1 && !relay) { /* no memory for the re-layout: the scalar reference of this order */
        kernels_gemm_reference(W, r0, r1, x, Y, ldy);
        return;
    }
    const int64_t rc = chunk_rows(rb, T);
    for (int64_t c0 = r0; c0 < full; c0 += rc) {
        const int64_t c1 = full - c0 < rc ? full : c0 + rc;
        for (int t0 = 0; t0 < T; t0 += 16) {
            const int C = T - t0 < 16 ? T - t0 : 16;
            tiles_configure(C);
            if (C == 1) {
                const uint8_t *xs = kact_aux(x, t0);
                for (int64_t r = c0; r < c1; r += 16)
                    q80_rows16_one(base + (size_t)r * rb, rb, nb, (const int8_t *)xs, (const float *)(xs + 2 * x->n),
                                   Y + (size_t)t0 * ldy + r);
            } else {
                const uint8_t *bp = relay + (size_t)(t0 / 16) * group_bytes(nb);
                for (int64_t r = c0; r < c1; r += 16)
                    q80_rows16_many(base + (size_t)r * rb, rb, nb, (const int8_t *)bp,
                                    (const float *)(bp + (size_t)nb * 512), C, Y + (size_t)t0 * ldy + r, ldy);
            }
        }
    }
    if (full > r0) tiles_release();
    if (full < r1) kernels_gemm_reference(W, full, r1, x, Y, ldy); /* rows that do not fill a tile */
}

/* ---------------------------------------------------------------- dispatch */

static int amx_gemm(const matrix *W, int64_t r0, int64_t r1, const kact *x, float *Y, int64_t ldy) {
    if (W->type == GGML_Q8_0) {
        gemm_q8_0(W, r0, r1, x, Y, ldy);
        return 1;
    }
    return kernels_avx512.gemm(W, r0, r1, x, Y, ldy);
}

static int amx_blockint(uint32_t wt) { return wt == GGML_Q8_0; }

const kernel_isa kernels_amx = {.name = "amx",
                                .supported = amx_supported,
                                .gemm = amx_gemm,
                                .base = &kernels_avx512,
                                .blockint = amx_blockint,
                                .opt_in = 1};
