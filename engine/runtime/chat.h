/* chat.h - the engine API: conversations in, streamed replies out.
 *
 * One engine owns a model and a worker thread (the scheduler), and keeps checkpoints in
 * the store its caller hands it through a port (checkpoint_port.h; chatfs's is
 * store/ckpt_store.h, RAM and SQLite).
 * Callers submit requests - a conversation as a list of messages plus settings - and
 * the worker runs them: render the chat template, tokenize, find the longest usable
 * checkpoint for the prompt, restore it, prefill the rest while placing new
 * checkpoints, decode, stream the text through callbacks, and place the checkpoint the
 * next turn will need. Up to max_batch requests run at once, decoded together in one
 * model pass per token (scheduler.c); each reply is exactly what the request would get
 * alone. The filesystem and the command line both sit on this API; nothing here knows
 * about paths inside a mount or about FUSE. */
#ifndef CHATFS_CHAT_H
#define CHATFS_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/model/model.h"
#include "engine/template/template.h"
#include "engine/toolcall/toolcall.h"
#include "engine/runtime/checkpoint_port.h"

typedef struct chat_engine chat_engine;

/* The cache type of an engine told none: llama.cpp's default. */
#define ENGINE_KV_DEFAULT "f16"

/* Faults a test injects, as a failing model would. break_row is asked for every decode
 * row the scheduler plans (session: the request's gen_settings.session; generated: its
 * tokens so far); 1 makes that row break the model pass it is in, so the request fails
 * and the others in the pass are retried. Nothing but tests sets one. */
typedef struct {
    int (*break_row)(void *ud, const char *session, int generated);
    void *ud;
} engine_faults;

typedef struct {
    const char *model_path;
    ckpt_port checkpoints;   /* where checkpoints live (store/ckpt_store.h's cs_port), made and
                                closed by the caller around the engine; {0}: none kept */
    int threads;             /* 0: every core */
    int n_ctx;               /* most tokens a conversation may hold (at most the model's context);
                                0: engine_default_context */
    const char *cache_type_k, *cache_type_v; /* the attention caches' row formats by name
                                (kv_type.h: f32, f16, bf16, q8_0, q4_0); NULL: ENGINE_KV_DEFAULT */
    int prefill_chunk;       /* most prompt tokens one scheduler step processes; 0: 512 */
    int max_batch;           /* most requests running at once (decoded together); 0: 8 */
    const engine_faults *faults; /* NULL: none (tests only) */
    int no_single_flight;    /* 1: a request never waits for another one computing the same
                                prefix, it computes the prefix itself (benchmarks) */
    int draft;               /* speculative decoding with the model's MTP head (runtime/speculative.h):
                                0 the default (SPEC_DEFAULT_DRAFT tokens a step when the model has the
                                head, off otherwise), -1 off, N drafts of up to N tokens (the model must
                                have the head) */
    int draft_vocab;         /* drafts score only the tokens with ids below this (model/mtp.h
                                mtp_set_draft_vocab); 0: the whole vocabulary, as llama.cpp */
    const char *mmproj_path; /* a vision projector (an mmproj GGUF, engine/vision/projector.h) for
                                the messages' images; NULL: none, and a message with images is
                                refused. With one, speculative decoding is off unless draft asks
                                for it, which is refused (an image's rows have no tokens to draft
                                from) */
    int flush_at_close;      /* 1: checkpoints go to the database only in engine_close, not while
                                the engine idles: a one-shot caller (`chatfs ask`) stores its reply
                                first, so a checkpoint write never holds the database while the
                                reply waits for it */
} engine_config;

#define GEN_MAX_STOP 8
#define GEN_MAX_DRAFT 8 /* most tokens a speculative step drafts (runtime/speculative.h) */

