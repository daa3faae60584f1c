/* kernels.h - the one small interface every weight multiplication goes through.
 *
 * A weight matrix is n_out rows of n_in elements of one ggml type (GGUF shape
 * [n_in, n_out]). matmul() converts the activations to the weight type's dot type
 * once (as llama.cpp does, see quant.h), splits the rows over the thread pool and
 * calls the instruction-set kernel chosen at start-up: scalar (the reference), AVX2 or
 * AVX-512. Every path computes exactly the sums of vec_dot_ref (quant.h), bit for bit:
 * the SIMD kernels are free to process many rows and tokens at once and to reorder
 * loops, never the order in which one output's terms are added.
 *
 * One exception, opt-in (CHATFS_ISA=amx): the AMX set computes Q8_0 weights in the
 * block-integer order (vec_dot_q8_0_blockint), because tile multiplies give whole block
 * sums; it is bit for bit the same for every number of tokens, and kernels_blockint()
 * tells which order the active set uses.
 *
 * Where the kernels are, by type and instruction set:
 *   kernels.c         driver (activation preparation, thread split) + the scalar set
 *   kernels_amx.c     AMX tiles: Q8_0 (block-integer order); the rest is the AVX-512 set's
 *   kernels_avx512.c  AVX-512 F/BW/VL/DQ + VNNI: F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_1,
 *                     Q5_1, Q4_K, Q5_K, Q6_K
 *   kernels_avx2.c    AVX2 + FMA + F16C: the same types (kernels_avxvnni.c: compiled again
 *                     with AVX-VNNI)
 * Each ISA file has one section per type family, named after the type. The layer math per
 * instruction set (attention, the delta rule, convolution, ...) is the layers' own
 * (layers/simd.h); it follows the set chosen here (kernels_vector_bits). */
#ifndef CHATFS_KERNELS_H
#define CHATFS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/gguf/gguf.h"

typedef struct {
    const void *data;
    uint32_t type;       /* enum ggml_type */
    int64_t n_in, n_out;
    size_t row_bytes;
} matrix;

/* Views a 2-D GGUF tensor as a matrix (no copy: the weights stay in the mapping). */
void matrix_from_tensor(matrix *m, const gguf_tensor *t);

/* Y[t][r] = sum_c W[r][c] * X[t][c] for t < T, r < n_out.
 * X: T rows of n_in floats; Y: T rows of n_out floats. */
void matmul(const matrix *W, const float *X, int T, float *Y);
/* Same, for rows [r0, r1) of W only; Y rows still have stride n_out. */
void matmul_rows(const matrix *W, const float *X, int T, float *Y, int64_t r0, int64_t r1);
/* Several matrices with the same n_in applied to the same X: Y[i] = W[i] X (Y[i] has T
 * rows of W[i]->n_out). The activations are converted once per dot type and all the
 * products run as one job on the pool (q/k/v, gate/up, the delta-net projections). */
void matmul_multi(int n, const matrix *const *W, float *const *Y, const float *X, int T);
/* The calling thread's prepared-activation buffer (each thread that calls matmul keeps
 * one), freed: for a thread that ends, such as an engine's worker. */
void matmul_thread_release(void);
/* Y = W X into work (T rows of n_out), and each token's row, times `scale`, to dst[t]
 * (n_out floats each, anywhere): the output head, whose rows go to every sequence's own
 * logits. Each thread copies the rows it has just computed while they are still in its
 * cache, instead of one thread copying all of them from memory afterwards. */
void matmul_scatter(const matrix *W, const float *X, int T, float *work, float *const *dst, float scale);

/* A 3-D weight tensor [n_in, n_out, n_expert] of a mixture-of-experts layer: n_expert
 * matrices of n_out rows one after the other, expert e's at data + e * expert_bytes (the
 * tensor's nb[2]). A view, like matrix: the experts stay in the mapping. */
typedef struct {
    matrix m;            /* expert 0: data, type, n_in, n_out rows, row_bytes */
    int n_expert;
    size_t expert_bytes;
} expert_matrix;

/* Views a 3-D GGUF tensor as n_expert matrices. */
void experts_from_tensor(expert_matrix *x, const gguf_tensor *t);
/* Expert e's matrix (no copy). */
static inline matrix expert_view(const expert_matrix *x, int e) {
    matrix v = x->m;
    v.data = (const uint8_t *)x->m.data + (size_t)e * x->expert_bytes;
    return v;
}

/* Row `row` of a matrix as floats (embedding lookup: exact dequantization). */
void matrix_get_row(const matrix *W, int64_t row, float *out);

/* Sum of n floats read sequentially (used by `chatfs bench` to measure memory bandwidth). */
float kernels_sum_floats(const float *x, size_t n);

/* ---- for the instruction-set kernels ---- */

/* Activations prepared for one dot type: row t (t < T) starts at base + t*stride with the
 * row in the dot type exactly as llama.cpp lays it out (what vec_dot_ref reads), followed
 * at aux_off by data the SIMD kernels use to avoid per-weight work:
 *   Q8_0: int8 qs[n] (the block values, 32-byte aligned), int32 corr[n/4] = -128 * (sum of
 *         each group of 4 values: VPDPBUSD takes the weights as w + 128, unsigned, and
 *         starts from corr), float d[n/32]
 *   Q8_1: float d[n/32], float s[n/32]
 *   Q8_K: int16 bs32[n/256][8] = bsums summed in pairs (activations of each 32-sub-block)
 *   F16, BF16: float x[n] (the rounded values, widened)
 *   F32: nothing (the rows are the caller's X, stride n_in floats). */
