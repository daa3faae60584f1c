/* fuzz_chatfs.c - libFuzzer target for the conversation logic without FUSE (fs/chatfs.c,
 * fs/settings.c) on the fake engine: the filesystem's issue asks that it "can also be
 * tested and fuzzed directly". Each input is a fresh filesystem and a script of
 * operations; no script may crash it, leak (ASan's leak check) or leave it inconsistent:
 * every file must read as many bytes as its size says, every name a directory lists must
 * look up to the same inode.
 *   make fuzz-chatfs     (clang -fsanitize=fuzzer,address,undefined; runs FUZZ_SECONDS)
 *
 * The input is lines, one operation each: an op byte, its argument bytes, then the rest
 * of the line as TEXT (escapes: \n \t \0 \xHH, \\ a backslash, \| a boundary between two
 * write calls). S picks one of four conversation names (any byte, mod 4; "a" to "d" until
 * mkdir or mv sets one); F picks a file of that conversation (table below); N is TEXT as a
 * decimal number.
 *   mS NAME  mkdir NAME, S names it from now    MS NAME  the same by cp (a fresh copy)
 *   nS NAME  mv S NAME                          NS NAME  the same, RENAME_NOREPLACE
 *   dS       rmdir S                            DS       rm -r S (files, turns last first)
 *   iS       mkdir S/turns (what cp -r does)
 *   T        the operations after it come from another process (a fresh copy hides its
 *            files from cp only); the next T switches back
 *   wSF TEXT echo TEXT > F: open (or create) with O_TRUNC, an empty flush (the shell's
 *            dup2), the writes, flush, close    aSF TEXT the same with O_APPEND (>>)
 *   oSF TEXT TEXT written over F from offset 0, closed without a flush
 *   kSF TEXT vim: open, ftruncate, the writes, chmod, flush, close
 *   vSF TEXT an editor's temporary file with TEXT renamed onto F
 *   xSF TEXT tar -xf: create F with O_EXCL; on EEXIST unlink it and create it again
 *   tSF N    truncate F to N bytes              uSF      rm F
 *   bSF      mv F F~                            lSF      ln -s target F
 *   cSF      cat F                              C        cat and ls everything (also at the end)
 *   OSFM     open F and hold it in the next of four handles (M mod 4: read, >, >>, read-write)
 *   Hn TEXT  write to held handle n mod 4 at its end     Fn / Yn / Xn  flush / read / close it
 *   s N      let the engine's worker run N callbacks (a reply of n tokens takes 2n + 2:
 *            a progress report, then text and a report for each token, then the end)
 * F: m message, r reply, s system, j settings.json, J messages.json, x transcript.md,
 * S status, e error, c ctl, t turns/, / the conversation's directory, g ../settings.json,
 * G ../stats.json, R ../README, ~ message~, . .message.swp, # .#message, , turns/.x.swp,
 * 1-9 turns/00N-user.md (odd) or -assistant.md (even), a byte >= 0x80 turn (b & 63) + 1,
 * user when b & 64; any other byte one of the named files, by its value.
 *
 * The engine is the fake (fs/backend_fake.c) without delays and with a context of 512
 * tokens (long conversations reach its end), behind a gate: its worker stops before each
 * callback until an `s` lets it on, and `s` returns when the worker has used what it was
 * given and stopped again (or has nothing left to do). So an input always runs the same
 * way, and a reply is exactly as far along as the script says: the busy paths (EBUSY,
 * stop, rm or an edit while a reply streams, a reader that caught up) are reached
 * deterministically. Nothing persists (no store). CHATFS_FUZZ_TRACE=1 prints each
 * operation and what it returned: what an input (a crash in build-fuzz/) does. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "fs/chatfs.h"

/* settings_to_gen (fs/settings.c) starts from the engine's defaults, which live in
 * engine/runtime/chat.c with the whole engine behind them; it is not linked here (and Debian's
 * clang cannot build its CPU dispatch). The fake reads only max_tokens and the session. */
void gen_settings_defaults(gen_settings *s) { memset(s, 0, sizeof *s); }

/* ---- the gate between the fake engine's worker and the filesystem's callbacks ---- */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int permits, jobs;
    int inside; /* the worker is between a permit and the next callback (or its job's end) */
    int open;   /* everything passes: the end of an input */
} gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0};

