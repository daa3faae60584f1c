/* chatfs.c - conversations as files, without FUSE (see chatfs.h and fs/README.md): what
 * names and inodes point at, the filesystem's lifetime, and the public operations, each
 * resolving its names or handle and delegating: reads to views.c, finished writes to
 * commit.c, replies to generation.c, the conversations' state to conv.c (what they
 * share is in chatfs_impl.h).
 *
 * Inodes are computed, not allocated: 1 is the root and 2-4 its files; a conversation
 * with database id C owns C<<24 (its directory), C<<24|1..9 (its files), C<<24|16 (turns/)
 * and C<<24|(32+k) (turn k, 0-based); editors' scratch files get 1<<62|serial. Numbers
 * are therefore stable across mounts and never point at something else, so kernel
 * FORGETs need no bookkeeping: an inode whose object is gone answers ENOENT.
 *
 * Locking: fs->mu guards every structure here. The engine is called without it (its
 * callbacks take it); the database has its own lock and is only taken after fs->mu. */
#include "fs/chatfs_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fs/settings.h"

#define CONV_SHIFT 24
#define SUB_TURNS 16
#define SUB_TURN0 32
#define SCRATCH_BIT (1ull << 62)
#define FRESH_NS 5000000000LL     /* see "fresh conversations" in fs/README.md */

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

/* ---- conversations: the list, and who sees a fresh one ---- */

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
    c->mtime = c->mtime_system = c->mtime_settings = c->mtime_message = c->mtime_hist = cfs_now_ns();
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
    cfs_conv_unref(c);
}

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
    return c->fresh_tid && c->fresh_tid == tid && cfs_mono_ns() < c->fresh_until;
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
    case K_STATS: return cfs_now_ns();
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
    int rc = cfs_render(fs, nd, &b);
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
    return cfs_turn_push(c, t->user, t->text, t->len, t->complete, t->mtime_ns) ? -1 : 0;
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
    fs->t_start = fs->mtime_root = fs->mtime_settings = cfs_now_ns();
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
        cfs_reset_reply(c);
        if (c->n_turns && !c->turns[c->n_turns - 1].complete)
            cfs_set_error(c, "the last reply is incomplete: the daemon stopped while it generated");
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
    cfs_notify(fs);
}

void chatfs_free(chatfs *fs) {
    if (!fs) return;
    for (int i = 0; i < fs->n_convs; i++) cfs_conv_unref(fs->convs[i]);
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

/* ---- public: names ---- */

/* stats.json is rendered with the engine's lock, so its exact size (git, rsync) is
 * measured after ours is released */
static void stats_size(chatfs *fs, fs_attr *a) {
    size_t len = 0;
    free(cfs_stats_text(fs, &len));
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
    s->mtime = cfs_now_ns();
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
    if (dir->kind == K_ROOT) fs->mtime_root = cfs_now_ns();
    else if (dir->c) dir->c->mtime = cfs_now_ns();
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
        id = store_create(fs->st, name, "", json ? json : "{}", cfs_now_ns(), err, sizeof err);
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
    c->reply = cfs_stream_of_turn(NULL);
    c->fresh_tid = copier(tid) ? tid : 0;
    c->fresh_until = cfs_mono_ns() + FRESH_NS;
    fs->mtime_root = cfs_now_ns();
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
    if (cfs_busy(c)) cfs_stop_gen(fs, c);
    char err[256];
    if (fs->st && store_delete(fs->st, c->id, err, sizeof err)) {
        rc = -EIO;
        goto out;
    }
    char session[32];
    snprintf(session, sizeof session, "conversation-%lld", (long long)c->id);
    conv_remove(fs, c);
    fs->mtime_root = cfs_now_ns();
    cfs_unlock(fs);
    fs->be->forget_session(fs->be, session);
    return 0;
out:
    cfs_unlock(fs);
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
        if (cfs_busy(c)) cfs_stop_gen(fs, c);
        if (nd.turn < c->n_turns) {
            cfs_turns_truncate(c, nd.turn);
            cfs_save_turns(fs, c, nd.turn, 0);
            cfs_reset_reply(c);
            c->state = ST_IDLE;
            c->mtime = c->mtime_hist = cfs_now_ns();
        }
        break;
    }
    case K_ROOT:
    case K_CONV:
    case K_TURNS: rc = -EISDIR; break;
    default: rc = nd.c ? 0 : -EPERM; /* a conversation's own files stay (rm -r works) */
    }
