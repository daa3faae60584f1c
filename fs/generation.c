/* generation.c - a reply being generated: starting it on the engine, the engine's
 * callbacks that grow the reply's stream and turn, saving it as it grows, stopping it,
 * and waking the readers parked on it.
 *
 * Separate because this is the part that runs on the engine's threads (the callbacks
 * take fs->mu from there) and that owns a generation's lifetime: who holds a
 * reference, when a stopped one is detached, when chatfs_stop may return. Commits and
 * the operations start and stop replies through cfs_start_gen and cfs_stop_gen. */
#include "fs/chatfs_impl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fs/settings.h"

#define SAVE_INTERVAL_NS 200000000 /* a growing reply reaches the database this often */

void cfs_session_name(int64_t conv_id, char *buf, size_t len) {
    snprintf(buf, len, "conversation-%lld", (long long)conv_id);
}

static void gen_unref(gen *g) {
    if (--g->refs > 0) return;
    cfs_stream_unref(g->s);
    cfs_stream_unref(g->ts);
    cfs_conv_unref(g->c);
    cJSON_Delete(g->calls);
    free(g);
}

void cfs_notify(chatfs *fs) {
    if (fs->notify) fs->notify(fs->notify_ud);
}

/* for operations that may end a reply (stop, rm): readers are woken after unlocking */
void cfs_unlock(chatfs *fs) {
    int w = fs->wake_pending;
    fs->wake_pending = 0;
    pthread_mutex_unlock(&fs->mu);
    if (w) cfs_notify(fs);
}

/* ---- saving replies: a thread of its own ----
 *
 * A growing reply reaches the database every SAVE_INTERVAL_NS and when it ends, written
 * by the saver thread rather than the engine's (whose callbacks every running reply
 * waits for) or a FUSE thread. The callbacks only note which turn is due; the saver
 * copies what the turn reads as at that moment, unlocks, and writes it. It writes only
 * rows still marked incomplete (convs_update_reply), so a copy that lost a race with an
 * edit or a removal changes nothing. */

typedef struct save_req {
    struct save_req *next;
    int64_t conv;
    int idx; /* 0-based; PENDING_REQ: the conversation's pending turns (c->pending) */
} save_req;

#define PENDING_REQ -1

/* notes that turn idx of conversation c is due; fs->mu held */
static void save_due(chatfs *fs, conv *c, int idx) {
    if (!fs->st || !fs->saver_running) return;
    if (c->pending) idx = PENDING_REQ; /* its row may not be there yet: it goes with the pending turns */
    for (save_req *q = fs->saves; q; q = q->next)
        if (q->conv == c->id && q->idx == idx) return; /* the copy is taken when it is written */
    save_req *q = calloc(1, sizeof *q);
    if (!q) return;
    *q = (save_req){fs->saves, c->id, idx};
    fs->saves = q;
    pthread_cond_broadcast(&fs->save_cv);
}

#define RETRY_INTERVAL_S 1

static int queued(const save_req *list, int64_t conv, int idx) {
    for (const save_req *q = list; q; q = q->next)
        if (q->conv == conv && q->idx == idx) return 1;
    return 0;
}

/* A reply the database refused stays in memory, marked unsaved: `status` and `error` say
 * it is not stored, and the saver writes it again every second until the disk has room
 * (then both clear). fs->mu held. */
static void save_failed(chatfs *fs, int64_t conv_id, int idx, int rc, const char *err) {
    conv *c = cfs_find_conv_id(fs, conv_id);
    if (!c || idx >= c->n_turns) return;
    if (c->unsaved != idx + 1) {
        char name[64];
        cfs_turn_name(c, idx, name, sizeof name);
        cfs_set_error(c, "%s: the reply turns/%s is not stored yet (%s); it is written when there is room again",
                      rc == -ENOSPC ? "the disk is full" : "the database failed", name, err);
        c->unsaved = idx + 1;
    }
    if (fs->saver_stop) { /* the last try, at the unmount: the database keeps the reply as far as it took it */
        cfs_log(fs, 1, "%s: the reply could not be stored before the unmount (%s)", c->name, err);
        return;
    }
    if (queued(fs->retries, conv_id, idx)) return;
    save_req *q = calloc(1, sizeof *q);
    if (!q) return;
    *q = (save_req){fs->retries, conv_id, idx};
    fs->retries = q;
}

