/* moe.c - the mixture-of-experts FFN (layers.h moe_layer; docs/engine-math.md §11; llama.cpp
 * src/llama-graph.cpp build_moe_ffn, and ggml-cpu.c ggml_compute_forward_mul_mat_id for
 * how the experts' products are computed).
 *
 * Per token, as llama.cpp:
 *   l   = router x                               F32 weights, F32 dot: never quantized
 *   p   = softmax(l) | sigmoid(l) | l | sqrt(softplus(l))
 *   sel = the n_used highest of p + sel_bias       slot 0 the highest; the bias only chooses
 *   w   = p[sel]  (softmax over these for MOE_SOFTMAX_WEIGHT)
 *   w  /= max(sum w, 2^-14)  when norm_w;  w *= w_scale
 *   y_j = down_e( act(gate_e xl, up_e xl) )        e = sel_j
 *   moe = ((w_0 y_0 + w_1 y_1) + w_2 y_2) + ...    in slot order
 * and around it latent_down/latent_up (xl = latent_down x; moe = latent_up moe) and the
 * shared expert, added last: out = moe + shared(x) [* sigmoid(shared_gate x)].
 *
 * The experts' arithmetic is llama.cpp's mul_mat_id: each token's input is converted to
 * the weights' dot type once and that row serves all its experts' gate and up; each
 * (token, slot)'s activation is converted on its own for down. Those conversions are
 * row by row, so grouping the rows by expert changes no bit: every chosen expert runs
 * once over the rows of the tokens that chose it (for one token: only the chosen
 * experts' rows are read), and all experts' products of a step run as one job of the
 * pool (matmul_parts), which splits their rows among the threads. */
#include <math.h>
#include <string.h>

#include "engine/base/threadpool.h"
#include "engine/kernels/quant.h"
#include "engine/layers/layers.h"
#include "engine/layers/ops.h"

/* ---------------------------------------------------------------- routing */

/* ggml_soft_max of one row: exp(x - max) summed in double, then times 1/sum as a float */
static void softmax_row(float *y, const float *x, int n) {
    float max = -INFINITY;
    for (int i = 0; i < n; i++)
        if (x[i] > max) max = x[i];
    const float inv = (float)(1.0 / vec_softmax_exp(y, x, max, n));
    for (int i = 0; i < n; i++) y[i] *= inv;
}

/* One token: its probabilities p (scratch, n_expert), the chosen experts and their weights. */
static void route_token(const moe_layer *l, const float *logits, float *p, int *sel, float *w) {
    const int E = l->n_expert, k = l->n_used;
    switch (l->gating) {
    case MOE_SOFTMAX: softmax_row(p, logits, E); break;
    case MOE_SIGMOID: for (int e = 0; e < E; e++) p[e] = sigmoid(logits[e]); break;
    case MOE_SQRT_SOFTPLUS: for (int e = 0; e < E; e++) p[e] = sqrtf(softplus(logits[e])); break;
    default: memcpy(p, logits, sizeof *p * (size_t)E); break; /* MOE_SOFTMAX_WEIGHT */
    }
    /* top k of the selection scores, highest first (llama.cpp sorts them descending; on an
     * exact tie its order is not defined, here the lower index comes first) */
    uint8_t taken[E];
    memset(taken, 0, sizeof taken);
    for (int j = 0; j < k; j++) {
        int best = -1;
        float best_s = 0;
        for (int e = 0; e < E; e++) {
            if (taken[e]) continue;
            const float s = l->sel_bias ? p[e] + l->sel_bias[e] : p[e];
            if (best < 0 || s > best_s) best = e, best_s = s;
        }
        taken[best] = 1;
        sel[j] = best;
        w[j] = p[best];
    }
    if (l->gating == MOE_SOFTMAX_WEIGHT) softmax_row(w, w, k);
    if (l->norm_w) {
        double sum = 0; /* ggml_sum_rows: in double, then a float */
        for (int j = 0; j < k; j++) sum += (double)w[j];
        const float s = fmaxf((float)sum, 6.103515625e-5f); /* the smallest normal half */
        for (int j = 0; j < k; j++) w[j] = w[j] / s;
    }
    if (l->w_scale != 0.0f && l->w_scale != 1.0f)
        for (int j = 0; j < k; j++) w[j] *= l->w_scale;
}

typedef struct {
    const moe_layer *l;
    const float *logits; /* N rows of n_expert */
    float *p;            /* scratch: a row per token */
    int *sel;            /* N rows of n_used */
    float *w;
    int N;
} route_job;

static void route_rows(void *arg, int ith, int nth) {
    const route_job *j = arg;
    const int E = j->l->n_expert, k = j->l->n_used;
    long t0, t1;
    pool_split(j->N, ith, nth, 1, &t0, &t1);
    for (long t = t0; t < t1; t++)
        route_token(j->l, j->logits + (size_t)t * E, j->p + (size_t)t * E, j->sel + (size_t)t * k,
                    j->w + (size_t)t * k);
}

/* ---------------------------------------------------------------- activations */

