/* test_ckpt_store.c - the checkpoint store on its own (store/ckpt_store.h), with a fake
 * model whose state is a known function of the token prefix, so every restored byte
 * can be checked: sharing of KV pages, partial pages, RAM and database tiers, reopen,
 * checksums and corrupt rows, budgets and eviction, pins, trimmable models, miss
 * reasons, schema versions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/ckpt_store.h"
#include "store/db.h"
#include "engine/base/hash.h"
#include "tests/check.h"

#define ROW 8   /* floats of KV per token */
#define REC 16  /* floats of recurrent state */
#define VOC 4   /* floats of logits */

/* the fake state: row p depends on t[0..p], the recurrent blob on t[0..n) */
static float row_val(uint64_t h, int j) { return (float)((h >> ((j * 7) % 48)) & 0xffff) + 0.5f * (float)j; }

typedef struct {
    const uint64_t *h; /* chain of the sequence whose state this is */
    int bad_rows;      /* restore: rows that differ from the expected */
    int rows_seen;
} fake;

static void get_rows(void *ud, int pos0, int rows, void *dst) {
    fake *f = ud;
    float *o = dst;
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < ROW; j++) *o++ = row_val(f->h[pos0 + r + 1], j);
}

static int put_rows(void *ud, int pos0, int rows, const void *src) {
    fake *f = ud;
    const float *p = src;
    for (int r = 0; r < rows; r++, f->rows_seen++)
        for (int j = 0; j < ROW; j++)
            if (*p++ != row_val(f->h[pos0 + r + 1], j)) {
                f->bad_rows++;
                p += ROW - j - 1;
                break;
            }
    return 0;
}

static void make_rec(const uint64_t *h, int n, float *rec, float *lg) {
    for (int j = 0; j < REC; j++) rec[j] = row_val(h[n] ^ 0x5555, j);
    for (int j = 0; j < VOC; j++) lg[j] = row_val(h[n] ^ 0xaaaa, j);
}

static const uint8_t FP1[16] = "fingerprint-one", FP2[16] = "fingerprint-two";

static ckpt_store *open_store(store_db *db, const uint8_t *fp, int trimmable, size_t ram, size_t disk) {
    cs_model m = {fp, 16, "fake/model", ROW * sizeof(float), trimmable ? 0 : REC * sizeof(float),
                  VOC * sizeof(float), trimmable};
    cs_config c = {ram ? ram : CS_DEFAULT_RAM_BUDGET, disk ? disk : CS_DEFAULT_DISK_BUDGET, 256}; /* 0: the default */
    char err[256];
    ckpt_store *s = cs_open(db, &m, &c, err, sizeof err);
    REQUIRE(s, "cs_open: %s", err);
    return s;
}

/* a token sequence: seq k shares its first `share` tokens with seq 0 */
static void make_tokens(int *t, int n, int k, int share) {
    for (int i = 0; i < n; i++) t[i] = i < share ? (i * 7919) % 1000 : (i * 31 + k * 977) % 1000 + 1000;
}

static int save_kind(ckpt_store *s, const int *t, int n, int with_logits, const char *session, int kind) {
    uint64_t *h = malloc(sizeof *h * ((size_t)n + 1));
    token_chain_all(cs_seed(s), t, n, h);
    float rec[REC], lg[VOC];
    make_rec(h, n, rec, lg);
    fake f = {h, 0, 0};
    int rc = cs_save(s, t, h, n, get_rows, &f, rec, with_logits ? lg : NULL, kind, session);
    free(h);
    return rc;
}

static int save_as(ckpt_store *s, const int *t, int n, int with_logits, const char *session) {
    return save_kind(s, t, n, with_logits, session, 'd');
}

static int save(ckpt_store *s, const int *t, int n, int with_logits) { return save_as(s, t, n, with_logits, "sess"); }

