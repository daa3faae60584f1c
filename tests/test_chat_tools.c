/* test_chat_tools.c - tool calls through the engine API (gen_settings.tools, tool_choice,
 * parallel_tool_calls; gen_callbacks.on_tool_call) on the default model, whose template is
 * Qwen3.5's (the qwen-xml format):
 *   - a required call (a grammar of the offered calls) is a call of an offered function
 *     whose arguments have every required parameter at its schema's type, greedy and
 *     sampled, thinking on and off; one named function gets that function; with
 *     parallel_tool_calls 0 the reply ends with its one call;
 *   - the text on_text streams is the content the reader finds in the whole answer, and
 *     the calls on_tool_call gets are its calls, in order;
 *   - the Hermes and Llama 3 formats, by templates of those families given as the
 *     request's chat_template: a required call reads back the same way;
 *   - the next turn, with the calls and their results in the history, reuses the
 *     checkpoint placed after the reply up to where the first result begins;
 *   - bad requests are refused at the submit with the reason: tools that are not a tools
 *     array, a function that is not offered, tool_choice without tools, a grammar beside a
 *     required call, a format without a call grammar;
 *   - tool_choice "none" offers the tools and reads no calls. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/runtime/chat.h"
#include "engine/toolcall/toolcall.h"
#include "tests/check.h"
#include "tests/engine_db.h"

#define DEFAULT_MODEL "models/chatfs-default.gguf"

static const char TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"The weather in a city.\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"maxLength\": 24}, \"unit\": {\"type\": "
    "\"string\", \"enum\": [\"celsius\", \"fahrenheit\"]}, \"days\": {\"type\": \"integer\"}}, \"required\": "
    "[\"city\"]}}}, {\"type\": \"function\", \"function\": {\"name\": \"calculate\", \"description\": \"Evaluates "
    "arithmetic.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, \"op\": "
    "{\"type\": \"string\", \"enum\": [\"+\", \"-\", \"*\", \"/\"]}, \"b\": {\"type\": \"integer\"}}, \"required\": "
    "[\"a\", \"op\", \"b\"]}}}]";

typedef struct {
    char text[8192];
    size_t n;
    char names[8][64], args[8][512];
    int index[8], problems, n_calls;
} tool_sink;

static void on_text(void *ud, const char *t, size_t n) {
    tool_sink *s = ud;
    if (s->n + n < sizeof s->text) memcpy(s->text + s->n, t, n), s->n += n;
}

static void on_call(void *ud, const struct tc_call *c) {
    tool_sink *s = ud;
    if (s->n_calls < 8) {
        snprintf(s->names[s->n_calls], sizeof s->names[0], "%s", c->name);
        snprintf(s->args[s->n_calls], sizeof s->args[0], "%s", c->arguments);
        s->index[s->n_calls] = c->index;
    }
    s->problems += c->problem != NULL;
    s->n_calls++;
}

typedef struct {
    tool_sink out;
    gen_report r;
    char error[256];
    int done;
    pthread_mutex_t lock;
    pthread_cond_t cv;
} tool_run;

static void on_done(void *ud, const gen_report *r, const char *error) {
    tool_run *t = ud;
    pthread_mutex_lock(&t->lock);
    t->r = *r;
    if (error) snprintf(t->error, sizeof t->error, "%s", error);
    t->done = 1;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->lock);
}

static void tr_text(void *ud, const char *s, size_t n) { on_text(&((tool_run *)ud)->out, s, n); }
static void tr_call(void *ud, const struct tc_call *c) { on_call(&((tool_run *)ud)->out, c); }

/* One request, waited for: 0, or -1 with the reason in t->error. */
static int run(chat_engine *e, const chat_msg *m, int n, const gen_settings *s, tool_run *t) {
    memset(t, 0, sizeof *t);
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->cv, NULL);
    const gen_callbacks cb = {.on_text = tr_text, .on_done = on_done, .ud = t, .on_tool_call = tr_call};
    int rc = -1;
    if (engine_submit(e, m, n, s, &cb, t->error, sizeof t->error)) {
        pthread_mutex_lock(&t->lock);
        while (!t->done) pthread_cond_wait(&t->cv, &t->lock);
        pthread_mutex_unlock(&t->lock);
        rc = t->error[0] ? -1 : 0;
    }
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->lock);
    return rc;
}

/* A call's arguments are what its function's schema asks: every required parameter, each
 * value of its type (an enum's value among its values). */
