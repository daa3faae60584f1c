/* test_toolcall.c - tool calls read out of answers (engine/toolcall/): llama.cpp's parser
 * cases and chatfs's own as data (tests/toolcall/cases.txt, the functions they offer in
 * tests/toolcall/tools.json), each read whole, as a stream a byte at a time and in chunks
 * (the streamed content only grows and ends as the whole reading's; a call appears once
 * complete), the families of llama.cpp's templates and the tools arrays refused
 * (tests/toolcall/detect.txt), every prefix of every case's text under every family,
 * finished or not, read without a fault (under ASan: within bounds), and the grammars of
 * required calls (tc_call_grammar): the family's own calls taken and read back, what the
 * offered functions do not allow refused. */
#include "engine/grammar/grammar.h"
#include "engine/toolcall/toolcall.h"
#include "tests/check.h"
#include "tests/grammar_data.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <string.h>

#define DATA "tests/toolcall/"

struct expect_call {
    char *name, *args, *problem;
};

struct tcase {
    char title[200];
    enum tc_family family;
    char tools[400];      /* names, or "-" */
    char *text, *content, *reasoning;
    size_t text_len, content_len, reasoning_len;
    bool partial, has_reasoning;
    struct expect_call calls[8];
    int n_calls;
};

static cJSON *tool_defs;

