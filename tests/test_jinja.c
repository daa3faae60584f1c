/* test_jinja.c - the Jinja interpreter (engine/jinja/): the language, Python's values,
 * errors and their lines, the sandbox, the limits a hostile template runs into, and one
 * compiled template rendered from several threads at once. (Parity with python-jinja2 on
 * real chat templates and on tests/jinja/cases.json is tests/t_jinja.sh.) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/jinja/jinja.h"
#include "tests/check.h"

/* renders text with the JSON variables vars (NULL: none); returns the output or
 * "ERROR(kind): message", malloc'd */
static char *render_opts(const char *text, const char *vars, const jinja_options *o) {
    char *err = NULL, *out = NULL;
    jinja_template *t = jinja_compile(text, strlen(text), &err);
    if (!t) {
        size_t n = strlen(err) + 32;
        char *msg = malloc(n);
        snprintf(msg, n, "COMPILE: %s", err);
        free(err);
        return msg;
    }
    cJSON *v = vars ? cJSON_Parse(vars) : NULL;
    size_t len;
    int rc = jinja_render(t, v, o, &out, &len, &err);
    cJSON_Delete(v);
    jinja_free(t);
    if (rc == JINJA_OK) return out;
    size_t n = strlen(err) + 32;
    char *msg = malloc(n);
    snprintf(msg, n, "ERROR(%d): %s", rc, err);
    free(err);
    return msg;
}

static char *render(const char *text, const char *vars) { return render_opts(text, vars, NULL); }

#define EXPECT(text, vars, want)                                                                   \
    do {                                                                                           \
        char *got_ = render(text, vars);                                                           \
        CHECK(strcmp(got_, want) == 0, "%s\n      want [%s]\n      got  [%s]", text, want, got_); \
        free(got_);                                                                                \
    } while (0)

/* the output starts with prefix (for errors, whose wording we check only in part) */
#define EXPECT_PREFIX(text, vars, prefix)                                                          \
    do {                                                                                           \
        char *got_ = render(text, vars);                                                           \
        CHECK(strncmp(got_, prefix, strlen(prefix)) == 0, "%s\n      want [%s...]\n      got  [%s]", text, prefix, got_); \
        free(got_);                                                                                \
    } while (0)

static void test_api(void) {
    const char *text = "{% if enable_thinking is defined %}T{% endif %}{{ messages|length }}";
    char *err = NULL, *out = NULL;
    jinja_template *t = jinja_compile(text, strlen(text), &err);
    REQUIRE(t, "compile: %s", err);
    CHECK(jinja_uses_variable(t, "enable_thinking") && jinja_uses_variable(t, "messages"), "uses the variables it names");
    CHECK(!jinja_uses_variable(t, "tools") && !jinja_uses_variable(t, "length"), "not the ones it does not");
    size_t len = 99;
    CHECK(jinja_render(t, NULL, NULL, &out, &len, &err) == JINJA_OK && len == 1 && strcmp(out, "0") == 0,
          "no variables: %s", out ? out : err);
    free(out);
    jinja_free(t);
    /* the output may hold NUL bytes; out_len counts them */
    t = jinja_compile("a{{ '\\x00' }}b", 14, &err);
    REQUIRE(t, "compile: %s", err);
    CHECK(jinja_render(t, NULL, NULL, &out, &len, &err) == JINJA_OK && len == 3 && memcmp(out, "a\0b", 4) == 0, "NUL");
    free(out);
    jinja_free(t);
    /* the template text may hold NULs too, and need not end in one */
    t = jinja_compile("x\0y{{ 1 }}zzz", 10, &err);
    REQUIRE(t, "compile: %s", err);
    CHECK(jinja_render(t, NULL, NULL, &out, &len, &err) == JINJA_OK && len == 4 && memcmp(out, "x\0y1", 4) == 0, "NUL text");
    free(out);
    jinja_free(t);
    CHECK(!jinja_compile("{{ x", 4, &err) && err && strstr(err, "line 1"), "error: %s", err ? err : "none");
    free(err);
}

