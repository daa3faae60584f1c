/* ckpt_impl.h - the in-memory index shared by ckpt_store.c (policy: lookup, tiers,
 * eviction) and ckpt_sql.c (the tables: schema, load, write, read, delete). */
#ifndef CHATFS_CKPT_IMPL_H
#define CHATFS_CKPT_IMPL_H

#include "store/ckpt_store.h"
#include "store/db.h"

#include <string.h>

typedef struct cs_page {
    uint64_t key;            /* token chain hash at pos0 + n */
    uint64_t parent_key;     /* at pos0 (the seed for the first page) */
    struct cs_page *parent;  /* NULL for a first page */
    struct cs_page *child, *sibling; /* the page tree */
    struct cs_page *hnext;   /* hash table chain */
    int pos0, n;
    int *tokens;             /* n tokens */
    void *kv;                /* n * row_bytes, or NULL when only in the database */
    uint64_t checksum;       /* of the database copy: tokens then kv, seeded with key */
    int ram_refs;            /* RAM entries whose chain holds this page */
    int disk_refs;           /* database entries whose chain holds this page */
    int on_disk;
    uint64_t usage_mark;     /* cs_session_usage's walk that last counted it */
} cs_page;

struct cs_entry {
    uint64_t hash;           /* token chain at n */
    int n;
    cs_page *last;           /* the page holding row n-1 */
    void *rec, *logits;      /* RAM copies (rec NULL when rec_bytes is 0 or not in RAM) */
    int has_logits;
    int in_ram, on_disk, dirty, touched;
    int pins;
    int kind;
    int forgotten;
    char *session;
    uint64_t last_used;      /* logical clock */
};

#define CS_HBITS 12
#define CS_EVICTED_RING 1024

struct ckpt_store {
    store_db *db;            /* NULL: RAM only */
    int64_t model_id;
    cs_model m;
    uint8_t fp[64];
    char name[128];
    uint64_t seed;
    size_t ram_budget, disk_budget;
    int P;

    cs_page *table[1 << CS_HBITS];
    cs_page *roots;          /* first pages (children of the seed) */
    cs_entry **e;
    int n_e, cap_e;
    uint64_t clock;
    uint64_t usage_walk;     /* cs_session_usage's last walk number */

    uint64_t ram_bytes, disk_bytes;
    int fp_mismatch;         /* the database holds checkpoints of a model with this name but another fingerprint */
    int db_broken;           /* the database failed; now RAM only */
    int db_lost;             /* ... and entries that lived only there still need dropping */
    int txn_depth;

    struct { uint64_t hash; int n; } evicted[CS_EVICTED_RING];
    int n_evicted;

    cs_stats st;
};

/* index helpers (ckpt_store.c) */
cs_page *cs_page_find(const ckpt_store *s, uint64_t key);
cs_page *cs_page_add(ckpt_store *s, uint64_t key, uint64_t parent_key, int pos0, int n, const int *tokens);
void cs_page_maybe_free(ckpt_store *s, cs_page *p);
cs_entry *cs_entry_add(ckpt_store *s, uint64_t hash, int n, cs_page *last, int kind, const char *session);
void cs_entry_free(ckpt_store *s, cs_entry *e); /* removes from the index; caller fixed refs */
size_t cs_page_bytes(const ckpt_store *s, const cs_page *p);
/* 1 when session placed e (a NULL session placed nothing) */
static inline int cs_placed_by(const cs_entry *e, const char *session) {
    return session && e->session && !strcmp(e->session, session);
}
size_t cs_entry_own_bytes(const ckpt_store *s, const cs_entry *e);
uint64_t cs_page_checksum(const ckpt_store *s, const cs_page *p, const void *kv);
uint64_t cs_entry_checksum(const ckpt_store *s, const cs_entry *e, const void *rec, const void *logits);
/* drops an entry from the database tier: deletes its row (and pages nobody needs) */
void cs_disk_drop(ckpt_store *s, cs_entry *e);

/* the tables (ckpt_sql.c); each returns 0 or -1 */
/* creates or migrates them; -1 only for a newer schema (an unusable one leaves the store
 * RAM only, with the reason in err) */
int cs_sql_migrate(ckpt_store *s, char *err, size_t errlen);
/* loads the index of the attached model; an unreadable database leaves it RAM only */
int cs_sql_open(ckpt_store *s, char *err, size_t errlen);
/* writes what is only in RAM (and newer recencies) in one transaction; after each
 * checkpoint written, stop (may be NULL) can end it early, committing what is done.
 * 0 all written, 1 some left (stopped), -1 error */
int cs_sql_flush(ckpt_store *s, int (*stop)(void *ud), void *ud);
/* reads page p's KV, verifies it and hands SQLite's buffer to use (no copy); returns
 * use's result, or -1 when the row is missing or fails its checks */
int cs_sql_read_page(ckpt_store *s, cs_page *p, int (*use)(void *ud, const void *kv), void *ud);
int cs_sql_read_entry(ckpt_store *s, cs_entry *e, void *rec_out, void *logits_out);
int cs_sql_delete_entry(ckpt_store *s, const cs_entry *e);
int cs_sql_delete_page(ckpt_store *s, const cs_page *p);
int cs_sql_begin(ckpt_store *s);
int cs_sql_end(ckpt_store *s, int ok);
void cs_sql_failed(ckpt_store *s, const char *what);
/* after cs_sql_failed, at a point where no caller iterates entries: drops what lived only in the database */
void cs_db_lost_cleanup(ckpt_store *s);

#endif
