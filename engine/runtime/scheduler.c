/* scheduler.c - the engine's worker: up to max_batch requests at once, one model pass
 * per step.
 *
 * Each step is one model_forward over
 *   - one decode row for every GENERATING request (the token it sampled last), and
 *   - prefill slices of PREFILL requests, taken round robin, at most prefill_chunk
 *     tokens in all and at most the work of that many from position 0 (a slice deep in
 *     a long prompt is thinner, its attention reading more): a long prompt delays the
 *     others' next token by about one chunk's time at most, however deep it is.
 * Requests join between steps (from the queue, while a slot is free) and leave when
 * they end. Rows never mix: every kernel computes a row the same whether it runs alone
 * or in a batch (tests/test_parity_archs.c), and a sequence's state depends on its own
 * tokens only, not on where its slices were cut. So every reply is the one the request
 * gets alone, whatever else runs, and nothing batch-wide decides anything about a
 * request.
 *
 * Checkpoints belong to requests too: a slice captures the recurrent state at its own
 * request's next mark inside the pass (batch_seq.capture) and stops at the mark after
 * that (prefix_cache.h); the save copies the state into the store (request_checkpoints.c).
 *
 * Single flight: a request whose prompt shares a prefix - longer than what any
 * checkpoint gives it - with a request that is computing that prefix right now waits
 * (GEN_QUEUED) until that leader stands at the end of the shared part (its slices stop
 * there), takes a copy of the leader's state and goes on by itself (single_flight.c).
 *
 * Speculative decoding (speculative.h): a generating request with speculation first drafts
 * its next tokens with the MTP head - every such request in the same head passes, before
 * the plan - and its row in the step is then the verify row [last, drafts]; after the pass
 * it takes the accepted drafts and the model's own token, one after the other as plain
 * decoding would, and keeps the state's rows up to the last token it took. A rejected
 * draft is never in the state, so checkpoints (taken from the state) hold accepted tokens
 * only.
 *
 * The post-generation checkpoint (CK_NEXT_TURN) is a job of its own: the finished request stays in
 * the batch without its caller, feeds the end of its turn (a few tokens; up to
 * POST_MAX_COMPUTE when the template drops reasoning from history) in slices like any
 * prompt, saves, and leaves. A follow-up sent meanwhile follows it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/runtime/chat_impl.h"
#include "engine/kernels/kernels.h"
#include "engine/base/threadpool.h"

/* under a steady load, checkpoints still reach the database this often */
#define FLUSH_EVERY_MS 30000.0

/* ---------------------------------------------------------------- the batch */

/* r joins; with e->lock held. */
static void act_add(chat_engine *e, request *r) {
    e->act[e->n_act++] = r;
    if ((uint64_t)e->n_act > e->stats.max_active) e->stats.max_active = (uint64_t)e->n_act;
}

/* r leaves (the others keep their order: the round robin goes by it). */
static void act_remove(chat_engine *e, request *r) {
    pthread_mutex_lock(&e->lock);
    int k = 0;
    for (int i = 0; i < e->n_act; i++)
        if (e->act[i] != r) e->act[k++] = e->act[i];
    e->n_act = k;
    pthread_mutex_unlock(&e->lock);
}

/* ---------------------------------------------------------------- speculation buffers */

/* kept for the next requests: each holds n_max recurrent states (for Qwen3.5-0.8B 19 MB
 * each), whose fresh pages would cost faults at every request's start */
#define SPEC_SPARES 2

/* Speculation buffers for drafts of up to n_max, a spare when one fits. NULL when out of
 * memory (the request then decodes one token a step). */
static spec_seq *spec_take(chat_engine *e, int n_max) {
    for (int i = 0; i < e->n_spec_spare; i++)
        if (e->spec_spare[i]->n_max == n_max) {
            spec_seq *sp = e->spec_spare[i];
            e->spec_spare[i] = e->spec_spare[--e->n_spec_spare];
            sp->steps = sp->drafted = sp->accepted = 0;
            sp->c = (spec_constraint){0};
            return sp;
        }
    spec_seq *sp = calloc(1, sizeof *sp);
    if (sp && spec_init(sp, e->m, n_max) == 0) return sp;
    free(sp);
    return NULL;
}