static void test_whitespace(void) {
    EXPECT("{% if true %}\nhello\n{% endif %}\n", NULL, "hello\n");
    EXPECT("    {% if true %}\n    hello\n    {% endif %}\n", NULL, "    hello\n");
    EXPECT("  {%- if true -%}  \n hello \n  {%- endif -%}  \n", NULL, "hello");
    EXPECT("a  {{- 'x' -}}  b", NULL, "axb");
    EXPECT("  {%+ if true %}x{% endif %}", NULL, "  x");
    EXPECT("{% if true +%}\nx{% endif %}", NULL, "\nx");
    EXPECT("a\n  {# comment #}\nb", NULL, "a\nb");
    EXPECT("{% raw %}{{ x }}{% endraw %}", NULL, "{{ x }}");
    EXPECT("line1\r\nline2\rline3\r\n", NULL, "line1\nline2\nline3");  /* one trailing newline goes */
    EXPECT("{{ 'a' }}\n{{ 'b' }}\n", NULL, "a\nb");
    EXPECT("{% for i in range(3) %}\n  {{ i }}\n{% endfor %}", NULL, "  0\n  1\n  2\n");
}

static void test_values(void) {
    EXPECT("{{ 1 + 2 * 3 }}|{{ 7 / 2 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 2 ** 10 }}|{{ 2 ** -1 }}", NULL,
           "7|3.5|3|-4|2|1024|0.5");
    EXPECT("{{ 0.1 + 0.2 }}|{{ 1e16 }}|{{ 1.5e-5 }}|{{ 3.0 }}|{{ 10 / 5 }}|{{ 1e15 }}", NULL,
           "0.30000000000000004|1e+16|1.5e-05|3.0|2.0|1000000000000000.0");
    EXPECT("{{ [1, 'two', 3.0, none, true, (5,), {'k': 'v'}] }}|{{ none }}|{{ true }}", NULL,
           "[1, 'two', 3.0, None, True, (5,), {'k': 'v'}]|None|True");
    EXPECT("{{ [\"it's\", 'say \"hi\"', 'both \\'\"', 'tab\\t', '\\x01'] }}", NULL,
           "[\"it's\", 'say \"hi\"', 'both \\'\"', 'tab\\t', '\\x01']");
    EXPECT("{{ 1 == 1.0 }}|{{ 1 == true }}|{{ (1, 2) == [1, 2] }}|{{ 'a' < 'b' < 'c' }}|{{ [1, 2] < [1, 3] }}", NULL,
           "True|True|False|True|True");
    EXPECT("{{ 'a' ~ 1 ~ none ~ u }}|{{ 'ab' * 2 }}|{{ [1] + [2] }}|{{ 'b' in 'abc' }}|{{ 3 not in [1, 2] }}", NULL,
           "a1None|abab|[1, 2]|True|True");
    EXPECT("{{ m.content }}|{{ m['role'] }}|{{ m.missing }}|{{ l[-1] }}|{{ l[9] }}|{{ l[::-1] }}|{{ s[1:3] }}",
           "{\"m\": {\"role\": \"user\", \"content\": \"hi\"}, \"l\": [1, 2, 3], \"s\": \"h\\u00e9llo\"}",
           "hi|user||3||[3, 2, 1]|\xc3\xa9l");
    /* JSON numbers: integral ones are ints, the rest floats; a repeated key keeps its place, last value */
    EXPECT("{{ a }} {{ b }} {{ c }} {{ d }}", "{\"a\": 5, \"b\": 2.5, \"c\": -0, \"d\": {\"x\": 1, \"y\": 2, \"x\": 3}}",
           "5 2.5 0 {'x': 3, 'y': 2}");
    EXPECT("{{ 'ΑΣ ΟΔΟΣ'|lower }}|{{ 'straße'|upper }}|{{ 'ǆungla'|capitalize }}|{{ '𝔘x'|length }}", NULL,
           "ας οδος|STRASSE|ǅungla|2");
}

