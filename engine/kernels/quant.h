/* quant.h - ggml's weight block formats, half/bfloat conversion, and the activation
 * quantizers llama.cpp applies before a dot product (docs/engine-math.md §3).
 *
 * llama.cpp does not dequantize weights to multiply them: it converts the
 * activation row to the weight type's "dot type" (F16 for F16 weights, Q8_0 blocks
 * for Q8_0/Q4_0/Q5_0, Q8_1 for Q4_1/Q5_1, Q8_K for the K-quants) and does a
 * low-precision dot. chatfs does the same so its logits match. */
#ifndef CHATFS_QUANT_H
#define CHATFS_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define QK8_0 32
#define QK_K 256

typedef uint16_t fp16_t;
typedef uint16_t bf16_t;

typedef struct { fp16_t d; int8_t qs[QK8_0]; } block_q8_0;                    /* 34 bytes */
typedef struct { fp16_t d, s; int8_t qs[QK8_0]; } block_q8_1;                 /* 36 bytes; s = d * sum(qs) */
typedef struct { fp16_t d; uint8_t qs[QK8_0 / 2]; } block_q4_0;               /* 18 bytes */
typedef struct { fp16_t d, m; uint8_t qs[QK8_0 / 2]; } block_q4_1;            /* 20 bytes */
typedef struct { fp16_t d; uint8_t qh[4]; uint8_t qs[QK8_0 / 2]; } block_q5_0; /* 22 bytes */
typedef struct { fp16_t d, m; uint8_t qh[4]; uint8_t qs[QK8_0 / 2]; } block_q5_1; /* 24 bytes */
typedef struct { fp16_t d, dmin; uint8_t scales[12]; uint8_t qs[QK_K / 2]; } block_q4_K;             /* 144 */
typedef struct { fp16_t d, dmin; uint8_t scales[12]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; } block_q5_K; /* 176 */
typedef struct { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; fp16_t d; } block_q6_K; /* 210 */
typedef struct { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; } block_q8_K;                  /* 292 */

/* IEEE half <-> float, round to nearest even (what F16C and ggml do). */
static inline float fp16_to_f32(fp16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) { man <<= 1; exp--; }
            man &= 0x3ff;
            bits = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline fp16_t f32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, e = (x >> 23) & 0xff, man = x & 0x7fffff;
    if (e == 0xff) return (fp16_t)(sign | 0x7c00 | (man ? 0x200 : 0)); /* inf / nan */
    int32_t exp = (int32_t)e - 127 + 15;
    if (exp >= 31) return (fp16_t)(sign | 0x7c00);                    /* overflow -> inf */
    if (exp <= 0) {                                                    /* subnormal or zero */
        if (exp < -10) return (fp16_t)sign;
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (fp16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)exp << 10) | (man >> 13), rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++; /* carries into the exponent correctly */
    return (fp16_t)half;
}

static inline float bf16_to_f32(bf16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline bf16_t f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000) return (bf16_t)((x >> 16) | 64); /* quiet nan */
    return (bf16_t)((x + (0x7fff + ((x >> 16) & 1))) >> 16);             /* round to nearest even */
}

/* The 6-bit scale and min of sub-block j of a Q4_K/Q5_K super-block's 12 packed bytes. */
static inline void k_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Dequantizes n elements (a multiple of the type's block size) of a row. */
void dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);

/* The activation format a weight type is multiplied with (ggml's vec_dot_type). */
uint32_t quant_dot_type(uint32_t weight_type);
/* Bytes one activation row of n elements takes in the dot type. */
size_t quant_row_bytes(uint32_t type, int64_t n);
/* Converts an activation row to the dot type, exactly as llama.cpp's x86 CPU backend. */
void quantize_activation(uint32_t dot_type, const float *x, void *dst, int64_t n);
/* ggml's quantize_row_q4_0_ref (n a multiple of 32): how llama.cpp stores a Q4_0 row, a
 * weight written by chatfs synth or a row of a Q4_0 attention cache. */
void quantize_row_q4_0_ref(const float *x, block_q4_0 *y, int64_t n);

/* Scalar reference dot products: one weight row (type wt) against one activation row
 * already in quant_dot_type(wt). These define the numbers every SIMD path must match,
 * bit for bit: the terms are summed in the order llama.cpp's x86 vector code sums them
 * (float weights: 16 lanes of fused multiply-adds and a fixed reduction tree; Q8_0-style
 * activations: per block 8 lanes of 4 integer products, fused into 8 float lanes, then
 * ggml's hsum_float_8). Float results depend on that order, and activations are later
 * rounded to 8 bits, so one ulp here can move a small model's logits visibly. */
float vec_dot_ref(uint32_t wt, int64_t n, const void *w, const void *x);

/* Sum of 16 values in the order _mm512_reduce_add_ps adds them (halves, quarters,
 * eighths, pairs): how llama.cpp's AVX-512 code ends a float dot product, in the weight
 * kernels' reference and in the layer math. */
float reduce16_ref(const float *v);

/* The block-integer order, the AMX kernel set's arithmetic for Q8_0 weights (kernels_amx.c):
 * per 32-block the products are summed exactly as one integer, then accumulated block after
 * block as acc = fma((float)isum, d_w * d_x, acc). Not llama.cpp's order (vec_dot_ref), so the
 * two differ in the last bits; each is the reference of the kernels that use it.
 * x: a Q8_0 activation row. */
float vec_dot_q8_0_blockint(int64_t n, const block_q8_0 *w, const block_q8_0 *x);

#endif
