/* test_default_model.c - the default model (models/chatfs-default.gguf) through the engine:
 * every held-out question of tools/train/heldout.jsonl (generated, never trained on) is run
 * greedily, with thinking on (the template's default: the prompt ends inside "<think>")
 * and off, and its answer - what on_text gets, the reasoning apart - checked like
 * tools/train/evaluate.py checks the answer ("exact": answer == expect after trimming
 * whitespace; "contains": expect occurs in it). Fails below 95 % in either mode. With
 * thinking on, the questions trained with a reasoning must get one (on_reasoning, phase
 * GEN_THINKING, reasoning_tokens); with thinking off no reply has any; no answer contains
 * a marker. Then the thinking budget: the questions whose trained reasoning is longer than
 * BUDGET tokens, cut there (the engine feeds "\n</think>\n\n"), must still be answered
 * (MIN_BUDGET_ACCURACY). */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/runtime/chat.h"
#include "tests/check.h"
#include "tests/oracle.h"
#include "tests/reply.h"

#define MODEL "models/chatfs-default.gguf"
#define HELDOUT "tools/train/heldout.jsonl"
#define MIN_ACCURACY 0.95
#define MAX_KINDS 32
#define MAX_MSGS 16
#define MAX_ITEMS 1024
#define BUDGET 8
#define MIN_BUDGET_ACCURACY 0.70

/* Python's str.strip(): ASCII whitespace at both ends (the answers are ASCII or French words) */
static void strip(const char *s, size_t n, const char **b, size_t *len) {
    while (n && isspace((unsigned char)*s)) s++, n--;
    while (n && isspace((unsigned char)s[n - 1])) n--;
    *b = s;
    *len = n;
}

