/* quant.c - block formats: dequantization, activation quantization and the scalar
 * reference dot products (docs/engine-math.md §3). SIMD kernels live in kernels_*.c and are
 * tested against these; the weight quantizers (chatfs synth's) are cli/synth/quantize.c. */
#include "engine/kernels/quant.h"

#include <math.h>
#include <stdlib.h>

#include "engine/gguf/gguf.h"

/* ---------------------------------------------------------------- dequantization */

static void dequant_q8_0(const block_q8_0 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = fp16_to_f32(b[i].d);
        for (int j = 0; j < QK8_0; j++) y[i * QK8_0 + j] = b[i].qs[j] * d;
    }
}

static void dequant_q4_0(const block_q4_0 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = fp16_to_f32(b[i].d);
        for (int j = 0; j < QK8_0 / 2; j++) {
            y[i * QK8_0 + j] = ((b[i].qs[j] & 15) - 8) * d;
            y[i * QK8_0 + j + 16] = ((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void dequant_q4_1(const block_q4_1 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = fp16_to_f32(b[i].d), m = fp16_to_f32(b[i].m);
        for (int j = 0; j < QK8_0 / 2; j++) {
            y[i * QK8_0 + j] = (b[i].qs[j] & 15) * d + m;
            y[i * QK8_0 + j + 16] = (b[i].qs[j] >> 4) * d + m;
        }
    }
}

static uint32_t load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static void dequant_q5_0(const block_q5_0 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = fp16_to_f32(b[i].d);
        uint32_t qh = load_u32(b[i].qh);
        for (int j = 0; j < QK8_0 / 2; j++) {
            int hi0 = (qh >> j) & 1, hi1 = (qh >> (j + 16)) & 1;
            y[i * QK8_0 + j] = (((b[i].qs[j] & 15) | (hi0 << 4)) - 16) * d;
            y[i * QK8_0 + j + 16] = (((b[i].qs[j] >> 4) | (hi1 << 4)) - 16) * d;
        }
    }
}

static void dequant_q5_1(const block_q5_1 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = fp16_to_f32(b[i].d), m = fp16_to_f32(b[i].m);
        uint32_t qh = load_u32(b[i].qh);
        for (int j = 0; j < QK8_0 / 2; j++) {
            int hi0 = (qh >> j) & 1, hi1 = (qh >> (j + 16)) & 1;
            y[i * QK8_0 + j] = ((b[i].qs[j] & 15) | (hi0 << 4)) * d + m;
            y[i * QK8_0 + j + 16] = ((b[i].qs[j] >> 4) | (hi1 << 4)) * d + m;
        }
    }
}

static void dequant_q4_K(const block_q4_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += QK_K) {
        float d = fp16_to_f32(b[i].d), dmin = fp16_to_f32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        for (int c = 0; c < 4; c++, q += 32) {
            uint8_t sc0, m0, sc1, m1;
            k_scale_min(2 * c, b[i].scales, &sc0, &m0);
            k_scale_min(2 * c + 1, b[i].scales, &sc1, &m1);
            for (int l = 0; l < 32; l++) {
                y[64 * c + l] = d * sc0 * (q[l] & 15) - dmin * m0;
                y[64 * c + 32 + l] = d * sc1 * (q[l] >> 4) - dmin * m1;
            }
        }
    }
}

static void dequant_q5_K(const block_q5_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += QK_K) {
        float d = fp16_to_f32(b[i].d), dmin = fp16_to_f32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        for (int c = 0; c < 4; c++, q += 32) {
            uint8_t sc0, m0, sc1, m1;
            k_scale_min(2 * c, b[i].scales, &sc0, &m0);
            k_scale_min(2 * c + 1, b[i].scales, &sc1, &m1);
            for (int l = 0; l < 32; l++) {
                int lo = (q[l] & 15) + ((b[i].qh[l] & (1 << (2 * c))) ? 16 : 0);
                int hi = (q[l] >> 4) + ((b[i].qh[l] & (1 << (2 * c + 1))) ? 16 : 0);
                y[64 * c + l] = d * sc0 * lo - dmin * m0;
                y[64 * c + 32 + l] = d * sc1 * hi - dmin * m1;
            }
        }
    }
}