static void save_done(chatfs *fs, int64_t conv_id, int idx) {
    conv *c = cfs_find_conv_id(fs, conv_id);
    if (!c || c->unsaved != idx + 1) return;
    c->unsaved = 0;
    cfs_log(fs, 1, "%s: the reply that did not fit is stored now", c->name);
    if (c->error && strstr(c->error, "is not stored yet")) cfs_clear_error(c);
    c->mtime_hist = cfs_now_ns();
}

/* ---- turns the database has not taken: another process held it ----
 *
 * A message must not be lost because another process (the sqlite3 shell, a backup)
 * holds the database longer than the busy timeout: the message is generated anyway, its
 * turns stay in memory marked pending (c->pending), and the saver stores every turn from
 * the first pending one (convs_replace_turns, the texts as they read at that moment),
 * trying again every RETRY_INTERVAL_S until the database lets go. Until then every save
 * of c starts there (cfs_save_turns), and nothing reloads c from the database. */

void cfs_save_pending(chatfs *fs, conv *c) {
    if (!c->error || !strstr(c->error, "not stored yet"))
        cfs_set_error(c, "the database is busy (another process holds it): turn %d and those after it are not "
                      "stored yet; they are written when it lets go", c->pending);
    if (!fs->st || !fs->saver_running || queued(fs->retries, c->id, PENDING_REQ)) return;
    save_req *q = calloc(1, sizeof *q);
    if (!q) return;
    *q = (save_req){fs->retries, c->id, PENDING_REQ};
    fs->retries = q;
    pthread_cond_broadcast(&fs->save_cv);
}

void cfs_pending_stored(chatfs *fs, conv *c) {
    if (c->error && strstr(c->error, "database is busy")) {
        cfs_log(fs, 1, "%s: the turns that waited for the database are stored now", c->name);
        cfs_clear_error(c);
    }
    c->mtime_hist = cfs_now_ns();
}

/* c's pending turns, copied for the saver to write without fs->mu; NULL on no memory */
static convs_turn *copy_pending(conv *c, int *n) {
    int from = c->pending - 1;
    *n = c->n_turns - from;
    convs_turn *t = calloc(*n > 0 ? *n : 1, sizeof *t);
    if (!t) return NULL;
    for (int i = 0; i < *n; i++) {
        const turn *u = &c->turns[from + i];
        size_t len, rlen = 0;
        const char *text = cfs_turn_text(c, from + i, &len), *r = u->user ? NULL : cfs_turn_reasoning(c, from + i, &rlen);
        t[i] = (convs_turn){u->user, cfs_memdup0(text, len), len, u->complete, u->mtime, r ? cfs_memdup0(r, rlen) : NULL,
                            rlen, u->tool, u->calls ? strdup(u->calls) : NULL, u->call_id ? strdup(u->call_id) : NULL};
    }
    return t;
}

static void free_copies(convs_turn *t, int n) {
    for (int i = 0; t && i < n; i++) {
        free((char *)t[i].text), free((char *)t[i].reasoning);
        free((char *)t[i].tool_calls), free((char *)t[i].tool_call_id);
    }
    free(t);
}

/* c's turns from index from on still read as t[0..n) */
static int same_as_copy(const conv *c, int from, const convs_turn *t, int n) {
    if (c->n_turns - from != n) return 0;
    for (int i = 0; i < n; i++) {
        size_t len, rlen = 0;
        const turn *u = &c->turns[from + i];
        const char *text = cfs_turn_text(c, from + i, &len), *r = u->user ? NULL : cfs_turn_reasoning(c, from + i, &rlen);
        if (u->user != t[i].user || u->complete != t[i].complete || len != t[i].len || memcmp(text, t[i].text, len) ||
            rlen != t[i].reasoning_len || (rlen && memcmp(r, t[i].reasoning, rlen)))
            return 0;
    }
    return 1;
}

