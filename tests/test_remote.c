/* test_remote.c - the remote backend's parts that need no server: the server-sent
 * events parser (bytes cut anywhere, every line ending, comments, the size cap), the
 * chunks of llama-server's and vLLM's streams (content, reasoning apart, usage with the
 * cached prefix, prefill progress, error events), a whole stream through
 * remote_stream, the request body per dialect, the error bodies servers send, the
 * models list, and what backend_remote_open refuses before it reaches the network; then
 * the backend's worker, queue and cancellation against a few lines of HTTP on a loopback
 * socket (here so that the sanitizer builds cover those threads). The end-to-end runs
 * against a real llama-server are tests/t_remote.sh. */
#define _GNU_SOURCE /* strcasestr */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fs/backend.h"
#include "fs/remote_api.h"
#include "fs/sse.h"
#include "tests/check.h"

/* ---- sse ---- */

typedef struct {
    char events[16][256];
    int n;
} got_events;

static int collect_event(void *ud, const char *data, size_t len) {
    got_events *g = ud;
    if (g->n < 16) snprintf(g->events[g->n++], 256, "%.*s", (int)len, data);
    return 0;
}

static void feed_in_pieces(const char *text, size_t piece, got_events *g) {
    sse_parser p;
    sse_init(&p);
    memset(g, 0, sizeof *g);
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i += piece) {
        size_t k = n - i < piece ? n - i : piece;
        CHECK(sse_feed(&p, text + i, k, collect_event, g) == 0, "feed at %zu", i);
    }
    sse_free(&p);
}

static void test_sse(void) {
    const char *stream = ": keep-alive comment\r\n"
                         "data: {\"a\":1}\r\n\r\n"
                         "event: message\n"
                         "id: 7\n"
                         "data: first line\n"
                         "data:second line\n"
                         "\n"
                         "data: cr only\r\r"
                         "retry: 100\n\n" /* no data: no event */
                         "data\n\n"       /* a field without a colon: data "" */
                         "data: [DONE]\n\n";
    for (size_t piece = 1; piece <= strlen(stream); piece = piece < 8 ? piece + 1 : piece * 2) {
        got_events g;
        feed_in_pieces(stream, piece, &g);
        CHECK(g.n == 5, "pieces of %zu: %d events", piece, g.n);
        CHECK(!strcmp(g.events[0], "{\"a\":1}"), "piece %zu: [0] '%s'", piece, g.events[0]);
        CHECK(!strcmp(g.events[1], "first line\nsecond line"), "piece %zu: [1] '%s'", piece, g.events[1]);
        CHECK(!strcmp(g.events[2], "cr only"), "piece %zu: [2] '%s'", piece, g.events[2]);
        CHECK(!strcmp(g.events[3], ""), "piece %zu: [3] '%s'", piece, g.events[3]);
        CHECK(!strcmp(g.events[4], "[DONE]"), "piece %zu: [4] '%s'", piece, g.events[4]);
    }
    /* an event that never ends is not dispatched; a line past the cap fails, and stays failed */
    sse_parser p;
    sse_init(&p);
    got_events g = {0};
    CHECK(sse_feed(&p, "data: unfinished", 16, collect_event, &g) == 0 && g.n == 0, "unfinished event");
    size_t big = SSE_MAX_EVENT + 10;
    char *junk = malloc(big);
    memset(junk, 'x', big);
    CHECK(sse_feed(&p, junk, big, collect_event, &g) == -1, "a line past the cap fails");
    CHECK(sse_feed(&p, "\n\n", 2, collect_event, &g) == -1 && g.n == 0, "and stays failed");
    free(junk);
    sse_free(&p);
}

/* ---- chunks and streams ---- */

