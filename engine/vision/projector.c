/* projector.c - loading a qwen3vl_merger projector and encoding an image with it.
 *
 * The encoder reads top to bottom like clip_graph_qwen3vl::build (llama.cpp's
 * tools/mtmd/models/qwen3vl.cpp): patch embedding, position grid, ViT blocks, merger. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/threadpool.h"
#include "engine/kernels/quant.h"
#include "engine/layers/ops.h"
#include "engine/vision/projector.h"
#include "engine/vision/vision_ops.h"

/* ---------------------------------------------------------------- loading */

typedef struct {
    const gguf_file *f;
    char *err;
    size_t errlen;
    int failed;
} loader;

/* the first failure's message, "FILE: what", kept in err; -1 */
static int fail(loader *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(loader *l, const char *fmt, ...) {
    if (!l->failed) {
        char msg[400];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        snprintf(l->err, l->errlen, "%s: %s", l->f->path, msg);
        gguf_one_line(l->err);
    }
    l->failed = 1;
    return -1;
}

static int need_u32(loader *l, const char *key, int lo, int hi, int *out) {
    uint32_t v = 0;
    const int rc = gguf_get_u32(l->f, key, &v);
    if (rc != 1) return fail(l, rc == 0 ? "%s is missing" : "%s is not an integer", key);
    if ((long)v < lo || (long)v > hi) return fail(l, "%s is %ld, not in [%d, %d]", key, (long)v, lo, hi);
    *out = (int)v;
    return 0;
}

static const gguf_tensor *need_tensor(loader *l, const char *name, int64_t ne0, int64_t ne1, int64_t ne2,
                                      int64_t ne3) {
    const gguf_tensor *t = gguf_find_tensor(l->f, name);
    if (!t) {
        fail(l, "tensor %s is missing", name);
        return NULL;
    }
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != ne2 || t->ne[3] != ne3) {
        fail(l, "tensor %s has the shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld, %lld]", name,
             (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3], (long long)ne0,
             (long long)ne1, (long long)ne2, (long long)ne3);
        return NULL;
    }
    return t;
}

/* norms and biases are F32 in every converted projector: read in place */
static const float *need_f32(loader *l, const char *name, int64_t n) {
    const gguf_tensor *t = need_tensor(l, name, n, 1, 1, 1);
    if (t && t->type != GGML_F32) {
        fail(l, "tensor %s is not F32 (norms and biases are F32 in a converted projector)", name);
        return NULL;
    }
    return t ? t->data : NULL;
}

/* the weight types the kernels compute */
static int computable(uint32_t type) {
    switch (type) {
    case GGML_F32: case GGML_F16: case GGML_BF16: case GGML_Q8_0: case GGML_Q4_0: case GGML_Q4_1:
    case GGML_Q5_0: case GGML_Q5_1: case GGML_Q4_K: case GGML_Q5_K: case GGML_Q6_K: return 1;
    default: return 0;
    }
}

static int need_matrix(loader *l, matrix *m, const char *name, int64_t n_in, int64_t n_out) {
    const gguf_tensor *t = need_tensor(l, name, n_in, n_out, 1, 1);
    if (!t) return -1;
    if (!computable(t->type) || n_in % ggml_blck_size(t->type))
        return fail(l, "tensor %s has type %s, which chatfs does not multiply", name, ggml_type_name(t->type));
    matrix_from_tensor(m, t);
    return 0;
}

