/* chatfs.c - conversations as files, without FUSE (see chatfs.h and fs/README.md).
 *
 * Inodes are computed, not allocated: 1 is the root and 2-4 its files; a conversation
 * with database id C owns C<<24 (its directory), C<<24|1..9 (its files), C<<24|16 (turns/)
 * and C<<24|(32+k) (turn k, 0-based); editors' scratch files get 1<<62|serial. Numbers
 * are therefore stable across mounts and never point at something else, so kernel
 * FORGETs need no bookkeeping: an inode whose object is gone answers ENOENT.
 *
 * Locking: fs->mu guards every structure here. The engine is called without it (its
 * callbacks take it); the database has its own lock and is only taken after fs->mu. */
#include "fs/chatfs.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "fs/settings.h"

#define CONV_SHIFT 24
#define SUB_TURNS 16
#define SUB_TURN0 32
#define SCRATCH_BIT (1ull << 62)
#define MAX_BUFFER (64u << 20)    /* most bytes one write handle or scratch file holds */
#define SAVE_INTERVAL_NS 200000000 /* a growing reply reaches the database this often */
#define FRESH_NS 5000000000LL     /* see "fresh conversations" in fs/README.md */

enum kind {
    K_NONE, K_ROOT, K_README, K_GSETTINGS, K_STATS, K_CONV, K_MESSAGE, K_REPLY, K_SYSTEM, K_SETTINGS,
    K_TRANSCRIPT, K_MESSAGES, K_STATUS, K_ERROR, K_CTL, K_TURNS, K_TURN, K_SCRATCH
};

/* the files of a conversation, in inode order (cp -r copies in inode order) */
static const struct {
    const char *name;
    int kind, sub;
    uint32_t mode;
} conv_files[] = {
    {"message", K_MESSAGE, 1, S_IFREG | 0644},        {"reply", K_REPLY, 2, S_IFREG | 0444},
    {"system", K_SYSTEM, 3, S_IFREG | 0644},          {"settings.json", K_SETTINGS, 4, S_IFREG | 0644},
    {"transcript.md", K_TRANSCRIPT, 5, S_IFREG | 0444}, {"messages.json", K_MESSAGES, 6, S_IFREG | 0644},
    {"status", K_STATUS, 7, S_IFREG | 0444},          {"error", K_ERROR, 8, S_IFREG | 0444},
    {"ctl", K_CTL, 9, S_IFREG | 0644},                {"turns", K_TURNS, SUB_TURNS, S_IFDIR | 0755},
};
#define N_CONV_FILES (int)(sizeof conv_files / sizeof *conv_files)

static const struct {
    const char *name;
    int kind;
    uint64_t ino;
    uint32_t mode;
} root_files[] = {
    {"README", K_README, 2, S_IFREG | 0444},
    {"settings.json", K_GSETTINGS, 3, S_IFREG | 0644},
    {"stats.json", K_STATS, 4, S_IFREG | 0444},
};

typedef struct {
    int user;
    char *text;
    size_t len;
    int complete;
    int64_t mtime;
} turn;

/* One assistant reply as it is produced; reply handles keep the one they opened. */
typedef struct {
    int refs;
    char *buf;
    size_t len, cap;
    int done, failed;
} stream;

enum state { ST_IDLE, ST_BUSY, ST_DONE, ST_FAILED };

struct gen;
typedef struct conv {
    int64_t id;
    char *name;
    int refs, deleted;
    char *system;
    conv_settings st;
    turn *turns;
    int n_turns, cap_turns;
    int64_t mtime, mtime_system, mtime_settings, mtime_message, mtime_hist;
    struct gen *gen;  /* the running generation, NULL when idle */
    int state;        /* enum state */
    gen_report rep;   /* the last progress report */
    int finish;       /* of the last reply (enum gen_finish) */
    char *error;      /* the error file; NULL when fine */
    char *fail;       /* why the last reply failed (status) */
    stream *reply;    /* the current or last reply */
    uint32_t fresh_tid;
    int64_t fresh_until;
} conv;

typedef struct gen {
    chatfs *fs;
    conv *c;
    stream *s;
    int turn;     /* index of the assistant turn it writes */
    int refs;     /* the submitter and the engine */
    int detached; /* stopped or deleted: callbacks only finish the bookkeeping */
    uint64_t id;
    int cancel_pending; /* stopped before submit returned the id */
    int64_t last_save;
} gen;

typedef struct scratch {
    struct scratch *next;
    uint64_t ino, parent;
    char *name;
    int symlink;
    char *data;
    size_t len, cap;
    uint32_t mode;
    int64_t mtime;
    int refs, linked;
} scratch;

struct chatfs {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* n_running changes */
    fs_backend *be;
    fs_store *st;
    conv **convs;
    int n_convs, cap_convs;
    scratch *scratch;
    uint64_t next_scratch;
    conv_settings defaults;
    int64_t t_start, mtime_root, mtime_settings;
    void (*notify)(void *);
    void *notify_ud;
    int n_running;
    int wake_pending; /* a reply ended inside an operation: wake readers after unlocking */
    /* counters for stats.json */
    uint64_t n_sent, n_replies, n_failed, n_stopped, n_imports, n_regenerated;
};

struct fs_handle {
    uint64_t ino;
    int kind;
    conv *c;      /* a reference, or NULL */
    int turn;     /* K_TURN: 0-based index */
    int flags;
    int wr, discard, created;
    char *buf;    /* what a writer wrote, committed at flush */
    size_t len, cap;
    int dirty, truncated, written, committed;
    stream *s;    /* K_REPLY: the reply this handle reads */
    off_t pos;    /* where the last read ended */
    scratch *sc;
};

typedef struct {
    int kind;
    conv *c;
    int turn;
    scratch *sc;
} node;

