/* ckpt_sql.c - the checkpoint tables (module "checkpoints" of db.h).
 *
 *   ckpt_models   one row per model fingerprint
 *   ckpt_pages    KV pages: (model, key) -> parent key, first position, tokens, KV rows
 *   ckpt_entries  checkpoints: (model, prefix hash, n) -> last page, recurrent blob, logits
 *
 * 64-bit hashes are stored as SQLite integers (two's complement). Every length and
 * count read back is checked against what the model says it must be; rows that fail
 * are deleted and counted, never used. Blobs are verified by checksum when read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store/ckpt_impl.h"
#include "store/db.h"
#include "engine/base/hash.h"

static const char *const migrations[] = {
    "CREATE TABLE ckpt_models(id INTEGER PRIMARY KEY, fingerprint BLOB NOT NULL UNIQUE, name TEXT NOT NULL,"
    " row_bytes INTEGER NOT NULL, rec_bytes INTEGER NOT NULL, logits_bytes INTEGER NOT NULL, created INTEGER NOT NULL);"
    "CREATE TABLE ckpt_pages(model INTEGER NOT NULL, key INTEGER NOT NULL, parent INTEGER NOT NULL,"
    " pos0 INTEGER NOT NULL, n_tokens INTEGER NOT NULL, bytes INTEGER NOT NULL, checksum INTEGER NOT NULL,"
    " tokens BLOB NOT NULL, kv BLOB, UNIQUE(model, key));"
    "CREATE TABLE ckpt_entries(model INTEGER NOT NULL, hash INTEGER NOT NULL, n_tokens INTEGER NOT NULL,"
    " last_page INTEGER NOT NULL, kind INTEGER NOT NULL, session TEXT, last_used INTEGER NOT NULL,"
    " has_logits INTEGER NOT NULL, bytes INTEGER NOT NULL, checksum INTEGER NOT NULL, rec BLOB, logits BLOB,"
    " UNIQUE(model, hash, n_tokens));",
    /* version 1 also made ask_turns (chatfs ask's turns, before ask shared the
     * conversations' tables); conversations.c's version 3 moves them into its tables */
};

/* Every use of the connection is between db_enter and db_leave (db.h): a transaction
 * holds the database from cs_sql_begin to cs_sql_end, a read or a delete for itself. */
static sqlite3 *sql(ckpt_store *s) { return db_sql(s->db); }

void cs_sql_failed(ckpt_store *s, const char *what) {
    if (!s->db) return;
    fprintf(stderr, "chatfs: checkpoint database: %s: %s; continuing with checkpoints in RAM only\n", what,
            sqlite3_errmsg(sql(s)));
    if (s->txn_depth > 0) {
        sqlite3_exec(sql(s), "ROLLBACK", NULL, NULL, NULL);
        db_leave(s->db);
    }
    s->txn_depth = 0;
    s->db = NULL;
    s->db_broken = 1;
    s->db_lost = 1;
    s->st.write_errors++;
}

void cs_db_lost_cleanup(ckpt_store *s) {
    if (!s->db_lost) return;
    s->db_lost = 0;
    for (int i = 0; i < (1 << CS_HBITS); i++)
        for (cs_page *p = s->table[i]; p; p = p->hnext) p->disk_refs = 0, p->on_disk = 0;
    for (int i = 0; i < s->n_e;) {
        cs_entry *e = s->e[i];
        e->on_disk = 0;
        if (!e->in_ram) {
            cs_page *last = e->last;
            cs_entry_free(s, e);
            cs_page_maybe_free(s, last);
            continue;
        }
        i++;
    }
    s->disk_bytes = 0;
}

int cs_sql_begin(ckpt_store *s) {
    if (!s->db) return -1;
    if (s->txn_depth++ > 0) return 0;
    db_enter(s->db);
    if (sqlite3_exec(sql(s), "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
        db_leave(s->db);
        s->txn_depth = 0;
        cs_sql_failed(s, "cannot begin a transaction");
        return -1;
    }
    return 0;
}

int cs_sql_end(ckpt_store *s, int ok) {
    if (!s->db || s->txn_depth == 0) return -1;
    if (--s->txn_depth > 0) return 0;
    int rc = 0;
    if (!ok || sqlite3_exec(sql(s), "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        sqlite3_exec(sql(s), "ROLLBACK", NULL, NULL, NULL);
        rc = -1;
    }
    db_leave(s->db);
    return rc;
}

static sqlite3_stmt *prep(ckpt_store *s, const char *text) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(sql(s), text, -1, &st, NULL) != SQLITE_OK) return NULL;
    return st;
}

