/* random_rows.h - the deterministic weights of `chatfs synth`'s files.
 *
 * A tensor's rows are a pure function of (seed, tensor name, row), so threads, batches
 * and reruns agree: the writer asks for rows in any order (gguf_writer's gguf_rows_fn). */
#ifndef CHATFS_SYNTH_RANDOM_ROWS_H
#define CHATFS_SYNTH_RANDOM_ROWS_H

#include <stdint.h>

enum init_kind {
    I_NORMAL,      /* normal values of std a (a = 0: 1/sqrt(row length), the fan-in) */
    I_CONST,       /* every value a */
    I_UNIFORM,     /* uniform in [a, b) */
    I_DT_BIAS,     /* inverse softplus of a time step log-uniform in [a, b] */
    I_A_RANGE_ROW, /* Mamba-1 S4D-real: A[:, n] = -(n+1) */
};

typedef struct {
    int kind;
    float a, b;
    uint64_t seed;
} init_spec;

/* rows [row0, row0 + n) of the tensor `name`, ctx an init_spec */
void random_rows(void *ctx, const char *name, int64_t row0, int64_t n, int64_t len, float *out);

#endif
