/* single_flight.c - a request whose prompt shares a prefix, longer than any checkpoint
 * gives it, with a request computing that prefix right now waits (GEN_QUEUED) until
 * that leader stands at the end of the shared part (its slices stop there), takes a
 * copy of the leader's state and goes on by itself. Six conversations sent at once
 * with one system prompt compute it once. The scheduler (scheduler.c) calls these
 * between steps. */
#include <stdio.h>

#include "engine/runtime/chat_impl.h"

/* a shorter shared part is computed rather than waited for */
#define FLIGHT_MIN_TOKENS 32

/* f takes a copy of its leader's state, which stands at f's flight position now. */
static void take_over(chat_engine *e, request *f) {
    const request *l = f->leader;
    const int from = f->state->n_past;
    f->leader = NULL;
    f->r.phase = GEN_PREFILL;
    if (state_copy(f->state, l->state) != 0) return; /* out of memory: it computes the prefix itself */
    f->r.reused_tokens = f->flight_pos;
    f->r.shared_tokens = f->flight_pos - from;
    f->r.prefill_done = f->flight_pos;
    pthread_mutex_lock(&e->lock);
    e->stats.flight_requests++;
    e->stats.flight_tokens += (uint64_t)(f->flight_pos - from);
    pthread_mutex_unlock(&e->lock);
    if (ckpt_debug())
        fprintf(stderr, "flight: #%llu copied #%llu at %d (had %d)\n", (unsigned long long)f->id,
                (unsigned long long)l->id, f->flight_pos, from);
}

/* Looks for a request computing r's prompt beyond what r has: one prefilling (not
 * waiting itself), with checkpoints on, not yet past the shared part. Worth waiting for
 * when it shares FLIGHT_MIN_TOKENS more than r holds, or any more when it is already as
 * far as r (then it gets there no later than r would: a follow-up sent while its
 * conversation's next-turn job runs waits for that job). The longest share wins. r keeps its
 * last prompt token to compute itself: it needs the logits after it. Returns 1 when r
 * follows one (or took its state at once: it stood right there). */
int request_try_follow(chat_engine *e, request *r) {
    if (e->cfg.no_single_flight || !request_uses_cache(e, r)) return 0;
    request *best = NULL;
    int best_pos = 0;
    const int have = r->state->n_past;
    for (int i = 0; i < e->n_act; i++) {
        request *a = e->act[i];
        if (a == r || !a->state || a->leader || a->r.phase != GEN_PREFILL || !request_uses_cache(e, a)) continue;
        const int pos = pc_common_prefix(r->prompt, r->n_prompt - 1, a->prompt, a->n_prompt);
        const int gain = pos - have;
        if (pos < a->state->n_past || gain <= 0 || (gain < FLIGHT_MIN_TOKENS && a->state->n_past < have) ||
            pos <= best_pos)
            continue;
        best = a;
        best_pos = pos;
    }
    if (!best) return 0;
    r->leader = best;
    r->flight_pos = best_pos;
    r->r.phase = GEN_QUEUED;
    if (ckpt_debug())
        fprintf(stderr, "flight: #%llu follows #%llu to %d (it is at %d)\n", (unsigned long long)r->id,
                (unsigned long long)best->id, best_pos, best->state->n_past);
    if (best->state->n_past == best_pos) take_over(e, r);
    return 1;
}

/* After l's slice: its followers waiting for this position take their copies. */
void request_hand_over(chat_engine *e, request *l) {
    for (int i = 0; i < e->n_act; i++) {
        request *f = e->act[i];
        if (f->leader != l) continue;
        if (f->flight_pos == l->state->n_past) take_over(e, f);
        else if (f->flight_pos < l->state->n_past) { /* cannot happen: slices stop there; go on alone */
            f->leader = NULL;
            f->r.phase = GEN_PREFILL;
        } else continue;
        request_progress(f);
    }
}

/* l ends or stops prefilling: its followers go on alone, or follow another. */
void request_release_followers(chat_engine *e, request *l) {
    for (int i = 0; i < e->n_act; i++) {
        request *f = e->act[i];
        if (f->leader != l) continue;
        f->leader = NULL;
        if (!request_try_follow(e, f)) f->r.phase = GEN_PREFILL;
        request_progress(f);
    }
}
