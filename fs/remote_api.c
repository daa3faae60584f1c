/* remote_api.c - the OpenAI chat API's JSON (see remote_api.h). */
#include "fs/remote_api.h"
#include "fs/data_url.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *remote_request_json(const char *model, const chat_msg *msgs, int n, const gen_settings *s, int dialect) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    if (model) cJSON_AddStringToObject(o, "model", model);
    cJSON *arr = cJSON_AddArrayToObject(o, "messages");
    for (int i = 0; arr && i < n; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddItemToArray(arr, m);
        cJSON_AddStringToObject(m, "role", msgs[i].role);
        if (msgs[i].images && msgs[i].n_images > 0) { /* the images as image_url parts, then the text */
            cJSON *parts = cJSON_AddArrayToObject(m, "content");
            for (int k = 0; parts && k < msgs[i].n_images; k++) {
                char *url = data_url_encode(msgs[i].images[k].bytes, msgs[i].images[k].len);
                cJSON *p = cJSON_CreateObject(), *iu;
                cJSON_AddItemToArray(parts, p);
                cJSON_AddStringToObject(p, "type", "image_url");
                iu = cJSON_AddObjectToObject(p, "image_url");
                if (iu && url) cJSON_AddStringToObject(iu, "url", url);
                free(url);
            }
            cJSON *t = cJSON_CreateObject();
            cJSON_AddItemToArray(parts, t);
            cJSON_AddStringToObject(t, "type", "text");
            cJSON_AddStringToObject(t, "text", msgs[i].content ? msgs[i].content : "");
        } else
            cJSON_AddStringToObject(m, "content", msgs[i].content);
        /* a past answer's reasoning: llama-server hands it to the template (which decides
         * whether the prompt shows it); other servers are not asked to take the field */
        if (dialect == DIALECT_LLAMACPP && msgs[i].reasoning_content && msgs[i].reasoning_content[0])
            cJSON_AddStringToObject(m, "reasoning_content", msgs[i].reasoning_content);
        cJSON *calls = msgs[i].tool_calls && *msgs[i].tool_calls ? cJSON_Parse(msgs[i].tool_calls) : NULL;
        if (calls) cJSON_AddItemToObject(m, "tool_calls", calls); /* kept in OpenAI's shape already */
        if (msgs[i].tool_call_id) cJSON_AddStringToObject(m, "tool_call_id", msgs[i].tool_call_id);
    }
    cJSON_AddBoolToObject(o, "stream", 1);
    cJSON *so = cJSON_AddObjectToObject(o, "stream_options");
    if (so) cJSON_AddBoolToObject(so, "include_usage", 1); /* the token counts come in a last chunk */
    if (s) {
        cJSON_AddNumberToObject(o, "temperature", s->temperature);
        cJSON_AddNumberToObject(o, "top_p", s->top_p);
        /* 31 bits: llama-server reads a 32-bit seed whose all-ones value means "random" */
        cJSON_AddNumberToObject(o, "seed", (double)(s->seed & 0x7fffffff));
        if (s->max_tokens > 0) cJSON_AddNumberToObject(o, "max_tokens", s->max_tokens);
        if (s->n_stop > 0) {
            cJSON *st = cJSON_AddArrayToObject(o, "stop");
            for (int i = 0; st && i < s->n_stop && i < GEN_MAX_STOP; i++)
                cJSON_AddItemToArray(st, cJSON_CreateString(s->stop[i]));
        }
        if (dialect == DIALECT_LLAMACPP || s->top_k > 0) cJSON_AddNumberToObject(o, "top_k", s->top_k);
        if (dialect == DIALECT_LLAMACPP || s->min_p > 0) cJSON_AddNumberToObject(o, "min_p", s->min_p);
        if (!s->enable_thinking) { /* thinking: false; llama-server, vLLM and SGLang pass it to the template */
            cJSON *kw = cJSON_AddObjectToObject(o, "chat_template_kwargs");
            if (kw) cJSON_AddBoolToObject(kw, "enable_thinking", 0);
        }
        if (dialect == DIALECT_LLAMACPP) {
            if (s->thinking_budget >= 0) cJSON_AddNumberToObject(o, "thinking_budget_tokens", s->thinking_budget);
            cJSON_AddBoolToObject(o, "cache_prompt", s->checkpoints != 0); /* checkpoints: false */
            if (s->ignore_eog) cJSON_AddBoolToObject(o, "ignore_eos", 1);
            cJSON_AddBoolToObject(o, "return_progress", 1); /* status shows the prefill */
        }
        /* the format as the server knows it: OpenAI's response_format where there is one (every
         * server takes it), GBNF only for llama-server (the one that reads it) */
        cJSON *format = s->response_format ? cJSON_Parse(s->response_format) : NULL;
        if (format) cJSON_AddItemToObject(o, "response_format", format);
        else if (s->grammar && dialect == DIALECT_LLAMACPP) cJSON_AddStringToObject(o, "grammar", s->grammar);
        /* the functions offered, and the choice: a function's name as OpenAI's object */
        cJSON *tools = s->tools && *s->tools ? cJSON_Parse(s->tools) : NULL;
        if (cJSON_GetArraySize(tools)) {
            cJSON_AddItemToObject(o, "tools", tools);
            const char *choice = s->tool_choice;
            if (choice && (!strcmp(choice, "auto") || !strcmp(choice, "none") || !strcmp(choice, "required")))
                cJSON_AddStringToObject(o, "tool_choice", choice);
            else if (choice) {
                cJSON *tc = cJSON_AddObjectToObject(o, "tool_choice"), *fn;
                cJSON_AddStringToObject(tc, "type", "function");
                fn = cJSON_AddObjectToObject(tc, "function");
                cJSON_AddStringToObject(fn, "name", choice);
            }
            cJSON_AddBoolToObject(o, "parallel_tool_calls", s->parallel_tool_calls != 0);
        } else
            cJSON_Delete(tools);
    }
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return body;
}

