/* test_remote.c - the remote backend's parts that need no server: the server-sent
 * events parser (bytes cut anywhere, every line ending, comments, the size cap), the
 * chunks of llama-server's and vLLM's streams (content, reasoning apart, usage with the
 * cached prefix, prefill progress, error events), a whole stream through
 * remote_stream, the request body per dialect, the error bodies servers send, the
 * models list, and what backend_remote_open refuses before it reaches the network. The
 * end-to-end runs against a real llama-server are tests/t_remote.sh. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
        gen_callbacks cb = {s_text, s_progress, s_done, &s};
        remote_stream st;
        remote_stream_init(&st, &cb, s_reasoning, remote_now_ms());
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
        remote_stream_free(&st);
    }
    /* the prefill as llama-server reports it, before any token */
    {
        sink s = {0};
        gen_callbacks cb = {s_text, s_progress, s_done, &s};
        remote_stream st;
        remote_stream_init(&st, &cb, NULL, remote_now_ms());
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
        gen_callbacks cb = {s_text, s_progress, s_done, &s};
        remote_stream st;
        remote_stream_init(&st, &cb, NULL, remote_now_ms());
        const char *r = "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hmm\"}}]}\n\n"
                        "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"}}]}\n\n"
                        "data: not json\n\n";
        CHECK(remote_stream_feed(&st, r, strlen(r)) == -1 && strstr(st.fail, "not a JSON object"), "%s", st.fail);
        CHECK(!strcmp(s.text, "ok") && st.reasoning_bytes == 3, "text '%s'", s.text);
        remote_stream_free(&st);
    }
}

/* ---- requests, errors, models ---- */

static void test_request(void) {
    chat_msg m[] = {{"system", "Answer briefly."}, {"user", "What is 17 + 25?"}, {"assistant", "42"},
                    {"user", "Add 5 to that."}};
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
    cJSON_Delete(o);
    free(body);
    s.top_k = 40;
    s.max_tokens = 0;
    s.n_stop = 0;
    body = remote_request_json("m1", m, 2, &s, DIALECT_LLAMACPP);
    o = cJSON_Parse(body);
    REQUIRE(o, "request JSON: %s", body);
    CHECK(cJSON_GetObjectItem(o, "top_k")->valueint == 40 && cJSON_GetObjectItem(o, "min_p"), "llama.cpp samplers");
    CHECK(cJSON_IsFalse(cJSON_GetObjectItem(o, "cache_prompt")), "checkpoints false: cache_prompt false");
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(o, "return_progress")), "progress asked");
    CHECK(!cJSON_GetObjectItem(o, "max_tokens") && !cJSON_GetObjectItem(o, "stop"), "unset limits not sent");
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

int main(void) {
    test_sse();
    test_chunks();
    test_stream();
    test_request();
    test_errors();
    test_models();
    test_open_refusals();
    return check_report("test_remote");
}
