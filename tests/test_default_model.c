/* test_default_model.c - the default model (models/chatfs-default.gguf) through the engine:
 * every held-out question of tools/train/heldout.jsonl (generated, never trained on) is run
 * greedily through engine_run and its reply checked exactly like tools/train/evaluate.py
 * does ("exact": reply == expect after trimming whitespace; "contains": expect occurs in
 * the reply). Prints the accuracy per kind; fails below 95 % in total. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/runtime/chat.h"
#include "tests/check.h"
#include "tests/oracle.h"

#define MODEL "models/chatfs-default.gguf"
#define HELDOUT "tools/train/heldout.jsonl"
#define MIN_ACCURACY 0.95
#define MAX_KINDS 32
#define MAX_MSGS 16

typedef struct {
    char text[4096];
    size_t n;
} sink;

static void collect(void *ud, const char *t, size_t n) {
    sink *s = ud;
    if (s->n + n < sizeof s->text) memcpy(s->text + s->n, t, n), s->n += n;
}

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

int main(void) {
    double t0 = now();
    char *data = read_file(HELDOUT, NULL);
    REQUIRE(data, "cannot read %s", HELDOUT);
    engine_config cfg = {.model_path = MODEL, .threads = getenv("T") ? atoi(getenv("T")) : 2, .n_ctx = 512};
    char err[256];
    chat_engine *e = engine_open(&cfg, err, sizeof err);
    REQUIRE(e, "%s", err);

    char kinds[MAX_KINDS][32];
    int ok[MAX_KINDS] = {0}, total[MAX_KINDS] = {0}, n_kinds = 0, n_items = 0, n_ok = 0, shown = 0;
    for (char *line = strtok(data, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        if (!j) continue;
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(j, "messages");
        const char *kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "kind"));
        const char *expect = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "expect"));
        const char *check = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "check"));
        int n = cJSON_GetArraySize(msgs);
        REQUIRE(kind && expect && n > 0 && n <= MAX_MSGS, "malformed held-out line: %.80s", line);
        chat_msg m[MAX_MSGS];
        for (int i = 0; i < n; i++) {
            const cJSON *it = cJSON_GetArrayItem(msgs, i);
            m[i].role = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "role"));
            m[i].content = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "content"));
            m[i].reasoning_content = NULL;
            REQUIRE(m[i].role && m[i].content, "malformed message in: %.80s", line);
        }
        gen_settings s;
        gen_settings_defaults(&s); /* greedy */
        s.max_tokens = 64;         /* as evaluate.py; every expected answer is shorter */
        sink out = {0};
        gen_report r;
        int rc = engine_run(e, m, n, &s, collect, &out, &r, err, sizeof err);
        CHECK(rc == 0, "engine_run: %s", err);
        int good = rc == 0 && is_correct(check, expect, out.text, out.n);

        int k = 0;
        while (k < n_kinds && strcmp(kinds[k], kind)) k++;
        if (k == n_kinds) {
            REQUIRE(n_kinds < MAX_KINDS, "too many kinds");
            snprintf(kinds[n_kinds++], sizeof kinds[0], "%s", kind);
        }
        total[k]++, ok[k] += good;
        n_items++, n_ok += good;
        if (!good && shown++ < 20)
            fprintf(stderr, "  wrong [%s] %s\n     expected '%s'\n     got      '%.*s'\n", kind, m[n - 1].content,
                    expect, (int)out.n, out.text);
        cJSON_Delete(j);
    }
    engine_close(e);
    free(data);

    printf("default model, held-out questions through the engine (greedy):\n");
    for (int k = 0; k < n_kinds; k++)
        printf("  %-14s %3d/%3d  %6.2f%%\n", kinds[k], ok[k], total[k], 100.0 * ok[k] / total[k]);
    double acc = n_items ? (double)n_ok / n_items : 0;
    printf("  %-14s %3d/%3d  %6.2f%%   (%.1f s)\n", "TOTAL", n_ok, n_items, 100.0 * acc, now() - t0);
    CHECK(n_items >= 200, "only %d held-out questions", n_items);
    CHECK(acc >= MIN_ACCURACY, "accuracy %.2f%% < %.0f%%", 100.0 * acc, 100.0 * MIN_ACCURACY);
    return check_report("test_default_model");
}
