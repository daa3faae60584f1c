/* attention.c - causal multi-head attention with grouped KV heads (spec 1.2).
 *
 *   q, k, v = Wq x, Wk x, Wv x                (+ biases; or one fused Wqkv x split in three)
 *   q, k    = RMSNorm per head (optional), then RoPE on the first n_rot dims
 *   K, V    = the sequence's cache, extended by this chunk's k, v
 *   o_h     = softmax(kq_scale * K_g q_h + causal mask) V_g,   g = h / (n_head / n_head_kv)
 *   o       = o * sigmoid(gate)               (Qwen3.5 gated attention)
 *   out     = Wo o                            (+ bias)
 */
#include <math.h>
#include <string.h>

#include "engine/layers.h"
#include "engine/ops.h"
#include "engine/state.h"
#include "engine/threadpool.h"

static void add_bias(float *y, const float *b, int rows, int n) {
    if (!b) return;
    for (int r = 0; r < rows; r++) add_scaled(y + (size_t)r * n, b, 1.0f, (size_t)n);
}

typedef struct {
    const attn_layer *l;
    const segment *seg;
    const float *Q;  /* rows of q_stride floats (q heads, possibly interleaved with gates) */
    int q_stride;
    float *O;        /* rows of n_head*head_dim */
    float *scratch;  /* per thread: scores, padded to a multiple of 16 */
    int scratch_n;
} attn_job;

/* Softmax-weighted sum for one (token, head) over positions 0..last, with the
 * arithmetic of llama.cpp's CPU path (F32 cache, no flash attention), so that our
 * activations round like the reference's:
 *   scores  s_j = dot(K_j, q) * kq_scale          (ggml_vec_dot_f32 order)
 *   p_j     = exp(s_j - max) / sum                 (vector exp, sums per 16, 1/sum in double)
 *   o       = sum_j p_j V_j                        (16 partial sums by j mod 16, then reduced) */
static void attend_one(const attn_job *j, int t, int h, float *p) {
    const attn_layer *l = j->l;
    const seq_state *s = j->seg->state;
    const int hd = l->head_dim, g = h / (l->n_head / l->n_head_kv), kvd = l->n_head_kv * hd;
    const int last = j->seg->pos0 + t, n = last + 1;
    const float *q = j->Q + (size_t)(j->seg->row0 + t) * j->q_stride + (size_t)h * hd * (l->gated ? 2 : 1);
    const float *K = s->k[l->kv_slot] + (size_t)g * hd, *V = s->v[l->kv_slot] + (size_t)g * hd;

    attn_scores(p, K, (size_t)kvd, q, n, hd, l->kq_scale);
    float max = -INFINITY;
    for (int i = 0; i < n; i++)
        if (p[i] > max) max = p[i];
    const int padded = (n + 15) & ~15; /* llama.cpp pads the cache; masked scores give exp() = 0 */
    for (int i = n; i < padded; i++) p[i] = -INFINITY;
    const float inv = (float)(1.0 / vec_softmax_exp(p, p, max, padded));
    for (int i = 0; i < n; i++) p[i] *= inv;

    float *o = j->O + (size_t)(j->seg->row0 + t) * l->n_head * hd + (size_t)h * hd;
    attn_weighted_sum(o, V, (size_t)kvd, p, n, hd);
    if (l->gated) {
        const float *gate = q + hd;
        for (int c = 0; c < hd; c++) o[c] *= sigmoid(gate[c]);
    }
}

static void attend_job(void *arg, int ith, int nth) {
    attn_job *j = arg;
    const int n_items = j->seg->n * j->l->n_head;
    float *p = j->scratch + (size_t)ith * j->scratch_n;
    /* items strided over the chunks: later tokens attend to more positions, so contiguous
     * ranges would leave the last chunk with the most work */
    for (int it = ith; it < n_items; it += nth) attend_one(j, it / j->l->n_head, it % j->l->n_head, p);
}