static uint64_t (*fake_submit)(fs_backend *b, const chat_msg *msgs, int n, const gen_settings *s,
                               const gen_callbacks *cb, char *err, size_t errlen);

/* the worker waits here before each callback */
static void pass(void) {
    pthread_mutex_lock(&gate.mu);
    gate.inside = 0;
    pthread_cond_broadcast(&gate.cv);
    while (!gate.permits && !gate.open) pthread_cond_wait(&gate.cv, &gate.mu);
    if (!gate.open) gate.permits--, gate.inside = 1;
    pthread_mutex_unlock(&gate.mu);
}

static void gated_text(void *ud, const char *text, size_t len) {
    gen_callbacks *cb = ud;
    pass();
    cb->on_text(cb->ud, text, len);
}

static void gated_progress(void *ud, const gen_report *r) {
    gen_callbacks *cb = ud;
    pass();
    cb->on_progress(cb->ud, r);
}

static void gated_done(void *ud, const gen_report *r, const char *error) {
    gen_callbacks *cb = ud;
    pass();
    cb->on_done(cb->ud, r, error);
    pthread_mutex_lock(&gate.mu);
    gate.jobs--;
    gate.inside = 0;
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.mu);
    free(cb);
}

/* The fake's submit with the callbacks gated. A "#delay=MS" in a message would make the
 * worker sleep outside the gate: it is defused ("#delay-"). */
static uint64_t gated_submit(fs_backend *b, const chat_msg *msgs, int n, const gen_settings *s,
                             const gen_callbacks *cb, char *err, size_t errlen) {
    gen_callbacks *inner = malloc(sizeof *inner);
    chat_msg *m = calloc(n + 1, sizeof *m);
    if (!inner || !m) abort();
    *inner = *cb;
    for (int i = 0; i < n; i++) {
        char *t = strdup(msgs[i].content);
        if (!t) abort();
        for (char *p = t; (p = strstr(p, "#delay="));) p[6] = '-';
        m[i] = (chat_msg){msgs[i].role, t, NULL};
    }
    pthread_mutex_lock(&gate.mu);
    gate.jobs++;
    pthread_mutex_unlock(&gate.mu);
    uint64_t id = fake_submit(b, m, n, s, &(gen_callbacks){.on_text = gated_text, .on_progress = gated_progress,
                                                                  .on_done = gated_done, .ud = inner,
                                                                  .on_reasoning = NULL /* the fuzzed fake does not think */},
                              err, errlen);
    if (!id) { /* refused: no callback comes */
        pthread_mutex_lock(&gate.mu);
        gate.jobs--;
        pthread_mutex_unlock(&gate.mu);
        free(inner);
    }
    for (int i = 0; i < n; i++) free((char *)m[i].content);
    free(m);
    return id;
}

/* Waits until the worker has used its permits and stopped at the gate (or has nothing
 * to do). Until then it changes nothing anyone sees, wherever it is: a new request
 * needs no wait. */
static void settle(void) {
    pthread_mutex_lock(&gate.mu);
    while (gate.jobs && (gate.permits || gate.inside)) pthread_cond_wait(&gate.cv, &gate.mu);
    gate.permits = 0;
    pthread_mutex_unlock(&gate.mu);
}

static void step(int n) {
    pthread_mutex_lock(&gate.mu);
    gate.permits += n;
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.mu);
    settle();
}

/* ---- the script ---- */

static chatfs *fs;
static uint32_t tid, me;
static char slot[4][300];
static struct {
    fs_handle *h;
    off_t end;
} held[4];
static int next_held;
static int trace; /* CHATFS_FUZZ_TRACE */

typedef struct {
    char *p;
    size_t len;
    size_t cut[16]; /* write boundaries (\|) */
    int n_cut;
} text;

#define CHECK(cond)                                                               \
    do {                                                                          \
        if (!(cond)) {                                                            \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                              \
        }                                                                         \
    } while (0)

