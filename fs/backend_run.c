/* backend_run.c - one request on any backend, waited for (see backend.h): for the
 * command line (`chatfs ask` without a mount), which has no filesystem to stream into. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/backend.h"

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    gen_report rep;
    char *error;
    void (*on_text)(void *ud, const char *text, size_t len);
    void (*on_reasoning)(void *ud, const char *text, size_t len);
    void *ud;
} waiter;

static void run_text(void *ud, const char *text, size_t len) {
    waiter *w = ud;
    if (w->on_text) w->on_text(w->ud, text, len);
}

static void run_reasoning(void *ud, const char *text, size_t len) {
    waiter *w = ud;
    if (w->on_reasoning) w->on_reasoning(w->ud, text, len);
}

static void run_progress(void *ud, const gen_report *r) { (void)ud, (void)r; }

static void run_done(void *ud, const gen_report *r, const char *error) {
    waiter *w = ud;
    pthread_mutex_lock(&w->mu);
    w->rep = *r;
    /* the backend's string is gone after this call: one of the names chat.h gives it */
    static const char *const sources[] = {"ram", "disk", "none", "server"};
    w->rep.source = NULL;
    for (int i = 0; r->source && i < 4; i++)
        if (!strcmp(r->source, sources[i])) w->rep.source = sources[i];
    w->error = error ? strdup(error) : NULL;
    if (error && !w->error) w->error = strdup("failed");
    w->done = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

int backend_run(fs_backend *b, const chat_msg *msgs, int n, const gen_settings *s,
                void (*on_text)(void *ud, const char *text, size_t len),
                void (*on_reasoning)(void *ud, const char *text, size_t len), void *ud, gen_report *out, char *err,
                size_t errlen) {
    waiter w = {.on_text = on_text, .on_reasoning = on_reasoning, .ud = ud};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    gen_callbacks cb = {.on_text = run_text, .on_progress = run_progress, .on_done = run_done, .ud = &w,
                        .on_reasoning = run_reasoning};
    int rc = -1, e = 0;
    errno = 0;
    if (!b->submit(b, msgs, n, s, &cb, err, errlen)) e = errno ? errno : EIO;
    else {
        pthread_mutex_lock(&w.mu);
        while (!w.done) pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        if (out) *out = w.rep;
        if (w.error) snprintf(err, errlen, "%s", w.error), e = EIO;
        else rc = 0;
    }
    free(w.error);
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    if (rc) errno = e;
    return rc;
}