/* restores for prompt t[0..n); checks every byte; returns the restored length */
static int restore(ckpt_store *s, const int *t, int n, int want_logits, cs_hit *hit) {
    uint64_t *h = malloc(sizeof *h * ((size_t)n + 1));
    token_chain_all(cs_seed(s), t, n, h);
    float rec[REC], lg[VOC], er[REC], el[VOC];
    fake f = {h, 0, 0};
    int k = cs_restore(s, t, h, n, put_rows, &f, rec, want_logits ? lg : NULL, hit);
    if (k > 0) {
        make_rec(h, k, er, el);
        CHECK(f.bad_rows == 0, "%d restored rows differ", f.bad_rows);
        CHECK(f.rows_seen >= k, "only %d of %d rows restored", f.rows_seen, k);
        int trim = 0;
        for (int j = 0; j < REC && !trim; j++) trim = rec[j] != er[j];
        cs_stats st;
        cs_get_stats(s, &st);
        if (hit->entry) CHECK(!trim, "restored recurrent state differs");
        if (hit->has_logits) CHECK(!memcmp(lg, el, sizeof lg), "restored logits differ");
    }
    cs_release(s, hit);
    free(h);
    return k;
}

static void basics_and_sharing(void) {
    ckpt_store *s = open_store(NULL, FP1, 0, 0, 0);
    int t[2000], u[2000];
    make_tokens(t, 2000, 0, 2000);
    cs_hit hit;
    CHECK(restore(s, t, 500, 0, &hit) == 0 && !strcmp(hit.miss_reason, "none stored"), "empty store: %s",
          hit.miss_reason);
    CHECK(save(s, t, 300, 0) == 1, "save 300");
    CHECK(save(s, t, 310, 0) == 1, "save 310");
    CHECK(save(s, t, 600, 0) == 1, "save 600");
    CHECK(save(s, t, 600, 0) == 0, "saving twice stores once");
    CHECK(restore(s, t, 1000, 0, &hit) == 600 && !strcmp(hit.source, "ram"), "longest prefix: %d", hit.n);
    CHECK(restore(s, t, 599, 0, &hit) == 310, "shorter prompt: %d", hit.n);
    CHECK(restore(s, t, 600, 0, &hit) == 310, "a checkpoint at the prompt's end needs logits: %d", hit.n);
    CHECK(restore(s, t, 305, 0, &hit) == 300, "between: %d", hit.n);
    cs_stats st;
    cs_get_stats(s, &st);
    CHECK(st.bytes_ram == 600 * ROW * 4 + 3 * REC * 4, "600 tokens of KV stored once: %llu bytes",
          (unsigned long long)st.bytes_ram);
    /* a checkpoint inside an existing page reuses it */
    CHECK(save(s, t, 450, 0) == 1, "save 450");
    cs_get_stats(s, &st);
    CHECK(st.bytes_ram == 600 * ROW * 4 + 4 * REC * 4, "a checkpoint inside a page adds no KV: %llu",
          (unsigned long long)st.bytes_ram);
    CHECK(restore(s, t, 451, 0, &hit) == 450, "inside a page: %d", hit.n);
    /* a fork at 280: shares the first page only */
    make_tokens(u, 2000, 1, 280);
    CHECK(restore(s, u, 1000, 0, &hit) == 0 && !strcmp(hit.miss_reason, "diverged at position 280"),
          "fork before any checkpoint: %s", hit.miss_reason);
    CHECK(save(s, u, 500, 0) == 1, "save fork");
    cs_get_stats(s, &st);
    CHECK(st.bytes_ram == (600 + 244) * ROW * 4 + 5 * REC * 4, "fork shares [0,256): %llu",
          (unsigned long long)st.bytes_ram);
    CHECK(restore(s, u, 900, 0, &hit) == 500, "fork restores: %d", hit.n);
    CHECK(restore(s, t, 900, 0, &hit) == 600, "original still restores: %d", hit.n);
    /* logits at the end of a prompt */
    CHECK(save(s, t, 700, 1) == 1, "save with logits");
    CHECK(restore(s, t, 700, 1, &hit) == 700 && hit.has_logits, "whole prompt with logits: %d", hit.n);
    CHECK(restore(s, t, 700, 0, &hit) == 600, "no logits wanted: %d", hit.n);
    char *js = cs_stats_json(s);
    REQUIRE(js, "stats json");
    CHECK(strstr(js, "\"hits\":") && strstr(js, "\"diverged\":1"), "stats json: %s", js);
    cs_get_stats(s, &st);
    double rate = -1;
    const char *r = strstr(js, "\"hit_rate\":");
    if (r) sscanf(r + 11, "%lf", &rate);
    CHECK(st.hits > 0 && st.misses > 0 && fabs(rate - (double)st.hits / (double)(st.hits + st.misses)) < 1e-6,
          "hit_rate %g of %llu hits, %llu misses", rate, (unsigned long long)st.hits, (unsigned long long)st.misses);
    CHECK(strstr(js, "\"token_reuse_rate\":"), "token_reuse_rate");
    free(js);
    cs_close(s);
}

