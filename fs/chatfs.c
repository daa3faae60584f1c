/* chatfs.c - conversations as files, without FUSE (see chatfs.h and fs/README.md): the
 * filesystem's lifetime and the operations on names (lookup, mkdir, rmdir, unlink,
 * symlink, rename, readdir), each resolving its names (names.c) and delegating: the
 * conversations' state to conv.c, scratch files to scratch.c, finished writes to
 * commit.c, replies to generation.c. The operations on open files are in files.c;
 * what they all share is in chatfs_impl.h.
 *
 * Locking: fs->mu guards every structure here. The engine is called without it (its
 * callbacks take it); the database has its own lock and is only taken after fs->mu. */
#include "fs/chatfs_impl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fs/settings.h"

/* ---- public: lifetime ---- */

static int load_conv(void *ud, int64_t id, const char *name, const char *system, const char *settings,
                     int64_t mtime) {
    chatfs *fs = ud;
    conv *c = cfs_conv_add(fs, id, name);
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

static int load_attachment(void *ud, int64_t id, const convs_attachment *a) {
    conv *c = cfs_find_conv_id(ud, id);
    return c ? cfs_attach_load(c, a) : 0;
}

static int load_turn(void *ud, int64_t id, int idx, const convs_turn *t) {
    chatfs *fs = ud;
    conv *c = cfs_find_conv_id(fs, id);
    if (!c || idx != c->n_turns + 1) return 0; /* a gap cannot happen; skip rather than fail */
    return cfs_turn_load(c, t);
}

/* fs->model, from the backend's stats ("model": file, architecture), asked once */
static void describe_model(chatfs *fs) {
    char *js = fs->be->stats_json(fs->be);
    cJSON *o = js ? cJSON_Parse(js) : NULL, *m = cJSON_GetObjectItemCaseSensitive(o, "model");
    cJSON *file = cJSON_GetObjectItemCaseSensitive(m, "file"), *arch = cJSON_GetObjectItemCaseSensitive(m, "architecture");
    int ctx = fs->be->context(fs->be);
    if (cJSON_IsString(file) && cJSON_IsString(arch))
        snprintf(fs->model, sizeof fs->model, "%.500s (%.40s), context %d tokens per conversation", file->valuestring,
                 arch->valuestring, ctx);
    else
        snprintf(fs->model, sizeof fs->model, "the %s backend, context %d tokens per conversation", fs->be->name, ctx);
    cJSON_Delete(o);
    free(js);
}

const char *chatfs_model(const chatfs *fs) { return fs->model; }

chatfs *chatfs_new(fs_backend *b, convs_store *st, char *err, size_t errlen) {
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
    settings_builtin(&fs->builtin);
    if (b->settings_defaults) { /* the model's recommended sampling, where its file has some */
        gen_settings rec;
        b->settings_defaults(b, &rec);
        settings_recommend(&fs->builtin, &rec);
    }
    settings_copy(&fs->defaults, &fs->builtin);
    char *g = NULL;
    if (st && convs_get_global(st, "settings", &g) == 0 && g) {
        conv_settings s;
        char e[256];
        if (settings_parse(g, strlen(g), &fs->builtin, &s, e, sizeof e) == 1) {
            settings_free(&fs->defaults);
            fs->defaults = s;
        }
        free(g);
    }
    describe_model(fs);
    fs->can_think = b->can_think ? b->can_think(b) : -1;
    convs_loader l = {fs, load_conv, load_turn, load_attachment};
    if (st && convs_load(st, &l, err, errlen) != 0) {
        chatfs_free(fs);
        return NULL;
    }
    for (int i = 0; i < fs->n_convs; i++) {
        conv *c = fs->convs[i];
        cfs_reset_reply(c);
        if (c->n_turns && !c->turns[c->n_turns - 1].complete)
            cfs_set_error(c, "the last reply is incomplete: the daemon stopped while it generated");
    }
    if (cfs_saver_start(fs) != 0) {
        snprintf(err, errlen, "cannot start the thread that saves replies");
        chatfs_free(fs);
        return NULL;
    }
    return fs;
}

void chatfs_set_log(chatfs *fs, FILE *f, int level) {
    pthread_mutex_lock(&fs->mu);
    fs->log = f;
    fs->log_level = level;
    pthread_mutex_unlock(&fs->mu);
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
    cfs_saver_drain(fs); /* the replies as far as they got are in the database */
    cfs_notify(fs);
}

void chatfs_free(chatfs *fs) {
    if (!fs) return;
    cfs_saver_stop(fs); /* writes what is queued (nothing is queued without a saver) */
    for (int i = 0; i < fs->n_convs; i++) cfs_conv_unref(fs->convs[i]);
    free(fs->convs);
    while (fs->scratch) {
        scratch *s = fs->scratch;
        fs->scratch = s->next;
        free(s->name);
        free(s->data);
        free(s);
    }
    cfs_copyin_free(fs);
    settings_free(&fs->defaults);
    settings_free(&fs->builtin);
    pthread_mutex_destroy(&fs->mu);
    pthread_cond_destroy(&fs->cv);
    free(fs);
}

/* ---- public: names ---- */

/* stats.json and usage.json are rendered with the engine's lock, so their exact size
 * (git, rsync) is measured after ours is released (conv_id: usage.json's conversation).
 * Their time is when their content last changed, so that tar and rsync see a file that
 * stands still while nothing happens. */
static void live_attr(chatfs *fs, int kind, int64_t conv_id, fs_attr *a) {
    size_t len = 0;
    char *t = kind == K_STATS ? cfs_stats_text(fs, &len) : cfs_usage_text(fs, conv_id, &len);
    pthread_mutex_lock(&fs->mu);
    if (kind == K_STATS) {
        uint64_t h = cfs_text_hash(t, t ? len : 0);
        if (!fs->mtime_stats) fs->mtime_stats = fs->t_start;
        else if (h != fs->stats_hash) fs->mtime_stats = cfs_now_ns();
        fs->stats_hash = h;
        a->mtime_ns = fs->mtime_stats;
    } else {
        conv *c = cfs_find_conv_id(fs, conv_id);
        if (c && t) a->mtime_ns = cfs_content_mtime(c, kind, a->mtime_ns, t, len);
    }
    pthread_mutex_unlock(&fs->mu);
    free(t);
    a->size = len;
}

int fs_lookup(chatfs *fs, uint32_t tid, uint64_t parent, const char *name, fs_attr *out) {
    pthread_mutex_lock(&fs->mu);
    node dir, nd;
    int rc = cfs_resolve(fs, parent, &dir);
    if (!rc) rc = cfs_child(fs, tid, &dir, name, &nd);
    if (!rc) rc = cfs_attr_of(fs, &nd, out);
    int64_t conv_id = nd.c ? nd.c->id : 0;
    pthread_mutex_unlock(&fs->mu);
    if (!rc && cfs_is_live(nd.kind)) live_attr(fs, nd.kind, conv_id, out);
    return rc;
}

int fs_getattr(chatfs *fs, uint64_t ino, fs_attr *out) {
    pthread_mutex_lock(&fs->mu);
    node nd;
    int rc = cfs_resolve(fs, ino, &nd);
    if (!rc) rc = cfs_attr_of(fs, &nd, out);
    int64_t conv_id = nd.c ? nd.c->id : 0;
    pthread_mutex_unlock(&fs->mu);
    if (!rc && cfs_is_live(nd.kind)) live_attr(fs, nd.kind, conv_id, out);
    return rc;
}

void cfs_touch_dir(chatfs *fs, const node *dir) {
    if (dir->kind == K_ROOT) fs->mtime_root = cfs_now_ns();
    else if (dir->c) dir->c->mtime = cfs_now_ns();
}

int fs_mkdir(chatfs *fs, uint32_t tid, uint64_t parent, const char *name, fs_attr *out) {
    pthread_mutex_lock(&fs->mu);
    node dir, nd;
    int rc = cfs_resolve(fs, parent, &dir);
    if (rc) goto out;
    if (dir.kind == K_CONV && !strcmp(name, "turns") && (cfs_young(dir.c) || cfs_fresh_for(dir.c, tid))) {
        /* a copy making the copy's turns/ (shutil.copytree insists): it is there already */
        if (cfs_fresh_for(dir.c, tid)) dir.c->fresh_turns = 1;
        cfs_maker_looked(dir.c, tid);
        cfs_young_touch(dir.c);
        nd = (node){K_TURNS, dir.c, 0, NULL};
        rc = cfs_attr_of(fs, &nd, out);
        goto out;
    }
    if (cfs_child(fs, 0, &dir, name, &nd) == 0) {
        rc = -EEXIST;
        goto out;
    }
    if (dir.kind != K_ROOT) {
        rc = cfs_is_dir_kind(dir.kind) ? -EPERM : -ENOTDIR;
        goto out;
    }
    if (!cfs_valid_conv_name(name)) { /* nothing made: no error file, the log says why */
        cfs_log(fs, 2, "mkdir refused: a conversation's name is UTF-8 text that does not start with a dot");
        rc = -EINVAL;
        goto out;
    }
    int64_t id = 0;
    char err[256];
    char *json = settings_render(&fs->defaults);
    if (fs->st) {
        id = convs_create(fs->st, name, "", json ? json : "{}", cfs_now_ns(), err, sizeof err);
        if (id < 0) { /* no conversation, so no error file: the log says why */
            rc = (int)id;
            cfs_log(fs, 1, "%s: %s was not stored (%s)", name, rc == -ENOSPC ? "the disk is full: the conversation"
                                                                             : "the database failed: the conversation", err);
        }
    } else {
        for (int i = 0; i < fs->n_convs; i++)
            if (fs->convs[i]->id > id) id = fs->convs[i]->id;
        id++;
    }
    free(json);
    conv *c = rc ? NULL : cfs_conv_add(fs, id, name);
    if (!rc && !c) rc = -ENOMEM;
    if (rc) goto out;
    c->reply = cfs_stream_of_turn(NULL);
    cfs_reset_reply(c); /* and an empty thinking file */
    c->fresh_tid = cfs_copier(tid) ? tid : 0;
    c->maker_tid = tid;
    cfs_young_begin(c);
    fs->mtime_root = cfs_now_ns();
    cfs_log(fs, 2, "%s: made", name);
    nd = (node){K_CONV, c, 0, NULL};
    rc = cfs_attr_of(fs, &nd, out);
out:
    pthread_mutex_unlock(&fs->mu);
    return rc;
}

int fs_rmdir(chatfs *fs, uint32_t tid, uint64_t parent, const char *name) {
    pthread_mutex_lock(&fs->mu);
    node dir, nd;
    int rc = cfs_resolve(fs, parent, &dir);
    if (!rc) rc = cfs_child(fs, 0, &dir, name, &nd);
    if (rc) goto out;
    if (nd.kind == K_TURNS) { /* virtual: removable when empty, and there again at once */
        rc = nd.c->n_turns || cfs_has_scratch(fs, cfs_conv_ino(nd.c, SUB_TURNS)) ? -ENOTEMPTY : 0;
        goto out;
    }
    if (nd.kind == K_CALLS || nd.kind == K_CALL) { /* the calls live in the turns: removing those empties it */
        rc = cfs_call_count(nd.c) && nd.kind == K_CALLS ? -ENOTEMPTY
             : cfs_has_scratch(fs, cfs_node_ino(&nd))   ? -ENOTEMPTY
                                                        : 0;
        goto out;
    }
    if (nd.kind != K_CONV) {
        rc = -ENOTDIR;
        goto out;
    }
    conv *c = nd.c;
    if (c->n_turns || cfs_has_scratch(fs, cfs_conv_ino(c, 0)) || cfs_has_scratch(fs, cfs_conv_ino(c, SUB_TURNS))) {
        rc = -ENOTEMPTY;
        goto out;
    }
    if (cfs_busy(c)) cfs_stop_gen(fs, c);
    char err[256];
    if (fs->st && (rc = convs_delete(fs->st, c->id, err, sizeof err))) {
        cfs_store_failed(c, rc, "the removal of the conversation", err);
        goto out;
    }
    char session[32];
    snprintf(session, sizeof session, "conversation-%lld", (long long)c->id);
    cfs_log(fs, 2, "%s: removed", c->name);
    cfs_conv_remove(fs, c);
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
    int rc = cfs_resolve(fs, parent, &dir);
    if (!rc) rc = cfs_child(fs, 0, &dir, name, &nd);
    if (rc) goto out;
    switch (nd.kind) {
    case K_SCRATCH:
        cfs_scratch_unlink(fs, nd.sc);
        cfs_touch_dir(fs, &dir);
        break;
    case K_ATTACH: rc = cfs_attach_unlink(fs, nd.c, nd.turn); break;
    case K_ATTACHMENTS: rc = -EISDIR; break;
    case K_TURN: { /* the turn and every later one go; a reply being generated stops */
        conv *c = nd.c;
        if (cfs_busy(c)) cfs_stop_gen(fs, c);
        if (nd.turn < c->n_turns) {
            cfs_keep_removed(fs, tid, c, nd.turn); /* tar unlinks a turn to create it again */
            cfs_turns_truncate(c, nd.turn);
            rc = cfs_save_turns(fs, c, nd.turn, 0, "the removal of the turns");
            if (!rc) {
                cfs_reset_reply(c);
                c->state = ST_IDLE;
                c->mtime = c->mtime_hist = cfs_now_ns();
            }
        }
        break;
    }
    case K_THINK: { /* the turn's reasoning goes; the answer stays */
        conv *c = nd.c;
        if (cfs_busy(c) && c->gen->turn == nd.turn) {
            cfs_set_error(c, "a reply is being generated: wait for it or write 'stop' to ctl");
            rc = -EBUSY;
        } else if (!(rc = cfs_set_reasoning(&c->turns[nd.turn], "", 0))) {
            char err[256];
            if (fs->st && (rc = convs_update_reasoning(fs->st, c->id, nd.turn + 1, "", 0, err, sizeof err))) {
                cfs_store_failed(c, rc, "the removal of the reasoning", err);
                cfs_reload(fs, c);
            }
            if (!cfs_busy(c)) cfs_reset_reply(c);
            c->mtime = c->mtime_hist = cfs_now_ns();
        }
        break;
    }
    case K_ROOT:
    case K_CONV:
    case K_TURNS:
    case K_CALLS:
    case K_CALL: rc = -EISDIR; break;
    default: /* a conversation's own files stay (rm -r works); tar, which creates the name
              * again, does not see it until it does */
        if (nd.c) cfs_hide(fs, tid, nd.c, (int)(cfs_node_ino(&nd) & ((1u << CONV_SHIFT) - 1)));
        else if (nd.kind == K_README || nd.kind == K_GSETTINGS || nd.kind == K_STATS || nd.kind == K_GTOOLS)
            cfs_hide(fs, tid, NULL, (int)cfs_node_ino(&nd)); /* the root's, as tar restores them */
        else rc = -EPERM;
    }
out:
    cfs_unlock(fs);
    return rc;
}

int fs_symlink(chatfs *fs, uint32_t tid, const char *target, uint64_t parent, const char *name, fs_attr *out) {
    pthread_mutex_lock(&fs->mu);
    node dir, nd;
    int rc = cfs_resolve(fs, parent, &dir), user;
    if (!rc && cfs_child(fs, 0, &dir, name, &nd) == 0) rc = -EEXIST;
    else if (!rc && !cfs_can_hold_scratch(&dir)) rc = -ENOTDIR;
    else if (!rc && dir.kind == K_TURNS && cfs_parse_turn_name(name, &user) >= 0) rc = -EPERM; /* a later turn's name */
    else if (!rc && !cfs_scratch_name_ok(name)) rc = cfs_scratch_refuse(dir.c, name);
    scratch *s = NULL;
    if (!rc && !(s = cfs_scratch_new(fs, cfs_node_ino(&dir), name, 0777))) rc = -ENOMEM;
    if (!rc) {
        s->symlink = 1;
        s->len = strlen(target);
        s->cap = s->len + 1;
        s->data = strdup(target);
        cfs_touch_dir(fs, &dir);
        nd = (node){K_SCRATCH, dir.c, 0, s};
        rc = cfs_attr_of(fs, &nd, out);
    }
    pthread_mutex_unlock(&fs->mu);
    return rc;
}

int fs_readlink(chatfs *fs, uint64_t ino, char **target) {
    pthread_mutex_lock(&fs->mu);
    node nd;
    int rc = cfs_resolve(fs, ino, &nd);
    if (!rc && (nd.kind != K_SCRATCH || !nd.sc->symlink)) rc = -EINVAL;
    if (!rc && !(*target = cfs_memdup0(nd.sc->data, nd.sc->len))) rc = -ENOMEM;
    pthread_mutex_unlock(&fs->mu);
    return rc;
}

int fs_rename(chatfs *fs, uint32_t tid, uint64_t parent, const char *name, uint64_t newparent, const char *newname,
              unsigned flags) {
    if (flags & ~1u) return -EINVAL; /* RENAME_NOREPLACE only */
    pthread_mutex_lock(&fs->mu);
    node dir, ndir, src, dst;
    int rc = cfs_resolve(fs, parent, &dir);
    if (!rc) rc = cfs_resolve(fs, newparent, &ndir);
    if (!rc) rc = cfs_child(fs, 0, &dir, name, &src);
    if (rc) goto out;
    if (!cfs_is_dir_kind(ndir.kind)) {
        rc = -ENOTDIR;
        goto out;
    }
    int exists = cfs_child(fs, 0, &ndir, newname, &dst) == 0;
    if (exists && (flags & 1)) {
        rc = -EEXIST;
        goto out;
    }
    if (src.kind == K_CONV) { /* mv a b: a conversation's new name */
        if (ndir.kind != K_ROOT) rc = -EPERM;
        else if (exists) rc = dst.kind == K_CONV && dst.c == src.c ? 0 : -ENOTEMPTY;
        else if (!cfs_valid_conv_name(newname)) rc = -EINVAL;
        else {
            char err[256], *n = strdup(newname);
            if (!n) rc = -ENOMEM;
            else if (fs->st && (rc = convs_rename(fs->st, src.c->id, newname, err, sizeof err)))
                cfs_store_failed(src.c, rc, "the new name", err), free(n);
            else {
                cfs_log(fs, 2, "%s: renamed to %s", src.c->name, n);
                free(src.c->name);
                src.c->name = n;
                fs->mtime_root = cfs_now_ns();
            }
        }
        goto out;
    }
    if (cfs_is_dir_kind(src.kind) || (exists && cfs_is_dir_kind(dst.kind))) {
        rc = exists && cfs_is_dir_kind(dst.kind) && !cfs_is_dir_kind(src.kind) ? -EISDIR : -EPERM;
        goto out;
    }
    if (src.kind == K_SCRATCH) {
        scratch *s = src.sc;
        int waits = 0; /* it became a turn that waits for the ones before it */
        if (s->symlink && exists && dst.kind != K_SCRATCH) {
            rc = -EPERM;
        } else if (exists && dst.kind == K_SCRATCH) {
            if (dst.sc != s) {
                cfs_scratch_unlink(fs, dst.sc);
                free(s->name);
                s->name = strdup(newname);
                s->parent = newparent;
            }
        } else if (exists && cfs_is_derived(dst.kind)) {
            /* rsync putting a view in place in a young copy, or a copy of the root's
             * README or stats.json: nothing to keep */
            if ((dst.c && cfs_young(dst.c)) || (!dst.c && cfs_root_copy_ok(fs, dst.kind, s->data, s->len)))
                cfs_scratch_unlink(fs, s);
            else {
                if (dst.c)
                    cfs_set_error(dst.c, "%s is read-only: it shows the conversation (a copy onto a conversation in "
                                  "use brings only its system prompt, settings and new turns)", cfs_kind_name(dst.kind));
                rc = -EACCES;
            }
        } else if (exists) { /* an editor's or rsync's temporary file renamed onto a real one */
            rc = cfs_commit(fs, &dst, COMMIT_EDIT, s->data ? s->data : "", s->len);
            if (!rc) cfs_scratch_unlink(fs, s);
        } else {
            int user, idx = ndir.kind == K_TURNS ? cfs_parse_turn_name(newname, &user) : -1, pending = 0;
            int think = ndir.kind == K_TURNS ? cfs_parse_thinking_name(newname) : -1;
            if (think >= 0) { /* rsync's temporary file becoming a turn's reasoning */
                conv *c = ndir.c;
                pending = think >= c->n_turns && cfs_young(c);
                if (pending) rc = 0;
                else if (think >= c->n_turns || c->turns[think].user) rc = -EACCES;
                else {
                    node t = {K_THINK, c, think, NULL};
                    rc = cfs_commit(fs, &t, COMMIT_NEW_TURN, s->data ? s->data : "", s->len);
                    if (!rc) cfs_scratch_unlink(fs, s);
                }
                if (!rc && !pending) idx = think; /* done: no scratch name to keep */
            } else if (idx >= 0) { /* a new turn */
                conv *c = ndir.c;
                pending = idx > c->n_turns && cfs_young(c); /* it waits for the turns before it */
                if (pending) rc = 0;
                else if (idx != c->n_turns || cfs_busy(c)) rc = cfs_busy(c) ? -EBUSY : -EACCES;
                else if (!(rc = cfs_turn_push_role(c, user, "", 0, 1, cfs_now_ns())) &&
                         !(rc = cfs_save_turns(fs, c, idx, 0, "the new turn"))) {
                    node t = {K_TURN, c, idx, NULL};
                    rc = cfs_commit(fs, &t, COMMIT_NEW_TURN, s->data ? s->data : "", s->len);
                    if (rc) {
                        cfs_turns_truncate(c, idx);
                        cfs_save_turns(fs, c, idx, 0, "the removal of the refused turn");
                    } else {
                        cfs_scratch_unlink(fs, s);
                        cfs_adopt_pending(fs, c);
                    }
                }
            } else {
                rc = cfs_scratch_name_ok(newname) ? 0 : cfs_scratch_refuse(ndir.c, newname);
            }
            if (!rc && (idx < 0 || pending)) {
                s->pending = waits = pending;
                free(s->name);
                s->name = strdup(newname);
                s->parent = newparent;
            }
        }
        if (!rc) cfs_touch_dir(fs, &dir), cfs_touch_dir(fs, &ndir);
        if (!rc && ndir.c) {
            cfs_young_touch(ndir.c);
            if (waits) cfs_adopt_pending(fs, ndir.c); /* s may be gone since: not through it */
        }
        goto out;
    }
    /* a conversation's file or a turn renamed away (vim and emacs backups: f -> f~):
     * the name gets a scratch copy and the file stays */
    if (exists && dst.kind != K_SCRATCH) {
        rc = -EPERM;
        goto out;
    }
    int user;
    if (!exists && ndir.kind == K_TURNS &&
        (cfs_parse_turn_name(newname, &user) >= 0 || cfs_parse_thinking_name(newname) >= 0)) {
        rc = -EPERM;
        goto out;
    }
    if (!exists && !cfs_scratch_name_ok(newname)) {
        rc = cfs_scratch_refuse(ndir.c, newname);
        goto out;
    }
    sbuf b = {0};
    if (cfs_is_live(src.kind)) rc = -EPERM;
    else rc = cfs_render(fs, &src, &b);
    if (!rc) {
        scratch *s = exists ? dst.sc : cfs_scratch_new(fs, newparent, newname, 0644);
        rc = s ? cfs_scratch_set(fs, s, b.p ? b.p : "", b.len) : -ENOMEM;
        cfs_touch_dir(fs, &ndir);
    }
    free(b.p);
out:
    cfs_unlock(fs);
    return rc;
}

int fs_readdir(chatfs *fs, uint32_t tid, uint64_t ino, fs_dirent **ents, int *n) {
    pthread_mutex_lock(&fs->mu);
    node dir;
    int rc = cfs_resolve(fs, ino, &dir);
    if (!rc && !cfs_is_dir_kind(dir.kind)) rc = -ENOTDIR;
    if (rc) {
        pthread_mutex_unlock(&fs->mu);
        return rc;
    }
    cfs_maker_looked(dir.c, tid);
    const int n_calls = dir.c ? cfs_call_count(dir.c) : 0;
    int cap = 16 + (dir.c ? dir.c->n_att : 0) + CFS_N_CONV_FILES + fs->n_convs + (dir.c ? 2 * dir.c->n_turns : 0) + n_calls;
    for (scratch *s = fs->scratch; s; s = s->next) cap++;
    fs_dirent *e = calloc(cap, sizeof *e);
    int k = 0;
    if (!e) {
        pthread_mutex_unlock(&fs->mu);
        return -ENOMEM;
    }
#define ADD(nm, in, md) (e[k].name = strdup(nm), e[k].ino = (in), e[k].mode = (md), k++)
    ADD(".", cfs_node_ino(&dir), S_IFDIR);
    ADD("..", dir.kind == K_TURNS || dir.kind == K_CALLS || dir.kind == K_ATTACHMENTS ? cfs_conv_ino(dir.c, 0)
              : dir.kind == K_CALL                         ? cfs_conv_ino(dir.c, SUB_CALLS)
                                                           : FS_ROOT_INO,
        S_IFDIR);
    if (dir.kind == K_ROOT) {
        for (size_t i = 0; i < sizeof cfs_root_files / sizeof *cfs_root_files; i++)
            ADD(cfs_root_files[i].name, cfs_root_files[i].ino, cfs_root_files[i].mode);
        for (int i = 0; i < fs->n_convs; i++) ADD(fs->convs[i]->name, cfs_conv_ino(fs->convs[i], 0), S_IFDIR);
    } else if (dir.kind == K_CONV) {
        for (int i = 0; i < CFS_N_CONV_FILES; i++)
            ADD(cfs_conv_files[i].name, cfs_conv_ino(dir.c, cfs_conv_files[i].sub), cfs_conv_files[i].mode);
        /* calls/ is not listed: it shows what turns/ holds, and a copy (tar, rsync, cp -a)
         * brings the calls with the turns and messages.json, not through it */
    } else if (dir.kind == K_ATTACHMENTS) {
        for (int i = 0; i < dir.c->n_att; i++)
            ADD(dir.c->att[i].name, cfs_conv_ino(dir.c, SUB_ATTACH0 + (int)dir.c->att[i].seq), S_IFREG);
    } else if (dir.kind == K_CALLS) {
        for (int i = 0; i < n_calls; i++) {
            cfs_call call;
            if (cfs_call_get(dir.c, i, &call)) continue;
            ADD(call.id, cfs_conv_ino(dir.c, SUB_CALL0 + 4 * i), S_IFDIR);
            cfs_call_free(&call);
        }
    } else if (dir.kind == K_CALL) {
        ADD("name", cfs_conv_ino(dir.c, SUB_CALL0 + 4 * dir.turn + 1), S_IFREG);
        ADD("arguments.json", cfs_conv_ino(dir.c, SUB_CALL0 + 4 * dir.turn + 2), S_IFREG);
        ADD("result", cfs_conv_ino(dir.c, SUB_CALL0 + 4 * dir.turn + 3), S_IFREG);
    } else {
        /* last turn first: rm -r removes in this order, and removing the last turn is
         * the only removal that keeps the others (cp sorts by inode, so it copies in order) */
        for (int i = dir.c->n_turns - 1; i >= 0; i--) {
            char nm[64];
            if (cfs_has_thinking(dir.c, i)) { /* before its turn: rm -r removes it first */
                cfs_thinking_name(i, nm, sizeof nm);
                ADD(nm, cfs_conv_ino(dir.c, SUB_THINK0 + i), S_IFREG);
            }
            cfs_turn_name(dir.c, i, nm, sizeof nm);
            ADD(nm, cfs_conv_ino(dir.c, SUB_TURN0 + i), S_IFREG);
        }
    }
    uint64_t dino = cfs_node_ino(&dir);
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