void attention_forward(const attn_layer *l, const segment *segs, int n_segs, int N, int n_embd, const float *x,
                       float *out, arena *a) {
    const arena_mark mark = arena_save(a); /* temporaries go back at the end */
    const int hd = l->head_dim, kvd = l->n_head_kv * hd;
    const int q_stride = l->n_head * hd * (l->gated ? 2 : 1);
    float *Q = arena_floats(a, (size_t)N * q_stride);
    float *K = arena_floats(a, (size_t)N * kvd);
    float *V = arena_floats(a, (size_t)N * kvd);
    float *O = arena_floats(a, (size_t)N * l->n_head * hd);
    if (l->wqkv.data) {
        const int width = q_stride + 2 * kvd;
        float *QKV = arena_floats(a, (size_t)N * width);
        matmul(&l->wqkv, x, N, QKV);
        add_bias(QKV, l->bqkv, N, width);
        for (int r = 0; r < N; r++) {
            const float *row = QKV + (size_t)r * width;
            memcpy(Q + (size_t)r * q_stride, row, (size_t)q_stride * sizeof(float));
            memcpy(K + (size_t)r * kvd, row + q_stride, (size_t)kvd * sizeof(float));
            memcpy(V + (size_t)r * kvd, row + q_stride + kvd, (size_t)kvd * sizeof(float));
        }
    } else {
        const matrix *W[3] = {&l->wq, &l->wk, &l->wv};
        float *Y[3] = {Q, K, V};
        matmul_multi(3, W, Y, x, N); /* x quantized once, one pass of the pool */
    }
    add_bias(Q, l->bq, N, q_stride);
    add_bias(K, l->bk, N, kvd);
    add_bias(V, l->bv, N, kvd);

    float *cs = arena_floats(a, (size_t)(l->n_rot > 0 ? l->n_rot : 2));
    int max_ctx = 0;
    for (int si = 0; si < n_segs; si++) {
        const segment *sg = &segs[si];
        seq_state *s = sg->state;
        for (int t = 0; t < sg->n; t++) {
            const int row = sg->row0 + t, pos = sg->pos0 + t;
            float *q = Q + (size_t)row * q_stride, *k = K + (size_t)row * kvd;
            if (l->rope != ROPE_NONE) rope_cache(cs, pos, l->n_rot, l->rope_base, l->rope_freq_scale, l->rope_factors);
            for (int h = 0; h < l->n_head; h++) {
                float *qh = q + (size_t)h * hd * (l->gated ? 2 : 1);
                if (l->q_norm) rmsnorm(qh, qh, l->q_norm, hd, l->eps);
                if (l->rope != ROPE_NONE) rope_apply(qh, l->rope, l->n_rot, cs);
            }
            for (int g = 0; g < l->n_head_kv; g++) {
                float *kh = k + (size_t)g * hd;
                if (l->k_norm) rmsnorm(kh, kh, l->k_norm, hd, l->eps);
                if (l->rope != ROPE_NONE) rope_apply(kh, l->rope, l->n_rot, cs);
            }
            memcpy(s->k[l->kv_slot] + (size_t)pos * kvd, k, (size_t)kvd * sizeof(float));
            memcpy(s->v[l->kv_slot] + (size_t)pos * kvd, V + (size_t)row * kvd, (size_t)kvd * sizeof(float));
        }
        if (sg->pos0 + sg->n > max_ctx) max_ctx = sg->pos0 + sg->n;
    }

    const int nch = 4 * pool_threads(); /* chunks of (token, head) items; scratch per chunk */
    attn_job j = {.l = l, .Q = Q, .q_stride = q_stride, .O = O, .scratch_n = (max_ctx + 15) & ~15};
    j.scratch = arena_floats(a, (size_t)nch * j.scratch_n);
    for (int si = 0; si < n_segs; si++) {
        j.seg = &segs[si];
        const int items = j.seg->n * l->n_head;
        pool_run_n(attend_job, &j, items < nch ? items : nch);
    }
    matmul(&l->wo, O, N, out);
    add_bias(out, l->bo, N, n_embd);
    arena_restore(a, mark);
}