static char DB[600]; /* beside the test binary: one per build */

static void fresh_db(void) {
    char p[640];
    unlink(DB);
    snprintf(p, sizeof p, "%s-wal", DB);
    unlink(p);
    snprintf(p, sizeof p, "%s-shm", DB);
    unlink(p);
}

static store_db *opendb(void) {
    char err[256];
    store_db *db = db_open(DB, err, sizeof err);
    REQUIRE(db, "%s", err);
    return db;
}

/* a fresh database, and checkpoints at 1000, 2000 and 2500 (with logits) of t, in RAM */
static ckpt_store *three_in_ram(int *t, store_db **db) {
    fresh_db();
    make_tokens(t, 3000, 0, 3000);
    *db = opendb();
    ckpt_store *s = open_store(*db, FP1, 0, 0, 0);
    save(s, t, 1000, 0);
    save(s, t, 2000, 0);
    save(s, t, 2500, 1);
    return s;
}

static void persistence(void) {
    int t[3000];
    store_db *db;
    ckpt_store *s = three_in_ram(t, &db);
    CHECK(cs_flush(s) == 0, "flush");
    cs_stats st;
    cs_get_stats(s, &st);
    CHECK(st.entries_disk == 3 && st.kv_bytes_disk == 2500 * ROW * 4, "on disk: %llu entries, %llu KV bytes",
          (unsigned long long)st.entries_disk, (unsigned long long)st.kv_bytes_disk);
    cs_close(s);
    db_close(db);

    db = opendb();
    s = open_store(db, FP1, 0, 0, 0);
    cs_hit hit;
    CHECK(restore(s, t, 2200, 0, &hit) == 2000 && !strcmp(hit.source, "disk"), "after reopen: %d from %s", hit.n,
          hit.source);
    CHECK(restore(s, t, 2200, 0, &hit) == 2000 && !strcmp(hit.source, "ram"), "promoted to RAM: %s", hit.source);
    CHECK(restore(s, t, 2500, 1, &hit) == 2500 && hit.has_logits && !strcmp(hit.source, "disk"),
          "logits from disk: %d", hit.n);
    /* another model never sees these */
    ckpt_store *o = open_store(db, FP2, 0, 0, 0);
    CHECK(restore(o, t, 2200, 0, &hit) == 0 && !strcmp(hit.miss_reason, "fingerprint mismatch"),
          "another fingerprint of the same name: %s", hit.miss_reason);
    cs_close(o);
    cs_close(s);
    db_close(db);
}

static int stop_always(void *calls) {
    ++*(int *)calls;
    return 1;
}

/* A flush that a waiting request stops commits whole checkpoints (each with its pages)
 * and leaves the rest for the next one: another connection sees exactly those. */