void request_spec_release(chat_engine *e, request *r) {
    if (!r->spec) return;
    if (e->n_spec_spare < SPEC_SPARES && e->n_spec_spare < e->max_batch) {
        e->spec_spare[e->n_spec_spare++] = r->spec;
    } else {
        spec_free(r->spec);
        free(r->spec);
    }
    r->spec = NULL;
}

/* ---------------------------------------------------------------- a request's life */

/* A request just admitted: its own state, the longest checkpoint of its prompt, then one
 * of: its first token at once (the checkpoint came with the logits after the whole
 * prompt), waiting for a leader, or its prefill. Returns a gen_finish value when it
 * ended already. */
static int begin(chat_engine *e, request *r, const char **error) {
    r->state = state_new(e->m, e->n_ctx);
    r->logits = malloc(sizeof(float) * (size_t)e->m->n_vocab);
    if (!r->state || !r->logits) {
        *error = "out of memory for the sequence state";
        return FINISH_ERROR;
    }
    const int draft = r->s.speculative < 0 ? e->draft : r->s.speculative;
    if (e->draft > 0 && draft > 0) r->spec = spec_take(e, draft); /* NULL: one token a step */
    request_constrain_speculation(e, r); /* its drafts and verify rows masked by its grammar */
    r->t_prefill = request_now_ms();
    if (request_restore_prompt(e, r)) {
        r->r.phase = request_decode_phase(r);
        int how = request_accept_token(e, r, request_sample(e, r)); /* first: it may open a reasoning block */
        request_progress(r);
        return how;
    }
    if (!request_try_follow(e, r)) r->r.phase = GEN_PREFILL;
    request_progress(r);
    return FINISH_NONE;
}

/* r ended: its caller hears it, its followers go on without it, its pin goes, and it
 * leaves the batch - or stays as the job of its post-generation checkpoint. */
static void end_request(chat_engine *e, request *r, int how, const char *error) {
    request_spec_release(e, r);
    if (how == FINISH_ERROR && !error) error = r->fail;
    request_finish(e, r, how, error); /* the phase is DONE or FAILED from here: r leads no one */
    request_release_followers(e, r);
    pc_release(e->pc, &r->hit);
    /* the store counts what checkpoints gave; single flight has its own counter */
    pc_note_request(e->pc, r->r.prompt_tokens, r->r.reused_tokens - r->r.shared_tokens, r->r.computed_tokens);
    e->unflushed = 1;
    if ((how == FINISH_EOG || how == FINISH_LENGTH || how == FINISH_STOP) && request_start_post_job(e, r)) return;
    act_remove(e, r);
    request_free(r);
}

/* A post-generation job is done (or dropped). */
static void end_post_job(chat_engine *e, request *r) {
    r->r.phase = GEN_DONE;
    request_release_followers(e, r);
    act_remove(e, r);
    request_free(r);
}

/* ---------------------------------------------------------------- one step */

/* Where r's next slice must end: a position a follower waits for (it takes a copy of
 * the live state there), its second checkpoint mark ahead, or the end of its prompt.
 * The first mark ahead, when the slice passes it, is captured inside the slice
 * (*capture: its position, else 0): a separate pass over the weights for the few
 * tokens before it (the start of the last user message sits a handful of tokens after
 * a restored system prompt) would cost as much as a decode step. */
static int slice_end(const chat_engine *e, const request *r, int *capture) {
    const int done = r->state->n_past;
    int end = r->n_prompt, first = 0;
    for (int i = 0; i < e->n_act; i++) {
        const request *f = e->act[i];
        if (f->leader == r && f->flight_pos > done && f->flight_pos < end) end = f->flight_pos;
    }
    if (request_uses_cache(e, r))
        for (int i = r->next_mark; i < r->n_marks && r->marks[i].pos < end; i++)
            if (r->marks[i].pos > done) {
                if (first) {
                    end = r->marks[i].pos;
                    break;
                }
                first = r->marks[i].pos;
            }
    *capture = first;
    return end;
}

