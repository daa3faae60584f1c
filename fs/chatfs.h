/* chatfs.h - the filesystem's logic without FUSE: conversations, their files, editors'
 * scratch files, the commit rules, generation and persistence.
 *
 * The FUSE layer (fuse_ops.c) translates each request into one call here and the
 * answer back; tests and fuzzers call these directly. Every function returns 0 (or a
 * byte count) on success and a negative errno on failure, and takes the caller's
 * thread id where the answer depends on who asks (see "Copies into the mount" in
 * fs/README.md). One mutex guards all state; nothing here blocks while holding it
 * except the database, and the engine is only called with it released.
 *
 * Reads of a reply that is still being generated return -EAGAIN when they have caught
 * up: the caller parks the request and retries after the notify callback fires. */
#ifndef CHATFS_FS_CHATFS_H
#define CHATFS_FS_CHATFS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "fs/backend.h"
#include "store/conversations.h"

typedef struct chatfs chatfs;
typedef struct fs_handle fs_handle;

#define FS_ROOT_INO 1

typedef struct {
    uint64_t ino;
    uint32_t mode; /* S_IFREG|0644 ... */
    uint32_t nlink;
    uint64_t size;
    int64_t mtime_ns;
} fs_attr;

typedef struct {
    char *name;
    uint64_t ino;
    uint32_t mode;
} fs_dirent;

enum { FS_SET_SIZE = 1, FS_SET_MODE = 2, FS_SET_MTIME = 4 };
typedef struct {
    int valid; /* FS_SET_* */
    uint64_t size;
    uint32_t mode;
    int64_t mtime_ns;
} fs_setattr_in;

/* st may be NULL (nothing persists: tests). Takes ownership of neither. */
chatfs *chatfs_new(fs_backend *b, convs_store *st, char *err, size_t errlen);
/* What answers: "FILE (ARCH), context N tokens per conversation" (from the backend's
 * stats, its "model" object; the backend's name when it has none). */
const char *chatfs_model(const chatfs *fs);
/* Logs to f (NULL: nothing): level 1, one line per reply (conversation, prompt, reused
 * and computed tokens, time to the first token, speed); 2, also every change (messages,
 * edits, imports, errors). */
void chatfs_set_log(chatfs *fs, FILE *f, int level);
/* fn(ud) is called, without locks held, whenever a parked read or poll may be ready. */
void chatfs_set_notify(chatfs *fs, void (*fn)(void *ud), void *ud);
/* Stops every generation (their replies are kept, marked stopped) and waits for them. */
void chatfs_stop(chatfs *fs);
void chatfs_free(chatfs *fs);

int fs_lookup(chatfs *fs, uint32_t tid, uint64_t parent, const char *name, fs_attr *out);
int fs_getattr(chatfs *fs, uint64_t ino, fs_attr *out);
int fs_setattr(chatfs *fs, uint32_t tid, uint64_t ino, fs_handle *h, const fs_setattr_in *in, fs_attr *out);
int fs_mkdir(chatfs *fs, uint32_t tid, uint64_t parent, const char *name, fs_attr *out);
int fs_rmdir(chatfs *fs, uint32_t tid, uint64_t parent, const char *name);
int fs_unlink(chatfs *fs, uint32_t tid, uint64_t parent, const char *name);
int fs_rename(chatfs *fs, uint32_t tid, uint64_t parent, const char *name, uint64_t newparent, const char *newname,
              unsigned flags);
int fs_symlink(chatfs *fs, uint32_t tid, const char *target, uint64_t parent, const char *name, fs_attr *out);
int fs_readlink(chatfs *fs, uint64_t ino, char **target); /* malloc'd */
/* a snapshot of a directory, "." and ".." included */
int fs_readdir(chatfs *fs, uint32_t tid, uint64_t ino, fs_dirent **ents, int *n);
void fs_dirents_free(fs_dirent *ents, int n);

/* flags as open(2) gives them (O_TRUNC included). *direct tells whether the page
 * cache must be bypassed (1 for every file here). */
int fs_open(chatfs *fs, uint32_t tid, uint64_t ino, int flags, fs_handle **h);
int fs_create(chatfs *fs, uint32_t tid, uint64_t parent, const char *name, uint32_t mode, int flags, fs_handle **h,
              fs_attr *out);
/* bytes (0: end of file), -EAGAIN: nothing more yet but more is coming, -EIO after
 * the partial text of a failed reply. */
ssize_t fs_read(chatfs *fs, fs_handle *h, off_t off, size_t size, char *buf);
int fs_handle_nonblock(const fs_handle *h);
uint64_t fs_handle_ino(const fs_handle *h);
/* 1 when a read at the handle's position would not return -EAGAIN */
int fs_poll_ready(chatfs *fs, fs_handle *h);
ssize_t fs_write(chatfs *fs, fs_handle *h, off_t off, const char *buf, size_t size);
int fs_flush(chatfs *fs, fs_handle *h);
void fs_release(chatfs *fs, fs_handle *h);

/* The same rules for a writer without a mount (`chatfs ask` on a database no mount
 * holds). fs_message_text: what writing s[0..n) to NAME/message sends: UTF-8 without NUL
 * (else NULL, errno EINVAL and the mount's reason in err: "message: not UTF-8 at byte
 * 3"), a byte-order mark dropped, CRLF as LF, one final newline off; malloc'd, *out_len
 * its length. A blank result is what the mount sends nothing for: the caller refuses it.
 * fs_valid_name: 1 when name can be a conversation's directory. */
char *fs_message_text(const char *s, size_t n, size_t *out_len, char *err, size_t errlen);
/* a reply's text as the mount keeps it: bytes that are not UTF-8 as U+FFFD; malloc'd */
char *fs_reply_text(const char *s, size_t n, size_t *out_len);
int fs_blank(const char *s, size_t n);
int fs_valid_name(const char *name);
/* the content hash an image is stored under in the database (hex, 32 digits and a NUL):
 * the same bytes, the same row, whoever stores them */
void fs_image_hash(const void *bytes, size_t len, char out[33]);

#endif
