/* mount.h - `chatfs mount`: opens the database and the engine, mounts, serves until
 * unmounted (fusermount3 -u) or signalled, then stops generation and closes. */
#ifndef CHATFS_FS_MOUNT_H
#define CHATFS_FS_MOUNT_H

#include <stddef.h>

typedef struct {
    const char *mountpoint;
    const char *model;       /* GGUF path (the real engine) */
    const char *fake;        /* or a fake engine spec (backend.h); for tests */
    const char *engine_url;  /* or an OpenAI-compatible server (--engine URL, backend.h) */
    const char *remote_model; /* --model: the server's model; NULL: the first it lists */
    const char *api_key_file; /* --api-key-file */
    const char *db;          /* database path; NULL: db_default_path */
    int threads;             /* engine threads; 0: every core */
    int prefill_chunk;       /* --chunk: most prompt tokens per scheduler step; 0: the engine's default */
    int max_batch;           /* --batch: most replies generated together (remote: requests in
                                flight); 0: the engine's default */
    size_t ram_budget, disk_budget; /* checkpoint budgets in bytes (0: none); CS_DEFAULT_* by default */
    int n_ctx;               /* -c: most tokens a conversation holds; 0: the engine's default */
    const char *cache_type_k, *cache_type_v; /* -ctk/-ctv: engine_config's (NULL: its default) */
    int draft;               /* --draft: engine_config.draft (0 the default, -1 off, N up to N) */
    int draft_vocab;         /* --draft-vocab: engine_config.draft_vocab (0: the whole vocabulary) */
    const char *mmproj;      /* --mmproj: the vision projector (engine_config.mmproj_path); NULL: none */
    int mmproj_found;        /* 1: mmproj was found beside the model, not given: one that does not
                                load is left out with a warning rather than refusing the mount */
    int foreground;          /* -f: stay in the foreground (else daemonise like sshfs) */
    int verbose;             /* -v: log every change, not only each reply */
    const char *log_path;    /* --log FILE: append the log there (daemon or -f); NULL: stderr with -f */
    int debug;               /* -d: libfuse's request log (implies -f) */
    const char *fuse_opts;   /* -o, passed to libfuse */
} mount_opts;

/* Returns the process exit status. */
int chatfs_mount(const mount_opts *o);

#endif