static void flush_in_steps(void) {
    int t[3000];
    store_db *db;
    ckpt_store *s = three_in_ram(t, &db);
    int calls = 0;
    CHECK(cs_flush_until(s, stop_always, &calls) == 1 && calls == 1, "stopped after one checkpoint (%d calls)", calls);
    cs_stats st;
    cs_get_stats(s, &st);
    CHECK(st.entries_disk == 1 && st.entries_pending == 2 && st.kv_bytes_disk == 1000 * ROW * 4,
          "one written: %llu on disk, %llu pending, %llu KV bytes", (unsigned long long)st.entries_disk,
          (unsigned long long)st.entries_pending, (unsigned long long)st.kv_bytes_disk);
    store_db *db2 = opendb();
    ckpt_store *o = open_store(db2, FP1, 0, 0, 0);
    cs_hit hit;
    CHECK(restore(o, t, 2200, 0, &hit) == 1000 && !strcmp(hit.source, "disk"), "another reader sees 1000: %d from %s",
          hit.n, hit.source);
    cs_close(o);
    db_close(db2);
    CHECK(cs_flush_until(s, stop_always, &calls) == 1, "the second");
    CHECK(cs_flush_until(s, NULL, NULL) == 0, "the rest");
    cs_get_stats(s, &st);
    CHECK(st.entries_disk == 3 && st.entries_pending == 0 && st.kv_bytes_disk == 2500 * ROW * 4,
          "all written: %llu on disk, %llu pending", (unsigned long long)st.entries_disk,
          (unsigned long long)st.entries_pending);
    CHECK(cs_flush_until(s, stop_always, &calls) == 0, "nothing left to write");
    db2 = opendb();
    o = open_store(db2, FP1, 0, 0, 0);
    CHECK(restore(o, t, 2500, 1, &hit) == 2500 && hit.has_logits, "another reader sees 2500 with logits: %d", hit.n);
    cs_close(o);
    db_close(db2);
    cs_close(s);
    db_close(db);
}

/* flips one byte inside column col of the first row of table matching where */
static void flip(store_db *sdb, const char *table, const char *col, const char *where, int offset) {
    sqlite3 *db = db_sql(sdb);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT rowid FROM %s WHERE %s", table, where);
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    REQUIRE(rc == SQLITE_OK, "%s", sqlite3_errmsg(db));
    rc = sqlite3_step(st);
    REQUIRE(rc == SQLITE_ROW, "no row for %s", sql);
    sqlite3_int64 rowid = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_blob *b;
    rc = sqlite3_blob_open(db, "main", table, col, rowid, 1, &b);
    REQUIRE(rc == SQLITE_OK, "%s", sqlite3_errmsg(db));
    unsigned char c;
    sqlite3_blob_read(b, &c, 1, offset);
    c ^= 0x10;
    sqlite3_blob_write(b, &c, 1, offset);
    sqlite3_blob_close(b);
}

static void corruption(void) {
    fresh_db();
    int t[3000];
    make_tokens(t, 3000, 0, 3000);
    store_db *db = opendb();
    ckpt_store *s = open_store(db, FP1, 0, 0, 0);
    save(s, t, 1000, 0);
    save(s, t, 2000, 0);
    cs_flush(s);
    cs_close(s);
    /* a flipped byte in the KV of a page only the longer checkpoint uses */
    flip(db, "ckpt_pages", "kv", "pos0=1792", 100);
    s = open_store(db, FP1, 0, 0, 0);
    cs_hit hit;
    CHECK(restore(s, t, 2500, 0, &hit) == 1000 && !strcmp(hit.source, "disk"), "bad page: fell back to %d", hit.n);
    cs_stats st;
    cs_get_stats(s, &st);
    CHECK(st.corrupt_dropped == 1 && st.entries_disk == 1, "dropped %llu, %llu left",
          (unsigned long long)st.corrupt_dropped, (unsigned long long)st.entries_disk);
    CHECK(restore(s, t, 2500, 0, &hit) == 1000, "again: %d", hit.n);
    cs_close(s);
    /* a flipped byte in the recurrent blob of the last one */
    flip(db, "ckpt_entries", "rec", "n_tokens=1000", 3);
    s = open_store(db, FP1, 0, 0, 0);
    CHECK(restore(s, t, 2500, 0, &hit) == 0 && !strcmp(hit.miss_reason, "corrupt"), "bad state: %d, %s", hit.n,
          hit.miss_reason);
    cs_close(s);
    /* rows whose lengths or tokens are wrong are dropped when loading */
    s = open_store(db, FP1, 0, 0, 0);
    save(s, t, 1500, 0);
    save(s, t, 2400, 0);
    cs_close(s);
    flip(db, "ckpt_pages", "tokens", "pos0=512", 0);
    CHECK(sqlite3_exec(db_sql(db), "UPDATE ckpt_entries SET n_tokens=999999 WHERE n_tokens=2400", NULL, NULL, NULL) ==
              SQLITE_OK, "update");
    s = open_store(db, FP1, 0, 0, 0);
    cs_get_stats(s, &st);
    CHECK(st.entries_disk == 0 && st.corrupt_dropped >= 2, "bad rows loaded: %llu entries, %llu dropped",
          (unsigned long long)st.entries_disk, (unsigned long long)st.corrupt_dropped);
    CHECK(restore(s, t, 2500, 0, &hit) == 0, "nothing usable is left: %d", hit.n);
    cs_close(s);
    /* a database written by a newer chatfs is refused */
    CHECK(sqlite3_exec(db_sql(db), "UPDATE schema_versions SET version=99 WHERE module='checkpoints'", NULL, NULL, NULL) ==
              SQLITE_OK, "update");
    cs_model m = {FP1, 16, "fake/model", ROW * 4, REC * 4, VOC * 4, 0};
    char err[256] = "";
    CHECK(cs_open(db, &m, NULL, err, sizeof err) == NULL && strstr(err, "newer"), "newer schema: %s", err);
    db_close(db);
}

