/* speculative.c - draft, verify, accept, keep (speculative.h). */
#include "engine/runtime/speculative.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/mtp.h"

int spec_configure(model *m, int draft, char *err, size_t errlen) {
    if (draft < 0) draft = m->mtp ? SPEC_DEFAULT_DRAFT : 0;
    if (draft == 0) return 0;
    if (draft > SPEC_MAX_DRAFT) {
        snprintf(err, errlen, "drafts of %d tokens: at most %d", draft, SPEC_MAX_DRAFT);
        return -1;
    }
    if (!m->mtp) {
        snprintf(err, errlen, "speculative decoding needs a model with an MTP head; this %s model has none", m->arch);
        return -1;
    }
    if (mtp_enable(m) != 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return draft;
}

int spec_init(spec_seq *sp, const model *m, int n_max) {
    memset(sp, 0, sizeof *sp);
    if (!m->mtp_on || n_max < 1 || n_max > SPEC_MAX_DRAFT) return -1;
    sp->m = m;
    sp->n_max = n_max;
    const size_t V = (size_t)m->n_vocab;
    sp->q = malloc(sizeof(float) * V * (size_t)n_max);
    sp->logits = malloc(sizeof(float) * V * (size_t)(n_max + 1));
    sp->h = malloc(sizeof(float) * (size_t)m->n_embd);
    sp->p = malloc(sizeof(float) * V);
    int ok = sp->q && sp->logits && sp->h && sp->p;
    /* the same size as a state's blob (state_new): spec_keep swaps them */
    for (int i = 0; ok && i < n_max; i++) ok = (sp->rec[i] = malloc(sizeof(float) * (m->rec_floats + 1))) != NULL;
    if (!ok) {
        spec_free(sp);
        return -1;
    }
    return 0;
}

void spec_free(spec_seq *sp) {
    free(sp->q);
    free(sp->logits);
    free(sp->h);
    free(sp->p);
    for (int i = 0; i < SPEC_MAX_DRAFT; i++) free(sp->rec[i]);
    memset(sp, 0, sizeof *sp);
}

/* The head's token for draft row j from its logits in sp->p: the argmax when greedy, else
 * a draw from its distribution, which row j of q keeps for spec_accept. */
static int pick_draft(spec_seq *sp, sampler *smp, int j) {
    const int V = sp->m->n_vocab;
    if (smp->p.temperature <= 0.0f) return sampler_argmax(sp->p, V);
    float *q = sp->q + (size_t)j * V;
    sampler_probs(smp, sp->p, q);
    const int d = sampler_draw(smp, q, V);
    return d >= 0 ? d : sampler_argmax(sp->p, V);
}

int spec_draft(spec_seq *const *sp, seq_state *const *st, sampler *const *smp, const int *want, int n, arena *a) {
    if (n <= 0) return 0;
    mtp_row *rows = malloc(sizeof *rows * (size_t)n);
    int *who = malloc(sizeof *who * (size_t)n), *limit = malloc(sizeof *limit * (size_t)n);
    int rc = rows && who && limit ? 0 : -1;
    for (int i = 0; i < n; i++) {
        sp[i]->pos0 = st[i]->n_past;
        sp[i]->n_draft = 0;
        if (!limit) continue;
        /* the verify row takes the last token and the drafts: n_past + drafts + 1 <= n_ctx */
        const int room = st[i]->n_ctx - st[i]->n_past - 1;
        int k = want[i] < sp[i]->n_max ? want[i] : sp[i]->n_max;
        limit[i] = k < room ? k : room;
    }
    for (int j = 0; rc == 0; j++) {
        int k = 0;
        for (int i = 0; i < n; i++) {
            if (limit[i] <= j) continue;
            rows[k] = (mtp_row){.state = st[i], .token = sp[i]->tokens[j], .pos = sp[i]->pos0 + j,
                                .h = j ? sp[i]->h : NULL, .h_out = sp[i]->h, .logits = sp[i]->p};
            who[k++] = i;
        }
        if (k == 0) break;
        if (mtp_draft(sp[who[0]]->m, rows, k, a) != 0) {
            rc = -1;
            break;
        }
        for (int r = 0; r < k; r++) {
            spec_seq *s = sp[who[r]];
            if (s->c.mask && s->c.mask(s->c.ud, j, s->p) <= 0) { /* nothing to draft from */
                limit[who[r]] = j;
                continue;
            }
            const int d = pick_draft(s, smp[who[r]], j);
            if (s->c.next && s->c.next(s->c.ud, j, d) != 0) {
                limit[who[r]] = j;
                continue;
            }
            s->tokens[j + 1] = d;
            s->n_draft = j + 1;
        }
    }
    free(rows);
    free(who);
    free(limit);
    return rc;
}

batch_seq spec_verify_row(spec_seq *sp, seq_state *st) {
    sp->pos0 = st->n_past;
    return (batch_seq){.state = st, .tokens = sp->tokens, .n_tokens = sp->n_draft + 1, .logits = 2,
                       .out = sp->logits, .capture = 1, .n_capture = sp->n_draft, .capture_rec = sp->rec};
}

/* The step ends with token tok at out[i]: out[0..i) were drafts the model accepted. */
static int finish_step(spec_seq *sp, int *out, int i, int tok) {
    out[i] = tok;
    sp->steps++;
    sp->drafted += (uint64_t)sp->n_draft;
    sp->accepted += (uint64_t)i;
    return i + 1;
}

int spec_accept(spec_seq *sp, sampler *smp, int *out) {
    const int V = sp->m->n_vocab, n = sp->n_draft;
    int i = 0;
    for (; i < n; i++) {
        float *row = sp->logits + (size_t)i * V;
        if (sp->c.mask && sp->c.mask(sp->c.ud, i, row) < 0) return finish_step(sp, out, i, -1);
        const int d = sp->tokens[i + 1];
        if (smp->p.temperature <= 0.0f) { /* greedy: the draft stands while it is the argmax */
            const int t = sampler_sample(smp, row);
            out[i] = t;
            if (t != d) break;
            continue;
        }
        /* accept d with probability min(1, p(d) / q(d)); q(d) > 0: d was drawn from q */
        const float *q = sp->q + (size_t)i * V;
        float *p = sp->p;
        sampler_probs(smp, row, p);
        if (sampler_uniform(smp) * q[d] < p[d]) {
            out[i] = d;
            continue;
        }
        /* rejected: the token from max(0, p - q), normalised; where p and q round to the
         * same everywhere that residual is empty, and p itself is what is left */
        for (int v = 0; v < V; v++) p[v] = p[v] > q[v] ? p[v] - q[v] : 0.0f;
        int t = sampler_draw(smp, p, V);
        out[i] = t >= 0 ? t : sampler_sample(smp, row);
        break;
    }
    if (i < n) return finish_step(sp, out, i, out[i]);
    /* every draft passed: the model's token after them */
    float *row = sp->logits + (size_t)n * V;
    if (sp->c.mask && sp->c.mask(sp->c.ud, n, row) < 0) return finish_step(sp, out, n, -1);
    return finish_step(sp, out, n, sampler_sample(smp, row));
}

void spec_keep(spec_seq *sp, seq_state *st, int rows) {
    const int fed = sp->n_draft + 1;
    if (rows < 1) rows = 1;
    if (rows > fed) rows = fed;
    st->n_past = sp->pos0 + rows;
    if (rows < fed) { /* the capture after that row becomes the state; the blob goes to the spare */
        float *t = st->rec;
        st->rec = sp->rec[rows - 1];
        sp->rec[rows - 1] = t;
    }
}
