/* projector.h - a vision projector (mmproj GGUF): an image in, text-model embeddings out.
 *
 * Qwen3.5's `qwen3vl_merger` (also Qwen3-VL's without deepstack), computed as llama.cpp's
 * clip_graph_qwen3vl computes it on the CPU with flash attention off (docs/engine-math.md
 * §13): patches of 16 x 16 pixels embedded by the Conv3D kernel's two temporal slices, a
 * learned position grid interpolated to the image's, ViT blocks (LayerNorm, fused QKV, 2-D
 * rotary positions, full attention, GELU MLP), then each 2 x 2 block of patches merged
 * into one embedding of the text model's width. An image of W x H pixels after resizing
 * gives (W / 32) x (H / 32) embeddings, row by row. */
#ifndef CHATFS_VISION_PROJECTOR_H
#define CHATFS_VISION_PROJECTOR_H

#include <stddef.h>
#include <stdint.h>

#include "engine/gguf/gguf.h"
#include "engine/kernels/kernels.h"
#include "engine/vision/image.h"

typedef struct {
    const float *ln1_w, *ln1_b, *qkv_b, *out_b, *ln2_w, *ln2_b, *up_b, *down_b;
    matrix qkv, out, up, down;
} vit_block;

typedef struct projector {
    gguf_file *file;
    char kind[32];        /* clip.projector_type: "qwen3vl_merger" */
    int n_embd, n_ff, n_layer, n_head, head_dim;
    int patch, merge;     /* pixels per patch side; patches per merged side */
    int grid;             /* the learned position table is grid x grid */
    int n_embd_out;       /* the text model's embedding width */
    float eps;
    float mean[3], std[3];
    long min_pixels, max_pixels; /* the sizes an image is resized into */
    matrix patch_w[2];    /* [3 * patch * patch] -> n_embd, one per temporal slice, in the
                           * type the convolution multiplies in (F16, or F32 for BF16) */
    void *patch_owned[2]; /* those converted at load */
    const float *patch_b;
    float *pos_embd;      /* grid * grid rows of n_embd (widened to floats) */
    vit_block *blocks;
    const float *post_ln_w, *post_ln_b, *mm0_b, *mm2_b;
    matrix mm0, mm2;
} projector;

/* Loads a projector from an open mmproj GGUF (which it then owns). NULL with one line in
 * err when the file is not a projector this engine computes, or its tensors do not fit
 * its metadata. */
projector *projector_load(gguf_file *f, char *err, size_t errlen);
void projector_free(projector *p);

/* The size an image of w x h pixels is resized to before encoding, and the embeddings it
 * gives (nx columns by ny rows). */
void projector_image_size(const projector *p, int w, int h, int *tw, int *th);
static inline int projector_cols(const projector *p, int tw) { return tw / (p->patch * p->merge); }
static inline int projector_rows(const projector *p, int th) { return th / (p->patch * p->merge); }

/* Embeds a decoded image: resized (projector_image_size) and normalised, then encoded into
 * out, nx * ny rows of n_embd_out floats (nx, ny as above; out sized by the caller from
 * projector_image_size). Runs on the thread pool. Returns 0, or -1 out of memory. */
int projector_encode(const projector *p, const image_rgb *img, float *out);

#endif
