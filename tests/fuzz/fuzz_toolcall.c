/* fuzz_toolcall.c - libFuzzer target for the tool-call reader (engine/toolcall/).
 *
 * An input is two bytes and an answer text: the first byte picks the family (modulo the
 * families) and whether functions are offered (0x80), the second where the text is cut for
 * a partial reading. Every input must read without a crash or a leak, and keep the room's
 * promises: the partial reading of a prefix is a prefix of the whole reading (content and
 * calls), and the whole text streamed in pieces reads as the whole text at once. A broken
 * promise aborts.
 *   make fuzz-toolcall   (clang -fsanitize=fuzzer,address,undefined; FUZZ_SECONDS) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/toolcall/toolcall.h"

static const char TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"calculator\", \"parameters\": {\"type\": \"object\","
    " \"properties\": {\"expression\": {\"type\": \"string\"}}, \"required\": [\"expression\"]}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\","
    " \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": [\"integer\", \"null\"]},"
    " \"metric\": {\"type\": \"boolean\"}, \"extra\": {\"anyOf\": [{\"type\": \"object\"}, {\"type\": \"array\"}]}}}}}]";

static void promise(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "fuzz_toolcall: %s\n", what);
        abort();
    }
}

static int prefix_of(const struct tc_reply *a, const struct tc_reply *b) {
    if (a->content_len > b->content_len || memcmp(a->content, b->content, a->content_len)) return 0;
    if (a->n_calls > b->n_calls) return 0;
    for (int k = 0; k < a->n_calls; k++)
        if (strcmp(a->calls[k].name, b->calls[k].name) || strcmp(a->calls[k].arguments, b->calls[k].arguments))
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static struct tc_tools *tools;
    if (!tools) tools = tc_tools_parse(TOOLS, strlen(TOOLS), NULL, 0);
    if (size < 2) return 0;
    enum tc_family f = (enum tc_family)((data[0] & 0x7F) % (TC_LFM2 + 1));
    const struct tc_tools *t = data[0] & 0x80 ? tools : NULL;
    size_t n = size - 2, cut = n ? data[1] % (n + 1) : 0;
    char *text = malloc(n ? n : 1); /* exactly n bytes: any read past them is seen */
    memcpy(text, data + 2, n);

    struct tc_reply whole, part;
    promise(tc_parse(f, t, text, n, 1, &whole) == 0, "out of memory");
    promise(tc_parse(f, t, text, cut, 0, &part) == 0, "out of memory");
    promise(prefix_of(&part, &whole), "a prefix read more than the whole text");
    for (int k = 0; k < whole.n_calls; k++) promise(whole.calls[k].index == k, "calls out of order");

    struct tc_stream st;
    tc_stream_init(&st, f, t);
    size_t step = 1 + data[1] % 13;
    for (size_t i = 0; i < n; i += step) promise(tc_stream_feed(&st, text, i, 0) == 0, "out of memory");
    promise(tc_stream_feed(&st, text, n, 1) == 0, "out of memory");
    promise(prefix_of(&st.reply, &whole) && prefix_of(&whole, &st.reply), "the stream read otherwise");

    size_t safe, end = tc_reasoning_end(f, text, n, &safe);
    promise(end <= n && safe <= n, "a reasoning end past the text");

    tc_stream_free(&st);
    tc_reply_free(&part);
    tc_reply_free(&whole);
    free(text);
    return 0;
}