/* Row i's capture blob, allocated on first use. 0 when out of memory. */
static int capture_room(chat_engine *e, int i) {
    if (!e->capture[i]) e->capture[i] = malloc(sizeof(float) * (e->m->rec_floats ? e->m->rec_floats : 1));
    return e->capture[i] != NULL;
}

/* an injected fault (engine_config.faults): r's row breaks the pass it is in */
static int failing(const chat_engine *e, const request *r) {
    const engine_faults *f = e->cfg.faults;
    return f && f->break_row && f->break_row(f->ud, r->s.session, r->r.generated_tokens);
}

/* r feeds the model one token a step, or more (its reasoning's forced end) */
static int decoding(const request *r) { return r->r.phase == GEN_GENERATING || r->r.phase == GEN_THINKING; }

/* r's next decode row is a verify row: it speculates and feeds one sampled token. The
 * end of the reasoning that a spent thinking budget forces in goes in a plain row, and
 * drafting resumes after it. */
static int verifying(const request *r) { return r->spec && r->n_feed == 1; }

/* How many tokens r may draft after its last one: n_max, as many as it may still generate
 * after the step's own token, and, while a thinking budget counts, no draft past the
 * budget: the drafts are the reasoning tokens the budget still allows, and the model's
 * token after them is the one the budget replaces with the end of the reasoning
 * (after_verify), so a step reaches the budget's end and no further. */
static int draft_room(const chat_engine *e, const request *r) {
    int want = failing(e, r) ? 0 : r->spec->n_max;
    if (r->s.max_tokens > 0 && r->s.max_tokens - r->r.generated_tokens - 1 < want)
        want = r->s.max_tokens - r->r.generated_tokens - 1;
    if (r->close_ids && r->think != THINK_OVER) {
        /* inside the block, the step's token j is reasoning while think_tokens + j < budget;
         * before it opens, its first token may be the opening marker, which does not count */
        const int left = r->s.thinking_budget - r->think_tokens + (r->think == THINK_MAY_OPEN);
        if (left < want) want = left;
    }
    return want > 0 ? want : 0;
}

/* The speculating decoding requests draft their next tokens, all of them in the same head
 * passes (draft_room each). A failed pass leaves the drafts made before it. */
static void draft_rows(chat_engine *e) {
    int n = 0;
    for (int i = 0; i < e->n_act; i++) n += decoding(e->act[i]) && verifying(e->act[i]);
    if (n == 0) return;
    spec_seq *sp[n];
    seq_state *st[n];
    sampler *smp[n];
    int want[n];
    n = 0;
    for (int i = 0; i < e->n_act; i++) {
        request *r = e->act[i];
        if (!decoding(r) || !verifying(r)) continue;
        r->spec->tokens[0] = r->feed[0];
        want[n] = draft_room(e, r);
        sp[n] = r->spec, st[n] = r->state, smp[n] = &r->smp;
        n++;
    }
    spec_draft(sp, st, smp, want, n, &e->arena);
}

/* What a prefill slice of k tokens after `done` costs (chat_impl.h cost_token) */
static double slice_cost(const chat_engine *e, int done, int k) {
    return (double)k * (e->cost_token + e->cost_position * ((double)done + (k + 1) / 2.0));
}

/* The most tokens, at most k, of a slice after `done` that cost at most `left` (at least
 * one when `first`: a step always moves the prompt on). */
static int slice_within(const chat_engine *e, int done, int k, double left, int first) {
    if (slice_cost(e, done, k) <= left) return k;
    int lo = 0, hi = k; /* slice_cost(lo) <= left < slice_cost(hi) */
    while (hi - lo > 1) {
        const int mid = lo + (hi - lo) / 2;
        if (slice_cost(e, done, mid) <= left) lo = mid;
        else hi = mid;
    }
    return lo > 0 || !first ? lo : 1;
}

/* The image run of r's prompt that holds position `at` or comes first after it; NULL: none. */
static const image_span *span_from(const request *r, int at) {
    for (int i = 0; i < r->n_spans; i++)
        if (r->spans[i].end > at) return &r->spans[i];
    return NULL;
}

