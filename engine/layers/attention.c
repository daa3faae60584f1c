/* attention.c - causal multi-head attention with grouped KV heads (docs/engine-math.md §2;
 * llama.cpp src/llama-graph.cpp build_attn_mha).
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

#include "engine/layers/layers.h"
#include "engine/layers/ops.h"
#include "engine/base/threadpool.h"

static void add_bias(float *y, const float *b, int rows, int n) {
    if (!b) return;
    for (int r = 0; r < rows; r++) add_scaled(y + (size_t)r * n, b, 1.0f, (size_t)n);
}

typedef struct {
    const attn_layer *l;
    const segment *segs;
    const float *Q;  /* rows of q_stride floats (q heads, possibly interleaved with gates) */
    int q_stride;
    float *O;        /* rows of n_head*head_dim: per segment from o_row0[], for its tokens from o_first[] */
    const int *o_first, *o_row0;
    int n_items;     /* (segment, KV group, run of tokens), listed in item[] */
    const int *item; /* per item: segment, KV group, first token, end token */
    float *scratch;  /* per chunk: scores and partial sums of every (token, head) of an item;
                        with a cache of another type than F32 also the rounded queries and one
                        block of widened rows */
    size_t scratch_n;
    int n_pad;       /* longest context, padded to a multiple of 16 */
} attn_job;

#define ATTN_BLOCK 128 /* cache positions per block: 128 KB of one KV head's K (or V), in L2 */
#define ATTN_MULTI 32  /* (token, head) pairs per call of the multi-pair kernels */

/* Pair k of a run from token t0 is token t0 + k/R, head k%R; of cache block i0 it reads
 * this many positions (0 or less: none; the causal mask cuts the tokens' last blocks) */
static int block_count(const segment *seg, int t0, int R, int k, int i0) {
    const int n = seg->pos0 + t0 + k / R + 1;
    return n - i0 < ATTN_BLOCK ? n - i0 : ATTN_BLOCK;
}

/* the end of the pairs from k0 that read the same positions of block i0 (at most
 * ATTN_MULTI): one multi-pair call serves them, each row loaded once for several pairs */
static int pairs_alike(const segment *seg, int t0, int R, int P, int k0, int i0) {
    const int cnt = block_count(seg, t0, R, k0, i0);
    int k1 = k0 + 1;
    while (k1 < P && k1 - k0 < ATTN_MULTI && block_count(seg, t0, R, k1, i0) == cnt) k1++;
    return k1;
}

/* Attention for the heads of KV group g and tokens [t0, t1) of one segment, with the
 * arithmetic of llama.cpp's CPU path without flash attention, so that our activations
 * round like the reference's (a cache of another type than F32: docs/engine-math.md §2,
 * "Cache types"). For each (token, head):
 *   scores  s_j = dot(K_j, q) * kq_scale          (ggml_vec_dot_f32 order)
 *   p_j     = exp(s_j - max) / sum                 (vector exp, sums per 16, 1/sum in double)
 *   o       = sum_j p_j V_j                        (16 partial sums by j mod 16, then reduced)
 * Every (token, head) of the group reads the same K and V rows, so the cache is walked in
 * blocks of ATTN_BLOCK positions and each block serves all of them while it is in L2, the
 * pairs that read the same positions of it in one call of the multi-pair kernels (which load
 * each row once for several pairs); the sums per (token, head) are the same operations in
 * the same order as one at a time. */