static const char *str_at(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int int_at(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 2e9) return -1;
    return (int)v->valuedouble;
}

/* the message of an error value: an object's "message", or a string */
static const char *error_text(const cJSON *e) {
    if (cJSON_IsString(e)) return e->valuestring;
    if (cJSON_IsObject(e)) return str_at(e, "message");
    return NULL;
}

int remote_parse_chunk(const char *data, size_t len, remote_chunk *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    out->prompt_tokens = out->completion_tokens = out->cached_tokens = -1;
    out->progress_total = out->progress_cache = out->progress_processed = -1;
    out->decode_tokens_per_s = -1;
    cJSON *o = cJSON_ParseWithLength(data, len);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        snprintf(err, errlen, "the server sent a chunk that is not a JSON object: %.80s", data);
        return -1;
    }
    out->json = o;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");
    if (e) out->error = error_text(e) ? error_text(e) : "the server reported an error without a message";
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(o, "choices");
    const cJSON *c0 = cJSON_IsArray(choices) ? cJSON_GetArrayItem(choices, 0) : NULL;
    if (cJSON_IsObject(c0)) {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(c0, "delta");
        if (cJSON_IsObject(d)) {
            out->content = str_at(d, "content");
            out->reasoning = str_at(d, "reasoning_content");
            if (!out->reasoning) out->reasoning = str_at(d, "reasoning"); /* vLLM's newer name */
            const cJSON *tc = cJSON_GetObjectItemCaseSensitive(d, "tool_calls");
            if (cJSON_IsArray(tc)) out->tool_calls = (void *)tc;
        }
        out->finish = str_at(c0, "finish_reason");
    }
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(o, "usage");
    if (cJSON_IsObject(u)) {
        out->prompt_tokens = int_at(u, "prompt_tokens");
        out->completion_tokens = int_at(u, "completion_tokens");
        const cJSON *det = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens_details");
        if (cJSON_IsObject(det)) out->cached_tokens = int_at(det, "cached_tokens");
    }
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "prompt_progress");
    if (cJSON_IsObject(p)) {
        out->progress_total = int_at(p, "total");
        out->progress_cache = int_at(p, "cache");
        out->progress_processed = int_at(p, "processed");
    }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "timings");
    const cJSON *pps = cJSON_IsObject(t) ? cJSON_GetObjectItemCaseSensitive(t, "predicted_per_second") : NULL;
    if (cJSON_IsNumber(pps) && pps->valuedouble >= 0) out->decode_tokens_per_s = pps->valuedouble;
    return 0;
}