static int is_correct(const char *check, const char *expect, const char *reply, size_t rn) {
    if (check && !strcmp(check, "contains")) {
        size_t en = strlen(expect);
        for (size_t i = 0; i + en <= rn; i++)
            if (!memcmp(reply + i, expect, en)) return 1;
        return en == 0;
    }
    const char *a, *b;
    size_t an, bn;
    strip(reply, rn, &a, &an);
    strip(expect, strlen(expect), &b, &bn);
    return an == bn && !memcmp(a, b, an);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

typedef struct {
    const char *kind, *expect, *check, *reasoning;
    chat_msg m[MAX_MSGS];
    int n;
} item;

typedef struct {
    char kinds[MAX_KINDS][32];
    int ok[MAX_KINDS], total[MAX_KINDS], n_kinds, n_items, n_ok;
} tally;

static void count(tally *t, const char *kind, int good) {
    int k = 0;
    while (k < t->n_kinds && strcmp(t->kinds[k], kind)) k++;
    if (k == t->n_kinds) {
        REQUIRE(t->n_kinds < MAX_KINDS, "too many kinds");
        snprintf(t->kinds[t->n_kinds++], sizeof t->kinds[0], "%s", kind);
    }
    t->total[k]++, t->ok[k] += good;
    t->n_items++, t->n_ok += good;
}

static double report(const tally *t, const char *title, double seconds) {
    printf("%s\n", title);
    for (int k = 0; k < t->n_kinds; k++)
        printf("  %-14s %3d/%3d  %6.2f%%\n", t->kinds[k], t->ok[k], t->total[k], 100.0 * t->ok[k] / t->total[k]);
    double acc = t->n_items ? (double)t->n_ok / t->n_items : 0;
    printf("  %-14s %3d/%3d  %6.2f%%   (%.1f s)\n", "TOTAL", t->n_ok, t->n_items, 100.0 * acc, seconds);
    return acc;
}

static int has_marker(const char *s) { return strstr(s, "<think>") || strstr(s, "</think>"); }

int main(void) {
    char *data = read_file(HELDOUT, NULL);
    REQUIRE(data, "cannot read %s", HELDOUT);
    engine_config cfg = {.model_path = MODEL, .threads = getenv("T") ? atoi(getenv("T")) : 2, .n_ctx = 512};
    char err[256];
    chat_engine *e = engine_open(&cfg, err, sizeof err);
    REQUIRE(e, "%s", err);
    CHECK(engine_can_think(e), "the default model can think");

    static item items[MAX_ITEMS];
    cJSON *lines[MAX_ITEMS];
    int n_items = 0;
    for (char *line = strtok(data, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        if (!j) continue;
        REQUIRE(n_items < MAX_ITEMS, "too many held-out items");
        item *it = &items[n_items];
        lines[n_items++] = j;
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(j, "messages");
        it->kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "kind"));
        it->expect = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "expect"));
        it->check = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "check"));
        it->reasoning = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "reasoning"));
        it->n = cJSON_GetArraySize(msgs);
        REQUIRE(it->kind && it->expect && it->n > 0 && it->n <= MAX_MSGS, "malformed held-out line: %.80s", line);
        for (int i = 0; i < it->n; i++) {
            const cJSON *m = cJSON_GetArrayItem(msgs, i);
            it->m[i].role = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "role"));
            it->m[i].content = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "content"));
            it->m[i].reasoning_content = it->m[i].tool_calls = it->m[i].tool_call_id = NULL;
            REQUIRE(it->m[i].role && it->m[i].content, "malformed message in: %.80s", line);
        }
    }

    /* both modes: the answers, and where the reasoning went */
    for (int thinking = 1; thinking >= 0; thinking--) {
        double t0 = now();
        tally t = {0};
        int shown = 0, want_reasoning = 0, got_reasoning = 0, same_reasoning = 0, stray = 0, markers = 0, phases = 0;
        for (int i = 0; i < n_items; i++) {
            const item *it = &items[i];
            gen_settings s;
            engine_settings_defaults(e, &s); /* greedy: the file recommends no sampling */
            s.enable_thinking = thinking;
            s.max_tokens = 96; /* as evaluate.py: the longest reasoning and answer fit */
            static test_reply out;
            int rc = reply_run(e, it->m, it->n, &s, &out);
            CHECK(rc == 0, "engine run: %s", out.error);
            int good = rc == 0 && is_correct(it->check, it->expect, out.answer, out.n_answer);
            count(&t, it->kind, good);
            markers += has_marker(out.answer) || has_marker(out.reasoning);
            if (thinking && it->reasoning && *it->reasoning) {
                want_reasoning++;
                got_reasoning += out.n_reasoning > 0;
                same_reasoning += !strcmp(out.reasoning, it->reasoning);
                phases += out.saw_thinking && out.report.reasoning_tokens > 0 && out.report.reasoning_tokens < out.report.generated_tokens;
            } else {
                stray += out.n_reasoning > 0;
            }
            CHECK(!out.reasoning_after_answer && !out.thinking_after_generating, "reasoning after the answer");
            if (!thinking) CHECK(out.report.reasoning_tokens == 0 && !out.saw_thinking, "thinking off, yet reasoning");
            if (!good && shown++ < 12)
                fprintf(stderr, "  wrong [%s, thinking %s] %s\n     expected '%s'\n     got      '%s' (reasoning '%s')\n",
                        it->kind, thinking ? "on" : "off", it->m[it->n - 1].content, it->expect, out.answer,
                        out.reasoning);
        }
        double acc = report(&t, thinking ? "default model, held-out answers through the engine (greedy), thinking on:"
                                         : "thinking off:",
                            now() - t0);
        if (thinking)
            printf("  reasoning: %d of the %d questions trained with one got one (%d word for word, %d with the phases and "
                   "counts right); %d others got one\n",
                   got_reasoning, want_reasoning, same_reasoning, phases, stray);
        else
            printf("  reasoning: %d replies got one\n", stray);
        CHECK(t.n_items >= 400, "only %d held-out questions", t.n_items);
        CHECK(acc >= MIN_ACCURACY, "thinking %s: accuracy %.2f%% < %.0f%%", thinking ? "on" : "off", 100.0 * acc,
              100.0 * MIN_ACCURACY);
        CHECK(markers == 0, "%d replies show a marker", markers);
        if (thinking) {
            CHECK(want_reasoning >= 100 && got_reasoning >= want_reasoning * 95 / 100, "%d of %d got a reasoning",
                  got_reasoning, want_reasoning);
            CHECK(phases == got_reasoning, "%d of %d reasoning replies with GEN_THINKING and reasoning_tokens", phases,
                  got_reasoning);
        } else {
            CHECK(stray == 0, "thinking off: %d replies with a reasoning", stray);
        }
    }

    /* the thinking budget, on the questions whose trained reasoning is longer than it */
    double t0 = now();
    tally t = {0};
    int cut = 0;
    for (int i = 0; i < n_items; i++) {
        const item *it = &items[i];
        if (!it->reasoning || !*it->reasoning) continue;
        char text[1024];
        snprintf(text, sizeof text, "%s\n", it->reasoning);
        int *ids = NULL, n = tokenizer_encode(engine_model(e)->tok, text, strlen(text), 0, 1, &ids);
        free(ids);
        if (n <= BUDGET) continue;
        gen_settings s;
        engine_settings_defaults(e, &s);
        s.max_tokens = 96;
        s.thinking_budget = BUDGET;
        static test_reply out;
        int rc = reply_run(e, it->m, it->n, &s, &out);
        CHECK(rc == 0, "engine run: %s", out.error);
        count(&t, it->kind, rc == 0 && is_correct(it->check, it->expect, out.answer, out.n_answer));
        /* BUDGET tokens of reasoning, then the closing marker (the forced "\n" and "\n\n" around it) */
        cut += out.report.reasoning_tokens <= BUDGET + 4 && out.n_reasoning > 0 && !has_marker(out.answer);
    }
    char title[96];
    snprintf(title, sizeof title, "thinking budget %d tokens (\"\\n</think>\\n\\n\" fed), the longer reasonings:", BUDGET);
    double acc = report(&t, title, now() - t0);
    CHECK(t.n_items >= 50, "only %d questions with a reasoning longer than %d tokens", t.n_items, BUDGET);
    CHECK(cut == t.n_items, "%d of %d replies cut at the budget", cut, t.n_items);
    CHECK(acc >= MIN_BUDGET_ACCURACY, "budget: accuracy %.2f%% < %.0f%%", 100.0 * acc, 100.0 * MIN_BUDGET_ACCURACY);

    engine_close(e);
    for (int i = 0; i < n_items; i++) cJSON_Delete(lines[i]);
    free(data);
    return check_report("test_default_model");
}
