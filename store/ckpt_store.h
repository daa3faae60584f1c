/* ckpt_store.h - checkpoints of sequence state, in RAM and in SQLite.
 *
 * A checkpoint is the state of one model after the token prefix t[0..n). The store
 * knows nothing about models beyond what cs_model says: an opaque fingerprint, the
 * bytes of attention KV per token (row_bytes), of the recurrent blob (rec_bytes) and
 * of one logits vector. It keeps:
 *
 *  - pages: runs of at most page_tokens tokens with their KV rows (row-major:
 *    row t holds all of token t's K and V), keyed by the chained hash of the whole
 *    prefix up to the page's end (engine/base/hash.h), with a pointer to the parent page.
 *    Pages form a tree shared by every checkpoint with that prefix, so attention KV
 *    is stored once. A checkpoint may end inside its last page (causal attention:
 *    rows before n do not depend on tokens after it).
 *  - entries: one per checkpoint: (prefix hash, n), its last page, its recurrent
 *    blob and, for checkpoints at the end of a prompt, the logits that follow.
 *
 * Two tiers with byte budgets: RAM (hot; restores are memcpy) and the database
 * (written by cs_flush in one transaction; survives restarts). Every database blob
 * carries a hash64 checksum that is checked before use; a bad one is dropped and
 * counted. Eviction weighs tokens saved per byte and recency; pinned entries stay.
 *
 * Not thread-safe: one thread (the engine's worker) owns a store. The engine reaches it
 * through the port it defines (engine/runtime/checkpoint_port.h; cs_port), whose types
 * the store takes as its own. */
#ifndef CHATFS_CKPT_STORE_H
#define CHATFS_CKPT_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/runtime/checkpoint_port.h"
#include "store/db.h"

#define CS_DEFAULT_RAM_BUDGET ((size_t)1 << 30)   /* 1 GiB */
#define CS_DEFAULT_DISK_BUDGET ((size_t)8 << 30)  /* 8 GiB */
#define CS_DEFAULT_PAGE_TOKENS 256

typedef struct ckpt_store ckpt_store;
typedef struct cs_entry cs_entry;

typedef ckpt_model cs_model;

typedef struct {
    size_t ram_budget;  /* bytes; 0: none (with a database, a checkpoint goes there at once) */
    size_t disk_budget; /* bytes; 0: none (the database is not used) */
    int page_tokens;    /* 0: CS_DEFAULT_PAGE_TOKENS */
} cs_config;

/* A store on db (NULL: RAM only) with the budgets of c (NULL: CS_DEFAULT_*), without a
 * model yet: the process that owns the database makes it and hands it to the engine,
 * which attaches its model. The checkpoint tables are created or migrated (module
 * "checkpoints"). A database that cannot be used leaves the store RAM-only, with a
 * warning in err (the store is still returned). NULL only when out of memory or the
 * database schema is newer than this build. */
ckpt_store *cs_new(store_db *db, const cs_config *c, char *err, size_t errlen);
/* Binds the store to model m and loads its index; rows that fail validation are
 * deleted and counted as corrupt. 0 (maybe a warning in err: RAM only), or -1 (a bad
 * fingerprint, a store that has a model). */
int cs_attach(ckpt_store *s, const cs_model *m, char *err, size_t errlen);
/* cs_new and cs_attach in one. */
ckpt_store *cs_open(store_db *db, const cs_model *m, const cs_config *c, char *err, size_t errlen);
/* Flushes and frees. */
void cs_close(ckpt_store *s);
/* The seed of the token chain, h[0] (derived from the fingerprint). */
uint64_t cs_seed(const ckpt_store *s);
int cs_page_tokens(const ckpt_store *s);
/* 1 when the store writes to a database. */
int cs_persistent(const ckpt_store *s);

typedef ckpt_put_rows cs_put_rows;
typedef ckpt_get_rows cs_get_rows;
/* hit->entry is the cs_entry pinned until cs_release (NULL for a page-only restore or a miss) */
typedef ckpt_hit cs_hit;

