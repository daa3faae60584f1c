/* synth_mmproj.c - `chatfs synth --mmproj SHAPE`: a random-weight vision projector
 * (mmproj GGUF) of Qwen3.5's layout, the `qwen3vl_merger` that llama.cpp's mtmd loads.
 *
 *   chatfs synth --mmproj tiny --n-embd 64 --type f32 --out FILE [--seed S]
 *
 * Metadata and tensors are those llama.cpp's clip loader reads (clip-impl.h names):
 * patch embedding as two temporal slices of the Conv3D kernel, a learned position grid,
 * ViT blocks with fused QKV, a LayerNorm before the 2x2 merge, a two-layer merger MLP
 * whose output width is the text model's embedding width (--n-embd, which the text model
 * must have). Matrices take --type; the patch kernel F16 at most (a convolution kernel is
 * not quantized), norms, biases and the position grid F32, as the converter writes them.
 * Weights: deterministic normal values, std 1/sqrt(fan-in) (random_rows.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/synth/gguf_write.h"
#include "cli/synth/random_rows.h"
#include "cli/synth/synth.h"
#include "engine/kernels/quant.h"

typedef struct {
    const char *name;
    int n_embd, n_ff, n_layer, n_head, patch, grid, merge, n_embd_text;
} vision_shape;

/* grid: the learned position table is grid x grid patches (image_size = grid * patch) */
static const vision_shape vision_shapes[] = {
    /* for the tests: a few thousand parameters, every step of the real computation */
    {"tiny", 64, 96, 2, 4, 16, 8, 2, 0},
    /* the projector of Qwen3.5-27B and 35B-A3B (clip.vision.* of their mmproj files) */
    {"qwen3.5-35b-a3b", 1152, 4304, 27, 16, 16, 48, 2, 2048},
};
#define N_VISION_SHAPES (int)(sizeof vision_shapes / sizeof vision_shapes[0])

typedef struct {
    gguf_writer *w;
    uint32_t type;
    uint64_t seed;
    init_spec specs[512];
    int n_specs, failed;
    uint64_t n_params;
    int64_t n_embd;
} mm_builder;

static void mm_tensor(mm_builder *b, const char *name, uint32_t type, int n_dims, const int64_t *ne, int kind,
                      float a, float bb) {
    if (b->n_specs == (int)(sizeof b->specs / sizeof b->specs[0])) {
        b->failed = 1;
        return;
    }
    init_spec *sp = &b->specs[b->n_specs++];
    *sp = (init_spec){kind, a, bb, b->seed};
    if (kind == I_NORMAL && a == 0) sp->a = 1.0f / sqrtf((float)ne[0]);
    uint64_t n = 1;
    for (int d = 0; d < n_dims; d++) n *= (uint64_t)ne[d];
    b->n_params += n;
    b->failed |= gguf_w_tensor(b->w, name, type, n_dims, ne, random_rows, sp) != 0;
}

/* a matrix in -> out in the requested type, falling back to F16 where a row does not
 * fill the type's blocks (as llama-quantize does) */
static void mm_matrix(mm_builder *b, const char *name, int64_t in, int64_t out) {
    uint32_t t = b->type;
    if (in % ggml_blck_size(t)) t = GGML_F16;
    const int64_t ne[2] = {in, out};
    mm_tensor(b, name, t, 2, ne, I_NORMAL, 0, 0);
}
static void mm_vector(mm_builder *b, const char *name, int64_t n, int kind, float a, float bb) {
    const int64_t ne[1] = {n};
    mm_tensor(b, name, GGML_F32, 1, ne, kind, a, bb);
}
/* a LayerNorm's scale and shift: near one and near zero, so every weight matters */
static void mm_norm(mm_builder *b, const char *prefix) {
    char t[112];
    snprintf(t, sizeof t, "%s.weight", prefix);
    mm_vector(b, t, b->n_embd, I_UNIFORM, 0.8f, 1.2f);
    snprintf(t, sizeof t, "%s.bias", prefix);
    mm_vector(b, t, b->n_embd, I_NORMAL, 0.05f, 0);
}

