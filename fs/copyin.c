/* copyin.c - conversations copied into the mount by the tools people use: cp -a (and
 * cp -r, mv across filesystems), tar -xf, rsync -a, Python's shutil.copytree.
 *
 * Every conversation has its files from the moment mkdir makes it, and the tools each
 * meet that differently:
 *  - shutil.copytree (os.makedirs) and rsync make turns/ with mkdir, which fails on a
 *    name that exists: the thread that made a conversation does not see its turns/
 *    until it makes it, reads something of the conversation or sends a message, and
 *    mkdir of turns/ in a young conversation succeeds for anyone.
 *  - cp creates every file with O_EXCL in a directory it just made. For a few seconds
 *    that process sees a new conversation's files only as it creates them (names.c,
 *    "fresh"), then its creates open the existing files.
 *  - tar gets EEXIST from O_EXCL, unlinks the name and creates it again. An unlinked
 *    conversation file is hidden from that thread until it creates the name again
 *    (cfs_hide); an unlinked turn goes at once, as rm expects, but the same thread
 *    creating the same name moments later gets the removed turns back (cfs_keep_removed,
 *    cfs_restore_removed) and writes over them: so tar over a conversation never cuts it.
 *  - rsync writes `.NAME.XXXXXX` and renames it onto NAME; copytree opens with O_TRUNC.
 * In a young conversation (mkdir'ed moments ago, nothing sent yet; cfs_young) writes to
 * the views (reply, status, ...) are accepted and dropped, mkdir of turns/ succeeds, and
 * turns that arrive before the ones they follow (tar and copytree keep the source's
 * directory order) wait as scratch files in turns/ until their turn comes
 * (cfs_adopt_pending). messages.json arrives before turns/ in every tool, imports the
 * history, and the turn files that follow then change nothing (commit.c: a copy never
 * rewrites a turn).
 *
 * Separate because none of this is a rule of the filesystem a person uses by hand: it is
 * how copies find their way through those rules. Callers hold fs->mu. */
#include "fs/chatfs_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define YOUNG_NS 5000000000LL /* the copy window, from the last file a copy brought */
#define UNDO_NS 2000000000LL  /* how long an unlink can be taken back by the same thread */

typedef struct undo {
    struct undo *next;
    uint32_t tid;
    int64_t conv;  /* the conversation's id */
    int sub;       /* a hidden file's inode sub-number; -1: removed turns */
    int from;      /* removed turns: the index of the first */
    turn *turns;   /* their copies */
    int n;
    int state, finish; /* the conversation's status before the removal */
    gen_report rep;
    int64_t until; /* CLOCK_MONOTONIC */
} undo;

static void undo_free(undo *u) {
    for (int i = 0; i < u->n; i++) cfs_turn_free(&u->turns[i]);
    free(u->turns);
    free(u);
}

/* drops what has expired; returns the list */
static undo **prune(chatfs *fs) {
    int64_t now = cfs_mono_ns();
    for (undo **p = (undo **)&fs->undo; *p;) {
        undo *u = *p;
        if (u->until > now) {
            p = &u->next;
            continue;
        }
        *p = u->next;
        undo_free(u);
    }
    return (undo **)&fs->undo;
}

/* the entry of (tid, conversation, sub), unlinked from the list when take */
static undo *find(chatfs *fs, uint32_t tid, const conv *c, int sub, int take) {
    if (!tid) return NULL;
    for (undo **p = prune(fs); *p; p = &(*p)->next) {
        undo *u = *p;
        if (u->tid != tid || u->conv != (c ? c->id : 0) || u->sub != sub) continue;
        if (take) *p = u->next;
        return u;
    }
    return NULL;
}

void cfs_copyin_forget(chatfs *fs, int64_t conv_id) {
    for (undo **p = (undo **)&fs->undo; *p;) {
        undo *u = *p;
        if (u->conv != conv_id) {
            p = &u->next;
            continue;
        }
        *p = u->next;
        undo_free(u);
    }
}

void cfs_copyin_free(chatfs *fs) {
    while (fs->undo) {
        undo *u = fs->undo;
        fs->undo = u->next;
        undo_free(u);
    }
}

/* ---- young conversations ---- */

int cfs_young(const conv *c) { return c && c->young_until && cfs_mono_ns() < c->young_until; }