static void attend_group(const attn_job *j, int si, int g, int t0, int t1, float *scratch) {
    const attn_layer *l = j->l;
    const segment *seg = &j->segs[si];
    const int hd = l->head_dim, R = l->n_head / l->n_head_kv, kvd = l->n_head_kv * hd;
    const int P = (t1 - t0) * R, n_max = seg->pos0 + t1;
    const size_t accn = ATTN_ACC_FLOATS(hd);
    float *ps = scratch, *acc = scratch + (size_t)P * j->n_pad;
    /* F32 rows are read in place; rows of another type are widened a block at a time into
     * rows (of hd floats, the group's heads only), and the queries meet them rounded */
    const int widen_k = seg->k_type != KV_F32, widen_v = seg->v_type != KV_F32;
    float *qr = acc + (size_t)P * accn, *rows = qr + (size_t)P * hd;
    const size_t k_row = kv_row_bytes(seg->k_type, kvd), v_row = kv_row_bytes(seg->v_type, kvd);
    const uint8_t *Kc = seg->k[l->kv_slot] + kv_row_bytes(seg->k_type, g * hd);
    const uint8_t *Vc = seg->v[l->kv_slot] + kv_row_bytes(seg->v_type, g * hd);
    const float *K = (const float *)Kc, *V = (const float *)Vc;
    const size_t k_stride = widen_k ? (size_t)hd : (size_t)kvd, v_stride = widen_v ? (size_t)hd : (size_t)kvd;
    /* llama.cpp multiplies a half-precision K cache with tinyBLAS (when the head is whole
     * vectors), an F32 one (and a quantized one) with its dot products */
    const int lanes = (seg->k_type == KV_F16 || seg->k_type == KV_BF16) && hd % 16 == 0;
#define PAIR_Q(t, r) (j->Q + (size_t)(seg->row0 + (t)) * j->q_stride + (size_t)(g * R + (r)) * hd * (l->gated ? 2 : 1))
#define BLOCK_ROWS(i0) (n_max - (i0) < ATTN_BLOCK ? n_max - (i0) : ATTN_BLOCK)
    if (widen_k)
        for (int k = 0; k < P; k++) {
            memcpy(qr + (size_t)k * hd, PAIR_Q(t0 + k / R, k % R), (size_t)hd * sizeof(float));
            kv_round_query(seg->k_type, qr + (size_t)k * hd, hd);
        }

    for (int i0 = 0; i0 < n_max; i0 += ATTN_BLOCK) {
        const float *Kb = K + (size_t)i0 * kvd;
        if (widen_k) {
            kv_rows_to_f32(seg->k_type, Kc + (size_t)i0 * k_row, k_row, rows, BLOCK_ROWS(i0), hd);
            Kb = rows;
        }
        for (int k0 = 0, k1; k0 < P; k0 = k1) {
            const int cnt = block_count(seg, t0, R, k0, i0);
            k1 = pairs_alike(seg, t0, R, P, k0, i0);
            if (cnt <= 0) continue;
            float *sr[ATTN_MULTI];
            const float *q[ATTN_MULTI];
            for (int k = k0; k < k1; k++) {
                sr[k - k0] = ps + (size_t)k * j->n_pad + i0;
                q[k - k0] = widen_k ? qr + (size_t)k * hd : PAIR_Q(t0 + k / R, k % R);
            }
            if (lanes)
                for (int k = 0; k < k1 - k0; k++) attn_scores_lanes(sr[k], Kb, k_stride, q[k], cnt, hd, l->kq_scale);
            else
                attn_scores_multi(sr, Kb, k_stride, q, k1 - k0, cnt, hd, l->kq_scale);
        }
    }
    for (int t = t0; t < t1; t++) {
        const int n = seg->pos0 + t + 1;
        const int padded = (n + 15) & ~15; /* llama.cpp pads the cache; masked scores give exp() = 0 */
        for (int r = 0; r < R; r++) {
            float *p = ps + (size_t)((t - t0) * R + r) * j->n_pad;
            float max = -INFINITY;
            for (int i = 0; i < n; i++)
                if (p[i] > max) max = p[i];
            for (int i = n; i < padded; i++) p[i] = -INFINITY;
            const float inv = (float)(1.0 / vec_softmax_exp(p, p, max, padded));
            for (int i = 0; i < n; i++) p[i] *= inv;
            kv_round_weights(seg->v_type, p, n);
        }
    }
    memset(acc, 0, (size_t)P * accn * sizeof(float));
    for (int i0 = 0; i0 < n_max; i0 += ATTN_BLOCK) {
        const float *Vb = V + (size_t)i0 * kvd;
        if (widen_v) {
            kv_rows_to_f32(seg->v_type, Vc + (size_t)i0 * v_row, v_row, rows, BLOCK_ROWS(i0), hd);
            Vb = rows;
        }
        for (int k0 = 0, k1; k0 < P; k0 = k1) {
            const int cnt = block_count(seg, t0, R, k0, i0);
            k1 = pairs_alike(seg, t0, R, P, k0, i0);
            if (cnt <= 0) continue;
            float *a[ATTN_MULTI];
            const float *p[ATTN_MULTI];
            for (int k = k0; k < k1; k++) {
                a[k - k0] = acc + (size_t)k * accn;
                p[k - k0] = ps + (size_t)k * j->n_pad + i0;
            }
            attn_wsum_acc_multi(a, Vb, v_stride, p, k1 - k0, cnt, hd);
        }
    }
    for (int k = 0; k < P; k++) {
        const int t = t0 + k / R, r = k % R;
        float *o = j->O + (size_t)(j->o_row0[si] + t - j->o_first[si]) * l->n_head * hd + (size_t)(g * R + r) * hd;
        attn_wsum_finish(o, acc + (size_t)k * accn, hd);
        if (l->gated) {
            const float *gate = PAIR_Q(t, r) + hd;
            for (int c = 0; c < hd; c++) o[c] *= sigmoid(gate[c]);
        }
    }
#undef BLOCK_ROWS
#undef PAIR_Q
}

