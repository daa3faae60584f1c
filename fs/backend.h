/* backend.h - the engine as the filesystem sees it: a table of functions mirroring
 * engine/runtime/chat.h, so that the filesystem runs on the real engine (backend_engine.c), on
 * an OpenAI-compatible server over HTTP (backend_remote.c), or on a deterministic fake
 * (backend_fake.c) that the FUSE behaviour tests use: configurable tokens, delays and
 * failures, no model needed.
 *
 * Contract (the same as chat.h): submit takes the conversation as messages, queues it
 * and returns at once: id > 0, or 0 with a reason in err and errno EFBIG when the
 * conversation does not fit the context or EINVAL when its chat template refuses it
 * (the filesystem answers the same errno then; anything else is EIO). Callbacks arrive
 * on the backend's own worker thread, on_done exactly once per accepted request; cancel
 * may be called from any thread. A reply's reasoning reaches cb->on_reasoning (the
 * engine splits it off; the remote backend gets it as the stream's reasoning_content; the
 * fake makes some with #think=N), in order with on_text. count_tokens may be
 * NULL, or return -2, for a backend that cannot count (one that renders the prompt
 * elsewhere): the filesystem then skips its early length check at the write, and an
 * over-long message is refused when it is sent. */
#ifndef CHATFS_FS_BACKEND_H
#define CHATFS_FS_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "engine/runtime/chat.h"

typedef struct fs_backend fs_backend;
struct fs_backend {
    void *ctx;
    const char *name; /* "engine", "remote" or "fake", for stats.json */
    uint64_t (*submit)(fs_backend *b, const chat_msg *msgs, int n, const gen_settings *s,
                       const gen_callbacks *cb, char *err, size_t errlen);
    void (*cancel)(fs_backend *b, uint64_t id);
    int (*count_tokens)(fs_backend *b, const chat_msg *msgs, int n, const gen_settings *s);
    /* Renders the conversation as submit would, without running it: 0, or -1 with the
     * reason in err when submit would refuse it with EINVAL (the chat template raises or
     * fails). NULL: the backend cannot tell before it submits (a remote server renders). */
    int (*check_render)(fs_backend *b, const chat_msg *msgs, int n, const gen_settings *s, char *err, size_t errlen);
    int (*context)(fs_backend *b);
    void (*forget_session)(fs_backend *b, const char *session);
    char *(*stats_json)(fs_backend *b); /* malloc'd JSON object */
    /* What the session's checkpoints hold (engine_session_usage): 0, or -1 when the
     * backend keeps none; NULL: it keeps none (a remote server's cache is its own) */
    int (*session_usage)(fs_backend *b, const char *session, ckpt_usage *out);
    void (*close)(fs_backend *b);       /* cancels what runs (on_done comes), frees b */
    /* The sampling a new conversation starts from: gen_settings_defaults, then what the
     * model recommends (engine_settings_defaults); NULL: gen_settings_defaults only. */
    void (*settings_defaults)(fs_backend *b, gen_settings *s);
    /* 1 when the model has a thinking mode (engine_can_think), 0 when it has none, -1
     * when the backend cannot tell (a remote server); NULL: -1. */
    int (*can_think)(fs_backend *b);
    /* An image for a conversation (NAME/attachments/): 0 when the engine takes it, else -1
     * with the reason in err and errno ENOTSUP (the model has no vision projector) or
     * EINVAL (not an image it decodes, cut short, too many pixels); bytes NULL asks only
     * whether it takes images at all. NULL: the backend takes none. */
    int (*check_image)(fs_backend *b, const void *bytes, size_t len, char *err, size_t errlen);
};

/* The real engine: loads the model and starts the worker (b->ctx is its chat_engine).
 * NULL with a reason in err. */
fs_backend *backend_engine_open(const engine_config *cfg, char *err, size_t errlen);

/* An OpenAI-compatible server (llama-server, vLLM, SGLang, ollama, LM Studio, ...):
 * requests go to URL/chat/completions, streamed. Opening asks URL/models, so that an
 * unreachable server, a wrong URL or key, or a model the server does not list is
 * refused here with the reason. The server renders the prompt and counts its tokens:
 * count_tokens reports 0 and context INT_MAX (unknown), and a conversation too long for
 * the server's context fails with the server's message. */
typedef struct {
    const char *url;          /* the API's base, e.g. http://127.0.0.1:8080/v1 */
    const char *model;        /* NULL: the first model URL/models lists */
    const char *api_key_file; /* NULL: no key; else its first line is sent as a Bearer token */
    int max_batch;            /* most requests in flight; the rest wait, queued; 0: 8 */
} remote_config;
fs_backend *backend_remote_open(const remote_config *cfg, char *err, size_t errlen);

/* Submits and waits for the reply (the answer to on_text, its reasoning to on_reasoning;
 * either may be NULL); the report to out (its finish says why it ended). 0, or -1 with
 * the reason in err (after the partial text went to on_text) and errno as submit set it
 * when it was refused at once (EFBIG, EINVAL), else EIO. */
int backend_run(fs_backend *b, const chat_msg *msgs, int n, const gen_settings *s,
                void (*on_text)(void *ud, const char *text, size_t len),
                void (*on_reasoning)(void *ud, const char *text, size_t len), void *ud, gen_report *out, char *err,
                size_t errlen);

/* The fake. spec is a comma-separated list of key=value (all optional):
 *   delay=MS     time per token (default 20)        tokens=N  tokens per reply (default 12)
 *   ctx=N        context size in tokens (4096)      prefill=MS  time before the first token (0)
 *   count=0      it cannot count tokens (count_tokens is NULL), as a remote backend may
 *   render=0     it cannot check a rendering (check_render is NULL), as a remote backend
 *   think=N      reasoning words before each reply (default 0): "Thinking about: M." cut to
 *                40 bytes, then " t1 t2 ...", to on_reasoning in phase GEN_THINKING; none
 *                with enable_thinking 0, at most thinking_budget (when >= 0). With think=
 *                given the fake says it can think (can_think 1, else 0)
 *   temp=T topk=K  the sampling it recommends (settings_defaults), like a GGUF's
 *                general.sampling.* keys
 * Tokens are whole words: the reply to a message M is "Reply to: M." cut to its first
 * 40 bytes, then "w1 w2 w3 ...". Prompt tokens are counted as ceil(bytes / 4) plus 4 per
 * message. A user message can override per request with words in it:
 *   #tokens=N  #delay=MS  #fail=N (fail with "fake engine failure" after N tokens)  #think=N
 * and its "template" refuses a conversation whose last user message says #refuse, as a
 * chat template's raise_exception would: submit and check_render fail with EINVAL and
 * "fake template: the message says #refuse". */
fs_backend *backend_fake_open(const char *spec, char *err, size_t errlen);

#endif