/* ---- small helpers ---- */

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static void sb_fmt(sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    sb_add(b, tmp, n < (int)sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* grows *p (capacity *cap) to hold need bytes; 0 or -ENOMEM / -EFBIG */
static int reserve(char **p, size_t *cap, size_t need) {
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

static char *memdup0(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (p) {
        if (n) memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

/* Texts are stored without the one newline that editors and echo add; files show it. */
static size_t strip_newline(const char *s, size_t n) { return n && s[n - 1] == '\n' ? n - 1 : n; }

static void set_error(conv *c, const char *fmt, ...) {
    char tmp[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    free(c->error);
    c->error = strdup(tmp);
    c->mtime_hist = now_ns();
}

static void clear_error(conv *c) {
    if (!c->error) return;
    free(c->error);
    c->error = NULL;
    c->mtime_hist = now_ns();
}

/* ---- streams ---- */

static stream *stream_new(void) {
    stream *s = calloc(1, sizeof *s);
    if (s) s->refs = 1;
    return s;
}

static void stream_unref(stream *s) {
    if (s && --s->refs == 0) {
        free(s->buf);
        free(s);
    }
}

static int stream_add(stream *s, const char *t, size_t n) {
    if (reserve(&s->buf, &s->cap, s->len + n + 1)) return -1;
    memcpy(s->buf + s->len, t, n);
    s->len += n;
    return 0;
}

/* the reply file of a finished turn: its text and a newline */
static stream *stream_of_turn(const turn *t) {
    stream *s = stream_new();
    if (!s) return NULL;
    s->done = 1;
    if (t && t->len) {
        stream_add(s, t->text, t->len);
        stream_add(s, "\n", 1);
    }
    return s;
}

/* ---- conversations ---- */

static void conv_unref(conv *c) {
    if (!c || --c->refs > 0) return;
    for (int i = 0; i < c->n_turns; i++) free(c->turns[i].text);
    free(c->turns);
    free(c->name);
    free(c->system);
    free(c->error);
    free(c->fail);
    settings_free(&c->st);
    stream_unref(c->reply);
    free(c);
}

static conv *find_conv_id(chatfs *fs, int64_t id) {
    for (int i = 0; i < fs->n_convs; i++)
        if (fs->convs[i]->id == id) return fs->convs[i];
    return NULL;
}

static conv *find_conv_name(chatfs *fs, const char *name) {
    for (int i = 0; i < fs->n_convs; i++)
        if (!strcmp(fs->convs[i]->name, name)) return fs->convs[i];
    return NULL;
}

static conv *conv_add(chatfs *fs, int64_t id, const char *name) {
    if (fs->n_convs == fs->cap_convs) {
        int cap = fs->cap_convs ? 2 * fs->cap_convs : 16;
        conv **p = realloc(fs->convs, cap * sizeof *p);
        if (!p) return NULL;
        fs->convs = p;
        fs->cap_convs = cap;
    }
    conv *c = calloc(1, sizeof *c);
    if (!c || !(c->name = strdup(name)) || !(c->system = strdup(""))) {
        if (c) free(c->name);
        free(c);
        return NULL;
    }
    c->id = id;
    c->refs = 1;
    settings_copy(&c->st, &fs->defaults);
    c->mtime = c->mtime_system = c->mtime_settings = c->mtime_message = c->mtime_hist = now_ns();
    fs->convs[fs->n_convs++] = c;
    return c;
}

static void conv_remove(chatfs *fs, conv *c) {
    for (int i = 0; i < fs->n_convs; i++)
        if (fs->convs[i] == c) {
            memmove(fs->convs + i, fs->convs + i + 1, (fs->n_convs - i - 1) * sizeof *fs->convs);
            fs->n_convs--;
            break;
        }
    c->deleted = 1;
    conv_unref(c);
}

static int turn_push(conv *c, int user, const char *text, size_t len, int complete, int64_t mtime) {
    if (c->n_turns == c->cap_turns) {
        int cap = c->cap_turns ? 2 * c->cap_turns : 8;
        turn *p = realloc(c->turns, cap * sizeof *p);
        if (!p) return -ENOMEM;
        c->turns = p;
        c->cap_turns = cap;
    }
    char *t = memdup0(text, len);
    if (!t) return -ENOMEM;
    c->turns[c->n_turns++] = (turn){user, t, len, complete, mtime};
    return 0;
}

static void turns_truncate(conv *c, int n) {
    while (c->n_turns > n) free(c->turns[--c->n_turns].text);
}

static const turn *last_assistant(const conv *c) {
    for (int i = c->n_turns - 1; i >= 0; i--)
        if (!c->turns[i].user) return &c->turns[i];
    return NULL;
}

/* The reply file shows the last assistant turn again (after an edit or a load). */
static void reset_reply(conv *c) {
    stream *s = stream_of_turn(last_assistant(c));
    if (!s) return;
    stream_unref(c->reply);
    c->reply = s;
}

static int busy(const conv *c) { return c->gen != NULL; }

/* Is the thread one of the copy tools that create files with O_EXCL in a directory
 * they just made (cp -r, mv across filesystems)? See "fresh conversations". */
static int copier(uint32_t tid) {
    char path[64], comm[32] = "";
    snprintf(path, sizeof path, "/proc/%u/comm", tid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    if (!fgets(comm, sizeof comm, f)) comm[0] = 0;
    fclose(f);
    comm[strcspn(comm, "\n")] = 0;
    return !strcmp(comm, "cp") || !strcmp(comm, "mv");
}

static int fresh_for(const conv *c, uint32_t tid) {
    return c->fresh_tid && c->fresh_tid == tid && mono_ns() < c->fresh_until;
}

/* Persists turns[from..] (0-based); errors only land in the error file: memory is the
 * truth while mounted. */
static void save_turns(chatfs *fs, conv *c, int from, int with_system) {
    if (!fs->st) return;
    int n = c->n_turns - from;
    store_turn *t = calloc(n > 0 ? n : 1, sizeof *t);
    if (!t) return;
    for (int i = 0; i < n; i++) {
        const turn *u = &c->turns[from + i];
        t[i] = (store_turn){u->user, u->text, u->len, u->complete, u->mtime};
    }
    char err[256];
    if (store_replace_turns(fs->st, c->id, from + 1, t, n, with_system ? c->system : NULL, err, sizeof err))
        set_error(c, "%s", err);
    free(t);
}

/* ---- generation ---- */

static void gen_unref(gen *g) {
    if (--g->refs > 0) return;
    stream_unref(g->s);
    conv_unref(g->c);
    free(g);
}

static void notify(chatfs *fs) {
    if (fs->notify) fs->notify(fs->notify_ud);
}

/* for operations that may end a reply (stop, rm): readers are woken after unlocking */
static void unlock(chatfs *fs) {
    int w = fs->wake_pending;
    fs->wake_pending = 0;
    pthread_mutex_unlock(&fs->mu);
    if (w) notify(fs);
}

/* Saves the growing reply at most every SAVE_INTERVAL_NS (force: now). Called with
 * fs->mu held; the write itself happens after unlocking, from a copy. */
typedef struct {
    int64_t id;
    int idx;
    char *text;
    size_t len;
    int complete;
} pending_save;

static void plan_save(chatfs *fs, gen *g, int force, pending_save *ps) {
    ps->text = NULL;
    if (!fs->st || g->detached || g->c->deleted || g->turn >= g->c->n_turns) return;
    int64_t t = mono_ns();
    if (!force && t - g->last_save < SAVE_INTERVAL_NS) return;
    g->last_save = t;
    const turn *u = &g->c->turns[g->turn];
    ps->id = g->c->id;
    ps->idx = g->turn + 1;
    ps->len = u->len;
    ps->complete = u->complete;
    ps->text = memdup0(u->text, u->len);
}

static void do_save(chatfs *fs, pending_save *ps) {
    if (!ps->text) return;
    char err[256];
    store_update_turn(fs->st, ps->id, ps->idx, ps->text, ps->len, ps->complete, err, sizeof err);
    free(ps->text);
}

static void on_text(void *ud, const char *text, size_t len) {
    gen *g = ud;
    chatfs *fs = g->fs;
    pending_save ps = {0};
    pthread_mutex_lock(&fs->mu);
    if (!g->detached) {
        conv *c = g->c;
        stream_add(g->s, text, len);
        if (g->turn < c->n_turns) {
            turn *u = &c->turns[g->turn];
            char *p = realloc(u->text, u->len + len + 1);
            if (p) {
                memcpy(p + u->len, text, len);
                u->len += len;
                p[u->len] = 0;
                u->text = p;
                u->mtime = now_ns();
            }
        }
        c->mtime_hist = now_ns();
        plan_save(fs, g, 0, &ps);
    }
    pthread_mutex_unlock(&fs->mu);
    do_save(fs, &ps);
    notify(fs);
}

static void on_progress(void *ud, const gen_report *r) {
    gen *g = ud;
    pthread_mutex_lock(&g->fs->mu);
    if (!g->detached) {
        g->c->rep = *r;
        g->c->rep.source = NULL; /* not ours to keep */
        g->c->mtime_hist = now_ns();
    }
    pthread_mutex_unlock(&g->fs->mu);
}

/* Ends the reply for its readers; with fs->mu held. */
static void finish_stream(gen *g, int failed) {
    if (g->s->done) return;
    g->fs->wake_pending = 1;
    if (g->s->len) stream_add(g->s, "\n", 1);
    g->s->done = 1;
    g->s->failed = failed;
}

static void on_done(void *ud, const gen_report *r, const char *error) {
    gen *g = ud;
    chatfs *fs = g->fs;
    pending_save ps = {0};
    pthread_mutex_lock(&fs->mu);
    if (!g->detached) {
        conv *c = g->c;
        c->rep = *r;
        c->rep.source = NULL;
        c->finish = r->finish;
        if (g->turn < c->n_turns) c->turns[g->turn].complete = 1;
        finish_stream(g, error != NULL);
        if (error) {
            c->state = ST_FAILED;
            set_error(c, "%s", error);
            free(c->fail);
            c->fail = strdup(error);
            fs->n_failed++;
        } else {
            c->state = ST_DONE;
            fs->n_replies++;
            if (r->finish == FINISH_CANCELLED) fs->n_stopped++;
        }
        c->gen = NULL;
        c->mtime_hist = now_ns();
        plan_save(fs, g, 1, &ps);
        g->refs--; /* c->gen's reference; the engine's is dropped below */
    }
    gen_unref(g);
    fs->wake_pending = 0;
    pthread_mutex_unlock(&fs->mu);
    do_save(fs, &ps);
    notify(fs);
    /* last: chatfs_stop waits for this, and may free what the lines above use */
    pthread_mutex_lock(&fs->mu);
    fs->n_running--;
    pthread_cond_broadcast(&fs->cv);
    pthread_mutex_unlock(&fs->mu);
}

/* Stops c's generation at once for everyone here: readers get the end of the reply,
 * the turn stays as far as it got; the engine is told after unlocking (*cancel_id). */
static void detach_gen(chatfs *fs, conv *c, uint64_t *cancel_id, pending_save *ps) {
    gen *g = c->gen;
    *cancel_id = 0;
    ps->text = NULL;
    if (!g) return;
    if (g->turn < c->n_turns) c->turns[g->turn].complete = 1;
    plan_save(fs, g, 1, ps);
    finish_stream(g, 0);
    g->detached = 1;
    if (g->id) *cancel_id = g->id;
    else g->cancel_pending = 1;
    c->gen = NULL;
    c->state = ST_DONE;
    c->finish = FINISH_CANCELLED;
    c->mtime_hist = now_ns();
    fs->n_stopped++;
    gen_unref(g); /* c->gen's reference */
}

static void cancel_after(chatfs *fs, uint64_t id, pending_save *ps) {
    do_save(fs, ps);
    if (id) fs->be->cancel(fs->be, id);
}

/* Builds the engine's message list from c (system first); pointers into c. */
static chat_msg *build_msgs(const conv *c, int n_turns, int *n) {
    chat_msg *m = calloc(n_turns + 2, sizeof *m);
    if (!m) return NULL;
    int k = 0;
    if (c->system[0]) m[k++] = (chat_msg){"system", c->system};
    for (int i = 0; i < n_turns; i++) m[k++] = (chat_msg){c->turns[i].user ? "user" : "assistant", c->turns[i].text};
    *n = k;
    return m;
}

/* Starts a reply to c's history, whose last turn is the user's. Called with fs->mu
 * held; releases it around the engine call. drop_user: the user turn was added for this
 * request and goes away again if the engine refuses it. 0 or -errno. */
static int start_gen(chatfs *fs, conv *c, int drop_user) {
    int n;
    chat_msg *m = build_msgs(c, c->n_turns, &n);
    gen *g = calloc(1, sizeof *g);
    stream *s = stream_new();
    char **copies = calloc(n + 1, sizeof *copies);
    if (!m || !g || !s || !copies || turn_push(c, 0, "", 0, 0, now_ns())) {
        free(m), free(g), free(copies), stream_unref(s);
        return -ENOMEM;
    }
    /* the engine copies the request, but the texts may change once we unlock */
    for (int i = 0; i < n; i++) m[i].content = copies[i] = strdup(m[i].content);
    conv_settings st;
    settings_copy(&st, &c->st);
    gen_settings gs;
    settings_to_gen(&st, &gs);
    char session[32];
    snprintf(session, sizeof session, "conversation-%lld", (long long)c->id);
    gs.session = session;

    *g = (gen){fs, c, s, c->n_turns - 1, 3, 0, 0, 0, mono_ns()}; /* refs: c->gen, engine, this function */
    c->refs++;
    s->refs++;
    stream_unref(c->reply);
    c->reply = s;
    c->gen = g;
    c->state = ST_BUSY;
    memset(&c->rep, 0, sizeof c->rep);
    c->rep.phase = GEN_QUEUED;
    c->finish = FINISH_NONE;
    clear_error(c);
    c->mtime_hist = now_ns();
    c->fresh_tid = 0;
    save_turns(fs, c, drop_user ? c->n_turns - 2 : c->n_turns - 1, 0);
    fs->n_running++;

    gen_callbacks cb = {on_text, on_progress, on_done, g};
    char err[512] = "";
    pthread_mutex_unlock(&fs->mu);
    int tokens = fs->be->count_tokens(fs->be, m, n, st.template_name);
    int ctx = fs->be->context(fs->be);
    uint64_t id = 0;
    if (tokens < 0) snprintf(err, sizeof err, "the conversation cannot be rendered with its chat template");
    else if (tokens >= ctx)
        snprintf(err, sizeof err, "the conversation has %d tokens, more than the context of %d", tokens, ctx);
    else id = fs->be->submit(fs->be, m, n, &gs, &cb, err, sizeof err);
    pthread_mutex_lock(&fs->mu);
    for (int i = 0; i < n; i++) free(copies[i]);
    free(copies);
    free(m);
    settings_free(&st);
    int rc = 0;
    if (!id) {
        /* refused at once: no callback will come */
        fs->n_running--;
        pthread_cond_broadcast(&fs->cv);
        if (!g->detached) {
            finish_stream(g, 1); /* a reader that already opened the reply gets EIO */
            g->detached = 1;
            c->gen = NULL;
            g->refs--;
            turns_truncate(c, c->n_turns - 1 - (drop_user ? 1 : 0));
            save_turns(fs, c, c->n_turns, 0);
            reset_reply(c);
            c->state = ST_IDLE;
            set_error(c, "%s", err);
        }
        g->refs--; /* the engine's */
        rc = tokens >= ctx ? -EFBIG : -EIO;
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

/* ---- views: what each file reads as ---- */

static void add_turn_text(sbuf *b, const char *t, size_t n) {
    sb_add(b, t, n);
    if (n) sb_add(b, "\n", 1);
}

static void render_transcript(const conv *c, sbuf *b) {
    if (c->system[0]) {
        sb_str(b, "## system\n\n");
        add_turn_text(b, c->system, strlen(c->system));
        sb_str(b, "\n");
    }
    for (int i = 0; i < c->n_turns; i++) {
        const turn *t = &c->turns[i];
        int running = c->gen && c->gen->turn == i;
        sb_str(b, t->user ? "## user\n\n" : "## assistant\n\n");
        if (running) {
            sb_add(b, t->text, t->len); /* grows at the end while it generates */
            continue;
        }
        add_turn_text(b, t->text, t->len);
        if (!t->complete) sb_str(b, "\n*(incomplete: the daemon stopped while it generated)*\n");
        sb_str(b, "\n");
    }
}

/* one message per line: readable, and diff/grep-friendly */
static void add_message_json(sbuf *b, const char *role, const char *content, int *first) {
    cJSON *str = cJSON_CreateString(content);
    char *t = str ? cJSON_PrintUnformatted(str) : NULL;
    cJSON_Delete(str);
    if (!t) {
        b->oom = 1;
        return;
    }
    sb_fmt(b, "%s{\"role\": \"%s\", \"content\": ", *first ? "\n  " : ",\n  ", role);
    sb_str(b, t);
    sb_str(b, "}");
    cJSON_free(t);
    *first = 0;
}

static void render_messages(const conv *c, sbuf *b) {
    int first = 1;
    sb_str(b, "[");
    if (c->system[0]) add_message_json(b, "system", c->system, &first);
    for (int i = 0; i < c->n_turns; i++)
        add_message_json(b, c->turns[i].user ? "user" : "assistant", c->turns[i].text, &first);
    sb_str(b, first ? "]\n" : "\n]\n");
}

static const char *finish_note(int finish) {
    switch (finish) {
    case FINISH_CANCELLED: return " (stopped)";
    case FINISH_LENGTH: return " (max_tokens)";
    case FINISH_CONTEXT: return " (context full)";
    case FINISH_STOP: return " (stop string)";
    default: return "";
    }
}

static void render_status(const conv *c, sbuf *b) {
    const gen_report *r = &c->rep;
    if (c->state == ST_FAILED) sb_fmt(b, "error: %s", c->fail ? c->fail : "failed");
    else if (c->state == ST_BUSY && r->phase == GEN_QUEUED) sb_str(b, "queued");
    else if (c->state == ST_BUSY && r->phase == GEN_PREFILL)
        sb_fmt(b, "prefill %d/%d (%d%%) reused %d", r->prefill_done, r->prompt_tokens,
               r->prompt_tokens ? (int)(100.0 * r->prefill_done / r->prompt_tokens) : 0, r->reused_tokens);
    else if (c->state == ST_BUSY) sb_fmt(b, "generating %d tokens %.1f tok/s", r->generated_tokens, r->decode_tokens_per_s);
    else if (c->state == ST_DONE)
        sb_fmt(b, "done %d tokens %.1f tok/s reused %d/%d%s", r->generated_tokens, r->decode_tokens_per_s,
               r->reused_tokens, r->prompt_tokens, finish_note(c->finish));
    else if (c->n_turns && !c->turns[c->n_turns - 1].complete)
        sb_str(b, "error: the last reply is incomplete (the daemon stopped while it generated)");
    else sb_str(b, "idle");
    sb_str(b, "\n");
}

static const char readme_text[] =
    "chatfs - conversations with a local language model as files\n"
    "\n"
    "  mkdir NAME                      a new conversation (mv renames it, rm -r deletes it)\n"
    "  echo 'Hello' > NAME/message     send a message (when the writer closes the file)\n"
    "  cat NAME/reply                  the reply, streamed while it is generated\n"
    "  cat NAME/status                 idle | queued | prefill ... | generating ... | done ... | error: ...\n"
    "  tail -f NAME/transcript.md      the whole conversation as it grows\n"
    "  echo stop > NAME/ctl            stop the reply; 'regenerate' makes a new one\n"
    "  NAME/turns/NNN-user.md          the history: rewrite a user turn to regenerate from there;\n"
    "                                  rm the last assistant turn + 'regenerate' to re-roll it\n"
    "  NAME/system, NAME/settings.json the system prompt and generation settings (read-write)\n"
    "  NAME/messages.json              the history in the OpenAI format; write it to import\n"
    "  NAME/error                      why the last thing failed (empty when fine)\n"
    "  cp -r NAME COPY                 fork a conversation (it reuses NAME's checkpoints)\n"
    "  settings.json                   defaults for new conversations\n"
    "  stats.json                      engine and checkpoint counters\n"
    "\n"
    "Errors: writing a message while one is generating gives EBUSY, a message longer than\n"
    "the context EFBIG, a bad settings.json or messages.json EINVAL; the reason is in error.\n";

/* Renders the content of a file node into b. fs->mu held. */
static int render(chatfs *fs, const node *nd, sbuf *b) {
    conv *c = nd->c;
    switch (nd->kind) {
    case K_README: sb_str(b, readme_text); break;
    case K_GSETTINGS: {
        char *t = settings_render(&fs->defaults);
        if (t) sb_str(b, t);
        free(t);
        break;
    }
    case K_MESSAGE:
    case K_CTL: break;
    case K_REPLY: sb_add(b, c->reply ? c->reply->buf : "", c->reply ? c->reply->len : 0); break;
    case K_SYSTEM: add_turn_text(b, c->system, strlen(c->system)); break;
    case K_SETTINGS: {
        char *t = settings_render(&c->st);
        if (t) sb_str(b, t);
        free(t);
        break;
    }
    case K_TRANSCRIPT: render_transcript(c, b); break;
    case K_MESSAGES: render_messages(c, b); break;
    case K_STATUS: render_status(c, b); break;
    case K_ERROR:
        if (c->error) {
            sb_str(b, c->error);
            sb_str(b, "\n");
        }
        break;
    case K_TURN: {
        const turn *t = &c->turns[nd->turn];
        if (c->gen && c->gen->turn == nd->turn) sb_add(b, t->text, t->len);
        else add_turn_text(b, t->text, t->len);
        break;
    }
    case K_SCRATCH: sb_add(b, nd->sc->data ? nd->sc->data : "", nd->sc->len); break;
    case K_STATS: break; /* rendered outside the lock: see stats_text */
    default: return -EISDIR;
    }
    return b->oom ? -ENOMEM : 0;
}

static char *stats_text(chatfs *fs, size_t *len) {
    char *engine = fs->be->stats_json(fs->be); /* the engine's lock, not ours */
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "backend", fs->be->name);
    cJSON *e = engine ? cJSON_Parse(engine) : NULL;
    cJSON_AddItemToObject(o, "engine", e ? e : cJSON_CreateObject());
    free(engine);
    cJSON *f = cJSON_AddObjectToObject(o, "filesystem");
    pthread_mutex_lock(&fs->mu);
    int busy_n = 0, scratch_n = 0;
    for (int i = 0; i < fs->n_convs; i++) busy_n += busy(fs->convs[i]);
    for (scratch *s = fs->scratch; s; s = s->next) scratch_n++;
    cJSON_AddNumberToObject(f, "conversations", fs->n_convs);
    cJSON_AddNumberToObject(f, "generating", busy_n);
    cJSON_AddNumberToObject(f, "messages_sent", (double)fs->n_sent);
    cJSON_AddNumberToObject(f, "regenerations", (double)fs->n_regenerated);
    cJSON_AddNumberToObject(f, "replies_finished", (double)fs->n_replies);
    cJSON_AddNumberToObject(f, "replies_stopped", (double)fs->n_stopped);
    cJSON_AddNumberToObject(f, "replies_failed", (double)fs->n_failed);
    cJSON_AddNumberToObject(f, "imports", (double)fs->n_imports);
    cJSON_AddNumberToObject(f, "scratch_files", scratch_n);
    pthread_mutex_unlock(&fs->mu);
    char *t = cJSON_Print(o);
    cJSON_Delete(o);
    size_t n = t ? strlen(t) : 0;
    char *out = t ? malloc(n + 2) : NULL;
    if (out) {
        memcpy(out, t, n);
        out[n] = '\n';
        out[n + 1] = 0;
        *len = n + 1;
    }
    cJSON_free(t);
    return out;
}

/* ---- names and nodes ---- */

static uint64_t conv_ino(const conv *c, int sub) { return ((uint64_t)c->id << CONV_SHIFT) | (uint64_t)sub; }

static scratch *find_scratch_ino(chatfs *fs, uint64_t ino) {
    for (scratch *s = fs->scratch; s; s = s->next)
        if (s->ino == ino) return s;
    return NULL;
}

static scratch *find_scratch(chatfs *fs, uint64_t parent, const char *name) {
    for (scratch *s = fs->scratch; s; s = s->next)
        if (s->parent == parent && !strcmp(s->name, name)) return s;
    return NULL;
}

static int resolve(chatfs *fs, uint64_t ino, node *nd) {
    memset(nd, 0, sizeof *nd);
    if (ino & SCRATCH_BIT) {
        nd->sc = find_scratch_ino(fs, ino);
        nd->kind = K_SCRATCH;
        return nd->sc ? 0 : -ENOENT;
    }
    if (ino == FS_ROOT_INO) return nd->kind = K_ROOT, 0;
    for (size_t i = 0; i < sizeof root_files / sizeof *root_files; i++)
        if (ino == root_files[i].ino) return nd->kind = root_files[i].kind, 0;
    conv *c = find_conv_id(fs, (int64_t)(ino >> CONV_SHIFT));
    if (!c) return -ENOENT;
    nd->c = c;
    int sub = (int)(ino & ((1u << CONV_SHIFT) - 1));
    if (sub == 0) return nd->kind = K_CONV, 0;
    if (sub >= SUB_TURN0) {
        nd->turn = sub - SUB_TURN0;
        nd->kind = K_TURN;
        return nd->turn < c->n_turns ? 0 : -ENOENT;
    }
    for (int i = 0; i < N_CONV_FILES; i++)
        if (conv_files[i].sub == sub) return nd->kind = conv_files[i].kind, 0;
    return -ENOENT;
}

static int is_dir_kind(int k) { return k == K_ROOT || k == K_CONV || k == K_TURNS; }

static uint64_t node_ino(const node *nd) {
    switch (nd->kind) {
    case K_ROOT: return FS_ROOT_INO;
    case K_SCRATCH: return nd->sc->ino;
    case K_CONV: return conv_ino(nd->c, 0);
    case K_TURN: return conv_ino(nd->c, SUB_TURN0 + nd->turn);
    default:
        for (size_t i = 0; i < sizeof root_files / sizeof *root_files; i++)
            if (root_files[i].kind == nd->kind) return root_files[i].ino;
        for (int i = 0; i < N_CONV_FILES; i++)
            if (conv_files[i].kind == nd->kind) return conv_ino(nd->c, conv_files[i].sub);
    }
    return 0;
}

static int64_t node_mtime(chatfs *fs, const node *nd) {
    conv *c = nd->c;
    switch (nd->kind) {
    case K_ROOT: return fs->mtime_root;
    case K_README: return fs->t_start;
    case K_GSETTINGS: return fs->mtime_settings;
    case K_STATS: return now_ns();
    case K_CONV:
    case K_TURNS: return c->mtime;
    case K_MESSAGE:
    case K_CTL: return c->mtime_message;
    case K_SYSTEM: return c->mtime_system;
    case K_SETTINGS: return c->mtime_settings;
    case K_TURN: return c->turns[nd->turn].mtime;
    case K_SCRATCH: return nd->sc->mtime;
    default: return c->mtime_hist;
    }
}

static int attr_of(chatfs *fs, const node *nd, fs_attr *a) {
    memset(a, 0, sizeof *a);
    a->ino = node_ino(nd);
    a->nlink = 1;
    a->mtime_ns = node_mtime(fs, nd);
    switch (nd->kind) {
    case K_ROOT: a->mode = S_IFDIR | 0755, a->nlink = 2 + fs->n_convs; return 0;
    case K_CONV: a->mode = S_IFDIR | 0755, a->nlink = 3; return 0;
    case K_TURNS: a->mode = S_IFDIR | 0755, a->nlink = 2; return 0;
    case K_SCRATCH:
        a->mode = nd->sc->symlink ? (S_IFLNK | 0777) : (S_IFREG | (nd->sc->mode & 07777));
        a->size = nd->sc->len;
        return 0;
    case K_TURN: a->mode = S_IFREG | 0644; break;
    case K_STATS: a->mode = S_IFREG | 0444; break;
    default:
        for (size_t i = 0; i < sizeof root_files / sizeof *root_files; i++)
            if (root_files[i].kind == nd->kind) a->mode = root_files[i].mode;
        for (int i = 0; i < N_CONV_FILES; i++)
            if (conv_files[i].kind == nd->kind) a->mode = conv_files[i].mode;
    }
    if (nd->kind == K_STATS) {
        a->size = 0; /* see stats_size */
        return 0;
    }
    if (nd->kind == K_REPLY) {
        a->size = nd->c->reply ? nd->c->reply->len : 0;
        return 0;
    }
    sbuf b = {0};
    int rc = render(fs, nd, &b);
    a->size = b.len;
    free(b.p);
    return rc;
}

/* "001-user.md" -> 0-based index and role; -1 for other names */
static int parse_turn_name(const char *name, int *user) {
    int idx = 0, i = 0;
    while (name[i] >= '0' && name[i] <= '9' && i < 9) idx = idx * 10 + (name[i++] - '0');
    if (i < 3 || name[i] != '-' || idx < 1) return -1;
    const char *r = name + i + 1;
    if (!strcmp(r, "user.md")) *user = 1;
    else if (!strcmp(r, "assistant.md")) *user = 0;
    else return -1;
    char canon[32];
    snprintf(canon, sizeof canon, "%03d-%s", idx, r);
    return strcmp(canon, name) ? -1 : idx - 1;
}

static void turn_name(const conv *c, int i, char *buf, size_t n) {
    snprintf(buf, n, "%03d-%s.md", i + 1, c->turns[i].user ? "user" : "assistant");
}

/* Looks name up in directory node dir; tid decides for fresh conversations. */
static int child(chatfs *fs, uint32_t tid, const node *dir, const char *name, node *out) {
    memset(out, 0, sizeof *out);
    uint64_t dino = node_ino(dir);
    if (dir->kind == K_ROOT) {
        for (size_t i = 0; i < sizeof root_files / sizeof *root_files; i++)
            if (!strcmp(name, root_files[i].name)) return out->kind = root_files[i].kind, 0;
        conv *c = find_conv_name(fs, name);
        if (c) return out->kind = K_CONV, out->c = c, 0;
    } else if (dir->kind == K_CONV) {
        for (int i = 0; i < N_CONV_FILES; i++)
            if (!strcmp(name, conv_files[i].name)) {
                if (fresh_for(dir->c, tid)) return -ENOENT;
                return out->kind = conv_files[i].kind, out->c = dir->c, 0;
            }
    } else if (dir->kind == K_TURNS) {
        int user, idx = parse_turn_name(name, &user);
        if (idx >= 0 && idx < dir->c->n_turns && dir->c->turns[idx].user == user)
            return out->kind = K_TURN, out->c = dir->c, out->turn = idx, 0;
    } else return -ENOTDIR;
    scratch *s = find_scratch(fs, dino, name);
    if (!s) return -ENOENT;
    out->kind = K_SCRATCH;
    out->sc = s;
    out->c = dir->c;
    return 0;
}

static int valid_conv_name(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n > 255 || !strcmp(name, ".") || !strcmp(name, "..")) return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f || name[i] == '/') return 0;
    return 1;
}

/* ---- public: lifetime ---- */

static int load_conv(void *ud, int64_t id, const char *name, const char *system, const char *settings,
                     int64_t mtime) {
    chatfs *fs = ud;
    conv *c = conv_add(fs, id, name);
    if (!c) return -1;
    free(c->system);
    c->system = strdup(system ? system : "");
    conv_settings st;
    char err[256];
    if (settings && settings_parse(settings, strlen(settings), &fs->defaults, &st, err, sizeof err) == 1) {
        settings_free(&c->st);
        c->st = st;
    }
    if (mtime) c->mtime = c->mtime_system = c->mtime_settings = c->mtime_message = c->mtime_hist = mtime;
    return c->system ? 0 : -1;
}

static int load_turn(void *ud, int64_t id, int idx, const store_turn *t) {
    chatfs *fs = ud;
    conv *c = find_conv_id(fs, id);
    if (!c || idx != c->n_turns + 1) return 0; /* a gap cannot happen; skip rather than fail */
    return turn_push(c, t->user, t->text, t->len, t->complete, t->mtime_ns) ? -1 : 0;
}

chatfs *chatfs_new(fs_backend *b, fs_store *st, char *err, size_t errlen) {
    chatfs *fs = calloc(1, sizeof *fs);
    if (!fs) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&fs->mu, NULL);
    pthread_cond_init(&fs->cv, NULL);
    fs->be = b;
    fs->st = st;
    fs->next_scratch = 1;
    fs->t_start = fs->mtime_root = fs->mtime_settings = now_ns();
    settings_builtin(&fs->defaults);
    char *g = NULL;
    if (st && store_get_global(st, "settings", &g) == 0 && g) {
        conv_settings s, builtin;
        settings_builtin(&builtin);
        char e[256];
        if (settings_parse(g, strlen(g), &builtin, &s, e, sizeof e) == 1) {
            settings_free(&fs->defaults);
            fs->defaults = s;
        }
        settings_free(&builtin);
        free(g);
    }
    store_loader l = {fs, load_conv, load_turn};
    if (st && store_load(st, &l, err, errlen) != 0) {
        chatfs_free(fs);
        return NULL;
    }
    for (int i = 0; i < fs->n_convs; i++) {
        conv *c = fs->convs[i];
        reset_reply(c);
        if (c->n_turns && !c->turns[c->n_turns - 1].complete)
            set_error(c, "the last reply is incomplete: the daemon stopped while it generated");
    }
    return fs;
}

void chatfs_set_notify(chatfs *fs, void (*fn)(void *), void *ud) {
    pthread_mutex_lock(&fs->mu);
    fs->notify = fn;
    fs->notify_ud = ud;
    pthread_mutex_unlock(&fs->mu);
}

void chatfs_stop(chatfs *fs) {
    pthread_mutex_lock(&fs->mu);
    for (int i = 0; i < fs->n_convs; i++) {
        conv *c = fs->convs[i];
        gen *g = c->gen;
        if (!g) continue;
        uint64_t id = g->id;
        pthread_mutex_unlock(&fs->mu);
        if (id) fs->be->cancel(fs->be, id);
        pthread_mutex_lock(&fs->mu);
    }
    while (fs->n_running > 0) pthread_cond_wait(&fs->cv, &fs->mu);
    pthread_mutex_unlock(&fs->mu);
    notify(fs);
}

void chatfs_free(chatfs *fs) {
    if (!fs) return;
    for (int i = 0; i < fs->n_convs; i++) conv_unref(fs->convs[i]);
    free(fs->convs);
    while (fs->scratch) {
        scratch *s = fs->scratch;
        fs->scratch = s->next;
        free(s->name);
        free(s->data);
        free(s);
    }
    settings_free(&fs->defaults);
    pthread_mutex_destroy(&fs->mu);
    pthread_cond_destroy(&fs->cv);
    free(fs);
}

/* ---- commits: what a finished write (or a rename onto a file) does ---- */

static int blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strchr(" \t\r\n", s[i])) return 0;
    return 1;
}

static int send_message(chatfs *fs, conv *c, const char *text, size_t len) {
    if (busy(c)) {
        set_error(c, "a reply is being generated: wait for it or write 'stop' to ctl");
        return -EBUSY;
    }
    len = strip_newline(text, len);
    if (blank(text, len)) return 0; /* nothing to say: nothing sent */
    int rc = turn_push(c, 1, text, len, 1, now_ns());
    if (rc) return rc;
    c->mtime = now_ns();
    fs->n_sent++;
    return start_gen(fs, c, 1);
}

static int regenerate(chatfs *fs, conv *c) {
    if (busy(c)) return -EBUSY;
    if (c->n_turns && !c->turns[c->n_turns - 1].user) turns_truncate(c, c->n_turns - 1);
    if (!c->n_turns) {
        set_error(c, "nothing to regenerate: the conversation has no user message");
        return -EINVAL;
    }
    c->mtime = now_ns();
    fs->n_regenerated++;
    return start_gen(fs, c, 0);
}

static void stop_gen(chatfs *fs, conv *c) {
    uint64_t id;
    pending_save ps;
    detach_gen(fs, c, &id, &ps);
    pthread_mutex_unlock(&fs->mu);
    cancel_after(fs, id, &ps);
    pthread_mutex_lock(&fs->mu);
}

static int set_turn_text(turn *t, const char *text, size_t len) {
    char *p = memdup0(text, len);
    if (!p) return -ENOMEM;
    free(t->text);
    t->text = p;
    t->len = len;
    t->complete = 1;
    t->mtime = now_ns();
    return 0;
}

static void save_one_turn(chatfs *fs, conv *c, int k) {
    char err[256];
    if (fs->st && store_update_turn(fs->st, c->id, k + 1, c->turns[k].text, c->turns[k].len, 1, err, sizeof err))
        set_error(c, "%s", err);
}

/* A turn file written through a handle that opened the existing turn. */
static int rewrite_turn(chatfs *fs, conv *c, int k, const char *text, size_t len, int created) {
    if (k >= c->n_turns) return -ENOENT;
    if (busy(c)) return -EBUSY;
    len = strip_newline(text, len);
    turn *t = &c->turns[k];
    if (!created && t->len == len && !memcmp(t->text, text, len)) return 0; /* unchanged: nothing happens */
    int rc = set_turn_text(t, text, len);
    if (rc) return rc;
    if (created || !t->user) { /* a new turn being filled, or the model's words edited: no generation */
        save_one_turn(fs, c, k);
        reset_reply(c);
        return 0;
    }
    turns_truncate(c, k + 1);
    save_turns(fs, c, k, 0);
    c->mtime = now_ns();
    fs->n_regenerated++;
    return start_gen(fs, c, 0);
}

/* messages.json -> system prompt and turns, normalised the way templates need them:
 * developer -> system, system messages first and merged, consecutive roles merged.
 * 1: done; 0: not complete JSON yet; -1: invalid (reason in err). */
typedef struct {
    char *system;
    turn *turns;
    int n;
} import;

static void import_free(import *im) {
    free(im->system);
    for (int i = 0; i < im->n; i++) free(im->turns[i].text);
    free(im->turns);
    memset(im, 0, sizeof *im);
}

static void append_merged(char **dst, size_t *dlen, const char *s) {
    size_t n = strlen(s), sep = *dlen ? 2 : 0;
    char *p = realloc(*dst, *dlen + sep + n + 1);
    if (!p) return;
    if (sep) memcpy(p + *dlen, "\n\n", 2);
    memcpy(p + *dlen + sep, s, n + 1);
    *dst = p;
    *dlen += sep + n;
}

static int parse_import(const char *text, size_t len, import *im, char *err, size_t errlen) {
    memset(im, 0, sizeof *im);
    const char *end = NULL;
    cJSON *a = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!a) {
        size_t at = end ? (size_t)(end - text) : 0;
        snprintf(err, errlen, "messages.json: not valid JSON (at byte %zu)", at);
        for (size_t i = at + 1; i < len; i++)
            if (!strchr(" \t\r\n", text[i])) return -1;
        return 0;
    }
    int rc = 1;
    if (!cJSON_IsArray(a)) {
        snprintf(err, errlen, "messages.json must be a JSON array of {\"role\", \"content\"} objects");
        rc = -1;
    }
    for (size_t i = (size_t)(end - text); i < len && rc > 0; i++)
        if (!strchr(" \t\r\n", text[i])) {
            snprintf(err, errlen, "messages.json: text after the JSON array");
            rc = -1;
        }
    size_t sys_len = 0;
    int n = cJSON_GetArraySize(a), i = 0;
    im->turns = calloc(n + 1, sizeof *im->turns);
    size_t *lens = calloc(n + 1, sizeof *lens);
    for (cJSON *m = rc > 0 ? a->child : NULL; m && rc > 0; m = m->next, i++) {
        cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role)) {
            snprintf(err, errlen, "messages.json: message %d has no \"role\" string", i + 1);
            rc = -1;
            break;
        }
        /* content: a string, or an array of {"type": "text", "text": ...} parts */
        char *body = NULL;
        size_t blen = 0;
        if (cJSON_IsString(content)) body = strdup(content->valuestring), blen = strlen(body);
        else if (cJSON_IsArray(content)) {
            body = strdup("");
            for (cJSON *p = content->child; p; p = p->next) {
                cJSON *ty = cJSON_GetObjectItemCaseSensitive(p, "type"), *tx = cJSON_GetObjectItemCaseSensitive(p, "text");
                if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "text") || !cJSON_IsString(tx)) {
                    snprintf(err, errlen, "messages.json: message %d has a content part that is not text", i + 1);
                    rc = -1;
                    break;
                }
                char *q = realloc(body, blen + strlen(tx->valuestring) + 1);
                if (q) body = q, strcpy(body + blen, tx->valuestring), blen += strlen(tx->valuestring);
            }
        } else {
            snprintf(err, errlen, "messages.json: message %d has no \"content\" string", i + 1);
            rc = -1;
        }
        if (rc < 0 || !body) {
            free(body);
            break;
        }
        const char *r = role->valuestring;
        if (!strcmp(r, "system") || !strcmp(r, "developer")) append_merged(&im->system, &sys_len, body);
        else if (!strcmp(r, "user") || !strcmp(r, "assistant")) {
            int user = r[0] == 'u';
            if (im->n && im->turns[im->n - 1].user == user) {
                append_merged(&im->turns[im->n - 1].text, &lens[im->n - 1], body);
                im->turns[im->n - 1].len = lens[im->n - 1];
            } else {
                im->turns[im->n] = (turn){user, strdup(body), blen, 1, now_ns()};
                lens[im->n++] = blen;
            }
        } else {
            snprintf(err, errlen, "messages.json: message %d has role '%.40s' (system, developer, user or assistant)",
                     i + 1, r);
            rc = -1;
        }
        free(body);
    }
    free(lens);
    cJSON_Delete(a);
    if (rc > 0 && !im->system) im->system = strdup("");
    if (rc < 0) import_free(im);
    return rc;
}

