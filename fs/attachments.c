/* attachments.c - images put in a conversation: NAME/attachments/.
 *
 * `cp photo.jpg NAME/attachments/` creates one; its bytes are checked at the close (the
 * engine decodes them as it will for the model: a file it cannot decode, cut short, or
 * of too many pixels is refused there with the reason, and nothing is kept) and stored
 * in the database under their content hash, once however many conversations hold them.
 * The next message sent carries every attachment added since the last message, in the
 * order they were added; from then on they belong to that user turn and read-only. A
 * waiting one may be replaced (written again) or removed; when the turn that carried some
 * goes (a removed turn, a refused message), they wait for the next message again.
 *
 * Inodes: the directory is SUB_ATTACHMENTS, an attachment SUB_ATTACH0 + its seq, which
 * never changes, so a removal never makes another file's inode point elsewhere. */
#include "fs/chatfs_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/hash.h"
#include "fs/data_url.h"

static int set_turns(chatfs *fs, conv *c, const int *idx, const int *turns, int n, const char *what);

int cfs_attach_find(const conv *c, const char *name) {
    for (int i = 0; i < c->n_att; i++)
        if (!strcmp(c->att[i].name, name)) return i;
    return -1;
}

int cfs_attach_by_seq(const conv *c, int64_t seq) {
    for (int i = 0; i < c->n_att; i++)
        if (c->att[i].seq == seq) return i;
    return -1;
}

static void attach_free(attachment *a) {
    free(a->name);
    free(a->data);
}

static void attach_remove(conv *c, int k) {
    attach_free(&c->att[k]);
    memmove(c->att + k, c->att + k + 1, sizeof *c->att * (size_t)(c->n_att - k - 1));
    c->n_att--;
}

void cfs_attach_unlink_memory(conv *c, int k) { attach_remove(c, k); }

void cfs_attach_free_all(conv *c) {
    for (int i = 0; i < c->n_att; i++) attach_free(&c->att[i]);
    free(c->att);
    c->att = NULL;
    c->n_att = 0;
}

static attachment *attach_push(conv *c, const char *name) {
    attachment *grown = realloc(c->att, sizeof *grown * (size_t)(c->n_att + 1));
    if (!grown) return NULL;
    c->att = grown;
    attachment *a = &c->att[c->n_att];
    memset(a, 0, sizeof *a);
    if (!(a->name = strdup(name))) return NULL;
    c->n_att++;
    return a;
}

int cfs_attach_load(conv *c, const convs_attachment *in) {
    int k = cfs_attach_by_seq(c, in->seq);
    if (k >= 0) attach_remove(c, k); /* a reload */
    attachment *a = attach_push(c, in->name);
    if (!a || !(a->data = malloc(in->len ? in->len : 1))) return -1;
    memcpy(a->data, in->bytes, in->len);
    a->len = in->len;
    snprintf(a->hash, sizeof a->hash, "%s", in->hash);
    a->seq = in->seq;
    a->turn = in->turn;
    a->mtime = in->mtime_ns;
    if (a->seq >= c->next_att_seq) c->next_att_seq = a->seq + 1;
    return 0;
}

/* a name an attachment may have: a file name that is text, not a dot name */
static int name_ok(const char *name) {
    const size_t n = strlen(name);
    int bad;
    if (n == 0 || n > 255 || name[0] == '.' || strchr(name, '/')) return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f) return 0;
    return cfs_utf8_valid_prefix(name, n, &bad) == n;
}

