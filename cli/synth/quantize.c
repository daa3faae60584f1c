/* quantize.c - the weight quantizers of quantize.h. */
#include "cli/synth/quantize.h"

#include <math.h>
#include <string.h>

#include "engine/gguf/gguf.h"

/* llama.cpp's quantize_row_q8_0_ref: q = roundf(x / d), half away from zero */
static void quantize_row_q8_0_ref(const float *x, block_q8_0 *y, int64_t n) {
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        float amax = 0;
        for (int j = 0; j < QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.f, id = d ? 1.f / d : 0.f;
        y[i].d = f32_to_fp16(d);
        for (int j = 0; j < QK8_0; j++) y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

/* quantize_row_q5_0_ref: like Q4_0 with 5 bits, d = max/-16 */
static void quantize_row_q5_0(const float *x, block_q5_0 *y, int64_t n) {
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        float amax = 0, max = 0;
        for (int j = 0; j < QK8_0; j++)
            if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
        float d = max / -16, id = d ? 1.f / d : 0.f;
        y[i].d = f32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int a = (int)(int8_t)(x[j] * id + 16.5f), b = (int)(int8_t)(x[j + 16] * id + 16.5f);
            a = a > 31 ? 31 : a;
            b = b > 31 ? 31 : b;
            y[i].qs[j] = (uint8_t)((a & 15) | ((b & 15) << 4));
            qh |= (uint32_t)(a >> 4 & 1) << j | (uint32_t)(b >> 4 & 1) << (j + 16);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

/* quantize_row_q4_1_ref / q5_1_ref: d = (max - min) / (2^bits - 1), m = min */
static void quantize_row_q45_1(const float *x, void *dst, int64_t n, int bits) {
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        float min = x[0], max = x[0];
        for (int j = 1; j < QK8_0; j++) {
            min = x[j] < min ? x[j] : min;
            max = x[j] > max ? x[j] : max;
        }
        const float d = (max - min) / (float)((1 << bits) - 1), id = d ? 1.f / d : 0.f;
        uint8_t q[QK8_0];
        for (int j = 0; j < QK8_0; j++) {
            int v = bits == 4 ? (int)(int8_t)((x[j] - min) * id + 0.5f) : (int)(uint8_t)((x[j] - min) * id + 0.5f);
            q[j] = (uint8_t)(v > 15 && bits == 4 ? 15 : v);
        }
        if (bits == 4) {
            block_q4_1 *b = (block_q4_1 *)dst + i;
            b->d = f32_to_fp16(d);
            b->m = f32_to_fp16(min);
            for (int j = 0; j < 16; j++) b->qs[j] = (uint8_t)(q[j] | q[j + 16] << 4);
        } else {
            block_q5_1 *b = (block_q5_1 *)dst + i;
            b->d = f32_to_fp16(d);
            b->m = f32_to_fp16(min);
            uint32_t qh = 0;
            for (int j = 0; j < 16; j++) {
                b->qs[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
                qh |= (uint32_t)(q[j] >> 4 & 1) << j | (uint32_t)(q[j + 16] >> 4 & 1) << (j + 16);
            }
            memcpy(b->qh, &qh, 4);
        }
    }
}

/* ---- K-quant weight quantizers: the algorithms of llama.cpp's quantize_row_q{4,5,6}_K_ref
 * (make_qkx2_quants: a weighted least-squares search over scale/min candidates for the
 * unsigned 4/5-bit types; make_qx_quants: a search over 19 scales for the signed 6-bit
 * one), written afresh. */

static int nearest(float v) { return (int)lrintf(v); } /* ties to even, like ggml's nearest_int */
static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Fits x[i] ~ scale * L[i] - min with L in [0, nmax] and weights w; returns scale, *neg_min = min */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min, float rmin,
                           float rdelta, int nstep) {
    float lo = x[0], hi = x[0], sw = w[0], sx = w[0] * x[0];
    for (int i = 1; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
        sw += w[i];
        sx += w[i] * x[i];
    }
    if (lo > 0) lo = 0;
    if (hi == lo) {
        memset(L, 0, (size_t)n);
        *neg_min = -lo;
        return 0;
    }
    float iscale = nmax / (hi - lo), scale = 1 / iscale, best = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(nearest(iscale * (x[i] - lo)), 0, nmax);
        float e = scale * L[i] + lo - x[i];
        best += w[i] * e * e;
    }
    uint8_t cand[QK_K];
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (hi - lo);
        float sl = 0, sl2 = 0, sxl = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(nearest(iscale * (x[i] - lo)), 0, nmax);
            cand[i] = (uint8_t)l;
            sl += w[i] * l;
            sl2 += w[i] * l * l;
            sxl += w[i] * l * x[i];
        }
        float D = sw * sl2 - sl * sl;
        if (D <= 0) continue;
        float s = (sw * sxl - sx * sl) / D, m = (sl2 * sx - sl * sxl) / D;
        if (m > 0) {
            m = 0;
            s = sxl / sl2;
        }
        float err = 0;
        for (int i = 0; i < n; i++) {
            float e = s * cand[i] + m - x[i];
            err += w[i] * e * e;
        }
        if (err < best) {
            memcpy(L, cand, (size_t)n);
            best = err;
            scale = s;
            lo = m;
        }
    }
    *neg_min = -lo;
    return scale;
}