static void test_chunks(void) {
    char err[256];
    remote_chunk c;
    /* llama-server: content, then the finish chunk, then usage with timings */
    const char *a = "{\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"content\":\"42\"}}],"
                    "\"object\":\"chat.completion.chunk\"}";
    REQUIRE(remote_parse_chunk(a, strlen(a), &c, err, sizeof err) == 0, "%s", err);
    CHECK(c.content && !strcmp(c.content, "42") && !c.reasoning && !c.finish && !c.error, "content chunk");
    CHECK(c.prompt_tokens == -1 && c.progress_total == -1, "no usage, no progress");
    remote_chunk_free(&c);
    const char *u = "{\"choices\":[],\"usage\":{\"completion_tokens\":3,\"prompt_tokens\":25,\"total_tokens\":28,"
                    "\"prompt_tokens_details\":{\"cached_tokens\":20}},\"timings\":{\"predicted_per_second\":51.5}}";
    REQUIRE(remote_parse_chunk(u, strlen(u), &c, err, sizeof err) == 0, "%s", err);
    CHECK(c.prompt_tokens == 25 && c.completion_tokens == 3 && c.cached_tokens == 20, "usage %d %d %d",
          c.prompt_tokens, c.completion_tokens, c.cached_tokens);
    CHECK(c.decode_tokens_per_s == 51.5, "timings %g", c.decode_tokens_per_s);
    CHECK(!c.content, "no choices, no content");
    remote_chunk_free(&c);
    /* vLLM: reasoning under its newer name; null content */
    const char *v = "{\"choices\":[{\"index\":0,\"delta\":{\"reasoning\":\"Let me add.\",\"content\":null},"
                    "\"finish_reason\":null}]}";
    REQUIRE(remote_parse_chunk(v, strlen(v), &c, err, sizeof err) == 0, "%s", err);
    CHECK(c.reasoning && !strcmp(c.reasoning, "Let me add.") && !c.content, "vLLM reasoning");
    remote_chunk_free(&c);
    const char *e = "{\"error\":{\"code\":500,\"message\":\"decode() failed\",\"type\":\"server_error\"}}";
    REQUIRE(remote_parse_chunk(e, strlen(e), &c, err, sizeof err) == 0, "%s", err);
    CHECK(c.error && !strcmp(c.error, "decode() failed"), "error event");
    remote_chunk_free(&c);
    CHECK(remote_parse_chunk("[1,2]", 5, &c, err, sizeof err) == -1 && strstr(err, "not a JSON object"), "%s", err);
    CHECK(remote_parse_chunk("{\"choices\":", 11, &c, err, sizeof err) == -1, "truncated chunk");
    CHECK(remote_finish_reason("length") == FINISH_LENGTH && remote_finish_reason("stop") == FINISH_EOG &&
              remote_finish_reason(NULL) == FINISH_NONE, "finish reasons");
}

typedef struct {
    char text[512], reasoning[512];
    gen_report last;
    int progress_calls;
} sink;

static void s_text(void *ud, const char *t, size_t n) { strncat(((sink *)ud)->text, t, n); }
static void s_reasoning(void *ud, const char *t, size_t n) { strncat(((sink *)ud)->reasoning, t, n); }
static void s_progress(void *ud, const gen_report *r) {
    sink *s = ud;
    s->last = *r;
    s->progress_calls++;
}
static void s_done(void *ud, const gen_report *r, const char *e) { (void)ud, (void)r, (void)e; }