/* the saver's write of c's pending turns; fs->mu held, released while it writes */
static void save_pending_now(chatfs *fs, int64_t conv_id) {
    conv *c = cfs_find_conv_id(fs, conv_id);
    if (!c || !c->pending) return;
    int n, pending = c->pending;
    convs_turn *t = copy_pending(c, &n);
    int ok = t != NULL;
    for (int i = 0; ok && i < n; i++)
        ok = t[i].text && (t[i].user || t[i].reasoning) && !c->turns[c->pending - 1 + i].calls == !t[i].tool_calls &&
             !c->turns[c->pending - 1 + i].call_id == !t[i].tool_call_id;
    if (!ok) {
        free_copies(t, n);
        cfs_save_pending(fs, c); /* no memory now: later */
        return;
    }
    fs->saving = 1;
    pthread_mutex_unlock(&fs->mu);
    char err[256];
    int rc = convs_replace_turns(fs->st, conv_id, pending, t, n, NULL, err, sizeof err);
    pthread_mutex_lock(&fs->mu);
    fs->saving = 0;
    c = cfs_find_conv_id(fs, conv_id);
    if (!c || c->pending != pending) { /* gone, or saved meanwhile by an operation */
        free_copies(t, n);
        return;
    }
    if (rc) {
        free_copies(t, n);
        cfs_log(fs, 2, "%s: saving the pending turns: %s", c->name, err);
        if (fs->saver_stop) cfs_log(fs, 1, "%s: turn %d and those after it could not be stored before the unmount "
                                    "(%s)", c->name, pending, err);
        else cfs_save_pending(fs, c);
        return;
    }
    /* what changed while it was written (the reply grew or ended, a turn went) was
     * redirected here by save_due, or was not saved at all: written again at once, until
     * the database holds what the files show */
    int same = same_as_copy(c, pending - 1, t, n);
    free_copies(t, n);
    if (!same) {
        if (!queued(fs->saves, conv_id, PENDING_REQ)) {
            save_req *q = calloc(1, sizeof *q);
            if (q) *q = (save_req){fs->saves, conv_id, PENDING_REQ}, fs->saves = q;
            else cfs_save_pending(fs, c);
        }
        return;
    }
    c->pending = 0;
    cfs_pending_stored(fs, c);
}

/* the refused saves due again: every RETRY_INTERVAL_S, and once more when stopping */
static void retry_due(chatfs *fs) {
    while (fs->retries) {
        save_req *q = fs->retries;
        fs->retries = q->next;
        if (queued(fs->saves, q->conv, q->idx)) free(q);
        else q->next = fs->saves, fs->saves = q;
    }
}

static void *saver(void *arg) {
    chatfs *fs = arg;
    pthread_mutex_lock(&fs->mu);
    for (;;) {
        while (!fs->saves && !fs->saver_stop) {
            if (!fs->retries) {
                pthread_cond_wait(&fs->save_cv, &fs->mu);
                continue;
            }
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += RETRY_INTERVAL_S;
            if (pthread_cond_timedwait(&fs->save_cv, &fs->mu, &until) == ETIMEDOUT) retry_due(fs);
        }
        if (fs->saver_stop) retry_due(fs); /* a last try; save_failed queues nothing more */
        if (!fs->saves) break;
        save_req *q = fs->saves;
        fs->saves = q->next;
        if (q->idx == PENDING_REQ) {
            int64_t id = q->conv;
            free(q);
            save_pending_now(fs, id);
            pthread_cond_broadcast(&fs->save_cv);
            continue;
        }
        int64_t q_conv = q->conv;
        conv *c = cfs_find_conv_id(fs, q_conv);
        char *text = NULL, *reasoning = NULL, *calls = NULL;
        size_t len = 0, rlen = 0;
        int complete = 0, idx = q->idx;
        if (c && idx < c->n_turns) {
            const char *t = cfs_turn_text(c, idx, &len);
            text = cfs_memdup0(t, len);
            t = cfs_turn_reasoning(c, idx, &rlen);
            reasoning = cfs_memdup0(t, rlen);
            calls = c->turns[idx].calls ? strdup(c->turns[idx].calls) : NULL;
            complete = c->turns[idx].complete;
        } else if (c && c->unsaved == idx + 1) c->unsaved = 0; /* the turn is gone: nothing waits */
        fs->saving = 1;
        pthread_mutex_unlock(&fs->mu);
        free(q);
        char err[256];
        int wrote = text && reasoning;
        int rc = wrote ? convs_update_reply(fs->st, q_conv, idx + 1, text, len, reasoning, rlen, calls, complete, err,
                                            sizeof err)
                       : 0;
        free(text);
        free(reasoning);
        free(calls);
        pthread_mutex_lock(&fs->mu);
        if (rc) {
            cfs_log(fs, 2, "saving a reply: %s", err);
            save_failed(fs, q_conv, idx, rc, err);
        } else if (wrote) save_done(fs, q_conv, idx);
        fs->saving = 0;
        pthread_cond_broadcast(&fs->save_cv);
    }
    pthread_mutex_unlock(&fs->mu);
    return NULL;
}

