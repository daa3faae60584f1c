/* detect.c - a template's family by the markers in its Jinja source, and the families'
 * names. The XML and LFM2 tests are llama.cpp's own (common_chat_try_specialized_template,
 * common/parsers/lfm2.cpp's is_lfm2_template); the JSON families llama.cpp derives by
 * rendering the template (its autoparser), here by the markers those renders come from:
 * <tool_call> for the Hermes family, Llama 3's header tokens and "parameters" key. */
#include "engine/toolcall/toolcall_impl.h"

#include <string.h>

static bool has(const char *s, size_t n, const char *lit) { return tc_find(s, 0, n, lit) < n; }

enum tc_family tc_detect(const char *src, size_t n) {
    if (!src) return TC_NONE;
    if (has(src, n, "<|tool_list_start|>") && has(src, n, "<|tool_list_end|>")) return TC_LFM2;
    if (has(src, n, "List of tools: [") && !has(src, n, "<|tool_list_start|>")) return TC_LFM2; /* LFM2.5 */
    /* Qwen3-Coder's parser, also Nemotron-3 Nano's and Qwen3.5's; not the templates that
     * write the tags without newlines between them (llama.cpp's exclusion) */
    if (has(src, n, "<tool_call>") && has(src, n, "<function=") && has(src, n, "<parameter=") &&
        !has(src, n, "'<tool_call><function=' ~ tool_call.name ~ '>'"))
        return has(src, n, "<think>") ? TC_QWEN_XML : TC_QWEN3_CODER;
    if (has(src, n, "<tool_call>") && has(src, n, "</tool_call>")) return TC_HERMES;
    if (has(src, n, "<|start_header_id|>") && has(src, n, "\"parameters\"")) return TC_LLAMA3;
    return TC_NONE;
}

static const char *const names[] = {
    [TC_NONE] = "none",     [TC_QWEN_XML] = "qwen-xml", [TC_QWEN3_CODER] = "qwen3-coder",
    [TC_HERMES] = "hermes", [TC_LLAMA3] = "llama3",     [TC_LFM2] = "lfm2",
};

const char *tc_family_name(enum tc_family f) {
    return (unsigned)f < sizeof names / sizeof names[0] ? names[f] : "none";
}

bool tc_family_from_name(const char *name, enum tc_family *out) {
    for (size_t k = 0; name && k < sizeof names / sizeof names[0]; k++)
        if (strcmp(name, names[k]) == 0) return *out = (enum tc_family)k, true;
    return false;
}
