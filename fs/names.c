/* names.c - what names and inodes point at: the conversations' list, their files'
 * names and inode numbers, each node's attributes, and who sees a fresh copy.
 *
 * Inodes are computed, not allocated: 1 is the root and 2-4 its files; a conversation
 * with database id C owns C<<24 (its directory), C<<24|1..12 (its files), C<<24|16 (turns/),
 * C<<24|(32+k) (turn k, 0-based) and C<<24|(1<<23 + k) (turn k's .thinking.md); editors'
 * scratch files get 1<<62|serial. Numbers
 * are therefore stable across mounts and never point at something else, so kernel
 * FORGETs need no bookkeeping: an inode whose object is gone answers ENOENT.
 *
 * Separate because every operation starts here (resolve an inode, look a name up) and
 * none of it changes anything. Callers hold fs->mu. */
#include "fs/chatfs_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fs/settings.h"

/* the files of a conversation, in inode order (cp -r copies in inode order) */
const cfs_file_entry cfs_conv_files[CFS_N_CONV_FILES] = {
    {"message", K_MESSAGE, 1, S_IFREG | 0644},        {"reply", K_REPLY, 2, S_IFREG | 0444},
    {"system", K_SYSTEM, 3, S_IFREG | 0644},          {"settings.json", K_SETTINGS, 4, S_IFREG | 0644},
    {"transcript.md", K_TRANSCRIPT, 5, S_IFREG | 0444}, {"messages.json", K_MESSAGES, 6, S_IFREG | 0644},
    {"status", K_STATUS, 7, S_IFREG | 0444},          {"error", K_ERROR, 8, S_IFREG | 0444},
    {"ctl", K_CTL, 9, S_IFREG | 0644},                {"thinking", K_THINKING, 10, S_IFREG | 0444},
    {"tools.json", K_TOOLS, 11, S_IFREG | 0644},      {"usage.json", K_USAGE, 12, S_IFREG | 0444},
    {"turns", K_TURNS, SUB_TURNS, S_IFDIR | 0755},
};

const cfs_root_entry cfs_root_files[CFS_N_ROOT_FILES] = {
    {"README", K_README, 2, S_IFREG | 0444},
    {"settings.json", K_GSETTINGS, 3, S_IFREG | 0644},
    {"stats.json", K_STATS, 4, S_IFREG | 0444},
    {"tools.json", K_GTOOLS, 5, S_IFREG | 0644},
};

/* ---- conversations: the list, and who sees a fresh one ---- */

conv *cfs_find_conv_id(chatfs *fs, int64_t id) {
    for (int i = 0; i < fs->n_convs; i++)
        if (fs->convs[i]->id == id) return fs->convs[i];
    return NULL;
}

conv *cfs_find_conv_name(chatfs *fs, const char *name) {
    for (int i = 0; i < fs->n_convs; i++)
        if (!strcmp(fs->convs[i]->name, name)) return fs->convs[i];
    return NULL;
}

conv *cfs_conv_add(chatfs *fs, int64_t id, const char *name) {
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
    c->fs = fs;
    c->id = id;
    c->refs = 1;
    settings_copy(&c->st, &fs->defaults);
    c->mtime = c->mtime_system = c->mtime_settings = c->mtime_message = c->mtime_hist = cfs_now_ns();
    fs->convs[fs->n_convs++] = c;
    return c;
}