static int do_import(chatfs *fs, conv *c, const char *text, size_t len) {
    if (busy(c)) return -EBUSY;
    import im;
    char err[256];
    int rc = parse_import(text, len, &im, err, sizeof err);
    if (rc <= 0) {
        set_error(c, "%s", err);
        return -EINVAL;
    }
    turns_truncate(c, 0);
    for (int i = 0; i < im.n; i++)
        if (turn_push(c, im.turns[i].user, im.turns[i].text, im.turns[i].len, 1, im.turns[i].mtime)) break;
    free(c->system);
    c->system = im.system;
    im.system = NULL;
    import_free(&im);
    c->mtime = c->mtime_system = now_ns();
    c->state = ST_IDLE;
    save_turns(fs, c, 0, 1);
    reset_reply(c);
    fs->n_imports++;
    return 0;
}

static int set_system(chatfs *fs, conv *c, const char *text, size_t len) {
    len = strip_newline(text, len);
    if (strlen(c->system) == len && !memcmp(c->system, text, len)) return 0;
    char *p = memdup0(text, len);
    if (!p) return -ENOMEM;
    free(c->system);
    c->system = p;
    c->mtime_system = now_ns();
    char err[256];
    if (fs->st && store_set_system(fs->st, c->id, c->system, c->mtime_system, err, sizeof err)) set_error(c, "%s", err);
    return 0;
}