/* Q4_K (bits 4) and Q5_K (bits 5) */
static void quantize_row_q45_K(const float *x, void *dst, int64_t n, int bits) {
    const int nmax = (1 << bits) - 1;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t L[QK_K], packed[12] = {0};
        float scales[8], mins[8], w[32], max_scale = 0, max_min = 0;
        for (int j = 0; j < 8; j++) {
            const float *xs = x + 32 * j;
            float s2 = 0;
            for (int l = 0; l < 32; l++) s2 += xs[l] * xs[l];
            const float av = sqrtf(s2 / 32);
            for (int l = 0; l < 32; l++) w[l] = av + fabsf(xs[l]);
            scales[j] = fit_scale_min(32, nmax, xs, w, L + 32 * j, &mins[j], bits == 4 ? -1.f : -0.5f, 0.1f,
                                      bits == 4 ? 20 : 15);
            max_scale = scales[j] > max_scale ? scales[j] : max_scale;
            max_min = mins[j] > max_min ? mins[j] : max_min;
        }
        const float is = max_scale > 0 ? 63.f / max_scale : 0, im = max_min > 0 ? 63.f / max_min : 0;
        for (int j = 0; j < 8; j++) {
            int ls = (uint8_t)nearest(is * scales[j]), lm = (uint8_t)nearest(im * mins[j]);
            ls = ls > 63 ? 63 : ls;
            lm = lm > 63 ? 63 : lm;
            if (j < 4) {
                packed[j] = (uint8_t)ls;
                packed[j + 4] = (uint8_t)lm;
            } else {
                packed[j + 4] = (uint8_t)((ls & 15) | (lm & 15) << 4);
                packed[j - 4] |= (uint8_t)((ls >> 4) << 6);
                packed[j] |= (uint8_t)((lm >> 4) << 6);
            }
        }
        const fp16_t d16 = f32_to_fp16(max_scale / 63.f), dm16 = f32_to_fp16(max_min / 63.f);
        for (int j = 0; j < 8; j++) { /* requantize against the rounded scales */
            uint8_t sc, m;
            k_scale_min(j, packed, &sc, &m);
            const float d = fp16_to_f32(d16) * sc;
            if (!d) continue;
            const float dm = fp16_to_f32(dm16) * m;
            for (int l = 0; l < 32; l++) L[32 * j + l] = (uint8_t)clampi(nearest((x[32 * j + l] + dm) / d), 0, nmax);
        }
        if (bits == 4) {
            block_q4_K *b = (block_q4_K *)dst + i;
            b->d = d16;
            b->dmin = dm16;
            memcpy(b->scales, packed, 12);
            for (int c = 0; c < 4; c++)
                for (int l = 0; l < 32; l++) b->qs[32 * c + l] = (uint8_t)(L[64 * c + l] | L[64 * c + 32 + l] << 4);
        } else {
            block_q5_K *b = (block_q5_K *)dst + i;
            b->d = d16;
            b->dmin = dm16;
            memcpy(b->scales, packed, 12);
            memset(b->qh, 0, sizeof b->qh);
            for (int c = 0; c < 4; c++)
                for (int l = 0; l < 32; l++) {
                    const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
                    b->qs[32 * c + l] = (uint8_t)((lo & 15) | (hi & 15) << 4);
                    b->qh[l] |= (uint8_t)((lo >> 4) << (2 * c) | (hi >> 4) << (2 * c + 1));
                }
        }
    }
}