void cfs_conv_remove(chatfs *fs, conv *c) {
    cfs_copyin_forget(fs, c->id);
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
 * they just made (cp -r, mv across filesystems)? See "Copies into the mount" in fs/README.md and fs/copyin.c. */
int cfs_copier(uint32_t tid) {
    char path[64], comm[32] = "";
    snprintf(path, sizeof path, "/proc/%u/comm", tid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    if (!fgets(comm, sizeof comm, f)) comm[0] = 0;
    fclose(f);
    comm[strcspn(comm, "\n")] = 0;
    return !strcmp(comm, "cp") || !strcmp(comm, "mv");
}

int cfs_fresh_for(const conv *c, uint32_t tid) { return c->fresh_tid && c->fresh_tid == tid && cfs_young(c); }
/* ---- names and nodes ---- */

const char *cfs_kind_name(int kind) {
    for (int i = 0; i < CFS_N_CONV_FILES; i++)
        if (cfs_conv_files[i].kind == kind) return cfs_conv_files[i].name;
    for (int i = 0; i < CFS_N_ROOT_FILES; i++)
        if (cfs_root_files[i].kind == kind) return cfs_root_files[i].name;
    return "this file";
}

uint64_t cfs_conv_ino(const conv *c, int sub) { return ((uint64_t)c->id << CONV_SHIFT) | (uint64_t)sub; }
int cfs_resolve(chatfs *fs, uint64_t ino, node *nd) {
    memset(nd, 0, sizeof *nd);
    if (ino & SCRATCH_BIT) {
        nd->sc = cfs_find_scratch_ino(fs, ino);
        nd->kind = K_SCRATCH;
        return nd->sc ? 0 : -ENOENT;
    }
    if (ino == FS_ROOT_INO) return nd->kind = K_ROOT, 0;
    for (size_t i = 0; i < sizeof cfs_root_files / sizeof *cfs_root_files; i++)
        if (ino == cfs_root_files[i].ino) return nd->kind = cfs_root_files[i].kind, 0;
    conv *c = cfs_find_conv_id(fs, (int64_t)(ino >> CONV_SHIFT));
    if (!c) return -ENOENT;
    nd->c = c;
    int sub = (int)(ino & ((1u << CONV_SHIFT) - 1));
    if (sub == 0) return nd->kind = K_CONV, 0;
    if (sub >= SUB_THINK0) { /* any assistant turn's: it is listed once it has reasoning */
        nd->turn = sub - SUB_THINK0;
        nd->kind = K_THINK;
        return nd->turn < c->n_turns && !c->turns[nd->turn].user ? 0 : -ENOENT;
    }
    if (sub >= SUB_ATTACH0) { /* an attachment, by its seq */
        nd->turn = cfs_attach_by_seq(c, sub - SUB_ATTACH0);
        nd->kind = K_ATTACH;
        return nd->turn >= 0 ? 0 : -ENOENT;
    }
    if (sub >= SUB_CALL0) { /* a call's directory and its files, while the call exists */
        static const int kinds[4] = {K_CALL, K_CALL_NAME, K_CALL_ARGS, K_CALL_RESULT};
        nd->turn = (sub - SUB_CALL0) / 4;
        nd->kind = kinds[(sub - SUB_CALL0) % 4];
        return nd->turn < cfs_call_count(c) ? 0 : -ENOENT;
    }
    if (sub >= SUB_TURN0) {
        nd->turn = sub - SUB_TURN0;
        nd->kind = K_TURN;
        return nd->turn < c->n_turns ? 0 : -ENOENT;
    }
    if (sub == SUB_CALLS) return nd->kind = K_CALLS, 0;
    if (sub == SUB_ATTACHMENTS) return nd->kind = K_ATTACHMENTS, 0;
    for (int i = 0; i < CFS_N_CONV_FILES; i++)
        if (cfs_conv_files[i].sub == sub) return nd->kind = cfs_conv_files[i].kind, 0;
    return -ENOENT;
}

int cfs_is_dir_kind(int k) {
    return k == K_ROOT || k == K_CONV || k == K_TURNS || k == K_CALLS || k == K_CALL || k == K_ATTACHMENTS;
}

uint64_t cfs_node_ino(const node *nd) {
    switch (nd->kind) {
    case K_ROOT: return FS_ROOT_INO;
    case K_SCRATCH: return nd->sc->ino;
    case K_CONV: return cfs_conv_ino(nd->c, 0);
    case K_TURN: return cfs_conv_ino(nd->c, SUB_TURN0 + nd->turn);
    case K_THINK: return cfs_conv_ino(nd->c, SUB_THINK0 + nd->turn);
    case K_CALLS: return cfs_conv_ino(nd->c, SUB_CALLS);
    case K_ATTACHMENTS: return cfs_conv_ino(nd->c, SUB_ATTACHMENTS);
    case K_ATTACH: return cfs_conv_ino(nd->c, SUB_ATTACH0 + (int)nd->c->att[nd->turn].seq);
    case K_CALL: return cfs_conv_ino(nd->c, SUB_CALL0 + 4 * nd->turn);
    case K_CALL_NAME: return cfs_conv_ino(nd->c, SUB_CALL0 + 4 * nd->turn + 1);
    case K_CALL_ARGS: return cfs_conv_ino(nd->c, SUB_CALL0 + 4 * nd->turn + 2);
    case K_CALL_RESULT: return cfs_conv_ino(nd->c, SUB_CALL0 + 4 * nd->turn + 3);
    default:
        for (size_t i = 0; i < sizeof cfs_root_files / sizeof *cfs_root_files; i++)
            if (cfs_root_files[i].kind == nd->kind) return cfs_root_files[i].ino;
        for (int i = 0; i < CFS_N_CONV_FILES; i++)
            if (cfs_conv_files[i].kind == nd->kind) return cfs_conv_ino(nd->c, cfs_conv_files[i].sub);
    }
    return 0;
}

static int64_t node_mtime(chatfs *fs, const node *nd) {
    conv *c = nd->c;
    switch (nd->kind) {
    case K_ROOT: return fs->mtime_root;
    case K_README: return fs->t_start;
    case K_GSETTINGS: return fs->mtime_settings;
    case K_STATS: return fs->mtime_stats; /* set by live_attr (chatfs.c) */
    case K_CONV:
    case K_TURNS: return c->mtime;
    case K_MESSAGE:
    case K_CTL: return c->mtime_message;
    case K_SYSTEM: return c->mtime_system;
    case K_SETTINGS:
    case K_TOOLS: return c->mtime_settings;
    case K_GTOOLS: return fs->mtime_settings;
    case K_TURN:
    case K_THINK: return c->turns[nd->turn].mtime;
    case K_SCRATCH: return nd->sc->mtime;
    case K_ATTACH: return c->att[nd->turn].mtime;
    case K_TRANSCRIPT:
    case K_MESSAGES: return c->mtime_hist > c->mtime_system ? c->mtime_hist : c->mtime_system; /* they show it */
    default: return c->mtime_hist;
    }
}

/* A conversation's file's modification time moves whenever what it reads as does, so
 * that rsync's quick check and make see every change: beside the times the operations
 * keep, each file's last content (a hash) is remembered, and a file found changed is
 * dated now. The first look (after a mount) takes the kept time, so copies out see the
 * same times across mounts. */
uint64_t cfs_text_hash(const char *text, size_t len) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)text[i]) * 1099511628211ull;
    return h ^ len;
}