/* conversation (c) or root (c NULL) settings */
static int set_settings(chatfs *fs, conv *c, const char *text, size_t len, int final) {
    conv_settings st, builtin;
    char err[400];
    settings_builtin(&builtin);
    int rc = blank(text, len) ? settings_parse("{}", 2, c ? &fs->defaults : &builtin, &st, err, sizeof err)
                              : settings_parse(text, len, c ? &fs->defaults : &builtin, &st, err, sizeof err);
    settings_free(&builtin);
    if (rc < 0 || (rc == 0 && final)) {
        if (c) set_error(c, "%s", err);
        return -EINVAL;
    }
    if (rc == 0 || !final) {
        if (rc > 0) settings_free(&st);
        return 0; /* a check at write time */
    }
    conv_settings *dst = c ? &c->st : &fs->defaults;
    if (settings_equal(dst, &st)) {
        settings_free(&st);
        return 0;
    }
    settings_free(dst);
    *dst = st;
    char *json = settings_render(dst);
    if (c) c->mtime_settings = now_ns();
    else fs->mtime_settings = now_ns();
    if (fs->st && json) {
        if (c && store_set_settings(fs->st, c->id, json, err, sizeof err)) set_error(c, "%s", err);
        if (!c) store_set_global(fs->st, "settings", json, err, sizeof err);
    }
    free(json);
    return 0;
}