int cfs_saver_start(chatfs *fs) {
    if (!fs->st) return 0;
    pthread_cond_init(&fs->save_cv, NULL);
    if (pthread_create(&fs->saver, NULL, saver, fs) != 0) return -1;
    fs->saver_running = 1;
    return 0;
}

void cfs_saver_drain(chatfs *fs) {
    pthread_mutex_lock(&fs->mu);
    while (fs->saver_running && (fs->saves || fs->saving)) pthread_cond_wait(&fs->save_cv, &fs->mu);
    pthread_mutex_unlock(&fs->mu);
}

void cfs_saver_stop(chatfs *fs) {
    if (!fs->saver_running) return;
    pthread_mutex_lock(&fs->mu);
    fs->saver_stop = 1; /* it writes what is queued, then returns */
    pthread_cond_broadcast(&fs->save_cv);
    pthread_mutex_unlock(&fs->mu);
    pthread_join(fs->saver, NULL);
    fs->saver_running = 0;
    pthread_cond_destroy(&fs->save_cv);
}

/* The reply lives in its stream while it grows (the files show it from there: one
 * copy); the turn takes the text when it ends. fs->mu held. */
static void settle_turn(gen *g, int stopped) {
    conv *c = g->c;
    if (g->turn >= c->n_turns) return;
    turn *u = &c->turns[g->turn];
    size_t len = g->s->len - (g->s->done && g->s->len ? 1 : 0); /* the stream ends with a newline once done */
    char *t = cfs_memdup0(g->s->buf ? g->s->buf : "", len);
    if (!t) return;
    free(u->text);
    u->text = t;
    u->len = len;
    u->complete = stopped ? TURN_STOPPED : TURN_COMPLETE; /* stored: a remount says it was stopped */
    u->mtime = cfs_now_ns();
    size_t rlen = g->ts->len - (g->ts->done && g->ts->len ? 1 : 0);
    cfs_set_reasoning(u, g->ts->buf ? g->ts->buf : "", rlen);
    char *calls = g->calls && g->calls->child ? cJSON_PrintUnformatted(g->calls) : NULL;
    free(u->calls);
    u->calls = calls;
}

/* The reasoning is over for its readers (the answer began, or the reply ended);
 * fs->mu held. */
static void finish_thinking(gen *g) {
    if (g->ts->done) return;
    g->fs->wake_pending = 1;
    if (g->ts->len) cfs_stream_add(g->ts, "\n", 1);
    g->ts->done = 1;
}

/* the reply's turn grew (its answer or its reasoning): its times move, and it is saved at
 * most every SAVE_INTERVAL_NS while it generates. fs->mu held. */
static void turn_grew(chatfs *fs, gen *g) {
    conv *c = g->c;
    if (g->turn < c->n_turns) c->turns[g->turn].mtime = cfs_now_ns();
    c->mtime_hist = cfs_now_ns();
    int64_t t = cfs_mono_ns();
    if (t - g->last_save >= SAVE_INTERVAL_NS) {
        g->last_save = t;
        save_due(fs, c, g->turn);
    }
}

static void on_text(void *ud, const char *raw, size_t raw_len) {
    gen *g = ud;
    chatfs *fs = g->fs;
    size_t len; /* every file stays text (text.c) */
    char *text = cfs_utf8_repair(raw, raw_len, &len);
    if (!text) return;
    pthread_mutex_lock(&fs->mu);
    if (!g->detached) {
        int woke = fs->wake_pending;
        finish_thinking(g); /* the answer began: `thinking` reaches its end */
        fs->wake_pending = woke; /* (cfs_notify below wakes them) */
        cfs_stream_add(g->s, text, len);
        turn_grew(fs, g);
    }
    pthread_mutex_unlock(&fs->mu);
    free(text);
    cfs_notify(fs);
}