void cfs_young_begin(conv *c) { c->young_until = cfs_mono_ns() + YOUNG_NS; }

void cfs_young_touch(conv *c) {
    if (cfs_young(c)) cfs_young_begin(c);
}

void cfs_young_end(chatfs *fs, conv *c) {
    c->young_until = 0;
    c->fresh_tid = 0;
    c->maker_tid = 0;
    /* in use now: turns still waiting for the ones before them will not get them, and
     * the reply about to be added would take a waiting turn's name */
    uint64_t dir = cfs_conv_ino(c, SUB_TURNS);
    for (scratch *s = fs->scratch, *next; s; s = next) {
        next = s->next;
        if (!s->pending || s->parent != dir) continue;
        cfs_set_error(c, "turns/%s: a copied turn that never got the turns before it was dropped", s->name);
        cfs_scratch_unlink(fs, s);
    }
}

void cfs_maker_looked(conv *c, uint32_t tid) {
    if (c && tid && c->maker_tid == tid) c->maker_tid = 0;
}

/* ---- hidden files (c NULL: the root's, sub their inode) ---- */

void cfs_hide(chatfs *fs, uint32_t tid, const conv *c, int sub) {
    undo *u = find(fs, tid, c, sub, 0);
    if (!u) {
        if (!tid || !(u = calloc(1, sizeof *u))) return; /* then tar reports EEXIST: no loss */
        *u = (undo){fs->undo, tid, c ? c->id : 0, sub, 0, NULL, 0, 0, 0, {0}, 0};
        fs->undo = u;
    }
    u->until = cfs_mono_ns() + UNDO_NS;
}

int cfs_hidden(chatfs *fs, uint32_t tid, const conv *c, int sub) { return find(fs, tid, c, sub, 0) != NULL; }

int cfs_unhide(chatfs *fs, uint32_t tid, const conv *c, int sub) {
    undo *u = find(fs, tid, c, sub, 1);
    if (u) undo_free(u);
    return u != NULL;
}

/* A write or a rename putting a copy of README or stats.json in place (a whole-mount
 * restore by tar, rsync or cp -a): both are rendered, so a copy of chatfs's own is
 * accepted and has no effect; anything else is refused. data is what comes first (a
 * write at offset 0, or the whole file). */
int cfs_root_copy_ok(chatfs *fs, int kind, const char *data, size_t len) {
    if (kind == K_STATS) return len > 0 && data[0] == '{';
    if (kind != K_README) return 0;
    node nd = {K_README, NULL, 0, NULL};
    sbuf b = {0};
    int ok = 0;
    if (!cfs_render(fs, &nd, &b) && b.p) {
        const char *nl = memchr(b.p, '\n', b.len);
        size_t first = nl ? (size_t)(nl - b.p) + 1 : b.len; /* its title line, which every version has */
        size_t n = len < first ? len : first;
        ok = n > 0 && !memcmp(data, b.p, n);
    }
    free(b.p);
    return ok;
}

/* ---- removed turns ---- */

void cfs_keep_removed(chatfs *fs, uint32_t tid, const conv *c, int from) {
    if (!tid || from >= c->n_turns) return;
    undo *u = find(fs, tid, c, -1, 1);
    if (u) undo_free(u); /* rm -r removes the last turn first: the newest removal is the one to keep */
    if (!(u = calloc(1, sizeof *u)) || !(u->turns = calloc((size_t)(c->n_turns - from), sizeof *u->turns))) {
        free(u);
        return;
    }
    *u = (undo){fs->undo, tid, c->id, -1, from, u->turns, 0, c->state, c->finish, c->rep, cfs_mono_ns() + UNDO_NS};
    for (int i = from; i < c->n_turns; i++) {
        const turn *from_turn = &c->turns[i];
        turn t = *from_turn;
        t.text = cfs_memdup0(from_turn->text, from_turn->len);
        t.reasoning = from_turn->reasoning ? cfs_memdup0(from_turn->reasoning, from_turn->reasoning_len) : NULL;
        t.calls = from_turn->calls ? strdup(from_turn->calls) : NULL;
        t.call_id = from_turn->call_id ? strdup(from_turn->call_id) : NULL;
        if (!t.text || (from_turn->reasoning && !t.reasoning) || (from_turn->calls && !t.calls) ||
            (from_turn->call_id && !t.call_id)) {
            cfs_turn_free(&t);
            break;
        }
        u->turns[u->n++] = t;
    }
    fs->undo = u;
}