static int load_hparams(loader *l, projector *p) {
    const gguf_file *f = l->f;
    gguf_str kind = {0};
    if (gguf_get_str(f, "clip.projector_type", &kind) != 1)
        return fail(l, "clip.projector_type is missing: not a vision projector (mmproj) file");
    gguf_str_copy(kind, p->kind, sizeof p->kind);
    if (strcmp(p->kind, "qwen3vl_merger"))
        return fail(l, "projector type '%s' is not one chatfs computes (qwen3vl_merger: Qwen3.5)", p->kind);
    int vision = 0;
    if (gguf_get_bool(f, "clip.has_vision_encoder", &vision) != 1 || !vision)
        return fail(l, "clip.has_vision_encoder: the file has no vision encoder");
    int gelu = 0;
    if (gguf_get_bool(f, "clip.use_gelu", &gelu) != 1 || !gelu)
        return fail(l, "%s is not set: only the GELU (tanh) MLP of Qwen3.5's encoder is computed",
                    "clip.use_gelu");
    if (need_u32(l, "clip.vision.embedding_length", 1, 1 << 16, &p->n_embd) ||
        need_u32(l, "clip.vision.feed_forward_length", 1, 1 << 18, &p->n_ff) ||
        need_u32(l, "clip.vision.block_count", 1, 256, &p->n_layer) ||
        need_u32(l, "clip.vision.attention.head_count", 1, 1024, &p->n_head) ||
        need_u32(l, "clip.vision.projection_dim", 1, 1 << 18, &p->n_embd_out) ||
        need_u32(l, "clip.vision.patch_size", 1, 1024, &p->patch))
        return -1;
    int image_size = 0;
    if (need_u32(l, "clip.vision.image_size", 1, 1 << 16, &image_size)) return -1;
    p->merge = 2;
    uint32_t merge = 2;
    if (gguf_get_u32(f, "clip.vision.spatial_merge_size", &merge) == -1 || merge != 2)
        return fail(l, "%s is %ld: Qwen3.5's merger joins 2 x 2 patches", "clip.vision.spatial_merge_size",
                    (long)merge);
    if (gguf_get_f32(f, "clip.vision.attention.layer_norm_epsilon", &p->eps) != 1)
        return fail(l, "%s is missing", "clip.vision.attention.layer_norm_epsilon");
    if (p->n_embd % p->n_head || (p->n_embd / p->n_head) % 4)
        return fail(l, "clip.vision.attention.head_count: %d heads do not split the width into a multiple of 4 "
                    "each (2-D rotary positions)", p->n_head);
    p->head_dim = p->n_embd / p->n_head;
    /* mtmd refuses a projector without them (clip.cpp); no CLIP defaults apply */
    const char *arrays[2] = {"clip.vision.image_mean", "clip.vision.image_std"};
    for (int a = 0; a < 2; a++) {
        const gguf_kv *kv = gguf_find(f, arrays[a]);
        float *dst = a ? p->std : p->mean;
        if (!kv || kv->type != GGUF_ARRAY || kv->arr_n < 3)
            return fail(l, "%s must be an array of 3 numbers", arrays[a]);
        for (int c = 0; c < 3; c++)
            if (!gguf_arr_f32(kv, (uint64_t)c, &dst[c])) return fail(l, "%s must be numbers", arrays[a]);
        if (a && (p->std[0] == 0 || p->std[1] == 0 || p->std[2] == 0))
            return fail(l, "%s has a zero", arrays[a]);
    }
    /* Qwen's limits as mtmd sets them: 8 to 4096 merged tokens */
    const long area = (long)p->patch * p->patch * p->merge * p->merge;
    p->min_pixels = 8 * area;
    p->max_pixels = 4096 * area;
    (void)image_size; /* required, as by mtmd; the grid's size comes from the position table */
    return 0;
}

