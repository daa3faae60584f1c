/* sample.c - a request's next token: drawn from its logits (the end of generation
 * masked with ignore_eog; under a grammar, only what the grammar allows, in the answer and
 * not in the reasoning), a speculative step's tokens under the same masks, and the token
 * taken: its text streamed (reply.c), the thinking budget's forced end of the reasoning,
 * and whether the reply ends here. */
#include <stdlib.h>
#include <string.h>

#include "engine/runtime/chat_impl.h"

/* The grammar constrains the answer, not the reasoning: it applies unless the reply is
 * inside a reasoning block (before anything is generated the reasoning's opening marker may
 * still come instead). */
static int grammar_applies(const request *r, enum think_state think) { return r->gm && think != THINK_IN; }

/* Under a grammar the first token may still open a reasoning block, unless the request
 * asked for none (enable_thinking off): then the grammar holds from the first token, as
 * the template already closed the block. */
static int grammar_lets_reasoning_open(const chat_engine *e, const request *r, enum think_state think) {
    return think == THINK_MAY_OPEN && e->think_open >= 0 && r->s.enable_thinking;
}

/* The grammar's mask on logits for the token after a reply standing at (gm, think): gm at
 * the answer's place in the grammar, think where the reply is with respect to reasoning.
 * Inside the reasoning only the end is masked: the answer the grammar constrains is still
 * due. Returns the tokens allowed, -1 out of memory. */
static int grammar_constrain(chat_engine *e, const request *r, grammar_matcher *gm, enum think_state think,
                             float *logits) {
    const float open_logit = e->think_open >= 0 ? logits[e->think_open] : 0.0f;
    int allowed = e->m->n_vocab;
    if (grammar_applies(r, think)) {
        if ((allowed = grammar_mask_logits(gm, e->gvocab, logits)) < 0) return -1;
        if (grammar_lets_reasoning_open(e, r, think) && logits[e->think_open] == -INFINITY)
            logits[e->think_open] = open_logit, allowed++;
    }
    if (r->s.ignore_eog || !grammar_applies(r, think))
        for (int i = 0; i < e->n_eog; i++) logits[e->eog[i]] = -INFINITY;
    return allowed;
}

/* The reply's state after token tok, as request_take_token moves it: whether it is in a reasoning
 * block, and - where the grammar applies - gm advanced over the token's bytes. -1 when the
 * grammar does not allow tok. */
static int grammar_step(chat_engine *e, const request *r, grammar_matcher *gm, enum think_state *think, int tok) {
    if (grammar_applies(r, *think) && !(grammar_lets_reasoning_open(e, r, *think) && tok == e->think_open) &&
        grammar_accept_token(gm, e->gvocab, tok) != 0)
        return -1;
    if (*think == THINK_MAY_OPEN) *think = tok == e->think_open && tok >= 0 ? THINK_IN : THINK_OVER;
    else if (*think == THINK_IN && tok == e->think_close) *think = THINK_OVER;
    return 0;
}

int request_sample(chat_engine *e, request *r) {
    if (r->gm) {
        /* a masked copy: r->logits stay as computed, for the checkpoint that keeps them */
        memcpy(r->masked, r->logits, sizeof *r->masked * (size_t)e->m->n_vocab);
        if (grammar_constrain(e, r, r->gm, r->think, r->masked) < 0) return -1;
        return sampler_sample(&r->smp, r->masked);
    }
    if (!r->s.ignore_eog || !e->n_eog) return sampler_sample(&r->smp, r->logits);
    /* ignore_eog: the end-of-generation tokens cannot be drawn (llama.cpp's ignore_eos
     * biases them to -inf), so every token of the reply is text; the logits themselves stay
     * as computed, for the checkpoint that keeps them */
    float kept[64];
    int n = e->n_eog < 64 ? e->n_eog : 64;
    for (int i = 0; i < n; i++) kept[i] = r->logits[e->eog[i]], r->logits[e->eog[i]] = -INFINITY;
    int tok = sampler_sample(&r->smp, r->logits);
    for (int i = 0; i < n; i++) r->logits[e->eog[i]] = kept[i];
    return tok;
}

/* Speculation under a grammar (spec_constraint): row 0 is where the reply stands (r->gm,
 * r->think); row j + 1 the scratch matcher spec_gm[j] and spec_think[j + 1], the reply
 * after the step's drafts d1..d(j+1). */