/* An image slice: rows [done, done + k) of span sp of r are its embeddings, turned by their
 * grid positions (3 ints a row into pos) after the text before the image. */
static void image_slice(const chat_engine *e, const request *r, const image_span *sp, int done, int k, int *pos,
                        batch_seq *row) {
    const prompt_image *im = &r->images[sp->image];
    const int p0 = sp->start + prompt_pos_shift(r->spans, r->n_spans, r->images, sp->start);
    const int first = done - sp->start;
    for (int t = 0; t < k; t++) {
        const int i = first + t;
        pos[3 * t] = p0, pos[3 * t + 1] = p0 + i / im->nx, pos[3 * t + 2] = p0 + i % im->nx;
    }
    row->embd = r->embd[sp->image] + (size_t)first * e->m->n_embd;
    row->rope_pos = pos;
    row->rope_next = p0 + (im->nx > im->ny ? im->nx : im->ny);
}

/* The rows of one step: every decoding request's feed (a speculating one's verify row: its
 * last token and its drafts) first, then prefill slices round robin - starting
 * after the request served last - until prefill_chunk tokens, or the work of that many
 * from position 0 (a slice deep in a long prompt is thinner: its attention reads more).
 * Returns the number of rows; the first *n_decode are decode rows. */
static int plan_rows(chat_engine *e, int *n_decode) {
    static const int broken = -1; /* an injected fault: a token no model has */
    int n = 0;
    for (int i = 0; i < e->n_act; i++) {
        request *r = e->act[i];
        if (!decoding(r)) continue;
        if (verifying(r)) {
            e->rows[n] = spec_verify_row(r->spec, r->state);
            if (failing(e, r)) e->rows[n].tokens = &broken; /* it drafted nothing */
        } else {
            e->rows[n] = (batch_seq){.state = r->state,
                                     .tokens = failing(e, r) ? &broken : r->feed,
                                     .n_tokens = failing(e, r) ? 1 : r->n_feed,
                                     .logits = 1,
                                     .out = r->logits};
        }
        e->row_of[n++] = r;
    }
    *n_decode = n;
    int budget = e->chunk, sliced = 0;
    double work = slice_cost(e, 0, e->chunk);
    uint64_t served = e->rr_last;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < e->n_act && budget > 0; i++) {
            request *r = e->act[i];
            if (r->r.phase != GEN_PREFILL || (pass == 0) != (r->id > e->rr_last)) continue;
            const int done = r->state->n_past;
            int capture;
            int k = slice_end(e, r, &capture) - done;
            if (k > budget) k = budget;
            /* a slice is text or one image's rows, never both */
            const image_span *sp = span_from(r, done);
            if (sp && sp->start <= done && k > sp->end - done) k = sp->end - done;
            if (sp && sp->start > done && k > sp->start - done) k = sp->start - done;
            const int in_image = sp && sp->start <= done;
            if (in_image && !e->row_pos[n] && !(e->row_pos[n] = malloc(sizeof(int) * 3 * (size_t)e->chunk))) continue;
            k = slice_within(e, done, k, work, !sliced);
            if (k <= 0) break;
            const int logits = done + k == r->n_prompt && !r->post;
            e->rows[n] = (batch_seq){.state = r->state, .tokens = r->prompt + done, .n_tokens = k, .logits = logits,
                                     .out = r->logits};
            if (in_image) image_slice(e, r, sp, done, k, e->row_pos[n], &e->rows[n]);
            if (capture > done && capture < done + k) {
                if (capture_room(e, n)) {
                    e->rows[n].capture = capture - done;
                    e->rows[n].n_capture = 1;
                    e->rows[n].capture_rec = &e->capture[n];
                } else { /* no memory for a capture: the slice stops at the mark */
                    k = capture - done;
                    e->rows[n].n_tokens = k;
                    e->rows[n].logits = 0;
                }
            }
            e->row_of[n++] = r;
            budget -= k;
            work -= slice_cost(e, done, k);
            sliced = 1;
            served = r->id;
        }
    e->rr_last = served;
    return n;
}

