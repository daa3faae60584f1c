/* test_template.c - chat template families: exact renders (docs/engine-math.md §9), detection
 * from representative Jinja text, forcing by name, and the ChatML fallback. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf/gguf.h"
#include "engine/template/template.h"
#include "tests/check.h"

static const chat_msg SUA[] = {{"system", "S"}, {"user", "U"}, {"assistant", "A"}};

/* renders and compares, showing both texts on a mismatch */
static void expect(const chat_template *t, const chat_msg *m, int n, int gen, const char *want, const char *what) {
    char *got = template_render(t, m, n, gen);
    int ok = got && strcmp(got, want) == 0;
    CHECK(ok, "%s (%s)", what, template_family_name(t->family));
    if (!ok) fprintf(stderr, "  want: [%s]\n  got:  [%s]\n", want, got ? got : "(null)");
    free(got);
}

static chat_template forced(const char *name) {
    chat_template t;
    int ok = template_force(&t, name);
    REQUIRE(ok, "template_force(%s)", name);
    return t;
}

/* ------------------------------------------------------------------ renders */

static void test_chatml(void) {
    chat_template t = forced("chatml");
    expect(&t, SUA, 3, 1,
           "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n"
           "<|im_start|>assistant\n",
           "S/U/A + generation");
    expect(&t, SUA, 2, 0, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n", "no generation prompt");
    const chat_msg spaced[] = {{"user", "  hi \n"}};
    expect(&t, spaced, 1, 0, "<|im_start|>user\n  hi \n<|im_end|>\n", "contents are not trimmed");
    expect(&t, NULL, 0, 1, "<|im_start|>assistant\n", "no messages");
}

/* Qwen1.5-Chat / Qwen2-Instruct's template, and the part of Qwen2.5-Instruct's that says
 * what a conversation without a system message opens with */
static const char *const QWEN2_TEMPLATE =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

static const char *const QWEN25_SNIPPET =
    "{%- else %}{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}{%- else %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}{%- endif %}{%- for message in messages %}{%- if (message.role == \"user\") or "
    "(message.role == \"system\" and not loop.first) %}";

/* Qwen1.5/2/2.5 (as Python's jinja2 renders their templates): ChatML that opens with a
 * default system turn when the first message is not a system one */
static void test_qwen2(void) {
    chat_template t;
    template_detect(&t, QWEN2_TEMPLATE);
    const chat_msg ua[] = {{"user", "U"}, {"assistant", "A"}}, us[] = {{"user", "U"}, {"system", "S2"}};
    expect(&t, ua, 2, 1,
           "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
           "<|im_start|>assistant\nA<|im_end|>\n<|im_start|>assistant\n",
           "Qwen2: the default system turn");
    expect(&t, SUA, 3, 1,
           "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n"
           "<|im_start|>assistant\n",
           "Qwen2: a system message of its own");
    expect(&t, us, 2, 1,
           "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
           "<|im_start|>system\nS2<|im_end|>\n<|im_start|>assistant\n",
           "Qwen2: a later system message is a turn");
    template_detect(&t, QWEN25_SNIPPET);
    expect(&t, ua, 1, 1,
           "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
           "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n",
           "Qwen2.5: its default system turn");
    const chat_msg empty_sys[] = {{"system", ""}, {"user", "U"}};
    expect(&t, empty_sys, 2, 0, "<|im_start|>system\n<|im_end|>\n<|im_start|>user\nU<|im_end|>\n",
           "Qwen2.5: an empty system message stays");
    t = forced("chatml");
    expect(&t, ua, 1, 0, "<|im_start|>user\nU<|im_end|>\n", "forced chatml adds no system turn");
}

static void test_qwen3(void) {
    chat_template t = forced("qwen3");
    expect(&t, SUA, 3, 1,
           "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
           "A<|im_end|>\n<|im_start|>assistant\n",
           "S/U/A + generation: the last assistant turn gets an empty think block");
    /* history: reasoning is dropped before the last user query, kept after it */
    const chat_msg multi[] = {{"system", "S"},
                              {"user", "U1"},
                              {"assistant", "<think>\nr1\n</think>\n\na1"},
                              {"user", "U2"},
                              {"assistant", "<think>\nr2\n</think>\n\na2"}};
    expect(&t, multi, 5, 1,
           "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n"
           "<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\n<think>\nr2\n</think>\n\na2<|im_end|>\n"
           "<|im_start|>assistant\n",
           "multi-turn think handling");
    /* an assistant turn followed by a user turn: plain, think block removed */
    const chat_msg ua_u[] = {{"user", "U"}, {"assistant", "A"}, {"user", "V"}};
    expect(&t, ua_u, 3, 1,
           "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n<|im_start|>user\nV<|im_end|>\n"
           "<|im_start|>assistant\n",
           "earlier assistant turn is plain");
    /* a tool response in a user turn is not a query: the assistant turns after the real
     * query keep their reasoning */
    const chat_msg tool[] = {{"user", "Q"},
                             {"assistant", "<think>t1</think>call"},
                             {"user", "<tool_response>42</tool_response>"},
                             {"assistant", "done"}};
    expect(&t, tool, 4, 0,
           "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\nt1\n</think>\n\ncall<|im_end|>\n"
           "<|im_start|>user\n<tool_response>42</tool_response><|im_end|>\n"
           "<|im_start|>assistant\n<think>\n\n</think>\n\ndone<|im_end|>\n",
           "tool responses are not queries");
    t.enable_thinking = 0;
    expect(&t, SUA, 2, 1,
           "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
           "enable_thinking = false closes the think block");
}

static void test_qwen35(void) {
    chat_template t = forced("qwen35");
    expect(&t, SUA, 3, 1,
           "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
           "A<|im_end|>\n<|im_start|>assistant\n<think>\n",
           "S/U/A + generation (worked example)");
    const chat_msg multi[] = {{"system", "  S \n"},
                              {"user", " U1 "},
                              {"assistant", "<think>\nr1\n</think>\n\na1"},
                              {"user", "U2\n"},
                              {"assistant", "<think>\n r2 \n</think>\n\na2  "}};
    expect(&t, multi, 5, 1,
           "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n"
           "<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\n<think>\nr2\n</think>\n\na2<|im_end|>\n"
           "<|im_start|>assistant\n<think>\n",
           "trimmed contents, reasoning dropped before the last query");
    t.enable_thinking = 0;
    expect(&t, SUA + 1, 1, 1, "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
           "thinking off");
    /* published variants: think blocks only with reasoning / also for older turns with reasoning */
    t.enable_thinking = 1;
    const chat_msg hist[] = {{"user", "U1"}, {"assistant", "<think>r1</think>a1"}, {"user", "U2"}, {"assistant", "a2"}};
    t.variant = 1;
    expect(&t, hist, 4, 0,
           "<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n<|im_start|>user\nU2<|im_end|>\n"
           "<|im_start|>assistant\na2<|im_end|>\n",
           "variant 1: no empty think blocks");
    t.variant = 2;
    expect(&t, hist, 4, 0,
           "<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\n<think>\nr1\n</think>\n\na1<|im_end|>\n"
           "<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\na2<|im_end|>\n",
           "variant 2: older turns with reasoning keep it");
}

static void test_llama3(void) {
    chat_template t = forced("llama3");
    const chat_msg m[] = {{"system", " S "}, {"user", "\nU\n"}, {"assistant", "A  "}};
    expect(&t, m, 3, 1,
           "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\nA<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
           "S/U/A + generation, contents trimmed");
    snprintf(t.bos_text, sizeof t.bos_text, "<|begin_of_text|>");
    expect(&t, SUA + 1, 1, 0, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>",
           "BOS text when the tokenizer does not add it");
}

static void test_granite(void) {
    chat_template t;
    template_detect(&t, "{%- for message in messages %}{{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' "
                        "+ message['content'] + '<|end_of_text|>\n' }}{%- endfor %}");
    CHECK(t.family == TMPL_GRANITE && t.known && t.variant == 0, "granite 3.x detected");
    expect(&t, SUA, 3, 1,
           "<|start_of_role|>system<|end_of_role|>S<|end_of_text|>\n<|start_of_role|>user<|end_of_role|>U<|end_of_text|>\n"
           "<|start_of_role|>assistant<|end_of_role|>A<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>",
           "S/U/A + generation (legacy)");
    expect(&t, SUA + 1, 1, 1, "<|start_of_role|>user<|end_of_role|>U<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>",
           "3.x: no default system turn");
    t = forced("granite"); /* Granite 4.0 */
    expect(&t, SUA, 3, 1,
           "<|start_of_role|>system<|end_of_role|>S<|end_of_text|>\n<|start_of_role|>user<|end_of_role|>U<|end_of_text|>\n"
           "<|start_of_role|>assistant<|end_of_role|>A<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>",
           "S/U/A + generation (4.0)");
    expect(&t, SUA + 1, 1, 1,
           "<|start_of_role|>system<|end_of_role|>You are a helpful assistant. Please ensure responses are professional, "
           "accurate, and safe.<|end_of_text|>\n<|start_of_role|>user<|end_of_role|>U<|end_of_text|>\n"
           "<|start_of_role|>assistant<|end_of_role|>",
           "4.0: default system message");
    const chat_msg empty_sys[] = {{"system", ""}, {"user", "U"}};
    expect(&t, empty_sys, 2, 0,
           "<|start_of_role|>system<|end_of_role|>You are a helpful assistant. Please ensure responses are professional, "
           "accurate, and safe.<|end_of_text|>\n<|start_of_role|>user<|end_of_role|>U<|end_of_text|>\n",
           "4.0: an empty system message means the default");
}

static void test_lfm2(void) {
    chat_template t = forced("lfm2");
    expect(&t, SUA, 3, 1,
           "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n"
           "<|im_start|>assistant\n",
           "S/U/A + generation (BOS added by the tokenizer)");
    snprintf(t.bos_text, sizeof t.bos_text, "<|startoftext|>");
    const chat_msg m[] = {{"system", ""}, {"user", "U"}};
    expect(&t, m, 2, 1, "<|startoftext|><|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n",
           "BOS text kept when the tokenizer does not add it; empty system message omitted");
    t.bos_text[0] = 0;
    const chat_msg think[] = {{"user", "U1"},
                              {"assistant", "<think>r1</think>\n a1 "},
                              {"user", "U2"},
                              {"assistant", "<think>r2</think>a2"}};
    expect(&t, think, 4, 0,
           "<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n<|im_start|>user\nU2<|im_end|>\n"
           "<|im_start|>assistant\n<think>r2</think>a2<|im_end|>\n",
           "past thinking stripped, last assistant turn kept");
    t.variant = 1;
    expect(&t, think, 2, 0, "<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\n<think>r1</think>\n a1 <|im_end|>\n",
           "LFM2-8B: contents as given");
    t.variant = 2;
    expect(&t, think, 4, 0,
           "<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n<|im_start|>user\nU2<|im_end|>\n"
           "<|im_start|>assistant\n<think>r2</think>a2<|im_end|>\n",
           "preserve_thinking variant");
}

static void test_nemotron(void) {
    chat_template t = forced("nemotron");
    const chat_msg suau[] = {{"system", "S"}, {"user", "U"}, {"assistant", "<think>r</think> A "}, {"user", "V"}};
    expect(&t, suau, 4, 1,
           "<SPECIAL_10>System\nS\n\n<SPECIAL_11>User\nU\n<SPECIAL_11>Assistant\nA\n<SPECIAL_12>\n<SPECIAL_11>User\nV\n"
           "<SPECIAL_11>Assistant\n<think>\n",
           "S/U/A/U + generation");
    expect(&t, SUA, 3, 1, "<SPECIAL_10>System\nS\n\n<SPECIAL_11>User\nU\n<SPECIAL_11>Assistant\n<think>\nA",
           "a final assistant turn is continued after the generation prompt");
    expect(&t, SUA, 3, 0, "<SPECIAL_10>System\nS\n\n<SPECIAL_11>User\nU\n<SPECIAL_11>Assistant\n<think>\nA\n<SPECIAL_12>\n",
           "a final assistant turn without generation prompt");
    const chat_msg nothink[] = {{"system", "Be brief. /no_think"}, {"user", "U"}};
    expect(&t, nothink, 2, 1, "<SPECIAL_10>System\nBe brief.\n\n<SPECIAL_11>User\nU\n<SPECIAL_11>Assistant\n<think></think>",
           "/no_think");
    const chat_msg back[] = {{"user", "/no_think hi"}, {"assistant", "x"}, {"user", "/think go"}};
    expect(&t, back, 3, 1,
           "<SPECIAL_10>System\n\n\n<SPECIAL_11>User\nhi\n<SPECIAL_11>Assistant\nx\n<SPECIAL_12>\n<SPECIAL_11>User\ngo\n"
           "<SPECIAL_11>Assistant\n<think>\n",
           "the last switch wins; no system message");
    t.variant = 1;
    expect(&t, suau, 4, 1,
           "<SPECIAL_10>System\nS\n\n<SPECIAL_11>User\nU\n<SPECIAL_11>Assistant\nA\n<SPECIAL_12>\n\n<SPECIAL_11>User\nV\n"
           "<SPECIAL_11>Assistant\n<think>\n\n",
           "the newer template's spacing");
}

/* ------------------------------------------------------------------ detection */

static const char *const QWEN3_SNIPPET =
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\n"
    "{%- for message in messages %}{%- if (message.role == \"user\") %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- elif message.role == \"assistant\" %}{%- set content = message.content %}"
    "{%- if '</think>' in message.content %}{%- set reasoning_content = message.content.split('</think>')[0] %}"
    "{%- endif %}{{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') }}"
    "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}";

static const char *const QWEN35_SNIPPET =
    "{%- macro render_content(content, do_vision_count, is_system_content=false) %}{{- content }}{%- endmacro %}\n"
    "{%- for message in messages %}{%- set content = render_content(message.content, true)|trim %}"
    "{%- if loop.index0 > ns.last_query_index %}"
    "{{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content + '\\n</think>\\n\\n' + content }}"
    "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- else %}{{- '<think>\\n' }}{%- endif %}{%- endif %}";

static const char *const QWEN35_AND_SNIPPET =
    "{%- set content = render_content(message.content, true)|trim %}"
    "{%- if loop.index0 > ns.last_query_index  and reasoning_content %}<|im_start|><think>";

static const char *const LFM2_SNIPPET =
    "{{- bos_token -}}\n{%- set keep_past_thinking = keep_past_thinking | default(false) -%}\n"
    "{%- if tools -%}{%- set ns.system_prompt = ns.system_prompt + \"List of tools: [\" -%}{%- endif -%}"
    "{{- \"<|im_start|>\" + message[\"role\"] + \"\\n\" -}}{%- if \"</think>\" in content -%}{%- endif -%}";

static const char *const LFM2_8B_SNIPPET =
    "{{- bos_token -}}{%- if tools -%}{%- set ns.system_prompt = ns.system_prompt + \"List of tools: "
    "<|tool_list_start|>[\" -%}{%- endif -%}{{- \"<|im_start|>\" + message[\"role\"] + \"\\n\" -}}";

static const char *const LLAMA3_SNIPPET =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}";