static grammar_matcher *spec_row_matcher(request *r, int row) { return row == 0 ? r->gm : r->spec_gm[row - 1]; }
static enum think_state spec_row_think(const request *r, int row) { return row == 0 ? r->think : r->spec_think[row]; }

static int spec_mask(void *ud, int row, float *logits) {
    request *r = ud;
    return grammar_constrain(r->engine, r, spec_row_matcher(r, row), spec_row_think(r, row), logits);
}

static int spec_next(void *ud, int row, int tok) {
    request *r = ud;
    if (row >= SPEC_MAX_DRAFT) return -1;
    if (!r->spec_gm[row] && !(r->spec_gm[row] = grammar_matcher_new(r->gr))) return -1;
    grammar_matcher *gm = r->spec_gm[row];
    enum think_state think = spec_row_think(r, row);
    if (grammar_matcher_assign(gm, spec_row_matcher(r, row)) != 0 || grammar_step(r->engine, r, gm, &think, tok) != 0)
        return -1;
    r->spec_think[row + 1] = think;
    return 0;
}

void request_constrain_speculation(chat_engine *e, request *r) {
    if (!r->spec || !r->gm) return;
    r->engine = e;
    r->spec->c = (spec_constraint){.mask = spec_mask, .next = spec_next, .ud = r};
}

int request_sample_step(chat_engine *e, request *r) {
    spec_seq *sp = r->spec;
    if (r->s.ignore_eog && e->n_eog) {
        /* as request_sample: no verify row draws an end-of-generation token, so a drafted one
         * is always rejected; the rows are scratch the next step overwrites, so nothing is
         * put back */
        const size_t V = (size_t)e->m->n_vocab;
        for (int j = 0; j <= sp->n_draft; j++)
            for (int i = 0; i < e->n_eog; i++) sp->logits[(size_t)j * V + (size_t)e->eog[i]] = -INFINITY;
    }
    return spec_accept(sp, &r->smp, r->step_tokens);
}

/* The thinking budget is spent: instead of the token drawn, the end of the reasoning as
 * the template writes it goes in (its text through request_take_token like generated tokens: the
 * markers' whitespace is dropped the same way), all in the next decode row. */
static int force_end_of_reasoning(chat_engine *e, request *r) {
    if (r->state->n_past + r->n_close_ids > r->state->n_ctx) return FINISH_CONTEXT;
    for (int i = 0; i < r->n_close_ids; i++) {
        r->r.generated_tokens++;
        request_take_token(e, r, r->close_ids[i]);
        r->feed[i] = r->close_ids[i];
    }
    r->n_feed = r->n_close_ids;
    if (r->s.max_tokens > 0 && r->r.generated_tokens >= r->s.max_tokens) return FINISH_LENGTH;
    return FINISH_NONE;
}

int request_accept_token(chat_engine *e, request *r, int tok) {
    if (tok < 0) {
        r->fail = "out of memory for the grammar's mask";
        return FINISH_ERROR;
    }
    enum think_state think = r->think; /* request_take_token moves r->think itself */
    if (r->gm && grammar_step(e, r, r->gm, &think, tok) != 0) {
        /* the mask let nothing through (not even the end): the grammar cannot go on here */
        r->fail = "the grammar allows no token here";
        return FINISH_ERROR;
    }
    r->feed[0] = tok;
    r->n_feed = 1;
    if (r->r.generated_tokens == 0) {
        r->t_first = request_now_ms();
        r->r.ttft_ms = r->t_first - r->t_submit;
    }
    if (r->think == THINK_IN && r->close_ids && r->think_tokens >= r->s.thinking_budget && tok != e->think_close)
        return force_end_of_reasoning(e, r);
    r->r.generated_tokens++;
    if (tokenizer_is_eog(e->m->tok, tok) && !r->s.ignore_eog) return FINISH_EOG;
    const int took = request_take_token(e, r, tok);
    if (took) return took == 2 ? FINISH_EOG : FINISH_STOP;
    if (r->s.max_tokens > 0 && r->r.generated_tokens >= r->s.max_tokens) return FINISH_LENGTH;
    if (r->state->n_past >= r->state->n_ctx) return FINISH_CONTEXT;
    return FINISH_NONE;
}
