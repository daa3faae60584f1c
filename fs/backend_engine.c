/* backend_engine.c - the filesystem's engine table on top of engine/runtime/chat.h. */
#include <stdio.h>
#include <stdlib.h>

#include "fs/backend.h"

static chat_engine *E(fs_backend *b) { return b->ctx; }

static uint64_t eng_submit(fs_backend *b, const chat_msg *msgs, int n, const gen_settings *s, const gen_callbacks *cb,
                           char *err, size_t errlen) {
    return engine_submit(E(b), msgs, n, s, cb, err, errlen);
}
static void eng_cancel(fs_backend *b, uint64_t id) { engine_cancel(E(b), id); }
static int eng_count(fs_backend *b, const chat_msg *msgs, int n, const gen_settings *s) {
    return engine_count_tokens(E(b), msgs, n, s);
}
static int eng_check_render(fs_backend *b, const chat_msg *msgs, int n, const gen_settings *s, char *err,
                            size_t errlen) {
    return engine_check_render(E(b), msgs, n, s, err, errlen);
}
static int eng_context(fs_backend *b) { return engine_context(E(b)); }
static void eng_forget(fs_backend *b, const char *session) { engine_forget_session(E(b), session); }
static char *eng_stats(fs_backend *b) { return engine_stats_json(E(b)); }
static int eng_usage(fs_backend *b, const char *session, ckpt_usage *out) {
    return engine_session_usage(E(b), session, out);
}
static void eng_defaults(fs_backend *b, gen_settings *s) { engine_settings_defaults(E(b), s); }
static int eng_can_think(fs_backend *b) { return engine_can_think(E(b)); }
static int eng_check_image(fs_backend *b, const void *bytes, size_t len, char *err, size_t errlen) {
    if (!bytes && engine_has_vision(E(b))) return 0;
    return engine_check_image(E(b), bytes, len, err, errlen);
}
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
    *b = (fs_backend){.ctx = b->ctx,
                      .name = "engine",
                      .submit = eng_submit,
                      .cancel = eng_cancel,
                      .count_tokens = eng_count,
                      .check_render = eng_check_render,
                      .context = eng_context,
                      .forget_session = eng_forget,
                      .stats_json = eng_stats,
                      .session_usage = eng_usage,
                      .close = eng_close,
                      .settings_defaults = eng_defaults,
                      .can_think = eng_can_think,
                      .check_image = eng_check_image};
    return b;
}