static const char *const GRANITE4_SNIPPET =
    "{%- set g4_default_system_message = 'You are a helpful assistant. Please ensure responses are professional, "
    "accurate, and safe.' %}{%- if tools %}<tools>{%- endif %}"
    "{{- '<|start_of_role|>system<|end_of_role|>' + ns.default_system_message + '<|end_of_text|>\\n' }}";

static const char *const NEMOTRON_SNIPPET =
    "{%- set ns = namespace(enable_thinking=true) -%}{%- if messages[0]['role'] != 'system' -%}"
    "{{- '<SPECIAL_10>System\n' -}}{%- endif -%}{{- '<SPECIAL_11>Assistant\n' -}}"
    "{%- if ns.enable_thinking is defined and ns.enable_thinking is false -%}{{- '<think></think>' -}}"
    "{%- else -%}{{- '<think>\n' -}}{%- endif -%}";

static const char *const NEMOTRON_NEW_SNIPPET =
    "{{- '<SPECIAL_10>System\n' -}}{%- else -%}{{- '<think>\n\n' -}}{%- endif -%}{{- '\n<SPECIAL_12>\n\n' -}}";

static const char *const TINY_CHATML =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

static void expect_detect(const char *jinja, tmpl_family fam, int known, int variant, const char *what) {
    chat_template t;
    memset(&t, 0x5A, sizeof t); /* detect must set every field */
    template_detect(&t, jinja);
    CHECK(t.family == fam && t.known == known && t.variant == variant && t.enable_thinking == 1 && t.bos_text[0] == 0,
          "detect %s: got %s known=%d variant=%d", what, template_family_name(t.family), t.known, t.variant);
}