static void test_stream(void) {
    /* as llama-server streams a reply with return_progress and usage (its format: one
     * "data: JSON\n\n" per chunk), with reasoning_content as its --reasoning-format gives it */
    const char *body =
        "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null}}],"
        "\"prompt_progress\":{\"total\":30,\"cache\":24,\"processed\":24,\"time_ms\":0}}\n\n"
        "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null}}],"
        "\"prompt_progress\":{\"total\":30,\"cache\":24,\"processed\":30,\"time_ms\":3}}\n\n"
        "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"reasoning_content\":\"17 + 25\"}}]}\n\n"
        "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"reasoning_content\":\" = 42\"}}]}\n\n"
        "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"content\":\"The answer\"}}]}\n\n"
        "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"content\":\" is 42.\"}}]}\n\n"
        "data: {\"choices\":[{\"finish_reason\":\"length\",\"index\":0,\"delta\":{}}]}\n\n"
        "data: {\"choices\":[],\"usage\":{\"completion_tokens\":6,\"prompt_tokens\":30,\"total_tokens\":36,"
        "\"prompt_tokens_details\":{\"cached_tokens\":24}},\"timings\":{\"predicted_per_second\":40.0}}\n\n"
        "data: [DONE]\n\n";
    for (size_t piece = 1; piece <= strlen(body); piece *= 3) {
        sink s = {0};
        gen_callbacks cb = {.on_text = s_text, .on_progress = s_progress, .on_done = s_done, .ud = &s,
                            .on_reasoning = s_reasoning};
        remote_stream st;
        remote_stream_init(&st, &cb, remote_now_ms());
        CHECK(st.rep.prompt_tokens == -1 && st.rep.phase == GEN_QUEUED, "unknown until the server says");
        remote_stream_sent(&st);
        CHECK(s.last.phase == GEN_PREFILL, "sent: prefill");
        for (size_t i = 0; i < strlen(body); i += piece) {
            size_t k = strlen(body) - i < piece ? strlen(body) - i : piece;
            CHECK(remote_stream_feed(&st, body + i, k) == 0, "feed: %s", st.fail);
        }
        CHECK(!strcmp(s.text, "The answer is 42."), "piece %zu: text '%s'", piece, s.text);
        CHECK(!strcmp(s.reasoning, "17 + 25 = 42"), "piece %zu: reasoning apart: '%s'", piece, s.reasoning);
        CHECK(st.ended && st.finish == FINISH_LENGTH, "ended %d finish %d", st.ended, st.finish);
        CHECK(s.last.prompt_tokens == 30 && s.last.reused_tokens == 24 && s.last.computed_tokens == 6 &&
                  s.last.generated_tokens == 6 && s.last.decode_tokens_per_s == 40.0,
              "report: prompt %d reused %d computed %d generated %d %.1f tok/s", s.last.prompt_tokens,
              s.last.reused_tokens, s.last.computed_tokens, s.last.generated_tokens, s.last.decode_tokens_per_s);
        CHECK(s.last.phase == GEN_GENERATING && s.last.ttft_ms >= 0, "phase %d", s.last.phase);
        CHECK(s.last.reasoning_tokens == 2, "two reasoning pieces: %d", s.last.reasoning_tokens);
        remote_stream_free(&st);
    }
    /* the prefill as llama-server reports it, before any token */
    {
        sink s = {0};
        gen_callbacks cb = {.on_text = s_text, .on_progress = s_progress, .on_done = s_done, .ud = &s};
        remote_stream st;
        remote_stream_init(&st, &cb, remote_now_ms());
        const char *p = "data: {\"choices\":[],\"prompt_progress\":{\"total\":100,\"cache\":40,\"processed\":70}}\n\n";
        CHECK(remote_stream_feed(&st, p, strlen(p)) == 0, "%s", st.fail);
        CHECK(s.last.phase == GEN_PREFILL && s.last.prompt_tokens == 100 && s.last.prefill_done == 70 &&
                  s.last.reused_tokens == 40,
              "prefill %d/%d reused %d", s.last.prefill_done, s.last.prompt_tokens, s.last.reused_tokens);
        /* an error event mid-stream breaks it, with the server's message */
        const char *e = "data: {\"error\":{\"code\":500,\"message\":\"decode() failed\"}}\n\n";
        CHECK(remote_stream_feed(&st, e, strlen(e)) == -1 && strstr(st.fail, "decode() failed"), "fail: %s", st.fail);
        CHECK(remote_stream_feed(&st, "data: [DONE]\n\n", 14) == -1 && !st.ended, "stays broken");
        remote_stream_free(&st);
    }
    /* reasoning with no hook is dropped, never put into the text */
    {
        sink s = {0};
        gen_callbacks cb = {.on_text = s_text, .on_progress = s_progress, .on_done = s_done, .ud = &s};
        remote_stream st;
        remote_stream_init(&st, &cb, remote_now_ms());
        const char *r = "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hmm\"}}]}\n\n"
                        "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"}}]}\n\n"
                        "data: not json\n\n";
        CHECK(remote_stream_feed(&st, r, strlen(r)) == -1 && strstr(st.fail, "not a JSON object"), "%s", st.fail);
        CHECK(!strcmp(s.text, "ok") && st.reasoning_bytes == 3, "text '%s'", s.text);
        remote_stream_free(&st);
    }
}

/* Tool calls as llama-server streams them (--jinja, a template with tools): the id and
 * name first, the arguments in pieces, the next call by its index, finish "tool_calls". */
typedef struct {
    char names[4][32], args[4][128];
    int index[4], n;
} call_sink;
static void s_call(void *ud, const struct tc_call *c) {
    call_sink *s = ud;
    if (s->n < 4) {
        snprintf(s->names[s->n], sizeof s->names[0], "%s", c->name);
        snprintf(s->args[s->n], sizeof s->args[0], "%s", c->arguments);
        s->index[s->n] = c->index;
    }
    s->n++;
}
static void s_nothing(void *ud, const char *t, size_t n) { (void)ud, (void)t, (void)n; }
static void s_no_progress(void *ud, const gen_report *r) { (void)ud, (void)r; }

static void test_stream_tool_calls(void) {
    const char *body =
        "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,"
        "\"id\":\"Xa1\",\"type\":\"function\",\"function\":{\"name\":\"calculate\",\"arguments\":\"\"}}]}}]}\n\n"
        "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,"
        "\"function\":{\"arguments\":\"{\\\"a\\\": 347, \"}}]}}]}\n\n"
        "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,"
        "\"function\":{\"arguments\":\"\\\"op\\\": \\\"*\\\", \\\"b\\\": 29}\"}}]}}]}\n\n"
        "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,"
        "\"id\":\"Xb2\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":"
        "\"{\\\"city\\\": \\\"Oslo\\\"}\"}}]}}]}\n\n"
        "data: {\"choices\":[{\"finish_reason\":\"tool_calls\",\"index\":0,\"delta\":{}}]}\n\n"
        "data: [DONE]\n\n";
    for (size_t piece = 1; piece <= strlen(body); piece *= 5) {
        call_sink s = {0};
        gen_callbacks cb = {.on_text = s_nothing, .on_progress = s_no_progress, .on_done = s_done, .ud = &s,
                            .on_tool_call = s_call};
        remote_stream st;
        remote_stream_init(&st, &cb, remote_now_ms());
        int after_first = -1;
        for (size_t i = 0; i < strlen(body); i += piece) {
            size_t k = strlen(body) - i < piece ? strlen(body) - i : piece;
            CHECK(remote_stream_feed(&st, body + i, k) == 0, "feed: %s", st.fail);
            if (after_first < 0 && i + k >= (size_t)(strstr(body, "Xb2") - body)) after_first = s.n;
        }
        CHECK(s.n == 2 && st.rep.tool_calls == 2 && s.index[0] == 0 && s.index[1] == 1, "piece %zu: %d calls", piece,
              s.n);
        CHECK(!strcmp(s.names[0], "calculate") && !strcmp(s.args[0], "{\"a\":347,\"op\":\"*\",\"b\":29}") &&
                  !strcmp(s.names[1], "get_weather") && !strcmp(s.args[1], "{\"city\":\"Oslo\"}"),
              "piece %zu: %s(%s) %s(%s)", piece, s.names[0], s.args[0], s.names[1], s.args[1]);
        CHECK(after_first == 0, "piece %zu: no call given before it is complete (%d)", piece, after_first);
        CHECK(st.ended && st.finish == FINISH_EOG, "finish tool_calls: %d", st.finish);
        remote_stream_free(&st);
    }
}