static int arguments_fit(const char *name, const char *args) {
    cJSON *a = cJSON_Parse(args);
    int ok = cJSON_IsObject(a);
    if (ok && !strcmp(name, "get_weather")) {
        const cJSON *city = cJSON_GetObjectItem(a, "city"), *unit = cJSON_GetObjectItem(a, "unit"),
                    *days = cJSON_GetObjectItem(a, "days");
        ok = cJSON_IsString(city) && (!unit || (cJSON_IsString(unit) && (!strcmp(unit->valuestring, "celsius") ||
                                                                         !strcmp(unit->valuestring, "fahrenheit")))) &&
             (!days || (cJSON_IsNumber(days) && days->valuedouble == (double)(long long)days->valuedouble));
    } else if (ok && !strcmp(name, "calculate")) {
        const cJSON *x = cJSON_GetObjectItem(a, "a"), *op = cJSON_GetObjectItem(a, "op"), *y = cJSON_GetObjectItem(a, "b");
        ok = cJSON_IsNumber(x) && cJSON_IsNumber(y) && cJSON_IsString(op) && strlen(op->valuestring) == 1 &&
             strchr("+-*/", op->valuestring[0]);
    } else {
        ok = 0;
    }
    cJSON_Delete(a);
    return ok;
}

static chat_engine *open_default(test_store *ts) {
    engine_config cfg = {.model_path = DEFAULT_MODEL, .threads = 2, .n_ctx = 2048, .checkpoints = test_store_open(ts, NULL)};
    char err[256];
    chat_engine *e = engine_open(&cfg, err, sizeof err);
    REQUIRE(e, "engine_open: %s", err);
    return e;
}

static const chat_msg QUESTION[] = {{"system", "You are a helpful assistant."}, {"user", "What is 347 * 29?"}};

/* Required calls on the default model: always a call that fits its schema. */
static void required_calls(chat_engine *e) {
    int runs = 0, calls = 0, fit = 0;
    for (int thinking = 0; thinking <= 1; thinking++)
        for (int seed = 0; seed <= 4; seed++) {
            gen_settings s;
            engine_settings_defaults(e, &s);
            s.tools = TOOLS;
            s.tool_choice = "required";
            s.enable_thinking = thinking;
            s.thinking_budget = thinking ? 24 : -1;
            s.max_tokens = 600;
            s.parallel_tool_calls = seed % 2; /* several calls may follow one another */
            if (seed) s.temperature = 1.0f, s.top_k = 0, s.top_p = 1.0f, s.min_p = 0, s.seed = (uint64_t)seed;
            static tool_run t;
            REQUIRE(run(e, QUESTION, 2, &s, &t) == 0, "required call: %s", t.error);
            /* one call ends the reply; after several, max_tokens may cut the next one (text) */
            CHECK((t.r.finish == FINISH_EOG || (s.parallel_tool_calls && t.r.finish == FINISH_LENGTH)) &&
                      t.out.n_calls >= 1 && t.r.tool_calls == t.out.n_calls && (s.parallel_tool_calls || t.out.n_calls == 1),
                  "thinking %d seed %d: finish %d, %d calls (report %d), text '%.*s'", thinking, seed, t.r.finish,
                  t.out.n_calls, t.r.tool_calls, (int)t.out.n, t.out.text);
            for (int i = 0; i < t.out.n_calls && i < 8; i++) {
                CHECK(t.out.index[i] == i, "call %d has index %d", i, t.out.index[i]);
                int ok = arguments_fit(t.out.names[i], t.out.args[i]);
                CHECK(ok, "thinking %d seed %d call %d: %s(%s) does not fit its schema", thinking, seed, i,
                      t.out.names[i], t.out.args[i]);
                fit += ok;
            }
            CHECK(t.out.problems == 0 && (t.out.n == 0 || t.r.finish == FINISH_LENGTH),
                  "thinking %d seed %d: %d problems, text '%.*s'", thinking, seed, t.out.problems, (int)t.out.n,
                  t.out.text);
            calls += t.out.n_calls;
            runs++;
            if (!seed && !thinking) printf("  greedy required call: %s(%s)\n", t.out.names[0], t.out.args[0]);
        }
    /* one function by name, one call */
    gen_settings s;
    engine_settings_defaults(e, &s);
    s.tools = TOOLS;
    s.tool_choice = "calculate";
    s.parallel_tool_calls = 0;
    s.max_tokens = 600;
    static tool_run t;
    REQUIRE(run(e, QUESTION, 2, &s, &t) == 0, "named call: %s", t.error);
    CHECK(t.out.n_calls == 1 && !strcmp(t.out.names[0], "calculate") && arguments_fit("calculate", t.out.args[0]) &&
              t.r.finish == FINISH_EOG,
          "tool_choice calculate: %d calls, %s(%s), finish %d, text '%.*s'", t.out.n_calls, t.out.names[0],
          t.out.args[0], t.r.finish, (int)t.out.n, t.out.text);
    printf("  default model, tool_choice required: %d replies (greedy and sampled, thinking on and off), %d calls, "
           "%d fit their schema; tool_choice calculate: calculate(%s)\n",
           runs, calls, fit, t.out.args[0]);
}