/* rows of U (and G) through the expert's activation, in place in U */
typedef struct {
    float *U;
    const float *G; /* NULL: no gate */
    int rows, n, relu2;
} act_job;

static void act_rows(void *arg, int ith, int nth) {
    const act_job *j = arg;
    long r0, r1;
    pool_split(j->rows, ith, nth, 1, &r0, &r1);
    for (long r = r0; r < r1; r++) {
        float *u = j->U + (size_t)r * j->n;
        if (j->relu2) {
            vec_relu2(u, u, (size_t)j->n);
        } else if (j->G) {
            vec_swiglu(u, j->G + (size_t)r * j->n, u, j->n); /* silu(gate) * up */
        } else {
            vec_silu(u, u, j->n);
        }
    }
}

static void activate(float *U, const float *G, int rows, int n, int kind) {
    act_job j = {U, G, rows, n, kind == FFN_RELU2};
    pool_run_rows(act_rows, &j, rows);
}

/* The prepared activations of one layer pass: each (input, dot type) converted once. */
enum { MAX_PREPARED = 8 };
typedef struct {
    const float *X[MAX_PREPARED];
    uint32_t dot[MAX_PREPARED];
    kact k[MAX_PREPARED];
    int n;
} prepared;

static const kact *prepare_for(prepared *p, const float *X, uint32_t weight_type, int64_t n, int T, arena *a) {
    const uint32_t dot = quant_dot_type(weight_type);
    for (int i = 0; i < p->n; i++)
        if (p->X[i] == X && p->dot[i] == dot) return &p->k[i];
    if (p->n == MAX_PREPARED) p->n = 0; /* cannot happen with the few matrices of a layer */
    const size_t bytes = kact_bytes(weight_type, n, T);
    kact_prepare_rows(&p->k[p->n], weight_type, X, n, T, bytes ? arena_alloc(a, bytes) : NULL);
    p->X[p->n] = X;
    p->dot[p->n] = dot;
    return &p->k[p->n++];
}

/* The rows of expert e's tokens out of a per-token preparation: the token's own row when
 * it is alone (decode), else a gathered copy. */
static kact expert_rows(const kact *per_token, const int *tok, int cnt, arena *a) {
    if (cnt == 1) return kact_slice(per_token, tok[0], 1);
    kact g;
    kact_gather(&g, per_token, tok, cnt, arena_alloc(a, kact_gather_bytes(per_token, cnt)));
    return g;
}

/* ---------------------------------------------------------------- combine */

typedef struct {
    const float *D;       /* expert outputs, grouped rows of width n */
    const int *slot_row;  /* token t, slot j: its row in D */
    const float *w;
    float *M;             /* N rows of n */
    int N, k, n;
} combine_job;

/* M[t] = ((w_0 y_0 + w_1 y_1) + w_2 y_2) + ...: ggml_mul of the outputs by the weights,
 * then ggml_add of the slots' views in slot order */
static void combine_rows(void *arg, int ith, int nth) {
    const combine_job *j = arg;
    long t0, t1;
    pool_split(j->N, ith, nth, 1, &t0, &t1);
    for (long t = t0; t < t1; t++) {
        float *m = j->M + (size_t)t * j->n;
        const float *w = j->w + (size_t)t * j->k;
        const int *rows = j->slot_row + (size_t)t * j->k;
        const float *y = j->D + (size_t)rows[0] * j->n;
        for (int c = 0; c < j->n; c++) m[c] = y[c] * w[0];
        for (int s = 1; s < j->k; s++) {
            y = j->D + (size_t)rows[s] * j->n;
            for (int c = 0; c < j->n; c++) m[c] = m[c] + y[c] * w[s];
        }
    }
}

/* ---------------------------------------------------------------- forward */

