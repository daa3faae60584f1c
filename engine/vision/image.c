/* image.c - decoding with stb_image, mtmd's smart resize and Pillow resampling. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stb_image.h>

#include "engine/vision/image.h"

/* A PNG's size from its header, for the one case stb_image reports only as "unknown image
 * type": a PNG of more than 2^30 bytes of pixels, which it refuses before saying so. */
static int png_size(const uint8_t *b, size_t n, int *w, int *h) {
    static const uint8_t sig[12] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13};
    if (n < 24 || memcmp(b, sig, sizeof sig) || memcmp(b + 12, "IHDR", 4)) return 0;
    const uint32_t bw = (uint32_t)b[16] << 24 | (uint32_t)b[17] << 16 | (uint32_t)b[18] << 8 | b[19];
    const uint32_t bh = (uint32_t)b[20] << 24 | (uint32_t)b[21] << 16 | (uint32_t)b[22] << 8 | b[23];
    if (bw == 0 || bh == 0 || bw > 0x7fffffff || bh > 0x7fffffff || (uint64_t)bw * bh <= IMAGE_MAX_PIXELS) return 0;
    *w = (int)bw, *h = (int)bh;
    return 1;
}

int image_probe(const void *bytes, size_t n, int *w, int *h, char *err, size_t errlen) {
    int comp = 0;
    if (n > 0x7fffffff) {
        snprintf(err, errlen, "an image file of %zu bytes is more than the 2 GB stb_image reads", n);
        return -1;
    }
    if (!stbi_info_from_memory(bytes, (int)n, w, h, &comp) && !png_size(bytes, n, w, h)) {
        snprintf(err, errlen, "not an image stb_image decodes (JPEG, PNG, BMP, GIF, TGA, PSD, PIC, PNM)");
        return -1;
    }
    if (*w <= 0 || *h <= 0 || (long)*w * *h > IMAGE_MAX_PIXELS) {
        snprintf(err, errlen, "the image is too large: %d x %d pixels is more than %ld megapixels", *w, *h,
                 IMAGE_MAX_PIXELS / (1024 * 1024));
        return -1;
    }
    return 0;
}

int image_check(const void *bytes, size_t n, char *err, size_t errlen) {
    image_rgb img;
    if (image_decode(bytes, n, &img, err, errlen) != 0) {
        errno = EINVAL;
        return -1;
    }
    image_free(&img);
    return 0;
}

int image_decode(const void *bytes, size_t n, image_rgb *out, char *err, size_t errlen) {
    int w, h, comp;
    memset(out, 0, sizeof *out);
    if (image_probe(bytes, n, &w, &h, err, errlen)) return -1;
    unsigned char *px = stbi_load_from_memory(bytes, (int)n, &w, &h, &comp, 3);
    if (!px) {
        const char *why = stbi_failure_reason();
        snprintf(err, errlen, "the image cannot be decoded: %s", why ? why : "unknown error");
        return -1;
    }
    /* stb allocates with malloc (STBI_MALLOC), so image_free's free() releases it */
    out->w = w, out->h = h, out->rgb = px;
    return 0;
}

void image_free(image_rgb *img) {
    free(img->rgb);
    img->rgb = NULL;
    img->w = img->h = 0;
}

void image_fit_size(int w, int h, int align, long min_pixels, long max_pixels, int *tw, int *th) {
    /* in floats, as mtmd's calc_size_preserved_ratio: the same inputs round the same way */
    const float f = (float)align;
    int wb = (int)roundf((float)w / f) * align, hb = (int)roundf((float)h / f) * align;
    if (wb < align) wb = align;
    if (hb < align) hb = align;
    if (max_pixels > 0 && (long)wb * hb > max_pixels) {
        const float beta = sqrtf((float)h * (float)w / (float)max_pixels);
        hb = (int)floorf((float)h / beta / f) * align;
        wb = (int)floorf((float)w / beta / f) * align;
        if (hb < align) hb = align;
        if (wb < align) wb = align;
    } else if (min_pixels > 0 && (long)wb * hb < min_pixels) {
        const float beta = sqrtf((float)min_pixels / ((float)h * (float)w));
        hb = (int)ceilf((float)h * beta / f) * align;
        wb = (int)ceilf((float)w * beta / f) * align;
    }
    *tw = wb, *th = hb;
}

/* ---------------------------------------------------------------- Pillow's resampler */

#define FRACTION_BITS 22 /* 32 bits - 8 for a pixel - 2 of headroom for the sum */