/* Finds the longest checkpoint whose tokens are a prefix of t[0..n) (h: token chain
 * of t, n+1 values) and restores it: KV rows through put, the recurrent blob into rec
 * (rec_bytes), and, when the checkpoint is at exactly n and has them, the logits into
 * logits (may be NULL: then only checkpoints shorter than n are used). For trimmable
 * models a longer stored prefix is cut back. A checkpoint that fails its checksum is
 * dropped and the next one tried. The caller resets its state before a retry: put
 * always starts again at position 0. Fills hit; returns hit->n. */
int cs_restore(ckpt_store *s, const int *t, const uint64_t *h, int n, cs_put_rows put, void *ud, void *rec,
               void *logits, cs_hit *hit);
void cs_release(ckpt_store *s, cs_hit *hit);

/* 1 when a checkpoint at (h[n], n) exists. */
int cs_has(const ckpt_store *s, const uint64_t *h, int n);
/* Stores the checkpoint at n: pages not yet stored are read through get, rec and
 * logits (may be NULL) are copied. kind is a one-letter placement tag ('a'..'e'),
 * session may be NULL. Then the RAM budget is enforced. Returns 1 stored, 0 already
 * there (its recency is refreshed), -1 on failure (out of memory, larger than the
 * RAM budget, a hash collision). */
int cs_save(ckpt_store *s, const int *t, const uint64_t *h, int n, cs_get_rows get, void *ud, const void *rec,
            const void *logits, int kind, const char *session);
/* Writes every checkpoint that is only in RAM to the database, in one transaction,
 * then enforces the disk budget. 0, or -1 (the RAM copies stay dirty). */
int cs_flush(ckpt_store *s);
/* The same, but after each checkpoint written stop(ud) is asked whether to end here
 * (a request waits): what is written commits, the rest stays dirty for the next call.
 * A checkpoint and its pages always commit together. 0 all written, 1 some left,
 * -1 error. */
int cs_flush_until(ckpt_store *s, int (*stop)(void *ud), void *ud);
/* The session's checkpoints become the first to be evicted. */
void cs_forget_session(ckpt_store *s, const char *session);
/* The session has moved on past t[0..n) (h: its token chain, n+1 values): its
 * checkpoints whose kind is one of the letters in kinds and whose tokens are a prefix
 * of t shorter than n are dropped from both tiers, unless pinned. Other sessions'
 * checkpoints, forks among them, stay. */
void cs_retire(ckpt_store *s, const uint64_t *h, int n, const char *session, const char *kinds);
/* What one session's checkpoints hold: states (checkpoints) in each tier, and their
 * bytes: each state's recurrent blob and logits, plus the KV pages its checkpoints
 * reach, each page counted once. A page is shared with every conversation on the same
 * prefix (a fork, a common system prompt), so sessions' bytes add up to more than the
 * store's. Marks the pages it walks (not thread-safe, like every call here). */
typedef ckpt_usage cs_usage;
void cs_session_usage(ckpt_store *s, const char *session, cs_usage *out);
/* Adds a request's token counts to the counters. */
void cs_note_request(ckpt_store *s, int prompt_tokens, int reused, int computed);

typedef struct {
    uint64_t hits, hits_ram, hits_disk, misses;
    uint64_t miss_none, miss_diverged, miss_evicted, miss_fingerprint, miss_corrupt, miss_disabled;
    uint64_t tokens_prompt, tokens_reused, tokens_computed;
    uint64_t entries_ram, entries_disk, pages_ram, pages_disk;
    uint64_t entries_pending; /* in RAM, not yet written to the database */
    uint64_t bytes_ram, bytes_disk, kv_bytes_disk, rec_bytes_disk;
    uint64_t evictions_ram, evictions_disk, corrupt_dropped, saves, flushes, write_errors;
    uint64_t retired; /* dropped by cs_retire: their conversation had moved on */
} cs_stats;

void cs_get_stats(const ckpt_store *s, cs_stats *out);
/* The counters as a JSON object (malloc'd). */
char *cs_stats_json(const ckpt_store *s);
/* Counts a miss the store did not see (e.g. checkpoints disabled for a request). */
void cs_count_miss(ckpt_store *s, const char *reason);

/* The store as the engine's checkpoint port (engine_config.checkpoints); s NULL: no
 * checkpoints. The store must outlive the engine. */
ckpt_port cs_port(ckpt_store *s);

#endif