/* ctl: whitespace-separated verbs. final=0 checks (a last word may still be growing). */
static int run_ctl(chatfs *fs, conv *c, const char *text, size_t len, int final) {
    char *copy = memdup0(text, len), *save = NULL;
    if (!copy) return -ENOMEM;
    int rc = 0, stopped = 0, trailing_space = len && strchr(" \t\r\n", text[len - 1]);
    for (char *w = strtok_r(copy, " \t\r\n", &save); w && !rc; w = strtok_r(NULL, " \t\r\n", &save)) {
        int last = !final && !trailing_space && w + strlen(w) == copy + len;
        if (last && (!strncmp("stop", w, strlen(w)) || !strncmp("regenerate", w, strlen(w)))) break;
        if (!strcmp(w, "stop")) {
            if (final) stop_gen(fs, c);
            stopped = 1;
        } else if (!strcmp(w, "regenerate")) {
            if (!final && busy(c) && !stopped) { /* "stop regenerate" is fine: it stops first */
                set_error(c, "a reply is being generated: write 'stop' first");
                rc = -EBUSY;
            } else if (final) rc = regenerate(fs, c);
        } else {
            set_error(c, "ctl: unknown command '%.40s' (stop, regenerate)", w);
            rc = -EINVAL;
        }
    }
    free(copy);
    return rc;
}

/* The text fits in the context together with c's history? fs->mu held; released while
 * the engine counts. 0 or -EFBIG. */