/* The model pass over the planned rows. When it fails, one row made it fail
 * (model_forward then changes nothing), so every row runs again alone: only the
 * request whose row fails ends, and the others get exactly what the batch gives. */
static void forward_rows(chat_engine *e, int n) {
    const int ok = model_forward(e->m, e->rows, n, &e->arena) == 0;
    for (int i = 0; i < n; i++) e->row_ok[i] = ok;
    if (ok || n == 1) return;
    pthread_mutex_lock(&e->lock);
    e->stats.retried_steps++;
    pthread_mutex_unlock(&e->lock);
    for (int i = 0; i < n; i++) e->row_ok[i] = model_forward(e->m, &e->rows[i], 1, &e->arena) == 0;
}

/* Generated tokens fed to the model: kept for CK_NEXT_TURN. */
static void track_fed(request *r, const int *toks, int n) {
    if (r->n_gen + n > r->cap_gen) {
        int cap = r->cap_gen ? 2 * r->cap_gen : 64;
        while (cap < r->n_gen + n) cap *= 2;
        int *g = realloc(r->gen, sizeof *g * (size_t)cap);
        if (g) r->gen = g, r->cap_gen = cap;
    }
    if (r->n_gen + n <= r->cap_gen) {
        memcpy(r->gen + r->n_gen, toks, sizeof *toks * (size_t)n);
        r->n_gen += n;
    } else { /* cannot track the tokens: no post-generation checkpoint */
        free(r->h);
        r->h = NULL;
    }
}

static void decode_progress(request *r) {
    r->r.decode_passes++;
    if (r->t_first > 0) {
        double ms = request_now_ms() - r->t_first;
        if (ms > 0 && r->r.generated_tokens > 1) r->r.decode_tokens_per_s = (r->r.generated_tokens - 1) / (ms / 1e3);
    }
    request_progress(r);
}

/* A decode row: the tokens fed are kept for CK_NEXT_TURN, the next one sampled and streamed. */
static void after_decode(chat_engine *e, request *r) {
    track_fed(r, r->feed, r->n_feed);
    int how = request_accept_token(e, r, r->drawn);
    decode_progress(r);
    if (how != FINISH_NONE) end_request(e, r, how, NULL);
}

/* A verify row: the step's tokens one after the other, each as plain decoding takes it -
 * the state had consumed verify rows 0..i when token i was chosen - through the same
 * reasoning split and stops, until one ends the request or the thinking budget replaces
 * it with the end of the reasoning (r->feed then holds that, for the next step's plain
 * row); the state keeps those rows and no more. */
static void after_verify(chat_engine *e, request *r) {
    spec_seq *sp = r->spec;
    int how = FINISH_NONE, keep = 1;
    for (int i = 0; i < r->n_step; i++) {
        track_fed(r, &sp->tokens[i], 1);
        r->state->n_past = sp->pos0 + i + 1; /* what accept_token's context check sees */
        how = request_accept_token(e, r, r->step_tokens[i]);
        keep = i + 1;
        if (how != FINISH_NONE) break;
        if (r->n_feed != 1 || r->feed[0] != r->step_tokens[i]) break; /* the budget's forced end */
    }
    spec_keep(sp, r->state, keep);
    r->r.drafted_tokens += sp->n_draft;
    r->r.accepted_tokens += r->n_step - 1;
    decode_progress(r);
    if (how != FINISH_NONE) end_request(e, r, how, NULL);
}

/* A prefill slice of k tokens: checkpoint, hand over to followers; at the end of the
 * prompt, the first token (or, for a next-turn job, its save and its end). */