/* What streams is what the whole answer reads as: on auto, the model may write calls or
 * not; the content and calls streamed are those of the answer read at once. The answer is
 * rebuilt by asking again without tools' reading (tool_choice none, same prompt). */
static void streamed_is_whole(chat_engine *e) {
    static const char *const questions[] = {"What is 347 * 29?", "What's the weather in Oslo?",
                                            "Call get_weather for Paris, then say hi."};
    int n_calls = 0;
    for (size_t q = 0; q < sizeof questions / sizeof *questions; q++) {
        const chat_msg m[] = {{"user", questions[q]}};
        gen_settings s;
        engine_settings_defaults(e, &s);
        s.tools = TOOLS;
        s.enable_thinking = 0;
        s.max_tokens = 120;
        static tool_run t, whole;
        REQUIRE(run(e, m, 1, &s, &t) == 0, "auto: %s", t.error);
        s.tool_choice = "none";
        REQUIRE(run(e, m, 1, &s, &whole) == 0, "none: %s", whole.error);
        CHECK(whole.out.n_calls == 0 && whole.r.tool_calls == 0, "tool_choice none read %d calls", whole.out.n_calls);
        struct tc_reply r;
        REQUIRE(tc_parse(TC_QWEN_XML, NULL, whole.out.text, whole.out.n, true, &r) == 0, "parse");
        int same = r.content_len == t.out.n && !memcmp(r.content, t.out.text, t.out.n) && r.n_calls == t.out.n_calls;
        for (int i = 0; same && i < r.n_calls && i < 8; i++)
            same = !strcmp(r.calls[i].name, t.out.names[i]) && !strcmp(r.calls[i].arguments, t.out.args[i]);
        CHECK(same, "question %zu: streamed '%.*s' and %d calls; the whole answer '%.*s' reads as '%s' and %d calls", q,
              (int)t.out.n, t.out.text, t.out.n_calls, (int)whole.out.n, whole.out.text, r.content, r.n_calls);
        n_calls += t.out.n_calls;
        tc_reply_free(&r);
    }
    printf("  tool_choice auto: what streamed is what the whole answer reads as (%d calls among 3 questions)\n",
           n_calls);
}

/* Templates of the JSON families, as the published ones write calls and offer tools. */
static const char HERMES_TEMPLATE[] =
    "{%- if tools %}<|im_start|>system\n# Tools\n<tools>\n{%- for t in tools %}\n{{ t | tojson }}{%- endfor %}\n"
    "</tools>\nCall one inside <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n{%- endif %}\n"
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endfor %}\n"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}";
static const char LLAMA3_TEMPLATE[] =
    "<|start_header_id|>system<|end_header_id|>\n\nAnswer with a JSON for a function call: {\"name\": function "
    "name, \"parameters\": dictionary of argument name and its value}.\n{%- for t in tools %}\n{{ t | tojson }}"
    "{%- endfor %}<|eot_id|>{%- for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
    "{{ m.content }}<|eot_id|>{%- endfor %}<|start_header_id|>assistant<|end_header_id|>\n\n";

static void json_families(chat_engine *e) {
    static const struct {
        const char *name, *text;
    } families[] = {{"hermes", HERMES_TEMPLATE}, {"llama3", LLAMA3_TEMPLATE}};
    for (size_t f = 0; f < 2; f++) {
        CHECK(!strcmp(tc_family_name(tc_detect(families[f].text, strlen(families[f].text))), families[f].name),
              "the %s template's family", families[f].name);
        gen_settings s;
        engine_settings_defaults(e, &s);
        s.chat_template = families[f].text;
        s.tools = TOOLS;
        s.tool_choice = "required";
        s.parallel_tool_calls = 0;
        s.max_tokens = 1200; /* the untrained model fills the JSON's free whitespace */
        s.enable_thinking = 0;
        static tool_run t;
        REQUIRE(run(e, QUESTION + 1, 1, &s, &t) == 0, "%s: %s", families[f].name, t.error);
        CHECK(t.out.n_calls >= 1 && arguments_fit(t.out.names[0], t.out.args[0]) && t.out.problems == 0,
              "%s: %d calls, %s(%s), finish %d, text '%.*s'", families[f].name, t.out.n_calls, t.out.names[0],
              t.out.args[0], t.r.finish, (int)t.out.n, t.out.text);
        printf("  %s format, required: %s(%s)\n", families[f].name, t.out.names[0], t.out.args[0]);
    }
}