int64_t cfs_content_mtime(conv *c, int kind, int64_t kept, const char *text, size_t len) {
    if (kind < 0 || kind >= (int)(sizeof c->seen / sizeof *c->seen)) return kept;
    uint64_t h = cfs_text_hash(text, len);
    if (!c->seen[kind].mtime) c->seen[kind].mtime = kept;
    else if (c->seen[kind].hash != h && c->seen[kind].mtime < cfs_now_ns()) c->seen[kind].mtime = cfs_now_ns();
    c->seen[kind].hash = h;
    return c->seen[kind].mtime > kept ? c->seen[kind].mtime : kept;
}

int cfs_attr_of(chatfs *fs, const node *nd, fs_attr *a) {
    memset(a, 0, sizeof *a);
    a->ino = cfs_node_ino(nd);
    a->nlink = 1;
    a->mtime_ns = node_mtime(fs, nd);
    switch (nd->kind) {
    case K_ROOT: a->mode = S_IFDIR | 0755, a->nlink = 2 + fs->n_convs; return 0;
    case K_CONV: a->mode = S_IFDIR | 0755, a->nlink = 3; return 0;
    case K_TURNS:
    case K_CALLS:
    case K_CALL:
    case K_ATTACHMENTS: a->mode = S_IFDIR | 0755, a->nlink = 2; return 0;
    case K_ATTACH: /* a sent one is the turn's: read-only */
        a->mode = S_IFREG | (nd->c->att[nd->turn].turn ? 0444 : 0644);
        a->size = nd->c->att[nd->turn].len;
        return 0;
    case K_CALL_NAME:
    case K_CALL_ARGS: a->mode = S_IFREG | 0444; break;
    case K_CALL_RESULT: a->mode = S_IFREG | 0644; break;
    case K_SCRATCH:
        a->mode = nd->sc->symlink ? (S_IFLNK | 0777) : (S_IFREG | (nd->sc->mode & 07777));
        a->size = nd->sc->len;
        return 0;
    case K_TURN:
    case K_THINK: a->mode = S_IFREG | 0644; break;
    case K_STATS: a->mode = S_IFREG | 0444; break;
    default:
        for (size_t i = 0; i < sizeof cfs_root_files / sizeof *cfs_root_files; i++)
            if (cfs_root_files[i].kind == nd->kind) a->mode = cfs_root_files[i].mode;
        for (int i = 0; i < CFS_N_CONV_FILES; i++)
            if (cfs_conv_files[i].kind == nd->kind) a->mode = cfs_conv_files[i].mode;
    }
    if (cfs_is_live(nd->kind)) {
        a->size = 0; /* see live_attr (chatfs.c) */
        return 0;
    }
    sbuf b = {0};
    int rc = cfs_render(fs, nd, &b);
    a->size = b.len;
    if (!rc && nd->c && nd->kind < K_SCRATCH && nd->kind != K_TURN && nd->kind != K_THINK)
        a->mtime_ns = cfs_content_mtime(nd->c, nd->kind, a->mtime_ns, b.p, b.len);
    free(b.p);
    return rc;
}

