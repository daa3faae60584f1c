/* backend_engine.c - the filesystem's engine table on top of engine/chat.h. */
#include <stdio.h>
#include <stdlib.h>

#include "fs/backend.h"

static chat_engine *E(fs_backend *b) { return b->ctx; }

static uint64_t eng_submit(fs_backend *b, const chat_msg *msgs, int n, const gen_settings *s, const gen_callbacks *cb,
                           char *err, size_t errlen) {
    return engine_submit(E(b), msgs, n, s, cb, err, errlen);
}
static void eng_cancel(fs_backend *b, uint64_t id) { engine_cancel(E(b), id); }
static int eng_count(fs_backend *b, const chat_msg *msgs, int n, const char *tmpl) {
    return engine_count_tokens(E(b), msgs, n, tmpl);
}
static int eng_context(fs_backend *b) { return engine_context(E(b)); }
static void eng_forget(fs_backend *b, const char *session) { engine_forget_session(E(b), session); }
static char *eng_stats(fs_backend *b) { return engine_stats_json(E(b)); }
static void eng_close(fs_backend *b) {
    engine_close(E(b));
    free(b);
}

fs_backend *backend_engine_open(const engine_config *cfg, char *err, size_t errlen) {
    fs_backend *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    b->ctx = engine_open(cfg, err, errlen);
    if (!b->ctx) {
        free(b);
        return NULL;
    }
    *b = (fs_backend){b->ctx, "engine", eng_submit, eng_cancel, eng_count, eng_context, eng_forget, eng_stats, eng_close, NULL};
    return b;
}