/* the reasoning, kept apart from the answer (`thinking`, turns/NNN-assistant.thinking.md) */
static void on_reasoning(void *ud, const char *raw, size_t raw_len) {
    gen *g = ud;
    chatfs *fs = g->fs;
    size_t len;
    char *text = cfs_utf8_repair(raw, raw_len, &len);
    if (!text) return;
    pthread_mutex_lock(&fs->mu);
    if (!g->detached && !g->ts->done) { /* reasoning after the answer began is not the thinking file's */
        cfs_stream_add(g->ts, text, len);
        turn_grew(fs, g);
    }
    pthread_mutex_unlock(&fs->mu);
    free(text);
    cfs_notify(fs);
}

/* A call the reply made: kept for the turn (its id names it under calls/: call_T_K, the
 * K-th call of turn T), and what is wrong with it said in `error`. */
static void on_tool_call(void *ud, const struct tc_call *call) {
    gen *g = ud;
    chatfs *fs = g->fs;
    pthread_mutex_lock(&fs->mu);
    if (!g->detached) {
        char id[48];
        snprintf(id, sizeof id, "call_%d_%d", g->turn + 1, call->index + 1);
        if (!g->calls) g->calls = cJSON_CreateArray();
        cJSON *c = cJSON_CreateObject(), *fn = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "id", id);
        cJSON_AddStringToObject(c, "type", "function");
        cJSON_AddStringToObject(fn, "name", call->name);
        cJSON_AddStringToObject(fn, "arguments", call->arguments);
        cJSON_AddItemToObject(c, "function", fn);
        cJSON_AddItemToArray(g->calls, c);
        if (call->problem) cfs_set_error(g->c, "%s: %s", id, call->problem);
        turn_grew(fs, g);
    }
    pthread_mutex_unlock(&fs->mu);
    cfs_notify(fs);
}

static void on_progress(void *ud, const gen_report *r) {
    gen *g = ud;
    pthread_mutex_lock(&g->fs->mu);
    if (!g->detached) {
        g->c->rep = *r;
        g->c->rep.source = NULL; /* not ours to keep */
        g->c->mtime_hist = cfs_now_ns();
    }
    pthread_mutex_unlock(&g->fs->mu);
}

/* Ends the reply for its readers; with fs->mu held. */
static void finish_stream(gen *g, int failed) {
    finish_thinking(g);
    if (g->s->done) return;
    g->fs->wake_pending = 1;
    if (g->s->len) cfs_stream_add(g->s, "\n", 1);
    g->s->done = 1;
    g->s->failed = failed;
}

static void on_done(void *ud, const gen_report *r, const char *error) {
    gen *g = ud;
    chatfs *fs = g->fs;
    pthread_mutex_lock(&fs->mu);
    if (!g->detached) {
        conv *c = g->c;
        c->rep = *r;
        c->rep.source = NULL;
        c->finish = r->finish;
        settle_turn(g, r->finish == FINISH_CANCELLED);
        finish_stream(g, error != NULL);
        if (error) {
            c->state = ST_FAILED;
            cfs_set_error(c, "%s", error);
            free(c->fail);
            c->fail = strdup(error);
            fs->n_failed++;
        } else {
            c->state = ST_DONE;
            fs->n_replies++;
            if (r->finish == FINISH_CANCELLED) fs->n_stopped++;
            /* kept as far as it got, but a script that parses it must know it will not parse */
            if (r->grammar_incomplete)
                cfs_set_error(c, "the reply was cut by %s before its grammar or response_format was complete",
                              r->finish == FINISH_LENGTH ? "max_tokens" : r->finish == FINISH_CONTEXT ? "the context"
                                                                                                       : "a stop string");
        }
        c->gen = NULL;
        c->mtime_hist = cfs_now_ns();
        save_due(fs, c, g->turn);
        g->refs--; /* c->gen's reference; the engine's is dropped below */
        static const char *const how[] = {"", "end of turn", "max_tokens", "stop string", "context full", "stopped", "failed"};
        char thought[64] = ""; /* as status says it (views.c) */
        if (r->reasoning_tokens > 0)
            snprintf(thought, sizeof thought, g->ts->len ? " (%d thinking)" : " (%d thinking: only the markers)",
                     r->reasoning_tokens);
        cfs_log(fs, 1, "%s: %d prompt tokens (%d reused from %s, %d computed), %d generated%s, first token after %.0f ms, "
                "%.1f tok/s, %s%s%s", c->name, r->prompt_tokens, r->reused_tokens, r->source ? r->source : "none",
                r->computed_tokens, r->generated_tokens, thought, r->ttft_ms, r->decode_tokens_per_s,
                r->finish >= 0 && r->finish <= FINISH_ERROR ? how[r->finish] : "?", error ? ": " : "", error ? error : "");
        if (r->miss_reason[0]) cfs_log(fs, 2, "%s: no checkpoint used: %s", c->name, r->miss_reason);
    }
    gen_unref(g);
    fs->wake_pending = 0;
    pthread_mutex_unlock(&fs->mu);
    cfs_notify(fs);
    /* last: chatfs_stop waits for this, and may free what the lines above use */
    pthread_mutex_lock(&fs->mu);
    fs->n_running--;
    pthread_cond_broadcast(&fs->cv);
    pthread_mutex_unlock(&fs->mu);
}

