/* remote_api.h - the OpenAI chat API's JSON, for the remote backend (backend_remote.c):
 * the request a conversation becomes, the stream's chunks, the models list and the
 * error bodies servers send. Pure functions over cJSON, no network, so the tests feed
 * them recorded server output.
 *
 * Servers differ in what they accept beyond the OpenAI fields. The dialect says which
 * extras are sent: llama.cpp's llama-server (it says "owned_by": "llamacpp" in its
 * models list) takes top_k, min_p, cache_prompt, ignore_eos and return_progress; the
 * generic dialect sends top_k and min_p only when they are not off (0), since vLLM,
 * SGLang, ollama and LM Studio take them and a strict server refuses unknown fields. */
#ifndef CHATFS_FS_REMOTE_API_H
#define CHATFS_FS_REMOTE_API_H

#include <stddef.h>

#include "engine/runtime/chat.h"
#include "fs/sse.h"

enum remote_dialect { DIALECT_OPENAI = 0, DIALECT_LLAMACPP };

/* The body of POST URL/chat/completions (stream: true, usage in the last chunk), or
 * NULL when out of memory. malloc'd. */
char *remote_request_json(const char *model, const chat_msg *msgs, int n, const gen_settings *s, int dialect);

/* One chunk of the stream. Strings point into the parsed JSON (valid until
 * remote_chunk_free); a field the chunk lacks is NULL / -1. */
typedef struct {
    void *json;               /* the parsed chunk (cJSON) */
    const char *content;      /* choices[0].delta.content */
    const char *reasoning;    /* choices[0].delta.reasoning_content (or .reasoning) */
    const char *finish;       /* choices[0].finish_reason */
    const char *error;        /* an error object in the stream: its message */
    void *tool_calls;         /* choices[0].delta.tool_calls (a cJSON array in json), NULL: none */
    int prompt_tokens, completion_tokens, cached_tokens; /* usage (cached: prompt_tokens_details) */
    int progress_total, progress_cache, progress_processed; /* llama-server's prompt_progress */
    double decode_tokens_per_s; /* llama-server's timings.predicted_per_second; -1 */
} remote_chunk;

/* 0, or -1 when data is not a JSON object (reason in err). */
int remote_parse_chunk(const char *data, size_t len, remote_chunk *out, char *err, size_t errlen);
void remote_chunk_free(remote_chunk *c);

/* enum gen_finish for a finish_reason ("stop", "length", ...). */
int remote_finish_reason(const char *finish);

/* The message of an error body: {"error": {"message"}}, {"error": "..."}, {"message"},
 * {"detail"} (FastAPI), or else the body's first line of printable text. Into out. */
void remote_error_message(const char *body, size_t len, char *out, size_t outlen);

/* The models a GET URL/models lists: {"data": [{"id", "owned_by", "meta": {"n_ctx"}}]}.
 * ids malloc'd (free with remote_models_free); *dialect DIALECT_LLAMACPP when the
 * first is owned by llamacpp, *n_ctx its meta.n_ctx or 0. 0, or -1 with err. */
int remote_parse_models(const char *body, size_t len, char ***ids, int *n, int *dialect, int *n_ctx, char *err,
                        size_t errlen);
void remote_models_free(char **ids, int n);

/* One reply's stream: the response body's bytes in, the callbacks out. It tracks the
 * report (prefill progress from llama-server's prompt_progress, then the tokens, then
 * the usage: prompt tokens, cached prefix as reused_tokens), passes content to on_text
 * and reasoning to cb.on_reasoning (phase GEN_THINKING while it comes, counted in
 * reasoning_tokens, one per piece as llama-server streams them), gathers the tool calls
 * the server parsed (delta.tool_calls, the arguments in pieces) and gives each to
 * cb.on_tool_call once complete (the next call begins, or the reply ends), and notes how
 * the stream ended. */
typedef struct {
    gen_callbacks cb;
    sse_parser sse;
    gen_report rep;
    double t_start, t_first;  /* ms (CLOCK_MONOTONIC): submit, first token */
    int ended;                /* data: [DONE] came */
    enum gen_finish finish;   /* from the last finish_reason; FINISH_NONE */
    char fail[512];           /* why the stream broke: an error event, a malformed chunk */
    size_t reasoning_bytes;
    void *calls;              /* the tool calls streamed so far (cJSON: [{"name", "arguments"}]) */
    int calls_started, calls_sent; /* ...begun, and given to cb.on_tool_call (each once complete) */
} remote_stream;

double remote_now_ms(void);
/* t_start: when the request was submitted (remote_now_ms), for the TTFT. */
void remote_stream_init(remote_stream *st, const gen_callbacks *cb, double t_start);
/* Sets the phase to GEN_PREFILL (the request is on its way) and reports it. */
void remote_stream_sent(remote_stream *st);
/* 0, or -1 when the stream is broken (st->fail says why; stop reading). */
int remote_stream_feed(remote_stream *st, const char *bytes, size_t n);
void remote_stream_free(remote_stream *st);

#endif
