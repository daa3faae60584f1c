/* test_default_template.c - the default model's conversations render in chatfs exactly as the model was
 * trained on them. models/chatfs-default.gguf carries Qwen3.5's Jinja chat template; tools/train rendered its
 * training prompts with that template through jinja2 (as Hugging Face does), and check_template.py --write
 * saved a sample of those renders (held-out prompts and training conversations, thinking on and off, history
 * with generated replies stored as chatfs stores them) in tests/fixtures/default-model-renders.jsonl. chatfs
 * renders the GGUF's own template (engine/template, the Jinja interpreter) and must give every sample byte for
 * byte. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf/gguf.h"
#include "engine/template/template.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/check.h"
#include "tests/oracle.h"

#define MODEL "models/chatfs-default.gguf"
#define RENDERS "tests/fixtures/default-model-renders.jsonl"
#define MAX_MSGS 16

int main(void) {
    char err[256];
    gguf_file *f = gguf_open(MODEL, err, sizeof err);
    REQUIRE(f, "%s", err);
    tokenizer *tok = tokenizer_load(f, err, sizeof err);
    REQUIRE(tok, "%s", err);
    chat_template *t = template_from_gguf(f, tok, err, sizeof err);
    REQUIRE(t, "the model's template does not compile: %s", err);
    CHECK(template_name(t) == NULL, "the model's own template, not the built-in %s", template_name(t));
    size_t tlen;
    const char *text = template_text(t, &tlen);
    const char *family = template_resembles(text, tlen);
    CHECK(family && !strcmp(family, "qwen35"), "resembles %s, want qwen35", family ? family : "(none)");
    CHECK(template_uses(t, "enable_thinking"), "the template reads enable_thinking");

    char *data = read_file(RENDERS, NULL);
    REQUIRE(data, "cannot read %s", RENDERS);
    int n_cases = 0, n_diff = 0, n_think = 0, n_nothink = 0;
    for (char *line = strtok(data, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        REQUIRE(j, "malformed line: %.80s", line);
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(j, "messages");
        const char *want = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "text"));
        const cJSON *thinking = cJSON_GetObjectItemCaseSensitive(j, "thinking");
        const cJSON *gen = cJSON_GetObjectItemCaseSensitive(j, "add_generation_prompt");
        int n = cJSON_GetArraySize(msgs);
        REQUIRE(want && cJSON_IsBool(thinking) && cJSON_IsBool(gen) && n > 0 && n <= MAX_MSGS, "malformed line: %.80s",
                line);
        chat_msg m[MAX_MSGS] = {0};
        for (int i = 0; i < n; i++) {
            const cJSON *it = cJSON_GetArrayItem(msgs, i);
            m[i].role = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "role"));
            m[i].content = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "content"));
            m[i].reasoning_content = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "reasoning_content"));
            REQUIRE(m[i].role && m[i].content, "malformed message: %.80s", line);
        }
        const int think = cJSON_IsTrue(thinking), add_gen = cJSON_IsTrue(gen);
        n_think += think, n_nothink += !think;
        size_t len = 0;
        char *got = template_render(t, m, n, add_gen, think, &len, err, sizeof err);
        int same = got && len == strlen(want) && memcmp(got, want, len) == 0;
        if (!same && n_diff++ < 3)
            fprintf(stderr, "  thinking %d, generation prompt %d\n  jinja:  [%s]\n  chatfs: [%s]\n", think, add_gen,
                    want, got ? got : err);
        n_cases++;
        free(got);
        cJSON_Delete(j);
    }
    printf("default model's template: %d Jinja renders (%d thinking on, %d off), %d differ\n", n_cases, n_think,
           n_nothink, n_diff);
    CHECK(n_cases >= 100 && n_think > 0 && n_nothink > 0, "only %d renders", n_cases);
    CHECK(n_diff == 0, "%d of %d renders differ from the Jinja template's", n_diff, n_cases);
    free(data);
    template_unref(t);
    tokenizer_free(tok);
    gguf_close(f);
    return check_report("test_default_template");
}