int cfs_attach_create(chatfs *fs, conv *c, const char *name, int *out) {
    if (!fs->be->check_image) {
        cfs_set_error(c, "attachments/%s: this mount's engine takes no images (a remote or fake engine)", name);
        return -ENOTSUP;
    }
    char err[300];
    if (fs->be->check_image(fs->be, NULL, 0, err, sizeof err) != 0 && errno == ENOTSUP) {
        cfs_set_error(c, "attachments/%s: %s", name, err);
        return -ENOTSUP;
    }
    if (!name_ok(name)) {
        cfs_set_error(c, "attachments/%s: an attachment's name is text without control characters that does not "
                         "start with a dot",
                      name);
        return -EINVAL;
    }
    int k = cfs_attach_find(c, name);
    if (k >= 0 && c->att[k].turn) {
        cfs_set_error(c, "attachments/%s went with turn %d: it stays as it was sent", name, c->att[k].turn);
        return -EACCES;
    }
    if (k < 0) {
        attachment *a = attach_push(c, name);
        if (!a) return -ENOMEM;
        a->writing = 1;
        a->seq = c->next_att_seq++;
        a->mtime = cfs_now_ns();
        k = c->n_att - 1;
    }
    *out = k;
    return 0;
}

int cfs_attach_writable(conv *c, int k) {
    if (!c->att[k].turn) return 0;
    cfs_set_error(c, "attachments/%s went with turn %d: it stays as it was sent", c->att[k].name, c->att[k].turn);
    return -EACCES;
}

/* 128 bits, as hex */
void fs_image_hash(const void *data, size_t len, char out[33]) {
    const uint64_t a = hash64(data, len, 0x696d616765000001ull), b = hash64(data, len, 0x696d616765000002ull);
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)a, (unsigned long long)b);
}

int cfs_attach_commit(chatfs *fs, conv *c, int k, const char *data, size_t len) {
    attachment *a = &c->att[k];
    char err[300];
    if (cfs_attach_writable(c, k)) return -EACCES;
    if (!fs->be->check_image || fs->be->check_image(fs->be, data, len, err, sizeof err) != 0) {
        const int why = fs->be->check_image && errno == ENOTSUP ? -ENOTSUP : -EINVAL;
        cfs_set_error(c, "attachments/%s: %s; nothing was stored", a->name,
                      fs->be->check_image ? err : "this mount's engine takes no images");
        cfs_log(fs, 2, "%s: attachments/%s refused: %s", c->name, a->name, err);
        if (a->writing) attach_remove(c, k);
        return why;
    }
    char *copy = malloc(len ? len : 1);
    if (!copy) return -ENOMEM;
    memcpy(copy, data, len);
    char hash[33];
    fs_image_hash(data, len, hash);
    const int64_t now = cfs_now_ns();
    if (fs->st) {
        convs_attachment row = {a->seq, a->name, hash, data, len, 0, now};
        const int rc = convs_put_attachment(fs->st, c->id, &row, err, sizeof err);
        if (rc) {
            free(copy);
            cfs_store_failed(c, rc, "the attachment", err);
            if (a->writing) attach_remove(c, k);
            return rc;
        }
    }
    free(a->data);
    a->data = copy;
    a->len = len;
    memcpy(a->hash, hash, sizeof hash);
    a->writing = 0;
    a->mtime = now;
    c->mtime = now;
    cfs_clear_error(c);
    cfs_log(fs, 2, "%s: attachments/%s, %zu bytes (%s)", c->name, a->name, len, hash);
    return 0;
}

int cfs_attach_check(chatfs *fs, const char *bytes, size_t len, char *err, size_t errlen) {
    if (!fs->be->check_image) {
        snprintf(err, errlen, "this mount's engine takes no images (a fake engine)");
        return -ENOTSUP;
    }
    if (fs->be->check_image(fs->be, bytes, len, err, errlen) == 0) return 0;
    return errno == ENOTSUP ? -ENOTSUP : -EINVAL;
}

int cfs_attach_import(chatfs *fs, conv *c, int turn, const char *bytes, size_t len) {
    int k = 1;
    for (int i = 0; i < c->n_att; i++) k += c->att[i].turn == turn;
    const char *type = data_url_media_type(bytes, len), *slash = strchr(type, '/');
    char name[64];
    snprintf(name, sizeof name, "%03d-%d.%s", turn, k,
             !strcmp(type, "image/jpeg") ? "jpg" : slash && strcmp(type, "application/octet-stream") ? slash + 1 : "img");
    while (cfs_attach_find(c, name) >= 0) snprintf(name + strlen(name), sizeof name - strlen(name), "_");
    int idx;
    attachment *a = attach_push(c, name);
    if (!a) return -ENOMEM;
    idx = c->n_att - 1;
    a->writing = 1;
    a->seq = c->next_att_seq++;
    const int rc = cfs_attach_commit(fs, c, idx, bytes, len);
    if (rc) return rc;
    int t = turn;
    return set_turns(fs, c, &idx, &t, 1, "the imported images");
}