/* the named functions of tools.json as a tools array (NULL for "-") */
static struct tc_tools *offered(const char *names) {
    if (strcmp(names, "-") == 0) return NULL;
    cJSON *arr = cJSON_CreateArray();
    char buf[400];
    snprintf(buf, sizeof buf, "%s", names);
    for (char *save, *w = strtok_r(buf, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        cJSON *t = cJSON_GetObjectItemCaseSensitive(tool_defs, w);
        REQUIRE(t != NULL, "tools.json has no %s", w);
        cJSON_AddItemToArray(arr, cJSON_Duplicate(t, 1));
    }
    char *json = cJSON_PrintUnformatted(arr);
    cJSON_Delete(arr);
    char err[200] = "";
    struct tc_tools *tools = tc_tools_parse(json, strlen(json), err, sizeof err);
    REQUIRE(tools != NULL, "tools %s refused: %s", names, err);
    free(json);
    return tools;
}

/* a block's lines, joined, unescaped */
static char *block(char **lines, int n, size_t *len) {
    while (n > 0 && lines[n - 1][0] == 0) n--;
    size_t total = 1;
    for (int k = 0; k < n; k++) total += strlen(lines[k]) + 1;
    char *joined = malloc(total), *out = malloc(total);
    size_t j = 0;
    for (int k = 0; k < n; k++) {
        size_t m = strlen(lines[k]);
        memcpy(joined + j, lines[k], m);
        j += m;
        if (k + 1 < n) joined[j++] = '\n';
    }
    *len = unescape(joined, j, out);
    out[*len] = 0;
    free(joined);
    return out;
}

static bool block_end(const char *line) {
    return strncmp(line, "--", 2) == 0 || strncmp(line, "== ", 3) == 0 || strncmp(line, "# ", 2) == 0 ||
           strcmp(line, "#") == 0;
}

static int read_cases(char *data, struct tcase **out) {
    int n_lines = 0, cap = 1024;
    char **lines = malloc((size_t)cap * sizeof *lines);
    for (char *p = data; *p;) {
        if (n_lines == cap) lines = realloc(lines, (size_t)(cap *= 2) * sizeof *lines);
        lines[n_lines++] = p;
        char *nl = strchr(p, '\n');
        if (!nl) break;
        *nl = 0;
        p = nl + 1;
    }
    struct tcase *cases = calloc(400, sizeof *cases);
    int n = -1;
    for (int i = 0; i < n_lines;) {
        char *l = lines[i];
        if (strncmp(l, "== ", 3) == 0) {
            REQUIRE(n + 1 < 400, "too many cases");
            struct tcase *c = &cases[++n];
            snprintf(c->title, sizeof c->title, "%s", l + 3);
            c->content = calloc(1, 1);
            i++;
            continue;
        }
        if (n < 0 || l[0] == 0 || l[0] == '#') {
            i++;
            continue;
        }
        struct tcase *c = &cases[n];
        if (strncmp(l, "family: ", 8) == 0) {
            REQUIRE(tc_family_from_name(l + 8, &c->family), "%s: no family %s", c->title, l + 8);
            i++;
            continue;
        }
        if (strncmp(l, "tools: ", 7) == 0) {
            snprintf(c->tools, sizeof c->tools, "%s", l + 7);
            i++;
            continue;
        }
        REQUIRE(strncmp(l, "-- ", 3) == 0, "%s: line %d: %s", c->title, i + 1, l);
        int from = i + 1, to = from;
        while (to < n_lines && !block_end(lines[to])) to++;
        size_t len;
        char *b = block(lines + from, to - from, &len);
        const char *kind = l + 3;
        if (strcmp(kind, "text") == 0) c->text = b, c->text_len = len;
        else if (strcmp(kind, "content") == 0) free(c->content), c->content = b, c->content_len = len;
        else if (strcmp(kind, "reasoning") == 0) c->reasoning = b, c->reasoning_len = len, c->has_reasoning = true;
        else if (strcmp(kind, "partial") == 0) c->partial = true, free(b);
        else if (strncmp(kind, "call ", 5) == 0) {
            REQUIRE(c->n_calls < 8, "%s: too many calls", c->title);
            struct expect_call *e = &c->calls[c->n_calls++];
            size_t m = strlen(kind + 5);
            e->name = malloc(m + 1);
            m = unescape(kind + 5, m, e->name);
            e->name[m] = 0;
            e->args = b;
        } else if (strcmp(kind, "problem") == 0) {
            REQUIRE(c->n_calls > 0, "%s: a problem before any call", c->title);
            c->calls[c->n_calls - 1].problem = b;
        } else REQUIRE(0, "%s: no block kind %s", c->title, kind);
        i = to;
    }
    free(lines);
    *out = cases;
    return n + 1;
}

static bool same_calls(const struct tc_reply *a, const struct tc_reply *b, int n) {
    for (int k = 0; k < n; k++)
        if (strcmp(a->calls[k].name, b->calls[k].name) || strcmp(a->calls[k].arguments, b->calls[k].arguments) ||
            a->calls[k].index != b->calls[k].index)
            return false;
    return true;
}

static void check_reply(const struct tcase *c, const struct tc_reply *r) {
    CHECK(r->content && r->content_len == c->content_len && memcmp(r->content, c->content, c->content_len) == 0,
          "%s: content [%s], expected [%s]", c->title, r->content ? r->content : "(null)", c->content);
    CHECK(r->content && strlen(r->content) == r->content_len, "%s: content NUL-terminated", c->title);
    CHECK(r->n_calls == c->n_calls, "%s: %d calls, expected %d", c->title, r->n_calls, c->n_calls);
    for (int k = 0; k < r->n_calls && k < c->n_calls; k++) {
        const struct tc_call *got = &r->calls[k];
        const struct expect_call *e = &c->calls[k];
        CHECK(got->index == k, "%s: call %d has index %d", c->title, k, got->index);
        CHECK(strcmp(got->name, e->name) == 0, "%s: call %d named %s, expected %s", c->title, k, got->name, e->name);
        CHECK(strcmp(got->arguments, e->args) == 0, "%s: call %d arguments %s, expected %s", c->title, k,
              got->arguments, e->args);
        cJSON *j = cJSON_Parse(got->arguments);
        CHECK(cJSON_IsObject(j), "%s: call %d arguments are not a JSON object: %s", c->title, k, got->arguments);
        cJSON_Delete(j);
        if (e->problem)
            CHECK(got->problem && strstr(got->problem, e->problem), "%s: call %d problem [%s], expected [%s]",
                  c->title, k, got->problem ? got->problem : "(none)", e->problem);
        else
            CHECK(!got->problem, "%s: call %d has a problem: %s", c->title, k, got->problem);
        CHECK(got->start < got->end, "%s: call %d spans %zu..%zu", c->title, k, got->start, got->end);
    }
}

/* the stream fed `step` bytes at a time: it only grows, each state is the whole reading's
 * of that prefix, and it ends as the whole text's reading */
static void check_stream(const struct tcase *c, const struct tc_tools *tools, const char *text, size_t len,
                         const struct tc_reply *whole, size_t step) {
    struct tc_stream st;
    tc_stream_init(&st, c->family, tools);
    size_t shown = 0;
    int calls = 0;
    char *prev = strdup("");
    bool grows = true, same = true;
    for (size_t i = 0;; i = i + step < len ? i + step : len) {
        bool final = i == len && !c->partial;
        REQUIRE(tc_stream_feed(&st, text, i, final) == 0, "%s: feed", c->title);
        if (st.reply.content_len < shown || memcmp(st.reply.content, prev, shown) != 0 || st.reply.n_calls < calls)
            grows = false;
        if (!same_calls(&st.reply, whole, st.reply.n_calls < whole->n_calls ? st.reply.n_calls : whole->n_calls))
            same = false;
        struct tc_reply once;
        REQUIRE(tc_parse(c->family, tools, text, i, final, &once) == 0, "%s: parse", c->title);
        if (once.content_len != st.reply.content_len || memcmp(once.content, st.reply.content, once.content_len) ||
            once.n_calls != st.reply.n_calls || !same_calls(&once, &st.reply, once.n_calls))
            CHECK(0, "%s: streamed %zu bytes (step %zu) read [%s] %d calls, read whole [%s] %d calls", c->title, i,
                  step, st.reply.content, st.reply.n_calls, once.content, once.n_calls);
        tc_reply_free(&once);
        free(prev);
        prev = strdup(st.reply.content);
        shown = st.reply.content_len;
        calls = st.reply.n_calls;
        if (i == len) break;
    }
    CHECK(grows, "%s: the streamed reply took back what it showed (step %zu)", c->title, step);
    CHECK(same, "%s: a streamed call differs from the whole reading's (step %zu)", c->title, step);
    CHECK(st.reply.content_len == whole->content_len && memcmp(st.reply.content, whole->content, whole->content_len) == 0 &&
              st.reply.n_calls == whole->n_calls,
          "%s: the stream ends as [%s] %d calls, the whole reading [%s] %d", c->title, st.reply.content,
          st.reply.n_calls, whole->content, whole->n_calls);
    free(prev);
    tc_stream_free(&st);
}

static void run_case(const struct tcase *c) {
    REQUIRE(c->text, "%s: no text", c->title);
    struct tc_tools *tools = offered(c->tools[0] ? c->tools : "-");
    const char *text = c->text;
    size_t len = c->text_len;
    if (c->has_reasoning) {
        size_t safe;
        size_t cut = tc_reasoning_end(c->family, text, len, &safe);
        CHECK(cut == c->reasoning_len && memcmp(text, c->reasoning, cut) == 0,
              "%s: the reasoning ends after %zu bytes, expected %zu", c->title, cut, c->reasoning_len);
        CHECK(safe == cut, "%s: %zu bytes of reasoning safe, expected %zu", c->title, safe, cut);
        text += cut, len -= cut;
    }
    struct tc_reply r;
    REQUIRE(tc_parse(c->family, tools, text, len, !c->partial, &r) == 0, "%s: parse", c->title);
    check_reply(c, &r);
    check_stream(c, tools, text, len, &r, 1);
    check_stream(c, tools, text, len, &r, 7);
    tc_reply_free(&r);
    tc_tools_free(tools);
}

/* every prefix of the text, finished or not, under every family: read within bounds */
static void survive(const struct tcase *c, const struct tc_tools *tools) {
    for (int f = TC_NONE; f <= TC_LFM2; f++)
        for (size_t i = 0; i <= c->text_len; i++)
            for (int final = 0; final < 2; final++) {
                char *copy = malloc(i ? i : 1); /* exactly i bytes: ASan sees any read past them */
                memcpy(copy, c->text, i);
                struct tc_reply r;
                int rc = tc_parse((enum tc_family)f, tools, copy, i, final, &r);
                CHECK(rc == 0 && r.content_len <= i, "%s: prefix %zu under %s", c->title, i,
                      tc_family_name((enum tc_family)f));
                size_t safe, cut = tc_reasoning_end((enum tc_family)f, copy, i, &safe);
                CHECK(cut <= i && safe <= i, "%s: reasoning cut %zu of %zu", c->title, cut, i);
                tc_reply_free(&r);
                free(copy);
            }
}

/* llama.cpp's source tree (tools/llama-cpp-src.sh), for its templates */
static char *llama_src(void) {
    FILE *p = popen("tools/llama-cpp-src.sh 2>/dev/null", "r");
    if (!p) return NULL;
    char buf[4096];
    char *line = fgets(buf, sizeof buf, p);
    pclose(p);
    if (!line) return NULL;
    buf[strcspn(buf, "\n")] = 0;
    return buf[0] ? strdup(buf) : NULL;
}

static void detect_cases(void) {
    size_t n;
    char *data = slurp(DATA "detect.txt", &n);
    REQUIRE(data, "cannot read " DATA "detect.txt");
    char *src = llama_src();
    CHECK(src != NULL, "llama.cpp's source (tools/llama-cpp-src.sh) is needed for its templates");
    int templates = 0;
    char *pending_tools = NULL;
    for (char *save, *l = strtok_r(data, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        enum tc_family want;
        if (strncmp(l, "template ", 9) == 0 && src) {
            char name[256], fam[64];
            REQUIRE(sscanf(l + 9, "%255s %63s", name, fam) == 2 && tc_family_from_name(fam, &want), "%s", l);
            char path[4600];
            snprintf(path, sizeof path, "%s/models/templates/%s.jinja", src, name);
            size_t m;
            char *t = slurp(path, &m);
            CHECK(t != NULL, "cannot read %s", path);
            if (!t) continue;
            enum tc_family got = tc_detect(t, m);
            CHECK(got == want, "%s: detected %s, expected %s", name, tc_family_name(got), fam);
            templates++;
            free(t);
        } else if (strncmp(l, "text ", 5) == 0) {
            char fam[64];
            int off = 0;
            REQUIRE(sscanf(l + 5, "%63s%n", fam, &off) == 1 && tc_family_from_name(fam, &want), "%s", l);
            const char *t = l + 5 + off + (l[5 + off] == ' ');
            char *u = malloc(strlen(t) + 1);
            size_t m = unescape(t, strlen(t), u);
            enum tc_family got = tc_detect(u, m);
            CHECK(got == want, "text %s: detected %s, expected %s", t, tc_family_name(got), fam);
            free(u);
        } else if (strncmp(l, "tools ", 6) == 0) {
            pending_tools = l + 6;
        } else if (pending_tools && (strncmp(l, "ok ", 3) == 0 || strncmp(l, "refused ", 8) == 0)) {
            char err[200] = "";
            struct tc_tools *t = tc_tools_parse(pending_tools, strlen(pending_tools), err, sizeof err);
            if (l[0] == 'o')
                CHECK(t && tc_tools_count(t) == atoi(l + 3), "tools %s: %s (%d functions)", pending_tools,
                      t ? "read" : err, tc_tools_count(t));
            else
                CHECK(!t && strstr(err, l + 8), "tools %s: [%s], expected the reason [%s]", pending_tools,
                      t ? "read" : err, l + 8);
            tc_tools_free(t);
            pending_tools = NULL;
        }
    }
    CHECK(!src || templates > 15, "only %d of llama.cpp's templates checked", templates);
    free(src);
    free(data);
}

/* the family names read back */
static void names(void) {
    for (int f = TC_NONE; f <= TC_LFM2; f++) {
        enum tc_family back;
        CHECK(tc_family_from_name(tc_family_name((enum tc_family)f), &back) && back == (enum tc_family)f,
              "family %d's name %s", f, tc_family_name((enum tc_family)f));
    }
    enum tc_family x;
    CHECK(!tc_family_from_name("chatml", &x), "no family chatml");
}

/* streaming the reasoning: a partial <tool_call> at its end is held back */
static void reasoning_stream(void) {
    const char *t = "I will call it. <tool_";
    size_t safe, cut = tc_reasoning_end(TC_QWEN_XML, t, strlen(t), &safe);
    CHECK(cut == strlen(t) && safe == strlen("I will call it. "), "reasoning cut %zu, safe %zu", cut, safe);
    cut = tc_reasoning_end(TC_HERMES, t, strlen(t), &safe);
    CHECK(cut == strlen(t) && safe == strlen(t), "hermes: reasoning cut %zu, safe %zu", cut, safe);
}

/* The grammar of a required call, per family: it takes the call as the family's template
 * writes it, which reads back as that call, and refuses what the offered functions do not
 * allow (another function, a value of another type, a required parameter left out, an
 * enum's stranger, a string past its maxLength). */
static void call_grammars(void) {
    static const char tools[] =
        "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
        "\"properties\": {\"city\": {\"type\": \"string\", \"maxLength\": 12}, \"unit\": {\"type\": \"string\", "
        "\"enum\": [\"celsius\", \"fahrenheit\"]}, \"days\": {\"type\": \"integer\"}}, \"required\": [\"city\"]}}}, "
        "{\"type\": \"function\", \"function\": {\"name\": \"now\"}}]";
    static const struct {
        enum tc_family f;
        bool parallel;
        const char *only, *text, *args; /* args: the first call's as read; NULL: refused */
    } cases[] = {
        {TC_QWEN_XML, true, NULL,
         "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
         "</function>\n</tool_call>",
         "{\"city\":\"Oslo\",\"days\":3}"},
        {TC_QWEN_XML, true, NULL,
         "<tool_call>\n<function=now>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n"
         "<parameter=city>\nA <b> C\n</parameter>\n<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>",
         "{}"},
        {TC_QWEN_XML, false, NULL,
         "<tool_call>\n<function=now>\n</function>\n</tool_call>\n<tool_call>\n<function=now>\n</function>\n"
         "</tool_call>",
         NULL},
        {TC_QWEN_XML, true, NULL, "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>", NULL},
        {TC_QWEN_XML, true, NULL,
         "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<parameter=days>\nthree\n"
         "</parameter>\n</function>\n</tool_call>",
         NULL},
        {TC_QWEN_XML, true, NULL,
         "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<parameter=unit>\nkelvin\n"
         "</parameter>\n</function>\n</tool_call>",
         NULL},
        {TC_QWEN_XML, true, NULL,
         "<tool_call>\n<function=get_weather>\n<parameter=city>\nLlanfairpwllgwyngyll\n</parameter>\n</function>\n"
         "</tool_call>",
         NULL},
        {TC_QWEN_XML, true, "now", "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
                                   "</function>\n</tool_call>", NULL},
        {TC_QWEN3_CODER, true, "get_weather",
         "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>",
         "{\"city\":\"Oslo\"}"},
        {TC_HERMES, true, NULL,
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 3}}\n</tool_call>",
         "{\"city\":\"Oslo\",\"days\":3}"},
        {TC_HERMES, true, NULL, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"days\": 3}}\n</tool_call>",
         NULL},
        {TC_HERMES, true, NULL, "<tool_call>\n{\"name\": \"fly\", \"arguments\": {}}\n</tool_call>", NULL},
        {TC_LLAMA3, false, NULL, "{\"name\": \"now\", \"parameters\": {}}", "{}"},
        {TC_LLAMA3, false, NULL, "{\"name\": \"get_weather\", \"parameters\": {\"city\": 7}}", NULL},
    };
    int accepted = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char err[256];
        char *g = tc_call_grammar(cases[i].f, tools, strlen(tools), cases[i].only, cases[i].parallel, err, sizeof err);
        REQUIRE(g, "case %zu: %s", i, err);
        grammar *gr = grammar_compile(g, strlen(g), err, sizeof err);
        CHECK(gr, "case %zu: the grammar does not compile: %s\n%s", i, err, g);
        const size_t n = strlen(cases[i].text);
        const int ok = gr && grammar_accepts(gr, cases[i].text, n) == 1;
        CHECK(ok == (cases[i].args != NULL), "case %zu (%s): %s", i, tc_family_name(cases[i].f),
              ok ? "accepted" : "refused");
        if (ok && cases[i].args) {
            struct tc_reply r;
            REQUIRE(tc_parse(cases[i].f, NULL, cases[i].text, n, true, &r) == 0, "parse");
            CHECK(r.n_calls >= 1 && !strcmp(r.calls[0].arguments, cases[i].args) && r.content_len == 0,
                  "case %zu: read as %d calls, first %s", i, r.n_calls, r.n_calls ? r.calls[0].arguments : "-");
            tc_reply_free(&r);
            accepted++;
        }
        grammar_free(gr);
        free(g);
    }
    char err[256];
    CHECK(!tc_call_grammar(TC_LFM2, tools, strlen(tools), NULL, true, err, sizeof err) && strstr(err, "lfm2"),
          "lfm2: %s", err);
    CHECK(!tc_call_grammar(TC_HERMES, tools, strlen(tools), "fly", true, err, sizeof err) &&
              strstr(err, "no offered function is named 'fly'"),
          "an unoffered function: %s", err);
    CHECK(!tc_call_grammar(TC_HERMES, "[1]", 3, NULL, true, err, sizeof err) && strstr(err, "tools[0]"),
          "bad tools: %s", err);
    printf("  call grammars: %zu cases, %d calls accepted and read back, the rest refused\n",
           sizeof cases / sizeof *cases, accepted);
}