static void dequant_q6_K(const block_q6_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = fp16_to_f32(b[i].d);
        const uint8_t *ql = b[i].ql, *qh = b[i].qh;
        const int8_t *sc = b[i].scales;
        for (int n = 0; n < 2; n++, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

void dequantize_row(uint32_t type, const void *src, float *y, int64_t n) {
    switch (type) {
    case GGML_F32: memcpy(y, src, (size_t)n * 4); break;
    case GGML_F16: for (int64_t i = 0; i < n; i++) y[i] = fp16_to_f32(((const fp16_t *)src)[i]); break;
    case GGML_BF16: for (int64_t i = 0; i < n; i++) y[i] = bf16_to_f32(((const bf16_t *)src)[i]); break;
    case GGML_Q8_0: dequant_q8_0(src, y, n / QK8_0); break;
    case GGML_Q4_0: dequant_q4_0(src, y, n / QK8_0); break;
    case GGML_Q4_1: dequant_q4_1(src, y, n / QK8_0); break;
    case GGML_Q5_0: dequant_q5_0(src, y, n / QK8_0); break;
    case GGML_Q5_1: dequant_q5_1(src, y, n / QK8_0); break;
    case GGML_Q4_K: dequant_q4_K(src, y, n / QK_K); break;
    case GGML_Q5_K: dequant_q5_K(src, y, n / QK_K); break;
    case GGML_Q6_K: dequant_q6_K(src, y, n / QK_K); break;
    default: memset(y, 0, (size_t)n * 4); break; /* unsupported types are refused at load */
    }
}

/* ---------------------------------------------------------------- activations */

uint32_t quant_dot_type(uint32_t wt) {
    switch (wt) {
    case GGML_F16: return GGML_F16;
    case GGML_BF16: return GGML_BF16;
    case GGML_Q4_0: case GGML_Q5_0: case GGML_Q8_0: return GGML_Q8_0;
    case GGML_Q4_1: case GGML_Q5_1: return GGML_Q8_1;
    case GGML_Q4_K: case GGML_Q5_K: case GGML_Q6_K: return GGML_Q8_K;
    default: return GGML_F32;
    }
}

size_t quant_row_bytes(uint32_t type, int64_t n) {
    return (size_t)(n / ggml_blck_size(type)) * ggml_type_size(type);
}

/* round half to even, like _mm256_round_ps(_MM_ROUND_NEAREST) and ggml's nearest_int */
static inline int round_even(float x) { return (int)lrintf(x); }

/* Q8_0 as the x86 AVX path computes it: d = amax/127 stored as fp16,
 * q = round_even(x * (127/amax)) (not x / fp16(d)). */
static void quantize_q8_0_act(const float *x, block_q8_0 *y, int64_t n) {
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        float amax = 0;
        for (int j = 0; j < QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.f, id = amax != 0.f ? 127.f / amax : 0.f;
        y[i].d = f32_to_fp16(d);
        for (int j = 0; j < QK8_0; j++) y[i].qs[j] = (int8_t)round_even(x[j] * id);
    }
}

/* quantize_row_q4_0_ref: d = max/-8 with max the signed value of largest magnitude */
void quantize_row_q4_0_ref(const float *x, block_q4_0 *y, int64_t n) {
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        float amax = 0, max = 0;
        for (int j = 0; j < QK8_0; j++)
            if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
        float d = max / -8, id = d ? 1.f / d : 0.f;
        y[i].d = f32_to_fp16(d);
        for (int j = 0; j < 16; j++) {
            int a = (int)(x[j] * id + 8.5f), b = (int)(x[j + 16] * id + 8.5f);
            a = a > 15 ? 15 : a;
            b = b > 15 ? 15 : b;
            y[i].qs[j] = (uint8_t)(a | (b << 4));
        }
    }
}

/* Q8_1: the same, plus s = d * sum(q) stored as fp16 */
static void quantize_q8_1_act(const float *x, block_q8_1 *y, int64_t n) {
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        float amax = 0;
        for (int j = 0; j < QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.f, id = amax != 0.f ? 127.f / amax : 0.f;
        int sum = 0;
        for (int j = 0; j < QK8_0; j++) {
            y[i].qs[j] = (int8_t)round_even(x[j] * id);
            sum += y[i].qs[j];
        }
        y[i].d = f32_to_fp16(d);
        y[i].s = f32_to_fp16(d * (float)sum);
    }
}

/* Q8_K (quantize_row_q8_K_ref): scale from the signed value of largest magnitude */
static void quantize_q8_K_act(const float *x, block_q8_K *y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < QK_K; j++) {
            float ax = fabsf(x[j]);
            if (ax > amax) { amax = ax; max = x[j]; }
        }
        if (amax == 0.f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) {
            int v = round_even(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < QK_K / 16; j++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += y[i].qs[j * 16 + l];
            y[i].bsums[j] = (int16_t)s;
        }
        y[i].d = 1 / iscale;
    }
}