static int exec_stmt(sqlite3_stmt *st) {
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : -1;
}

/* ------------------------------------------------------------------ open and load */

static int model_row(ckpt_store *s) {
    sqlite3_stmt *st = prep(s, "SELECT id, row_bytes, rec_bytes, logits_bytes FROM ckpt_models WHERE fingerprint=?");
    if (!st) return -1;
    sqlite3_bind_blob(st, 1, s->fp, (int)s->m.fp_len, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        s->model_id = sqlite3_column_int64(st, 0);
        /* the same fingerprint with other sizes: a different build of the state layout */
        int same = (size_t)sqlite3_column_int64(st, 1) == s->m.row_bytes &&
                   (size_t)sqlite3_column_int64(st, 2) == s->m.rec_bytes &&
                   (size_t)sqlite3_column_int64(st, 3) == s->m.logits_bytes;
        sqlite3_finalize(st);
        if (!same) {
            sqlite3_stmt *d[3] = {prep(s, "DELETE FROM ckpt_entries WHERE model=?"),
                                  prep(s, "DELETE FROM ckpt_pages WHERE model=?"),
                                  prep(s, "UPDATE ckpt_models SET row_bytes=?2, rec_bytes=?3, logits_bytes=?4 WHERE id=?1")};
            for (int i = 0; i < 3; i++) {
                if (!d[i]) return -1;
                sqlite3_bind_int64(d[i], 1, s->model_id);
                if (i == 2) {
                    sqlite3_bind_int64(d[i], 2, (sqlite3_int64)s->m.row_bytes);
                    sqlite3_bind_int64(d[i], 3, (sqlite3_int64)s->m.rec_bytes);
                    sqlite3_bind_int64(d[i], 4, (sqlite3_int64)s->m.logits_bytes);
                }
                if (exec_stmt(d[i]) != 0) return -1;
            }
        }
    } else {
        sqlite3_finalize(st);
        if (rc != SQLITE_DONE) return -1;
        st = prep(s, "INSERT INTO ckpt_models(fingerprint, name, row_bytes, rec_bytes, logits_bytes, created)"
                     " VALUES(?, ?, ?, ?, ?, ?)");
        if (!st) return -1;
        sqlite3_bind_blob(st, 1, s->fp, (int)s->m.fp_len, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, s->name, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, (sqlite3_int64)s->m.row_bytes);
        sqlite3_bind_int64(st, 4, (sqlite3_int64)s->m.rec_bytes);
        sqlite3_bind_int64(st, 5, (sqlite3_int64)s->m.logits_bytes);
        sqlite3_bind_int64(st, 6, (sqlite3_int64)time(NULL));
        if (exec_stmt(st) != 0) return -1;
        s->model_id = sqlite3_last_insert_rowid(sql(s));
    }
    /* a model of the same name with another fingerprint (its weights or tokenizer changed) */
    st = prep(s, "SELECT count(*) FROM ckpt_models m WHERE name=? AND id<>?"
                 " AND EXISTS(SELECT 1 FROM ckpt_entries e WHERE e.model=m.id)");
    if (!st) return -1;
    sqlite3_bind_text(st, 1, s->name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, s->model_id);
    if (sqlite3_step(st) == SQLITE_ROW) s->fp_mismatch = sqlite3_column_int(st, 0) > 0;
    sqlite3_finalize(st);
    return 0;
}

static int delete_page_key(ckpt_store *s, uint64_t key) {
    sqlite3_stmt *st = prep(s, "DELETE FROM ckpt_pages WHERE model=? AND key=?");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, s->model_id);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)key);
    return exec_stmt(st);
}

static int delete_entry_key(ckpt_store *s, uint64_t hash, int n) {
    sqlite3_stmt *st = prep(s, "DELETE FROM ckpt_entries WHERE model=? AND hash=? AND n_tokens=?");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, s->model_id);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)hash);
    sqlite3_bind_int(st, 3, n);
    return exec_stmt(st);
}

#define MAX_PAGE_TOKENS (1 << 16)
#define MAX_POS (1 << 24)

