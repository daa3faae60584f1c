/* ffn.c - the feed-forward kinds.
 *
 *   SwiGLU:  out = W_down( silu(W_gate x + b_gate) * (W_up x + b_up) ) + b_down
 *   ReLU^2:  out = W_down( relu(W_up x + b_up)^2 ) + b_down            (Nemotron-H MLP layers)
 *
 * The biases are optional (most models have none). */
#include "engine/layers/layers.h"
#include "engine/layers/ops.h"
#include "engine/base/threadpool.h"

static void add_bias(float *y, const float *b, int rows, int n) {
    if (!b) return;
    for (int r = 0; r < rows; r++) add_scaled(y + (size_t)r * n, b, 1.0f, (size_t)n);
}

typedef struct {
    float *U;
    const float *G;
    int N, n_ff;
} swiglu_job;

/* U = silu(G) * U, row by row: a prompt's rows split over the pool */
static void swiglu_rows(void *arg, int ith, int nth) {
    const swiglu_job *j = arg;
    long r0, r1;
    pool_split(j->N, ith, nth, 1, &r0, &r1);
    for (long r = r0; r < r1; r++) {
        float *u = j->U + (size_t)r * j->n_ff;
        vec_swiglu(u, j->G + (size_t)r * j->n_ff, u, j->n_ff);
    }
}

void ffn_forward(const ffn_layer *l, int N, int n_embd, const float *x, float *out, arena *a) {
    const arena_mark mark = arena_save(a); /* temporaries go back at the end */
    const size_t n = (size_t)N * l->n_ff;
    float *U = arena_floats(a, n);
    if (l->kind == FFN_SWIGLU) {
        float *G = arena_floats(a, n);
        const matrix *W[2] = {&l->up, &l->gate};
        float *Y[2] = {U, G};
        matmul_multi(2, W, Y, x, N); /* x quantized once, one pass of the pool */
        add_bias(U, l->b_up, N, l->n_ff);
        add_bias(G, l->b_gate, N, l->n_ff);
        swiglu_job j = {U, G, N, l->n_ff};
        pool_run_rows(swiglu_rows, &j, N);
    } else { /* ReLU^2 (Nemotron-H) */
        matmul(&l->up, x, N, U);
        add_bias(U, l->b_up, N, l->n_ff);
        vec_relu2(U, U, n);
    }
    matmul(&l->down, U, N, out);
    add_bias(out, l->b_down, N, n_embd);
    arena_restore(a, mark);
}