projector *projector_load(gguf_file *f, char *err, size_t errlen) {
    projector *p = calloc(1, sizeof *p);
    loader l = {f, err, errlen, 0};
    if (!p) {
        snprintf(err, errlen, "out of memory");
        gguf_close(f);
        return NULL;
    }
    p->file = f;
    if (load_hparams(&l, p)) goto fail;
    if (gguf_find_tensor(f, "v.deepstack.0.norm.weight") || gguf_find(f, "clip.vision.is_deepstack_layers")) {
        int any = 0;
        for (int i = 0; i < p->n_layer && !any; i++) {
            char t[64];
            snprintf(t, sizeof t, "v.deepstack.%d.fc1.weight", i);
            any = gguf_find_tensor(f, t) != NULL;
        }
        if (any) {
            fail(&l, "deepstack layers (Qwen3-VL) are not computed; Qwen3.5's projectors have none");
            goto fail;
        }
    }
    const int64_t E = p->n_embd, P = p->patch, M = E * p->merge * p->merge;
    for (int s = 0; s < 2; s++) {
        const char *name = s ? "v.patch_embd.weight.1" : "v.patch_embd.weight";
        const gguf_tensor *t = need_tensor(&l, name, P, P, 3, E);
        if (!t) goto fail;
        if (t->type != GGML_F32 && t->type != GGML_F16 && t->type != GGML_BF16) {
            fail(&l, "tensor %s must be F32, F16 or BF16 (a convolution kernel)", name);
            goto fail;
        }
        /* ggml_conv_2d unrolls the pixels (im2col) in F16 unless the kernel is BF16 (then in
         * F32), and the product then runs in that type: an F32 kernel is rounded to F16 too */
        const int64_t K = P * P * 3, n = K * E;
        const uint32_t dot = t->type == GGML_BF16 ? GGML_F32 : GGML_F16;
        if (t->type == GGML_F16) {
            p->patch_w[s] = (matrix){t->data, GGML_F16, K, E, (size_t)K * 2};
            continue;
        }
        void *w = malloc((size_t)n * (dot == GGML_F16 ? 2 : 4));
        if (!w) {
            fail(&l, "out of memory");
            goto fail;
        }
        p->patch_owned[s] = w;
        for (int64_t i = 0; i < n; i++) {
            if (t->type == GGML_F32)
                ((fp16_t *)w)[i] = f32_to_fp16(((const float *)t->data)[i]);
            else
                ((float *)w)[i] = bf16_to_f32(((const bf16_t *)t->data)[i]);
        }
        p->patch_w[s] = (matrix){w, dot, K, E, (size_t)K * (dot == GGML_F16 ? 2 : 4)};
    }
    p->patch_b = need_f32(&l, "v.patch_embd.bias", E);
    /* the learned grid: a square table, F32 or F16, widened once */
    const gguf_tensor *pos = gguf_find_tensor(f, "v.position_embd.weight");
    if (!pos || pos->ne[0] != E || pos->ne[2] != 1 || (pos->type != GGML_F32 && pos->type != GGML_F16)) {
        fail(&l, "tensor v.position_embd.weight is missing, or not F32/F16 rows of the encoder's width");
        goto fail;
    }
    p->grid = (int)sqrt((double)pos->ne[1]);
    if ((int64_t)p->grid * p->grid != pos->ne[1] || p->grid < 2) {
        fail(&l, "tensor v.position_embd.weight has %lld positions, not a square grid", (long long)pos->ne[1]);
        goto fail;
    }
    p->pos_embd = malloc(sizeof(float) * (size_t)(E * pos->ne[1]));
    if (!p->pos_embd) {
        fail(&l, "out of memory");
        goto fail;
    }
    for (int64_t i = 0; i < E * pos->ne[1]; i++)
        p->pos_embd[i] = pos->type == GGML_F32 ? ((const float *)pos->data)[i] : fp16_to_f32(((const fp16_t *)pos->data)[i]);
    p->blocks = calloc((size_t)p->n_layer, sizeof *p->blocks);
    if (!p->blocks) {
        fail(&l, "out of memory");
        goto fail;
    }
    for (int i = 0; i < p->n_layer; i++) {
        vit_block *b = &p->blocks[i];
        char t[96];
#define T(suffix) (snprintf(t, sizeof t, "v.blk.%d.%s", i, suffix), t)
        b->ln1_w = need_f32(&l, T("ln1.weight"), E);
        b->ln1_b = need_f32(&l, T("ln1.bias"), E);
        need_matrix(&l, &b->qkv, T("attn_qkv.weight"), E, 3 * E);
        b->qkv_b = need_f32(&l, T("attn_qkv.bias"), 3 * E);
        need_matrix(&l, &b->out, T("attn_out.weight"), E, E);
        b->out_b = need_f32(&l, T("attn_out.bias"), E);
        b->ln2_w = need_f32(&l, T("ln2.weight"), E);
        b->ln2_b = need_f32(&l, T("ln2.bias"), E);
        need_matrix(&l, &b->up, T("ffn_up.weight"), E, p->n_ff);
        b->up_b = need_f32(&l, T("ffn_up.bias"), p->n_ff);
        need_matrix(&l, &b->down, T("ffn_down.weight"), p->n_ff, E);
        b->down_b = need_f32(&l, T("ffn_down.bias"), E);
#undef T
        if (l.failed) goto fail;
    }
    p->post_ln_w = need_f32(&l, "v.post_ln.weight", E);
    p->post_ln_b = need_f32(&l, "v.post_ln.bias", E);
    need_matrix(&l, &p->mm0, "mm.0.weight", M, M);
    p->mm0_b = need_f32(&l, "mm.0.bias", M);
    need_matrix(&l, &p->mm2, "mm.2.weight", M, p->n_embd_out);
    p->mm2_b = need_f32(&l, "mm.2.bias", p->n_embd_out);
    if (l.failed) goto fail;
    return p;
fail:
    projector_free(p);
    return NULL;
}

void projector_free(projector *p) {
    if (!p) return;
    gguf_close(p->file);
    free(p->pos_embd);
    free(p->patch_owned[0]), free(p->patch_owned[1]);
    free(p->blocks);
    free(p);
}

void projector_image_size(const projector *p, int w, int h, int *tw, int *th) {
    image_fit_size(w, h, p->patch * p->merge, p->min_pixels, p->max_pixels, tw, th);
}