static void budgets(void) {
    fresh_db();
    store_db *db = opendb();
    /* every checkpoint: own KV page of 256 rows (8 KiB) + 64 bytes of state */
    size_t one = 256 * ROW * 4 + REC * 4;
    ckpt_store *s = open_store(db, FP1, 0, 3 * one + 10, 5 * one + 10);
    int t[10][256];
    for (int k = 0; k < 10; k++) make_tokens(t[k], 256, k + 1, 0);
    cs_hit hit;
    /* pin the first: it must survive RAM pressure */
    save(s, t[0], 256, 0);
    uint64_t h[257];
    token_chain_all(cs_seed(s), t[0], 256, h);
    float rec[REC];
    fake f = {h, 0, 0};
    CHECK(cs_restore(s, t[0], h, 256 + 0, put_rows, &f, rec, NULL, &hit) == 0, "n-1 only");
    for (int k = 1; k < 10; k++) save(s, t[k], 256, 0);
    cs_stats st;
    cs_get_stats(s, &st);
    CHECK(st.bytes_ram <= 3 * one + 10 && st.evictions_ram >= 6, "RAM budget: %llu bytes, %llu evictions",
          (unsigned long long)st.bytes_ram, (unsigned long long)st.evictions_ram);
    CHECK(st.bytes_disk <= 5 * one + 10 && st.evictions_disk >= 2, "disk budget: %llu bytes, %llu evictions",
          (unsigned long long)st.bytes_disk, (unsigned long long)st.evictions_disk);
    /* the most recent ones restore; the oldest are gone with the reason */
    int t9[300], t1[300];
    memcpy(t9, t[9], sizeof t[9]);
    memcpy(t1, t[1], sizeof t[1]);
    t9[256] = t1[256] = 5;
    CHECK(restore(s, t9, 257, 0, &hit) == 256, "recent: %d", hit.n);
    CHECK(restore(s, t1, 257, 0, &hit) == 0 && !strcmp(hit.miss_reason, "evicted"), "old: %s", hit.miss_reason);
    cs_close(s);
    db_close(db);

    /* pinned entries stay in RAM */
    s = open_store(NULL, FP1, 0, 2 * one + 10, 0);
    save(s, t[0], 200, 0);
    int t0[300];
    memcpy(t0, t[0], sizeof t[0]);
    token_chain_all(cs_seed(s), t0, 201, h);
    fake g = {h, 0, 0};
    CHECK(cs_restore(s, t0, h, 201, put_rows, &g, rec, NULL, &hit) == 200 && hit.entry, "restore to pin");
    for (int k = 1; k < 6; k++) save(s, t[k], 256, 0);
    cs_release(s, &hit);
    CHECK(restore(s, t0, 201, 0, &hit) == 200, "the pinned one survived: %d (%s)", hit.n, hit.miss_reason);
    cs_forget_session(s, "sess");
    cs_close(s);
}

