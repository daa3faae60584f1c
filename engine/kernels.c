/* kernels.c - the matmul driver and the scalar reference kernel set.
 *
 * matmul() = convert the activation rows to the weight's dot type once, then let
 * every thread compute a contiguous band of output rows for all T activation rows
 * (so each weight row is read from memory once per call, whatever T is). */
#include "engine/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/quant.h"
#include "engine/threadpool.h"

/* ---------------------------------------------------------------- scalar set */

static int scalar_supported(void) { return 1; }

static int scalar_gemm(uint32_t wt, const void *W, size_t wrb, int64_t n, int64_t r0, int64_t r1,
                       const void *Xq, size_t xrb, int T, float *Y, int64_t ldy) {
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *w = (const uint8_t *)W + (size_t)r * wrb;
        for (int t = 0; t < T; t++) Y[t * ldy + r] = vec_dot_ref(wt, n, w, (const uint8_t *)Xq + (size_t)t * xrb);
    }
    return 1;
}

const kernel_isa kernels_scalar = {"scalar", scalar_supported, scalar_gemm, NULL};

/* ---------------------------------------------------------------- selection */

extern const kernel_isa kernels_avx2, kernels_avx512;

static const kernel_isa *const all_isas[] = {&kernels_avx512, &kernels_avx2, &kernels_scalar};
#define N_ISAS (sizeof all_isas / sizeof all_isas[0])

static const kernel_isa *active;

int kernels_select(const char *name) {
    for (size_t i = 0; i < N_ISAS; i++) {
        const kernel_isa *k = all_isas[i];
        if (!k->supported()) continue;
        if (!name || !*name || strcmp(name, "auto") == 0 || strcmp(name, k->name) == 0) {
            active = k;
            return 1;
        }
    }
    return 0;
}

static const kernel_isa *isa(void) {
    if (!active) {
        const char *env = getenv("CHATFS_ISA");
        if (!kernels_select(env)) {
            if (env && *env) fprintf(stderr, "chatfs: CHATFS_ISA=%s is not available here, using auto\n", env);
            kernels_select("auto");
        }
    }
    return active;
}

const char *kernels_name(void) { return isa()->name; }

const char *const *kernels_available(void) {
    static const char *names[N_ISAS + 1];
    size_t k = 0;
    for (size_t i = 0; i < N_ISAS; i++)
        if (all_isas[i]->supported()) names[k++] = all_isas[i]->name;
    names[k] = NULL;
    return names;
}

/* ---------------------------------------------------------------- driver */

void matrix_from_tensor(matrix *m, const gguf_tensor *t) {
    m->data = t->data;
    m->type = t->type;
    m->n_in = t->ne[0];
    m->n_out = t->ne[1] * t->ne[2] * t->ne[3];
    m->row_bytes = (size_t)(t->ne[0] / ggml_blck_size(t->type)) * ggml_type_size(t->type);
}

void matrix_get_row(const matrix *W, int64_t row, float *out) {
    dequantize_row(W->type, (const uint8_t *)W->data + (size_t)row * W->row_bytes, out, W->n_in);
}

typedef struct {
    const kernel_isa *k;
    const matrix *W;
    const float *X;
    int T;
    uint32_t dt;
    void *Xq;
    size_t xrb;
    float *Y;
    int64_t r0, r1;
} mm_job;

static void quantize_job(void *arg, int ith, int nth) {
    mm_job *j = arg;
    long b, e;
    pool_split(j->T, ith, nth, 1, &b, &e);
    for (long t = b; t < e; t++) {
        void *dst = (uint8_t *)j->Xq + (size_t)t * j->xrb;
        const float *src = j->X + (size_t)t * j->W->n_in;
        if (j->k->quantize)
            j->k->quantize(j->dt, src, dst, j->W->n_in);
        else
            quantize_activation(j->dt, src, dst, j->W->n_in);
    }
}

static void gemm_job(void *arg, int ith, int nth) {
    mm_job *j = arg;
    long b, e;
    pool_split(j->r1 - j->r0, ith, nth, 16, &b, &e);
    if (b >= e) return;
    const matrix *W = j->W;
    if (!j->k->gemm(W->type, W->data, W->row_bytes, W->n_in, j->r0 + b, j->r0 + e, j->Xq, j->xrb, j->T,
                    j->Y, W->n_out))
        scalar_gemm(W->type, W->data, W->row_bytes, W->n_in, j->r0 + b, j->r0 + e, j->Xq, j->xrb, j->T,
                    j->Y, W->n_out);
}

/* activation rows converted to the dot type; grown as needed, one per thread
 * (matmul may be called from several engine threads) */
static _Thread_local void *xq_buf;
static _Thread_local size_t xq_cap;

void matmul_rows(const matrix *W, const float *X, int T, float *Y, int64_t r0, int64_t r1) {
    if (T <= 0 || r1 <= r0) return;
    mm_job j = {.k = isa(), .W = W, .X = X, .T = T, .Y = Y, .r0 = r0, .r1 = r1};
    j.dt = quant_dot_type(W->type);
    j.xrb = quant_row_bytes(j.dt, W->n_in);
    if (j.dt == GGML_F32) {
        j.Xq = (void *)X; /* F32 weights take the activations as they are */
    } else {
        size_t need = j.xrb * (size_t)T;
        if (need > xq_cap) {
            free(xq_buf);
            xq_cap = need + need / 4;
            xq_buf = malloc(xq_cap);
            if (!xq_buf) {
                fprintf(stderr, "chatfs: out of memory in matmul\n");
                abort();
            }
        }
        j.Xq = xq_buf;
        if (T > 1)
            pool_run(quantize_job, &j);
        else
            quantize_job(&j, 0, 1);
    }
    pool_run(gemm_job, &j);
}

void matmul(const matrix *W, const float *X, int T, float *Y) { matmul_rows(W, X, T, Y, 0, W->n_out); }