int cfs_restore_removed(chatfs *fs, uint32_t tid, conv *c, int idx, int user) {
    undo *u = find(fs, tid, c, -1, 0);
    if (!u || u->from != idx || c->n_turns != idx || !u->n || cfs_turn_role_code(&u->turns[0]) != user) return 0;
    find(fs, tid, c, -1, 1);
    for (int i = 0; i < u->n; i++) {
        turn *t = &u->turns[i];
        if (cfs_turn_push(c, t->user, t->text, t->len, t->complete, t->mtime)) break;
        turn *back = &c->turns[c->n_turns - 1];
        if (t->reasoning_len) cfs_set_reasoning(back, t->reasoning, t->reasoning_len);
        back->tool = t->tool; /* the copies move back with their turns */
        back->calls = t->calls, t->calls = NULL;
        back->call_id = t->call_id, t->call_id = NULL;
    }
    c->state = u->state; /* as if nothing had happened */
    c->finish = u->finish;
    c->rep = u->rep;
    undo_free(u);
    cfs_save_turns(fs, c, idx, 0, "the turns put back");
    cfs_reset_reply(c);
    cfs_adopt_pending(fs, c);
    return 1;
}

/* ---- turns that came before their turn ---- */

void cfs_adopt_pending(chatfs *fs, conv *c) {
    uint64_t dir = cfs_conv_ino(c, SUB_TURNS);
    for (int again = 1; again && !c->deleted && !cfs_busy(c);) {
        again = 0;
        for (scratch *s = fs->scratch; s; s = s->next) {
            int think = s->pending && s->parent == dir ? cfs_parse_thinking_name(s->name) : -1;
            if (think >= 0 && think < c->n_turns && s->refs <= 1) { /* a reasoning whose turn has come */
                size_t len = cfs_strip_newline(s->data ? s->data : "", s->len);
                turn *t = &c->turns[think];
                if (t->user) continue; /* not an assistant's: it stays a scratch file */
                if (t->reasoning_len && (t->reasoning_len != len || memcmp(t->reasoning, s->data, len)))
                    cfs_set_error(c, "turns/%s: the copy's reasoning differs from the conversation's, which stays",
                                  s->name);
                else if (!t->reasoning_len && !cfs_check_text(c, s->name, s->data ? s->data : "", len)) {
                    size_t n;
                    char *text = cfs_normalise(s->data ? s->data : "", len, &n);
                    if (!text || cfs_set_reasoning(t, text, n)) {
                        free(text);
                        return;
                    }
                    free(text);
                    if (cfs_save_turns(fs, c, think, 0, "the copied reasoning")) return; /* it waits */
                    cfs_reset_reply(c);
                }
                cfs_scratch_unlink(fs, s);
                again = 1;
                break;
            }
            int user, idx = s->pending && s->parent == dir ? cfs_parse_turn_name(s->name, &user) : -1;
            if (idx < 0 || idx > c->n_turns || s->refs > 1) continue; /* later, or still being written */
            size_t len = cfs_strip_newline(s->data ? s->data : "", s->len);
            if (idx < c->n_turns) { /* the history has it already (messages.json came too) */
                const turn *t = &c->turns[idx];
                if (cfs_turn_role_code(t) != user) continue; /* another name: it stays a scratch file */
                if (t->len != len || memcmp(t->text, s->data, len))
                    cfs_set_error(c, "turns/%s: the copy's turn differs from the conversation's, which stays",
                                  s->name);
            } else if (!cfs_check_text(c, s->name, s->data ? s->data : "", len)) { /* else dropped */
                size_t n;
                char *text = cfs_normalise(s->data ? s->data : "", len, &n);
                if (!text || cfs_turn_push_role(c, user, text, n, 1, s->mtime)) {
                    free(text);
                    return;
                }
                free(text);
                if (cfs_save_turns(fs, c, idx, 0, "the copied turn")) return; /* it waits */
                cfs_reset_reply(c);
            }
            cfs_scratch_unlink(fs, s);
            again = 1;
            break;
        }
    }
}