static void test_detect(void) {
    expect_detect(TINY_CHATML, TMPL_CHATML, 1, 0, "plain ChatML");
    expect_detect(QWEN2_TEMPLATE, TMPL_CHATML, 1, 1, "Qwen1.5 / Qwen2");
    expect_detect(QWEN25_SNIPPET, TMPL_CHATML, 1, 2, "Qwen2.5");
    expect_detect(QWEN3_SNIPPET, TMPL_QWEN3, 1, 0, "Qwen3");
    expect_detect(QWEN35_SNIPPET, TMPL_QWEN35, 1, 0, "Qwen3.5");
    expect_detect(QWEN35_AND_SNIPPET, TMPL_QWEN35, 1, 1, "Qwen3.5 'and reasoning_content' variant");
    expect_detect(LFM2_SNIPPET, TMPL_LFM2, 1, 0, "LFM2.5");
    expect_detect(LFM2_8B_SNIPPET, TMPL_LFM2, 1, 1, "LFM2-8B");
    expect_detect(LLAMA3_SNIPPET, TMPL_LLAMA3, 1, 0, "Llama 3");
    expect_detect(GRANITE4_SNIPPET, TMPL_GRANITE, 1, 1, "Granite 4.0");
    expect_detect(NEMOTRON_SNIPPET, TMPL_NEMOTRON, 1, 0, "Nemotron Nano v2");
    expect_detect(NEMOTRON_NEW_SNIPPET, TMPL_NEMOTRON, 1, 1, "Nemotron Nano v2 (newer)");
    expect_detect("{{ '<|im_start|>' + role + '<|im_sep|>' }}", TMPL_CHATML, 0, 0, "Phi-4 (not supported)");
    expect_detect("{{ bos_token }}[INST] {{ message['content'] }} [/INST]", TMPL_CHATML, 0, 0, "Mistral (unknown)");
    expect_detect("", TMPL_CHATML, 0, 0, "empty text");
    expect_detect(NULL, TMPL_CHATML, 0, 0, "no template");
    expect_detect("qwen35", TMPL_QWEN35, 1, 0, "a bare family name");

    /* the template stored in the tiny fixture */
    char err[256];
    gguf_file *f = gguf_open("tests/fixtures/qwen35-tiny-f32.gguf", err, sizeof err);
    CHECK(f != NULL, "fixture: %s", err);
    if (f) {
        gguf_str s;
        CHECK(gguf_get_str(f, "tokenizer.chat_template", &s) == 1, "fixture has a chat template");
        char *text = malloc(s.len + 1);
        gguf_str_copy(s, text, s.len + 1);
        chat_template t;
        template_detect(&t, text);
        CHECK(t.family == TMPL_CHATML && t.known, "fixture template is ChatML");
        free(text);
        gguf_close(f);
    }
}