static void attend_job(void *arg, int ith, int nth) {
    const attn_job *j = arg;
    float *scratch = j->scratch + (size_t)ith * j->scratch_n;
    /* items strided over the chunks: later tokens attend to more positions, so contiguous
     * ranges would leave the last chunk with the most work */
    for (int it = ith; it < j->n_items; it += nth) {
        const int *e = j->item + 4 * it;
        attend_group(j, e[0], e[1], e[2], e[3], scratch);
    }
}

typedef struct {
    const attn_layer *l;
    const segment *segs;
    int n_segs, N;
    float *Q, *K;
    const float *V;
    int q_stride;
} prep_job;

/* Per row: q and k normalised per head and rotated by the row's position, then k and v
 * into the sequence's cache (Q NULL: k and v only). Rows are independent, so a prompt's
 * rows split over the pool. */
static void prep_rows(void *arg, int ith, int nth) {
    const prep_job *j = arg;
    const attn_layer *l = j->l;
    const int hd = l->head_dim, kvd = l->n_head_kv * hd;
    float cs[l->n_rot > 0 ? l->n_rot : 2];
    long r0, r1;
    pool_split(j->N, ith, nth, 1, &r0, &r1);
    int si = 0;
    for (long row = r0; row < r1; row++) {
        while (row >= j->segs[si].row0 + j->segs[si].n) si++;
        const segment *sg = &j->segs[si];
        const int pos = sg->pos0 + (int)(row - sg->row0);
        float *q = j->Q ? j->Q + (size_t)row * j->q_stride : NULL, *k = j->K + (size_t)row * kvd;
        if (l->rope != ROPE_NONE) {
            const int *rp = sg->rope_pos ? sg->rope_pos + 3 * (row - sg->row0) : NULL;
            const int pt = rp ? rp[0] : pos + sg->pos_shift;
            if (rp && (rp[1] != pt || rp[2] != pt) && (l->mrope[0] || l->mrope[1] || l->mrope[2]))
                rope_cache_imrope(cs, pt, rp[1], rp[2], l->mrope, l->n_rot, l->rope_base, l->rope_freq_scale);
            else
                rope_cache(cs, pt, l->n_rot, l->rope_base, l->rope_freq_scale, l->rope_factors);
        }
        const size_t q_head = (size_t)hd * (l->gated ? 2 : 1); /* a gated q head is followed by its gate */
        if (q && l->q_norm) rmsnorm_many(q, q, q_head, l->q_norm, l->n_head, hd, l->eps);
        if (l->k_norm) rmsnorm_many(k, k, (size_t)hd, l->k_norm, l->n_head_kv, hd, l->eps);
        if (l->rope != ROPE_NONE) {
            for (int h = 0; q && h < l->n_head; h++) rope_apply(q + (size_t)h * q_head, l->rope, l->n_rot, cs);
            for (int g = 0; g < l->n_head_kv; g++) rope_apply(k + (size_t)g * hd, l->rope, l->n_rot, cs);
        }
        kv_row_store(sg->k_type, k, sg->k[l->kv_slot] + (size_t)pos * kv_row_bytes(sg->k_type, kvd), kvd);
        kv_row_store(sg->v_type, j->V + (size_t)row * kvd, sg->v[l->kv_slot] + (size_t)pos * kv_row_bytes(sg->v_type, kvd),
                     kvd);
    }
}

