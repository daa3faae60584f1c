/* backend.h - the engine as the filesystem sees it: a table of functions mirroring
 * engine/chat.h, so that the filesystem runs either on the real engine
 * (backend_engine.c) or on a deterministic fake (backend_fake.c) that the FUSE
 * behaviour tests use: configurable tokens, delays and failures, no model needed.
 *
 * Contract (the same as chat.h): submit takes the conversation as messages, queues it
 * and returns at once: id > 0, or 0 with a reason in err and errno EFBIG when the
 * conversation does not fit the context (the filesystem answers EFBIG then; anything
 * else is EIO). Callbacks arrive on the backend's own worker thread, on_done exactly
 * once per accepted request; cancel may be called from any thread. count_tokens may be
 * NULL, or return -2, for a backend that cannot count (one that renders the prompt
 * elsewhere): the filesystem then skips its early length check at the write, and an
 * over-long message is refused when it is sent. */
#ifndef CHATFS_FS_BACKEND_H
#define CHATFS_FS_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "engine/chat.h"

typedef struct fs_backend fs_backend;
struct fs_backend {
    void *ctx;
    const char *name; /* "engine" or "fake", for stats.json */
    uint64_t (*submit)(fs_backend *b, const chat_msg *msgs, int n, const gen_settings *s,
                       const gen_callbacks *cb, char *err, size_t errlen);
    void (*cancel)(fs_backend *b, uint64_t id);
    int (*count_tokens)(fs_backend *b, const chat_msg *msgs, int n, const char *template_name);
    int (*context)(fs_backend *b);
    void (*forget_session)(fs_backend *b, const char *session);
    char *(*stats_json)(fs_backend *b); /* malloc'd JSON object */
    void (*close)(fs_backend *b);       /* cancels what runs (on_done comes), frees b */
};

/* The real engine: loads the model and starts the worker. NULL with a reason in err. */
fs_backend *backend_engine_open(const engine_config *cfg, char *err, size_t errlen);

/* The fake. spec is a comma-separated list of key=value (all optional):
 *   delay=MS     time per token (default 20)        tokens=N  tokens per reply (default 12)
 *   ctx=N        context size in tokens (4096)      prefill=MS  time before the first token (0)
 *   count=0      it cannot count tokens (count_tokens is NULL), as a remote backend may
 * Tokens are whole words: the reply to a message M is "Reply to: M." cut to its first
 * 40 bytes, then "w1 w2 w3 ...". Prompt tokens are counted as ceil(bytes / 4) plus 4 per
 * message. A user message can override per request with words in it:
 *   #tokens=N  #delay=MS  #fail=N (fail with "fake engine failure" after N tokens) */
fs_backend *backend_fake_open(const char *spec, char *err, size_t errlen);

#endif
