/* ckpt_port.c - the store as the engine's checkpoint port (cs_port): each operation of
 * engine/runtime/checkpoint_port.h forwarded to its cs_* function, so the engine knows
 * no SQL and no store type. */
#include "store/ckpt_impl.h"

static int port_attach(void *s, const ckpt_model *m, char *err, size_t errlen) { return cs_attach(s, m, err, errlen); }
static uint64_t port_seed(void *s) { return cs_seed(s); }
static int port_persistent(void *s) { return cs_persistent(s); }
static int port_restore(void *s, const int *t, const uint64_t *h, int n, ckpt_put_rows put, void *ud, void *rec,
                        void *logits, ckpt_hit *hit) {
    return cs_restore(s, t, h, n, put, ud, rec, logits, hit);
}
static void port_release(void *s, ckpt_hit *hit) { cs_release(s, hit); }
static int port_has(void *s, const uint64_t *h, int n) { return cs_has(s, h, n); }
static int port_save(void *s, const int *t, const uint64_t *h, int n, ckpt_get_rows get, void *ud, const void *rec,
                     const void *logits, int kind, const char *session) {
    return cs_save(s, t, h, n, get, ud, rec, logits, kind, session);
}
static int port_flush(void *s, int (*stop)(void *ud), void *ud) {
    return !cs_persistent(s) ? 0 : stop ? cs_flush_until(s, stop, ud) : cs_flush(s);
}
static void port_forget_session(void *s, const char *session) { cs_forget_session(s, session); }
static void port_retire(void *s, const uint64_t *h, int n, const char *session, const char *kinds) {
    cs_retire(s, h, n, session, kinds);
}
static void port_note_request(void *s, int prompt_tokens, int reused, int computed) {
    cs_note_request(s, prompt_tokens, reused, computed);
}
static void port_count_miss(void *s, const char *reason) { cs_count_miss(s, reason); }
static char *port_stats_json(void *s) { return cs_stats_json(s); }
static void port_session_usage(void *s, const char *session, ckpt_usage *out) { cs_session_usage(s, session, out); }

static const ckpt_ops cs_ops = {.attach = port_attach,
                                .seed = port_seed,
                                .persistent = port_persistent,
                                .restore = port_restore,
                                .release = port_release,
                                .has = port_has,
                                .save = port_save,
                                .flush = port_flush,
                                .forget_session = port_forget_session,
                                .retire = port_retire,
                                .note_request = port_note_request,
                                .count_miss = port_count_miss,
                                .stats_json = port_stats_json,
                                .session_usage = port_session_usage};

ckpt_port cs_port(ckpt_store *s) { return (ckpt_port){s ? &cs_ops : NULL, s}; }