/* ---- requests, errors, models ---- */

static void test_request(void) {
    chat_msg m[] = {{"system", "Answer briefly.", NULL}, {"user", "What is 17 + 25?", NULL}, {"assistant", "42", "17 + 25 = 42"},
                    {"user", "Add 5 to that.", NULL}};
    gen_settings s;
    gen_settings_defaults(&s);
    s.temperature = 0.5f;
    s.max_tokens = 64;
    s.stop[0] = "\n\n";
    s.n_stop = 1;
    s.seed = 0x100000007ull; /* past 31 bits */
    s.checkpoints = 0;
    s.top_k = 0;
    s.min_p = 0;
    char *body = remote_request_json("m1", m, 4, &s, DIALECT_OPENAI);
    cJSON *o = cJSON_Parse(body);
    REQUIRE(o, "request JSON: %s", body);
    CHECK(!strcmp(cJSON_GetObjectItem(o, "model")->valuestring, "m1"), "model");
    cJSON *msgs = cJSON_GetObjectItem(o, "messages");
    CHECK(cJSON_GetArraySize(msgs) == 4, "4 messages");
    CHECK(!strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 3), "content")->valuestring, "Add 5 to that."), "order");
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(o, "stream")), "stream");
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "stream_options"), "include_usage")), "usage asked");
    CHECK(cJSON_GetObjectItem(o, "max_tokens")->valueint == 64, "max_tokens");
    CHECK(cJSON_GetObjectItem(o, "seed")->valuedouble == 7, "seed in 31 bits: %g", cJSON_GetObjectItem(o, "seed")->valuedouble);
    CHECK(!strcmp(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "stop"), 0)->valuestring, "\n\n"), "stop");
    CHECK(!cJSON_GetObjectItem(o, "top_k") && !cJSON_GetObjectItem(o, "min_p"), "off samplers not sent to a strict server");
    CHECK(!cJSON_GetObjectItem(o, "cache_prompt") && !cJSON_GetObjectItem(o, "return_progress"), "no llama.cpp extras");
    CHECK(!cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 2), "reasoning_content") &&
              !cJSON_GetObjectItem(o, "chat_template_kwargs") && !cJSON_GetObjectItem(o, "thinking_budget_tokens"),
          "thinking on (the default): no reasoning fields for a strict server");
    cJSON_Delete(o);
    free(body);
    s.top_k = 40;
    s.max_tokens = 0;
    s.n_stop = 0;
    s.enable_thinking = 0;
    s.thinking_budget = 16;
    body = remote_request_json("m1", m, 4, &s, DIALECT_LLAMACPP);
    o = cJSON_Parse(body);
    REQUIRE(o, "request JSON: %s", body);
    CHECK(cJSON_GetObjectItem(o, "top_k")->valueint == 40 && cJSON_GetObjectItem(o, "min_p"), "llama.cpp samplers");
    CHECK(cJSON_IsFalse(cJSON_GetObjectItem(o, "cache_prompt")), "checkpoints false: cache_prompt false");
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(o, "return_progress")), "progress asked");
    CHECK(!cJSON_GetObjectItem(o, "max_tokens") && !cJSON_GetObjectItem(o, "stop"), "unset limits not sent");
    cJSON *past = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "messages"), 2), "reasoning_content");
    CHECK(cJSON_IsString(past) && !strcmp(past->valuestring, "17 + 25 = 42"), "a past answer's reasoning_content");
    CHECK(cJSON_IsFalse(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "chat_template_kwargs"), "enable_thinking")),
          "thinking false: chat_template_kwargs.enable_thinking false");
    CHECK(cJSON_GetObjectItem(o, "thinking_budget_tokens") &&
              cJSON_GetObjectItem(o, "thinking_budget_tokens")->valueint == 16, "thinking_budget_tokens");
    cJSON_Delete(o);
    free(body);
    /* tools, a named choice, and a history with calls and a result, in OpenAI's shape */
    chat_msg t[] = {{"user", "347 * 29?"},
                    {"assistant", "", NULL, "[{\"id\": \"call_2_1\", \"type\": \"function\", \"function\": "
                                             "{\"name\": \"calculate\", \"arguments\": \"{}\"}}]"},
                    {"tool", "10063", NULL, NULL, "call_2_1"}};
    s.tools = "[{\"type\": \"function\", \"function\": {\"name\": \"calculate\"}}]";
    s.tool_choice = "calculate";
    s.parallel_tool_calls = 0;
    body = remote_request_json("m1", t, 3, &s, DIALECT_OPENAI);
    o = cJSON_Parse(body);
    REQUIRE(o, "request JSON: %s", body);
    cJSON *tm = cJSON_GetObjectItem(o, "messages");
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(o, "tools")) == 1 &&
              !strcmp(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "tool_choice"), "function"), "name")
                          ->valuestring,
                      "calculate") &&
              cJSON_IsFalse(cJSON_GetObjectItem(o, "parallel_tool_calls")),
          "tools, tool_choice, parallel_tool_calls: %s", body);
    CHECK(!strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(tm, 1), "tool_calls"), 0),
                                      "id")
                      ->valuestring,
                  "call_2_1") &&
              !strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(tm, 2), "tool_call_id")->valuestring, "call_2_1") &&
              !strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(tm, 2), "role")->valuestring, "tool"),
          "the calls and the result: %s", body);
    cJSON_Delete(o);
    free(body);
    s.tool_choice = "required";
    body = remote_request_json("m1", t, 3, &s, DIALECT_OPENAI);
    o = cJSON_Parse(body);
    CHECK(o && !strcmp(cJSON_GetObjectItem(o, "tool_choice")->valuestring, "required"), "required: %s", body);
    cJSON_Delete(o);
    free(body);
}

