/* kernels.c - the matmul driver and the scalar reference kernel set.
 *
 * matmul_multi() = convert the activation rows to each dot type once (in parallel over
 * tokens when there are several), then one pool job in which every thread computes a
 * contiguous share of all the matrices' output rows for all T tokens, so each weight
 * row is read from memory once per call whatever T is. */
#include "engine/kernels/kernels.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels/quant.h"
#include "engine/base/threadpool.h"

/* ---------------------------------------------------------------- scalar set */

static int scalar_supported(void) { return 1; }

static int scalar_gemm(const matrix *W, int64_t r0, int64_t r1, const kact *x, float *Y, int64_t ldy) {
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *w = (const uint8_t *)W->data + (size_t)r * W->row_bytes;
        for (int t = 0; t < x->T; t++) Y[t * ldy + r] = vec_dot_ref(W->type, W->n_in, w, kact_row(x, t));
    }
    return 1;
}

static float scalar_sum(const float *x, size_t n) {
    float s[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) s[k] += x[i + k];
    for (; i < n; i++) s[0] += x[i];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

const kernel_isa kernels_scalar = {
    .name = "scalar", .supported = scalar_supported, .gemm = scalar_gemm, .sum = scalar_sum, .vector_bits = 0};

/* ---------------------------------------------------------------- selection */

extern const kernel_isa kernels_avx2, kernels_avxvnni, kernels_avx512, kernels_amx;

/* best first; "auto" takes the first supported set that is not opt-in */
static const kernel_isa *const all_isas[] = {&kernels_avx512, &kernels_amx, &kernels_avxvnni, &kernels_avx2,
                                             &kernels_scalar};
#define N_ISAS (sizeof all_isas / sizeof all_isas[0])

/* Atomic: the first forward pass may choose it on the pool's threads at once (every
 * thread picks the same one; the engine's and the tests' threads read it). */
static _Atomic(const kernel_isa *) active;

int kernels_select(const char *name) {
    for (size_t i = 0; i < N_ISAS; i++) {
        const kernel_isa *k = all_isas[i];
        if (!k->supported()) continue;
        const int any = !name || !*name || strcmp(name, "auto") == 0;
        if ((any && !k->opt_in) || (name && strcmp(name, k->name) == 0)) {
            atomic_store_explicit(&active, k, memory_order_release);
            return 1;
        }
    }
    return 0;
}

static const kernel_isa *isa(void) {
    const kernel_isa *k = atomic_load_explicit(&active, memory_order_acquire);
    if (k) return k;
    const char *env = getenv("CHATFS_ISA");
    if (!kernels_select(env)) {
        if (env && *env) fprintf(stderr, "chatfs: CHATFS_ISA=%s is not available here, using auto\n", env);
        kernels_select("auto");
    }
    return atomic_load_explicit(&active, memory_order_acquire);
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

/* a member of the active set, or of the set it extends when it leaves that one NULL */
#define MEMBER(k, m) ((k)->m || !(k)->base ? (k)->m : (k)->base->m)

float kernels_sum_floats(const float *x, size_t n) { return MEMBER(isa(), sum)(x, n); }

int kernels_vector_bits(void) { return MEMBER(isa(), vector_bits); }

int kernels_blockint(uint32_t wt) {
    const kernel_isa *k = isa();
    return k->blockint && k->blockint(wt);
}

/* ---------------------------------------------------------------- activations */

void matrix_from_tensor(matrix *m, const gguf_tensor *t) {
    m->data = t->data;
    m->type = t->type;
    m->n_in = t->ne[0];
    m->n_out = t->ne[1] * t->ne[2] * t->ne[3];
    m->row_bytes = (size_t)(t->ne[0] / ggml_blck_size(t->type)) * ggml_type_size(t->type);
}

void experts_from_tensor(expert_matrix *x, const gguf_tensor *t) {
    x->m.data = t->data;
    x->m.type = t->type;
    x->m.n_in = t->ne[0];
    x->m.n_out = t->ne[1];
    x->m.row_bytes = (size_t)(t->ne[0] / ggml_blck_size(t->type)) * ggml_type_size(t->type);
    x->n_expert = (int)t->ne[2];
    x->expert_bytes = x->m.row_bytes * (size_t)t->ne[1];
}

void matrix_get_row(const matrix *W, int64_t row, float *out) {
    dequantize_row(W->type, (const uint8_t *)W->data + (size_t)row * W->row_bytes, out, W->n_in);
}

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

static size_t aux_bytes(uint32_t dt, int64_t n) {
    switch (dt) {
    case GGML_Q8_0: return 2 * (size_t)n + (size_t)(n / QK8_0) * sizeof(float);
    case GGML_Q8_1: return (size_t)(n / QK8_0) * 2 * sizeof(float);
    case GGML_Q8_K: return (size_t)(n / QK_K) * 8 * sizeof(int16_t);
    case GGML_F16: case GGML_BF16: return (size_t)n * sizeof(float);
    default: return 0;
    }
}

/* layout of one prepared row (see kact in kernels.h) */
static void kact_layout(kact *x, uint32_t wt, int64_t n, int T) {
    x->dot_type = quant_dot_type(wt);
    x->n = n;
    x->T = T;
    x->aux_off = align64(quant_row_bytes(x->dot_type, n));
    x->stride = x->dot_type == GGML_F32 ? (size_t)n * sizeof(float) : align64(x->aux_off + aux_bytes(x->dot_type, n));
}

size_t kact_bytes(uint32_t wt, int64_t n, int T) {
    kact x;
    kact_layout(&x, wt, n, T);
    return x.dot_type == GGML_F32 ? 0 : x.stride * (size_t)T;
}

/* converts row t: the dot type as llama.cpp makes it, then the kernels' extras */
static void prepare_row(const kact *x, const float *src, int t) {
    uint8_t *row = (uint8_t *)kact_row(x, t), *aux = row + x->aux_off;
    const int64_t n = x->n;
    const kernel_isa *k = isa();
    int (*prep)(uint32_t, const float *, void *, void *, int64_t) = MEMBER(k, prep_row);
    if (prep && prep(x->dot_type, src, row, aux, n)) return;
    quantize_activation(x->dot_type, src, row, n);
    switch (x->dot_type) {
    case GGML_Q8_0: {
        const block_q8_0 *b = (const block_q8_0 *)row;
        int8_t *qs = (int8_t *)aux;
        int32_t *corr = (int32_t *)(aux + n);
        float *d = (float *)(aux + 2 * n);
        for (int64_t i = 0; i < n / QK8_0; i++) {
            memcpy(qs + i * QK8_0, b[i].qs, QK8_0);
            for (int l = 0; l < 8; l++)
                corr[i * 8 + l] = -128 * (b[i].qs[4 * l] + b[i].qs[4 * l + 1] + b[i].qs[4 * l + 2] + b[i].qs[4 * l + 3]);
            d[i] = fp16_to_f32(b[i].d);
        }
        break;
    }
    case GGML_Q8_1: {
        const block_q8_1 *b = (const block_q8_1 *)row;
        float *d = (float *)aux, *s = d + n / QK8_0;
        for (int64_t i = 0; i < n / QK8_0; i++) {
            d[i] = fp16_to_f32(b[i].d);
            s[i] = fp16_to_f32(b[i].s);
        }
        break;
    }
    case GGML_Q8_K: {
        const block_q8_K *b = (const block_q8_K *)row;
        int16_t *bs = (int16_t *)aux;
        for (int64_t i = 0; i < n / QK_K; i++)
            for (int j = 0; j < 8; j++) bs[i * 8 + j] = (int16_t)(b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
        break;
    }
    case GGML_F16: {
        const fp16_t *h = (const fp16_t *)row;
        float *f = (float *)aux;
        for (int64_t i = 0; i < n; i++) f[i] = fp16_to_f32(h[i]);
        break;
    }
    case GGML_BF16: {
        const bf16_t *h = (const bf16_t *)row;
        float *f = (float *)aux;
        for (int64_t i = 0; i < n; i++) f[i] = bf16_to_f32(h[i]);
        break;
    }
    default: break;
    }
}

typedef struct {
    const kact *x;
    const float *X;
} prep_job;

static void prepare_job(void *arg, int ith, int nth) {
    prep_job *j = arg;
    long b, e;
    pool_split(j->x->T, ith, nth, 1, &b, &e);
    for (long t = b; t < e; t++) prepare_row(j->x, j->X + (size_t)t * j->x->n, (int)t);
}

/* a number no other preparation has: kernels cache re-layouts of the activations by it */
static uint64_t new_serial(void) {
    static _Atomic uint64_t serials;
    return atomic_fetch_add_explicit(&serials, 1, memory_order_relaxed) + 1;
}

/* Prepares X for wt into buf (kact_bytes long); in parallel over tokens when T > 1. */
static void prepare(kact *x, uint32_t wt, const float *X, int64_t n, int T, void *buf, int parallel) {
    kact_layout(x, wt, n, T);
    x->serial = new_serial();
    if (x->dot_type == GGML_F32) {
        x->base = (const uint8_t *)X;
        return;
    }
    x->base = buf;
    prep_job j = {x, X};
    if (parallel && T > 1)
        pool_run(prepare_job, &j);
    else
        prepare_job(&j, 0, 1);
}

void kact_prepare(kact *x, uint32_t wt, const float *X, int64_t n, int T, void *buf) {
    prepare(x, wt, X, n, T, buf, 0);
}

void kact_prepare_rows(kact *x, uint32_t wt, const float *X, int64_t n, int T, void *buf) {
    prepare(x, wt, X, n, T, buf, 1);
}

kact kact_slice(const kact *x, int t0, int T) {
    kact s = *x;
    s.base = x->base + (size_t)t0 * x->stride;
    s.T = T;
    s.serial = new_serial();
    return s;
}

size_t kact_gather_bytes(const kact *src, int T) { return src->stride * (size_t)T; }

void kact_gather(kact *dst, const kact *src, const int *rows, int T, void *buf) {
    for (int t = 0; t < T; t++) memcpy((uint8_t *)buf + (size_t)t * src->stride, kact_row(src, rows[t]), src->stride);
    *dst = *src;
    dst->base = buf;
    dst->T = T;
    dst->serial = new_serial();
}

void kernels_gemm_reference(const matrix *W, int64_t r0, int64_t r1, const kact *x, float *Y, int64_t ldy) {
    if (!kernels_blockint(W->type)) {
        scalar_gemm(W, r0, r1, x, Y, ldy);
        return;
    }
    for (int64_t r = r0; r < r1; r++) /* blockint types: Q8_0 */
        for (int t = 0; t < x->T; t++)
            Y[t * ldy + r] = vec_dot_q8_0_blockint(
                W->n_in, (const block_q8_0 *)((const uint8_t *)W->data + (size_t)r * W->row_bytes), kact_row(x, t));
}

void kernels_gemm(const matrix *W, int64_t r0, int64_t r1, const kact *x, float *Y, int64_t ldy) {
    if (r1 <= r0 || x->T <= 0) return;
    if (!isa()->gemm(W, r0, r1, x, Y, ldy)) kernels_gemm_reference(W, r0, r1, x, Y, ldy);
}

/* ---------------------------------------------------------------- driver */

#define MAX_MULTI 8

typedef struct {
    int n;
    const matrix *W[MAX_MULTI];
    float *Y[MAX_MULTI];
    int64_t r0[MAX_MULTI], r1[MAX_MULTI]; /* row range of each matrix */
    const kact *x[MAX_MULTI];
    int64_t total;                        /* rows over all matrices */
    float *const *dst;                    /* matmul_scatter: token t's rows of Y[0] go to dst[t] */
    float scale;                          /* ... times this */
} mm_job;

/* each thread takes a contiguous share of the concatenated rows of all matrices */
static void gemm_job(void *arg, int ith, int nth) {
    mm_job *j = arg;
    long b, e;
    pool_split_guided(j->total, ith, nth, 16, &b, &e);
    int64_t base = 0;
    for (int i = 0; i < j->n && b < e; i++) {
        const int64_t rows = j->r1[i] - j->r0[i];
        const int64_t lo = b > base ? b - base : 0, hi = e - base < rows ? e - base : rows;
        if (lo < hi) {
            const int64_t n_out = j->W[i]->n_out, a = j->r0[i] + lo, z = j->r0[i] + hi;
            kernels_gemm(j->W[i], a, z, j->x[i], j->Y[i], n_out);
            for (int t = 0; j->dst && t < j->x[i]->T; t++) {
                const float *y = j->Y[i] + (size_t)t * (size_t)n_out;
                if (j->scale == 1.0f)
                    memcpy(j->dst[t] + a, y + a, (size_t)(z - a) * sizeof(float));
                else
                    for (int64_t r = a; r < z; r++) j->dst[t][r] = y[r] * j->scale;
            }
        }
        base += rows;
    }
}

/* prepared activations: one buffer per thread that calls matmul (matmul may be called
 * from several engine threads), grown as needed */
static _Thread_local void *act_buf;
static _Thread_local size_t act_cap;

void matmul_thread_release(void) {
    free(act_buf);
    act_buf = NULL;
    act_cap = 0;
}

static void *act_space(size_t need) {
    if (need > act_cap) {
        free(act_buf);
        act_cap = align64(need + need / 4);
        act_buf = aligned_alloc(64, act_cap);
        if (!act_buf) {
            fprintf(stderr, "chatfs: out of memory in matmul\n");
            abort();
        }
    }
    return act_buf;
}

static void run_multi(int n, const matrix *const *W, float *const *Y, const int64_t *r0, const int64_t *r1,
                      const float *X, int T, float *const *dst, float scale) {
    if (T <= 0 || n <= 0) return;
    if (n > MAX_MULTI) {
        run_multi(MAX_MULTI, W, Y, r0, r1, X, T, NULL, 1.0f);
        run_multi(n - MAX_MULTI, W + MAX_MULTI, Y + MAX_MULTI, r0 + MAX_MULTI, r1 + MAX_MULTI, X, T, NULL, 1.0f);
        return;
    }
    const int64_t n_in = W[0]->n_in;
    /* one prepared activation per distinct dot type */
    uint32_t types[MAX_MULTI];
    kact acts[MAX_MULTI];
    size_t offs[MAX_MULTI], need = 0;
    int n_types = 0, which[MAX_MULTI];
    for (int i = 0; i < n; i++) {
        uint32_t dt = quant_dot_type(W[i]->type);
        int k = 0;
        while (k < n_types && types[k] != dt) k++;
        if (k == n_types) {
            types[k] = dt;
            offs[k] = need;
            need += kact_bytes(W[i]->type, n_in, T);
            n_types++;
        }
        which[i] = k;
    }
    uint8_t *buf = need ? act_space(need) : NULL;
    for (int k = 0; k < n_types; k++) {
        const matrix *w = NULL;
        for (int i = 0; i < n && !w; i++)
            if (which[i] == k) w = W[i];
        prepare(&acts[k], w->type, X, n_in, T, buf ? buf + offs[k] : NULL, 1);
    }
    mm_job j = {.n = n, .dst = dst, .scale = scale};
    for (int i = 0; i < n; i++) {
        j.W[i] = W[i];
        j.Y[i] = Y[i];
        j.r0[i] = r0[i];
        j.r1[i] = r1[i];
        j.x[i] = &acts[which[i]];
        j.total += r1[i] - r0[i];
    }
    /* 8 chunks per thread, claimed dynamically and falling in size (gemm_job), so uneven
     * progress of the threads evens out down to a small last chunk */
    int chunks = (int)((j.total + 31) / 32), most = 8 * pool_threads();
    if (chunks > most) chunks = most;
    if (j.total > 0) pool_run_n(gemm_job, &j, chunks);
}

typedef struct {
    const matmul_part *parts;
    int n;
    int64_t units; /* work over all parts */
    int64_t rows;  /* rows over all parts */
} parts_job;

static int64_t part_rows(const matmul_part *p) { return p->x.T > 0 && p->r1 > p->r0 ? p->r1 - p->r0 : 0; }

/* What a row of a part costs, in units: its tokens' products and the row's own read.
 * Parts differ a lot in tokens in a prompt (an expert chosen by a few tokens, the shared
 * expert by all of them), so the threads' shares are counted in work, not rows. */
static int64_t row_units(const matmul_part *p) { return (int64_t)p->x.T + 2; }

/* the first row of a part whose work starts at or after unit u of the part, rounded up to
 * whole groups of 16 rows (the kernels' row pairs and quarters) */
static int64_t row_at(int64_t u, int64_t rows, int64_t w) {
    if (u <= 0) return 0;
    const int64_t r = (u + w - 1) / w, r16 = (r + 15) / 16 * 16;
    return r16 < rows ? r16 : rows;
}

/* each chunk takes a contiguous share of the work of all parts one after the other; a
 * row goes to the chunk its first unit falls in */
static void parts_chunk(void *arg, int ith, int nth) {
    const parts_job *j = arg;
    long b, e;
    pool_split_guided(j->units, ith, nth, 1, &b, &e);
    int64_t base = 0;
    for (int i = 0; i < j->n && base < e; i++) {
        const matmul_part *p = &j->parts[i];
        const int64_t rows = part_rows(p), w = row_units(p), lo = row_at(b - base, rows, w),
                      hi = row_at(e - base, rows, w);
        if (lo < hi) kernels_gemm(&p->W, p->r0 + lo, p->r0 + hi, &p->x, p->Y, p->ldy);
        base += rows * w;
    }
}

void matmul_parts(const matmul_part *parts, int n) {
    parts_job j = {.parts = parts, .n = n};
    for (int i = 0; i < n; i++) {
        j.rows += part_rows(&parts[i]);
        j.units += part_rows(&parts[i]) * row_units(&parts[i]);
    }
    if (j.rows <= 0) return;
    int chunks = (int)((j.rows + 31) / 32), most = 8 * pool_threads(); /* as run_multi */
    if (chunks > most) chunks = most;
    pool_run_n(parts_chunk, &j, chunks);
}

void matmul_multi(int n, const matrix *const *W, float *const *Y, const float *X, int T) {
    int64_t r0[MAX_MULTI], r1[MAX_MULTI];
    for (int done = 0; done < n; done += MAX_MULTI) {
        int k = n - done < MAX_MULTI ? n - done : MAX_MULTI;
        for (int i = 0; i < k; i++) {
            r0[i] = 0;
            r1[i] = W[done + i]->n_out;
        }
        run_multi(k, W + done, Y + done, r0, r1, X, T, NULL, 1.0f);
    }
}

void matmul_rows(const matrix *W, const float *X, int T, float *Y, int64_t r0, int64_t r1) {
    if (r1 > r0) run_multi(1, &W, &Y, &r0, &r1, X, T, NULL, 1.0f);
}

void matmul_scatter(const matrix *W, const float *X, int T, float *work, float *const *dst, float scale) {
    const int64_t r0 = 0, r1 = W->n_out;
    run_multi(1, &W, &work, &r0, &r1, X, T, dst, scale);
}

void matmul(const matrix *W, const float *X, int T, float *Y) { matmul_rows(W, X, T, Y, 0, W->n_out); }