static void test_statements(void) {
    EXPECT("{% for i in range(3) %}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.previtem }}/{% endfor %}",
           NULL, "1TrueFalse/2FalseFalse0/3FalseTrue1/");
    EXPECT("{% for i in [] %}x{% else %}empty{% endfor %}", NULL, "empty");
    EXPECT("{% for i in range(10) if i is odd %}{{ i }}{% endfor %}", NULL, "13579");
    EXPECT("{% for i in range(9) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
           NULL, "0134");
    EXPECT("{% set x = 1 %}{% for i in range(2) %}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}", NULL, "221");
    EXPECT("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}", NULL, "6");
    EXPECT("{% set a, b = 1, 2 %}{{ b }}{{ a }}|{% set t %}[{{ 'x' }}]{% endset %}{{ t }}", NULL, "21|[x]");
    EXPECT("{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('A') }} {{ greet(name='B', greeting='Hi') }}",
           NULL, "Hello, A! Hi, B!");
    EXPECT("{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}in{% endcall %}", NULL, "<in>");
    EXPECT("{% filter upper %}abc{% endfilter %}{% generation %}g{% endgeneration %}", NULL, "ABCg");
    EXPECT("{% for x in tree recursive %}{{ x.n }}{% if x.c %}({{ loop(x.c) }}){% endif %}{% endfor %}",
           "{\"tree\": [{\"n\": \"a\", \"c\": [{\"n\": \"b\"}]}, {\"n\": \"c\"}]}", "a(b)c");
}

static void test_filters_methods(void) {
    EXPECT("{{ ' x '|trim }}|{{ [3, 1, 2]|sort|join(',') }}|{{ users|map(attribute='n')|join }}|{{ users|selectattr('a')|list|length }}",
           "{\"users\": [{\"n\": \"p\", \"a\": true}, {\"n\": \"q\", \"a\": false}]}", "x|1,2,3|pq|1");
    EXPECT("{{ {'b': [1, 2.5, none], 'a': 'é\"'}|tojson }}|{{ [1]|tojson(indent=2) }}", NULL,
           "{\"b\": [1, 2.5, null], \"a\": \"é\\\"\"}|[\n  1\n]");
    EXPECT("{{ 'a,b'.split(',') }}|{{ 'x'.upper() }}|{{ d.get('k', 0) }}|{{ d.items()|list }}|{{ '{}-{}'.format(1, 2) }}|{{ '%05.1f' % 3.14159 }}",
           "{\"d\": {\"k\": 1}}", "['a', 'b']|X|1|[('k', 1)]|1-2|003.1");
    EXPECT("{{ ('<b>'|safe) + '<i>' }}|{{ '<'|escape }}", NULL, "<b>&lt;i&gt;|&lt;");
    EXPECT("{{ u|default('d') }}|{{ ''|default('e', true) }}|{{ '4.5'|int }}|{{ 2.5|round }}|{{ [1, 2, 2]|unique|list }}", NULL,
           "d|e|4|2.0|[1, 2]");
}

