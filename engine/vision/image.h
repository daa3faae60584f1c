/* image.h - images as llama.cpp's mtmd prepares them for a vision encoder.
 *
 * Decoding is stb_image's (the library llama.cpp uses, from Debian's libstb-dev), so the
 * pixels are the ones llama-server sees: JPEG, PNG, BMP, GIF (first frame), TGA, PSD,
 * PIC, PNM, as 8-bit RGB (alpha dropped, no EXIF rotation). Resizing is the Pillow
 * resampler mtmd copies (separable, fixed point with 22 fraction bits), so the bytes after
 * a resize are mtmd's too. */
#ifndef CHATFS_VISION_IMAGE_H
#define CHATFS_VISION_IMAGE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int w, h;
    uint8_t *rgb; /* h rows of w pixels of 3 bytes, top row first */
} image_rgb;

/* The largest image accepted, in pixels (its header is read before anything is
 * decoded, so a 30000 x 30000 PNG costs nothing): 64 megapixels, 192 MB of RGB. */
#define IMAGE_MAX_PIXELS (64L * 1024 * 1024)

/* Reads the format and size from the header only. Returns 0, or -1 with the reason in err
 * ("not an image stb_image decodes (JPEG, PNG, BMP, GIF, TGA, PSD, PIC, PNM)", "8000 x
 * 9000 pixels is more than ..."). */
int image_probe(const void *bytes, size_t n, int *w, int *h, char *err, size_t errlen);
/* Decodes to RGB (image_probe's checks first). Returns 0, or -1 with the reason in err
 * (a truncated or corrupt file says what stb_image found). */
int image_decode(const void *bytes, size_t n, image_rgb *out, char *err, size_t errlen);
void image_free(image_rgb *img);
/* Whether the bytes decode whole (image_decode, the pixels dropped): 0, or -1 with the
 * reason in err and errno EINVAL. What a caller checks before it keeps an image. */
int image_check(const void *bytes, size_t n, char *err, size_t errlen);

/* The size an image of w x h is resized to, keeping its aspect ratio: each side a multiple
 * of `align` (rounded, half away from zero), scaled down to at most max_pixels or up to at
 * least min_pixels (Hugging Face's smart_resize, as mtmd computes it in floats). */
void image_fit_size(int w, int h, int align, long min_pixels, long max_pixels, int *tw, int *th);

/* src scaled by min(tw / w, th / h) with Pillow's bicubic filter (a = -0.5), each side
 * rounded up and capped at the target, and centred on a black tw x th canvas (offsets
 * rounded down): mtmd's resize with PAD_CEIL. Returns 0, or -1 out of memory. */
int image_resize_padded(const image_rgb *src, int tw, int th, image_rgb *dst);

#endif