static void test_errors(void) {
    char out[128];
    struct {
        const char *body, *want;
    } cases[] = {
        {"{\"error\":{\"code\":400,\"message\":\"the request exceeds the available context size\",\"type\":\"x\"}}",
         "the request exceeds the available context size"},
        {"{\"error\":\"model 'x' not found\"}", "model 'x' not found"},                         /* ollama */
        {"{\"object\":\"error\",\"message\":\"The model `x` does not exist.\",\"code\":404}", "The model `x` does not exist."}, /* vLLM */
        {"{\"detail\":\"Not Found\"}", "Not Found"},                                           /* FastAPI */
        {"{\"detail\":[{\"msg\":\"field required\"}]}", "field required"},
        {"<html><body>502 Bad Gateway</body></html>\nmore", "<html><body>502 Bad Gateway</body></html>"},
        {"", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        remote_error_message(cases[i].body, strlen(cases[i].body), out, sizeof out);
        CHECK(!strcmp(out, cases[i].want), "case %zu: '%s'", i, out);
    }
    char tiny[8];
    remote_error_message("{\"error\":\"a long message here\"}", 31, tiny, sizeof tiny);
    CHECK(!strcmp(tiny, "a long"), "cut to the buffer: '%s'", tiny);
}

static void test_models(void) {
    char **ids, err[256];
    int n, dialect, n_ctx;
    const char *ll = "{\"models\":[],\"object\":\"list\",\"data\":[{\"id\":\"chatfs-default.gguf\",\"object\":\"model\","
                     "\"owned_by\":\"llamacpp\",\"meta\":{\"n_ctx\":4096}}]}";
    REQUIRE(remote_parse_models(ll, strlen(ll), &ids, &n, &dialect, &n_ctx, err, sizeof err) == 0, "%s", err);
    CHECK(n == 1 && !strcmp(ids[0], "chatfs-default.gguf") && dialect == DIALECT_LLAMACPP && n_ctx == 4096,
          "llama-server list: %d %d %d", n, dialect, n_ctx);
    remote_models_free(ids, n);
    const char *vl = "{\"object\":\"list\",\"data\":[{\"id\":\"Qwen/Qwen3.5-9B\",\"owned_by\":\"vllm\"},{\"id\":\"b\"},{\"x\":1}]}";
    REQUIRE(remote_parse_models(vl, strlen(vl), &ids, &n, &dialect, &n_ctx, err, sizeof err) == 0, "%s", err);
    CHECK(n == 2 && !strcmp(ids[1], "b") && dialect == DIALECT_OPENAI && n_ctx == 0, "vLLM list");
    remote_models_free(ids, n);
    CHECK(remote_parse_models("{\"models\":[]}", 13, &ids, &n, &dialect, &n_ctx, err, sizeof err) == -1 &&
              strstr(err, "data"), "%s", err);
}

/* refused before any connection: the URL, the key file */
static void test_open_refusals(void) {
    char err[512];
    remote_config c = {"ftp://127.0.0.1/v1", NULL, NULL, 2};
    CHECK(!backend_remote_open(&c, err, sizeof err) && strstr(err, "http:// or https://"), "%s", err);
    c.url = "not a url at all";
    CHECK(!backend_remote_open(&c, err, sizeof err) && strstr(err, "not a URL"), "%s", err);
    c.url = "http://127.0.0.1:9/v1";
    c.api_key_file = "/nonexistent/key";
    CHECK(!backend_remote_open(&c, err, sizeof err) && strstr(err, "cannot read the API key file"), "%s", err);
    char path[] = "/tmp/chatfs-key-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0, "mkstemp");
    CHECK(write(fd, "# only a comment\n\n", 18) == 18, "write");
    close(fd);
    c.api_key_file = path;
    CHECK(!backend_remote_open(&c, err, sizeof err) && strstr(err, "holds no key"), "%s", err);
    unlink(path);
}

/* ---- the worker against a loopback server ---- */

static int listen_fd, port;
static int hang_started; /* "hang" requests the server has read whole */
static int hang_closed;  /* a "hang" request saw its client close the connection */
static pthread_mutex_t srv_mu = PTHREAD_MUTEX_INITIALIZER;

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits (at most 10 s: sanitizer builds on a busy machine are slow) until the server has
 * read n "hang" requests whole. */
static void wait_hangs_started(int n) {
    for (int w = 0; w < 10000; w += 5) {
        pthread_mutex_lock(&srv_mu);
        int started = hang_started;
        pthread_mutex_unlock(&srv_mu);
        if (started >= n) return;
        sleep_ms(5);
    }
}

static void send_str(int fd, const char *s) {
    for (size_t n = strlen(s), k; n > 0; s += k, n -= k)
        if ((ssize_t)(k = (size_t)send(fd, s, n, MSG_NOSIGNAL)) <= 0 || k > n) return;
}

static void send_chunk(int fd, const char *field, const char *text) {
    char ev[256];
    snprintf(ev, sizeof ev, "data: {\"choices\":[{\"index\":0,\"delta\":{\"%s\":\"%s\"}}]}\n\n", field, text);
    send_str(fd, ev);
}

/* One connection: GET /v1/models, or POST /v1/chat/completions whose last message says
 * what to do: "slow" (5 words, 10 ms apart), "think" (reasoning, then words), "hang"
 * (headers, then nothing until the client goes), "cut" (3 words, then the connection
 * closes without an end), "fail" (HTTP 503 with an error body). */
static void *serve_one(void *arg) {
    int fd = (int)(intptr_t)arg;
    char req[65536];
    size_t n = 0;
    ssize_t k;
    char *end = NULL;
    while (n < sizeof req - 1 && (k = recv(fd, req + n, sizeof req - 1 - n, 0)) > 0) {
        n += (size_t)k;
        req[n] = 0;
        if ((end = strstr(req, "\r\n\r\n"))) {
            const char *cl = strcasestr(req, "content-length:");
            size_t want = cl ? (size_t)atol(cl + 15) : 0;
            if (n >= (size_t)(end + 4 - req) + want) break;
        }
    }
    if (!strncmp(req, "GET /v1/models", 14)) {
        const char *body = "{\"object\":\"list\",\"data\":[{\"id\":\"loop\",\"owned_by\":\"test\"}]}";
        char head[256];
        snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                 "Connection: close\r\n\r\n", strlen(body));
        send_str(fd, head);
        send_str(fd, body);
    } else {
        const char *body = end ? end : "", *what = "slow";
        const char *kinds[] = {"hang", "cut", "fail", "think"};
        for (int i = 0; i < 4; i++) {
            char pat[32];
            snprintf(pat, sizeof pat, "\"content\":\"%s\"", kinds[i]);
            if (strstr(body, pat)) what = kinds[i];
        }
        if (!strcmp(what, "fail")) {
            const char *body = "{\"error\":{\"message\":\"overloaded, try later\",\"code\":503}}";
            char head[256];
            snprintf(head, sizeof head, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n", strlen(body));
            send_str(fd, head);
            send_str(fd, body);
        } else {
            send_str(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n");
            if (!strcmp(what, "hang")) {
                char c;
                pthread_mutex_lock(&srv_mu);
                hang_started++;
                pthread_mutex_unlock(&srv_mu);
                while (recv(fd, &c, 1, 0) > 0) {
                }
                pthread_mutex_lock(&srv_mu);
                hang_closed++;
                pthread_mutex_unlock(&srv_mu);
            } else {
                if (!strcmp(what, "think")) send_chunk(fd, "reasoning_content", "adding up");
                for (int i = 1; i <= (strcmp(what, "cut") ? 5 : 3); i++) {
                    char w[16];
                    snprintf(w, sizeof w, " w%d", i);
                    send_chunk(fd, "content", w);
                    sleep_ms(10);
                }
                if (strcmp(what, "cut")) {
                    send_str(fd, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n");
                    send_str(fd, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":5,"
                                 "\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\ndata: [DONE]\n\n");
                }
            }
        }
    }
    close(fd);
    return NULL;
}

static void *serve(void *arg) {
    (void)arg;
    for (;;) {
        int fd = accept(listen_fd, NULL, NULL);
        if (fd < 0) return NULL; /* the listening socket was shut down */
        pthread_t t;
        if (pthread_create(&t, NULL, serve_one, (void *)(intptr_t)fd) == 0) pthread_detach(t);
        else close(fd);
    }
}

typedef struct {
    pthread_mutex_t mu;
    char text[256], reasoning[64], error[256];
    int dones, finish, saw_progress;
    gen_report rep;
} req_sink;

static void r_text(void *ud, const char *t, size_t n) {
    req_sink *s = ud;
    pthread_mutex_lock(&s->mu);
    strncat(s->text, t, n);
    pthread_mutex_unlock(&s->mu);
}
static void r_reasoning(void *ud, const char *t, size_t n) {
    req_sink *s = ud;
    pthread_mutex_lock(&s->mu);
    strncat(s->reasoning, t, n);
    pthread_mutex_unlock(&s->mu);
}
static void r_progress(void *ud, const gen_report *r) {
    req_sink *s = ud;
    pthread_mutex_lock(&s->mu);
    s->saw_progress++;
    s->rep = *r;
    pthread_mutex_unlock(&s->mu);
}
static void r_done(void *ud, const gen_report *r, const char *e) {
    req_sink *s = ud;
    pthread_mutex_lock(&s->mu);
    s->dones++;
    s->finish = r->finish;
    s->rep = *r;
    if (e) snprintf(s->error, sizeof s->error, "%s", e);
    pthread_mutex_unlock(&s->mu);
}

static int dones(req_sink *s) {
    pthread_mutex_lock(&s->mu);
    int d = s->dones;
    pthread_mutex_unlock(&s->mu);
    return d;
}

static int wait_dones(req_sink *s, int n, int ms) {
    for (int t = 0; t < ms && dones(s) < n; t += 5) sleep_ms(5);
    return dones(s) >= n;
}

static uint64_t submit_text(fs_backend *b, const char *text, req_sink *s) {
    chat_msg m = {"user", text, NULL};
    gen_settings gs;
    gen_settings_defaults(&gs);
    gen_callbacks cb = {.on_text = r_text, .on_progress = r_progress, .on_done = r_done, .ud = s,
                        .on_reasoning = r_reasoning};
    char err[256];
    uint64_t id = b->submit(b, &m, 1, &gs, &cb, err, sizeof err);
    CHECK(id, "submit: %s", err);
    return id;
}

/* the value of "key": N in the backend's stats */
static int stat_of(fs_backend *b, const char *key) {
    char *js = b->stats_json(b);
    cJSON *o = cJSON_Parse(js);
    cJSON *v = cJSON_GetObjectItem(o, key);
    int n = cJSON_IsNumber(v) ? v->valueint : -1;
    cJSON_Delete(o);
    free(js);
    return n;
}

static void test_worker(void) {
    listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    REQUIRE(listen_fd >= 0 && bind(listen_fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(listen_fd, 64) == 0 &&
                getsockname(listen_fd, (struct sockaddr *)&a, &al) == 0,
            "loopback listener");
    port = ntohs(a.sin_port);
    pthread_t srv;
    REQUIRE(pthread_create(&srv, NULL, serve, NULL) == 0, "server thread");
    char url[64], err[512];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/", port); /* a trailing / is fine */
    remote_config cfg = {url, NULL, NULL, 2};
    fs_backend *b = backend_remote_open(&cfg, err, sizeof err);
    REQUIRE(b, "open: %s", err);
    CHECK(!strcmp(b->name, "remote") && !b->count_tokens, "the server counts tokens: no count_tokens");

    /* three at once with two in flight: the third waits, all three finish */
    req_sink s[3];
    for (int i = 0; i < 3; i++) memset(&s[i], 0, sizeof s[i]), pthread_mutex_init(&s[i].mu, NULL);
    for (int i = 0; i < 3; i++) submit_text(b, "slow", &s[i]);
    sleep_ms(20);
    int inflight = stat_of(b, "in_flight"), queued = stat_of(b, "queued");
    CHECK(inflight == 2 && queued == 1, "two in flight (%d), one queued (%d)", inflight, queued);
    for (int i = 0; i < 3; i++) {
        CHECK(wait_dones(&s[i], 1, 5000), "request %d finished", i);
        CHECK(!strcmp(s[i].text, " w1 w2 w3 w4 w5") && !s[i].error[0] && s[i].finish == FINISH_EOG,
              "request %d: '%s' %s", i, s[i].text, s[i].error);
        CHECK(s[i].rep.prompt_tokens == 9 && s[i].rep.reused_tokens == 4 && s[i].rep.generated_tokens == 5 &&
                  s[i].rep.phase == GEN_DONE,
              "usage %d %d %d", s[i].rep.prompt_tokens, s[i].rep.reused_tokens, s[i].rep.generated_tokens);
    }
    /* reasoning apart */
    req_sink t = {0};
    pthread_mutex_init(&t.mu, NULL);
    submit_text(b, "think", &t);
    CHECK(wait_dones(&t, 1, 5000) && !strcmp(t.reasoning, "adding up") && !strcmp(t.text, " w1 w2 w3 w4 w5"),
          "reasoning '%s' text '%s'", t.reasoning, t.text);
    CHECK(t.rep.reasoning_tokens == 1, "reasoning tokens %d", t.rep.reasoning_tokens);
    /* an error answer and a cut stream */
    req_sink f = {0}, c = {0};
    pthread_mutex_init(&f.mu, NULL);
    pthread_mutex_init(&c.mu, NULL);
    submit_text(b, "fail", &f);
    submit_text(b, "cut", &c);
    CHECK(wait_dones(&f, 1, 5000) && !strcmp(f.error, "the server answered HTTP 503: overloaded, try later") &&
              f.finish == FINISH_ERROR,
          "503: '%s'", f.error);
    CHECK(wait_dones(&c, 1, 5000) && strstr(c.error, "closed the connection after 3 tokens") &&
              !strcmp(c.text, " w1 w2 w3"),
          "cut: '%s' '%s'", c.error, c.text);
    /* cancel in flight and queued: on_done at once, the connection closed */
    req_sink h[4], late = {0};
    uint64_t id[4];
    for (int i = 0; i < 4; i++) memset(&h[i], 0, sizeof h[i]), pthread_mutex_init(&h[i].mu, NULL);
    pthread_mutex_init(&late.mu, NULL);
    for (int i = 0; i < 4; i++) id[i] = submit_text(b, "hang", &h[i]); /* 0, 1 in flight; 2, 3 queued */
    wait_hangs_started(2); /* in flight means sent: a request cancelled before the server read it never hangs */
    b->cancel(b, id[3]); /* the queue's last */
    CHECK(wait_dones(&h[3], 1, 1000) && h[3].finish == FINISH_CANCELLED && !h[3].error[0], "queued cancel");
    submit_text(b, "slow", &late); /* queued behind 2 */
    CHECK(stat_of(b, "queued") == 2, "2 and the late one queued: %d", stat_of(b, "queued"));
    b->cancel(b, id[0]); /* in flight: 2 starts */
    CHECK(wait_dones(&h[0], 1, 1000) && h[0].finish == FINISH_CANCELLED, "in-flight cancel");
    wait_hangs_started(3);
    b->cancel(b, id[2]); /* in flight now: the late one starts */
    CHECK(wait_dones(&h[2], 1, 1000) && h[2].finish == FINISH_CANCELLED, "the second in-flight cancel");
    CHECK(wait_dones(&late, 1, 5000) && !strcmp(late.text, " w1 w2 w3 w4 w5"), "queued after cancels: '%s'",
          late.text);
    for (int w = 0; w < 2000; w += 5) {
        pthread_mutex_lock(&srv_mu);
        int closed = hang_closed;
        pthread_mutex_unlock(&srv_mu);
        if (closed >= 2) break;
        sleep_ms(5);
    }
    pthread_mutex_lock(&srv_mu);
    CHECK(hang_closed == 2, "the server saw both connections close (%d)", hang_closed);
    pthread_mutex_unlock(&srv_mu);
    /* close with one still in flight: it ends cancelled, exactly once */
    b->close(b);
    CHECK(dones(&h[1]) == 1 && h[1].finish == FINISH_CANCELLED, "closed: %d", dones(&h[1]));
    for (int i = 0; i < 3; i++) CHECK(dones(&s[i]) == 1, "on_done once (%d)", i);
    for (int i = 0; i < 4; i++) CHECK(dones(&h[i]) == 1, "on_done once (hang %d)", i);
    CHECK(dones(&t) == 1 && dones(&f) == 1 && dones(&c) == 1 && dones(&late) == 1, "on_done once");
    /* the server gone: opening says so */
    shutdown(listen_fd, SHUT_RDWR);
    close(listen_fd);
    pthread_join(srv, NULL);
    CHECK(!backend_remote_open(&cfg, err, sizeof err) && strstr(err, "cannot reach the server at http://127.0.0.1"),
          "%s", err);
}

int main(void) {
    test_sse();
    test_chunks();
    test_stream();
    test_stream_tool_calls();
    test_request();
    test_errors();
    test_models();
    test_open_refusals();
    test_worker();
    return check_report("test_remote");
}