void quantize_activation(uint32_t dt, const float *x, void *dst, int64_t n) {
    switch (dt) {
    case GGML_F16: for (int64_t i = 0; i < n; i++) ((fp16_t *)dst)[i] = f32_to_fp16(x[i]); break;
    case GGML_BF16: for (int64_t i = 0; i < n; i++) ((bf16_t *)dst)[i] = f32_to_bf16(x[i]); break;
    case GGML_Q8_0: quantize_q8_0_act(x, dst, n); break;
    case GGML_Q8_1: quantize_q8_1_act(x, dst, n); break;
    case GGML_Q8_K: quantize_q8_K_act(x, dst, n); break;
    default: memcpy(dst, x, (size_t)n * 4); break;
    }
}

/* ---------------------------------------------------------------- reference dots */

/* 8-lane horizontal sum in the order ggml's hsum_float_8 adds: x[i] + x[i+4], then
 * pairs, then the last two */
static float hsum8(const float *x) {
    float a[4];
    for (int i = 0; i < 4; i++) a[i] = x[i] + x[i + 4];
    return (a[0] + a[2]) + (a[1] + a[3]);
}

/* A dot product against Q8_0 activations in llama.cpp's vector order: per 32-element
 * block, 8 lanes of 4 integer products, each lane accumulated with one fused
 * multiply-add by d_w*d_x, then the 8 lanes summed by hsum8. block() yields a weight
 * block as 32 int8 values. */
static float dot_blocks_i8(int64_t nb, const int8_t *(*block)(const void *, int64_t, int8_t *), const void *w,
                           const float *dw, const block_q8_0 *x) {
    float acc[8] = {0};
    for (int64_t i = 0; i < nb; i++) {
        int8_t tmp[QK8_0];
        const int8_t *q = block(w, i, tmp);
        const float d = dw[i] * fp16_to_f32(x[i].d);
        for (int l = 0; l < 8; l++) {
            int s4 = 0;
            for (int j = 4 * l; j < 4 * l + 4; j++) s4 += q[j] * x[i].qs[j];
            acc[l] = fmaf(d, (float)s4, acc[l]);
        }
    }
    return hsum8(acc);
}

float vec_dot_q8_0_blockint(int64_t n, const block_q8_0 *w, const block_q8_0 *x) {
    float acc = 0;
    for (int64_t b = 0; b < n / QK8_0; b++) {
        int32_t isum = 0;
        for (int j = 0; j < QK8_0; j++) isum += w[b].qs[j] * x[b].qs[j];
        acc = fmaf((float)isum, fp16_to_f32(w[b].d) * fp16_to_f32(x[b].d), acc);
    }
    return acc;
}

static const int8_t *q8_0_block(const void *w, int64_t i, int8_t *tmp) {
    (void)tmp;
    return ((const block_q8_0 *)w)[i].qs;
}

static const int8_t *q4_0_block(const void *w, int64_t i, int8_t *tmp) {
    const block_q4_0 *b = (const block_q4_0 *)w + i;
    for (int j = 0; j < 16; j++) {
        tmp[j] = (int8_t)((b->qs[j] & 15) - 8);
        tmp[j + 16] = (int8_t)((b->qs[j] >> 4) - 8);
    }
    return tmp;
}