/* Stops c's generation at once for everyone here: readers get the end of the reply,
 * the turn stays as far as it got; the engine is told after unlocking (*cancel_id). */
static void detach_gen(chatfs *fs, conv *c, uint64_t *cancel_id) {
    gen *g = c->gen;
    *cancel_id = 0;
    if (!g) return;
    settle_turn(g, 1);
    save_due(fs, c, g->turn);
    finish_stream(g, 0);
    g->detached = 1;
    if (g->id) *cancel_id = g->id;
    else g->cancel_pending = 1;
    c->gen = NULL;
    c->state = ST_DONE;
    c->finish = FINISH_CANCELLED;
    c->mtime_hist = cfs_now_ns();
    fs->n_stopped++;
    /* the engine's on_done for a detached reply logs nothing: the line is this one */
    cfs_log(fs, 1, "%s: the reply (turn %d) was stopped; its %zu bytes so far are kept", c->name, g->turn + 1,
            g->s->len);
    gen_unref(g); /* c->gen's reference */
}

void cfs_stop_gen(chatfs *fs, conv *c) {
    uint64_t id;
    detach_gen(fs, c, &id);
    if (!id) return;
    pthread_mutex_unlock(&fs->mu);
    fs->be->cancel(fs->be, id);
    pthread_mutex_lock(&fs->mu);
}

/* Builds the engine's message list from c (system first); pointers into c. */
chat_msg *cfs_build_msgs(const conv *c, int n_turns, int *n) {
    /* one block: the messages, then the user turns' images (chat_msg.images points there) */
    chat_msg *m = calloc(1, sizeof *m * (size_t)(n_turns + 2) + sizeof(chat_image) * (size_t)(c->n_att + 1));
    if (!m) return NULL;
    chat_image *images = (chat_image *)(m + n_turns + 2);
    int k = 0;
    if (c->system[0]) m[k++] = (chat_msg){"system", c->system, NULL};
    for (int i = 0; i < n_turns; i++) { /* a past answer's reasoning: the template decides what the prompt shows */
        const turn *t = &c->turns[i];
        m[k] = (chat_msg){cfs_turn_role(t), t->text, !t->user && t->reasoning && t->reasoning[0] ? t->reasoning : NULL,
                          t->calls, t->call_id};
        if (t->user && (m[k].n_images = cfs_attach_images(c, i + 1, images))) {
            m[k].images = images;
            images += m[k].n_images;
        }
        k++;
    }
    *n = k;
    return m;
}

/* Starts a reply to c's history, whose last turn is the user's (or a tool's result). Called with fs->mu
 * held; releases it around the engine call. drop_user: the user turn was added for this
 * request and goes away again if the engine refuses it. 0 or -errno. */