static int hex(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* the rest of the line, unescaped; *in moves past its newline */
static void rest(const uint8_t **in, const uint8_t *end, text *t) {
    const uint8_t *s = *in, *nl = memchr(s, '\n', (size_t)(end - s)), *e = nl ? nl : end;
    t->p = malloc((size_t)(e - s) + 1);
    if (!t->p) abort();
    t->len = 0;
    t->n_cut = 0;
    for (const uint8_t *q = s; q < e; q++) {
        int ch = *q;
        if (ch == '\\' && q + 1 < e) {
            ch = *++q;
            if (ch == 'n') ch = '\n';
            else if (ch == 't') ch = '\t';
            else if (ch == '0') ch = 0;
            else if (ch == '|') {
                if (t->n_cut < 16) t->cut[t->n_cut++] = t->len;
                continue;
            } else if (ch == 'x' && e - q > 2 && hex(q[1]) >= 0 && hex(q[2]) >= 0) {
                ch = hex(q[1]) << 4 | hex(q[2]);
                q += 2;
            }
        }
        t->p[t->len++] = (char)ch;
    }
    t->p[t->len] = 0;
    *in = nl ? nl + 1 : end;
}

/* TEXT as a decimal number from 0 to max */
static int number(const text *t, int max) {
    int n = atoi(t->p);
    return n < 0 ? 0 : n > max ? max : n;
}

/* one argument byte; 0 at the end of the line */
static int arg(const uint8_t **in, const uint8_t *end) { return *in < end && **in != '\n' ? *(*in)++ : 0; }

enum { IN_ROOT, IN_CONV, IN_TURNS, THE_CONV };

static const struct {
    char key;
    int where;
    const char *name;
} files[] = {
    {'m', IN_CONV, "message"},       {'r', IN_CONV, "reply"},         {'s', IN_CONV, "system"},
    {'j', IN_CONV, "settings.json"}, {'J', IN_CONV, "messages.json"}, {'x', IN_CONV, "transcript.md"},
    {'S', IN_CONV, "status"},        {'e', IN_CONV, "error"},         {'c', IN_CONV, "ctl"},
    {'t', IN_CONV, "turns"},         {'/', THE_CONV, ""},             {'g', IN_ROOT, "settings.json"},
    {'G', IN_ROOT, "stats.json"},    {'R', IN_ROOT, "README"},        {'~', IN_CONV, "message~"},
    {'.', IN_CONV, ".message.swp"},  {'#', IN_CONV, ".#message"},     {',', IN_TURNS, ".x.swp"},
};
#define N_FILES (int)(sizeof files / sizeof *files)

/* File f of conversation slot k: the inode of its directory (or -errno) and its name. */
static int64_t locate(int k, int f, char *leaf, size_t n) {
    int where;
    if (f >= 0x80 || (f >= '1' && f <= '9')) {
        int num = f >= 0x80 ? (f & 63) + 1 : f - '0', user = f >= 0x80 ? (f & 64) != 0 : num % 2;
        snprintf(leaf, n, "%03d-%s.md", num, user ? "user" : "assistant");
        where = IN_TURNS;
    } else {
        int i = 0;
        while (i < N_FILES && files[i].key != f) i++;
        if (i == N_FILES) i = f % N_FILES;
        snprintf(leaf, n, "%s", files[i].where == THE_CONV ? slot[k] : files[i].name);
        where = files[i].where;
    }
    if (where == IN_ROOT || where == THE_CONV) return FS_ROOT_INO;
    fs_attr a;
    int rc = fs_lookup(fs, tid, FS_ROOT_INO, slot[k], &a);
    if (!rc && where == IN_TURNS) rc = fs_lookup(fs, tid, a.ino, "turns", &a);
    return rc ? rc : (int64_t)a.ino;
}

/* the writes of t from *off (split where it says \|), moving *off; 0 or the first error */
static int put(fs_handle *h, const text *t, off_t *off) {
    size_t from = 0;
    int rc = 0;
    for (int i = 0; i <= t->n_cut; i++) {
        size_t to = i < t->n_cut ? t->cut[i] : t->len;
        ssize_t n = to > from ? fs_write(fs, h, *off, t->p + from, to - from) : 0;
        if (n > 0) *off += n;
        else if (n < 0 && !rc) rc = (int)n;
        from = to;
    }
    return rc;
}

/* Opens (or creates, for writing) file f of slot k. 0 or -errno. */
static int open_file(int k, int f, int flags, fs_handle **h, fs_attr *a) {
    char leaf[320];
    int64_t dir = locate(k, f, leaf, sizeof leaf);
    if (dir < 0) return (int)dir;
    if (fs_lookup(fs, tid, (uint64_t)dir, leaf, a) == 0) return fs_open(fs, tid, a->ino, flags, h);
    if ((flags & O_ACCMODE) == O_RDONLY) return -ENOENT;
    return fs_create(fs, tid, (uint64_t)dir, leaf, 0644, flags | O_CREAT, h, a);
}

/* 0 or the first error */
static int write_file(int op, int k, int f, const text *t) {
    int flags = op == 'w' ? O_WRONLY | O_TRUNC : op == 'a' ? O_WRONLY | O_APPEND : op == 'o' ? O_WRONLY : O_RDWR;
    fs_handle *h;
    fs_attr a;
    int rc = open_file(k, f, flags, &h, &a);
    if (rc) return rc;
    if (op == 'w' || op == 'a') rc = fs_flush(fs, h);
    if (op == 'k') rc = fs_setattr(fs, tid, a.ino, h, &(fs_setattr_in){FS_SET_SIZE, 0, 0, 0}, &a);
    off_t off = 0;
    int w = put(h, t, &off);
    if (!rc) rc = w;
    if (op == 'k') fs_setattr(fs, tid, a.ino, h, &(fs_setattr_in){FS_SET_MODE, 0, 0100644, 0}, &a);
    if (op != 'o' && (w = fs_flush(fs, h)) && !rc) rc = w;
    fs_release(fs, h);
    return rc;
}

static void check(uint64_t ino, int depth, const char *name);

/* a directory: every name it lists looks up (as anyone but a fresh copy's cp) to its inode */
static void check_dir(uint64_t ino, int depth) {
    fs_dirent *e;
    int n;
    if (fs_readdir(fs, 0, ino, &e, &n)) return;
    CHECK(n >= 2 && e[0].ino == ino);
    for (int i = 2; i < n; i++) {
        fs_attr a;
        CHECK(fs_lookup(fs, 0, ino, e[i].name, &a) == 0 && a.ino == e[i].ino);
        if (depth < 3) check(e[i].ino, depth + 1, e[i].name);
    }
    fs_dirents_free(e, n);
}

/* a file reads as many bytes as its size says (a reply being generated: so far) */
/* 1 when s[0..n) is UTF-8 without NUL bytes */
static int utf8_text(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        int len = !p[i] ? 0 : p[i] < 0x80 ? 1 : p[i] >= 0xC2 && p[i] < 0xE0 ? 2 : p[i] >= 0xE0 && p[i] < 0xF0 ? 3
                : p[i] >= 0xF0 && p[i] <= 0xF4 ? 4 : 0;
        if (!len || i + (size_t)len > n) return 0;
        for (int k = 1; k < len; k++)
            if ((p[i + k] & 0xC0) != 0x80) return 0;
        i += (size_t)len;
    }
    return 1;
}

