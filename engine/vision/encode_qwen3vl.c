/* encode_qwen3vl.c - Qwen3.5's vision encoder and merger, as clip_graph_qwen3vl::build.
 *
 * Patches are kept in the merger's order from the start: the four patches of each 2 x 2
 * block one after another (top left, top right, bottom left, bottom right), the blocks row
 * by row. Every step before the merger works on patches independently or attends over all
 * of them, so the order changes nothing but where each row is; the merger then reads each
 * block's four rows as one row of 4 x n_embd. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/threadpool.h"
#include "engine/layers/ops.h"
#include "engine/vision/projector.h"
#include "engine/vision/vision_ops.h"

typedef struct {
    const projector *p;
    int nx, ny; /* patches across and down */
} grid;

/* patch t of the merger's order -> its row and column */
static void patch_at(const grid *g, int t, int *row, int *col) {
    const int block = t / 4, in = t % 4, bx = g->nx / 2;
    *row = (block / bx) * 2 + in / 2;
    *col = (block % bx) * 2 + in % 2;
}

/* X[t] = the pixels of patch t, (channel, row, column) with the column fastest: im2col's
 * order, which is the convolution kernel's row order */
static void patch_pixels(const grid *g, const float *planes, int W, int H, float *X) {
    const int P = g->p->patch, n = g->nx * g->ny;
    for (int t = 0; t < n; t++) {
        int r, c;
        patch_at(g, t, &r, &c);
        float *x = X + (size_t)t * 3 * P * P;
        for (int ch = 0; ch < 3; ch++)
            for (int ky = 0; ky < P; ky++)
                memcpy(x + (ch * P + ky) * P, planes + (size_t)ch * W * H + (size_t)(r * P + ky) * W + c * P,
                       sizeof(float) * (size_t)P);
    }
}

/* ---------------------------------------------------------------- attention */

/* Without flash attention clip computes kq = K Q and then V^T softmax(kq) as two float
 * matrix products. The first one's Q is a permuted view, which ggml multiplies with
 * ggml_vec_dot_f32 (dot_ggml); the second goes to tinyBLAS (16 lanes of fused
 * multiply-adds, reduced as _mm512_reduce_add_ps: attn_wsum_acc) when the patch count is
 * a multiple of 16, else to ggml_vec_dot_f32 as well, over V transposed. */
#define QUERIES 16  /* queries of one head that walk the keys together */
#define KEY_BLOCK 128 /* keys per block: a head's block of K (or V) rows stays in L2 */

typedef struct {
    const projector *p;
    const float *qkv; /* n rows of Q | K | V, rotated */
    float *vt;        /* V transposed per head (n_head x head_dim rows of n), when n % 16 */
    float *out;       /* n rows of n_embd */
    int n;
    float *scratch;   /* per thread: QUERIES x n scores + their weighted sums' partial sums */
    size_t scratch_floats;
} attn_job;

static void transpose_v(void *ctx, int ith, int nth) {
    attn_job *j = ctx;
    const int E = j->p->n_embd;
    long b, e;
    pool_split(E, ith, nth, 1, &b, &e);
    for (long c = b; c < e; c++) /* row c of V^T: channel c (head c / d, column c % d) */
        for (int t = 0; t < j->n; t++) j->vt[(size_t)c * j->n + t] = j->qkv[(size_t)t * 3 * E + 2 * E + c];
}

/* One head's queries [t0, t1) against every key, a block of keys at a time for all of
 * them (the multi-pair kernels load each K and V row once for the group); each query's
 * sums are the one-query sums, in the same order. */
