/* test_reply.c - the reply stream (engine/runtime/reply.c) fed token by token, as the
 * scheduler feeds it, with the default model's vocabulary: the reasoning kept apart from
 * the answer (its markers and the whitespace around them dropped), a stop string ending
 * the answer before it, the answer read for tool calls (the content to on_text, each call
 * once complete to on_tool_call), a call inside the reasoning ending the reasoning where
 * the family says so (qwen-xml, as llama.cpp) and staying reasoning where it does not,
 * and parallel_tool_calls 0 ending the reply with its first call. White-box: it builds
 * the request the scheduler would (engine/runtime/chat_impl.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/runtime/chat_impl.h"
#include "tests/check.h"

#define DEFAULT_MODEL "models/chatfs-default.gguf"

typedef struct {
    char answer[2048], reasoning[2048], calls[4][256];
    int n_calls;
} seen;

static void on_answer(void *ud, const char *t, size_t n) { strncat(((seen *)ud)->answer, t, n); }
static void on_thought(void *ud, const char *t, size_t n) { strncat(((seen *)ud)->reasoning, t, n); }
static void on_call(void *ud, const struct tc_call *c) {
    seen *s = ud;
    if (s->n_calls < 4) snprintf(s->calls[s->n_calls], sizeof s->calls[0], "%s%s", c->name, c->arguments);
    s->n_calls++;
}

/* A request as engine_submit leaves it before its first token: tools read in family f
 * (TC_NONE: none), a stop string or none. */
static request *new_request(chat_engine *e, seen *out, enum tc_family f, int parallel, const char *stop) {
    request *r = calloc(1, sizeof *r);
    REQUIRE(r, "out of memory");
    r->think = THINK_MAY_OPEN;
    r->strip_reasoning = 1;
    r->s.parallel_tool_calls = parallel;
    if (stop) r->s.stop[0] = stop, r->s.n_stop = 1, r->max_stop = (int)strlen(stop);
    r->held = malloc(4096 + 64);
    detok_init(&r->ds, 0);
    r->cb = (gen_callbacks){.on_text = on_answer, .ud = out, .on_reasoning = on_thought, .on_tool_call = on_call};
    if (f != TC_NONE) {
        static const char tools[] = "[{\"type\": \"function\", \"function\": {\"name\": \"calculate\", \"parameters\": "
                                    "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}}}}]";
        char err[128];
        r->tools = tc_tools_parse(tools, strlen(tools), err, sizeof err);
        REQUIRE(r->tools, "%s", err);
        tc_stream_init(&r->tcs, f, r->tools);
        r->call_ends_reasoning = f == TC_QWEN_XML;
    }
    (void)e;
    return r;
}

/* Feeds `open` (the reasoning marker first when 1) and the text's tokens one at a time;
 * returns what the last take said (0 on, 1 a stop string, 2 the first call) and the
 * number of tokens taken. */
static int feed(chat_engine *e, request *r, int open, const char *text, int *taken) {
    const tokenizer *tok = engine_model(e)->tok;
    int *ids = NULL, n = tokenizer_encode(tok, text, strlen(text), 0, 1, &ids), rc = 0;
    REQUIRE(n >= 0, "encode");
    *taken = 0;
    if (open) rc = request_take_token(e, r, e->think_open), ++*taken;
    for (int i = 0; i < n && !rc; i++) rc = request_take_token(e, r, ids[i]), ++*taken;
    free(ids);
    if (!rc) request_flush_text(r);
    return rc;
}

