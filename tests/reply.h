/* reply.h - one request through engine_submit, waited for: the answer and the reasoning
 * apart (on_text, on_reasoning), how they interleave, the phases on_progress showed, the
 * report. For the tests of thinking models. */
#ifndef CHATFS_TESTS_REPLY_H
#define CHATFS_TESTS_REPLY_H

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "engine/runtime/chat.h"

typedef struct {
    char answer[8192], reasoning[8192];
    size_t n_answer, n_reasoning;
    int reasoning_after_answer; /* on_reasoning came after some on_text */
    int saw_thinking;           /* a progress report in GEN_THINKING */
    int thinking_after_generating; /* GEN_THINKING after GEN_GENERATING */
    int saw_generating;
    int thinking_report_tokens; /* reasoning_tokens of the last GEN_THINKING report */
    gen_report report;
    char error[256];
    int done;
    pthread_mutex_t lock;
    pthread_cond_t cv;
} test_reply;

static void tr_text(void *ud, const char *t, size_t n) {
    test_reply *r = ud;
    if (r->n_answer + n < sizeof r->answer) memcpy(r->answer + r->n_answer, t, n), r->n_answer += n;
    r->answer[r->n_answer] = 0;
}
static void tr_reasoning(void *ud, const char *t, size_t n) {
    test_reply *r = ud;
    if (r->n_answer) r->reasoning_after_answer = 1;
    if (r->n_reasoning + n < sizeof r->reasoning) memcpy(r->reasoning + r->n_reasoning, t, n), r->n_reasoning += n;
    r->reasoning[r->n_reasoning] = 0;
}
static void tr_progress(void *ud, const gen_report *g) {
    test_reply *r = ud;
    if (g->phase == GEN_THINKING) {
        r->saw_thinking = 1;
        r->thinking_report_tokens = g->reasoning_tokens;
        if (r->saw_generating) r->thinking_after_generating = 1;
    }
    if (g->phase == GEN_GENERATING) r->saw_generating = 1;
}
static void tr_done(void *ud, const gen_report *g, const char *error) {
    test_reply *r = ud;
    pthread_mutex_lock(&r->lock);
    r->report = *g;
    if (error) snprintf(r->error, sizeof r->error, "%s", error);
    r->done = 1;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->lock);
}

/* Runs the request and waits: 0, or -1 with the reason in r->error. */
static inline int reply_run(chat_engine *e, const chat_msg *msgs, int n, const gen_settings *s, test_reply *r) {
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->cv, NULL);
    const gen_callbacks cb = {
        .on_text = tr_text, .on_progress = tr_progress, .on_done = tr_done, .ud = r, .on_reasoning = tr_reasoning};
    int rc = -1;
    if (engine_submit(e, msgs, n, s, &cb, r->error, sizeof r->error)) {
        pthread_mutex_lock(&r->lock);
        while (!r->done) pthread_cond_wait(&r->cv, &r->lock);
        pthread_mutex_unlock(&r->lock);
        rc = r->error[0] ? -1 : 0;
    }
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->lock);
    return rc;
}

#endif