static int load_pages(ckpt_store *s) {
    sqlite3_stmt *st = prep(s, "SELECT key, parent, pos0, n_tokens, checksum, tokens, bytes FROM ckpt_pages"
                               " WHERE model=? ORDER BY pos0");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, s->model_id);
    uint64_t *bad = NULL;
    int n_bad = 0, cap_bad = 0, rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        uint64_t key = (uint64_t)sqlite3_column_int64(st, 0), parent = (uint64_t)sqlite3_column_int64(st, 1);
        sqlite3_int64 pos0 = sqlite3_column_int64(st, 2), n = sqlite3_column_int64(st, 3);
        const int *tok = sqlite3_column_blob(st, 5);
        int tok_len = sqlite3_column_bytes(st, 5);
        sqlite3_int64 bytes = sqlite3_column_int64(st, 6);
        int ok = n > 0 && n <= MAX_PAGE_TOKENS && pos0 >= 0 && pos0 < MAX_POS && tok &&
                 (sqlite3_int64)tok_len == n * (sqlite3_int64)sizeof(int) &&
                 bytes == n * (sqlite3_int64)s->m.row_bytes && !cs_page_find(s, key);
        if (ok) {
            cs_page *par = parent == s->seed && pos0 == 0 ? NULL : cs_page_find(s, parent);
            ok = (pos0 == 0 && parent == s->seed) || (par && par->pos0 + par->n == pos0);
        }
        if (ok) { /* the key must be the chain hash of the parent and these tokens */
            int *tcopy = malloc((size_t)tok_len);
            if (!tcopy) break;
            memcpy(tcopy, tok, (size_t)tok_len); /* the blob may be unaligned */
            uint64_t h = parent;
            for (int i = 0; i < n; i++) h = token_chain(h, tcopy[i]);
            if (h == key) {
                cs_page *p = cs_page_add(s, key, parent, (int)pos0, (int)n, tcopy);
                if (p) {
                    p->checksum = (uint64_t)sqlite3_column_int64(st, 4);
                    p->on_disk = 1;
                }
            } else {
                ok = 0;
            }
            free(tcopy);
        }
        if (!ok) {
            if (n_bad == cap_bad) {
                cap_bad = cap_bad ? 2 * cap_bad : 16;
                uint64_t *b = realloc(bad, sizeof *b * (size_t)cap_bad);
                if (!b) break;
                bad = b;
            }
            bad[n_bad++] = key;
        }
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
        free(bad);
        return -1;
    }
    for (int i = 0; i < n_bad; i++) {
        if (!cs_page_find(s, bad[i]) && delete_page_key(s, bad[i]) != 0) {
            free(bad);
            return -1;
        }
        s->st.corrupt_dropped++;
    }
    free(bad);
    return 0;
}

static int load_entries(ckpt_store *s) {
    sqlite3_stmt *st = prep(s, "SELECT hash, n_tokens, last_page, kind, session, last_used, has_logits,"
                               " length(rec), length(logits), bytes FROM ckpt_entries WHERE model=?");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, s->model_id);
    struct bad { uint64_t h; int n; } *bad = NULL;
    int n_bad = 0, cap_bad = 0, rc;
    uint64_t max_used = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        uint64_t hash = (uint64_t)sqlite3_column_int64(st, 0);
        sqlite3_int64 n = sqlite3_column_int64(st, 1);
        cs_page *last = cs_page_find(s, (uint64_t)sqlite3_column_int64(st, 2));
        int has_logits = sqlite3_column_int(st, 6);
        sqlite3_int64 rec_len = sqlite3_column_int64(st, 7), lg_len = sqlite3_column_int64(st, 8);
        sqlite3_int64 used = sqlite3_column_int64(st, 5), bytes = sqlite3_column_int64(st, 9);
        int ok = last && n > last->pos0 && n <= last->pos0 + last->n && (has_logits == 0 || has_logits == 1) &&
                 rec_len == (sqlite3_int64)s->m.rec_bytes &&
                 lg_len == (has_logits ? (sqlite3_int64)s->m.logits_bytes : 0) && used >= 0 &&
                 bytes == (sqlite3_int64)(s->m.rec_bytes + (has_logits ? s->m.logits_bytes : 0));
        if (ok) { /* the hash must be the chain through the last page's first n - pos0 tokens */
            uint64_t h = last->parent_key;
            for (int i = 0; i < n - last->pos0; i++) h = token_chain(h, last->tokens[i]);
            ok = h == hash;
        }
        if (ok) {
            const unsigned char *sess = sqlite3_column_text(st, 4);
            cs_entry *e = cs_entry_add(s, hash, (int)n, last, sqlite3_column_int(st, 3), (const char *)sess);
            if (!e) break;
            e->has_logits = has_logits;
            e->on_disk = 1;
            e->last_used = (uint64_t)used;
            if ((uint64_t)used > max_used) max_used = (uint64_t)used;
            s->disk_bytes += cs_entry_own_bytes(s, e);
            for (cs_page *p = last; p; p = p->parent) p->disk_refs++;
        } else {
            if (n_bad == cap_bad) {
                cap_bad = cap_bad ? 2 * cap_bad : 16;
                struct bad *b = realloc(bad, sizeof *b * (size_t)cap_bad);
                if (!b) break;
                bad = b;
            }
            bad[n_bad].h = hash;
            bad[n_bad++].n = (int)n;
        }
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
        free(bad);
        return -1;
    }
    if (max_used > s->clock) s->clock = max_used;
    for (int i = 0; i < n_bad; i++) {
        if (delete_entry_key(s, bad[i].h, bad[i].n) != 0) {
            free(bad);
            return -1;
        }
        s->st.corrupt_dropped++;
    }
    free(bad);
    /* pages no checkpoint uses (left by dropped rows) go; the rest count as stored */
    for (int i = 0; i < (1 << CS_HBITS); i++)
        for (cs_page *p = s->table[i]; p; p = p->hnext)
            if (p->disk_refs > 0) s->disk_bytes += cs_page_bytes(s, p);
    for (int again = 1; again;) {
        again = 0;
        for (int i = 0; i < (1 << CS_HBITS) && !again; i++)
            for (cs_page *p = s->table[i]; p; p = p->hnext)
                if (p->disk_refs == 0 && !p->child) {
                    if (delete_page_key(s, p->key) != 0) return -1;
                    p->on_disk = 0;
                    cs_page_maybe_free(s, p);
                    again = 1;
                    break;
                }
    }
    return 0;
}