static void attend_queries(const attn_job *j, int h, int t0, int t1, float *scratch) {
    const projector *p = j->p;
    const int d = p->head_dim, E = p->n_embd, nq = t1 - t0, n = j->n;
    const size_t stride = (size_t)3 * E, accn = ATTN_ACC_FLOATS(d);
    const float scale = 1.0f / sqrtf((float)d);
    const float *K = j->qkv + E + (size_t)h * d, *V = j->qkv + 2 * E + (size_t)h * d;
    float *s[QUERIES], *acc[QUERIES];
    const float *q[QUERIES], *w[QUERIES];
    for (int k = 0; k < nq; k++) {
        s[k] = scratch + (size_t)k * n;
        acc[k] = scratch + (size_t)QUERIES * n + (size_t)k * accn;
    }
    for (int i0 = 0; i0 < n; i0 += KEY_BLOCK) {
        const int cnt = n - i0 < KEY_BLOCK ? n - i0 : KEY_BLOCK;
        float *sb[QUERIES];
        for (int k = 0; k < nq; k++) {
            q[k] = j->qkv + (size_t)(t0 + k) * stride + (size_t)h * d;
            sb[k] = s[k] + i0;
        }
        attn_scores_multi(sb, K + (size_t)i0 * stride, stride, q, nq, cnt, d, scale);
    }
    for (int k = 0; k < nq; k++) {
        float max = -INFINITY;
        for (int i = 0; i < n; i++) max = s[k][i] > max ? s[k][i] : max;
        const float inv = (float)(1.0 / vec_softmax_exp(s[k], s[k], max, n));
        for (int i = 0; i < n; i++) s[k][i] *= inv;
    }
    if (j->vt) {
        for (int k = 0; k < nq; k++) {
            float *o = j->out + (size_t)(t0 + k) * E + (size_t)h * d;
            for (int c = 0; c < d; c++) o[c] = dot_ggml(j->vt + (size_t)(h * d + c) * n, s[k], n);
        }
        return;
    }
    for (int k = 0; k < nq; k++) memset(acc[k], 0, sizeof(float) * accn);
    for (int i0 = 0; i0 < n; i0 += KEY_BLOCK) {
        const int cnt = n - i0 < KEY_BLOCK ? n - i0 : KEY_BLOCK;
        for (int k = 0; k < nq; k++) w[k] = s[k] + i0;
        attn_wsum_acc_multi(acc, V + (size_t)i0 * stride, stride, w, nq, cnt, d);
    }
    for (int k = 0; k < nq; k++) attn_wsum_finish(j->out + (size_t)(t0 + k) * E + (size_t)h * d, acc[k], d);
}

static void attn_chunk(void *ctx, int ith, int nth) {
    attn_job *j = ctx;
    const int groups = (j->n + QUERIES - 1) / QUERIES;
    long b, e;
    pool_split((long)groups * j->p->n_head, ith, nth, 1, &b, &e);
    for (long w = b; w < e; w++) {
        const int h = (int)(w / groups), t0 = (int)(w % groups) * QUERIES;
        attend_queries(j, h, t0, t0 + QUERIES < j->n ? t0 + QUERIES : j->n, j->scratch + (size_t)ith * j->scratch_floats);
    }
}

/* ---------------------------------------------------------------- row-wise steps */

typedef struct {
    const projector *p;
    const grid *g;
    float *x;
    int n, width;
    const float *w, *b; /* norm weights, or a bias */
} rows_job;

static void qkv_bias_rope(void *ctx, int ith, int nth) {
    rows_job *j = ctx;
    const projector *p = j->p;
    const int E = p->n_embd, d = p->head_dim;
    long b, e;
    pool_split(j->n, ith, nth, 1, &b, &e);
    for (long t = b; t < e; t++) {
        float *row = j->x + (size_t)t * 3 * E;
        for (int i = 0; i < 3 * E; i++) row[i] += j->b[i];
        int r, c;
        patch_at(j->g, (int)t, &r, &c);
        const int pos[4] = {r, c, r, c};
        for (int h = 0; h < p->n_head; h++) {
            rope_vision(row + (size_t)h * d, d, pos, 10000.0f);
            rope_vision(row + E + (size_t)h * d, d, pos, 10000.0f);
        }
    }
}

static void norm_rows(void *ctx, int ith, int nth) {
    rows_job *j = ctx;
    long b, e;
    pool_split(j->n, ith, nth, 1, &b, &e);
    for (long t = b; t < e; t++) {
        float *row = j->x + (size_t)t * j->width;
        layernorm(row, row, j->w, j->b, j->width, j->p->eps);
    }
}

static void bias_gelu_rows(void *ctx, int ith, int nth) {
    rows_job *j = ctx;
    long b, e;
    pool_split(j->n, ith, nth, 1, &b, &e);
    for (long t = b; t < e; t++) {
        float *row = j->x + (size_t)t * j->width;
        for (int i = 0; i < j->width; i++) row[i] += j->b[i];
        vec_gelu(row, row, j->width);
    }
}

/* x[t] += y[t] + bias: a projection's bias, then the residual */
static void add_bias_residual(float *x, const float *y, const float *bias, int n, int width) {
    for (int t = 0; t < n; t++)
        for (int i = 0; i < width; i++) x[(size_t)t * width + i] += y[(size_t)t * width + i] + bias[i];
}

/* ---------------------------------------------------------------- the encoder */