void attention_forward(const attn_layer *l, const segment *segs, int n_segs, int N, int n_embd, const float *x,
                       float *out, int kept, arena *a) {
    const arena_mark mark = arena_save(a); /* temporaries go back at the end */
    const int hd = l->head_dim, kvd = l->n_head_kv * hd;
    const int q_stride = l->n_head * hd * (l->gated ? 2 : 1);
    /* the tokens whose output is wanted: per segment from o_first[], written from row o_row0[] */
    int *o_first = (int *)arena_alloc(a, (size_t)n_segs * sizeof(int));
    int *o_row0 = (int *)arena_alloc(a, (size_t)n_segs * sizeof(int));
    int n_out = 0;
    for (int si = 0; si < n_segs; si++) {
        o_first[si] = kept ? segs[si].n - segs[si].keep : 0;
        o_row0[si] = n_out;
        n_out += segs[si].n - o_first[si];
    }
    float *Q = arena_floats(a, (size_t)N * q_stride);
    float *K = arena_floats(a, (size_t)N * kvd);
    float *V = arena_floats(a, (size_t)N * kvd);
    float *O = arena_floats(a, (size_t)(n_out ? n_out : 1) * l->n_head * hd);
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

    prep_job pj = {.l = l, .segs = segs, .n_segs = n_segs, .N = N, .Q = Q, .K = K, .V = V, .q_stride = q_stride};
    pool_run_rows(prep_rows, &pj, N);
    int max_ctx = 0;
    for (int si = 0; si < n_segs; si++)
        if (segs[si].pos0 + segs[si].n > max_ctx) max_ctx = segs[si].pos0 + segs[si].n;

    /* items: (segment, KV group, run of up to `run` tokens); a run's scores and partial
     * sums (R heads per token) take at most about 8 MB of scratch per chunk */
    const int R = l->n_head / l->n_head_kv, n_pad = (max_ctx + 15) & ~15;
    int widen = 0; /* a cache of another type than F32: rounded queries, a block of rows */
    for (int si = 0; si < n_segs; si++) widen |= segs[si].k_type != KV_F32 || segs[si].v_type != KV_F32;
    const size_t per_pair = (size_t)n_pad + ATTN_ACC_FLOATS(hd) + (widen ? (size_t)hd : 0);
    int run = (int)((2u << 20) / ((size_t)R * per_pair)), longest = 1;
    for (int si = 0; si < n_segs; si++)
        if (segs[si].n - o_first[si] > longest) longest = segs[si].n - o_first[si];
    run = run < 1 ? 1 : run > 8 ? 8 : run;
    run = run > longest ? longest : run; /* decode: one token per sequence, scratch for one */
    int n_items = 0;
    for (int si = 0; si < n_segs; si++) n_items += l->n_head_kv * ((segs[si].n - o_first[si] + run - 1) / run);
    if (n_items > 0) {
        int *item = (int *)arena_alloc(a, (size_t)n_items * 4 * sizeof(int)), k = 0;
        for (int si = 0; si < n_segs; si++)
            for (int t0 = o_first[si]; t0 < segs[si].n; t0 += run)
                for (int g = 0; g < l->n_head_kv; g++, k++) {
                    item[4 * k] = si, item[4 * k + 1] = g, item[4 * k + 2] = t0;
                    item[4 * k + 3] = t0 + run < segs[si].n ? t0 + run : segs[si].n;
                }
        const int nch = n_items < 4 * pool_threads() ? n_items : 4 * pool_threads(); /* scratch per chunk */
        attn_job j = {.l = l, .segs = segs, .Q = Q, .q_stride = q_stride, .O = O, .o_first = o_first, .o_row0 = o_row0,
                      .n_items = n_items, .item = item, .n_pad = n_pad,
                      .scratch_n = (size_t)run * R * per_pair + (widen ? (size_t)ATTN_BLOCK * hd : 0)};
        j.scratch = arena_floats(a, (size_t)nch * j.scratch_n);
        pool_run_n(attend_job, &j, nch);
        matmul(&l->wo, O, n_out, out);
        add_bias(out, l->bo, n_out, n_embd);
    }
    arena_restore(a, mark);
}

void attention_store_kv(const attn_layer *l, const segment *segs, int n_segs, int N, const float *x, arena *a) {
    const arena_mark mark = arena_save(a);
    const int kvd = l->n_head_kv * l->head_dim;
    const int q_stride = l->n_head * l->head_dim * (l->gated ? 2 : 1);
    float *K = arena_floats(a, (size_t)N * kvd), *V = arena_floats(a, (size_t)N * kvd);
    if (l->wqkv.data) { /* one fused projection: its q part is computed and dropped */
        const int width = q_stride + 2 * kvd;
        float *QKV = arena_floats(a, (size_t)N * width);
        matmul(&l->wqkv, x, N, QKV);
        add_bias(QKV, l->bqkv, N, width);
        for (int r = 0; r < N; r++) {
            memcpy(K + (size_t)r * kvd, QKV + (size_t)r * width + q_stride, (size_t)kvd * sizeof(float));
            memcpy(V + (size_t)r * kvd, QKV + (size_t)r * width + q_stride + kvd, (size_t)kvd * sizeof(float));
        }
    } else {
        const matrix *W[2] = {&l->wk, &l->wv};
        float *Y[2] = {K, V};
        matmul_multi(2, W, Y, x, N);
    }
    add_bias(K, l->bk, N, kvd);
    add_bias(V, l->bv, N, kvd);
    prep_job pj = {.l = l, .segs = segs, .n_segs = n_segs, .N = N, .Q = NULL, .K = K, .V = V, .q_stride = q_stride};
    pool_run_rows(prep_rows, &pj, N);
    arena_restore(a, mark);
}
