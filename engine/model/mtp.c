/* mtp.c - the MTP head in sequences (mtp.h; docs/engine-math.md §12; llama.cpp
 * src/models/qwen35.cpp graph_mtp, common/speculative.cpp draft-mtp). */
#include "engine/model/mtp.h"

#include <stdlib.h>
#include <string.h>

#include "engine/model/state.h"

int mtp_enable(model *m) {
    if (!m->mtp) return -1;
    if (m->mtp_on) return 0;
    const attn_layer *at = &m->mtp->blk.attn;
    if (model_add_kv_slot(m, at->n_head_kv, at->head_dim) != 0) return -1;
    m->mtp->blk.attn.kv_slot = m->n_kv_slots - 1;
    m->mtp_h_off = m->rec_floats;
    m->rec_floats += (size_t)m->n_embd;
    m->trimmable = 0; /* the kept hidden row has no history to cut back to */
    m->mtp_on = 1;
    state_drop_spare(m); /* a kept state has the old layout */
    return 0;
}

int mtp_set_draft_vocab(model *m, int n) {
    if (!m->mtp) return 0;
    m->mtp->draft_vocab = n > 0 && n < m->n_vocab ? n : m->n_vocab;
    return m->mtp->draft_vocab;
}

/* The head's input row x (2 n_embd floats): [RMSNorm(embed(token), enorm) ; RMSNorm(h, hnorm)],
 * the token's half first as llama.cpp concatenates them. */
static void head_input(const model *m, int token, const float *h, float *x) {
    const mtp_head *p = m->mtp;
    const int E = m->n_embd;
    matrix_get_row(&p->embed, token, x);
    rmsnorm(x, x, p->enorm, E, m->eps);
    rmsnorm(x + E, h, p->hnorm, E, m->eps);
}

void mtp_catch_up(const model *m, const batch_seq *seqs, const segment *segs, int n_segs, int N, const float *hn,
                  arena *a) {
    const arena_mark mark = arena_save(a);
    const mtp_head *p = m->mtp;
    const int E = m->n_embd;
    float *X = arena_floats(a, (size_t)N * 2 * E), *C = arena_floats(a, (size_t)N * E);
    for (int si = 0; si < n_segs; si++)
        for (int t = 0; t < segs[si].n; t++) {
            const int row = segs[si].row0 + t;
            const float *h = t ? hn + (size_t)(row - 1) * E : segs[si].rec + m->mtp_h_off;
            head_input(m, seqs[si].tokens[t], h, X + (size_t)row * 2 * E);
        }
    matmul(&p->eh_proj, X, N, C);
    rmsnorm_rows(C, C, p->blk.mixer_norm, N, E, m->eps);
    attention_store_kv(&p->blk.attn, segs, n_segs, N, C, a); /* the head's output waits for a draft row */
    for (int si = 0; si < n_segs; si++) {
        const segment *sg = &segs[si];
        for (int c = 0; c < sg->n_capture; c++) /* after capture + c rows: the row before */
            memcpy(sg->capture_rec[c] + m->mtp_h_off, hn + (size_t)(sg->row0 + sg->capture + c - 1) * E,
                   sizeof(float) * (size_t)E);
        memcpy(sg->rec + m->mtp_h_off, hn + (size_t)(sg->row0 + sg->n - 1) * E, sizeof(float) * (size_t)E);
    }
    arena_restore(a, mark);
}

int mtp_draft(const model *m, mtp_row *rows, int n, arena *a) {
    if (!m->mtp_on || n <= 0) return -1;
    for (int i = 0; i < n; i++) {
        const mtp_row *r = &rows[i];
        if (r->token < 0 || r->token >= m->n_vocab || r->pos < 0 || r->state->m != m) return -1;
        if (state_reserve(r->state, r->pos + 1) != 0) return -1;
    }
    const arena_mark mark = arena_save(a);
    const mtp_head *p = m->mtp;
    const int E = m->n_embd;
    segment *segs = arena_alloc(a, sizeof *segs * (size_t)n);
    float *X = arena_floats(a, (size_t)n * 2 * E), *c = arena_floats(a, (size_t)n * E);
    float *x = arena_floats(a, (size_t)n * E), *y = arena_floats(a, (size_t)n * E);
    for (int i = 0; i < n; i++) {
        const seq_state *s = rows[i].state;
        segs[i] = (segment){.k = s->k, .v = s->v, .k_type = m->kv_k, .v_type = m->kv_v, .rec = s->rec, .rec_slots = m->rec, .row0 = i, .n = 1,
                            .pos0 = rows[i].pos, .keep = 1};
        head_input(m, rows[i].token, rows[i].h ? rows[i].h : s->rec + m->mtp_h_off, X + (size_t)i * 2 * E);
    }
    /* c = eh_proj x;  c += Attn(RMSNorm(c));  c += FFN(RMSNorm(c));  h' = RMSNorm(c, head_norm) */
    matmul(&p->eh_proj, X, n, c);
    rmsnorm_rows(x, c, p->blk.mixer_norm, n, E, m->eps);
    attention_forward(&p->blk.attn, segs, n, n, E, x, y, 0, a);
    add_scaled(c, y, 1.0f, (size_t)n * E);
    rmsnorm_rows(x, c, p->blk.ffn_norm, n, E, m->eps);
    block_ffn(&p->blk, n, E, x, y, a);
    add_scaled(c, y, 1.0f, (size_t)n * E);
    rmsnorm_rows(x, c, p->head_norm, n, E, m->eps);
    matrix head = p->head; /* its first draft_vocab rows */
    head.n_out = p->draft_vocab;
    float *lo = arena_floats(a, (size_t)n * (size_t)head.n_out);
    float **dst = arena_alloc(a, sizeof *dst * (size_t)n);
    for (int i = 0; i < n; i++) {
        memcpy(rows[i].h_out, x + (size_t)i * E, sizeof(float) * (size_t)E);
        dst[i] = rows[i].logits;
        for (int v = p->draft_vocab; v < m->n_vocab; v++) rows[i].logits[v] = -INFINITY;
    }
    matmul_scatter(&head, x, n, lo, dst, 1.0f / m->logit_scale);
    arena_restore(a, mark);
    return 0;
}