int main(void) {
    engine_config cfg = {.model_path = DEFAULT_MODEL, .threads = 1, .n_ctx = 256};
    char err[256];
    chat_engine *e = engine_open(&cfg, err, sizeof err);
    REQUIRE(e, "engine_open: %s", err);
    REQUIRE(e->think_open >= 0 && e->think_close >= 0, "the default model has reasoning markers");
    static const char call[] = "<tool_call>\n<function=calculate>\n<parameter=a>\n347\n</parameter>\n</function>\n"
                               "</tool_call>";
    char text[1024];
    int taken;

    /* reasoning, then the answer: apart, the markers and their whitespace dropped */
    seen s = {0};
    request *r = new_request(e, &s, TC_NONE, 1, NULL);
    CHECK(feed(e, r, 1, "\n17 + 25 = 42\n</think>\n\nThe answer is 42.", &taken) == 0, "a plain reply");
    CHECK(!strcmp(s.reasoning, "17 + 25 = 42") && !strcmp(s.answer, "The answer is 42."), "apart: '%s' / '%s'",
          s.reasoning, s.answer);
    CHECK(r->r.reasoning_tokens > 0 && r->think == THINK_OVER, "counted as reasoning: %d", r->r.reasoning_tokens);
    request_free(r);

    /* a stop string: the answer ends before it */
    s = (seen){0};
    r = new_request(e, &s, TC_NONE, 1, "STOP");
    CHECK(feed(e, r, 0, "The answer is 42. STOP and more", &taken) == 1, "the stop string ends it");
    request_flush_text(r);
    CHECK(!strcmp(s.answer, "The answer is 42. "), "the text before the stop: '%s'", s.answer);
    request_free(r);

    /* a call in the answer: content and the call apart */
    s = (seen){0};
    r = new_request(e, &s, TC_QWEN_XML, 1, NULL);
    snprintf(text, sizeof text, "\nLet me compute.\n</think>\n\nI will call it.\n%s", call);
    CHECK(feed(e, r, 1, text, &taken) == 0, "a reply with a call");
    CHECK(!strcmp(s.reasoning, "Let me compute.") && !strcmp(s.answer, "I will call it.\n") && s.n_calls == 1 &&
              !strcmp(s.calls[0], "calculate{\"a\":347}") && r->r.tool_calls == 1,
          "content '%s', %d calls '%s'", s.answer, s.n_calls, s.calls[0]);
    request_free(r);

    /* qwen-xml: a call inside the reasoning ends it (the think block never closes) */
    s = (seen){0};
    r = new_request(e, &s, TC_QWEN_XML, 1, NULL);
    snprintf(text, sizeof text, "\nI need the calculator.\n%s", call);
    CHECK(feed(e, r, 1, text, &taken) == 0, "a call while thinking");
    CHECK(!strcmp(s.reasoning, "I need the calculator.") && s.n_calls == 1 && !strcmp(s.calls[0], "calculate{\"a\":347}") &&
              !strcmp(s.answer, "") && r->think == THINK_OVER,
          "qwen-xml: reasoning '%s', %d calls, answer '%s'", s.reasoning, s.n_calls, s.answer);
    request_free(r);

    /* hermes: a call inside the reasoning stays reasoning */
    s = (seen){0};
    r = new_request(e, &s, TC_HERMES, 1, NULL);
    CHECK(feed(e, r, 1, "\nMaybe <tool_call>\n{\"name\": \"calculate\", \"arguments\": {\"a\": 1}}\n</tool_call>", &taken) == 0,
          "hermes while thinking");
    CHECK(strstr(s.reasoning, "<tool_call>") && s.n_calls == 0 && r->think == THINK_IN, "hermes: %d calls, '%s'",
          s.n_calls, s.reasoning);
    request_free(r);

    /* parallel_tool_calls 0: the first call ends the reply */
    s = (seen){0};
    r = new_request(e, &s, TC_QWEN_XML, 0, NULL);
    snprintf(text, sizeof text, "%s\n%s", call, call);
    int *ids = NULL, n = tokenizer_encode(engine_model(e)->tok, text, strlen(text), 0, 1, &ids);
    free(ids);
    CHECK(feed(e, r, 0, text, &taken) == 2 && taken < n, "ends at the first call: took %d of %d", taken, n);
    CHECK(s.n_calls == 1, "one call: %d", s.n_calls);
    request_free(r);

    engine_close(e);
    return check_report("test_reply");
}