void remote_chunk_free(remote_chunk *c) {
    cJSON_Delete(c->json);
    c->json = NULL;
}

int remote_finish_reason(const char *finish) {
    if (!finish) return FINISH_NONE;
    if (!strcmp(finish, "length")) return FINISH_LENGTH;
    return FINISH_EOG; /* "stop" (the end of the turn or a stop string: OpenAI does not say which),
                          "tool_calls", "content_filter" */
}

/* copies printable text (one line, at most outlen - 1 bytes) */
static void copy_line(const char *s, size_t len, char *out, size_t outlen) {
    size_t k = 0;
    while (len > 0 && (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t')) s++, len--;
    for (size_t i = 0; i < len && k + 1 < outlen; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n' || c == '\r') break;
        out[k++] = c < 0x20 || c == 0x7f ? ' ' : (char)c;
    }
    while (k > 0 && out[k - 1] == ' ') k--;
    out[k] = 0;
}

void remote_error_message(const char *body, size_t len, char *out, size_t outlen) {
    if (!outlen) return;
    out[0] = 0;
    cJSON *o = len ? cJSON_ParseWithLength(body, len) : NULL;
    const char *msg = NULL;
    if (cJSON_IsObject(o)) {
        msg = error_text(cJSON_GetObjectItemCaseSensitive(o, "error"));
        if (!msg) msg = str_at(o, "message");
        if (!msg) msg = str_at(o, "detail");
        const cJSON *detail = cJSON_GetObjectItemCaseSensitive(o, "detail"); /* FastAPI's validation list */
        if (!msg && cJSON_IsArray(detail)) {
            msg = error_text(cJSON_GetArrayItem(detail, 0));
            if (!msg) msg = str_at(cJSON_GetArrayItem(detail, 0), "msg");
        }
    }
    if (msg) copy_line(msg, strlen(msg), out, outlen);
    else copy_line(body ? body : "", len, out, outlen);
    cJSON_Delete(o);
}

void remote_models_free(char **ids, int n) {
    for (int i = 0; i < n; i++) free(ids[i]);
    free(ids);
}

int remote_parse_models(const char *body, size_t len, char ***ids, int *n, int *dialect, int *n_ctx, char *err,
                        size_t errlen) {
    *ids = NULL;
    *n = 0;
    *dialect = DIALECT_OPENAI;
    *n_ctx = 0;
    cJSON *o = cJSON_ParseWithLength(body, len);
    const cJSON *data = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, "data") : NULL;
    if (!cJSON_IsArray(data)) {
        snprintf(err, errlen, "the models list is not the OpenAI format (an object with a \"data\" array)");
        cJSON_Delete(o);
        return -1;
    }
    int count = cJSON_GetArraySize(data);
    char **list = calloc(count > 0 ? (size_t)count : 1, sizeof *list);
    if (!list) {
        snprintf(err, errlen, "out of memory");
        cJSON_Delete(o);
        return -1;
    }
    int k = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, data) {
        const char *id = str_at(m, "id");
        if (!id || !(list[k] = strdup(id))) continue;
        if (k == 0) {
            const char *owner = str_at(m, "owned_by");
            if (owner && !strcmp(owner, "llamacpp")) *dialect = DIALECT_LLAMACPP;
            int c = int_at(cJSON_GetObjectItemCaseSensitive(m, "meta"), "n_ctx");
            if (c > 0) *n_ctx = c;
        }
        k++;
    }
    cJSON_Delete(o);
    *ids = list;
    *n = k;
    return 0;
}