/* compile errors give their line; runtime errors theirs; raise_exception its message alone */
static void test_errors(void) {
    EXPECT("a\nb\n{% if x %}\n{{ y }", NULL, "COMPILE: line 4: unexpected '}'");
    EXPECT("{% for i in x %}", NULL,
           "COMPILE: line 1: Unexpected end of template. Jinja was looking for the following tags: 'endfor' or 'else'.");
    EXPECT("{{ x | nosuch }}", NULL, "COMPILE: line 1: No filter named 'nosuch'.");
    EXPECT("{% if false %}{{ x | nosuch }}{% endif %}ok", NULL, "ok");  /* inside if: checked when run */
    EXPECT("{% do x %}", NULL, "COMPILE: line 1: Encountered unknown tag 'do'.");
    EXPECT("{% include 'x' %}", NULL, "COMPILE: line 1: the 'include' statement is not supported in chat templates");
    EXPECT("line1\n{{ 1 + 'a' }}", NULL, "ERROR(1): line 2: unsupported operand type(s) for +: 'int' and 'str'");
    EXPECT("\n\n{{ x.y }}", NULL, "ERROR(1): line 3: 'x' is undefined");
    EXPECT("{{ messages[0].nope.deeper }}", "{\"messages\": [{\"role\": \"user\"}]}",
           "ERROR(1): line 1: 'dict object' has no attribute 'nope'");
    EXPECT("{% if true %}\n{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}",
           NULL, "ERROR(2): Conversation roles must alternate user/assistant/user/assistant/...");
    /* the sandbox: nothing is mutated, not even what the caller passed in */
    EXPECT("{{ messages.append(1) }}", "{\"messages\": []}",
           "ERROR(1): line 1: access to attribute 'append' of 'list' object is unsafe.");
    EXPECT("{% set d = {} %}{{ d.update({'a': 1}) }}", NULL,
           "ERROR(1): line 1: access to attribute 'update' of 'dict' object is unsafe.");
    EXPECT("{{ x.__class__ }}", "{\"x\": 1}", "");
    EXPECT_PREFIX("{{ x.__class__() }}", "{\"x\": 1}", "ERROR(1): line 1: access to attribute '__class__'");
    EXPECT("{{ range(100001)|length }}", NULL,
           "ERROR(1): line 1: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
}

/* hostile templates end with a limit error, quickly, and lose nothing else */
static void test_limits(void) {
    jinja_options o = {.max_output = 10000};
    char *got = render_opts("{% for i in range(100000) %}xxxxxxxxxx{% endfor %}", NULL, &o);
    CHECK(strstr(got, "ERROR(3)") && strstr(got, "output limit (10000 bytes)"), "output: %s", got);
    free(got);
    got = render("{% set r = range(1000) %}{% for a in r %}{% for b in r %}{% for c in r %}{% endfor %}{% endfor %}{% endfor %}",
                 NULL);
    CHECK(strstr(got, "ERROR(3)") && strstr(got, "evaluation step limit"), "steps: %s", got);
    free(got);
    got = render("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", NULL);
    CHECK(strstr(got, "ERROR(3)") && strstr(got, "nesting depth limit"), "depth: %s", got);
    free(got);
    jinja_options small = {.max_memory = 4u << 20};
    got = render_opts("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
                      NULL, &small);
    CHECK(strstr(got, "ERROR(3)") && (strstr(got, "memory limit") || strstr(got, "length limit")), "memory: %s", got);
    free(got);
    got = render("{{ 'x' * 1000000000 }}", NULL);
    CHECK(strstr(got, "ERROR(3)") && strstr(got, "length limit"), "repeat: %s", got);
    free(got);
    /* a list nested 100000 deep through a namespace: printing it must not overflow the stack */
    got = render("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}", NULL);
    CHECK(strstr(got, "ERROR(3)") && strstr(got, "nesting depth limit"), "deep value: %s", got);
    free(got);
    /* deeply nested source is refused when compiled */
    char deep[4200];
    memset(deep, '(', 2000);
    strcpy(deep + 2000, "1");
    memset(deep + 2001, ')', 2000);
    deep[4001] = 0;
    char text[4300];
    snprintf(text, sizeof text, "{{ %s }}", deep);
    got = render(text, NULL);
    CHECK(strstr(got, "COMPILE") && strstr(got, "nested too deeply"), "deep source: %s", got);
    free(got);
    /* work that scans big values costs steps in proportion, so loops over it end too
     * (within seconds: a step is about the work of decoding 16 bytes) */
    static const char *const heavy[] = {
        "{% set s = 'x' * 1000000 %}{% for i in range(100000) %}{% if 'y' in s %}{% endif %}{% endfor %}",
        "{% set s = 'x' * 1000000 %}{% set t = 'x' * 1000000 %}{% for i in range(100000) %}{% if s == t %}{% endif %}{% endfor %}",
        "{% set l = range(100000)|list %}{% for i in range(100000) %}{% set j = l|tojson %}{% endfor %}",
        "{% set ns = namespace(d={}) %}{% for i in range(50000) %}{% set ns.d = dict(ns.d, **{('k' ~ i): i}) %}{% endfor %}",
        "{% set s = '\u00e9' * 1000000 %}{% for i in range(100000) %}{{ s[i] if false }}{% set c = s[-1] %}{% endfor %}",
    };
    jinja_options fewer = {.max_steps = 2000000};  /* a tenth of the default: the same ends, sooner */
    for (size_t i = 0; i < sizeof heavy / sizeof heavy[0]; i++) {
        got = render_opts(heavy[i], NULL, &fewer);
        CHECK(strstr(got, "ERROR(3)") && (strstr(got, "step limit") || strstr(got, "memory limit")), "heavy %zu: %s", i, got);
        free(got);
    }
    /* found by fuzz_jinja: arithmetic on widths, slice steps and range items near 2^63 */
    EXPECT("{{ '%99999999999999999999999d' % 1 }}", NULL, "ERROR(1): line 1: width or precision too big");
    EXPECT("{{ '{:99999999999999999999999}'.format(1) }}", NULL, "ERROR(1): line 1: Invalid format specifier");
    EXPECT("{{ [1, 2, 3][::-9223372036854775807 - 1] }}|{{ 'abc'[::-9223372036854775807 - 1] }}|{{ [1, 2, 3][0::4611686018427387904] }}",
           NULL, "[3]|c|[1]");
    EXPECT("{{ range(-9223372036854775807, 9223372036854775807, 4611686018427387904)|list }}", NULL,
           "[-9223372036854775807, -4611686018427387903, 1, 4611686018427387905]");
    got = render("{{ -1 - 9223372036854775807 - 1 }}", NULL);
    CHECK(strstr(got, "ERROR(1)") && strstr(got, "integer overflow"), "overflow: %s", got);
    free(got);
}

/* ---- one template, many threads ---- */

static const char *chat_template =
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' and '</think>' in m.content %}"
    "{%- set content = m.content.split('</think>')[-1].lstrip('\\n') %}"
    "{%- else %}{%- set content = m.content %}{%- endif %}"
    "<|im_start|>{{ m.role }}\n{{ content|trim }}<|im_end|>\n"
    "{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and not enable_thinking %}"
    "<think>\n\n</think>\n\n{% endif %}{% endif %}";

typedef struct {
    const jinja_template *t;
    int id, failures;
} worker;

static char *context_for(int id, int i) {
    char *ctx = malloc(512);
    snprintf(ctx, 512,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"question %d.%d\"},"
             " {\"role\": \"assistant\", \"content\": \"<think>r%d</think>\\n answer %d \"}],"
             " \"add_generation_prompt\": %s%s}",
             id, i, i, id, i % 2 ? "true" : "false", i % 3 ? "" : ", \"enable_thinking\": false");
    return ctx;
}

static char *expected_for(int id, int i) {
    char *want = malloc(512);
    snprintf(want, 512, "<|im_start|>user\nquestion %d.%d<|im_end|>\n<|im_start|>assistant\nanswer %d<|im_end|>\n%s%s", id, i,
             id, i % 2 ? "<|im_start|>assistant\n" : "", i % 2 && i % 3 == 0 ? "<think>\n\n</think>\n\n" : "");
    return want;
}

static void *work(void *arg) {
    worker *w = arg;
    for (int i = 0; i < 300; i++) {
        char *ctx_text = context_for(w->id, i), *want = expected_for(w->id, i), *out = NULL, *err = NULL;
        cJSON *ctx = cJSON_Parse(ctx_text);
        size_t len;
        int rc = jinja_render(w->t, ctx, NULL, &out, &len, &err);
        if (rc != JINJA_OK || strcmp(out, want) != 0) w->failures++;
        free(out);
        free(err);
        free(want);
        free(ctx_text);
        cJSON_Delete(ctx);
    }
    return NULL;
}

static void test_threads(void) {
    char *err = NULL;
    jinja_template *t = jinja_compile(chat_template, strlen(chat_template), &err);
    REQUIRE(t, "compile: %s", err);
    enum { N = 4 };
    pthread_t th[N];
    worker w[N];
    for (int i = 0; i < N; i++) {
        w[i] = (worker){.t = t, .id = i};
        pthread_create(&th[i], NULL, work, &w[i]);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        CHECK(w[i].failures == 0, "thread %d: %d of 300 renders wrong", i, w[i].failures);
    }
    jinja_free(t);
}

int main(void) {
    test_api();
    test_whitespace();
    test_values();
    test_statements();
    test_filters_methods();
    test_errors();
    test_limits();
    test_threads();
    return check_report("test_jinja");
}