static void after_slice(chat_engine *e, request *r, int k) {
    const int at_end = r->state->n_past == r->n_prompt;
    if (r->post) {
        pthread_mutex_lock(&e->lock);
        e->stats.post_tokens += (uint64_t)k;
        pthread_mutex_unlock(&e->lock);
        request_checkpoint_mark(e, r, 0);
        request_hand_over(e, r);
        if (at_end) end_post_job(e, r);
        return;
    }
    r->r.computed_tokens += k;
    r->r.prefill_passes++;
    r->r.prefill_done = r->state->n_past;
    if (!at_end) {
        request_checkpoint_mark(e, r, 0);
        request_hand_over(e, r);
        request_progress(r);
        return;
    }
    double ms = request_now_ms() - r->t_prefill;
    if (ms > 0) r->r.prefill_tokens_per_s = r->r.computed_tokens / (ms / 1e3);
    request_hand_over(e, r); /* before the state moves on */
    r->r.phase = request_decode_phase(r);
    int how = request_accept_token(e, r, request_sample(e, r)); /* before the report: it may open a reasoning block */
    request_progress(r);
    request_checkpoint_mark(e, r, 1); /* CK_PROMPT_END after the first token is out: not in its latency */
    if (how != FINISH_NONE) end_request(e, r, how, NULL);
}

static void row_failed(chat_engine *e, request *r) {
    if (r->post) end_post_job(e, r);
    else
        end_request(e, r, FINISH_ERROR,
                    r->r.phase == GEN_GENERATING || r->r.phase == GEN_THINKING ? "the model failed while generating"
                                                                               : "the model failed on the prompt");
}

/* The decode rows' next tokens. Each draw reads its row's whole logits (1 MB for a
 * 248k vocabulary, 0.06-0.2 ms), so the rows' draws run on the pool rather than one
 * after the other on this thread while the pool waits. Each request has its own sampler
 * and logits: the draws share nothing. */
static void sample_rows(void *arg, int ith, int nth) {
    chat_engine *e = arg;
    (void)nth;
    request *r = e->row_of[ith];
    if (!e->row_ok[ith]) return;
    if (verifying(r)) r->n_step = request_sample_step(e, r);
    else r->drawn = request_sample(e, r);
}

/* Before a step's plan: each prefilling request that stands at an image has its rows
 * (encoded now, unless the engine remembers them); one whose image fails ends. The
 * encoder runs here, between steps, so a step's decoding waits for it once. */
static void prepare_images(chat_engine *e) {
    for (int i = e->n_act - 1; i >= 0; i--) {
        request *r = e->act[i];
        if (r->r.phase != GEN_PREFILL || !r->n_spans) continue;
        const image_span *sp = span_from(r, r->state->n_past);
        if (!sp || sp->start > r->state->n_past || request_image_rows(e, r, sp->image) == 0) continue;
        if (r->post) end_post_job(e, r);
        else end_request(e, r, FINISH_ERROR, r->fail);
    }
}

/* One step: plan, one model pass, then each row's request takes its result. Ending one
 * request touches no other row's request (followers are never in a step's rows). */
static void step(chat_engine *e) {
    int n_decode, n_verify = 0;
    draft_rows(e);
    prepare_images(e);
    const int n = plan_rows(e, &n_decode);
    if (n == 0) return;
    forward_rows(e, n);
    pool_run_n(sample_rows, e, n_decode); /* (one row runs on this thread, none is no job) */
    int verify[n_decode > 0 ? n_decode : 1]; /* after_* changes what verifying() says */
    for (int i = 0; i < n_decode; i++) n_verify += verify[i] = verifying(e->row_of[i]);
    pthread_mutex_lock(&e->lock);
    e->stats.steps++;
    e->stats.decode_rows += (uint64_t)n_decode;
    e->stats.prefill_rows += (uint64_t)(n - n_decode);
    e->stats.spec_steps += (uint64_t)n_verify;
    pthread_mutex_unlock(&e->lock);
    for (int i = 0; i < n; i++) {
        request *r = e->row_of[i];
        if (!e->row_ok[i]) row_failed(e, r);
        else if (i < n_decode && verify[i]) after_verify(e, r);
        else if (i < n_decode) after_decode(e, r);
        else {
            request_checkpoint_capture(e, r, &e->rows[i]);
            after_slice(e, r, e->rows[i].n_tokens);
        }
    }
}

/* ---------------------------------------------------------------- the loop */