int main(void) {
    size_t n;
    char *tools_json = slurp(DATA "tools.json", &n);
    REQUIRE(tools_json, "cannot read " DATA "tools.json");
    tool_defs = cJSON_Parse(tools_json);
    REQUIRE(cJSON_IsObject(tool_defs), DATA "tools.json is not a JSON object");
    char *data = slurp(DATA "cases.txt", &n);
    REQUIRE(data, "cannot read " DATA "cases.txt");
    struct tcase *cases;
    int n_cases = read_cases(data, &cases);
    REQUIRE(n_cases > 50, "only %d cases read", n_cases);
    for (int k = 0; k < n_cases; k++) run_case(&cases[k]);
    struct tc_tools *all = offered("calculator special_function python get_time");
    for (int k = 0; k < n_cases; k++) {
        survive(&cases[k], NULL);
        survive(&cases[k], all);
    }
    tc_tools_free(all);
    detect_cases();
    names();
    reasoning_stream();
    call_grammars();
    for (int k = 0; k < n_cases; k++) {
        free(cases[k].text), free(cases[k].content), free(cases[k].reasoning);
        for (int j = 0; j < cases[k].n_calls; j++)
            free(cases[k].calls[j].name), free(cases[k].calls[j].args), free(cases[k].calls[j].problem);
    }
    free(cases);
    free(data);
    cJSON_Delete(tool_defs);
    free(tools_json);
    printf("toolcall: %d cases\n", n_cases);
    return check_report("test_toolcall");
}