/* ---- one reply's stream ---- */

#include <time.h>

double remote_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void remote_stream_init(remote_stream *st, const gen_callbacks *cb, double t_start) {
    memset(st, 0, sizeof *st);
    st->cb = *cb;
    sse_init(&st->sse);
    st->t_start = t_start;
    st->rep.phase = GEN_QUEUED;
    st->rep.prompt_tokens = -1; /* unknown until the server says */
    st->rep.source = "server";
}

void remote_stream_sent(remote_stream *st) {
    st->rep.phase = GEN_PREFILL;
    st->cb.on_progress(st->cb.ud, &st->rep);
}

/* a generated piece (text or reasoning): the first one ends the prefill */
static void count_piece(remote_stream *st, int reasoning) {
    gen_report *r = &st->rep;
    double t = remote_now_ms();
    r->phase = reasoning ? GEN_THINKING : GEN_GENERATING;
    if (reasoning) r->reasoning_tokens++;
    if (r->generated_tokens++ == 0) {
        st->t_first = t;
        r->ttft_ms = t - st->t_start;
        if (r->prompt_tokens >= 0) r->prefill_done = r->prompt_tokens;
    } else if (t > st->t_first) {
        r->decode_tokens_per_s = (r->generated_tokens - 1) / ((t - st->t_first) / 1e3);
    }
}

/* The calls streamed so far up to index `upto` (excluded) go out, complete: a call is
 * done when a later one starts, or the reply ends. */
static void flush_calls(remote_stream *st, int upto) {
    cJSON *calls = st->calls;
    for (; st->calls_sent < upto && st->calls_sent < cJSON_GetArraySize(calls); st->calls_sent++) {
        const cJSON *c = cJSON_GetArrayItem(calls, st->calls_sent);
        const char *name = str_at(c, "name"), *args = str_at(c, "arguments");
        cJSON *parsed = cJSON_Parse(args && *args ? args : "{}");
        char *compact = cJSON_IsObject(parsed) ? cJSON_PrintUnformatted(parsed) : NULL;
        struct tc_call call = {.index = st->calls_sent, .name = (char *)(name ? name : ""),
                               .arguments = compact ? compact : (char *)(args ? args : "{}"),
                               .problem = compact ? NULL : (char *)"the server's arguments are not a JSON object"};
        st->rep.tool_calls++;
        if (st->cb.on_tool_call) st->cb.on_tool_call(st->cb.ud, &call);
        cJSON_free(compact);
        cJSON_Delete(parsed);
    }
}

/* A chunk's tool_calls deltas: [{"index", "id", "function": {"name", "arguments": a piece}}] */
static void take_call_deltas(remote_stream *st, const cJSON *deltas) {
    if (!st->calls) st->calls = cJSON_CreateArray();
    cJSON *calls = st->calls;
    const cJSON *d;
    cJSON_ArrayForEach(d, deltas) {
        int i = int_at(d, "index");
        if (i < 0) i = cJSON_GetArraySize(calls) ? cJSON_GetArraySize(calls) - 1 : 0;
        if (i > 64) continue; /* far past any reply's calls */
        flush_calls(st, i); /* the ones before it are complete */
        while (cJSON_GetArraySize(calls) <= i) {
            cJSON *c = cJSON_CreateObject();
            cJSON_AddStringToObject(c, "arguments", "");
            cJSON_AddItemToArray(calls, c);
        }
        cJSON *c = cJSON_GetArrayItem(calls, i);
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(d, "function");
        const char *name = str_at(fn, "name"), *piece = str_at(fn, "arguments");
        if (name && *name) {
            cJSON_DeleteItemFromObjectCaseSensitive(c, "name");
            cJSON_AddStringToObject(c, "name", name);
        }
        if (piece && *piece) {
            const char *was = str_at(c, "arguments");
            size_t n = strlen(was) + strlen(piece) + 1;
            char *joined = malloc(n);
            if (joined) {
                snprintf(joined, n, "%s%s", was, piece);
                cJSON_DeleteItemFromObjectCaseSensitive(c, "arguments");
                cJSON_AddStringToObject(c, "arguments", joined);
                free(joined);
            }
        }
        if (i >= st->calls_started) {
            st->calls_started = i + 1;
            count_piece(st, 0); /* the call's first piece ends the prefill as a token does */
        }
    }
}