static const int8_t *q5_0_block(const void *w, int64_t i, int8_t *tmp) {
    const block_q5_0 *b = (const block_q5_0 *)w + i;
    uint32_t qh = load_u32(b->qh);
    for (int j = 0; j < 16; j++) {
        tmp[j] = (int8_t)(((b->qs[j] & 15) | (((qh >> j) & 1) << 4)) - 16);
        tmp[j + 16] = (int8_t)(((b->qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16);
    }
    return tmp;
}

/* weight block scales as floats, for the generic block dot above */
static float dot_q8_0_act(uint32_t wt, int64_t n, const void *w, const block_q8_0 *x) {
    const int64_t nb = n / QK8_0;
    float dw[nb > 0 ? nb : 1];
    const int8_t *(*block)(const void *, int64_t, int8_t *);
    for (int64_t i = 0; i < nb; i++)
        dw[i] = fp16_to_f32(wt == GGML_Q8_0 ? ((const block_q8_0 *)w)[i].d
                            : wt == GGML_Q4_0 ? ((const block_q4_0 *)w)[i].d : ((const block_q5_0 *)w)[i].d);
    block = wt == GGML_Q8_0 ? q8_0_block : wt == GGML_Q4_0 ? q4_0_block : q5_0_block;
    return dot_blocks_i8(nb, block, w, dw, x);
}

/* Q4_1/Q5_1 against Q8_1 (ggml_vec_dot_q4_1_q8_1 / q5_1 for AVX2): the unsigned weights'
 * products in 8 lanes of 4 fused by d_w*d_x per block, the offsets m_w*s_x summed apart
 * (one fused multiply-add per block, as GCC contracts `summs += m * s`), added last. */
static float dot_q8_1_act(uint32_t wt, int64_t n, const void *w, const block_q8_1 *x) {
    float acc[8] = {0}, summs = 0;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const block_q4_1 *w4 = (const block_q4_1 *)w + i;
        const block_q5_1 *w5 = (const block_q5_1 *)w + i;
        const int five = wt == GGML_Q5_1;
        const uint8_t *qs = five ? w5->qs : w4->qs;
        const uint32_t qh = five ? load_u32(w5->qh) : 0;
        uint8_t q[QK8_0];
        for (int j = 0; j < 16; j++) {
            q[j] = (uint8_t)((qs[j] & 15) | (((qh >> j) & 1) << 4));
            q[j + 16] = (uint8_t)((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
        }
        const float dw = fp16_to_f32(five ? w5->d : w4->d), mw = fp16_to_f32(five ? w5->m : w4->m);
        summs = fmaf(mw, fp16_to_f32(x[i].s), summs);
        const float d = dw * fp16_to_f32(x[i].d);
        for (int l = 0; l < 8; l++) {
            int s4 = 0;
            for (int j = 4 * l; j < 4 * l + 4; j++) s4 += q[j] * x[i].qs[j];
            acc[l] = fmaf(d, (float)s4, acc[l]);
        }
    }
    return hsum8(acc) + summs;
}

/* The K-quants, in the order of llama.cpp's AVX2 ggml_vec_dot_q{4,5,6}_K_q8_K (there is no
 * llama.cpp oracle for them here, so that order is the definition). Within a 256-element
 * super-block everything is integer and exact; what matters is which products land in
 * which of the 8 int32 lanes:
 *   Q4_K/Q5_K: lane L = sum over the 8 sub-blocks j of sc_j * (the 4 products of elements
 *              32j+4L..32j+4L+3); the mins go to 4 lanes k = m_2k*bsum32_2k + m_2k+1*bsum32_2k+1
 *              (bsum32 = sum of the 32 activations of a sub-block).
 *   Q6_K:      lane L = sum over the eight 32-element groups g of sc[2g + (L >= 4)] * (the 4
 *              products of elements 32g+4L..+3, weights taken unsigned 0..63), minus
 *              32 * (sc[2L]*bsum16_2L + sc[2L+1]*bsum16_2L+1).
 * Then per super-block: acc[L] = fma(d_w*d_x, lane, acc[L]) and for Q4_K
 * accm[k] = fma(-d_x*dmin_w, mins_k, accm[k]); Q5_K sums its mins lanes into one integer and
 * fuses it into a scalar. Result: hsum8(acc) (+ the pairwise sum of accm, or the scalar). */

/* the 8 scales and 8 mins of a Q4_K/Q5_K super-block */
static void k_scales_mins(const uint8_t *q, int sc[8], int m[8]) {
    for (int j = 0; j < 8; j++) {
        uint8_t a, b;
        k_scale_min(j, q, &a, &b);
        sc[j] = a;
        m[j] = b;
    }
}

static float dot_q45_K(int64_t n, const void *wv, const block_q8_K *x, int five) {
    float acc[8] = {0}, accm[4] = {0}, summs = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const block_q4_K *w4 = (const block_q4_K *)wv + i;
        const block_q5_K *w5 = (const block_q5_K *)wv + i;
        const uint8_t *q = five ? w5->qs : w4->qs;
        const float d = x[i].d * fp16_to_f32(five ? w5->d : w4->d);
        const float dmin = -x[i].d * fp16_to_f32(five ? w5->dmin : w4->dmin);
        int sc[8], m[8];
        k_scales_mins(five ? w5->scales : w4->scales, sc, m);
        int lanes[8] = {0}, mins[4];
        for (int c = 0; c < 4; c++, q += 32)
            for (int l = 0; l < 32; l++) {
                int lo = q[l] & 15, hi = q[l] >> 4;
                if (five) {
                    lo += (w5->qh[l] >> (2 * c) & 1) << 4;
                    hi += (w5->qh[l] >> (2 * c + 1) & 1) << 4;
                }
                lanes[l / 4] += sc[2 * c] * lo * x[i].qs[64 * c + l] + sc[2 * c + 1] * hi * x[i].qs[64 * c + 32 + l];
            }
        for (int k = 0; k < 4; k++)
            mins[k] = m[2 * k] * (x[i].bsums[4 * k] + x[i].bsums[4 * k + 1]) +
                      m[2 * k + 1] * (x[i].bsums[4 * k + 2] + x[i].bsums[4 * k + 3]);
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lanes[l], acc[l]);
        if (five)
            summs = fmaf(dmin, (float)((mins[0] + mins[1]) + (mins[2] + mins[3])), summs);
        else
            for (int k = 0; k < 4; k++) accm[k] = fmaf(dmin, (float)mins[k], accm[k]);
    }
    if (five) return hsum8(acc) + summs;
    return hsum8(acc) + ((accm[0] + accm[2]) + (accm[1] + accm[3]));
}

static float dot_q6_K(int64_t n, const block_q6_K *w, const block_q8_K *x) {
    float acc[8] = {0};
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = x[i].d * fp16_to_f32(w[i].d);
        const int8_t *sc = w[i].scales, *a = x[i].qs;
        int lanes[8] = {0};
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = w[i].ql + 64 * h, *qh = w[i].qh + 32 * h;
            for (int l = 0; l < 32; l++) {
                const int L = l / 4, s = 8 * h + (L >= 4);
                const int q1 = (ql[l] & 15) | ((qh[l] & 3) << 4), q2 = (ql[l + 32] & 15) | ((qh[l] >> 2 & 3) << 4);
                const int q3 = (ql[l] >> 4) | ((qh[l] >> 4 & 3) << 4), q4 = (ql[l + 32] >> 4) | ((qh[l] >> 6 & 3) << 4);
                lanes[L] += sc[s] * q1 * a[128 * h + l] + sc[s + 2] * q2 * a[128 * h + 32 + l] +
                            sc[s + 4] * q3 * a[128 * h + 64 + l] + sc[s + 6] * q4 * a[128 * h + 96 + l];
            }
        }
        for (int L = 0; L < 8; L++) {
            lanes[L] -= 32 * (sc[2 * L] * x[i].bsums[2 * L] + sc[2 * L + 1] * x[i].bsums[2 * L + 1]);
            acc[L] = fmaf(d, (float)lanes[L], acc[L]);
        }
    }
    return hsum8(acc);
}

