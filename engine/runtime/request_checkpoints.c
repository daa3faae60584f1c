/* request_checkpoints.c - the checkpoints a request restores and places: the longest
 * usable one at its start, one at each mark its prefill reaches (after the slice, or
 * captured inside it), and the next-turn job after its reply (CK_NEXT_TURN), which also
 * retires what the conversation moved past. The scheduler (scheduler.c) decides when;
 * this file does what the prefix cache (prefix_cache.h) is asked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/runtime/chat_impl.h"
#include "engine/base/hash.h"

int request_uses_cache(const chat_engine *e, const request *r) { return e->pc && r->s.checkpoints && r->h; }

/* CHATFS_DEBUG_CKPT=1 traces restores, saves and single flight on stderr. */
int ckpt_debug(void) {
    static int v = -1;
    if (v < 0) v = getenv("CHATFS_DEBUG_CKPT") && *getenv("CHATFS_DEBUG_CKPT") == '1';
    return v;
}

/* At the start: the longest checkpoint of the prompt goes into the state. Returns 1
 * when it came with the logits after the whole prompt (nothing left to compute). */
int request_restore_prompt(chat_engine *e, request *r) {
    if (!request_uses_cache(e, r)) {
        if (e->pc) pc_count_miss(e->pc, "disabled");
        return 0;
    }
    int k = pc_restore(e->pc, r->state, r->prompt, r->h, r->n_prompt, r->logits, &r->hit);
    r->state->pos_shift = prompt_pos_shift(r->spans, r->n_spans, r->images, k); /* the positions are not the count */
    r->r.reused_tokens = k;
    r->r.prefill_done = k;
    r->r.source = r->hit.source;
    snprintf(r->r.miss_reason, sizeof r->r.miss_reason, "%s", r->hit.miss_reason);
    if (ckpt_debug()) {
        fprintf(stderr, "ckpt: #%llu prompt %d tokens, restored %d from %s%s%s; marks", (unsigned long long)r->id,
                r->n_prompt, k, r->hit.source, k ? "" : ", ", r->hit.miss_reason);
        for (int i = 0; i < r->n_marks; i++) fprintf(stderr, " %c@%d", r->marks[i].kind, r->marks[i].pos);
        fputc('\n', stderr);
    }
    while (r->next_mark < r->n_marks && r->marks[r->next_mark].pos <= k) r->next_mark++;
    return k == r->n_prompt && r->hit.has_logits;
}

/* r's mark at position `at`, taken (marks before it were passed by a copy or a
 * restore), or NULL when r has none there. */
static const pc_mark *take_mark(request *r, int at) {
    while (r->next_mark < r->n_marks && r->marks[r->next_mark].pos < at) r->next_mark++;
    if (r->next_mark >= r->n_marks || r->marks[r->next_mark].pos != at) return NULL;
    return &r->marks[r->next_mark++];
}

/* After a slice: a checkpoint when the state stands on r's next mark. The store copies
 * what it keeps; the live state goes on untouched. */
void request_checkpoint_mark(chat_engine *e, request *r, int logits_ready) {
    if (!request_uses_cache(e, r)) return;
    const int at = r->state->n_past;
    const pc_mark *mk = take_mark(r, at);
    if (!mk) return;
    const int with_logits = at == r->n_prompt && logits_ready;
    int rc = pc_save(e->pc, r->state, r->prompt, r->h, at, with_logits ? r->logits : NULL, mk->kind, r->s.session);
    if (ckpt_debug())
        fprintf(stderr, "ckpt: #%llu save (%c) at %d of %d: %d\n", (unsigned long long)r->id, mk->kind, at,
                r->n_prompt, rc);
}

/* After a slice that captured the recurrent state at its mark (the slice went on past
 * it, so the checkpoint cost no pass of its own): the checkpoint of that mark, from
 * the capture and the KV rows below it. */
void request_checkpoint_capture(chat_engine *e, request *r, const batch_seq *row) {
    if (row->n_capture <= 0 || !request_uses_cache(e, r)) return;
    const int at = r->state->n_past - row->n_tokens + row->capture;
    const pc_mark *mk = take_mark(r, at);
    if (!mk) return;
    int rc = pc_save_rec(e->pc, r->state, row->capture_rec[0], r->prompt, r->h, at, mk->kind, r->s.session);
    if (ckpt_debug())
        fprintf(stderr, "ckpt: #%llu save (%c) at %d of %d, captured in a slice to %d: %d\n",
                (unsigned long long)r->id, mk->kind, at, r->n_prompt, r->state->n_past, rc);
}

