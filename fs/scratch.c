/* scratch.c - editors' scratch files: vim's swap and backup files, nano's lock, emacs's
 * backups and lock links, rsync's temporary files. They live in memory only, beside a
 * conversation's own files, and are never history.
 *
 * Separate because they follow rules of their own (any content, chmod and times kept)
 * and the operations only create, find, fill and drop them through these functions.
 * Callers hold fs->mu. */
#include "fs/chatfs_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fs/settings.h"

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

int cfs_scratch_set(scratch *s, const char *data, size_t len) {
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

int cfs_can_hold_scratch(const node *dir) { return dir->kind == K_ROOT || dir->kind == K_CONV || dir->kind == K_TURNS; }