/* a file: reads as many bytes as its size says (a reply being generated: so far); a
 * conversation's files are text (UTF-8 without NUL: what it refuses never gets in),
 * and its JSON files parse */
static void check(uint64_t ino, int depth, const char *name) {
    fs_attr a;
    if (fs_getattr(fs, ino, &a)) return;
    if (S_ISDIR(a.mode)) {
        check_dir(ino, depth);
        return;
    }
    if (S_ISLNK(a.mode)) {
        char *target;
        if (fs_readlink(fs, ino, &target) == 0) free(target);
    }
    fs_handle *h;
    if (fs_open(fs, tid, ino, O_RDONLY, &h)) return;
    static char buf[1 << 20];
    size_t len = 0;
    ssize_t got;
    while ((got = fs_read(fs, h, (off_t)len, len + 4096 <= sizeof buf ? 4096 : sizeof buf - len, buf + len)) > 0)
        len += (size_t)got;
    fs_poll_ready(fs, h);
    fs_release(fs, h);
    CHECK(len == a.size || len == sizeof buf);
    if (!(ino >> 62) && len < sizeof buf) { /* not a scratch file */
        CHECK(utf8_text(buf, len));
        if (name && (!strcmp(name, "messages.json") || !strcmp(name, "settings.json") || !strcmp(name, "stats.json"))) {
            cJSON *j = cJSON_ParseWithLength(buf, len);
            CHECK(j != NULL);
            cJSON_Delete(j);
        }
    }
}