int projector_encode(const projector *p, const image_rgb *src, float *out) {
    int W, H;
    projector_image_size(p, src->w, src->h, &W, &H);
    image_rgb img = {0};
    if (image_resize_padded(src, W, H, &img)) return -1;
    const int E = p->n_embd, P = p->patch, FF = p->n_ff;
    grid g = {p, W / P, H / P};
    const int n = g.nx * g.ny, M = E * 4;
    const int threads = pool_threads();
    const size_t scratch_floats = (size_t)QUERIES * (n + ATTN_ACC_FLOATS(p->head_dim)) + 16;
    float *planes = malloc(sizeof(float) * (size_t)W * H * 3);
    float *X = malloc(sizeof(float) * (size_t)n * (size_t)(3 * P * P > FF ? 3 * P * P : FF));
    float *x = malloc(sizeof(float) * (size_t)n * E), *y = malloc(sizeof(float) * (size_t)n * E);
    float *qkv = malloc(sizeof(float) * (size_t)n * 3 * E);
    float *pos = malloc(sizeof(float) * (size_t)n * E);
    float *scratch = malloc(sizeof(float) * scratch_floats * (size_t)threads);
    float *vt = n % 16 ? malloc(sizeof(float) * (size_t)n * E) : NULL;
    int rc = -1;
    if (!planes || !X || !x || !y || !qkv || !pos || !scratch || (n % 16 && !vt)) goto done;

    /* pixels to floats, normalised, one plane per channel */
    for (int i = 0; i < W * H; i++)
        for (int c = 0; c < 3; c++)
            planes[(size_t)c * W * H + i] = ((float)img.rgb[(size_t)i * 3 + c] / 255.0f - p->mean[c]) / p->std[c];

    /* patch embedding: the two temporal slices of the Conv3D kernel see the same frame */
    patch_pixels(&g, planes, W, H, X);
    matmul(&p->patch_w[0], X, n, x);
    matmul(&p->patch_w[1], X, n, y);
    for (int t = 0; t < n; t++)
        for (int i = 0; i < E; i++) x[(size_t)t * E + i] = (x[(size_t)t * E + i] + y[(size_t)t * E + i]) + p->patch_b[i];

    /* the learned position grid, resized to the image's patches, in the merger's order */
    const float *grid_rows = p->pos_embd;
    float *resized = NULL;
    if (g.nx != p->grid || g.ny != p->grid) {
        if (!(resized = malloc(sizeof(float) * (size_t)n * E))) goto done;
        grid_resize_bilinear(resized, g.nx, g.ny, p->pos_embd, p->grid, E);
        grid_rows = resized;
    }
    for (int t = 0; t < n; t++) {
        int r, c;
        patch_at(&g, t, &r, &c);
        memcpy(pos + (size_t)t * E, grid_rows + ((size_t)r * g.nx + c) * E, sizeof(float) * (size_t)E);
    }
    free(resized);
    for (size_t i = 0; i < (size_t)n * E; i++) x[i] += pos[i];

    for (int l = 0; l < p->n_layer; l++) {
        const vit_block *b = &p->blocks[l];
        /* attention: LayerNorm, fused QKV, 2-D rotary positions, every patch sees every patch */
        memcpy(y, x, sizeof(float) * (size_t)n * E);
        rows_job nj = {p, &g, y, n, E, b->ln1_w, b->ln1_b};
        pool_run(norm_rows, &nj);
        matmul(&b->qkv, y, n, qkv);
        rows_job qj = {p, &g, qkv, n, 3 * E, NULL, b->qkv_b};
        pool_run(qkv_bias_rope, &qj);
        attn_job aj = {p, qkv, n % 16 ? vt : NULL, y, n, scratch, scratch_floats};
        if (aj.vt) pool_run(transpose_v, &aj);
        pool_run(attn_chunk, &aj);
        matmul(&b->out, y, n, pos); /* pos is free from here: a scratch of n x E */
        add_bias_residual(x, pos, b->out_b, n, E);
        /* MLP: LayerNorm, up, GELU, down */
        memcpy(y, x, sizeof(float) * (size_t)n * E);
        rows_job n2 = {p, &g, y, n, E, b->ln2_w, b->ln2_b};
        pool_run(norm_rows, &n2);
        matmul(&b->up, y, n, X);
        rows_job gj = {p, &g, X, n, FF, NULL, b->up_b};
        pool_run(bias_gelu_rows, &gj);
        matmul(&b->down, X, n, y);
        add_bias_residual(x, y, b->down_b, n, E);
    }

    /* merger: LayerNorm per patch, each 2 x 2 block as one row, MLP into the text width */
    rows_job pj = {p, &g, x, n, E, p->post_ln_w, p->post_ln_b};
    pool_run(norm_rows, &pj);
    float *h = malloc(sizeof(float) * (size_t)(n / 4) * M);
    if (!h) goto done;
    matmul(&p->mm0, x, n / 4, h);
    rows_job mj = {p, &g, h, n / 4, M, NULL, p->mm0_b};
    pool_run(bias_gelu_rows, &mj);
    matmul(&p->mm2, h, n / 4, out);
    for (int t = 0; t < n / 4; t++)
        for (int i = 0; i < p->n_embd_out; i++) out[(size_t)t * p->n_embd_out + i] += p->mm2_b[i];
    free(h);
    rc = 0;
done:
    image_free(&img);
    free(planes), free(X), free(x), free(y), free(qkv), free(pos), free(scratch), free(vt);
    return rc;
}