static void test_force_and_fallback(void) {
    static const char *const names[] = {"chatml", "qwen3", "qwen35", "llama3", "granite", "lfm2", "nemotron"};
    for (int i = 0; i < TMPL_COUNT; i++) {
        chat_template t;
        CHECK(template_force(&t, names[i]) == 1 && t.family == (tmpl_family)i && t.known && t.enable_thinking == 1,
              "force %s", names[i]);
        CHECK(strcmp(template_family_name((tmpl_family)i), names[i]) == 0, "family name %d", i);
    }
    chat_template t = forced("qwen3");
    CHECK(template_force(&t, "vicuna") == 0 && t.family == TMPL_QWEN3, "an unknown name changes nothing");
    CHECK(template_force(&t, NULL) == 0, "NULL name");
    CHECK(strcmp(template_family_name(TMPL_COUNT), "unknown") == 0, "out-of-range family name");

    /* unknown templates render as ChatML */
    template_detect(&t, "something nobody has seen {{ messages }}");
    CHECK(!t.known && t.family == TMPL_CHATML, "fallback");
    expect(&t, SUA + 1, 1, 1, "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n", "fallback render");

    /* an unknown role is refused by every family */
    const chat_msg bad[] = {{"user", "U"}, {"wizard", "W"}};
    for (int i = 0; i < TMPL_COUNT; i++) {
        template_force(&t, names[i]);
        char *r = template_render(&t, bad, 2, 1);
        CHECK(r == NULL, "%s: unknown role must fail", names[i]);
        free(r);
        const chat_msg nul[] = {{NULL, "x"}};
        r = template_render(&t, nul, 1, 0);
        CHECK(r == NULL, "%s: NULL role must fail", names[i]);
        free(r);
        const chat_msg nulc[] = {{"user", NULL}, {"assistant", NULL}};
        r = template_render(&t, nulc, 2, 1);
        CHECK(r != NULL, "%s: NULL content is empty", names[i]);
        free(r);
    }
}

int main(void) {
    test_chatml();
    test_qwen2();
    test_qwen3();
    test_qwen35();
    test_llama3();
    test_granite();
    test_lfm2();
    test_nemotron();
    test_detect();
    test_force_and_fallback();
    return check_report("test_template");
}