static int on_event(void *ud, const char *data, size_t len) {
    remote_stream *st = ud;
    gen_report *r = &st->rep;
    if (len == 6 && !memcmp(data, "[DONE]", 6)) {
        flush_calls(st, 1 << 30);
        st->ended = 1;
        return 0;
    }
    remote_chunk c;
    if (remote_parse_chunk(data, len, &c, st->fail, sizeof st->fail) != 0) return 1;
    if (c.error) {
        snprintf(st->fail, sizeof st->fail, "the server stopped the reply: %s", c.error);
        remote_chunk_free(&c);
        return 1;
    }
    if (c.progress_total >= 0 && r->generated_tokens == 0) { /* llama-server's prefill progress */
        r->prompt_tokens = c.progress_total;
        r->reused_tokens = c.progress_cache > 0 ? c.progress_cache : 0;
        r->prefill_done = c.progress_processed > 0 ? c.progress_processed : r->reused_tokens;
        r->computed_tokens = r->prefill_done - r->reused_tokens;
        r->phase = GEN_PREFILL;
    }
    if (c.reasoning && *c.reasoning) {
        count_piece(st, 1);
        st->reasoning_bytes += strlen(c.reasoning);
        if (st->cb.on_reasoning) st->cb.on_reasoning(st->cb.ud, c.reasoning, strlen(c.reasoning));
    }
    if (c.content && *c.content) {
        count_piece(st, 0);
        st->cb.on_text(st->cb.ud, c.content, strlen(c.content));
    }
    if (c.tool_calls) take_call_deltas(st, c.tool_calls);
    if (c.finish) {
        st->finish = remote_finish_reason(c.finish);
        flush_calls(st, 1 << 30);
    }
    if (c.prompt_tokens >= 0) { /* usage: the server's own counts replace ours */
        r->prompt_tokens = c.prompt_tokens;
        r->reused_tokens = c.cached_tokens > 0 && c.cached_tokens <= c.prompt_tokens ? c.cached_tokens : 0;
        r->computed_tokens = r->prompt_tokens - r->reused_tokens;
        r->prefill_done = r->prompt_tokens;
    }
    if (c.completion_tokens >= 0) r->generated_tokens = c.completion_tokens;
    if (c.decode_tokens_per_s > 0) r->decode_tokens_per_s = c.decode_tokens_per_s;
    remote_chunk_free(&c);
    st->cb.on_progress(st->cb.ud, r);
    return 0;
}

int remote_stream_feed(remote_stream *st, const char *bytes, size_t n) {
    if (st->fail[0]) return -1;
    int rc = sse_feed(&st->sse, bytes, n, on_event, st);
    if (rc == -1 && !st->fail[0])
        snprintf(st->fail, sizeof st->fail, "the server sent a line longer than %u bytes", SSE_MAX_EVENT);
    return rc ? -1 : 0;
}

void remote_stream_free(remote_stream *st) {
    sse_free(&st->sse);
    cJSON_Delete(st->calls);
    st->calls = NULL;
}