/* a budget of 0 is none (chatfs mount --ram-budget 0 / --disk-budget 0) */
static void zero_budgets(void) {
    cs_model m = {FP1, 16, "fake/model", ROW * sizeof(float), REC * sizeof(float), VOC * sizeof(float), 0};
    char err[256];
    int t[600];
    make_tokens(t, 600, 0, 600);
    cs_hit hit;
    cs_stats st;
    /* no RAM: each checkpoint goes to the database at once and leaves RAM */
    fresh_db();
    store_db *db = opendb();
    ckpt_store *s = cs_open(db, &m, &(cs_config){0, CS_DEFAULT_DISK_BUDGET, 256}, err, sizeof err);
    REQUIRE(s, "%s", err);
    CHECK(save(s, t, 300, 0) == 1, "saved with no RAM budget");
    cs_get_stats(s, &st);
    CHECK(st.bytes_ram == 0 && st.entries_disk == 1 && st.entries_pending == 0, "in the database only: %llu in RAM",
          (unsigned long long)st.bytes_ram);
    CHECK(restore(s, t, 400, 0, &hit) == 300 && !strcmp(hit.source, "disk"), "restored from disk: %s", hit.source);
    cs_release(s, &hit);
    cs_close(s);
    /* no disk: the database is not touched */
    s = cs_open(db, &m, &(cs_config){CS_DEFAULT_RAM_BUDGET, 0, 256}, err, sizeof err);
    REQUIRE(s, "%s", err);
    CHECK(!cs_persistent(s) && save(s, t, 500, 0) == 1, "RAM only");
    cs_get_stats(s, &st);
    CHECK(st.entries_disk == 0 && st.entries_ram == 1, "nothing from or to the database: %llu on disk",
          (unsigned long long)st.entries_disk);
    cs_close(s);
    /* neither: no checkpoints at all */
    s = cs_open(db, &m, &(cs_config){0, 0, 256}, err, sizeof err);
    REQUIRE(s, "%s", err);
    CHECK(save(s, t, 300, 0) < 0 && restore(s, t, 400, 0, &hit) == 0, "none kept");
    cs_close(s);
    db_close(db);
}

/* a forgotten session (its conversation was removed) is evicted first, even when its
 * checkpoints are the most recent */
static void forgotten_sessions(void) {
    size_t one = 256 * ROW * 4 + REC * 4;
    ckpt_store *s = open_store(NULL, FP1, 0, 3 * one + 10, 0);
    int t[4][300];
    for (int k = 0; k < 4; k++) make_tokens(t[k], 300, k + 1, 0);
    CHECK(save_as(s, t[0], 256, 0, "kept") == 1 && save_as(s, t[1], 256, 0, "kept") == 1, "two kept");
    CHECK(save_as(s, t[2], 256, 0, "gone") == 1, "one of the removed conversation");
    cs_forget_session(s, "gone");
    CHECK(save_as(s, t[3], 256, 0, "kept") == 1, "over the budget");
    cs_stats st;
    cs_get_stats(s, &st);
    CHECK(st.evictions_ram == 1 && st.entries_ram == 3, "one eviction: %llu, %llu entries",
          (unsigned long long)st.evictions_ram, (unsigned long long)st.entries_ram);
    cs_hit hit;
    for (int k = 0; k < 4; k++) t[k][256] = 5;
    CHECK(restore(s, t[2], 257, 0, &hit) == 0, "the forgotten session's checkpoint went: %d", hit.n);
    CHECK(restore(s, t[0], 257, 0, &hit) == 256, "the oldest of a live session stayed: %d (%s)", hit.n,
          hit.miss_reason);
    cs_close(s);
}

static int has(const ckpt_store *s, const int *t, int n) {
    uint64_t h[1024];
    token_chain_all(cs_seed(s), t, n, h);
    return cs_has(s, h, n);
}

/* cs_retire: a conversation that moved on loses its prompt-end and interval checkpoints
 * on the prefix it moved past, in both tiers, and keeps everything else: other kinds,
 * other sessions (a fork), other branches, the checkpoint at the new start, pinned ones */
