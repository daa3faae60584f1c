/* fuzz_jinja.c - libFuzzer target for the Jinja interpreter (engine/jinja/).
 *
 * An input is template text, then optionally a NUL byte and the conversation: message
 * contents separated by \x01 (roles alternate user/assistant; a first content starting
 * with 'S' is a system prompt; an assistant content of the form "R...\x02..." gets a
 * reasoning_content). The first byte after the NUL also picks add_generation_prompt,
 * enable_thinking (true/false/absent) and whether tools are given.
 *
 * Every input must give either a compile error, a render error or an output; never a
 * crash, a hang or a leak. Tight limits keep each run short; the render must respect them.
 *   make fuzz-jinja      (clang -fsanitize=fuzzer,address,undefined; FUZZ_SECONDS) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/jinja/jinja.h"

#define MAX_OUTPUT (1u << 20)

static cJSON *tools(void) {
    return cJSON_Parse("[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather.\","
                       " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"},"
                       " \"days\": {\"type\": \"integer\", \"enum\": [1, 2]}}, \"required\": [\"city\"]}}}]");
}

static cJSON *context(const uint8_t *p, size_t n) {
    static const uint8_t none[1];
    if (!p) p = none;
    cJSON *ctx = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(ctx, "messages");
    uint8_t flags = n ? p[0] : 0;
    if (n) {
        p++;
        n--;
    }
    cJSON_AddBoolToObject(ctx, "add_generation_prompt", flags & 1);
    if ((flags >> 1) % 3 == 1) cJSON_AddBoolToObject(ctx, "enable_thinking", 1);
    if ((flags >> 1) % 3 == 2) cJSON_AddBoolToObject(ctx, "enable_thinking", 0);
    if (flags & 0x80) cJSON_AddItemToObject(ctx, "tools", tools());
    cJSON_AddStringToObject(ctx, "bos_token", "<s>");
    cJSON_AddStringToObject(ctx, "eos_token", "</s>");
    size_t start = 0;
    int index = 0, roles = 0;
    for (size_t i = 0; i <= n && index < 32; i++) {
        if (i < n && p[i] != 0x01) continue;
        char *text = malloc(i - start + 1);
        memcpy(text, p + start, i - start);
        text[i - start] = 0;  /* cJSON strings end at a NUL anyway */
        cJSON *m = cJSON_CreateObject();
        const char *role = index == 0 && text[0] == 'S' ? "system" : roles++ % 2 ? "assistant" : "user";
        cJSON_AddStringToObject(m, "role", role);
        char *sep = strchr(text, 0x02);
        if (!strcmp(role, "assistant") && text[0] == 'R' && sep) {
            *sep = 0;
            cJSON_AddStringToObject(m, "reasoning_content", text + 1);
            cJSON_AddStringToObject(m, "content", sep + 1);
        } else cJSON_AddStringToObject(m, "content", text);
        cJSON_AddItemToArray(msgs, m);
        free(text);
        start = i + 1;
        index++;
    }
    return ctx;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t tlen = nul ? (size_t)(nul - data) : size;
    char *err = NULL;
    jinja_template *t = jinja_compile((const char *)data, tlen, &err);
    if (!t) {
        if (!err || !err[0]) __builtin_trap();  /* a compile error always says what */
        free(err);
        return 0;
    }
    cJSON *ctx = nul ? context(nul + 1, size - tlen - 1) : context(NULL, 0);
    jinja_options o = {.max_output = MAX_OUTPUT, .max_memory = 64u << 20, .max_steps = 200000, .fixed_time = 1,
                       .now = 1767225600};
    char *out = NULL;
    size_t len = 0;
    int rc = jinja_render(t, ctx, &o, &out, &len, &err);
    if (rc == JINJA_OK) {
        if (!out || out[len] != 0 || len > MAX_OUTPUT) __builtin_trap();
    } else if (out || !err || !err[0]) __builtin_trap();
    free(err);
    /* the same again: rendering does not change a compiled template */
    char *out2 = NULL;
    size_t len2 = 0;
    int rc2 = jinja_render(t, ctx, &o, &out2, &len2, &err);
    if (rc2 != rc || len2 != len || (out && memcmp(out, out2, len) != 0)) __builtin_trap();
    free(out);
    free(out2);
    free(err);
    cJSON_Delete(ctx);
    jinja_free(t);
    return 0;
}