typedef struct {
    uint32_t dot_type;
    int64_t n;
    int T;
    const uint8_t *base;
    size_t stride, aux_off;
    uint64_t serial; /* unique to this preparation: a kernel may cache a re-layout of it */
} kact;

static inline const void *kact_row(const kact *x, int t) { return x->base + (size_t)t * x->stride; }
static inline const void *kact_aux(const kact *x, int t) { return x->base + (size_t)t * x->stride + x->aux_off; }

/* Preparing activations yourself, for products that do not share one X (the experts of a
 * mixture-of-experts layer, each over its own tokens):
 * kact_prepare_rows converts T rows of X (n floats each, row t at X + t*n) for weights of
 * type wt into buf (kact_bytes(wt, n, T) long; F32 weights need none: the kact then points
 * at X itself), on the pool when T > 1. Rows are converted one by one, so a row's prepared
 * bytes do not depend on the other rows. */
void kact_prepare_rows(kact *x, uint32_t wt, const float *X, int64_t n, int T, void *buf);
/* Rows [t0, t0 + T) of a preparation, as a preparation of its own (no copy). */
kact kact_slice(const kact *x, int t0, int T);
/* Rows rows[0], ..., rows[T-1] of src copied, in that order, into buf (kact_gather_bytes
 * long) and described by dst. */
size_t kact_gather_bytes(const kact *src, int T);
void kact_gather(kact *dst, const kact *src, const int *rows, int T, void *buf);

/* One product of a list that runs as one job: rows [r0, r1) of W times the x.T prepared
 * rows of x, token t's outputs to Y + t*ldy (row r at [r]). */
typedef struct {
    matrix W;
    int64_t r0, r1;
    kact x;
    float *Y;
    int64_t ldy;
} matmul_part;
/* Every part in one job of the pool: the rows of all the parts, one after the other, are
 * split among the threads as matmul_multi splits its matrices' rows, so a decode step's
 * few small experts still keep every core busy and each weight row is read once. */
void matmul_parts(const matmul_part *parts, int n);

/* The width in bits of the float vectors the active set's instructions have: 512
 * (AVX-512), 256 (AVX2 + FMA) or 0 (scalar). The layer math (layers/simd.h) runs the
 * vector code of that width, so choosing a kernel set chooses it too. */
int kernels_vector_bits(void);

/* Prompt processing takes the weight rows in chunks of about this many bytes, which stay
 * in L2 beside the activations while every tile of tokens passes over them. */
#define KERNEL_L2_CHUNK_BYTES (192 * 1024)

/* An instruction-set kernel set. gemm computes Y[t*ldy + r] for r in [r0, r1) and t < T
 * and returns 1, or returns 0 without writing when it does not handle the weight type
 * or row length (the scalar reference runs then). */
typedef struct kernel_isa {
    const char *name;
    int (*supported)(void);
    int (*gemm)(const matrix *W, int64_t r0, int64_t r1, const kact *x, float *Y, int64_t ldy);
    float (*sum)(const float *x, size_t n);
    int vector_bits; /* kernels_vector_bits() while this set is active (0: its base's) */
    /* optional: one activation row into the dot type (exactly quantize_activation) and the
     * kact aux data; returns 0 for dot types it does not handle */
    int (*prep_row)(uint32_t dot_type, const float *x, void *row, void *aux, int64_t n);
    /* optional: a set this one extends; it supplies the members left NULL here */
    const struct kernel_isa *base;
    /* optional: 1 for the weight types this set computes in the block-integer order
     * (quant.h vec_dot_q8_0_blockint) instead of llama.cpp's (vec_dot_ref) */
    int (*blockint)(uint32_t wt);
    /* 1: never chosen by "auto", only by name (its results are not llama.cpp's bits) */
    int opt_in;
} kernel_isa;

/* Picks the kernel set: "auto" (best the CPU supports, opt-in sets aside), "scalar", "avx2",
 * "avx512", "amx" (opt-in: block-integer order for Q8_0).
 * Also read from the CHATFS_ISA environment variable at first use. Returns 0 if the
 * named set is unknown or unsupported by this CPU. */
int kernels_select(const char *name);
const char *kernels_name(void);
/* Names of the sets this CPU can run, best first (the first is what "auto" picks, opt-in
 * sets follow it); NULL-terminated. */
const char *const *kernels_available(void);

/* For tests: prepares the activations of T rows of n floats for weights of type wt into
 * a buffer of kact_bytes() bytes, and runs the active set's gemm (or the reference) on
 * rows [r0, r1). */
size_t kact_bytes(uint32_t wt, int64_t n, int T);
/* 1 when the active set computes weights of type wt in the block-integer order */
int kernels_blockint(uint32_t wt);
/* The scalar reference of the active set's arithmetic for wt (vec_dot_ref, or the
 * block-integer order), on rows [r0, r1): what kernels_gemm must return bit for bit (the
 * AMX set also runs it for rows that do not fill a tile). */
void kernels_gemm_reference(const matrix *W, int64_t r0, int64_t r1, const kact *x, float *Y, int64_t ldy);
void kact_prepare(kact *x, uint32_t wt, const float *X, int64_t n, int T, void *buf);
void kernels_gemm(const matrix *W, int64_t r0, int64_t r1, const kact *x, float *Y, int64_t ldy);

#endif
