/* conv.c - a conversation in memory: its turns, its reply stream, its error file, and
 * saving its turns; with the clocks and buffers every part of the filesystem uses.
 *
 * Separate because every other part (generation, views, commits, the operations in
 * chatfs.c) works on these objects and this layer calls none of them. The list of
 * conversations and what names point at stay in chatfs.c. Callers hold fs->mu. */
#include "fs/chatfs_impl.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- small helpers ---- */

int64_t cfs_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t cfs_mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* grows *p (capacity *cap) to hold need bytes; 0 or -ENOMEM / -EFBIG */
int cfs_reserve(char **p, size_t *cap, size_t need) {
    if (need > MAX_BUFFER) return -EFBIG;
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    char *q = realloc(*p, c);
    if (!q) return -ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

char *cfs_memdup0(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (p) {
        if (n) memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

/* Texts are stored without the one newline that editors and echo add; files show it. */
size_t cfs_strip_newline(const char *s, size_t n) { return n && s[n - 1] == '\n' ? n - 1 : n; }

void cfs_set_error(conv *c, const char *fmt, ...) {
    char tmp[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    free(c->error);
    /* the error file is text like the rest: what a message quotes of the input (an unknown
     * ctl word, cut at 40 bytes) may not be UTF-8, so bad bytes read as U+FFFD */
    size_t n;
    c->error = cfs_utf8_repair(tmp, strlen(tmp), &n);
    c->mtime_hist = cfs_now_ns();
    if (c->fs) cfs_log(c->fs, 2, "%s: error: %s", c->name, c->error ? c->error : tmp);
}

void cfs_log(chatfs *fs, int level, const char *fmt, ...) {
    if (!fs->log || level > fs->log_level) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(fs->log, "chatfs: %s\n", line); /* one call: lines from several threads stay whole */
    fflush(fs->log);
}

void cfs_clear_error(conv *c) {
    if (!c->error) return;
    free(c->error);
    c->error = NULL;
    c->mtime_hist = cfs_now_ns();
}

/* ---- streams ---- */

stream *cfs_stream_new(void) {
    stream *s = calloc(1, sizeof *s);
    if (s) s->refs = 1;
    return s;
}

void cfs_stream_unref(stream *s) {
    if (s && --s->refs == 0) {
        free(s->buf);
        free(s);
    }
}

int cfs_stream_add(stream *s, const char *t, size_t n) {
    if (cfs_reserve(&s->buf, &s->cap, s->len + n + 1)) return -1;
    memcpy(s->buf + s->len, t, n);
    s->len += n;
    return 0;
}

/* a finished stream of the text (may be NULL): the text and a newline */
static stream *finished_stream(const char *text, size_t len) {
    stream *s = cfs_stream_new();
    if (!s) return NULL;
    s->done = 1;
    if (text && len) {
        cfs_stream_add(s, text, len);
        cfs_stream_add(s, "\n", 1);
    }
    return s;
}

/* the reply file of a finished turn: its text and a newline */
stream *cfs_stream_of_turn(const turn *t) { return finished_stream(t ? t->text : NULL, t ? t->len : 0); }

/* ---- conversations ---- */

void cfs_conv_unref(conv *c) {
    if (!c || --c->refs > 0) return;
    for (int i = 0; i < c->n_turns; i++) cfs_turn_free(&c->turns[i]);
    free(c->turns);
    cfs_attach_free_all(c);
    free(c->name);
    free(c->system);
    free(c->error);
    free(c->fail);
    free(c->refused);
    settings_free(&c->st);
    cfs_stream_unref(c->reply);
    cfs_stream_unref(c->thinking);
    free(c);
}

void cfs_turn_free(turn *t) {
    free(t->text);
    free(t->reasoning);
    free(t->calls);
    free(t->call_id);
    t->text = t->reasoning = t->calls = t->call_id = NULL;
}

const char *cfs_turn_role(const turn *t) { return t->user ? "user" : t->tool ? "tool" : "assistant"; }

int cfs_turn_role_code(const turn *t) { return t->user ? ROLE_USER : t->tool ? ROLE_TOOL : ROLE_ASSISTANT; }

int cfs_turn_load(conv *c, const convs_turn *t) {
    if (cfs_turn_push(c, t->user, t->text, t->len, t->complete, t->mtime_ns)) return -1;
    turn *u = &c->turns[c->n_turns - 1];
    if (!t->user && t->reasoning && t->reasoning_len && cfs_set_reasoning(u, t->reasoning, t->reasoning_len))
        return -1;
    u->tool = t->tool;
    if (t->tool_calls && !(u->calls = strdup(t->tool_calls))) return -1;
    if (t->tool_call_id && !(u->call_id = strdup(t->tool_call_id))) return -1;
    return 0;
}

int cfs_call_result(const conv *c, int k, const char *id) {
    for (int i = k + 1; i < c->n_turns && c->turns[i].tool; i++)
        if (c->turns[i].call_id && !strcmp(c->turns[i].call_id, id)) return i;
    return -1;
}

static int answered(const conv *c, int k, const char *id) { return cfs_call_result(c, k, id) >= 0; }

/* the reply whose calls the trailing tool turns answer: the turn before them, when it is
 * an assistant turn that made calls; -1 otherwise */
static int calling_turn(const conv *c) {
    int k = c->n_turns - 1;
    while (k >= 0 && c->turns[k].tool) k--;
    return k >= 0 && !c->turns[k].user && c->turns[k].calls ? k : -1;
}

/* the id of the first call of the reply before the trailing tool turns that none answers */
static char *next_call_id(const conv *c) {
    int k = calling_turn(c);
    if (k < 0) return NULL;
    cJSON *calls = cJSON_Parse(c->turns[k].calls);
    char *id = NULL;
    const cJSON *call;
    cJSON_ArrayForEach(call, calls) {
        const char *cid = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(call, "id"));
        if (cid && !answered(c, k, cid)) {
            id = strdup(cid);
            break;
        }
    }
    cJSON_Delete(calls);
    return id;
}

int cfs_turn_push_role(conv *c, int role, const char *text, size_t len, int complete, int64_t mtime) {
    char *id = role == ROLE_TOOL ? next_call_id(c) : NULL;
    int rc = cfs_turn_push(c, role == ROLE_USER, text, len, complete, mtime);
    if (rc) {
        free(id);
        return rc;
    }
    c->turns[c->n_turns - 1].tool = role == ROLE_TOOL;
    c->turns[c->n_turns - 1].call_id = id;
    return 0;
}

int cfs_calls_waiting(const conv *c, int *n_calls, int *missing) {
    int k = calling_turn(c);
    if (k < 0) return -1;
    cJSON *calls = cJSON_Parse(c->turns[k].calls);
    *n_calls = *missing = 0;
    const cJSON *call;
    cJSON_ArrayForEach(call, calls) {
        const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(call, "id"));
        (*n_calls)++;
        *missing += !id || !answered(c, k, id);
    }
    cJSON_Delete(calls);
    return *missing ? k : -1;
}

int cfs_answer_missing_calls(conv *c, int k, const char *why) {
    cJSON *calls = cJSON_Parse(c->turns[k].calls);
    const cJSON *call;
    int rc = 0;
    cJSON_ArrayForEach(call, calls) {
        const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(call, "id"));
        if (!id || answered(c, k, id)) continue;
        char *copy = strdup(id);
        if (!copy || (rc = cfs_turn_push(c, 0, why, strlen(why), 1, cfs_now_ns()))) {
            free(copy);
            rc = -ENOMEM;
            break;
        }
        c->turns[c->n_turns - 1].tool = 1;
        c->turns[c->n_turns - 1].call_id = copy;
    }
    cJSON_Delete(calls);
    return rc;
}

const char *cfs_turn_text(const conv *c, int i, size_t *len) {
    const struct gen *g = c->gen;
    if (g && g->turn == i && !g->detached) {
        *len = g->s->len - (g->s->done && g->s->len ? 1 : 0);
        return g->s->buf ? g->s->buf : "";
    }
    *len = c->turns[i].len;
    return c->turns[i].text;
}

const char *cfs_turn_reasoning(const conv *c, int i, size_t *len) {
    const struct gen *g = c->gen;
    if (g && g->turn == i && !g->detached) {
        *len = g->ts->len - (g->ts->done && g->ts->len ? 1 : 0);
        return g->ts->buf ? g->ts->buf : "";
    }
    *len = c->turns[i].reasoning ? c->turns[i].reasoning_len : 0;
    return c->turns[i].reasoning ? c->turns[i].reasoning : "";
}

int cfs_set_reasoning(turn *t, const char *text, size_t len) {
    char *p = cfs_memdup0(text, len);
    if (!p) return -ENOMEM;
    free(t->reasoning);
    t->reasoning = p;
    t->reasoning_len = len;
    return 0;
}

int cfs_turn_push(conv *c, int user, const char *text, size_t len, int complete, int64_t mtime) {
    if (c->n_turns == c->cap_turns) {
        int cap = c->cap_turns ? 2 * c->cap_turns : 8;
        turn *p = realloc(c->turns, cap * sizeof *p);
        if (!p) return -ENOMEM;
        c->turns = p;
        c->cap_turns = cap;
    }
    char *t = cfs_memdup0(text, len), *r = user ? NULL : strdup("");
    if (!t || (!user && !r)) {
        free(t);
        return -ENOMEM;
    }
    c->turns[c->n_turns++] = (turn){user, t, len, complete, mtime, r, 0, 0, NULL, NULL};
    return 0;
}

void cfs_turns_truncate(conv *c, int n) {
    while (c->n_turns > n) cfs_turn_free(&c->turns[--c->n_turns]);
}

static const turn *last_assistant(const conv *c) {
    for (int i = c->n_turns - 1; i >= 0; i--)
        if (!c->turns[i].user) return &c->turns[i];
    return NULL;
}

/* The reply file shows the last assistant turn again (after an edit or a load). */
void cfs_reset_reply(conv *c) {
    free(c->refused);
    c->refused = NULL;
    const turn *t = last_assistant(c);
    c->rep_turn = t ? (int)(t - c->turns) + 1 : 0;
    stream *s = cfs_stream_of_turn(t), *ts = finished_stream(t ? t->reasoning : NULL, t ? t->reasoning_len : 0);
    if (s) {
        cfs_stream_unref(c->reply);
        c->reply = s;
    }
    if (ts) {
        cfs_stream_unref(c->thinking);
        c->thinking = ts;
    }
}

int cfs_busy(const conv *c) { return c->gen != NULL; }

void cfs_refuse_message(conv *c, const char *why) {
    stream *s = cfs_stream_new(), *ts = cfs_stream_new();
    char *p = strdup(why && why[0] ? why : "refused");
    if (!s || !ts || !p) {
        cfs_stream_unref(s), cfs_stream_unref(ts), free(p);
        return;
    }
    s->done = s->failed = ts->done = ts->failed = 1; /* empty, and a read gets EIO */
    cfs_stream_unref(c->reply);
    c->reply = s;
    cfs_stream_unref(c->thinking);
    c->thinking = ts;
    free(c->refused);
    c->refused = p;
    c->mtime_hist = cfs_now_ns();
}

/* ---- the database refused a change ----
 *
 * A change the database did not take did not happen: the operation fails with ENOSPC
 * (the disk is full) or EIO, the reason goes to the error file, and the conversation
 * in memory is put back to what the database holds, so what the files show is what a
 * remount would show. */

int cfs_store_failed(conv *c, int rc, const char *what, const char *err) {
    if (rc == -ENOSPC)
        cfs_set_error(c, "the disk is full: %s was not stored (%s); free some space and try again", what, err);
    else if (rc == -EAGAIN)
        cfs_set_error(c, "the database is busy (another process holds it): %s was not stored (%s); try again when "
                      "it lets go", what, err);
    else
        cfs_set_error(c, "the database failed: %s was not stored (%s)", what, err);
    return rc;
}

static int reload_conv(void *ud, int64_t id, const char *name, const char *system, const char *settings,
                       int64_t mtime_ns) {
    (void)id, (void)name, (void)settings, (void)mtime_ns;
    conv *c = ud;
    char *p = strdup(system ? system : "");
    if (!p) return -1;
    if (strcmp(p, c->system)) c->mtime_system = cfs_now_ns();
    free(c->system);
    c->system = p;
    return 0;
}

static int reload_turn(void *ud, int64_t id, int idx, const convs_turn *t) {
    (void)id;
    conv *c = ud;
    if (idx != c->n_turns + 1) return 0; /* a gap cannot happen; skip rather than fail */
    return cfs_turn_load(c, t);
}

static int reload_attachment(void *ud, int64_t id, const convs_attachment *a) {
    (void)id;
    return cfs_attach_load(ud, a);
}

void cfs_reload(chatfs *fs, conv *c) {
    /* turns the database has not taken yet (c->pending) are newer than its copy: the
     * saver stores them, and they stay */
    if (!fs->st || cfs_busy(c) || c->pending) return;
    /* a reply the database has not taken yet (generation.c: the saver retries it) is
     * newer than the database's copy of its turn: it stays */
    turn keep = {0};
    int k = c->unsaved - 1;
    if (k >= 0 && k < c->n_turns) keep = c->turns[k], c->turns[k] = (turn){0};
    cfs_turns_truncate(c, 0);
    /* the attachments as the database has them: a waiting one being written stays */
    for (int i = c->n_att - 1; i >= 0; i--)
        if (!c->att[i].writing) cfs_attach_unlink_memory(c, i);
    convs_loader l = {c, reload_conv, reload_turn, reload_attachment};
    char err[256];
    if (convs_load_one(fs->st, c->id, &l, err, sizeof err)) cfs_log(fs, 1, "%s: %s", c->name, err);
    if (keep.text && k < c->n_turns && !c->turns[k].user && !c->turns[k].complete) {
        cfs_turn_free(&c->turns[k]);
        c->turns[k] = keep;
    } else {
        cfs_turn_free(&keep);
        c->unsaved = 0;
    }
    cfs_reset_reply(c);
    c->mtime = c->mtime_hist = cfs_now_ns();
}

/* Persists turns[from..] (0-based) and, with with_system, the system prompt. 0, or
 * -ENOSPC / -EAGAIN / -EIO when the database refused: then the error file says that
 * `what` was not stored and c is what the database holds again (cfs_reload). While c has
 * turns the database has not taken (c->pending), the save starts at the first of them,
 * and a busy database leaves this change pending with them (0): the saver stores it. */
int cfs_save_turns(chatfs *fs, conv *c, int from, int with_system, const char *what) {
    cfs_attach_repair(fs, c); /* the attachments of turns that went wait for the next message */
    if (!fs->st) return 0;
    if (c->pending && from > c->pending - 1) from = c->pending - 1;
    int n = c->n_turns - from;
    convs_turn *t = calloc(n > 0 ? n : 1, sizeof *t);
    if (!t) return -ENOMEM;
    for (int i = 0; i < n; i++) {
        const turn *u = &c->turns[from + i];
        size_t len;
        const char *text = cfs_turn_text(c, from + i, &len);
        t[i] = (convs_turn){u->user, text, len, u->complete, u->mtime, NULL, 0, u->tool, u->calls, u->call_id};
        if (!u->user) t[i].reasoning = cfs_turn_reasoning(c, from + i, &t[i].reasoning_len);
    }
    char err[256];
    int rc = convs_replace_turns(fs->st, c->id, from + 1, t, n, with_system ? c->system : NULL, err, sizeof err);
    free(t);
    if (rc == -EAGAIN && c->pending && !with_system) {
        cfs_save_pending(fs, c);
        return 0;
    }
    if (rc) {
        c->pending = 0; /* refused for another reason (a full disk): what the database holds stands */
        cfs_store_failed(c, rc, what, err);
        cfs_reload(fs, c);
    } else if (c->pending) {
        c->pending = 0;
        cfs_pending_stored(fs, c);
    }
    return rc;
}
