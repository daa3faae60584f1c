/* checkpoint_port.h - where the engine keeps checkpoints: a table of functions its
 * caller hands it, as the filesystem takes its engine through fs_backend.
 *
 * A checkpoint is the state of one model after the token prefix t[0..n): the attention
 * KV rows of those tokens, the recurrent blob, and, at the end of a prompt, the logits
 * that follow. The engine decides where checkpoints go and which one a prompt restores
 * (prefix_cache.h); the store behind this port decides where their bytes live (RAM, a
 * database) and verifies them before use. The engine knows no store: chatfs's is
 * store/ckpt_store.h (RAM and SQLite; cs_port), and an engine given no port simply
 * keeps no checkpoints. A port's functions are called with the prefix cache's lock
 * held, from one thread at a time. */
#ifndef CHATFS_CHECKPOINT_PORT_H
#define CHATFS_CHECKPOINT_PORT_H

#include <stddef.h>
#include <stdint.h>

/* What a store may know of a model: an opaque fingerprint and the byte sizes. */
typedef struct {
    const uint8_t *fingerprint; /* identifies the model (weights, shapes, tokenizer, template) */
    size_t fp_len;              /* at most 64 */
    const char *name;           /* for people, and to tell a changed model ("fingerprint mismatch") */
    size_t row_bytes;           /* KV bytes per token (0 for models without attention) */
    size_t rec_bytes;           /* recurrent-state bytes per checkpoint (0 for attention-only models) */
    size_t logits_bytes;        /* bytes of one logits vector */
    int trimmable;              /* 1: every layer is attention, a longer prefix may be cut back */
} ckpt_model;

/* Receives restored KV rows [pos0, pos0+rows), row-major, already verified. 0 or -1. */
typedef int (*ckpt_put_rows)(void *ud, int pos0, int rows, const void *data);
/* Fills dst with the KV rows [pos0, pos0+rows) of the live state, row-major. */
typedef void (*ckpt_get_rows)(void *ud, int pos0, int rows, void *dst);

/* What a restore found. */
typedef struct {
    int n;                /* tokens the restored state covers (0: nothing restored) */
    int has_logits;       /* logits after t[n-1] were written (only when n is the whole prompt) */
    const char *source;   /* "ram", "disk" or "none" */
    char miss_reason[96]; /* empty on a hit */
    void *entry;          /* the store's pin on the checkpoint used, until release (NULL: none) */
} ckpt_hit;

/* What one session's checkpoints hold (the port's session_usage). */
typedef struct {
    int states_ram, states_disk;
    uint64_t bytes_ram, bytes_disk; /* recurrent blobs, logits and the KV pages they reach */
    int longest;                    /* tokens the longest covers (0: none) */
} ckpt_usage;

/* The operations, each on the store the port carries. h is the token chain of t
 * (engine/base/hash.h, from seed()), n + 1 values. */
typedef struct {
    /* binds the store to model m; 0 (maybe a warning in err), or -1 (it cannot serve m) */
    int (*attach)(void *store, const ckpt_model *m, char *err, size_t errlen);
    uint64_t (*seed)(void *store);  /* h[0] for the attached model */
    int (*persistent)(void *store); /* 1: checkpoints outlive the process */
    /* the longest checkpoint whose tokens are a prefix of t[0..n), restored: KV rows
     * through put, the recurrent blob into rec, the logits when it is at exactly n and
     * logits is not NULL; fills hit, returns hit->n */
    int (*restore)(void *store, const int *t, const uint64_t *h, int n, ckpt_put_rows put, void *ud, void *rec,
                   void *logits, ckpt_hit *hit);
    void (*release)(void *store, ckpt_hit *hit);
    int (*has)(void *store, const uint64_t *h, int n);
    /* stores the checkpoint at n; kind is its placement (prefix_cache.h's ckpt_place),
     * session the conversation (may be NULL). 1 stored, 0 already there, -1 failed */
    int (*save)(void *store, const int *t, const uint64_t *h, int n, ckpt_get_rows get, void *ud, const void *rec,
                const void *logits, int kind, const char *session);
    /* writes what only RAM holds to lasting storage, ending early when stop(ud) says so
     * (stop may be NULL); 0 all written, 1 some left, -1 error */
    int (*flush)(void *store, int (*stop)(void *ud), void *ud);
    void (*forget_session)(void *store, const char *session); /* its checkpoints go first */
    /* the session has moved on past t[0..n): its checkpoints of these kinds (a string of
     * placement letters) before n on this prefix are dropped, unless in use. A
     * conversation keeps what a fork or an edit of an earlier turn needs and loses what
     * only that turn's own prompt used (docs/checkpoints.md, Compaction) */
    void (*retire)(void *store, const uint64_t *h, int n, const char *session, const char *kinds);
    void (*note_request)(void *store, int prompt_tokens, int reused, int computed);
    void (*count_miss)(void *store, const char *reason);
    char *(*stats_json)(void *store); /* malloc'd JSON object of counters */
    void (*session_usage)(void *store, const char *session, ckpt_usage *out); /* NULL: unknown */
} ckpt_ops;

typedef struct {
    const ckpt_ops *ops; /* NULL: no checkpoints */
    void *store;
} ckpt_port;

#endif