void moe_forward(const moe_layer *l, int N, int n_embd, const float *x, float *out, arena *a) {
    const arena_mark mark = arena_save(a); /* temporaries go back at the end */
    const int E = n_embd, X = l->n_expert, k = l->n_used, F = l->n_ff, Le = l->n_latent;
    const int A = N * k; /* (token, slot) assignments */
    const int has_shared = l->shared.kind != FFN_NONE, Fs = has_shared ? l->shared.n_ff : 0;

    /* router logits, the shared expert's gate and the latent input: one job over x */
    float *logits = arena_floats(a, (size_t)N * X);
    float *sgate = l->shared_gate.data ? arena_floats(a, (size_t)N) : NULL;
    float *xl = l->latent_down.data ? arena_floats(a, (size_t)N * Le) : NULL;
    {
        const matrix *W[3] = {&l->router};
        float *Y[3] = {logits};
        int n = 1;
        if (sgate) W[n] = &l->shared_gate, Y[n++] = sgate;
        if (xl) W[n] = &l->latent_down, Y[n++] = xl;
        matmul_multi(n, W, Y, x, N);
    }
    const float *xin = xl ? xl : x; /* what the routed experts read */

    /* routing */
    int *sel = arena_alloc(a, sizeof(int) * (size_t)A);
    float *w = arena_floats(a, (size_t)A);
    {
        route_job j = {l, logits, arena_floats(a, (size_t)N * X), sel, w, N};
        pool_run_rows(route_rows, &j, N);
    }

    /* the assignments grouped by expert, in token order within each (a counting sort):
     * expert e's rows are [off[e], off[e] + cnt[e]) of every grouped buffer, tok[] says
     * whose, slot_row[] where each (token, slot) went */
    int *cnt = arena_alloc(a, sizeof(int) * (size_t)(X + 1)), *off = arena_alloc(a, sizeof(int) * (size_t)(X + 1));
    int *tok = arena_alloc(a, sizeof(int) * (size_t)A), *slot_row = arena_alloc(a, sizeof(int) * (size_t)A);
    memset(cnt, 0, sizeof(int) * (size_t)(X + 1));
    for (int i = 0; i < A; i++) cnt[sel[i]]++;
    off[0] = 0;
    for (int e = 0; e < X; e++) off[e + 1] = off[e] + cnt[e];
    memset(cnt, 0, sizeof(int) * (size_t)X);
    for (int i = 0; i < A; i++) {
        const int e = sel[i], r = off[e] + cnt[e]++;
        tok[r] = i / k;
        slot_row[i] = r;
    }
    int used = 0;
    for (int e = 0; e < X; e++) used += cnt[e] > 0;

    /* gate and up of every chosen expert over its rows, and of the shared expert over all */
    prepared prep = {0};
    float *G = l->gate.m.data ? arena_floats(a, (size_t)A * F) : NULL, *U = arena_floats(a, (size_t)A * F);
    float *SG = NULL, *SU = NULL;
    matmul_part *parts = arena_alloc(a, sizeof *parts * (size_t)(2 * used + 2));
    int np = 0;
    {
        const kact *xg = G ? prepare_for(&prep, xin, l->gate.m.type, Le, N, a) : NULL;
        const kact *xu = prepare_for(&prep, xin, l->up.m.type, Le, N, a);
        for (int e = 0; e < X; e++) {
            if (!cnt[e]) continue;
            const kact ku = expert_rows(xu, tok + off[e], cnt[e], a);
            if (G) {
                const kact kg = xg == xu ? ku : expert_rows(xg, tok + off[e], cnt[e], a);
                parts[np++] = (matmul_part){expert_view(&l->gate, e), 0, F, kg, G + (size_t)off[e] * F, F};
            }
            parts[np++] = (matmul_part){expert_view(&l->up, e), 0, F, ku, U + (size_t)off[e] * F, F};
        }
        if (has_shared) {
            SU = arena_floats(a, (size_t)N * Fs);
            parts[np++] = (matmul_part){l->shared.up, 0, Fs, *prepare_for(&prep, x, l->shared.up.type, E, N, a), SU, Fs};
            if (l->shared.kind == FFN_SWIGLU) {
                SG = arena_floats(a, (size_t)N * Fs);
                parts[np++] =
                    (matmul_part){l->shared.gate, 0, Fs, *prepare_for(&prep, x, l->shared.gate.type, E, N, a), SG, Fs};
            }
        }
        matmul_parts(parts, np);
    }
    activate(U, G, A, F, l->act);
    if (has_shared) activate(SU, SG, N, Fs, l->shared.kind);

    /* down: each (token, slot)'s activation converted on its own; one job with the shared
     * expert's down */
    float *D = arena_floats(a, (size_t)A * Le), *S = has_shared ? arena_floats(a, (size_t)N * E) : NULL;
    {
        kact ka, ks;
        size_t bytes = kact_bytes(l->down.m.type, F, A);
        kact_prepare_rows(&ka, l->down.m.type, U, F, A, bytes ? arena_alloc(a, bytes) : NULL);
        np = 0;
        for (int e = 0; e < X; e++)
            if (cnt[e])
                parts[np++] = (matmul_part){expert_view(&l->down, e), 0, Le, kact_slice(&ka, off[e], cnt[e]),
                                            D + (size_t)off[e] * Le, Le};
        if (has_shared) {
            bytes = kact_bytes(l->shared.down.type, Fs, N);
            kact_prepare_rows(&ks, l->shared.down.type, SU, Fs, N, bytes ? arena_alloc(a, bytes) : NULL);
            parts[np++] = (matmul_part){l->shared.down, 0, E, ks, S, E};
        }
        matmul_parts(parts, np);
    }

    /* the weighted sum in slot order, back to n_embd through latent_up */
    float *M = l->latent_up.data ? arena_floats(a, (size_t)N * Le) : out;
    {
        combine_job j = {D, slot_row, w, M, N, k, Le};
        pool_run_rows(combine_rows, &j, N);
    }
    if (l->latent_up.data) matmul(&l->latent_up, M, N, out);
    if (has_shared)
        for (int t = 0; t < N; t++) {
            float *o = out + (size_t)t * E;
            const float *s = S + (size_t)t * E;
            if (sgate) {
                const float g = sigmoid(sgate[t]);
                for (int c = 0; c < E; c++) o[c] = o[c] + s[c] * g;
            } else {
                for (int c = 0; c < E; c++) o[c] = o[c] + s[c];
            }
        }
    arena_restore(a, mark);
}
