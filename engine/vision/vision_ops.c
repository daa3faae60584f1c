/* vision_ops.c - LayerNorm, GELU, 2-D rotary positions and grid resampling for the vision
 * encoder, each computed in the order and precision ggml's CPU backend uses. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>

#include "engine/kernels/quant.h"
#include "engine/vision/vision_ops.h"

void layernorm(float *y, const float *x, const float *w, const float *b, int n, float eps) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += x[i];
    const float mean = (float)sum / (float)n;
    /* ggml_vec_cvar_f32's AVX-512 order: squares summed 16 at a time as _mm512_reduce_add_ps
     * adds them, each group's float sum added in double, then the rest one by one */
    double sq = 0;
    int i = 0;
    for (; i + 15 < n; i += 16) {
        float v2[16];
        for (int k = 0; k < 16; k++) {
            y[i + k] = x[i + k] - mean;
            v2[k] = y[i + k] * y[i + k];
        }
        sq += (double)reduce16_ref(v2);
    }
    for (; i < n; i++) {
        y[i] = x[i] - mean;
        sq += (double)(y[i] * y[i]);
    }
    const float scale = 1.0f / sqrtf((float)(sq / n) + eps);
    for (i = 0; i < n; i++) y[i] = y[i] * scale * w[i] + b[i];
}

static fp16_t gelu_table[1 << 16];
static pthread_once_t gelu_once = PTHREAD_ONCE_INIT;

static float gelu_tanh(float x) {
    const float a = 0.044715f, s = 0.79788456080286535587989211986876f; /* sqrt(2 / pi) */
    /* 1 + a x^2 with the product fused into the sum, as GCC contracts ggml_gelu_f32 */
    return 0.5f * x * (1.0f + tanhf(s * x * fmaf(a * x, x, 1.0f)));
}

static void gelu_table_init(void) {
    for (int i = 0; i < 1 << 16; i++) gelu_table[i] = f32_to_fp16(gelu_tanh(fp16_to_f32((fp16_t)i)));
}

void vec_gelu(float *y, const float *x, int n) {
    pthread_once(&gelu_once, gelu_table_init);
    for (int i = 0; i < n; i++) {
        const float v = x[i];
        y[i] = v <= -10.0f ? 0.0f : v >= 10.0f ? v : fp16_to_f32(gelu_table[f32_to_fp16(v)]);
    }
}

void rope_vision(float *x, int d, const int pos[4], float base) {
    const int half = d / 2, sect = d / 4;
    const float step = powf(base, -2.0f / (float)half);
    float theta[4] = {0};
    for (int k = 0; k < half; k++) {
        const int s = k / sect;
        if (k % sect == 0) theta[s] = (float)pos[s]; /* each section starts again */
        const float c = cosf(theta[s]), sn = sinf(theta[s]);
        const float x0 = x[k], x1 = x[k + half];
        /* the contraction GCC makes of x0*c - x1*s and x0*s + x1*c in ggml (rope_apply's) */
        x[k] = fmaf(x0, c, -(x1 * sn));
        x[k + half] = fmaf(x0, sn, x1 * c);
        for (int j = 0; j < 4; j++) theta[j] *= step;
    }
}

static int clamp_index(int i, int g) { return i < 0 ? 0 : i > g - 1 ? g - 1 : i; }

/* output index i along a side of `out` cells, from a side of g: the two grid cells around
 * it (clamped) and the weight of the second, with aligned corners (ggml's upscale) */
static void grid_taps(int i, int out, int g, int *i0, int *i1, float *d) {
    const float scale = out > 1 && g > 1 ? (float)(out - 1) / (float)(g - 1) : (float)out / (float)g;
    const float x = (float)i / scale;
    const int lo = (int)floorf(x);
    *i0 = clamp_index(lo, g), *i1 = clamp_index(lo + 1, g);
    const float t = x - (float)*i0;
    *d = t < 0 ? 0 : t > 1 ? 1 : t;
}

void grid_resize_bilinear(float *dst, int w, int h, const float *src, int g, int n) {
    for (int i1 = 0; i1 < h; i1++) {
        int y0, y1;
        float dy;
        grid_taps(i1, h, g, &y0, &y1, &dy);
        for (int i0 = 0; i0 < w; i0++) {
            int x0, x1;
            float dx;
            grid_taps(i0, w, g, &x0, &x1, &dx);
            const float *a = src + ((size_t)y0 * g + x0) * n, *b = src + ((size_t)y0 * g + x1) * n;
            const float *c = src + ((size_t)y1 * g + x0) * n, *dd = src + ((size_t)y1 * g + x1) * n;
            float *o = dst + ((size_t)i1 * w + i0) * n;
            /* a(1-dx)(1-dy) + b dx(1-dy) + c(1-dx)dy + d dx dy as GCC contracts it in ggml:
             * the first sum fused with the first term's last product, each later sum with its
             * term's */
            for (int e = 0; e < n; e++) {
                float v = fmaf(a[e] * (1 - dx), 1 - dy, b[e] * dx * (1 - dy));
                v = fmaf(c[e] * (1 - dx), dy, v);
                o[e] = fmaf(dd[e] * dx, dy, v);
            }
        }
    }
}