void cfs_attach_abandon(conv *c, int64_t seq) {
    const int k = cfs_attach_by_seq(c, seq);
    if (k >= 0 && c->att[k].writing) attach_remove(c, k);
}

int cfs_attach_unlink(chatfs *fs, conv *c, int k) {
    if (cfs_attach_writable(c, k)) return -EACCES;
    if (fs->st && !c->att[k].writing) {
        char err[300];
        const int rc = convs_drop_attachment(fs->st, c->id, c->att[k].name, err, sizeof err);
        if (rc) {
            cfs_store_failed(c, rc, "the removal of the attachment", err);
            return rc;
        }
    }
    attach_remove(c, k);
    c->mtime = cfs_now_ns();
    return 0;
}

/* the turns the attachments at idx[0..n) take, in memory and in the database */
static int set_turns(chatfs *fs, conv *c, const int *idx, const int *turns, int n, const char *what) {
    if (n == 0) return 0;
    if (fs->st) {
        int64_t seqs[n];
        for (int i = 0; i < n; i++) seqs[i] = c->att[idx[i]].seq;
        char err[300];
        const int rc = convs_set_attachment_turns(fs->st, c->id, seqs, turns, n, err, sizeof err);
        if (rc) {
            cfs_store_failed(c, rc, what, err);
            return rc;
        }
    }
    for (int i = 0; i < n; i++) c->att[idx[i]].turn = turns[i];
    return 0;
}

int cfs_attach_bind(chatfs *fs, conv *c, int turn) {
    int idx[c->n_att > 0 ? c->n_att : 1], turns[c->n_att > 0 ? c->n_att : 1], n = 0;
    for (int i = 0; i < c->n_att; i++)
        if (!c->att[i].turn && !c->att[i].writing) idx[n] = i, turns[n++] = turn;
    return set_turns(fs, c, idx, turns, n, "the message's attachments");
}

void cfs_attach_repair(chatfs *fs, conv *c) {
    int idx[c->n_att > 0 ? c->n_att : 1], turns[c->n_att > 0 ? c->n_att : 1], n = 0;
    for (int i = 0; i < c->n_att; i++) {
        const int t = c->att[i].turn;
        if (t && (t > c->n_turns || !c->turns[t - 1].user)) idx[n] = i, turns[n++] = 0;
    }
    set_turns(fs, c, idx, turns, n, "the attachments of the removed turns");
}

void cfs_attach_lines(const conv *c, int turn, sbuf *b) {
    for (int k = 0; k < c->n_att; k++)
        if (c->att[k].turn == turn && !c->att[k].writing)
            cfs_sb_fmt(b, "> image attachments/%s (%zu bytes)\n\n", c->att[k].name, c->att[k].len);
}

size_t cfs_attach_lines_end(const char *text, size_t len) {
    static const char head[] = "> image attachments/";
    size_t at = 0;
    while (len - at >= sizeof head - 1 && !memcmp(text + at, head, sizeof head - 1)) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len;
        if (end - at < 8 || memcmp(text + end - 7, " bytes)", 7)) break; /* not such a line: text */
        at = end;
        if (at < len) at++;                           /* its newline */
        if (at < len && text[at] == '\n') at++;       /* the blank line after it */
    }
    return at;
}

int cfs_attach_images(const conv *c, int turn, chat_image *out) {
    int n = 0;
    for (int i = 0; i < c->n_att; i++)
        if (c->att[i].turn == turn && !c->att[i].writing) out[n++] = (chat_image){c->att[i].data, c->att[i].len};
    return n;
}