/* Pillow's bicubic kernel, a = -0.5 */
static double bicubic(double x) {
    const double a = -0.5;
    if (x < 0) x = -x;
    if (x < 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
    if (x < 2) return (((x - 5) * x + 8) * x - 4) * a;
    return 0;
}

/* For each of n_out output pixels, the first input pixel, how many follow, and their
 * weights in fixed point (rounded half away from zero); `taps` weights per output pixel. */
typedef struct {
    int taps;
    int *first, *count;
    int32_t *weight;
} filter_1d;

static int filter_make(filter_1d *f, int n_in, int n_out) {
    const double scale = (double)n_in / n_out;
    const double fscale = scale < 1 ? 1 : scale; /* widen the kernel when shrinking */
    const double support = 2.0 * fscale;
    f->taps = (int)ceil(support) * 2 + 1;
    f->first = malloc(sizeof(int) * (size_t)n_out);
    f->count = malloc(sizeof(int) * (size_t)n_out);
    f->weight = calloc((size_t)n_out * (size_t)f->taps, sizeof(int32_t));
    double *w = malloc(sizeof(double) * (size_t)f->taps);
    if (!f->first || !f->count || !f->weight || !w) {
        free(w);
        return -1;
    }
    for (int o = 0; o < n_out; o++) {
        const double center = (o + 0.5) * scale;
        int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);
        if (lo < 0) lo = 0;
        if (hi > n_in) hi = n_in;
        double sum = 0;
        for (int i = 0; i < hi - lo; i++) sum += w[i] = bicubic((i + lo - center + 0.5) / fscale);
        for (int i = 0; i < hi - lo; i++) {
            const double v = sum != 0 ? w[i] / sum : w[i];
            f->weight[(size_t)o * f->taps + i] = (int32_t)(v * (1 << FRACTION_BITS) + (v < 0 ? -0.5 : 0.5));
        }
        f->first[o] = lo, f->count[o] = hi - lo;
    }
    free(w);
    return 0;
}

static void filter_free(filter_1d *f) {
    free(f->first), free(f->count), free(f->weight);
}

static uint8_t clip8(int32_t v) {
    v >>= FRACTION_BITS;
    return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

/* out (h rows of n_out pixels) = in (h rows of w pixels) filtered along rows */
static void resample_rows(const uint8_t *in, int w, int h, uint8_t *out, int n_out, const filter_1d *f) {
    for (int y = 0; y < h; y++) {
        const uint8_t *row = in + (size_t)y * w * 3;
        for (int o = 0; o < n_out; o++) {
            const int32_t *k = f->weight + (size_t)o * f->taps;
            const uint8_t *p = row + (size_t)f->first[o] * 3;
            int32_t s0 = 1 << (FRACTION_BITS - 1), s1 = s0, s2 = s0;
            for (int i = 0; i < f->count[o]; i++, p += 3) s0 += p[0] * k[i], s1 += p[1] * k[i], s2 += p[2] * k[i];
            uint8_t *d = out + ((size_t)y * n_out + o) * 3;
            d[0] = clip8(s0), d[1] = clip8(s1), d[2] = clip8(s2);
        }
    }
}

/* out (n_out rows of w pixels) = in (rows of w pixels) filtered along columns */
static int resample_columns(const uint8_t *in, int w, uint8_t *out, int n_out, const filter_1d *f) {
    const size_t n = (size_t)w * 3;
    int32_t *acc = malloc(sizeof(int32_t) * n);
    if (!acc) return -1;
    for (int o = 0; o < n_out; o++) {
        for (size_t i = 0; i < n; i++) acc[i] = 1 << (FRACTION_BITS - 1);
        for (int j = 0; j < f->count[o]; j++) {
            const uint8_t *row = in + (size_t)(f->first[o] + j) * n;
            const int32_t k = f->weight[(size_t)o * f->taps + j];
            for (size_t i = 0; i < n; i++) acc[i] += row[i] * k;
        }
        for (size_t i = 0; i < n; i++) out[(size_t)o * n + i] = clip8(acc[i]);
    }
    free(acc);
    return 0;
}

/* src resized to exactly w x h (rows first, then columns, as Pillow) */
static int resample(const image_rgb *src, int w, int h, uint8_t *out) {
    filter_1d fr = {0}, fc = {0};
    uint8_t *tmp = NULL;
    int rc = -1;
    const int rows = w != src->w, cols = h != src->h;
    if ((rows && filter_make(&fr, src->w, w)) || (cols && filter_make(&fc, src->h, h))) goto done;
    if (rows && cols) {
        if (!(tmp = malloc((size_t)w * src->h * 3))) goto done;
        resample_rows(src->rgb, src->w, src->h, tmp, w, &fr);
        rc = resample_columns(tmp, w, out, h, &fc);
    } else if (rows) {
        resample_rows(src->rgb, src->w, src->h, out, w, &fr);
        rc = 0;
    } else if (cols) {
        rc = resample_columns(src->rgb, w, out, h, &fc);
    } else {
        memcpy(out, src->rgb, (size_t)w * h * 3);
        rc = 0;
    }
done:
    free(tmp);
    if (rows) filter_free(&fr);
    if (cols) filter_free(&fc);
    return rc;
}

int image_resize_padded(const image_rgb *src, int tw, int th, image_rgb *dst) {
    dst->w = tw, dst->h = th;
    dst->rgb = calloc((size_t)tw * th, 3); /* black */
    if (!dst->rgb) return -1;
    if (tw == src->w && th == src->h) {
        memcpy(dst->rgb, src->rgb, (size_t)tw * th * 3);
        return 0;
    }
    const float sw = (float)tw / src->w, sh = (float)th / src->h, s = sw < sh ? sw : sh;
    int nw = (int)ceilf(src->w * s), nh = (int)ceilf(src->h * s);
    if (nw > tw) nw = tw;
    if (nh > th) nh = th;
    uint8_t *scaled = malloc((size_t)nw * nh * 3);
    if (!scaled || resample(src, nw, nh, scaled)) {
        free(scaled);
        image_free(dst);
        return -1;
    }
    const int ox = (tw - nw) / 2, oy = (th - nh) / 2;
    for (int y = 0; y < nh; y++) memcpy(dst->rgb + ((size_t)(y + oy) * tw + ox) * 3, scaled + (size_t)y * nw * 3, (size_t)nw * 3);
    free(scaled);
    return 0;
}