typedef struct {
    float temperature;       /* 0 = greedy */
    int top_k;
    float top_p;
    float min_p;
    uint64_t seed;
    int max_tokens;          /* 0: until end of generation or the context is full */
    int ignore_eog;          /* 1: no end-of-generation token is drawn, so the reply goes on until
                                max_tokens or the context is full (benchmarks, tests) */
    const char *stop[GEN_MAX_STOP]; /* stop strings (not part of the reply) */
    int n_stop;
    int checkpoint_interval; /* spacing of periodic checkpoints inside long prefills; 0: 1024 */
    const char *template_name; /* a built-in chat template by name (template_builtin_text); NULL: the model's */
    const char *chat_template; /* Jinja text to render with instead of the model's own template (and
                                  instead of template_name); NULL: none */
    int enable_thinking;     /* the templates' enable_thinking: 1 (the default, as llama.cpp) or 0 */
    int thinking_budget;     /* most reasoning tokens; after them the engine closes the reasoning
                                itself (the way the template marks its end) and the answer follows;
                                -1: no limit (the default) */
    int checkpoints;         /* 1: look up and store checkpoints (default); 0: neither */
    const char *session;     /* who the request belongs to (a conversation id), for budgets and
                                engine_forget_session; may be NULL */
    int speculative;         /* drafts per step: -1 the engine's (the default), 0 none, N up to N; only
                                where the engine speculates (engine_config.draft) */
    const char *grammar;     /* GBNF text (llama.cpp's syntax, grammar/grammar.h) the answer follows:
                                compiled at the submit (EINVAL with the reason when it does not), every
                                token outside it masked before sampling, the end-of-generation token
                                only where the grammar may end; the reasoning stays free. Speculation
                                masks the drafts and the verify rows alike, so a constrained
                                reply is the plain one. NULL: none */
    const char *response_format; /* OpenAI's response_format as JSON, for a remote engine, which is sent it
                                    instead of grammar; the local engine follows grammar (the format's
                                    grammar, made by the caller) and ignores it. NULL: none */
    const char *tools;       /* the functions offered: OpenAI's tools array as JSON (checked at the submit:
                                EINVAL with the reason). The template gets them, and unless tool_choice
                                is "none" the answer is read for calls in the template's format
                                (toolcall.h): each call, once complete, goes to on_tool_call, and on_text
                                gets only the text outside the calls. NULL or "[]": none */
    const char *tool_choice; /* "auto" (NULL too): the model may call; "none": offered, the answer all text;
                                "required": the answer is calls (a grammar of the offered calls, after any
                                reasoning; grammar must then be NULL); a function's name: that call */
    int parallel_tool_calls; /* 1 (the default): any number of calls in a reply; 0: the reply ends with its
                                first call */
} gen_settings;

void gen_settings_defaults(gen_settings *s);

/* GEN_THINKING: generating the reasoning (the text goes to on_reasoning), then
 * GEN_GENERATING: the answer (on_text) */
enum gen_phase { GEN_QUEUED = 0, GEN_PREFILL, GEN_THINKING, GEN_GENERATING, GEN_DONE, GEN_FAILED };
enum gen_finish {
    FINISH_NONE = 0,      /* still running */
    FINISH_EOG,           /* the model ended its turn */
    FINISH_LENGTH,        /* max_tokens reached */
    FINISH_STOP,          /* a stop string */
    FINISH_CONTEXT,       /* the context is full */
    FINISH_CANCELLED,     /* engine_cancel or engine_close */
    FINISH_ERROR
};

/* What a request did; also the payload of progress callbacks. */
typedef struct {
    enum gen_phase phase;
    enum gen_finish finish;
    int prompt_tokens;
    int reused_tokens;       /* not computed: restored from a checkpoint or shared */
    int shared_tokens;       /* of those, copied from another request that was computing the same
                                prefix at the same time (single flight) */
    int computed_tokens;     /* prompt tokens actually run through the model */
    int prefill_done;        /* reused + computed so far */
    int prefill_passes;      /* model passes the computed tokens took (a checkpoint mark ends a
                                pass only when a second one lies ahead in the same chunk) */
    int generated_tokens;    /* all of them: reasoning_tokens + the answer's */
    int reasoning_tokens;    /* of those, the reasoning's (its markers included) */
    const char *source;      /* where the reused state came from: "ram", "disk" or "none" */
    char miss_reason[96];    /* empty on a hit; else "none stored", "diverged at position X",
                                "evicted", "fingerprint mismatch", "corrupt", "disabled" */
    int drafted_tokens;      /* speculative decoding: tokens the MTP head drafted... */
    int accepted_tokens;     /* ...and those the model accepted (each a token without a pass of its own) */
    int decode_passes;       /* model passes after the first token (generated_tokens - 1 without
                                speculation) */
    int tool_calls;          /* calls the answer made (gen_settings.tools) */
    int images;              /* images in the prompt (chat_msg.images)... */
    int images_encoded;      /* ...and those this request ran through the projector (the others were
                                restored with a checkpoint after them, or found encoded already) */
    int grammar_incomplete;  /* 1: a constrained answer that ended (max_tokens, the context, a stop string)
                                before its grammar could end, so it is not a sentence of the grammar */
    double ttft_ms;          /* submit to first generated token */
    double prefill_tokens_per_s;
    double decode_tokens_per_s;
} gen_report;

/* Called on the engine's worker thread; they must not block for long (every running
 * request waits for them). A request's phase is GEN_QUEUED until it starts its prefill:
 * while it waits for a slot in the batch, and while it waits for another request that
 * is computing the same prefix (then on_progress says so). */
typedef struct {
    void (*on_text)(void *ud, const char *text, size_t len);   /* the answer: whole UTF-8 characters */
    void (*on_progress)(void *ud, const gen_report *r);        /* phase changes, prefill chunks, decode steps */
    void (*on_done)(void *ud, const gen_report *r, const char *error); /* exactly once; error NULL unless failed */
    void *ud;
    void (*on_reasoning)(void *ud, const char *text, size_t len); /* the reasoning (without its markers),
                                                                     in order with on_text; NULL: dropped */
    void (*on_tool_call)(void *ud, const struct tc_call *call);   /* a complete call (its index counts from
                                                                     0 in the reply), in order with on_text;
                                                                     valid during the call; NULL: dropped */
} gen_callbacks;

/* Loads the model, attaches it to the checkpoint store, starts the worker. NULL on
 * failure with one line in err. */