int cs_sql_migrate(ckpt_store *s, char *err, size_t errlen) {
    char e[256];
    if (db_migrate(s->db, "checkpoints", migrations, (int)(sizeof migrations / sizeof migrations[0]), e, sizeof e) == 0)
        return 0;
    if (strstr(e, "newer than")) {
        snprintf(err, errlen, "%s", e);
        return -1;
    }
    snprintf(err, errlen, "checkpoint database unusable (%s); checkpoints stay in RAM", e);
    s->db = NULL;
    s->db_broken = 1;
    return 0;
}

int cs_sql_open(ckpt_store *s, char *err, size_t errlen) {
    if (cs_sql_begin(s) != 0 || model_row(s) != 0 || load_pages(s) != 0 || load_entries(s) != 0) {
        snprintf(err, errlen, "checkpoint database unreadable (%s); checkpoints stay in RAM",
                 s->db ? sqlite3_errmsg(sql(s)) : "cannot begin");
        if (s->db) cs_sql_end(s, 0);
        /* forget whatever was half loaded */
        for (int i = s->n_e - 1; i >= 0; i--) cs_entry_free(s, s->e[i]);
        for (int i = 0; i < (1 << CS_HBITS); i++) {
            for (cs_page *p = s->table[i], *nx; p; p = nx) {
                nx = p->hnext;
                free(p->kv);
                free(p->tokens);
                free(p);
            }
            s->table[i] = NULL;
        }
        s->roots = NULL;
        s->disk_bytes = 0;
        s->db = NULL;
        s->db_broken = 1;
        return -1;
    }
    cs_sql_end(s, 1);
    return 0;
}

/* ------------------------------------------------------------------ write */

/* Test hook: CHATFS_TEST_CKPT_PAUSE_MS makes the writer sleep inside its transaction
 * (after the first row), so a test can kill -9 the process mid-write. */
static void test_pause(void) {
    const char *v = getenv("CHATFS_TEST_CKPT_PAUSE_MS");
    if (!v || !*v) return;
    fprintf(stderr, "chatfs: test pause inside a checkpoint write\n");
    fflush(stderr);
    usleep((useconds_t)atol(v) * 1000);
}

static int write_page(ckpt_store *s, sqlite3_stmt *st, cs_page *p) {
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, s->model_id);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)p->key);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)p->parent_key);
    sqlite3_bind_int(st, 4, p->pos0);
    sqlite3_bind_int(st, 5, p->n);
    sqlite3_bind_int64(st, 6, (sqlite3_int64)cs_page_bytes(s, p));
    p->checksum = cs_page_checksum(s, p, p->kv);
    sqlite3_bind_int64(st, 7, (sqlite3_int64)p->checksum);
    sqlite3_bind_blob(st, 8, p->tokens, (int)(sizeof(int) * (size_t)p->n), SQLITE_STATIC);
    sqlite3_bind_blob64(st, 9, p->kv, cs_page_bytes(s, p), SQLITE_STATIC);
    return sqlite3_step(st) == SQLITE_DONE ? 0 : -1;
}