static void retired_checkpoints(void) {
    fresh_db();
    store_db *db = opendb();
    ckpt_store *s = open_store(db, FP1, 0, 0, 0);
    int t[700], u[700];
    make_tokens(t, 700, 0, 700);
    make_tokens(u, 700, 1, 300); /* another branch of the same conversation from 300 */
    CHECK(save_kind(s, t, 40, 0, "conv", 'e') == 1 && save_kind(s, t, 100, 1, "conv", 'b') == 1 &&
              save_kind(s, t, 200, 0, "conv", 'a') == 1 && save_kind(s, t, 300, 0, "conv", 'd') == 1,
          "first turn");
    CHECK(cs_flush(s) == 0, "to the database");
    CHECK(save_kind(s, t, 350, 1, "conv", 'b') == 1 && save_kind(s, t, 360, 1, "fork", 'b') == 1 &&
              save_kind(s, u, 380, 1, "conv", 'b') == 1 && save_kind(s, t, 500, 0, "conv", 'a') == 1 &&
              save_kind(s, t, 450, 0, "conv", 'd') == 1,
          "second turn, in RAM");
    cs_hit pinned;
    uint64_t h[1024];
    token_chain_all(cs_seed(s), t, 700, h);
    fake f = {h, 0, 0};
    float rec[REC];
    CHECK(cs_restore(s, t, h, 451, put_rows, &f, rec, NULL, &pinned) == 450 && pinned.entry, "the interval one pinned");
    cs_retire(s, h, 500, "conv", "bd");
    cs_release(s, &pinned);
    CHECK(!has(s, t, 100) && !has(s, t, 300) && !has(s, t, 350), "conv's ends of earlier prompts went");
    CHECK(has(s, t, 40) && has(s, t, 200) && has(s, t, 500), "the starts stayed");
    CHECK(has(s, t, 360) && has(s, u, 380) && has(s, t, 450), "the fork's, the other branch's and the pinned stayed");
    cs_stats st;
    cs_get_stats(s, &st);
    CHECK(st.retired == 3, "retired %llu", (unsigned long long)st.retired);
    cs_close(s);
    s = open_store(db, FP1, 0, 0, 0);
    CHECK(!has(s, t, 100) && !has(s, t, 300) && has(s, t, 200) && has(s, t, 500) && has(s, u, 380),
          "the database agrees after a reopen");
    cs_close(s);
    db_close(db);
}

/* cs_session_usage: a session's states per tier, and their bytes with each KV page its
 * checkpoints reach counted once (two checkpoints on one prefix share its pages) */
static void session_usage(void) {
    fresh_db();
    store_db *db = opendb();
    ckpt_store *s = open_store(db, FP1, 0, 0, 0);
    int t[700], u[700];
    make_tokens(t, 700, 0, 700);
    make_tokens(u, 700, 1, 300); /* a fork from 300 */
    const uint64_t row = ROW * sizeof(float), rec = REC * sizeof(float), lg = VOC * sizeof(float);
    CHECK(save_kind(s, t, 200, 0, "conv", 'a') == 1 && save_kind(s, t, 500, 1, "conv", 'b') == 1 &&
              save_kind(s, u, 400, 0, "fork", 'b') == 1,
          "saved");
    cs_usage a, b;
    cs_session_usage(s, "conv", &a);
    CHECK(a.states_ram == 2 && a.states_disk == 0 && a.longest == 500, "conv in RAM: %d %d %d", a.states_ram,
          a.states_disk, a.longest);
    CHECK(a.bytes_ram == 500 * row + 2 * rec + lg, "conv's pages once: %llu", (unsigned long long)a.bytes_ram);
    cs_session_usage(s, "fork", &b);
    CHECK(b.states_ram == 1 && b.bytes_ram == 400 * row + rec, "the fork's, shared pages too: %llu",
          (unsigned long long)b.bytes_ram);
    CHECK(cs_flush(s) == 0, "to the database");
    cs_session_usage(s, "conv", &b);
    CHECK(b.states_disk == 2 && b.bytes_disk == a.bytes_ram && b.bytes_ram == a.bytes_ram, "both tiers alike");
    cs_close(s);
    s = open_store(db, FP1, 0, 0, 0);
    cs_session_usage(s, "conv", &b);
    CHECK(b.states_ram == 0 && b.states_disk == 2 && b.bytes_disk == a.bytes_ram, "after a reopen: on disk only");
    cs_session_usage(s, "nobody", &b);
    CHECK(!b.states_ram && !b.states_disk && !b.bytes_disk && !b.longest, "a session without checkpoints");
    cs_close(s);
    db_close(db);
}