int synth_mmproj(const char *shape_name, uint32_t type, const char *type_name, long n_embd_text, long seed,
                 const char *out, int quiet) {
    const vision_shape *c = NULL;
    for (int i = 0; i < N_VISION_SHAPES; i++)
        if (!strcmp(vision_shapes[i].name, shape_name)) c = &vision_shapes[i];
    if (!c) {
        cli_error("synth: unknown projector shape '%s' (known: tiny, qwen3.5-35b-a3b)", shape_name);
        return 1;
    }
    const int proj = n_embd_text > 0 ? (int)n_embd_text : c->n_embd_text;
    if (proj <= 0) {
        cli_error("synth: --mmproj %s needs --n-embd N, the text model's embedding width", c->name);
        return 1;
    }
    mm_builder b = {.w = gguf_writer_new(), .type = type, .seed = (uint64_t)seed * 0x9e3779b97f4a7c15ULL,
                    .n_embd = c->n_embd};
    if (!b.w) {
        cli_error("out of memory");
        return 1;
    }
    const float half[3] = {0.5f, 0.5f, 0.5f};
    char name[128];
    snprintf(name, sizeof name, "chatfs-synth-mmproj-%s-%s", c->name, type_name);
    gguf_w_str(b.w, "general.architecture", "clip");
    gguf_w_str(b.w, "general.name", name);
    gguf_w_u32(b.w, "general.alignment", 32);
    gguf_w_str(b.w, "clip.projector_type", "qwen3vl_merger");
    gguf_w_bool(b.w, "clip.has_vision_encoder", 1);
    gguf_w_bool(b.w, "clip.use_gelu", 1);
    gguf_w_u32(b.w, "clip.vision.image_size", (uint32_t)(c->grid * c->patch));
    gguf_w_u32(b.w, "clip.vision.patch_size", (uint32_t)c->patch);
    gguf_w_u32(b.w, "clip.vision.embedding_length", (uint32_t)c->n_embd);
    gguf_w_u32(b.w, "clip.vision.feed_forward_length", (uint32_t)c->n_ff);
    gguf_w_u32(b.w, "clip.vision.block_count", (uint32_t)c->n_layer);
    gguf_w_u32(b.w, "clip.vision.attention.head_count", (uint32_t)c->n_head);
    gguf_w_u32(b.w, "clip.vision.projection_dim", (uint32_t)proj);
    gguf_w_f32(b.w, "clip.vision.attention.layer_norm_epsilon", 1e-6f);
    gguf_w_u32(b.w, "clip.vision.spatial_merge_size", (uint32_t)c->merge);
    gguf_w_arr(b.w, "clip.vision.image_mean", GGUF_F32, half, 3);
    gguf_w_arr(b.w, "clip.vision.image_std", GGUF_F32, half, 3);

    const int64_t E = c->n_embd, P = c->patch, M = (int64_t)E * c->merge * c->merge;
    const int64_t kernel[4] = {P, P, 3, E};
    const uint32_t kernel_type = type == GGML_F32 ? GGML_F32 : GGML_F16;
    mm_tensor(&b, "v.patch_embd.weight", kernel_type, 4, kernel, I_NORMAL, 1.0f / sqrtf((float)(P * P * 3 * 2)), 0);
    mm_tensor(&b, "v.patch_embd.weight.1", kernel_type, 4, kernel, I_NORMAL, 1.0f / sqrtf((float)(P * P * 3 * 2)), 0);
    mm_vector(&b, "v.patch_embd.bias", E, I_NORMAL, 0.02f, 0);
    const int64_t pos[2] = {E, (int64_t)c->grid * c->grid};
    mm_tensor(&b, "v.position_embd.weight", GGML_F32, 2, pos, I_NORMAL, 0.5f, 0);
    for (int i = 0; i < c->n_layer; i++) {
        char t[96];
#define BLK(suffix) (snprintf(t, sizeof t, "v.blk.%d.%s", i, suffix), t)
        mm_norm(&b, BLK("ln1"));
        mm_matrix(&b, BLK("attn_qkv.weight"), E, 3 * E);
        mm_vector(&b, BLK("attn_qkv.bias"), 3 * E, I_NORMAL, 0.05f, 0);
        mm_matrix(&b, BLK("attn_out.weight"), E, E);
        mm_vector(&b, BLK("attn_out.bias"), E, I_NORMAL, 0.05f, 0);
        mm_norm(&b, BLK("ln2"));
        mm_matrix(&b, BLK("ffn_up.weight"), E, c->n_ff);
        mm_vector(&b, BLK("ffn_up.bias"), c->n_ff, I_NORMAL, 0.05f, 0);
        mm_matrix(&b, BLK("ffn_down.weight"), c->n_ff, E);
        mm_vector(&b, BLK("ffn_down.bias"), E, I_NORMAL, 0.05f, 0);
#undef BLK
    }
    mm_norm(&b, "v.post_ln");
    mm_matrix(&b, "mm.0.weight", M, M);
    mm_vector(&b, "mm.0.bias", M, I_NORMAL, 0.05f, 0);
    mm_matrix(&b, "mm.2.weight", M, proj);
    mm_vector(&b, "mm.2.bias", proj, I_NORMAL, 0.05f, 0);

    char err[512];
    int rc = 0;
    if (b.failed) {
        cli_error("synth: could not describe the %s projector", c->name);
        rc = 1;
    } else if (gguf_writer_save(b.w, out, err, sizeof err) != 0) {
        cli_error("%s", err);
        rc = 1;
    } else if (!quiet) {
        fprintf(stderr, "wrote %s: the %s vision projector (%d blocks, width %d, into %d) %s, %llu parameters\n", out,
                c->name, c->n_layer, c->n_embd, proj, type_name, (unsigned long long)b.n_params);
    }
    gguf_writer_free(b.w);
    return rc;
}