static int write_entry(ckpt_store *s, sqlite3_stmt *st, cs_entry *e) {
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, s->model_id);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)e->hash);
    sqlite3_bind_int(st, 3, e->n);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)e->last->key);
    sqlite3_bind_int(st, 5, e->kind);
    if (e->session) sqlite3_bind_text(st, 6, e->session, -1, SQLITE_STATIC);
    else sqlite3_bind_null(st, 6);
    sqlite3_bind_int64(st, 7, (sqlite3_int64)e->last_used);
    sqlite3_bind_int(st, 8, e->has_logits);
    sqlite3_bind_int64(st, 9, (sqlite3_int64)cs_entry_own_bytes(s, e));
    sqlite3_bind_int64(st, 10, (sqlite3_int64)cs_entry_checksum(s, e, e->rec, e->logits));
    if (s->m.rec_bytes) sqlite3_bind_blob64(st, 11, e->rec, s->m.rec_bytes, SQLITE_STATIC);
    else sqlite3_bind_zeroblob(st, 11, 0);
    if (e->has_logits) sqlite3_bind_blob64(st, 12, e->logits, s->m.logits_bytes, SQLITE_STATIC);
    else sqlite3_bind_null(st, 12);
    return sqlite3_step(st) == SQLITE_DONE ? 0 : -1;
}

/* what a flush writes: a checkpoint only in RAM, or a newer recency of one on disk */
static int to_write(const cs_entry *e) { return (e->in_ram && e->dirty) || (e->on_disk && e->touched); }

int cs_sql_flush(ckpt_store *s, int (*stop)(void *ud), void *ud) {
    if (!s->db) return -1;
    int any = 0;
    for (int i = 0; i < s->n_e; i++) any |= to_write(s->e[i]);
    if (!any) return 0;
    if (cs_sql_begin(s) != 0) return -1;
    sqlite3_stmt *pst = prep(s, "INSERT OR REPLACE INTO ckpt_pages(model, key, parent, pos0, n_tokens, bytes, checksum,"
                                " tokens, kv) VALUES(?,?,?,?,?,?,?,?,?)");
    sqlite3_stmt *est = prep(s, "INSERT OR REPLACE INTO ckpt_entries(model, hash, n_tokens, last_page, kind, session,"
                                " last_used, has_logits, bytes, checksum, rec, logits) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)");
    sqlite3_stmt *ust = prep(s, "UPDATE ckpt_entries SET last_used=? WHERE model=? AND hash=? AND n_tokens=?");
    int ok = pst && est && ust, paused = 0;
    /* entries [0, done) are in this transaction, each with the pages it needs, so that
     * what a stop commits never leaves a page without its checkpoint */
    int done = 0;
    /* pages being written are marked 2 until the commit */
    for (int i = 0; ok && i < s->n_e; i++) {
        cs_entry *e = s->e[i];
        int wrote = 0;
        if (e->in_ram && e->dirty) {
            for (cs_page *p = e->last; ok && p; p = p->parent) {
                if (p->on_disk) continue;
                ok = p->kv && write_page(s, pst, p) == 0;
                p->on_disk = 2;
                if (ok && !paused) paused = 1, test_pause();
            }
            ok = ok && write_entry(s, est, e) == 0;
            wrote = 1;
        } else if (e->on_disk && e->touched) {
            sqlite3_reset(ust);
            sqlite3_bind_int64(ust, 1, (sqlite3_int64)e->last_used);
            sqlite3_bind_int64(ust, 2, s->model_id);
            sqlite3_bind_int64(ust, 3, (sqlite3_int64)e->hash);
            sqlite3_bind_int(ust, 4, e->n);
            ok = sqlite3_step(ust) == SQLITE_DONE;
        }
        done = i + 1;
        if (ok && wrote && stop && stop(ud)) break;
    }
    sqlite3_finalize(pst);
    sqlite3_finalize(est);
    sqlite3_finalize(ust);
    int committed = cs_sql_end(s, ok) == 0 && ok;
    for (int i = 0; i < (1 << CS_HBITS); i++)
        for (cs_page *p = s->table[i]; p; p = p->hnext)
            if (p->on_disk == 2) p->on_disk = committed ? 1 : 0;
    if (!committed) return -1;
    for (int i = 0; i < done; i++) {
        cs_entry *e = s->e[i];
        e->touched = 0;
        if (!(e->in_ram && e->dirty)) continue;
        e->dirty = 0;
        if (e->on_disk) continue;
        e->on_disk = 1;
        s->disk_bytes += cs_entry_own_bytes(s, e);
        for (cs_page *p = e->last; p; p = p->parent)
            if (p->disk_refs++ == 0) s->disk_bytes += cs_page_bytes(s, p);
    }
    for (int i = done; i < s->n_e; i++)
        if (to_write(s->e[i])) return 1;
    return 0;
}