static int check_fits(chatfs *fs, conv *c, const char *text, size_t len) {
    size_t bytes = strlen(c->system) + len;
    for (int i = 0; i < c->n_turns; i++) bytes += c->turns[i].len;
    int ctx = fs->be->context(fs->be);
    /* a token covers at least one byte; the template adds a few per message */
    if (bytes + 16 * (size_t)(c->n_turns + 3) < (size_t)ctx) return 0;
    int n;
    chat_msg *m = build_msgs(c, c->n_turns, &n);
    char **copies = calloc(n + 1, sizeof *copies);
    char *t = memdup0(text, strip_newline(text, len));
    if (!m || !copies || !t) {
        free(m), free(copies), free(t);
        return -ENOMEM;
    }
    for (int i = 0; i < n; i++) m[i].content = copies[i] = strdup(m[i].content);
    m[n] = (chat_msg){"user", t};
    char *tmpl = c->st.template_name ? strdup(c->st.template_name) : NULL;
    pthread_mutex_unlock(&fs->mu);
    int tokens = fs->be->count_tokens(fs->be, m, n + 1, tmpl);
    pthread_mutex_lock(&fs->mu);
    for (int i = 0; i < n; i++) free(copies[i]);
    free(copies), free(m), free(t), free(tmpl);
    if (tokens >= ctx) {
        set_error(c, "the message makes the conversation %d tokens long, more than the context of %d", tokens, ctx);
        return -EFBIG;
    }
    return 0;
}

static int is_derived(int kind) {
    return kind == K_README || kind == K_STATS || kind == K_REPLY || kind == K_TRANSCRIPT || kind == K_STATUS ||
           kind == K_ERROR;
}

/* data written to (or renamed onto) a file node; fs->mu held */
static int commit(chatfs *fs, const node *nd, int created, const char *data, size_t len) {
    conv *c = nd->c;
    if (c && c->deleted) return -ENOENT;
    int rc = 0;
    switch (nd->kind) {
    case K_MESSAGE: rc = send_message(fs, c, data, len); break;
    case K_SYSTEM: rc = set_system(fs, c, data, len); break;
    case K_SETTINGS: rc = set_settings(fs, c, data, len, 1); break;
    case K_GSETTINGS: return set_settings(fs, NULL, data, len, 1);
    case K_MESSAGES: rc = do_import(fs, c, data, len); break;
    case K_CTL: rc = run_ctl(fs, c, data, len, 1); break;
    case K_TURN: rc = rewrite_turn(fs, c, nd->turn, data, len, created); break;
    default: return is_derived(nd->kind) ? -EACCES : -EISDIR;
    }
    if (rc == 0 && c && nd->kind != K_MESSAGE && nd->kind != K_CTL && nd->kind != K_TURN) clear_error(c);
    return rc;
}

/* ---- public: names ---- */

/* stats.json is rendered with the engine's lock, so its exact size (git, rsync) is
 * measured after ours is released */
static void stats_size(chatfs *fs, fs_attr *a) {
    size_t len = 0;
    free(stats_text(fs, &len));
    a->size = len;
}

int fs_lookup(chatfs *fs, uint32_t tid, uint64_t parent, const char *name, fs_attr *out) {
    pthread_mutex_lock(&fs->mu);
    node dir, nd;
    int rc = resolve(fs, parent, &dir);
    if (!rc) rc = child(fs, tid, &dir, name, &nd);
    if (!rc) rc = attr_of(fs, &nd, out);
    pthread_mutex_unlock(&fs->mu);
    if (!rc && nd.kind == K_STATS) stats_size(fs, out);
    return rc;
}

int fs_getattr(chatfs *fs, uint64_t ino, fs_attr *out) {
    pthread_mutex_lock(&fs->mu);
    node nd;
    int rc = resolve(fs, ino, &nd);
    if (!rc) rc = attr_of(fs, &nd, out);
    pthread_mutex_unlock(&fs->mu);
    if (!rc && nd.kind == K_STATS) stats_size(fs, out);
    return rc;
}

static scratch *scratch_new(chatfs *fs, uint64_t parent, const char *name, uint32_t mode) {
    scratch *s = calloc(1, sizeof *s);
    if (!s || !(s->name = strdup(name))) {
        free(s);
        return NULL;
    }
    s->ino = SCRATCH_BIT | fs->next_scratch++;
    s->parent = parent;
    s->mode = mode & 07777;
    s->mtime = now_ns();
    s->refs = 1;
    s->linked = 1;
    s->next = fs->scratch;
    fs->scratch = s;
    return s;
}

static void scratch_unref(scratch *s) {
    if (s && --s->refs == 0) {
        free(s->name);
        free(s->data);
        free(s);
    }
}