/* The turn after a tool result restores the checkpoint placed after the reply with calls:
 * everything before the result is reused. */
static void next_turn_after_results(chat_engine *e) {
    gen_settings s;
    engine_settings_defaults(e, &s);
    s.tools = TOOLS;
    s.tool_choice = "calculate";
    s.parallel_tool_calls = 0;
    s.enable_thinking = 0;
    s.max_tokens = 600;
    s.session = "tools-next-turn";
    static tool_run t, next;
    REQUIRE(run(e, QUESTION, 2, &s, &t) == 0 && t.out.n_calls == 1, "first turn: %s", t.error);
    char calls[1024], content[8192];
    snprintf(calls, sizeof calls,
             "[{\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": \"%s\", \"arguments\": %s}}]",
             t.out.names[0], t.out.args[0]);
    snprintf(content, sizeof content, "%.*s", (int)t.out.n, t.out.text);
    const chat_msg history[] = {QUESTION[0], QUESTION[1], {"assistant", content, NULL, calls},
                                {"tool", "10063", NULL, NULL, "call_1"}};
    s.tool_choice = NULL;
    s.max_tokens = 24;
    REQUIRE(run(e, history, 4, &s, &next) == 0, "second turn: %s", next.error);
    /* where the first result begins: the common prefix of two renders with other results */
    chat_msg other[4];
    memcpy(other, history, sizeof other);
    int *ids[2] = {NULL, NULL}, n[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        other[3].content = i ? "7" : "A";
        char err[256];
        size_t len = 0;
        char *text = template_render_tools(engine_model(e)->tmpl, other, 4, TOOLS, 1, 0, &len, err, sizeof err);
        REQUIRE(text, "render: %s", err);
        n[i] = tokenizer_encode(engine_model(e)->tok, text, len, 1, 1, &ids[i]);
        free(text);
    }
    int begins = 0;
    while (begins < n[0] && begins < n[1] && ids[0][begins] == ids[1][begins]) begins++;
    free(ids[0]), free(ids[1]);
    const int prompt = next.r.prompt_tokens;
    CHECK(next.r.reused_tokens == begins && begins < prompt,
          "the turn after a tool result reused %d of %d prompt tokens; the result begins at %d (%s)",
          next.r.reused_tokens, prompt, begins, next.r.miss_reason);
    printf("  the turn after a tool result: %d of %d prompt tokens reused (the result begins at token %d)\n",
           next.r.reused_tokens, prompt, begins);
}

static void refusals(chat_engine *e) {
    static const struct {
        const char *tools, *choice, *grammar, *template, *want;
    } cases[] = {
        {"{\"type\": \"function\"}", NULL, NULL, NULL, "tools: not an array of tools"},
        {"[{\"type\": \"function\", \"function\": {}}]", NULL, NULL, NULL, "function has no name"},
        {"not json", NULL, NULL, NULL, "tools: not JSON"},
        {TOOLS, "fly", NULL, NULL, "no offered function is named 'fly'"},
        {NULL, "required", NULL, NULL, "tool_choice 'required' needs tools to call"},
        {TOOLS, "required", "root ::= \"x\"", NULL, "a grammar and tool_choice 'required' exclude each other"},
        {TOOLS, "required", NULL, "{% for m in messages %}{{ m.content }}{% endfor %}",
         "a call cannot be required in the none family's format"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        gen_settings s;
        engine_settings_defaults(e, &s);
        s.tools = cases[i].tools, s.tool_choice = cases[i].choice, s.grammar = cases[i].grammar;
        s.chat_template = cases[i].template;
        char err[256] = "";
        errno = 0;
        CHECK(engine_submit(e, QUESTION, 2, &s, NULL, err, sizeof err) == 0 && errno == EINVAL &&
                  strstr(err, cases[i].want),
              "case %zu: errno %d, '%s' (want '%s')", i, errno, err, cases[i].want);
    }
}

int main(void) {
    test_store ts;
    chat_engine *e = open_default(&ts);
    required_calls(e);
    streamed_is_whole(e);
    json_families(e);
    next_turn_after_results(e);
    refusals(e);
    engine_close(e);
    test_store_close(&ts);
    return check_report("test_chat_tools");
}