static int64_t ino_of(int k, int f) {
    char leaf[320];
    fs_attr a;
    int64_t dir = locate(k, f, leaf, sizeof leaf);
    if (dir >= 0 && fs_lookup(fs, tid, (uint64_t)dir, leaf, &a) == 0) return (int64_t)a.ino;
    return -ENOENT;
}

/* rm -r: a conversation's files, its turns last first, turns/, then the directory */
static int rm_r(int k) {
    fs_attr conv, turns;
    fs_dirent *e;
    int n;
    int rc = fs_lookup(fs, tid, FS_ROOT_INO, slot[k], &conv);
    if (rc || (rc = fs_readdir(fs, tid, conv.ino, &e, &n))) return rc;
    for (int i = 2; i < n; i++) {
        if (strcmp(e[i].name, "turns")) {
            fs_unlink(fs, tid, conv.ino, e[i].name);
            continue;
        }
        fs_dirent *t;
        int m;
        if (fs_lookup(fs, tid, conv.ino, "turns", &turns) || fs_readdir(fs, tid, turns.ino, &t, &m)) continue;
        for (int j = 2; j < m; j++) fs_unlink(fs, tid, turns.ino, t[j].name);
        fs_dirents_free(t, m);
        fs_rmdir(fs, tid, conv.ino, "turns");
    }
    fs_dirents_free(e, n);
    return fs_rmdir(fs, tid, FS_ROOT_INO, slot[k]);
}

static void release_held(int i) {
    if (held[i].h) fs_release(fs, held[i].h);
    held[i].h = NULL;
}

