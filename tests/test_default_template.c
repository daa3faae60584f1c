/* test_default_template.c - the default model's conversations render in chatfs exactly as the model was
 * trained on them. models/chatfs-default.gguf carries Qwen3.5's Jinja chat template; tools/train rendered its
 * training prompts with that template through jinja2 (as Hugging Face does), and check_template.py --write
 * saved a sample of those renders (held-out prompts and training conversations, thinking on and off, history
 * with generated replies stored as chatfs stores them) in tests/fixtures/default-model-renders.jsonl. chatfs
 * must recognise the GGUF's template as the Qwen3.5 family and render every sample byte for byte. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"
#include "engine/template.h"
#include "tests/check.h"
#include "tests/oracle.h"

#define MODEL "models/chatfs-default.gguf"
#define RENDERS "tests/fixtures/default-model-renders.jsonl"
#define MAX_MSGS 16

int main(void) {
    char err[256];
    gguf_file *f = gguf_open(MODEL, err, sizeof err);
    REQUIRE(f, "%s", err);
    gguf_str js;
    REQUIRE(gguf_get_str(f, "tokenizer.chat_template", &js) == 1, "%s has no chat template", MODEL);
    char *jinja = malloc(js.len + 1);
    REQUIRE(jinja, "out of memory");
    memcpy(jinja, js.s, js.len);
    jinja[js.len] = 0;
    gguf_close(f);

    chat_template t;
    template_detect(&t, jinja);
    CHECK(t.known && t.family == TMPL_QWEN35 && t.variant == 0, "family %s variant %d: want qwen35 0",
          template_family_name(t.family), t.variant);
    CHECK(t.enable_thinking == 1, "thinking is on by default");

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
        chat_msg m[MAX_MSGS];
        for (int i = 0; i < n; i++) {
            const cJSON *it = cJSON_GetArrayItem(msgs, i);
            m[i].role = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "role"));
            m[i].content = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "content"));
            REQUIRE(m[i].role && m[i].content, "malformed message: %.80s", line);
        }
        t.enable_thinking = cJSON_IsTrue(thinking);
        n_think += t.enable_thinking, n_nothink += !t.enable_thinking;
        char *got = template_render(&t, m, n, cJSON_IsTrue(gen));
        int same = got && strcmp(got, want) == 0;
        if (!same && n_diff++ < 3)
            fprintf(stderr, "  thinking %d, generation prompt %d\n  jinja:  [%s]\n  chatfs: [%s]\n", t.enable_thinking,
                    cJSON_IsTrue(gen), want, got ? got : "(null)");
        n_cases++;
        free(got);
        cJSON_Delete(j);
    }
    printf("default model's template: %d Jinja renders (%d thinking on, %d off), %d differ\n", n_cases, n_think,
           n_nothink, n_diff);
    CHECK(n_cases >= 100 && n_think > 0 && n_nothink > 0, "only %d renders", n_cases);
    CHECK(n_diff == 0, "%d of %d renders differ from the Jinja template's", n_diff, n_cases);
    free(data);
    free(jinja);
    return check_report("test_default_template");
}