/* ------------------------------------------------------------------ read, delete */

int cs_sql_read_page(ckpt_store *s, cs_page *p, int (*use)(void *ud, const void *kv), void *ud) {
    db_enter(s->db);
    sqlite3_stmt *st = prep(s, "SELECT tokens, kv, checksum FROM ckpt_pages WHERE model=? AND key=?");
    if (!st) {
        db_leave(s->db);
        return -1;
    }
    sqlite3_bind_int64(st, 1, s->model_id);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)p->key);
    int rc = -1;
    if (sqlite3_step(st) == SQLITE_ROW) {
        const void *tok = sqlite3_column_blob(st, 0);
        size_t tok_len = (size_t)sqlite3_column_bytes(st, 0);
        const void *kv = sqlite3_column_blob(st, 1);
        size_t kv_len = (size_t)sqlite3_column_bytes(st, 1);
        uint64_t sum = (uint64_t)sqlite3_column_int64(st, 2);
        size_t want = cs_page_bytes(s, p);
        if (tok && tok_len == sizeof(int) * (size_t)p->n && !memcmp(tok, p->tokens, tok_len) && kv_len == want &&
            (kv || want == 0) && sum == p->checksum && cs_page_checksum(s, p, kv) == sum) {
            static const char empty[1]; /* a model without a KV cache stores empty pages, which SQLite
                                         * returns as NULL: callers copy 0 bytes from a real address */
            rc = use(ud, kv ? kv : empty);
        }
    }
    sqlite3_finalize(st);
    db_leave(s->db);
    return rc;
}

int cs_sql_read_entry(ckpt_store *s, cs_entry *e, void *rec_out, void *logits_out) {
    db_enter(s->db);
    sqlite3_stmt *st = prep(s, "SELECT rec, logits, checksum, last_page FROM ckpt_entries WHERE model=? AND hash=?"
                               " AND n_tokens=?");
    if (!st) {
        db_leave(s->db);
        return -1;
    }
    sqlite3_bind_int64(st, 1, s->model_id);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)e->hash);
    sqlite3_bind_int(st, 3, e->n);
    int ok = 0;
    if (sqlite3_step(st) == SQLITE_ROW) {
        const void *rec = sqlite3_column_blob(st, 0), *lg = sqlite3_column_blob(st, 1);
        size_t rec_len = (size_t)sqlite3_column_bytes(st, 0), lg_len = (size_t)sqlite3_column_bytes(st, 1);
        uint64_t sum = (uint64_t)sqlite3_column_int64(st, 2);
        ok = rec_len == s->m.rec_bytes && (rec || !rec_len) &&
             lg_len == (e->has_logits ? s->m.logits_bytes : 0) && (lg || !lg_len) &&
             (uint64_t)sqlite3_column_int64(st, 3) == e->last->key;
        if (ok) {
            if (rec_len) memcpy(rec_out, rec, rec_len);
            if (lg_len) memcpy(logits_out, lg, lg_len);
            ok = cs_entry_checksum(s, e, rec_out, logits_out) == sum;
        }
    }
    sqlite3_finalize(st);
    db_leave(s->db);
    return ok ? 0 : -1;
}

int cs_sql_delete_entry(ckpt_store *s, const cs_entry *e) {
    if (!s->db) return -1;
    db_enter(s->db);
    int rc = delete_entry_key(s, e->hash, e->n);
    db_leave(s->db);
    if (rc != 0) cs_sql_failed(s, "cannot delete a checkpoint");
    return rc;
}

int cs_sql_delete_page(ckpt_store *s, const cs_page *p) {
    if (!s->db) return -1;
    db_enter(s->db);
    int rc = delete_page_key(s, p->key);
    db_leave(s->db);
    if (rc != 0) cs_sql_failed(s, "cannot delete a page");
    return rc;
}