/* one operation; what its main call returned (for CHATFS_FUZZ_TRACE) */
static int run(int op, const int *x, const text *t) {
    int k = x[0] & 3, f = x[1], rc = 0;
    char leaf[320], other[330];
    int64_t dir, ino;
    off_t off = 0;
    fs_attr a;
    fs_handle *h, **held_h = &held[x[0] & 3].h;
    switch (op) {
    case 'm':
    case 'M': { /* the slot names NAME even when mkdir fails */
        char old[32] = "";
        if (op == 'M') prctl(PR_GET_NAME, old), prctl(PR_SET_NAME, "cp");
        rc = fs_mkdir(fs, op == 'M' ? me : tid, FS_ROOT_INO, t->p, &a);
        if (op == 'M') prctl(PR_SET_NAME, old);
        snprintf(slot[k], sizeof slot[k], "%s", t->p);
        return rc;
    }
    case 'n':
    case 'N':
        if (!(rc = fs_rename(fs, tid, FS_ROOT_INO, slot[k], FS_ROOT_INO, t->p, op == 'N')))
            snprintf(slot[k], sizeof slot[k], "%s", t->p);
        return rc;
    case 'd': return fs_rmdir(fs, tid, FS_ROOT_INO, slot[k]);
    case 'D': return rm_r(k);
    case 'i': return (rc = fs_lookup(fs, tid, FS_ROOT_INO, slot[k], &a)) ? rc : fs_mkdir(fs, tid, a.ino, "turns", &a);
    case 'T': tid = tid == me ? 0 : me; return 0;
    case 'w':
    case 'a':
    case 'o':
    case 'k': return write_file(op, k, f, t);
    case 'x': /* tar -xf: O_EXCL, and on EEXIST unlink and create again (tar loops on it) */
        if ((dir = locate(k, f, leaf, sizeof leaf)) < 0) return (int)dir;
        for (int tries = 0; (rc = fs_create(fs, tid, (uint64_t)dir, leaf, 0644, O_WRONLY | O_CREAT | O_EXCL, &h, &a)) ==
                                -EEXIST && tries < 3;
             tries++)
            if (fs_unlink(fs, tid, (uint64_t)dir, leaf)) break;
        if (rc) return rc;
        rc = put(h, t, &off);
        int fl = fs_flush(fs, h);
        fs_release(fs, h);
        return rc ? rc : fl;
    case 'v':
        if ((dir = locate(k, f, leaf, sizeof leaf)) < 0) return (int)dir;
        snprintf(other, sizeof other, ".%s.tmp", leaf);
        if ((rc = fs_create(fs, tid, (uint64_t)dir, other, 0600, O_WRONLY | O_CREAT | O_TRUNC, &h, &a))) return rc;
        put(h, t, &off);
        fs_flush(fs, h);
        fs_release(fs, h);
        return fs_rename(fs, tid, (uint64_t)dir, other, (uint64_t)dir, leaf, 0);
    case 't':
        if ((ino = ino_of(k, f)) < 0) return (int)ino;
        return fs_setattr(fs, tid, (uint64_t)ino, NULL, &(fs_setattr_in){FS_SET_SIZE, number(t, 100000), 0, 0}, &a);
    case 'u': return (dir = locate(k, f, leaf, sizeof leaf)) < 0 ? (int)dir : fs_unlink(fs, tid, (uint64_t)dir, leaf);
    case 'b':
        if ((dir = locate(k, f, leaf, sizeof leaf)) < 0) return (int)dir;
        snprintf(other, sizeof other, "%s~", leaf);
        return fs_rename(fs, tid, (uint64_t)dir, leaf, (uint64_t)dir, other, 0);
    case 'l':
        if ((dir = locate(k, f, leaf, sizeof leaf)) < 0) return (int)dir;
        return fs_symlink(fs, tid, "target", (uint64_t)dir, leaf, &a);
    case 'c':
        if ((ino = ino_of(k, f)) < 0) return (int)ino;
        check((uint64_t)ino, 3, NULL); /* a directory: listed, not descended */
        return 0;
    case 'C': check(FS_ROOT_INO, 0, NULL); return 0;
    case 'O': {
        static const int modes[] = {O_RDONLY, O_WRONLY | O_TRUNC, O_WRONLY | O_APPEND, O_RDWR};
        int i = next_held++ % 4;
        release_held(i);
        if ((rc = open_file(k, f, modes[x[2] & 3], &held[i].h, &a))) held[i].h = NULL;
        held[i].end = 0;
        return rc;
    }
    case 'H': return *held_h ? put(*held_h, t, &held[x[0] & 3].end) : -EBADF;
    case 'F': return *held_h ? fs_flush(fs, *held_h) : -EBADF;
    case 'Y': {
        char buf[4096];
        ssize_t got = -EBADF;
        while (*held_h && (got = fs_read(fs, *held_h, off, sizeof buf, buf)) > 0) off += got;
        if (*held_h) fs_poll_ready(fs, *held_h);
        return (int)got;
    }
    case 'X': release_held(x[0] & 3); return 0;
    case 's': step(number(t, 1000)); return 0;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    fs_backend *be = backend_fake_open("delay=0,ctx=512", err, sizeof err);
    if (!be) abort();
    fake_submit = be->submit;
    be->submit = gated_submit;
    fs = chatfs_new(be, NULL, err, sizeof err);
    if (!fs) abort();
    gate.open = 0;
    me = tid = (uint32_t)gettid();
    for (int i = 0; i < 4; i++) snprintf(slot[i], sizeof slot[i], "%c", 'a' + i);
    next_held = 0;
    trace = getenv("CHATFS_FUZZ_TRACE") != NULL;

    for (const uint8_t *p = data, *end = data + size, *line = p; p < end; line = p) {
        int op = *p++, x[3] = {0, 0, 0};
        int n = !op ? 0 : strchr("mMnNdDiHFYX", op) ? 1 : strchr("waokvtublcx", op) ? 2 : op == 'O' ? 3 : 0;
        for (int i = 0; i < n; i++) x[i] = arg(&p, end);
        text t;
        rest(&p, end, &t);
        int rc = run(op, x, &t);
        free(t.p);
        if (trace) fprintf(stderr, "%.*s -> %d\n", (int)(p - line) - (p[-1] == '\n'), (const char *)line, rc);
    }

    for (int i = 0; i < 4; i++) release_held(i);
    check(FS_ROOT_INO, 0, NULL);
    pthread_mutex_lock(&gate.mu);
    gate.open = 1;
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.mu);
    chatfs_stop(fs);
    be->close(be);
    chatfs_free(fs);
    CHECK(gate.jobs == 0);
    gate.permits = 0;
    return 0;
}