static void scratch_unlink(chatfs *fs, scratch *s) {
    for (scratch **p = &fs->scratch; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    s->linked = 0;
    scratch_unref(s);
}

static void touch_dir(chatfs *fs, const node *dir) {
    if (dir->kind == K_ROOT) fs->mtime_root = now_ns();
    else if (dir->c) dir->c->mtime = now_ns();
}

static int can_hold_scratch(const node *dir) { return dir->kind == K_ROOT || dir->kind == K_CONV || dir->kind == K_TURNS; }

int fs_mkdir(chatfs *fs, uint32_t tid, uint64_t parent, const char *name, fs_attr *out) {
    pthread_mutex_lock(&fs->mu);
    node dir, nd;
    int rc = resolve(fs, parent, &dir);
    if (rc) goto out;
    if (dir.kind == K_CONV && !strcmp(name, "turns") && fresh_for(dir.c, tid)) {
        /* cp -r making the copy's turns/: it is there already */
        dir.c->fresh_tid = 0;
        nd = (node){K_TURNS, dir.c, 0, NULL};
        rc = attr_of(fs, &nd, out);
        goto out;
    }
    if (child(fs, 0, &dir, name, &nd) == 0) {
        rc = -EEXIST;
        goto out;
    }
    if (dir.kind != K_ROOT) {
        rc = is_dir_kind(dir.kind) ? -EPERM : -ENOTDIR;
        goto out;
    }
    if (!valid_conv_name(name)) {
        rc = -EINVAL;
        goto out;
    }
    int64_t id = 0;
    char err[256];
    char *json = settings_render(&fs->defaults);
    if (fs->st) {
        id = store_create(fs->st, name, "", json ? json : "{}", now_ns(), err, sizeof err);
        if (id < 0) rc = -EIO;
    } else {
        for (int i = 0; i < fs->n_convs; i++)
            if (fs->convs[i]->id > id) id = fs->convs[i]->id;
        id++;
    }
    free(json);
    conv *c = rc ? NULL : conv_add(fs, id, name);
    if (!rc && !c) rc = -ENOMEM;
    if (rc) goto out;
    c->reply = stream_of_turn(NULL);
    c->fresh_tid = copier(tid) ? tid : 0;
    c->fresh_until = mono_ns() + FRESH_NS;
    fs->mtime_root = now_ns();
    nd = (node){K_CONV, c, 0, NULL};
    rc = attr_of(fs, &nd, out);
out:
    pthread_mutex_unlock(&fs->mu);
    return rc;
}

static int has_scratch(chatfs *fs, uint64_t dir) {
    for (scratch *s = fs->scratch; s; s = s->next)
        if (s->parent == dir) return 1;
    return 0;
}

int fs_rmdir(chatfs *fs, uint32_t tid, uint64_t parent, const char *name) {
    pthread_mutex_lock(&fs->mu);
    node dir, nd;
    int rc = resolve(fs, parent, &dir);
    if (!rc) rc = child(fs, 0, &dir, name, &nd);
    if (rc) goto out;
    if (nd.kind == K_TURNS) { /* virtual: removable when empty, and there again at once */
        rc = nd.c->n_turns || has_scratch(fs, conv_ino(nd.c, SUB_TURNS)) ? -ENOTEMPTY : 0;
        goto out;
    }
    if (nd.kind != K_CONV) {
        rc = -ENOTDIR;
        goto out;
    }
    conv *c = nd.c;
    if (c->n_turns || has_scratch(fs, conv_ino(c, 0)) || has_scratch(fs, conv_ino(c, SUB_TURNS))) {
        rc = -ENOTEMPTY;
        goto out;
    }
    if (busy(c)) stop_gen(fs, c);
    char err[256];
    if (fs->st && store_delete(fs->st, c->id, err, sizeof err)) {
        rc = -EIO;
        goto out;
    }
    char session[32];
    snprintf(session, sizeof session, "conversation-%lld", (long long)c->id);
    conv_remove(fs, c);
    fs->mtime_root = now_ns();
    unlock(fs);
    fs->be->forget_session(fs->be, session);
    return 0;
out:
    unlock(fs);
    return rc;
}

int fs_unlink(chatfs *fs, uint32_t tid, uint64_t parent, const char *name) {
    pthread_mutex_lock(&fs->mu);
    node dir, nd;
    int rc = resolve(fs, parent, &dir);
    if (!rc) rc = child(fs, 0, &dir, name, &nd);
    if (rc) goto out;
    switch (nd.kind) {
    case K_SCRATCH:
        scratch_unlink(fs, nd.sc);
        touch_dir(fs, &dir);
        break;
    case K_TURN: { /* the turn and every later one go; a reply being generated stops */
        conv *c = nd.c;
        if (busy(c)) stop_gen(fs, c);
        if (nd.turn < c->n_turns) {
            turns_truncate(c, nd.turn);
            save_turns(fs, c, nd.turn, 0);
            reset_reply(c);
            c->state = ST_IDLE;
            c->mtime = c->mtime_hist = now_ns();
        }
        break;
    }
    case K_ROOT:
    case K_CONV:
    case K_TURNS: rc = -EISDIR; break;
    default: rc = nd.c ? 0 : -EPERM; /* a conversation's own files stay (rm -r works) */
    }
out:
    unlock(fs);
    return rc;
}

int fs_symlink(chatfs *fs, uint32_t tid, const char *target, uint64_t parent, const char *name, fs_attr *out) {
    pthread_mutex_lock(&fs->mu);
    node dir, nd;
    int rc = resolve(fs, parent, &dir), user;
    if (!rc && child(fs, 0, &dir, name, &nd) == 0) rc = -EEXIST;
    else if (!rc && !can_hold_scratch(&dir)) rc = -ENOTDIR;
    else if (!rc && dir.kind == K_TURNS && parse_turn_name(name, &user) >= 0) rc = -EPERM; /* a later turn's name */
    scratch *s = NULL;
    if (!rc && !(s = scratch_new(fs, node_ino(&dir), name, 0777))) rc = -ENOMEM;
    if (!rc) {
        s->symlink = 1;
        s->len = strlen(target);
        s->cap = s->len + 1;
        s->data = strdup(target);
        touch_dir(fs, &dir);
        nd = (node){K_SCRATCH, dir.c, 0, s};
        rc = attr_of(fs, &nd, out);
    }
    pthread_mutex_unlock(&fs->mu);
    return rc;
}

int fs_readlink(chatfs *fs, uint64_t ino, char **target) {
    pthread_mutex_lock(&fs->mu);
    node nd;
    int rc = resolve(fs, ino, &nd);
    if (!rc && (nd.kind != K_SCRATCH || !nd.sc->symlink)) rc = -EINVAL;
    if (!rc && !(*target = memdup0(nd.sc->data, nd.sc->len))) rc = -ENOMEM;
    pthread_mutex_unlock(&fs->mu);
    return rc;
}

static int scratch_set(scratch *s, const char *data, size_t len) {
    char *p = memdup0(data, len);
    if (!p) return -ENOMEM;
    free(s->data);
    s->data = p;
    s->len = len;
    s->cap = len + 1;
    s->mtime = now_ns();
    return 0;
}

int fs_rename(chatfs *fs, uint32_t tid, uint64_t parent, const char *name, uint64_t newparent, const char *newname,
              unsigned flags) {
    if (flags & ~1u) return -EINVAL; /* RENAME_NOREPLACE only */
    pthread_mutex_lock(&fs->mu);
    node dir, ndir, src, dst;
    int rc = resolve(fs, parent, &dir);
    if (!rc) rc = resolve(fs, newparent, &ndir);
    if (!rc) rc = child(fs, 0, &dir, name, &src);
    if (rc) goto out;
    if (!is_dir_kind(ndir.kind)) {
        rc = -ENOTDIR;
        goto out;
    }
    int exists = child(fs, 0, &ndir, newname, &dst) == 0;
    if (exists && (flags & 1)) {
        rc = -EEXIST;
        goto out;
    }
    if (src.kind == K_CONV) { /* mv a b: a conversation's new name */
        if (ndir.kind != K_ROOT) rc = -EPERM;
        else if (exists) rc = dst.kind == K_CONV && dst.c == src.c ? 0 : -ENOTEMPTY;
        else if (!valid_conv_name(newname)) rc = -EINVAL;
        else {
            char err[256], *n = strdup(newname);
            if (!n) rc = -ENOMEM;
            else if (fs->st && store_rename(fs->st, src.c->id, newname, err, sizeof err)) rc = -EIO, free(n);
            else {
                free(src.c->name);
                src.c->name = n;
                fs->mtime_root = now_ns();
            }
        }
        goto out;
    }
    if (is_dir_kind(src.kind) || (exists && is_dir_kind(dst.kind))) {
        rc = exists && is_dir_kind(dst.kind) && !is_dir_kind(src.kind) ? -EISDIR : -EPERM;
        goto out;
    }
    if (src.kind == K_SCRATCH) {
        scratch *s = src.sc;
        if (s->symlink && exists && dst.kind != K_SCRATCH) {
            rc = -EPERM;
        } else if (exists && dst.kind == K_SCRATCH) {
            if (dst.sc != s) {
                scratch_unlink(fs, dst.sc);
                free(s->name);
                s->name = strdup(newname);
                s->parent = newparent;
            }
        } else if (exists && is_derived(dst.kind)) {
            /* a copy tool putting a view in place in a fresh copy: nothing to keep */
            if (dst.c && fresh_for(dst.c, tid)) scratch_unlink(fs, s);
            else rc = -EACCES;
        } else if (exists) { /* an editor's or rsync's temporary file renamed onto a real one */
            rc = commit(fs, &dst, 0, s->data ? s->data : "", s->len);
            if (!rc) scratch_unlink(fs, s);
        } else {
            int user, idx = ndir.kind == K_TURNS ? parse_turn_name(newname, &user) : -1;
            if (idx >= 0) { /* a new turn */
                conv *c = ndir.c;
                if (idx != c->n_turns || busy(c)) rc = busy(c) ? -EBUSY : -EACCES;
                else if (!(rc = turn_push(c, user, "", 0, 1, now_ns()))) {
                    save_turns(fs, c, idx, 0);
                    node t = {K_TURN, c, idx, NULL};
                    rc = commit(fs, &t, 1, s->data ? s->data : "", s->len);
                    if (!rc) scratch_unlink(fs, s);
                }
            } else {
                rc = 0;
            }
            if (!rc && idx < 0) {
                free(s->name);
                s->name = strdup(newname);
                s->parent = newparent;
            }
        }
        if (!rc) touch_dir(fs, &dir), touch_dir(fs, &ndir);
        goto out;
    }
    /* a conversation's file or a turn renamed away (vim and emacs backups: f -> f~):
     * the name gets a scratch copy and the file stays */
    if (exists && dst.kind != K_SCRATCH) {
        rc = -EPERM;
        goto out;
    }
    int user;
    if (!exists && ndir.kind == K_TURNS && parse_turn_name(newname, &user) >= 0) {
        rc = -EPERM;
        goto out;
    }
    sbuf b = {0};
    if (src.kind == K_STATS) rc = -EPERM;
    else rc = render(fs, &src, &b);
    if (!rc) {
        scratch *s = exists ? dst.sc : scratch_new(fs, newparent, newname, 0644);
        rc = s ? scratch_set(s, b.p ? b.p : "", b.len) : -ENOMEM;
        touch_dir(fs, &ndir);
    }
    free(b.p);
out:
    unlock(fs);
    return rc;
}

int fs_readdir(chatfs *fs, uint64_t ino, fs_dirent **ents, int *n) {
    pthread_mutex_lock(&fs->mu);
    node dir;
    int rc = resolve(fs, ino, &dir);
    if (!rc && !is_dir_kind(dir.kind)) rc = -ENOTDIR;
    if (rc) {
        pthread_mutex_unlock(&fs->mu);
        return rc;
    }
    int cap = 16 + N_CONV_FILES + fs->n_convs + (dir.c ? dir.c->n_turns : 0);
    for (scratch *s = fs->scratch; s; s = s->next) cap++;
    fs_dirent *e = calloc(cap, sizeof *e);
    int k = 0;
    if (!e) {
        pthread_mutex_unlock(&fs->mu);
        return -ENOMEM;
    }
#define ADD(nm, in, md) (e[k].name = strdup(nm), e[k].ino = (in), e[k].mode = (md), k++)
    ADD(".", node_ino(&dir), S_IFDIR);
    ADD("..", dir.kind == K_TURNS ? conv_ino(dir.c, 0) : FS_ROOT_INO, S_IFDIR);
    if (dir.kind == K_ROOT) {
        for (size_t i = 0; i < sizeof root_files / sizeof *root_files; i++)
            ADD(root_files[i].name, root_files[i].ino, root_files[i].mode);
        for (int i = 0; i < fs->n_convs; i++) ADD(fs->convs[i]->name, conv_ino(fs->convs[i], 0), S_IFDIR);
    } else if (dir.kind == K_CONV) {
        for (int i = 0; i < N_CONV_FILES; i++)
            ADD(conv_files[i].name, conv_ino(dir.c, conv_files[i].sub), conv_files[i].mode);
    } else {
        /* last turn first: rm -r removes in this order, and removing the last turn is
         * the only removal that keeps the others (cp sorts by inode, so it copies in order) */
        for (int i = dir.c->n_turns - 1; i >= 0; i--) {
            char nm[64];
            turn_name(dir.c, i, nm, sizeof nm);
            ADD(nm, conv_ino(dir.c, SUB_TURN0 + i), S_IFREG);
        }
    }
    uint64_t dino = node_ino(&dir);
    for (scratch *s = fs->scratch; s; s = s->next)
        if (s->parent == dino) ADD(s->name, s->ino, s->symlink ? S_IFLNK : S_IFREG);
#undef ADD
    pthread_mutex_unlock(&fs->mu);
    *ents = e;
    *n = k;
    return 0;
}

void fs_dirents_free(fs_dirent *ents, int n) {
    for (int i = 0; i < n; i++) free(ents[i].name);
    free(ents);
}

/* ---- public: files ---- */

static int buffered(int kind) {
    return kind == K_MESSAGE || kind == K_SYSTEM || kind == K_SETTINGS || kind == K_GSETTINGS || kind == K_MESSAGES ||
           kind == K_CTL || kind == K_TURN;
}

static int open_node(chatfs *fs, const node *nd, int flags, int created, int discard, fs_handle **out) {
    int wr = (flags & O_ACCMODE) != O_RDONLY;
    if (is_dir_kind(nd->kind)) return -EISDIR;
    if (wr && !discard) {
        if (is_derived(nd->kind)) return -EACCES;
        if (nd->c && busy(nd->c) && (nd->kind == K_MESSAGE || nd->kind == K_TURN || nd->kind == K_MESSAGES)) {
            set_error(nd->c, "a reply is being generated: wait for it or write 'stop' to ctl");
            return -EBUSY;
        }
    }
    fs_handle *h = calloc(1, sizeof *h);
    if (!h) return -ENOMEM;
    h->ino = node_ino(nd);
    h->kind = nd->kind;
    h->c = nd->c;
    h->turn = nd->turn;
    h->flags = flags;
    h->wr = wr;
    h->discard = discard;
    h->created = created;
    if (h->c) h->c->refs++;
    if (nd->kind == K_REPLY) {
        h->s = nd->c->reply;
        if (h->s) h->s->refs++;
    }
    if (nd->kind == K_SCRATCH) {
        h->sc = nd->sc;
        h->sc->refs++;
        if (wr && (flags & O_TRUNC)) h->sc->len = 0, h->sc->mtime = now_ns();
    }
    if (wr && buffered(nd->kind) && !discard) {
        if (flags & O_TRUNC) h->truncated = 1;
        else if (nd->kind != K_MESSAGE && nd->kind != K_CTL) { /* writes land over the current text */
            sbuf b = {0};
            render(fs, nd, &b);
            h->buf = b.p;
            h->len = b.len;
            h->cap = b.cap;
        }
    }
    *out = h;
    return 0;
}

int fs_open(chatfs *fs, uint32_t tid, uint64_t ino, int flags, fs_handle **h) {
    pthread_mutex_lock(&fs->mu);
    node nd;
    int rc = resolve(fs, ino, &nd);
    if (!rc) rc = open_node(fs, &nd, flags, 0, 0, h);
    pthread_mutex_unlock(&fs->mu);
    return rc;
}

int fs_create(chatfs *fs, uint32_t tid, uint64_t parent, const char *name, uint32_t mode, int flags, fs_handle **h,
              fs_attr *out) {
    pthread_mutex_lock(&fs->mu);
    node dir, nd;
    int rc = resolve(fs, parent, &dir);
    if (rc) goto out;
    if (!can_hold_scratch(&dir)) {
        rc = -ENOTDIR;
        goto out;
    }
    if (child(fs, 0, &dir, name, &nd) == 0) {
        int discard = 0;
        if (dir.kind == K_CONV && nd.kind != K_SCRATCH && fresh_for(dir.c, tid)) {
            /* cp -r into a conversation it just made: the views and messages.json (the
             * turns carry the history) are taken and dropped; the rest imports */
            discard = is_derived(nd.kind) || nd.kind == K_MESSAGES;
        } else if (flags & O_EXCL) {
            rc = -EEXIST;
            goto out;
        }
        rc = open_node(fs, &nd, flags, 0, discard, h);
        if (!rc) rc = attr_of(fs, &nd, out);
        goto out;
    }
    int user, idx = dir.kind == K_TURNS ? parse_turn_name(name, &user) : -1;
    if (idx >= 0) { /* a new turn: appended now, filled by the writes */
        conv *c = dir.c;
        if (busy(c)) rc = -EBUSY;
        else if (idx != c->n_turns) {
            set_error(c, "turns/%s: the next turn is number %03d", name, c->n_turns + 1);
            rc = -EACCES;
        } else if (!(rc = turn_push(c, user, "", 0, 1, now_ns()))) {
            save_turns(fs, c, idx, 0);
            c->mtime = now_ns();
            nd = (node){K_TURN, c, idx, NULL};
            rc = open_node(fs, &nd, flags | O_TRUNC, 1, 0, h);
            if (!rc) rc = attr_of(fs, &nd, out);
        }
        goto out;
    }
    scratch *s = scratch_new(fs, parent, name, mode);
    if (!s) {
        rc = -ENOMEM;
        goto out;
    }
    touch_dir(fs, &dir);
    nd = (node){K_SCRATCH, dir.c, 0, s};
    rc = open_node(fs, &nd, flags, 1, 0, h);
    if (!rc) rc = attr_of(fs, &nd, out);
out:
    pthread_mutex_unlock(&fs->mu);
    return rc;
}

int fs_handle_nonblock(const fs_handle *h) { return (h->flags & O_NONBLOCK) != 0; }
uint64_t fs_handle_ino(const fs_handle *h) { return h->ino; }

ssize_t fs_read(chatfs *fs, fs_handle *h, off_t off, size_t size, char *buf) {
    if (h->kind == K_STATS) {
        size_t len = 0;
        char *t = stats_text(fs, &len);
        if (!t) return -ENOMEM;
        size_t n = (size_t)off < len ? len - off : 0;
        if (n > size) n = size;
        memcpy(buf, t + (n ? off : 0), n);
        free(t);
        return (ssize_t)n;
    }
    pthread_mutex_lock(&fs->mu);
    ssize_t rc;
    if (h->kind == K_REPLY) {
        stream *s = h->s;
        if (s && (size_t)off < s->len) {
            rc = (ssize_t)(s->len - off < size ? s->len - off : size);
            memcpy(buf, s->buf + off, rc);
        } else if (s && !s->done) rc = -EAGAIN;
        else rc = s && s->failed ? -EIO : 0;
    } else if (h->kind == K_SCRATCH) {
        scratch *s = h->sc;
        rc = (size_t)off < s->len ? (ssize_t)(s->len - off < size ? s->len - off : size) : 0;
        if (rc > 0) memcpy(buf, s->data + off, rc);
    } else {
        node nd;
        rc = resolve(fs, h->ino, &nd);
        sbuf b = {0};
        if (!rc) rc = render(fs, &nd, &b);
        if (!rc) {
            rc = (size_t)off < b.len ? (ssize_t)(b.len - off < size ? b.len - off : size) : 0;
            if (rc > 0) memcpy(buf, b.p + off, rc);
        }
        free(b.p);
    }
    if (rc >= 0) h->pos = off + rc;
    pthread_mutex_unlock(&fs->mu);
    return rc;
}

int fs_poll_ready(chatfs *fs, fs_handle *h) {
    if (h->kind != K_REPLY || !h->s) return 1;
    pthread_mutex_lock(&fs->mu);
    int ready = h->s->done || (size_t)h->pos < h->s->len;
    pthread_mutex_unlock(&fs->mu);
    return ready;
}

ssize_t fs_write(chatfs *fs, fs_handle *h, off_t off, const char *buf, size_t size) {
    if (!h->wr) return -EBADF; /* wr and discard never change after open */
    if (h->discard) return (ssize_t)size;
    pthread_mutex_lock(&fs->mu);
    ssize_t rc = (ssize_t)size;
    char **data;
    size_t *len, *cap;
    if (h->kind == K_SCRATCH) data = &h->sc->data, len = &h->sc->len, cap = &h->sc->cap;
    else data = &h->buf, len = &h->len, cap = &h->cap;
    if (h->flags & O_APPEND) off = (off_t)*len; /* appends land at the end of what this handle has */
    size_t old = *len;
    int e = reserve(data, cap, (size_t)off + size + 1);
    if (e) {
        if (h->c && e == -EFBIG) set_error(h->c, "more than %u MiB written at once", MAX_BUFFER >> 20);
        rc = e;
        goto out;
    }
    if ((size_t)off > *len) memset(*data + *len, 0, off - *len);
    memcpy(*data + off, buf, size);
    if ((size_t)off + size > *len) *len = (size_t)off + size;
    if (h->kind == K_SCRATCH) {
        h->sc->mtime = now_ns();
        goto out;
    }
    h->written = 1; /* even when refused below: then release must not commit a truncation */
    /* refuse where shells look: at write, not at close */
    int v = 0;
    switch (h->kind) {
    case K_MESSAGE: v = check_fits(fs, h->c, h->buf, h->len); break;
    case K_SETTINGS: v = set_settings(fs, h->c, h->buf, h->len, 0); break;
    case K_GSETTINGS: v = set_settings(fs, NULL, h->buf, h->len, 0); break;
    case K_CTL: v = run_ctl(fs, h->c, h->buf, h->len, 0); break;
    case K_MESSAGES: {
        import im;
        char err[256];
        if (h->c && busy(h->c)) v = -EBUSY;
        else if (parse_import(h->buf, h->len, &im, err, sizeof err) < 0) {
            set_error(h->c, "%s", err);
            v = -EINVAL;
        } else import_free(&im);
        break;
    }
    }
    if (v) {
        *len = old; /* the refused bytes are not kept */
        rc = v;
    } else {
        h->dirty = 1;
    }
out:
    pthread_mutex_unlock(&fs->mu);
    return rc;
}

/* Commit rule: a flush (close) commits what was written since the last commit. */
int fs_flush(chatfs *fs, fs_handle *h) {
    pthread_mutex_lock(&fs->mu); /* also for h: a write may come on another thread */
    int rc = 0;
    if (h->dirty && !h->discard) {
        h->dirty = 0;
        node nd;
        rc = resolve(fs, h->ino, &nd);
        if (!rc) rc = commit(fs, &nd, h->created, h->buf ? h->buf : "", h->len);
        h->committed = 1;
        if (h->kind == K_MESSAGE || h->kind == K_CTL) h->len = 0; /* the next write starts a new message */
        h->created = 0;
    }
    unlock(fs);
    return rc;
}

void fs_release(chatfs *fs, fs_handle *h) {
    pthread_mutex_lock(&fs->mu);
    /* no flush came (or `: > system` truncated without writing): commit now */
    if (h->wr && !h->discard && (h->dirty || (h->truncated && !h->written && !h->committed)) &&
        (h->dirty || h->kind == K_SYSTEM || h->kind == K_SETTINGS || h->kind == K_GSETTINGS)) {
        node nd;
        if (resolve(fs, h->ino, &nd) == 0) commit(fs, &nd, h->created, h->buf ? h->buf : "", h->len);
    }
    if (h->sc) scratch_unref(h->sc);
    stream_unref(h->s);
    conv_unref(h->c);
    free(h->buf);
    free(h);
    unlock(fs);
}

int fs_setattr(chatfs *fs, uint32_t tid, uint64_t ino, fs_handle *h, const fs_setattr_in *in, fs_attr *out) {
    pthread_mutex_lock(&fs->mu);
    node nd;
    int rc = resolve(fs, ino, &nd);
    if (rc) goto out;
    if (nd.kind == K_SCRATCH) {
        scratch *s = nd.sc;
        if (in->valid & FS_SET_MODE) s->mode = in->mode & 07777;
        if (in->valid & FS_SET_MTIME) s->mtime = in->mtime_ns;
        if ((in->valid & FS_SET_SIZE) && !(rc = reserve(&s->data, &s->cap, in->size + 1))) {
            if (in->size > s->len) memset(s->data + s->len, 0, in->size - s->len);
            s->len = in->size;
            if (!(in->valid & FS_SET_MTIME)) s->mtime = now_ns();
        }
    } else if (in->valid & FS_SET_SIZE) {
        if (h && h->wr && buffered(h->kind) && !h->discard) { /* ftruncate on a writer (vim) */
            if (!(rc = reserve(&h->buf, &h->cap, in->size + 1))) {
                if (in->size > h->len) memset(h->buf + h->len, 0, in->size - h->len);
                h->len = in->size;
                h->truncated = 1;
            }
        } else if (h && h->discard) {
        } else if (nd.kind == K_SYSTEM || nd.kind == K_SETTINGS || nd.kind == K_GSETTINGS) {
            /* truncate(1) without an open file: `truncate -s 0 system` clears it */
            sbuf b = {0};
            render(fs, &nd, &b);
            if (in->size < b.len) rc = commit(fs, &nd, 0, b.p ? b.p : "", in->size);
            free(b.p);
        } else if (nd.kind == K_MESSAGE || nd.kind == K_CTL) {
        } else rc = is_dir_kind(nd.kind) ? -EISDIR : -EACCES;
    }
    /* chmod, chown and utimes elsewhere are accepted and change nothing (cp -p, rsync -a) */
    if (!rc) rc = attr_of(fs, &nd, out);
out:
    unlock(fs);
    return rc;
}