/* CK_NEXT_TURN after generation: the checkpoint the next turn starts from, the end of this turn
 * as the next prompt will render it. When the conversation so far (prompt + generated
 * tokens) is a prefix of that rendering, the live state only lacks the tail; when it
 * is not (the template drops reasoning from history, or the reply re-tokenizes
 * differently), the longest checkpoint before the divergence is restored and the rest
 * recomputed. Either way r becomes a job that prefills those tokens in slices and saves
 * at their end. Returns 1 when r became that job. */
int request_start_post_job(chat_engine *e, request *r) {
    if (!request_uses_cache(e, r) || !r->state) return 0;
    for (int i = 0; i < r->n_marks; i++) /* the conversation has moved on to this message */
        if (r->marks[i].kind == CK_LAST_USER) pc_retire(e->pc, r->h, r->marks[i].pos, r->s.session);
    int *c = NULL;
    /* a reply that made calls is rendered as the next prompt carries it: its content and calls */
    char *calls = request_calls_json(r);
    const char *said = calls ? r->tcs.reply.content : r->reply.s ? r->reply.s : "";
    int nc = pc_next_turn_prefix(e->m, &r->tmpl, r->msgs, r->n_msgs, said, r->reasoning.s, calls, &c);
    free(calls);
    uint64_t *hc = nc > 0 && nc <= r->state->n_ctx ? malloc(sizeof *hc * ((size_t)nc + 1)) : NULL;
    pc_mark *mk = hc ? malloc(sizeof *mk) : NULL;
    if (!mk) {
        free(c);
        free(hc);
        return 0;
    }
    token_chain_all(pc_seed(e->pc), c, nc, hc);
    const int have = pc_has(e->pc, hc, nc);
    /* what the live state consumed: the prompt, then the generated tokens fed back */
    const int np = r->n_prompt;
    int n_past = r->state->n_past;
    const int same = n_past <= nc && pc_common_prefix(r->prompt, np, c, nc) == np &&
                     pc_common_prefix(r->gen, r->n_gen, c + np, nc - np) == n_past - np;
    if (!have && !same) {
        ckpt_hit hit;
        n_past = pc_restore(e->pc, r->state, c, hc, nc, NULL, &hit);
        pc_release(e->pc, &hit);
    }
    pthread_mutex_lock(&e->lock);
    const int limit = e->stopping ? POST_MAX_COMPUTE / 8 : POST_MAX_COMPUTE;
    pthread_mutex_unlock(&e->lock);
    if (ckpt_debug())
        fprintf(stderr, "ckpt: #%llu (c) next turn prefix %d tokens, stored %d, live state %s, compute from %d\n",
                (unsigned long long)r->id, nc, have, same ? "continues" : "diverges", n_past);
    /* from here the state consumed c[0..n_past): c is the job's prompt */
    free(r->prompt);
    r->tmpl.ids = NULL, r->tmpl.n_ids = 0; /* they were the prompt's */
    r->prompt = c;
    r->n_prompt = nc;
    free(r->h);
    r->h = hc;
    free(r->marks);
    *mk = (pc_mark){nc, CK_NEXT_TURN};
    r->marks = mk;
    r->n_marks = 1;
    r->next_mark = 0;
    if (request_images_locate(r) != 0) return 0;
    if (!have && !same) r->state->pos_shift = prompt_pos_shift(r->spans, r->n_spans, r->images, n_past);
    if (have || nc - n_past > limit) return 0;
    if (n_past == nc) { /* nothing to feed */
        request_checkpoint_mark(e, r, 0);
        return 0;
    }
    r->post = 1;
    r->r.phase = GEN_PREFILL;
    memset(&r->cb, 0, sizeof r->cb); /* on_done came: no caller any more */
    pthread_mutex_lock(&e->lock);
    e->stats.post_jobs++;
    pthread_mutex_unlock(&e->lock);
    return 1;
}
