/* kernels.h - the one small interface every weight multiplication goes through.
 *
 * A weight matrix is n_out rows of n_in elements of one ggml type (GGUF shape
 * [n_in, n_out]). matmul() converts the activations to the weight type's dot type
 * (as llama.cpp does, see quant.h), splits the rows over the thread pool and calls
 * the instruction-set kernel chosen at start-up: scalar (the reference), AVX2 or
 * AVX-512. Every path computes the same sums as the scalar one, up to float
 * summation order. */
#ifndef CHATFS_KERNELS_H
#define CHATFS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/gguf.h"

typedef struct {
    const void *data;
    uint32_t type;       /* enum ggml_type */
    int64_t n_in, n_out;
    size_t row_bytes;
} matrix;

/* Views a 2-D GGUF tensor as a matrix (no copy). */
void matrix_from_tensor(matrix *m, const gguf_tensor *t);

/* Y[t][r] = sum_c W[r][c] * X[t][c] for t < T, r < n_out.
 * X: T rows of n_in floats; Y: T rows of n_out floats. */
void matmul(const matrix *W, const float *X, int T, float *Y);
/* Same, for rows [r0, r1) of W only; Y rows still have stride n_out. */
void matmul_rows(const matrix *W, const float *X, int T, float *Y, int64_t r0, int64_t r1);

/* Row `row` of a matrix as floats (embedding lookup: exact dequantization). */
void matrix_get_row(const matrix *W, int64_t row, float *out);

/* Instruction-set kernels. gemm computes Y[t*ldy + r] for r in [r0, r1) and t < T from
 * weight rows and activation rows already in quant_dot_type(wt), summing in exactly
 * the order vec_dot_ref does (quant.h); it returns 0 when it does not handle wt (the
 * scalar kernel is used then). quantize may be NULL. */
typedef struct {
    const char *name;
    int (*supported)(void);
    int (*gemm)(uint32_t wt, const void *W, size_t w_row_bytes, int64_t n, int64_t r0, int64_t r1,
                const void *Xq, size_t x_row_bytes, int T, float *Y, int64_t ldy);
    void (*quantize)(uint32_t dot_type, const float *x, void *dst, int64_t n);
} kernel_isa;

/* Picks the kernel set: "auto" (best the CPU supports), "scalar", "avx2", "avx512".
 * Also read from the CHATFS_ISA environment variable at first use. Returns 0 if the
 * named set is unknown or unsupported by this CPU. */
int kernels_select(const char *name);
const char *kernels_name(void);
/* Names of the sets this CPU can run, best first; NULL-terminated. */
const char *const *kernels_available(void);

#endif