float reduce16_ref(const float *v) {
    float a[8], b[4];
    for (int i = 0; i < 8; i++) a[i] = v[i] + v[i + 8];
    for (int i = 0; i < 4; i++) b[i] = a[i] + a[i + 4];
    return (b[0] + b[2]) + (b[1] + b[3]);
}

/* 16 lanes, one fused multiply-add per element, reduced like _mm512_reduce_add_ps:
 * the order llama.cpp's float GEMM (tinyBLAS) uses for F32/F16/BF16 weights */
#define DOT16(load_w, load_x)                                                             \
    do {                                                                                  \
        float acc[16] = {0};                                                              \
        for (int64_t i = 0; i < n; i++) acc[i % 16] = fmaf(load_w, load_x, acc[i % 16]); \
        return reduce16_ref(acc);                                                         \
    } while (0)

float vec_dot_ref(uint32_t wt, int64_t n, const void *w, const void *x) {
    switch (wt) {
    case GGML_F32: DOT16(((const float *)w)[i], ((const float *)x)[i]);
    case GGML_F16: DOT16(fp16_to_f32(((const fp16_t *)w)[i]), fp16_to_f32(((const fp16_t *)x)[i]));
    case GGML_BF16: DOT16(bf16_to_f32(((const bf16_t *)w)[i]), bf16_to_f32(((const bf16_t *)x)[i]));
    case GGML_Q8_0: case GGML_Q4_0: case GGML_Q5_0: return dot_q8_0_act(wt, n, w, x);
    case GGML_Q4_1: case GGML_Q5_1: return dot_q8_1_act(wt, n, w, x);
    case GGML_Q4_K: return dot_q45_K(n, w, x, 0);
    case GGML_Q5_K: return dot_q45_K(n, w, x, 1);
    case GGML_Q6_K: return dot_q6_K(n, w, x);
    default: return 0;
    }
}