/* "001-user.md" -> 0-based index and role (ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL); -1 for
 * other names */
int cfs_parse_turn_name(const char *name, int *user) {
    int idx = 0, i = 0;
    while (name[i] >= '0' && name[i] <= '9' && i < 9) idx = idx * 10 + (name[i++] - '0');
    if (i < 3 || name[i] != '-' || idx < 1) return -1;
    const char *r = name + i + 1;
    if (!strcmp(r, "user.md")) *user = ROLE_USER;
    else if (!strcmp(r, "assistant.md")) *user = ROLE_ASSISTANT;
    else if (!strcmp(r, "tool.md")) *user = ROLE_TOOL;
    else return -1;
    char canon[32];
    snprintf(canon, sizeof canon, "%03d-%s", idx, r);
    return strcmp(canon, name) ? -1 : idx - 1;
}

void cfs_turn_name(const conv *c, int i, char *buf, size_t n) {
    snprintf(buf, n, "%03d-%s.md", i + 1, cfs_turn_role(&c->turns[i]));
}



int cfs_parse_thinking_name(const char *name) {
    int idx = 0, i = 0;
    while (name[i] >= '0' && name[i] <= '9' && i < 9) idx = idx * 10 + (name[i++] - '0');
    if (i < 3 || idx < 1 || idx >= SUB_THINK0 - SUB_TURN0 || strcmp(name + i, "-assistant.thinking.md")) return -1;
    char canon[40];
    cfs_thinking_name(idx - 1, canon, sizeof canon);
    return strcmp(canon, name) ? -1 : idx - 1;
}

void cfs_thinking_name(int i, char *buf, size_t n) { snprintf(buf, n, "%03d-assistant.thinking.md", i + 1); }

int cfs_has_thinking(const conv *c, int i) {
    size_t len = 0;
    if (i < 0 || i >= c->n_turns || c->turns[i].user) return 0;
    cfs_turn_reasoning(c, i, &len);
    return len > 0;
}