int cfs_start_gen(chatfs *fs, conv *c, int drop_user) {
    int n;
    chat_msg *m = cfs_build_msgs(c, c->n_turns, &n);
    gen *g = calloc(1, sizeof *g);
    stream *s = cfs_stream_new();
    stream *ts = cfs_stream_new();
    char **copies = calloc(4 * n + 1, sizeof *copies); /* content, reasoning, calls, call id */
    if (!m || !g || !s || !ts || !copies || cfs_turn_push(c, 0, "", 0, 0, cfs_now_ns())) {
        free(m), free(g), free(copies), cfs_stream_unref(s), cfs_stream_unref(ts);
        return -ENOMEM;
    }
    /* the message (and the empty reply it waits for) is stored before anything starts:
     * one the database refuses (a full disk) is not sent, and c is as it was; one it
     * cannot take now (another process holds it past the busy timeout) is sent, and
     * pending until the saver stores it */
    int from = drop_user ? c->n_turns - 2 : c->n_turns - 1;
    if (!c->pending) c->pending = from + 1; /* kept only when the database is busy */
    int rc = cfs_save_turns(fs, c, from, 0, drop_user ? "the message" : "the request for a new reply");
    if (rc) {
        free(m), free(g), free(copies), cfs_stream_unref(s), cfs_stream_unref(ts);
        if (drop_user) cfs_refuse_message(c, c->error ? c->error : "the database refused it");
        return rc;
    }
    /* the engine copies the request, but the texts may change once we unlock */
    for (int i = 0; i < n; i++) {
        m[i].content = copies[i] = strdup(m[i].content);
        if (m[i].reasoning_content) m[i].reasoning_content = copies[n + i] = strdup(m[i].reasoning_content);
        if (m[i].tool_calls) m[i].tool_calls = copies[2 * n + i] = strdup(m[i].tool_calls);
        if (m[i].tool_call_id) m[i].tool_call_id = copies[3 * n + i] = strdup(m[i].tool_call_id);
    }
    conv_settings st;
    settings_copy(&st, &c->st);
    gen_settings gs;
    settings_to_gen(&st, &gs);
    char session[32];
    cfs_session_name(c->id, session, sizeof session);
    gs.session = session;

    *g = (gen){fs, c, s, ts, c->n_turns - 1, 3, 0, 0, 0, cfs_mono_ns()}; /* refs: c->gen, engine, this function */
    c->refs++;
    s->refs++;
    ts->refs++;
    cfs_stream_unref(c->reply);
    c->reply = s;
    cfs_stream_unref(c->thinking);
    c->thinking = ts;
    c->gen = g;
    c->state = ST_BUSY;
    free(c->refused); /* a reply to this message: the last refusal is over */
    c->refused = NULL;
    c->rep_turn = g->turn + 1;
    memset(&c->rep, 0, sizeof c->rep);
    c->rep.phase = GEN_QUEUED;
    c->finish = FINISH_NONE;
    cfs_clear_error(c);
    if (c->pending) cfs_save_pending(fs, c); /* the error file says the turns are not stored yet */
    c->mtime_hist = cfs_now_ns();
    cfs_young_end(fs, c); /* in use: no copy is arriving */
    fs->n_running++;

    gen_callbacks cb = {.on_text = on_text, .on_progress = on_progress, .on_done = on_done, .ud = g,
                        .on_reasoning = on_reasoning, .on_tool_call = on_tool_call};
    char err[512] = "";
    pthread_mutex_unlock(&fs->mu);
    /* the engine renders and tokenizes the conversation here, once, and refuses one that
     * does not fit the context (errno EFBIG) */
    uint64_t id = fs->be->submit(fs->be, m, n, &gs, &cb, err, sizeof err);
    int why = errno;
    pthread_mutex_lock(&fs->mu);
    for (int i = 0; i < 4 * n; i++) free(copies[i]);
    free(copies);
    free(m);
    settings_free(&st);
    if (!id) {
        /* refused at once: no callback will come */
        fs->n_running--;
        pthread_cond_broadcast(&fs->cv);
        if (!g->detached) {
            finish_stream(g, 1); /* a reader that already opened the reply gets EIO */
            g->detached = 1;
            c->gen = NULL;
            g->refs--;
            cfs_turns_truncate(c, c->n_turns - 1 - (drop_user ? 1 : 0));
            cfs_save_turns(fs, c, c->n_turns, 0, "the removal of the refused message");
            cfs_reset_reply(c);
            c->state = ST_IDLE;
            cfs_set_error(c, "%s", err[0] ? err : "the engine refused the conversation");
            cfs_refuse_message(c, err[0] ? err : "the engine refused the conversation");
        }
        g->refs--; /* the engine's */
        rc = why == EFBIG ? -EFBIG : why == EINVAL ? -EINVAL : -EIO; /* EINVAL: the template refuses it */
    } else {
        g->id = id;
        if (g->cancel_pending) {
            pthread_mutex_unlock(&fs->mu);
            fs->be->cancel(fs->be, id);
            pthread_mutex_lock(&fs->mu);
        }
    }
    gen_unref(g); /* this function's */
    return rc;
}
