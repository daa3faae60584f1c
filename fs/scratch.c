/* scratch.c - editors' scratch files: vim's swap and backup files and its 4913 probe,
 * nano's lock, emacs's backups, autosaves and lock links, rsync's and other tools'
 * temporary files. They live in memory only, beside a conversation's own files, and are
 * never history.
 *
 * Only names that follow those tools' patterns are taken (cfs_scratch_name_ok), so a
 * file put by mistake in a conversation is refused at once rather than lost at unmount,
 * and all of them together hold at most SCRATCH_CAP bytes (ENOSPC beyond).
 *
 * Separate because they follow rules of their own (any content, chmod and times kept)
 * and the operations only create, find, fill and drop them through these functions.
 * Callers hold fs->mu. */
#include "fs/chatfs_impl.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ends_with(const char *s, const char *end) {
    size_t n = strlen(s), k = strlen(end);
    return n >= k && !strcmp(s + n - k, end);
}

int cfs_scratch_name_ok(const char *name) {
    size_t n = strlen(name);
    if (!n || n > 255) return 0;
    if (name[0] == '.') return 1;                            /* .f.swp, .#f, .f.XXXXXX (rsync), .goutputstream-* */
    if (name[n - 1] == '~') return 1;                        /* f~, f.~1~ */
    if (n >= 2 && name[0] == '#' && name[n - 1] == '#') return 1; /* #f# (emacs autosave) */
    if (strspn(name, "0123456789") == n) return 1;           /* 4913: vim's probe */
    if (n == 9 && !strncmp(name, "sed", 3)) return 1;        /* sed -i's sedXXXXXX */
    static const char *const ends[] = {".swp", ".swo", ".swx", ".swn", ".tmp", ".kate-swp"};
    for (size_t i = 0; i < sizeof ends / sizeof *ends; i++)
        if (ends_with(name, ends[i])) return 1;
    return 0;
}

int cfs_scratch_refuse(conv *c, const char *name) {
    if (c)
        cfs_set_error(c, "%s: only a conversation's own files and editors' scratch files (.NAME.swp, NAME~, #NAME#, "
                      ".NAME.XXXXXX, NAME.tmp) can be made here", name);
    return -EPERM;
}

int cfs_scratch_room(chatfs *fs, const scratch *s, size_t new_len) {
    size_t total = 0;
    for (const scratch *t = fs->scratch; t; t = t->next)
        if (t != s) total += t->len;
    return total + new_len > SCRATCH_CAP ? -ENOSPC : 0;
}

scratch *cfs_find_scratch_ino(chatfs *fs, uint64_t ino) {
    for (scratch *s = fs->scratch; s; s = s->next)
        if (s->ino == ino) return s;
    return NULL;
}

scratch *cfs_find_scratch(chatfs *fs, uint64_t parent, const char *name) {
    for (scratch *s = fs->scratch; s; s = s->next)
        if (s->parent == parent && !strcmp(s->name, name)) return s;
    return NULL;
}

scratch *cfs_scratch_new(chatfs *fs, uint64_t parent, const char *name, uint32_t mode) {
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

void cfs_scratch_unref(scratch *s) {
    if (s && --s->refs == 0) {
        free(s->name);
        free(s->data);
        free(s);
    }
}

void cfs_scratch_unlink(chatfs *fs, scratch *s) {
    for (scratch **p = &fs->scratch; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    s->linked = 0;
    cfs_scratch_unref(s);
}

int cfs_scratch_set(chatfs *fs, scratch *s, const char *data, size_t len) {
    if (cfs_scratch_room(fs, s, len)) return -ENOSPC;
    char *p = cfs_memdup0(data, len);
    if (!p) return -ENOMEM;
    free(s->data);
    s->data = p;
    s->len = len;
    s->cap = len + 1;
    s->mtime = cfs_now_ns();
    return 0;
}

int cfs_has_scratch(chatfs *fs, uint64_t dir) {
    for (scratch *s = fs->scratch; s; s = s->next)
        if (s->parent == dir) return 1;
    return 0;
}

int cfs_can_hold_scratch(const node *dir) {
    return dir->kind == K_ROOT || dir->kind == K_CONV || dir->kind == K_TURNS || dir->kind == K_CALL;
}