static void trimmable(void) {
    ckpt_store *s = open_store(NULL, FP1, 1, 0, 0);
    int t[1000], u[1000];
    make_tokens(t, 1000, 0, 1000);
    make_tokens(u, 1000, 1, 333);
    save(s, t, 900, 0);
    cs_hit hit;
    CHECK(restore(s, u, 800, 0, &hit) == 333 && !strcmp(hit.source, "ram"), "cut back to the common prefix: %d",
          hit.n);
    CHECK(restore(s, t, 500, 0, &hit) == 499, "a longer prefix cut back to n-1: %d", hit.n);
    cs_close(s);
}

/* Random bytes of the database file flipped, many times over: opening and restoring
 * must never crash, and whatever restores must be exactly right (put_rows and the
 * recurrent check count every wrong value). */
static void file_damage(void) {
    fresh_db();
    int t[2000];
    make_tokens(t, 2000, 0, 2000);
    store_db *db = opendb();
    ckpt_store *s = open_store(db, FP1, 0, 0, 0);
    for (int n = 100; n <= 1900; n += 300) save(s, t, n, n == 1900);
    cs_flush(s);
    cs_close(s);
    sqlite3_exec(db_sql(db), "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL);
    db_close(db);
    FILE *f = fopen(DB, "rb");
    REQUIRE(f, "cannot read %s", DB);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *orig = malloc((size_t)size);
    REQUIRE(fread(orig, 1, (size_t)size, f) == (size_t)size, "read");
    fclose(f);
    uint64_t x = 12345;
    int restored = 0, runs = 60;
    for (int run = 0; run < runs; run++) {
        fresh_db();
        f = fopen(DB, "wb");
        long keep = size;
        if (run % 10 == 9) keep = (long)(mix64(x++) % (uint64_t)size); /* truncated */
        fwrite(orig, 1, (size_t)keep, f);
        fclose(f);
        /* flip 1 to 8 bytes past the 100-byte header */
        FILE *g = fopen(DB, "r+b");
        int flips = 1 + (int)(mix64(x++) % 8);
        for (int i = 0; i < flips && keep > 200; i++) {
            long off = 100 + (long)(mix64(x++) % (uint64_t)(keep - 100));
            fseek(g, off, SEEK_SET);
            unsigned char c = orig[off] ^ (unsigned char)(1u << (mix64(x++) % 8));
            fwrite(&c, 1, 1, g);
        }
        fclose(g);
        char err[256];
        store_db *d = db_open(DB, err, sizeof err);
        if (!d) continue; /* not a database any more: chatfs ask moves it aside */
        cs_model m = {FP1, 16, "fake/model", ROW * sizeof(float), REC * sizeof(float), VOC * sizeof(float), 0};
        ckpt_store *cs = cs_open(d, &m, NULL, err, sizeof err);
        if (cs) {
            cs_hit hit;
            for (int n = 150; n <= 2000; n += 370) restored += restore(cs, t, n, 1, &hit) > 0;
            save(cs, t, 1950, 0); /* and writing into a damaged file */
            cs_close(cs);
        }
        db_close(d);
    }
    printf("  %d damaged database files: no crash, %d restores, every restored value right\n", runs, restored);
    free(orig);
}

int main(int argc, char **argv) {
    (void)argc;
    snprintf(DB, sizeof DB, "%s", argv[0]);
    char *slash = strrchr(DB, '/');
    snprintf(slash ? slash + 1 : DB, sizeof DB - (size_t)(slash ? slash + 1 - DB : 0), "ckpt_store_test.db");
    basics_and_sharing();
    persistence();
    flush_in_steps();
    corruption();
    budgets();
    zero_budgets();
    forgotten_sessions();
    retired_checkpoints();
    session_usage();
    trimmable();
    file_damage();
    fresh_db();
    return check_report("test_ckpt_store");
}