/* make_qx_quants with rmse_type 1 (weights x^2): L in [0, 2*nmax), returns the scale */
static float fit_scale_signed(int n, int nmax, const float *x, int8_t *L) {
    float amax = 0, max = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) { amax = fabsf(x[i]); max = x[i]; }
    if (amax < 1e-15f) {
        memset(L, 0, (size_t)n);
        return 0;
    }
    float iscale = -nmax / max, slx = 0, sl2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = clampi(nearest(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        const float w = x[i] * x[i];
        slx += w * x[i] * l;
        sl2 += w * l * l;
    }
    float scale = sl2 ? slx / sl2 : 0, best = scale * slx;
    for (int is = -9; is <= 9; is++) {
        if (!is) continue;
        iscale = -(nmax + 0.1f * is) / max;
        slx = sl2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(nearest(iscale * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            slx += w * x[i] * l;
            sl2 += w * l * l;
        }
        if (sl2 > 0 && slx * slx > best * sl2) {
            for (int i = 0; i < n; i++) L[i] = (int8_t)(nmax + clampi(nearest(iscale * x[i]), -nmax, nmax - 1));
            scale = slx / sl2;
            best = scale * slx;
        }
    }
    return scale;
}

static void quantize_row_q6_K(const float *x, block_q6_K *y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        int8_t L[QK_K];
        float scales[16], max_scale = 0, max_abs = 0;
        for (int ib = 0; ib < 16; ib++) {
            scales[ib] = fit_scale_signed(16, 32, x + 16 * ib, L + 16 * ib);
            if (fabsf(scales[ib]) > max_abs) {
                max_abs = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        memset(&y[i], 0, sizeof y[i]);
        if (max_abs < 1e-15f) continue;
        const float iscale = -128.f / max_scale;
        y[i].d = f32_to_fp16(1 / iscale);
        for (int ib = 0; ib < 16; ib++) {
            const int s = nearest(iscale * scales[ib]);
            y[i].scales[ib] = (int8_t)(s < 127 ? s : 127);
        }
        for (int j = 0; j < 16; j++) {
            const float d = fp16_to_f32(y[i].d) * y[i].scales[j];
            if (!d) continue;
            for (int l = 0; l < 16; l++) L[16 * j + l] = (int8_t)(clampi(nearest(x[16 * j + l] / d), -32, 31) + 32);
        }
        for (int h = 0; h < 2; h++) {
            uint8_t *ql = y[i].ql + 64 * h, *qh = y[i].qh + 32 * h;
            const int8_t *Lh = L + 128 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((Lh[l] & 15) | (Lh[l + 64] & 15) << 4);
                ql[l + 32] = (uint8_t)((Lh[l + 32] & 15) | (Lh[l + 96] & 15) << 4);
                qh[l] = (uint8_t)((Lh[l] >> 4) | (Lh[l + 32] >> 4) << 2 | (Lh[l + 64] >> 4) << 4 | (Lh[l + 96] >> 4) << 6);
            }
        }
    }
}

int quantize_row_weight(uint32_t type, const float *x, void *dst, int64_t n) {
    if (n % ggml_blck_size(type)) return -1;
    switch (type) {
    case GGML_F32: memcpy(dst, x, (size_t)n * 4); return 0;
    case GGML_F16: for (int64_t i = 0; i < n; i++) ((fp16_t *)dst)[i] = f32_to_fp16(x[i]); return 0;
    case GGML_BF16: for (int64_t i = 0; i < n; i++) ((bf16_t *)dst)[i] = f32_to_bf16(x[i]); return 0;
    case GGML_Q8_0: quantize_row_q8_0_ref(x, dst, n); return 0;
    case GGML_Q4_0: quantize_row_q4_0_ref(x, dst, n); return 0;
    case GGML_Q5_0: quantize_row_q5_0(x, dst, n); return 0;
    case GGML_Q4_1: quantize_row_q45_1(x, dst, n, 4); return 0;
    case GGML_Q5_1: quantize_row_q45_1(x, dst, n, 5); return 0;
    case GGML_Q4_K: quantize_row_q45_K(x, dst, n, 4); return 0;
    case GGML_Q5_K: quantize_row_q45_K(x, dst, n, 5); return 0;
    case GGML_Q6_K: quantize_row_q6_K(x, dst, n); return 0;
    default: return -1;
    }
}