/* Looks name up in directory node dir; tid decides what a copy tool sees (copyin.c). */
int cfs_child(chatfs *fs, uint32_t tid, const node *dir, const char *name, node *out) {
    memset(out, 0, sizeof *out);
    uint64_t dino = cfs_node_ino(dir);
    if (dir->kind == K_ROOT) {
        for (size_t i = 0; i < sizeof cfs_root_files / sizeof *cfs_root_files; i++)
            if (!strcmp(name, cfs_root_files[i].name)) {
                if (cfs_hidden(fs, tid, NULL, (int)cfs_root_files[i].ino)) return -ENOENT; /* tar put it aside */
                return out->kind = cfs_root_files[i].kind, 0;
            }
        conv *c = cfs_find_conv_name(fs, name);
        if (c) return out->kind = K_CONV, out->c = c, 0;
    } else if (dir->kind == K_CONV) {
        if (!strcmp(name, "calls")) return out->kind = K_CALLS, out->c = dir->c, 0;
        if (!strcmp(name, "attachments")) return out->kind = K_ATTACHMENTS, out->c = dir->c, 0;
        for (int i = 0; i < CFS_N_CONV_FILES; i++)
            if (!strcmp(name, cfs_conv_files[i].name)) {
                int kind = cfs_conv_files[i].kind;
                /* cp sees its fresh copy's files as it creates them (turns/ once made) */
                if (cfs_fresh_for(dir->c, tid) && !(kind == K_TURNS && dir->c->fresh_turns)) return -ENOENT;
                if (kind == K_TURNS && tid && tid == dir->c->maker_tid && cfs_young(dir->c)) return -ENOENT;
                if (cfs_hidden(fs, tid, dir->c, cfs_conv_files[i].sub)) return -ENOENT; /* tar put it aside */
                return out->kind = kind, out->c = dir->c, 0;
            }
    } else if (dir->kind == K_TURNS) {
        int role, idx = cfs_parse_turn_name(name, &role);
        if (idx >= 0 && idx < dir->c->n_turns && cfs_turn_role_code(&dir->c->turns[idx]) == role) {
            if (cfs_fresh_for(dir->c, tid)) return -ENOENT;
            return out->kind = K_TURN, out->c = dir->c, out->turn = idx, 0;
        }
        idx = cfs_parse_thinking_name(name);
        if (idx >= 0 && cfs_has_thinking(dir->c, idx)) {
            if (cfs_fresh_for(dir->c, tid)) return -ENOENT;
            return out->kind = K_THINK, out->c = dir->c, out->turn = idx, 0;
        }
    } else if (dir->kind == K_ATTACHMENTS) {
        int k = cfs_attach_find(dir->c, name);
        if (k >= 0) return out->kind = K_ATTACH, out->c = dir->c, out->turn = k, 0;
        return -ENOENT;
    } else if (dir->kind == K_CALLS) {
        int k = cfs_call_find(dir->c, name);
        if (k >= 0) return out->kind = K_CALL, out->c = dir->c, out->turn = k, 0;
        return -ENOENT;
    } else if (dir->kind == K_CALL) {
        static const struct {
            const char *name;
            int kind;
        } files[] = {{"name", K_CALL_NAME}, {"arguments.json", K_CALL_ARGS}, {"result", K_CALL_RESULT}};
        for (size_t i = 0; i < sizeof files / sizeof *files; i++)
            if (!strcmp(name, files[i].name)) return out->kind = files[i].kind, out->c = dir->c, out->turn = dir->turn, 0;
        return -ENOENT;
    } else return -ENOTDIR;
    scratch *s = cfs_find_scratch(fs, dino, name);
    if (!s) return -ENOENT;
    out->kind = K_SCRATCH;
    out->sc = s;
    out->c = dir->c;
    return 0;
}

/* A conversation's name is UTF-8 text without control characters that does not start
 * with a dot. Dot names are what programs make for themselves (git init's .git, a file
 * manager's .Trash, rsync's temporary names): refused, they leave nothing behind, and a
 * shell's `ls` never hides a conversation. Names are stored as text (the database, the
 * messages a script reads), so bytes that are not UTF-8 are refused as in every file. */
int cfs_valid_conv_name(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n > 255 || name[0] == '.') return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f || name[i] == '/') return 0;
    int bad;
    return cfs_utf8_valid_prefix(name, n, &bad) == n;
}
