/* shortconv.c - LFM2's gated short convolution (docs/engine-math.md §6; llama.cpp
 * src/models/lfm2.cpp build_shortconv_block).
 *
 *   [b, c, x] = in_proj u                        (three chunks of n_embd)
 *   w         = b * x
 *   y[t][ch]  = Σ_{k<L} conv[ch][k] w[t-(L-1)+k][ch]     (state = last L-1 values of w)
 *   out       = out_proj (c * y)
 *
 * No bias, no activation. State per sequence: [n_embd][L-1], oldest first. */
#include <string.h>

#include "engine/layers/layers.h"
#include "engine/layers/ops.h"

size_t shortconv_conv_floats(const shortconv_layer *l) { return (size_t)(l->l_cache - 1) * (size_t)l->n_embd; }

void shortconv_forward(const shortconv_layer *l, const segment *segs, int n_segs, int N, const float *x, float *out,
                       arena *a) {
    const int E = l->n_embd;
    float *BCX = arena_floats(a, (size_t)N * 3 * E);
    float *W = arena_floats(a, (size_t)N * E);
    float *Y = arena_floats(a, (size_t)N * E);
    matmul(&l->in_proj, x, N, BCX);
    for (int r = 0; r < N; r++) {
        const float *b = BCX + (size_t)r * 3 * E, *xr = b + 2 * E;
        float *w = W + (size_t)r * E;
        for (int c = 0; c < E; c++) w[c] = b[c] * xr[c];
    }
    segs_conv_causal(segs, n_segs, l->rec_slot, l->conv_w, E, l->l_cache, W, E, Y, E);
    for (int r = 0; r < N; r++) {
        const float *c = BCX + (size_t)r * 3 * E + E;
        float *y = Y + (size_t)r * E;
        for (int k = 0; k < E; k++) y[k] = c[k] * y[k];
    }
    matmul(&l->out_proj, Y, N, out);
}