/* Between steps, under the lock: requests cancelled while queued leave the queue (all
 * of them when the engine closes), queued ones fill free slots, and the worker sleeps
 * while there is nothing to do. Then cancelled requests end, outside the lock (their
 * callbacks may call in). Returns 0 when the engine closes and nothing is left. */
static int take_work(chat_engine *e) {
    request *dropped = NULL, **tail = &dropped;
    int n_stop = 0, closing;
    pthread_mutex_lock(&e->lock);
    for (;;) {
        e->queue_tail = NULL;
        for (request **p = &e->queue; *p;) {
            request *r = *p;
            if (r->cancelled || e->stopping) {
                *p = r->next;
                r->next = NULL;
                *tail = r;
                tail = &r->next;
            } else {
                e->queue_tail = r;
                p = &r->next;
            }
        }
        while (e->queue && e->n_act < e->max_batch) {
            request *r = e->queue;
            e->queue = r->next;
            if (!e->queue) e->queue_tail = NULL;
            r->next = NULL;
            act_add(e, r);
        }
        if (e->n_act || dropped || e->stopping) break;
        pthread_cond_wait(&e->wake, &e->lock);
    }
    closing = e->stopping;
    /* a next-turn job is no caller's to cancel; while closing, only short ones finish */
    for (int i = 0; i < e->n_act; i++) {
        request *r = e->act[i];
        const int stop = r->post ? closing && r->n_prompt - r->state->n_past > POST_MAX_COMPUTE / 8
                                 : r->cancelled || closing;
        if (stop) e->row_of[n_stop++] = r;
    }
    pthread_mutex_unlock(&e->lock);
    while (dropped) {
        request *r = dropped;
        dropped = r->next;
        request_finish(e, r, FINISH_CANCELLED, NULL);
        request_free(r);
    }
    for (int i = 0; i < n_stop; i++) {
        request *r = e->row_of[i];
        if (r->post) end_post_job(e, r);
        else end_request(e, r, FINISH_CANCELLED, NULL);
    }
    return !(closing && e->n_act == 0);
}

/* Requests admitted by take_work start: state, restore, single flight. */
static void begin_admitted(chat_engine *e) {
    for (int i = 0; i < e->n_act; i++) {
        request *r = e->act[i];
        if (r->state) continue;
        const char *error = NULL;
        int how = begin(e, r, &error);
        if (how == FINISH_NONE) continue;
        end_request(e, r, how, how == FINISH_ERROR ? error : NULL);
        i--; /* r left (or stayed as a next-turn job, which the next round skips) */
    }
}

/* a request waits: the flush ends after the checkpoint it is writing */
static int request_waiting(void *arg) {
    chat_engine *e = arg;
    pthread_mutex_lock(&e->lock);
    const int waiting = e->queue != NULL;
    pthread_mutex_unlock(&e->lock);
    return waiting;
}
static int stop_now(void *unused) {
    (void)unused;
    return 1;
}

/* New checkpoints go to the database when nothing runs or waits (off the path of any
 * request's first token), or at least every FLUSH_EVERY_MS under a steady load, so that
 * a crash loses little. A request that arrives meanwhile waits for one checkpoint's
 * write, not the whole flush (after a long prompt that is over a second); under load
 * the overdue flush goes one checkpoint per step. engine_close writes the rest. */
static void maybe_flush(chat_engine *e) {
    if (!e->unflushed || e->cfg.flush_at_close) return;
    pthread_mutex_lock(&e->lock);
    const int idle = e->n_act == 0 && !e->queue;
    pthread_mutex_unlock(&e->lock);
    if (!idle && request_now_ms() - e->last_flush <= FLUSH_EVERY_MS) return;
    int rc = pc_flush(e->pc, idle ? request_waiting : stop_now, e);
    if (rc == 1) return; /* more to write: the next round goes on */
    e->last_flush = request_now_ms();
    e->unflushed = 0;
}

void *engine_worker(void *arg) {
    chat_engine *e = arg;
    e->last_flush = request_now_ms();
    while (take_work(e)) {
        begin_admitted(e);
        step(e);
        maybe_flush(e);
    }
    matmul_thread_release(); /* this thread's share of the kernels' buffers */
    return NULL;
}
