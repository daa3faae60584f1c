/* ffn.c - the feed-forward kinds.
 *
 *   SwiGLU:  out = W_down( silu(W_gate x) * (W_up x) )
 *   ReLU^2:  out = W_down( relu(W_up x + b_up)^2 ) + b_down      (Nemotron-H MLP layers)
 */
#include "engine/layers.h"
#include "engine/ops.h"

void ffn_forward(const ffn_layer *l, int N, int n_embd, const float *x, float *out, arena *a) {
    const arena_mark mark = arena_save(a); /* temporaries go back at the end */
    const size_t n = (size_t)N * l->n_ff;
    float *U = arena_floats(a, n);
    if (l->kind == FFN_SWIGLU) {
        float *G = arena_floats(a, n);
        const matrix *W[2] = {&l->up, &l->gate};
        float *Y[2] = {U, G};
        matmul_multi(2, W, Y, x, N); /* x quantized once, one pass of the pool */
        for (int r = 0; r < N; r++) vec_swiglu(U + (size_t)r * l->n_ff, G + (size_t)r * l->n_ff, U + (size_t)r * l->n_ff, l->n_ff);
    } else {
        matmul(&l->up, x, N, U);
        for (int r = 0; r < N; r++) {
            float *u = U + (size_t)r * l->n_ff;
            for (int i = 0; i < l->n_ff; i++) {
                float v = u[i] + (l->b_up ? l->b_up[i] : 0.0f);
                v = v > 0 ? v : 0;
                u[i] = v * v;
            }
        }
    }
    matmul(&l->down, U, N, out);
    if (l->b_down)
        for (int r = 0; r < N; r++) add_scaled(out + (size_t)r * n_embd, l->b_down, 1.0f, (size_t)n_embd);
    arena_restore(a, mark);
}
