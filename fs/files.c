/* files.c - the operations on open files: open, create, read, write, flush (where a
 * write commits), release, setattr, poll.
 *
 * Separate because a handle has rules of its own (what it buffers, when it commits,
 * which errors come back at write(2) rather than close) that the operations on names
 * do not need. Callers of chatfs.h reach these directly. */
#include "fs/chatfs_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fs/settings.h"

/* ---- public: files ---- */

static int buffered(int kind) {
    return kind == K_MESSAGE || kind == K_SYSTEM || kind == K_SETTINGS || kind == K_GSETTINGS || kind == K_MESSAGES ||
           kind == K_CTL || kind == K_TURN || kind == K_THINK || kind == K_CALL_RESULT || kind == K_TOOLS ||
           kind == K_GTOOLS || kind == K_ATTACH;
}

static int open_node(chatfs *fs, const node *nd, int flags, int how, int discard, fs_handle **out) {
    int wr = (flags & O_ACCMODE) != O_RDONLY;
    if (cfs_is_dir_kind(nd->kind)) return -EISDIR;
    if (wr && !discard) {
        if (cfs_is_derived(nd->kind)) {
            if (nd->c)
                cfs_set_error(nd->c, "%s is read-only: it shows the conversation (a copy onto a conversation in use "
                              "brings only its system prompt, settings and new turns)", cfs_kind_name(nd->kind));
            return -EACCES;
        }
        if (nd->c && cfs_busy(nd->c) &&
            (nd->kind == K_MESSAGE || nd->kind == K_TURN || nd->kind == K_MESSAGES || nd->kind == K_THINK)) {
            cfs_set_error(nd->c, "a reply is being generated: wait for it or write 'stop' to ctl");
            return -EBUSY;
        }
        if (nd->kind == K_CALL_RESULT) { /* refused at the open: only a waiting call takes one */
            int rc = cfs_check_result(nd->c, nd->turn);
            if (rc) return rc;
        }
        if (nd->kind == K_ATTACH && cfs_attach_writable(nd->c, nd->turn)) return -EACCES;
    }
    fs_handle *h = calloc(1, sizeof *h);
    if (!h) return -ENOMEM;
    h->ino = cfs_node_ino(nd);
    h->kind = nd->kind;
    h->c = nd->c;
    h->turn = nd->turn;
    h->flags = flags;
    h->wr = wr;
    h->discard = discard;
    h->how = how;
    if (h->c) h->c->refs++;
    if (nd->kind == K_REPLY || nd->kind == K_THINKING) {
        h->s = nd->kind == K_REPLY ? nd->c->reply : nd->c->thinking;
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
    int rc = cfs_resolve(fs, ino, &nd);
    /* a copy (shutil.copytree: O_TRUNC) putting a view in place in a young conversation */
    int discard = (flags & O_ACCMODE) != O_RDONLY && cfs_is_derived(nd.kind) && (cfs_young(nd.c) || !nd.c);
    if (!rc && (flags & O_ACCMODE) == O_RDONLY) cfs_maker_looked(nd.c, tid);
    if (!rc) rc = open_node(fs, &nd, flags, COMMIT_EDIT, discard, h);
    if (!rc && discard) cfs_young_touch(nd.c);
    pthread_mutex_unlock(&fs->mu);
    return rc;
}

int fs_create(chatfs *fs, uint32_t tid, uint64_t parent, const char *name, uint32_t mode, int flags, fs_handle **h,
              fs_attr *out) {
    pthread_mutex_lock(&fs->mu);
    node dir, nd;
    int rc = cfs_resolve(fs, parent, &dir);
    if (rc) goto out;
    if (dir.kind == K_ATTACHMENTS) { /* a new image: its bytes are checked and stored at the close */
        int k;
        if (!(rc = cfs_attach_create(fs, dir.c, name, &k))) {
            nd = (node){K_ATTACH, dir.c, k, NULL};
            rc = open_node(fs, &nd, flags | O_TRUNC, COMMIT_EDIT, 0, h);
            if (rc) cfs_attach_abandon(dir.c, dir.c->att[k].seq);
            else rc = cfs_attr_of(fs, &nd, out);
        }
        goto out;
    }
    if (!cfs_can_hold_scratch(&dir)) {
        rc = -ENOTDIR;
        goto out;
    }
    if (cfs_child(fs, 0, &dir, name, &nd) == 0) {
        /* A copy tool creating a file that exists: cp in a conversation it just made (it
         * was shown none of its files), tar after unlinking the name. It gets the file,
         * empty: a young conversation drops what it writes to the views and imports the
         * rest; a turn keeps its text (commit.c) */
        int copy = nd.kind != K_SCRATCH && dir.c &&
                   (cfs_fresh_for(dir.c, tid) ||
                    (dir.kind == K_CONV && cfs_unhide(fs, tid, dir.c, (int)(cfs_node_ino(&nd) & ((1u << CONV_SHIFT) - 1)))));
        if (dir.kind == K_ROOT && cfs_unhide(fs, tid, NULL, (int)cfs_node_ino(&nd))) copy = 1; /* tar, after unlink */
        if (!copy && (flags & O_EXCL)) {
            rc = -EEXIST;
            goto out;
        }
        int discard = copy && cfs_is_derived(nd.kind) && (cfs_young(dir.c) || dir.kind == K_ROOT);
        rc = open_node(fs, &nd, flags | (copy ? O_TRUNC : 0), copy ? COMMIT_COPY : COMMIT_EDIT, discard, h);
        if (!rc) rc = cfs_attr_of(fs, &nd, out);
        if (!rc && copy) cfs_young_touch(dir.c);
        goto out;
    }
    int think = dir.kind == K_TURNS ? cfs_parse_thinking_name(name) : -1;
    if (think >= 0) { /* a turn's reasoning (it has none yet, or it would have been found above) */
        conv *c = dir.c;
        if (think >= c->n_turns && cfs_young(c)) { /* its turn has not come yet: it waits */
            scratch *s = cfs_scratch_new(fs, parent, name, mode);
            if (!s) {
                rc = -ENOMEM;
                goto out;
            }
            s->pending = 1;
            cfs_young_touch(c);
            nd = (node){K_SCRATCH, c, 0, s};
            rc = open_node(fs, &nd, flags, COMMIT_NEW_TURN, 0, h);
        } else if (think >= c->n_turns || c->turns[think].user) {
            cfs_set_error(c, "turns/%s: only an assistant turn the conversation has gets a reasoning file", name);
            rc = -EACCES;
        } else if (cfs_busy(c) && c->gen->turn == think) {
            rc = -EBUSY;
        } else {
            nd = (node){K_THINK, c, think, NULL};
            rc = open_node(fs, &nd, flags | O_TRUNC, cfs_young(c) ? COMMIT_COPY : COMMIT_NEW_TURN, 0, h);
            cfs_young_touch(c);
        }
        if (!rc) rc = cfs_attr_of(fs, &nd, out);
        goto out;
    }
    int user, idx = dir.kind == K_TURNS ? cfs_parse_turn_name(name, &user) : -1;
    if (idx >= 0 && cfs_restore_removed(fs, tid, dir.c, idx, user)) {
        /* tar unlinked this turn to create it again: the turns are back, the copy may
         * only write what they say */
        nd = (node){K_TURN, dir.c, idx, NULL};
        rc = open_node(fs, &nd, flags | O_TRUNC, COMMIT_COPY, 0, h);
        if (!rc) rc = cfs_attr_of(fs, &nd, out);
        goto out;
    }
    if (idx > (dir.c ? dir.c->n_turns : 0) && cfs_young(dir.c)) {
        /* a young copy's turn that came before the ones it follows: it waits as a
         * scratch file until they are there */
        scratch *s = cfs_scratch_new(fs, parent, name, mode);
        if (!s) {
            rc = -ENOMEM;
            goto out;
        }
        s->pending = 1;
        cfs_young_touch(dir.c);
        nd = (node){K_SCRATCH, dir.c, 0, s};
        rc = open_node(fs, &nd, flags, COMMIT_NEW_TURN, 0, h);
        if (!rc) rc = cfs_attr_of(fs, &nd, out);
        goto out;
    }
    if (idx >= 0) { /* a new turn: appended now, filled by the writes */
        conv *c = dir.c;
        if (cfs_busy(c)) rc = -EBUSY;
        else if (idx != c->n_turns) {
            cfs_set_error(c, "turns/%s: the next turn is number %03d", name, c->n_turns + 1);
            rc = -EACCES;
        } else if (!(rc = cfs_turn_push_role(c, user, "", 0, 1, cfs_now_ns())) &&
                   !(rc = cfs_save_turns(fs, c, idx, 0, "the new turn"))) {
            c->mtime = cfs_now_ns();
            nd = (node){K_TURN, c, idx, NULL};
            rc = open_node(fs, &nd, flags | O_TRUNC, COMMIT_NEW_TURN, 0, h);
            if (!rc) rc = cfs_attr_of(fs, &nd, out);
            cfs_young_touch(c);
            cfs_adopt_pending(fs, c);
        }
        goto out;
    }
    if (!cfs_scratch_name_ok(name)) {
        rc = cfs_scratch_refuse(dir.c, name);
        goto out;
    }
    scratch *s = cfs_scratch_new(fs, parent, name, mode);
    if (!s) {
        rc = -ENOMEM;
        goto out;
    }
    cfs_touch_dir(fs, &dir);
    nd = (node){K_SCRATCH, dir.c, 0, s};
    rc = open_node(fs, &nd, flags, COMMIT_EDIT, 0, h);
    if (!rc) rc = cfs_attr_of(fs, &nd, out);
out:
    pthread_mutex_unlock(&fs->mu);
    return rc;
}

int fs_handle_nonblock(const fs_handle *h) { return (h->flags & O_NONBLOCK) != 0; }
uint64_t fs_handle_ino(const fs_handle *h) { return h->ino; }

/* A rendered view (stats.json, status, transcript.md, ...) changes while it is read. A
 * reader that needs several read() calls must still get one text: a later read takes
 * the new rendering only if it continues what this handle has already returned (the
 * text grew, as transcript.md does under `tail -f`); otherwise it reads on in the
 * rendering the earlier reads came from, so a counter that moved cannot splice two
 * versions of stats.json. A read at offset 0 always starts over. Takes `fresh`. */
static ssize_t read_view(fs_handle *h, char *fresh, size_t fresh_len, off_t off, size_t size, char *buf) {
    size_t seen = (size_t)off < h->view_len ? (size_t)off : h->view_len;
    if (off == 0 || !h->view || seen == 0 ||
        (fresh_len >= seen && memcmp(fresh, h->view, seen) == 0)) {
        free(h->view);
        h->view = fresh, h->view_len = fresh_len;
    } else {
        free(fresh);
    }
    size_t n = (size_t)off < h->view_len ? h->view_len - off : 0;
    if (n > size) n = size;
    if (n) memcpy(buf, h->view + off, n);
    return (ssize_t)n;
}

ssize_t fs_read(chatfs *fs, fs_handle *h, off_t off, size_t size, char *buf) {
    if (cfs_is_live(h->kind)) {
        size_t len = 0; /* takes fs->mu itself; h->c holds the conversation */
        char *t = h->kind == K_STATS ? cfs_stats_text(fs, &len) : cfs_usage_text(fs, h->c->id, &len);
        if (!t) return -ENOMEM;
        pthread_mutex_lock(&fs->mu);
        ssize_t n = read_view(h, t, len, off, size, buf);
        pthread_mutex_unlock(&fs->mu);
        return n;
    }
    pthread_mutex_lock(&fs->mu);
    ssize_t rc;
    if (h->kind == K_REPLY || h->kind == K_THINKING) {
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
        rc = cfs_resolve(fs, h->ino, &nd);
        sbuf b = {0};
        if (!rc) rc = cfs_render(fs, &nd, &b);
        if (!rc) rc = read_view(h, b.p, b.len, off, size, buf);
        else free(b.p);
    }
    if (rc >= 0) h->pos = off + rc;
    pthread_mutex_unlock(&fs->mu);
    return rc;
}

int fs_poll_ready(chatfs *fs, fs_handle *h) {
    if ((h->kind != K_REPLY && h->kind != K_THINKING) || !h->s) return 1;
    pthread_mutex_lock(&fs->mu);
    int ready = h->s->done || (size_t)h->pos < h->s->len;
    pthread_mutex_unlock(&fs->mu);
    return ready;
}

ssize_t fs_write(chatfs *fs, fs_handle *h, off_t off, const char *buf, size_t size) {
    if (!h->wr) return -EBADF; /* wr and discard never change after open */
    if (h->discard) { /* a root view takes a copy of chatfs's own only (cfs_root_copy_ok) */
        if (!h->c && off == 0 && size > 0) {
            pthread_mutex_lock(&fs->mu);
            int ok = cfs_root_copy_ok(fs, h->kind, buf, size);
            pthread_mutex_unlock(&fs->mu);
            if (!ok) return -EACCES;
        }
        return (ssize_t)size;
    }
    pthread_mutex_lock(&fs->mu);
    ssize_t rc = (ssize_t)size;
    char **data;
    size_t *len, *cap;
    if (h->kind == K_SCRATCH) data = &h->sc->data, len = &h->sc->len, cap = &h->sc->cap;
    else data = &h->buf, len = &h->len, cap = &h->cap;
    if (h->flags & O_APPEND) off = (off_t)*len; /* appends land at the end of what this handle has */
    size_t old = *len;
    if (h->kind == K_SCRATCH && (size_t)off + size > old && cfs_scratch_room(fs, h->sc, (size_t)off + size)) {
        if (h->c) cfs_set_error(h->c, "%s: scratch files hold %u MiB in all", h->sc->name, SCRATCH_CAP >> 20);
        rc = -ENOSPC;
        goto out;
    }
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
    if (h->kind == K_ATTACH) { /* bytes: checked whole at the close */
        h->dirty = 1;
        goto out;
    }
    /* refuse where shells look: at write, not at close */
    int v = 0;
    { /* text only; a character cut short at the end may still be completed */
        int bad;
        if ((size_t)off < h->checked) h->checked = (size_t)off;
        h->checked += cfs_utf8_valid_prefix(h->buf + h->checked, h->len - h->checked, &bad);
        if (bad) {
            char what[64];
            if (h->kind == K_TURN && h->c && h->turn < h->c->n_turns) {
                snprintf(what, sizeof what, "turns/");
                cfs_turn_name(h->c, h->turn, what + 6, sizeof what - 6);
            } else if (h->kind == K_THINK) {
                snprintf(what, sizeof what, "turns/");
                cfs_thinking_name(h->turn, what + 6, sizeof what - 6);
            } else snprintf(what, sizeof what, "%s", cfs_kind_name(h->kind));
            v = cfs_check_text(h->c, what, h->buf, h->len);
        }
    }
    if (!v) switch (h->kind) {
    case K_MESSAGE:
        v = cfs_check_message(fs, h->c, h->buf, h->len);
        if (v == -EINVAL || v == -EFBIG) cfs_refuse_message(h->c, h->c->error ? h->c->error : "refused");
        for (size_t i = 0; !v && i < h->len; i++)
            if (!strchr(" \t\r\n", h->buf[i])) { /* a message on its way: no copy writes one */
                cfs_young_end(fs, h->c);
                break;
            }
        break;
    case K_SYSTEM: v = cfs_check_system(fs, h->c, h->buf, h->len); break;
    case K_SETTINGS: v = cfs_set_settings(fs, h->c, h->buf, h->len, 0); break;
    case K_GSETTINGS: v = cfs_set_settings(fs, NULL, h->buf, h->len, 0); break;
    case K_TOOLS: v = cfs_set_tools(fs, h->c, h->buf, h->len, 0); break;
    case K_GTOOLS: v = cfs_set_tools(fs, NULL, h->buf, h->len, 0); break;
    case K_CALL_RESULT: v = cfs_check_result(h->c, h->turn); break;
    case K_CTL: v = cfs_run_ctl(fs, h->c, h->buf, h->len, 0); break;
    case K_MESSAGES: {
        import im;
        char err[256];
        if (h->c && cfs_busy(h->c)) v = -EBUSY;
        else if ((v = cfs_parse_import(h->buf, h->len, &im, err, sizeof err)) < 0) {
            cfs_set_error(h->c, "%s", err);
            v = -EINVAL;
        } else {
            v = v > 0 && cfs_import_conflict(h->c, &im) >= 0 ? -EPERM : 0;
            cfs_import_free(&im);
        }
        break;
    }
    }
    if (v) {
        *len = old; /* the refused bytes are not kept */
        if (h->checked > old) h->checked = old;
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
        rc = cfs_resolve(fs, h->ino, &nd);
        if (!rc) rc = cfs_commit(fs, &nd, h->how, h->buf ? h->buf : "", h->len);
        h->committed = 1;
        if (h->kind == K_MESSAGE || h->kind == K_CTL) h->len = 0; /* the next write starts a new message */
        if (h->how == COMMIT_NEW_TURN) h->how = COMMIT_EDIT; /* filled: later writes edit it */
    }
    cfs_unlock(fs);
    return rc;
}

void fs_release(chatfs *fs, fs_handle *h) {
    pthread_mutex_lock(&fs->mu);
    /* no flush came (or `: > system` truncated without writing): commit now */
    if (h->wr && !h->discard && (h->dirty || (h->truncated && !h->written && !h->committed)) &&
        (h->dirty || h->kind == K_SYSTEM || h->kind == K_SETTINGS || h->kind == K_GSETTINGS || h->kind == K_TOOLS ||
         h->kind == K_GTOOLS)) {
        node nd;
        if (cfs_resolve(fs, h->ino, &nd) == 0) cfs_commit(fs, &nd, h->how, h->buf ? h->buf : "", h->len);
    }
    if (h->kind == K_ATTACH && h->c) /* created, closed without bytes: not an attachment */
        cfs_attach_abandon(h->c, (int64_t)(h->ino & ((1u << CONV_SHIFT) - 1)) - SUB_ATTACH0);
    if (h->sc) {
        int pending = h->sc->pending && h->sc->linked;
        cfs_scratch_unref(h->sc);
        if (pending && h->c) cfs_adopt_pending(fs, h->c); /* a waiting turn is complete now */
    }
    cfs_stream_unref(h->s);
    cfs_conv_unref(h->c);
    free(h->buf);
    free(h->view);
    free(h);
    cfs_unlock(fs);
}

int fs_setattr(chatfs *fs, uint32_t tid, uint64_t ino, fs_handle *h, const fs_setattr_in *in, fs_attr *out) {
    pthread_mutex_lock(&fs->mu);
    node nd;
    int rc = cfs_resolve(fs, ino, &nd);
    if (rc) goto out;
    if (nd.kind == K_SCRATCH) {
        scratch *s = nd.sc;
        if (in->valid & FS_SET_MODE) s->mode = in->mode & 07777;
        if (in->valid & FS_SET_MTIME) s->mtime = in->mtime_ns;
        if ((in->valid & FS_SET_SIZE) && in->size > s->len && cfs_scratch_room(fs, s, in->size)) rc = -ENOSPC;
        else if ((in->valid & FS_SET_SIZE) && !(rc = cfs_reserve(&s->data, &s->cap, in->size + 1))) {
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
        } else if (nd.kind == K_SYSTEM || nd.kind == K_SETTINGS || nd.kind == K_GSETTINGS || nd.kind == K_TOOLS ||
                   nd.kind == K_GTOOLS) {
            /* truncate(1) without an open file: `truncate -s 0 system` clears it */
            sbuf b = {0};
            cfs_render(fs, &nd, &b);
            if (in->size < b.len) rc = cfs_commit(fs, &nd, 0, b.p ? b.p : "", in->size);
            free(b.p);
        } else if (nd.kind == K_MESSAGE || nd.kind == K_CTL) {
        } else rc = cfs_is_dir_kind(nd.kind) ? -EISDIR : -EACCES;
    }
    /* chmod, chown and utimes elsewhere are accepted and change nothing (cp -p, rsync -a) */
    if (!rc) rc = cfs_attr_of(fs, &nd, out);
out:
    cfs_unlock(fs);
    return rc;
}