out:
    cfs_unlock(fs);
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
    if (!rc && !(*target = cfs_memdup0(nd.sc->data, nd.sc->len))) rc = -ENOMEM;
    pthread_mutex_unlock(&fs->mu);
    return rc;
}

static int scratch_set(scratch *s, const char *data, size_t len) {
    char *p = cfs_memdup0(data, len);
    if (!p) return -ENOMEM;
    free(s->data);
    s->data = p;
    s->len = len;
    s->cap = len + 1;
    s->mtime = cfs_now_ns();
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
                fs->mtime_root = cfs_now_ns();
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
        } else if (exists && cfs_is_derived(dst.kind)) {
            /* a copy tool putting a view in place in a fresh copy: nothing to keep */
            if (dst.c && fresh_for(dst.c, tid)) scratch_unlink(fs, s);
            else rc = -EACCES;
        } else if (exists) { /* an editor's or rsync's temporary file renamed onto a real one */
            rc = cfs_commit(fs, &dst, 0, s->data ? s->data : "", s->len);
            if (!rc) scratch_unlink(fs, s);
        } else {
            int user, idx = ndir.kind == K_TURNS ? parse_turn_name(newname, &user) : -1;
            if (idx >= 0) { /* a new turn */
                conv *c = ndir.c;
                if (idx != c->n_turns || cfs_busy(c)) rc = cfs_busy(c) ? -EBUSY : -EACCES;
                else if (!(rc = cfs_turn_push(c, user, "", 0, 1, cfs_now_ns()))) {
                    cfs_save_turns(fs, c, idx, 0);
                    node t = {K_TURN, c, idx, NULL};
                    rc = cfs_commit(fs, &t, 1, s->data ? s->data : "", s->len);
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
    else rc = cfs_render(fs, &src, &b);
    if (!rc) {
        scratch *s = exists ? dst.sc : scratch_new(fs, newparent, newname, 0644);
        rc = s ? scratch_set(s, b.p ? b.p : "", b.len) : -ENOMEM;
        touch_dir(fs, &ndir);
    }
    free(b.p);
out:
    cfs_unlock(fs);
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
        if (cfs_is_derived(nd->kind)) return -EACCES;
        if (nd->c && cfs_busy(nd->c) && (nd->kind == K_MESSAGE || nd->kind == K_TURN || nd->kind == K_MESSAGES)) {
            cfs_set_error(nd->c, "a reply is being generated: wait for it or write 'stop' to ctl");
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
        if (wr && (flags & O_TRUNC)) h->sc->len = 0, h->sc->mtime = cfs_now_ns();
    }
    if (wr && buffered(nd->kind) && !discard) {
        if (flags & O_TRUNC) h->truncated = 1;
        else if (nd->kind != K_MESSAGE && nd->kind != K_CTL) { /* writes land over the current text */
            sbuf b = {0};
            cfs_render(fs, nd, &b);
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
            discard = cfs_is_derived(nd.kind) || nd.kind == K_MESSAGES;
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
        if (cfs_busy(c)) rc = -EBUSY;
        else if (idx != c->n_turns) {
            cfs_set_error(c, "turns/%s: the next turn is number %03d", name, c->n_turns + 1);
            rc = -EACCES;
        } else if (!(rc = cfs_turn_push(c, user, "", 0, 1, cfs_now_ns()))) {
            cfs_save_turns(fs, c, idx, 0);
            c->mtime = cfs_now_ns();
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
        char *t = cfs_stats_text(fs, &len);
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
        if (!rc) rc = cfs_render(fs, &nd, &b);
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
    int e = cfs_reserve(data, cap, (size_t)off + size + 1);
    if (e) {
        if (h->c && e == -EFBIG) cfs_set_error(h->c, "more than %u MiB written at once", MAX_BUFFER >> 20);
        rc = e;
        goto out;
    }
    if ((size_t)off > *len) memset(*data + *len, 0, off - *len);
    memcpy(*data + off, buf, size);
    if ((size_t)off + size > *len) *len = (size_t)off + size;
    if (h->kind == K_SCRATCH) {
        h->sc->mtime = cfs_now_ns();
        goto out;
    }
    h->written = 1; /* even when refused below: then release must not commit a truncation */
    /* refuse where shells look: at write, not at close */
    int v = 0;
    switch (h->kind) {
    case K_MESSAGE: v = cfs_check_fits(fs, h->c, h->buf, h->len); break;
    case K_SETTINGS: v = cfs_set_settings(fs, h->c, h->buf, h->len, 0); break;
    case K_GSETTINGS: v = cfs_set_settings(fs, NULL, h->buf, h->len, 0); break;
    case K_CTL: v = cfs_run_ctl(fs, h->c, h->buf, h->len, 0); break;
    case K_MESSAGES: {
        import im;
        char err[256];
        if (h->c && cfs_busy(h->c)) v = -EBUSY;
        else if (cfs_parse_import(h->buf, h->len, &im, err, sizeof err) < 0) {
            cfs_set_error(h->c, "%s", err);
            v = -EINVAL;
        } else cfs_import_free(&im);
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
        if (!rc) rc = cfs_commit(fs, &nd, h->created, h->buf ? h->buf : "", h->len);
        h->committed = 1;
        if (h->kind == K_MESSAGE || h->kind == K_CTL) h->len = 0; /* the next write starts a new message */
        h->created = 0;
    }
    cfs_unlock(fs);
    return rc;
}

void fs_release(chatfs *fs, fs_handle *h) {
    pthread_mutex_lock(&fs->mu);
    /* no flush came (or `: > system` truncated without writing): commit now */
    if (h->wr && !h->discard && (h->dirty || (h->truncated && !h->written && !h->committed)) &&
        (h->dirty || h->kind == K_SYSTEM || h->kind == K_SETTINGS || h->kind == K_GSETTINGS)) {
        node nd;
        if (resolve(fs, h->ino, &nd) == 0) cfs_commit(fs, &nd, h->created, h->buf ? h->buf : "", h->len);
    }
    if (h->sc) scratch_unref(h->sc);
    cfs_stream_unref(h->s);
    cfs_conv_unref(h->c);
    free(h->buf);
    free(h);
    cfs_unlock(fs);
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
        if ((in->valid & FS_SET_SIZE) && !(rc = cfs_reserve(&s->data, &s->cap, in->size + 1))) {
            if (in->size > s->len) memset(s->data + s->len, 0, in->size - s->len);
            s->len = in->size;
            if (!(in->valid & FS_SET_MTIME)) s->mtime = cfs_now_ns();
        }
    } else if (in->valid & FS_SET_SIZE) {
        if (h && h->wr && buffered(h->kind) && !h->discard) { /* ftruncate on a writer (vim) */
            if (!(rc = cfs_reserve(&h->buf, &h->cap, in->size + 1))) {
                if (in->size > h->len) memset(h->buf + h->len, 0, in->size - h->len);
                h->len = in->size;
                h->truncated = 1;
            }
        } else if (h && h->discard) {
        } else if (nd.kind == K_SYSTEM || nd.kind == K_SETTINGS || nd.kind == K_GSETTINGS) {
            /* truncate(1) without an open file: `truncate -s 0 system` clears it */
            sbuf b = {0};
            cfs_render(fs, &nd, &b);
            if (in->size < b.len) rc = cfs_commit(fs, &nd, 0, b.p ? b.p : "", in->size);
            free(b.p);
        } else if (nd.kind == K_MESSAGE || nd.kind == K_CTL) {
        } else rc = is_dir_kind(nd.kind) ? -EISDIR : -EACCES;
    }
    /* chmod, chown and utimes elsewhere are accepted and change nothing (cp -p, rsync -a) */
    if (!rc) rc = attr_of(fs, &nd, out);
out:
    cfs_unlock(fs);
    return rc;
}