chat_engine *engine_open(const engine_config *cfg, char *err, size_t errlen);
/* Cancels whatever runs (on_done with FINISH_CANCELLED), stops the worker, closes. */
void engine_close(chat_engine *e);
const model *engine_model(const chat_engine *e);

/* gen_settings_defaults, then the model's recommended sampling where its file carries it
 * (general.sampling.* keys: temperature, top_k, top_p, min_p). */
void engine_settings_defaults(const chat_engine *e, gen_settings *s);
/* 1 when the model's template has a thinking mode (it marks reasoning it can be asked to
 * write or to skip), else 0. */
int engine_can_think(const chat_engine *e);
/* The same for a loaded model without an engine (chatfs info): 1 when the vocabulary has a
 * pair of reasoning markers (<think> </think>, ...) or the template renders a one-message
 * conversation differently with enable_thinking on and off. */
int chat_model_can_think(const model *m);
/* gen_settings_defaults with the model file's general.sampling.{temp,top_k,top_p,min_p}
 * where present and sane; returns how many of those keys were taken. */
int chat_model_sampling(const model *m, gen_settings *s);

/* Queues a request; messages and settings are copied, and rendered and tokenized here,
 * once. Returns an id > 0, or 0 with a reason in err and errno set for problems visible
 * at once: EFBIG a prompt that does not fit the context, EINVAL a bad role or setting, a
 * template that does not compile or refuses the conversation (the template's message),
 * ENOMEM, ESHUTDOWN the engine is closing. Later failures arrive through on_done. */
uint64_t engine_submit(chat_engine *e, const chat_msg *msgs, int n, const gen_settings *s, const gen_callbacks *cb,
                       char *err, size_t errlen);
/* Stops a request; its on_done still comes (FINISH_CANCELLED) unless it had finished. */
void engine_cancel(chat_engine *e, uint64_t id);
/* Submits and waits. Text goes to on_text (may be NULL), the report to out. 0 or -1. */
int engine_run(chat_engine *e, const chat_msg *msgs, int n, const gen_settings *s,
               void (*on_text)(void *ud, const char *text, size_t len), void *ud, gen_report *out, char *err,
               size_t errlen);

/* Prompt tokens the messages render to (with the generation prompt, the template and
 * switches of s; NULL: defaults), without running anything; -1 when they cannot be
 * rendered. Safe on any thread. */
int engine_count_tokens(chat_engine *e, const chat_msg *msgs, int n, const gen_settings *s);
/* Renders the messages as engine_submit would (the template and switches of s; NULL:
 * defaults), without tokenizing or running anything: 0, or -1 with the reason in err
 * (errno EINVAL: a template that does not compile or that refuses the conversation:
 * its raise_exception message). Safe on any thread. */
int engine_check_render(chat_engine *e, const chat_msg *msgs, int n, const gen_settings *s, char *err, size_t errlen);
/* 1 when the engine has a vision projector (engine_config.mmproj_path). */
int engine_has_vision(const chat_engine *e);
/* Checks an image as a message would carry it: 0 when the engine's projector takes it
 * (it decodes whole), else -1 with the reason in err and errno ENOTSUP (no projector)
 * or EINVAL (not an image stb_image decodes, truncated, too many pixels). Safe on any
 * thread. */
int engine_check_image(const chat_engine *e, const void *bytes, size_t len, char *err, size_t errlen);
/* Most tokens a conversation may hold. */
int engine_context(const chat_engine *e);
/* Drafts per speculative step this engine decodes with by default (0: it does not speculate). */
int engine_draft(const chat_engine *e);
/* The context a conversation gets unless told otherwise: the model's, capped so that one
 * conversation's KV cache at full length takes at most a quarter of the memory available
 * now (a multiple of 256). */
int engine_default_context(const model *m);
/* The longest context one conversation's KV cache (in the model's cache types) fits in
 * at the memory available now: a multiple of 256, at most the model's trained context.
 * engine_open refuses an engine_config.n_ctx above it. */
int engine_largest_context(const model *m);
/* Sets the model's cache types by name (NULL: ENGINE_KV_DEFAULT), as engine_open does
 * with its config's: before any sequence state of the model exists. 0, or -1 with the
 * reason in err (an unknown name lists the known ones). */
int engine_set_cache_types(model *m, const char *k, const char *v, char *err, size_t errlen);
/* The conversation is gone: its checkpoints no longer count against its budget and
 * may be evicted first. */
void engine_forget_session(chat_engine *e, const char *session);
/* What the session's checkpoints hold, in RAM and on disk (checkpoint_port.h's
 * ckpt_usage): 0, or -1 when the engine keeps no checkpoints. */
int engine_session_usage(chat_engine *e, const char *session, ckpt_usage *out);
/* Counters as a JSON object (malloc'd): requests, tokens, batching (steps, rows,
 * single-flight savings), queued and active requests, and the checkpoint counters
 * (hits, misses by reason, tokens reused and computed, entries and bytes per tier,
 * evictions). */
char *engine_stats_json(chat_engine *e);

#endif
