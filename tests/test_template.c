/* test_template.c - chat templates (engine/template): a conversation rendered by Jinja as
 * Hugging Face's apply_chat_template renders it.
 *
 *  - the built-in templates: the exact renders chatfs's hand-written family renderers
 *    gave (their cases, kept here as expectations after the renderers went; the built-ins
 *    rendered 31 668 of 31 668 generated cases as they did before they were deleted), and
 *    python3-jinja2's renders of the same texts (tests/jinja/render_ref.py, configured as
 *    transformers configures it);
 *  - what a render passes: messages with reasoning_content only where a turn has one,
 *    add_generation_prompt, enable_thinking, the tokenizer's BOS/EOS texts, tools and
 *    documents None; BOS and EOS dropped as llama.cpp drops them;
 *  - errors: raise_exception's own message, runtime and compile errors, unknown roles;
 *  - the model's own template from a GGUF, ChatML when it has none, the family hint;
 *  - the published templates of the supported models (llama.cpp's models/templates/, via
 *    tools/llama-cpp-src.sh) rendered from chatfs messages, against python3-jinja2;
 *  - Qwen1.5/2/2.5's default system turn, from their own templates only;
 *  - one template rendered from four threads;
 *  - the boundary search's cost, where the engine does it (pc_plan): a 50-turn
 *    conversation under Qwen3.5's template must take under 2 ms (optimised build). */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/arch/arch.h"
#include "engine/runtime/prefix_cache.h"
#include "engine/template/template.h"
#include "tests/check.h"
#include "tests/gguf_build.h"

#define FIXTURE "tests/fixtures/qwen35-tiny-f32.gguf"

static const chat_msg SUA[] = {{"system", "S", NULL}, {"user", "U", NULL}, {"assistant", "A", NULL}};

/* renders and compares, showing both texts on a mismatch */
static void expect_t(const chat_template *t, const chat_msg *m, int n, int gen, int thinking, const char *want,
                     const char *what) {
    char err[512];
    size_t len;
    char *got = template_render(t, m, n, gen, thinking, &len, err, sizeof err);
    int ok = got && len == strlen(want) && memcmp(got, want, len) == 0;
    CHECK(ok, "%s", what);
    if (!ok) fprintf(stderr, "  want: [%s]\n  got:  [%s]\n", want, got ? got : err);
    free(got);
}
#define expect(t, m, n, gen, want, what) expect_t(t, m, n, gen, 1, want, what)

static chat_template *builtin(const char *name, const tokenizer *tok) {
    char err[256];
    chat_template *t = template_new_builtin(name, tok, err, sizeof err);
    REQUIRE(t != NULL, "built-in %s: %s", name, err);
    return t;
}

static chat_template *jinja(const char *text, const tokenizer *tok) {
    char err[256];
    chat_template *t = template_new(text, strlen(text), tok, err, sizeof err);
    REQUIRE(t != NULL, "compile [%s]: %s", text, err);
    return t;
}

/* A tokenizer of a few tokens whose BOS and EOS are bos and eos, added by encode when
 * add_bos / add_eos (gguf_build.h: a GGUF of metadata only). */
static tokenizer *tiny_tokenizer(const char *bos, const char *eos, int add_bos, int add_eos, gguf_file **gf,
                                 gguf_build *b, const char *chat_template) {
    const char *tokens[] = {"a", "b", bos, eos};
    const int32_t types[] = {1, 1, 3, 3};
    gb_init(b);
    gb_str(b, "tokenizer.ggml.model", "gpt2");
    gb_arr_str(b, "tokenizer.ggml.tokens", tokens, 4);
    gb_arr_i32(b, "tokenizer.ggml.token_type", types, 4);
    gb_arr_str(b, "tokenizer.ggml.merges", NULL, 0);
    gb_u32(b, "tokenizer.ggml.bos_token_id", 2);
    gb_u32(b, "tokenizer.ggml.eos_token_id", 3);
    gb_bool(b, "tokenizer.ggml.add_bos_token", add_bos);
    gb_bool(b, "tokenizer.ggml.add_eos_token", add_eos);
    if (chat_template) gb_str(b, "tokenizer.chat_template", chat_template);
    gb_finish(b);
    char err[256];
    *gf = gguf_open_buffer(b->p, b->n, "tiny.gguf", err, sizeof err);
    REQUIRE(*gf != NULL, "tiny gguf: %s", err);
    tokenizer *t = tokenizer_load(*gf, err, sizeof err);
    REQUIRE(t != NULL, "tiny tokenizer: %s", err);
    return t;
}

/* ------------------------------------------------------------------ the built-ins' renders */

static void test_chatml(void) {
    chat_template *t = builtin("chatml", NULL);
    expect(t, SUA, 3, 1,
           "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n"
           "<|im_start|>assistant\n",
           "S/U/A + generation");
    expect(t, SUA, 2, 0, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n", "no generation prompt");
    const chat_msg spaced[] = {{"user", "  hi \n", NULL}};
    expect(t, spaced, 1, 0, "<|im_start|>user\n  hi \n<|im_end|>\n", "contents are not trimmed");
    expect(t, NULL, 0, 1, "<|im_start|>assistant\n", "no messages");
    template_unref(t);
}

static void test_qwen3(void) {
    chat_template *t = builtin("qwen3", NULL);
    expect(t, SUA, 3, 1,
           "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
           "A<|im_end|>\n<|im_start|>assistant\n",
           "S/U/A + generation: the last assistant turn gets an empty think block");
    /* history: reasoning is dropped before the last user query, kept after it */
    const chat_msg multi[] = {{"system", "S", NULL},
                              {"user", "U1", NULL},
                              {"assistant", "<think>\nr1\n</think>\n\na1", NULL},
                              {"user", "U2", NULL},
                              {"assistant", "<think>\nr2\n</think>\n\na2", NULL}};
    expect(t, multi, 5, 1,
           "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n"
           "<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\n<think>\nr2\n</think>\n\na2<|im_end|>\n"
           "<|im_start|>assistant\n",
           "multi-turn think handling");
    const chat_msg ua_u[] = {{"user", "U", NULL}, {"assistant", "A", NULL}, {"user", "V", NULL}};
    expect(t, ua_u, 3, 1,
           "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n<|im_start|>user\nV<|im_end|>\n"
           "<|im_start|>assistant\n",
           "earlier assistant turn is plain");
    /* a tool response in a user turn is not a query: the assistant turns after the real
     * query keep their reasoning */
    const chat_msg tool[] = {{"user", "Q", NULL},
                             {"assistant", "<think>t1</think>call", NULL},
                             {"user", "<tool_response>42</tool_response>", NULL},
                             {"assistant", "done", NULL}};
    expect(t, tool, 4, 0,
           "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\nt1\n</think>\n\ncall<|im_end|>\n"
           "<|im_start|>user\n<tool_response>42</tool_response><|im_end|>\n"
           "<|im_start|>assistant\n<think>\n\n</think>\n\ndone<|im_end|>\n",
           "tool responses are not queries");
    expect_t(t, SUA, 2, 1, 0,
             "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
             "enable_thinking = false closes the think block");
    /* reasoning kept apart from the content (the published template reads it so) */
    const chat_msg apart[] = {{"user", "U", NULL}, {"assistant", "A", "\nr\n"}};
    expect(t, apart, 2, 0, "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n<think>\nr\n</think>\n\nA<|im_end|>\n",
           "reasoning_content");
    template_unref(t);
}

static void test_qwen35(void) {
    chat_template *t = builtin("qwen35", NULL);
    expect(t, SUA, 3, 1,
           "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
           "A<|im_end|>\n<|im_start|>assistant\n<think>\n",
           "S/U/A + generation (worked example)");
    const chat_msg multi[] = {{"system", "  S \n", NULL},
                              {"user", " U1 ", NULL},
                              {"assistant", "<think>\nr1\n</think>\n\na1", NULL},
                              {"user", "U2\n", NULL},
                              {"assistant", "<think>\n r2 \n</think>\n\na2  ", NULL}};
    expect(t, multi, 5, 1,
           "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n"
           "<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\n<think>\nr2\n</think>\n\na2<|im_end|>\n"
           "<|im_start|>assistant\n<think>\n",
           "trimmed contents, reasoning dropped before the last query");
    expect_t(t, SUA + 1, 1, 1, 0, "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
             "thinking off");
    const chat_msg apart[] = {{"user", "U1", NULL}, {"assistant", "a1", "old"}, {"user", "U2", NULL},
                              {"assistant", " a2 ", " new \n"}};
    expect(t, apart, 4, 0,
           "<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n<|im_start|>user\nU2<|im_end|>\n"
           "<|im_start|>assistant\n<think>\nnew\n</think>\n\na2<|im_end|>\n",
           "reasoning_content: dropped before the last query, trimmed after it");
    template_unref(t);
}

static void test_llama3(void) {
    gguf_file *gf, *gf2;
    gguf_build b, b2;
    tokenizer *keeps = tiny_tokenizer("<|begin_of_text|>", "<|eot_id|>", 0, 0, &gf, &b, NULL);
    tokenizer *adds = tiny_tokenizer("<|begin_of_text|>", "<|eot_id|>", 1, 0, &gf2, &b2, NULL);
    chat_template *t = builtin("llama3", adds);
    const chat_msg m[] = {{"system", " S ", NULL}, {"user", "\nU\n", NULL}, {"assistant", "A  ", NULL}};
    expect(t, m, 3, 1,
           "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\nA<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
           "S/U/A + generation, contents trimmed, the BOS the tokenizer adds dropped");
    template_unref(t);
    t = builtin("llama3", keeps);
    expect(t, SUA + 1, 1, 0, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>",
           "BOS text when the tokenizer does not add it");
    template_unref(t);
    tokenizer_free(keeps), tokenizer_free(adds);
    gguf_close(gf), gguf_close(gf2);
    gb_free(&b), gb_free(&b2);
}

static void test_granite(void) {
    chat_template *t = builtin("granite", NULL); /* Granite 4.0 */
    expect(t, SUA, 3, 1,
           "<|start_of_role|>system<|end_of_role|>S<|end_of_text|>\n<|start_of_role|>user<|end_of_role|>U<|end_of_text|>\n"
           "<|start_of_role|>assistant<|end_of_role|>A<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>",
           "S/U/A + generation (4.0)");
    expect(t, SUA + 1, 1, 1,
           "<|start_of_role|>system<|end_of_role|>You are a helpful assistant. Please ensure responses are professional, "
           "accurate, and safe.<|end_of_text|>\n<|start_of_role|>user<|end_of_role|>U<|end_of_text|>\n"
           "<|start_of_role|>assistant<|end_of_role|>",
           "4.0: default system message");
    const chat_msg empty_sys[] = {{"system", "", NULL}, {"user", "U", NULL}};
    expect(t, empty_sys, 2, 0,
           "<|start_of_role|>system<|end_of_role|>You are a helpful assistant. Please ensure responses are professional, "
           "accurate, and safe.<|end_of_text|>\n<|start_of_role|>user<|end_of_role|>U<|end_of_text|>\n",
           "4.0: an empty system message means the default");
    template_unref(t);
}

static void test_lfm2(void) {
    gguf_file *gf;
    gguf_build b;
    tokenizer *keeps = tiny_tokenizer("<|startoftext|>", "<|im_end|>", 0, 0, &gf, &b, NULL);
    chat_template *t = builtin("lfm2", NULL);
    expect(t, SUA, 3, 1,
           "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n"
           "<|im_start|>assistant\n",
           "S/U/A + generation (no BOS text)");
    const chat_msg think[] = {{"user", "U1", NULL},
                              {"assistant", "<think>r1</think>\n a1 ", NULL},
                              {"user", "U2", NULL},
                              {"assistant", "<think>r2</think>a2", NULL}};
    expect(t, think, 4, 0,
           "<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n<|im_start|>user\nU2<|im_end|>\n"
           "<|im_start|>assistant\n<think>r2</think>a2<|im_end|>\n",
           "past thinking stripped, last assistant turn kept");
    template_unref(t);
    t = builtin("lfm2", keeps);
    const chat_msg m[] = {{"system", "", NULL}, {"user", "U", NULL}};
    expect(t, m, 2, 1, "<|startoftext|><|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n",
           "BOS text kept when the tokenizer does not add it; empty system message omitted");
    template_unref(t);
    tokenizer_free(keeps);
    gguf_close(gf);
    gb_free(&b);
}

static void test_nemotron(void) {
    chat_template *t = builtin("nemotron", NULL);
    const chat_msg suau[] = {
        {"system", "S", NULL}, {"user", "U", NULL}, {"assistant", "<think>r</think> A ", NULL}, {"user", "V", NULL}};
    expect(t, suau, 4, 1,
           "<SPECIAL_10>System\nS\n\n<SPECIAL_11>User\nU\n<SPECIAL_11>Assistant\nA\n<SPECIAL_12>\n<SPECIAL_11>User\nV\n"
           "<SPECIAL_11>Assistant\n<think>\n",
           "S/U/A/U + generation");
    expect(t, SUA, 3, 1, "<SPECIAL_10>System\nS\n\n<SPECIAL_11>User\nU\n<SPECIAL_11>Assistant\n<think>\nA",
           "a final assistant turn is continued after the generation prompt");
    expect(t, SUA, 3, 0, "<SPECIAL_10>System\nS\n\n<SPECIAL_11>User\nU\n<SPECIAL_11>Assistant\n<think>\nA\n<SPECIAL_12>\n",
           "a final assistant turn without generation prompt");
    const chat_msg nothink[] = {{"system", "Be brief. /no_think", NULL}, {"user", "U", NULL}};
    expect(t, nothink, 2, 1, "<SPECIAL_10>System\nBe brief.\n\n<SPECIAL_11>User\nU\n<SPECIAL_11>Assistant\n<think></think>",
           "/no_think");
    const chat_msg back[] = {{"user", "/no_think hi", NULL}, {"assistant", "x", NULL}, {"user", "/think go", NULL}};
    expect(t, back, 3, 1,
           "<SPECIAL_10>System\n\n\n<SPECIAL_11>User\nhi\n<SPECIAL_11>Assistant\nx\n<SPECIAL_12>\n<SPECIAL_11>User\ngo\n"
           "<SPECIAL_11>Assistant\n<think>\n",
           "the last switch wins; no system message");
    template_unref(t);
}

/* ------------------------------------------------------------------ what a render passes */

static void test_variables(void) {
    gguf_file *gf, *gf2;
    gguf_build b, b2;
    tokenizer *keeps = tiny_tokenizer("<s>", "</s>", 0, 0, &gf, &b, NULL);
    tokenizer *adds = tiny_tokenizer("<s>", "</s>", 1, 1, &gf2, &b2, NULL);
    chat_template *t = jinja("{{ tools is none }} {{ documents is none }} {{ add_generation_prompt }} {{ enable_thinking }} "
                             "{{ bos_token }}|{{ eos_token }}|{{ unk_token is defined }}",
                             keeps);
    expect_t(t, NULL, 0, 1, 0, "True True True False <s>|</s>|False", "the variables apply_chat_template passes");
    expect_t(t, NULL, 0, 0, 1, "True True False True <s>|</s>|False", "the switches");
    template_unref(t);
    /* reasoning_content only where a turn has one (llama.cpp leaves out an empty one) */
    t = jinja("{% for m in messages %}{{ m.role }}:{{ m.content }}:{{ m.reasoning_content is defined }}"
              "{{ ':' ~ m.reasoning_content if m.reasoning_content is defined }};{% endfor %}",
              NULL);
    const chat_msg m[] = {{"user", NULL, NULL}, {"assistant", "A", ""}, {"assistant", "B", "why"}};
    expect(t, m, 3, 0, "user::False;assistant:A:False;assistant:B:True:why;",
           "content NULL is empty; reasoning_content passed when not empty");
    template_unref(t);
    /* llama.cpp: a BOS at the start is dropped when the tokenizer adds it, an EOS at the end
     * when it adds that; nowhere else */
    t = jinja("{{ bos_token }}x{{ bos_token }}{{ eos_token }}y{{ eos_token }}", adds);
    expect(t, NULL, 0, 0, "x<s></s>y", "BOS and EOS the tokenizer adds are dropped at the ends");
    template_unref(t);
    t = jinja("{{ bos_token }}x{{ eos_token }}", keeps);
    expect(t, NULL, 0, 0, "<s>x</s>", "kept when the tokenizer does not add them");
    template_unref(t);
    t = jinja("{{ bos_token }}", adds);
    expect(t, NULL, 0, 0, "", "the BOS alone");
    template_unref(t);
    /* output with NUL bytes: the length counts them */
    t = jinja("a{{ '\\x00' }}b", NULL);
    char err[256];
    size_t len;
    char *out = template_render(t, NULL, 0, 0, 1, &len, err, sizeof err);
    CHECK(out && len == 3 && !memcmp(out, "a\0b", 3), "NUL in the output");
    free(out);
    CHECK(template_uses(t, "messages") == 0, "template_uses: messages not read");
    template_unref(t);
    t = builtin("qwen35", NULL);
    CHECK(template_uses(t, "enable_thinking") && template_uses(t, "messages") && !template_uses(t, "tools"),
          "template_uses");
    CHECK(!strcmp(template_name(t), "qwen35"), "template_name");
    template_unref(t);
    tokenizer_free(keeps), tokenizer_free(adds);
    gguf_close(gf), gguf_close(gf2);
    gb_free(&b), gb_free(&b2);
}

/* ------------------------------------------------------------------ errors */

static void test_errors(void) {
    char err[512];
    size_t len;
    chat_template *t = jinja("{% if messages[0].role != 'system' %}{{ raise_exception('A system prompt, please.') }}"
                             "{% endif %}ok",
                             NULL);
    CHECK(!template_render(t, SUA + 1, 1, 1, 1, &len, err, sizeof err) &&
              !strcmp(err, "chat template: A system prompt, please."),
          "raise_exception's message: %s", err);
    char *out = template_render(t, SUA, 1, 1, 1, &len, err, sizeof err);
    CHECK(out && !strcmp(out, "ok"), "renders otherwise");
    free(out);
    template_unref(t);
    t = jinja("\n{{ messages[0].content.nope() }}", NULL);
    CHECK(!template_render(t, SUA, 1, 1, 1, &len, err, sizeof err) && !strncmp(err, "chat template: line 2: ", 23),
          "a runtime error names its line: %s", err);
    template_unref(t);
    CHECK(!template_new("{% for m in messages %}", 23, NULL, err, sizeof err) && !strncmp(err, "line 1: ", 8),
          "a compile error: %s", err);
    CHECK(template_check("{% for m in messages %}", 23, err, sizeof err) == -1 && strstr(err, "line 1"),
          "template_check: %s", err);
    CHECK(template_check("{{ x }}", 7, err, sizeof err) == 0, "template_check of a good text");
    CHECK(!template_new_builtin("vicuna", NULL, err, sizeof err) && strstr(err, "vicuna") &&
              strstr(err, "chatml, qwen3, qwen35, llama3, granite, lfm2, nemotron"),
          "an unknown built-in: %s", err);
    /* roles: a chatfs conversation has system, user and assistant messages */
    t = builtin("chatml", NULL);
    const chat_msg bad[] = {{"user", "U", NULL}, {"wizard", "W", NULL}};
    CHECK(!template_render(t, bad, 2, 1, 1, &len, err, sizeof err) && strstr(err, "message 2") && strstr(err, "wizard"),
          "an unknown role: %s", err);
    const chat_msg nul[] = {{NULL, "x", NULL}};
    CHECK(!template_render(t, nul, 1, 1, 1, &len, err, sizeof err), "no role");
    CHECK(!template_render(t, NULL, 3, 1, 1, &len, err, sizeof err), "messages NULL");
    template_unref(t);
    /* calls and tools: what the template reads, and what does not read as JSON */
    t = jinja("{% for m in messages %}{% for c in m.tool_calls or [] %}{{ c.function.name }}"
              "{% for k, v in c.function.arguments|items %}({{ k }}={{ v }}){% endfor %}{% endfor %}"
              "{% if m.tool_call_id %}[{{ m.tool_call_id }}:{{ m.content }}]{% endif %}{% endfor %}"
              "{{ tools|length if tools is not none else 'none' }}",
              NULL);
    chat_msg calls[] = {{"user", "U"},
                        {"assistant", "", NULL, "[{\"id\": \"a\", \"type\": \"function\", \"function\": {\"name\": "
                                                 "\"add\", \"arguments\": \"{\\\"x\\\": 2}\"}}]"},
                        {"tool", "5", NULL, NULL, "a"}};
    out = template_render_tools(t, calls, 3, "[{\"type\": \"function\"}]", 1, 1, &len, err, sizeof err);
    CHECK(out && !strcmp(out, "add(x=2)[a:5]1"), "a call's string arguments as a mapping, a tool turn: %s",
          out ? out : err);
    free(out);
    out = template_render_tools(t, calls, 1, "[]", 1, 1, &len, err, sizeof err);
    CHECK(out && !strcmp(out, "none"), "no tools is None: %s", out ? out : err);
    free(out);
    CHECK(!template_render_tools(t, calls, 1, "{\"type\": 1}", 1, 1, &len, err, sizeof err) &&
              strstr(err, "tools is not a JSON array"),
          "tools not an array: %s", err);
    calls[1].tool_calls = "[{\"function\": {\"name\": \"add\", \"arguments\": \"{x: 2\"}}]";
    CHECK(!template_render_tools(t, calls, 3, NULL, 1, 1, &len, err, sizeof err) &&
              strstr(err, "message 2: tool call 1: arguments are not JSON"),
          "arguments that are not JSON: %s", err);
    calls[1].tool_calls = "[{\"function\": {\"arguments\": {}}}]";
    CHECK(!template_render_tools(t, calls, 3, NULL, 1, 1, &len, err, sizeof err) &&
              strstr(err, "message 2: tool call 1 has no function.name"),
          "a call without a name: %s", err);
    calls[1].tool_calls = "{";
    CHECK(!template_render_tools(t, calls, 3, NULL, 1, 1, &len, err, sizeof err) &&
              strstr(err, "message 2: tool_calls is not a JSON array"),
          "calls that are not an array: %s", err);
    template_unref(t);
}

/* ------------------------------------------------------------------ from a GGUF; the hint */

static void test_from_gguf(void) {
    char err[256];
    /* the fixture's own (ChatML) template */
    gguf_file *f = gguf_open(FIXTURE, err, sizeof err);
    REQUIRE(f != NULL, "fixture: %s", err);
    tokenizer *tok = tokenizer_load(f, err, sizeof err);
    REQUIRE(tok != NULL, "fixture tokenizer: %s", err);
    chat_template *t = template_from_gguf(f, tok, err, sizeof err);
    REQUIRE(t != NULL, "the fixture's template: %s", err);
    size_t len;
    const char *text = template_text(t, &len);
    CHECK(template_name(t) == NULL && len == 199 && !strncmp(text, "{% for message in messages %}", 29),
          "the fixture's own text (%zu bytes)", len);
    CHECK(!strcmp(template_resembles(text, len), "chatml"), "resembles chatml");
    chat_template *c = builtin("chatml", tok);
    char *a = template_render(t, SUA, 3, 1, 1, &len, err, sizeof err), *b = template_render(c, SUA, 3, 1, 1, &len, err, sizeof err);
    CHECK(a && b && !strcmp(a, b), "the fixture's ChatML renders as the built-in");
    free(a), free(b);
    template_unref(t), template_unref(c);
    tokenizer_free(tok);
    gguf_close(f);
    /* none: ChatML as llama.cpp; a bare built-in name; a text that does not compile */
    static const struct {
        const char *text, *name;
        int compiles;
    } cases[] = {{NULL, "chatml", 1}, {"", "chatml", 1}, {"qwen35", "qwen35", 1}, {"{{ 'x' }}", NULL, 1},
                 {"{% if %}", NULL, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        gguf_build gb;
        tok = tiny_tokenizer("<s>", "</s>", 0, 0, &f, &gb, cases[i].text);
        t = template_from_gguf(f, tok, err, sizeof err);
        CHECK((t != NULL) == cases[i].compiles, "case %zu: compiles %d: %s", i, t != NULL, err);
        if (t && cases[i].name) CHECK(template_name(t) && !strcmp(template_name(t), cases[i].name), "case %zu: %s", i, cases[i].name);
        if (t && !cases[i].name) CHECK(!template_name(t), "case %zu: its own text", i);
        if (!t) CHECK(!strncmp(err, "line 1: ", 8), "case %zu: the compile error: %s", i, err);
        template_unref(t);
        tokenizer_free(tok);
        gguf_close(f);
        gb_free(&gb);
    }
}

static void expect_resembles(const char *text, const char *want) {
    const char *got = template_resembles(text, text ? strlen(text) : 0);
    CHECK(want ? got && !strcmp(got, want) : got == NULL, "resembles %s: got %s for [%.50s]", want ? want : "nothing",
          got ? got : "nothing", text ? text : "(null)");
}

static void test_resembles(void) {
    expect_resembles("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' }}{% endfor %}", "chatml");
    expect_resembles("<|im_start|>{%- if enable_thinking is defined and enable_thinking is false %}<think>", "qwen3");
    expect_resembles("{%- set content = render_content(message.content, true)|trim %}<|im_start|><think>", "qwen35");
    expect_resembles("{{- bos_token -}}{%- set keep_past_thinking = keep_past_thinking | default(false) -%}<|im_start|>",
                     "lfm2");
    expect_resembles("{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}", "llama3");
    expect_resembles("{{- '<|start_of_role|>system<|end_of_role|>' }}", "granite");
    expect_resembles("{{- '<SPECIAL_10>System\\n' -}}", "nemotron");
    expect_resembles("{{ '<|im_start|>' + role + '<|im_sep|>' }}", NULL);
    expect_resembles("{{ bos_token }}[INST] {{ message['content'] }} [/INST]", NULL);
    expect_resembles("", NULL);
    expect_resembles(NULL, NULL);
}

/* ------------------------------------------------------------------ against python3-jinja2 */

static const char *python(void) { return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3"; }

/* The directory of llama.cpp's source (tools/llama-cpp-src.sh; cached after the first
 * run), or NULL. */
static const char *llama_src(void) {
    static char dir[1024];
    if (dir[0]) return dir;
    FILE *p = popen("tools/llama-cpp-src.sh 2>/dev/null", "r");
    if (!p) return NULL;
    int ok = fgets(dir, sizeof dir, p) != NULL;
    pclose(p);
    if (!ok) return dir[0] = 0, NULL;
    dir[strcspn(dir, "\n")] = 0;
    return dir[0] ? dir : NULL;
}

static char *read_text(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) free(s), s = NULL;
    fclose(f);
    if (s) s[n] = 0, *len = (size_t)n;
    return s;
}

/* Cases rendered by chatfs (template_render) and by python3-jinja2 in one batch. The
 * python side gets the context apply_chat_template would: built here from the same
 * messages by the rule template.h states (reasoning_content only where not empty). */
typedef struct {
    cJSON *templates, *cases;
    char **ours;       /* per case: our output, or "!error" */
    const char **what; /* per case: which template */
    int n, cap;
} py_batch;

static void py_add(py_batch *pb, const char *name, const chat_template *t, const char *bos, const char *eos,
                   const chat_msg *m, int n, int gen, int thinking) {
    if (!pb->templates) pb->templates = cJSON_CreateObject(), pb->cases = cJSON_CreateArray();
    if (!cJSON_GetObjectItemCaseSensitive(pb->templates, name))
        cJSON_AddStringToObject(pb->templates, name, template_text(t, NULL));
    cJSON *c = cJSON_CreateObject(), *ctx = cJSON_AddObjectToObject(c, "context");
    cJSON_AddStringToObject(c, "template", name);
    cJSON *list = cJSON_AddArrayToObject(ctx, "messages");
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "role", m[i].role);
        cJSON_AddStringToObject(o, "content", m[i].content ? m[i].content : "");
        if (m[i].reasoning_content && *m[i].reasoning_content)
            cJSON_AddStringToObject(o, "reasoning_content", m[i].reasoning_content);
        cJSON_AddItemToArray(list, o);
    }
    cJSON_AddBoolToObject(ctx, "add_generation_prompt", gen);
    cJSON_AddNullToObject(ctx, "tools");
    cJSON_AddNullToObject(ctx, "documents");
    cJSON_AddStringToObject(ctx, "bos_token", bos);
    cJSON_AddStringToObject(ctx, "eos_token", eos);
    cJSON_AddBoolToObject(ctx, "enable_thinking", thinking);
    cJSON_AddItemToArray(pb->cases, c);
    if (pb->n == pb->cap) {
        pb->cap = pb->cap ? 2 * pb->cap : 256;
        pb->ours = realloc(pb->ours, sizeof *pb->ours * (size_t)pb->cap);
        pb->what = realloc(pb->what, sizeof *pb->what * (size_t)pb->cap);
    }
    char err[512];
    size_t len;
    char *out = template_render(t, m, n, gen, thinking, &len, err, sizeof err);
    if (!out) {
        out = malloc(strlen(err) + 2);
        sprintf(out, "!%s", err);
    }
    pb->ours[pb->n] = out;
    pb->what[pb->n++] = name; /* a static string */
}

/* Runs the batch through render_ref.py; returns how many cases agree (our output is
 * python's, or both fail: with python's message when the template raised). Each
 * template's count goes to stdout when verbose. */
static int py_run(py_batch *pb, int *cases) {
    char in[] = "/tmp/chatfs-tmpl-in-XXXXXX", out[64];
    int fd = mkstemp(in);
    REQUIRE(fd >= 0, "mkstemp");
    snprintf(out, sizeof out, "%s.out", in);
    cJSON *job = cJSON_CreateObject();
    cJSON_AddItemToObject(job, "templates", pb->templates);
    cJSON_AddItemToObject(job, "cases", pb->cases);
    char *js = cJSON_PrintUnformatted(job);
    FILE *f = fdopen(fd, "w");
    fputs(js, f);
    fclose(f);
    cJSON_free(js);
    cJSON_Delete(job);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "TZ=UTC %s tests/jinja/render_ref.py --batch %s %s", python(), in, out);
    int rc = system(cmd);
    size_t len = 0;
    char *res = rc == 0 ? read_text(out, &len) : NULL;
    unlink(in), unlink(out);
    cJSON *r = res ? cJSON_Parse(res) : NULL;
    free(res);
    CHECK(cJSON_GetArraySize(r) == pb->n, "python3-jinja2 rendered %d of %d cases (is python3-jinja2 installed?)",
          cJSON_GetArraySize(r), pb->n);
    int same = 0, shown = 0;
    for (int i = 0; i < pb->n; i++) {
        const cJSON *x = cJSON_GetArrayItem(r, i);
        const char *ok = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, "ok"));
        const char *raised = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, "raised"));
        int agree = ok ? pb->ours[i][0] != '!' && !strcmp(ok, pb->ours[i])
                       : pb->ours[i][0] == '!' && (!raised || (!strncmp(pb->ours[i], "!chat template: ", 16) &&
                                                               !strcmp(pb->ours[i] + 16, raised)));
        same += agree;
        if (!agree && x && shown++ < 3)
            fprintf(stderr, "  %s, case %d:\n    python: [%s]\n    chatfs: [%s]\n", pb->what[i], i,
                    ok ? ok : cJSON_PrintUnformatted(x), pb->ours[i]);
        free(pb->ours[i]);
    }
    cJSON_Delete(r);
    free(pb->ours), free(pb->what);
    *cases = pb->n;
    memset(pb, 0, sizeof *pb);
    return same;
}

/* A tiny deterministic generator: the same conversations on every run. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static unsigned rnd(unsigned n) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (unsigned)(rng_state % n);
}

/* contents that exercise what templates do: whitespace at the ends (Unicode's too),
 * think blocks whole, broken and repeated, tool answers wrapped in user turns, the
 * Nemotron switches, Unicode, template syntax and special tokens as text */
static const char *const POOL[] = {
    "", "U", "A", " hi \n", "\nline1\nline2\n", "<think>\nr\n</think>\n\na", "<think>r</think>a", "a</think>b",
    "<think>x", "x</think>y</think>z", "\n<think>\n\n r \n\n</think>\n\n\n ans \n", "<tool_response>42</tool_response>",
    " <tool_response>x</tool_response> ", "/think go", "/no_think hi", "Be brief. /no_think", "both /no_think and /think",
    "h\xc3\xa9llo w\xc3\xb6rld \xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac", "\t tabbed\t", "{{ not jinja }} {% if %}",
    "<|im_end|>", "  ", "\r\nwindows\r\n", "\xc2\xa0nbsp\xe3\x80\x80", "\xe2\x80\xa8sep"};
static const char *const REASONING[] = {NULL, NULL, "", "step 1", "\n  think hard \n"};
static const char *const ROLES[] = {"system", "user", "assistant"};

/* every role sequence of up to 4 messages, contents and reasoning drawn from the pools */
static int conversations(chat_msg (*out)[4], int *lens, int max) {
    int k = 0;
    for (int len = 0; len <= 4 && k < max; len++) {
        int combos = 1;
        for (int i = 0; i < len; i++) combos *= 3;
        for (int c = 0; c < combos && k < max; c++)
            for (int draw = 0; draw < (len < 3 ? 3 : 1) && k < max; draw++, k++) {
                lens[k] = len;
                for (int i = 0, code = c; i < len; i++, code /= 3)
                    out[k][i] = (chat_msg){ROLES[code % 3], POOL[rnd(sizeof POOL / sizeof *POOL)],
                                           code % 3 == 2 ? REASONING[rnd(5)] : NULL};
            }
    }
    return k;
}

/* The built-in texts render in python3-jinja2 exactly as here. */
static void test_builtins_against_python(void) {
    static chat_msg convs[256][4];
    static int lens[256];
    int nc = conversations(convs, lens, 256);
    py_batch pb = {0};
    for (int b = 0; template_builtin_name(b); b++) {
        chat_template *t = builtin(template_builtin_name(b), NULL);
        for (int i = 0; i < nc; i++)
            for (int gen = 0; gen < 2; gen++)
                for (int think = 0; think < 2; think++)
                    py_add(&pb, template_builtin_name(b), t, "", "", convs[i], lens[i], gen, think);
        template_unref(t);
    }
    int cases, same = py_run(&pb, &cases);
    CHECK(same == cases, "built-ins: %d of %d renders as python3-jinja2's", same, cases);
    printf("  built-in templates against python3-jinja2: %d of %d renders identical\n", same, cases);
}

/* The published templates of the supported architectures' models, rendered from chatfs
 * messages (contents with think blocks, reasoning_content, Unicode, whitespace), with the
 * fixture tokenizer's BOS and EOS texts, thinking on and off. */
static void test_published_against_python(void) {
    static const char *const names[] = {
        "Qwen3.5-4B", "Qwen-Qwen3-0.6B", "Qwen3-Coder", "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "NVIDIA-Nemotron-Nano-v2",
        "LFM2-8B-A1B", "LFM2.5-8B-A1B", "LFM2.5-Instruct", "ibm-granite-granite-4.0", "ibm-granite-granite-4.1",
        "meta-llama-Llama-3.1-8B-Instruct", "meta-llama-Llama-3.2-3B-Instruct", "meta-llama-Llama-3.3-70B-Instruct",
        "Qwen-Qwen2.5-7B-Instruct"};
    const char *src = llama_src();
    CHECK(src != NULL, "llama.cpp's source (tools/llama-cpp-src.sh) is needed for the published templates");
    if (!src) return;
    char err[256];
    gguf_file *f = gguf_open(FIXTURE, err, sizeof err);
    tokenizer *tok = f ? tokenizer_load(f, err, sizeof err) : NULL;
    REQUIRE(tok != NULL, "fixture: %s", err);
    static chat_msg convs[256][4];
    static int lens[256];
    int nc = conversations(convs, lens, 256);
    py_batch pb = {0};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        char path[2048];
        size_t len;
        snprintf(path, sizeof path, "%s/models/templates/%s.jinja", src, names[k]);
        char *text = read_text(path, &len);
        CHECK(text != NULL, "%s", path);
        if (!text) continue;
        chat_template *t = template_new(text, len, tok, err, sizeof err);
        free(text);
        CHECK(t != NULL, "%s compiles: %s", names[k], err);
        if (!t) continue;
        template_fix_clock(t, 1767225600); /* render_ref.py's NOW (Llama 3.1 writes today's date) */
        for (int i = 0; i < nc; i += 2) /* half of them: enough for every role sequence */
            for (int think = 0; think < 2; think++)
                py_add(&pb, names[k], t, "<|endoftext|>", "<|im_end|>", convs[i], lens[i], 1, think);
        template_unref(t);
    }
    int cases, same = py_run(&pb, &cases);
    CHECK(same == cases, "published templates: %d of %d renders as python3-jinja2's", same, cases);
    printf("  %zu published templates from chatfs messages against python3-jinja2: %d of %d renders identical\n",
           sizeof names / sizeof *names, same, cases);
    tokenizer_free(tok);
    gguf_close(f);
}

/* ------------------------------------------------------------------ Qwen1.5/2/2.5 */

/* Qwen1.5-Chat's and Qwen2-Instruct's template (their tokenizer_config.json) */
static const char *const QWEN2_TEMPLATE =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

#define QWEN2_SYSTEM "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
#define QWEN25_SYSTEM "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"

/* Qwen1.5/2/2.5's templates open with a default system turn when the first message is not
 * a system one. Nothing in chatfs knows that turn: it comes from the model's own
 * template, as in llama.cpp (expectations as python3-jinja2 renders these templates). A
 * Qwen2 file whose template is plain ChatML (the qwen2-tiny fixture, `chatfs synth`'s
 * files), or that has none, renders without it, as llama.cpp renders it. */
static void test_qwen2(void) {
    const chat_msg ua[] = {{"user", "U", NULL}, {"assistant", "A", NULL}},
                   us[] = {{"user", "U", NULL}, {"system", "S2", NULL}};
    /* Qwen1.5 / Qwen2, from a GGUF carrying the template */
    char err[256];
    gguf_file *f;
    gguf_build gb;
    tokenizer *tok = tiny_tokenizer("<s>", "</s>", 0, 0, &f, &gb, QWEN2_TEMPLATE);
    chat_template *t = template_from_gguf(f, tok, err, sizeof err);
    REQUIRE(t != NULL, "the Qwen2 template from a GGUF: %s", err);
    expect(t, ua, 2, 1,
           QWEN2_SYSTEM "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n<|im_start|>assistant\n",
           "Qwen2: the default system turn");
    expect(t, SUA, 3, 1,
           "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n"
           "<|im_start|>assistant\n",
           "Qwen2: a system message of its own");
    expect(t, us, 2, 1,
           QWEN2_SYSTEM "<|im_start|>user\nU<|im_end|>\n<|im_start|>system\nS2<|im_end|>\n<|im_start|>assistant\n",
           "Qwen2: a later system message is a turn");
    size_t len;
    const char *text = template_text(t, &len);
    CHECK(!strcmp(template_resembles(text, len), "chatml"), "Qwen2's template resembles chatml");
    template_unref(t);
    tokenizer_free(tok);
    gguf_close(f);
    gb_free(&gb);

    /* Qwen2.5-Instruct's published template */
    const char *src = llama_src();
    CHECK(src != NULL, "llama.cpp's source (tools/llama-cpp-src.sh) is needed for Qwen2.5's template");
    if (src) {
        char path[2048];
        snprintf(path, sizeof path, "%s/models/templates/Qwen-Qwen2.5-7B-Instruct.jinja", src);
        char *t25 = read_text(path, &len);
        REQUIRE(t25 != NULL, "%s", path);
        t = jinja(t25, NULL);
        free(t25);
        expect(t, ua, 1, 1, QWEN25_SYSTEM "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n",
               "Qwen2.5: its default system turn");
        const chat_msg empty_sys[] = {{"system", "", NULL}, {"user", "U", NULL}};
        expect(t, empty_sys, 2, 0, "<|im_start|>system\n<|im_end|>\n<|im_start|>user\nU<|im_end|>\n",
               "Qwen2.5: an empty system message stays");
        template_unref(t);
    }

    /* the qwen2-tiny fixture's own template is plain ChatML; the built-in chatml neither */
    gguf_file *q = gguf_open("tests/fixtures/qwen2-tiny-f32.gguf", err, sizeof err);
    REQUIRE(q != NULL, "qwen2 fixture: %s", err);
    tok = tokenizer_load(q, err, sizeof err);
    REQUIRE(tok != NULL, "qwen2 fixture tokenizer: %s", err);
    t = template_from_gguf(q, tok, err, sizeof err);
    REQUIRE(t != NULL, "the qwen2 fixture's template: %s", err);
    expect(t, ua, 1, 1, "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n",
           "a Qwen2 file with plain ChatML: no system turn added");
    template_unref(t);
    tokenizer_free(tok);
    gguf_close(q);
    t = builtin("chatml", NULL);
    expect(t, ua, 1, 0, "<|im_start|>user\nU<|im_end|>\n", "the built-in chatml adds no system turn");
    template_unref(t);
}

/* ------------------------------------------------------------------ threads */

typedef struct {
    chat_template *t;
    const char *want[2]; /* thinking off, on */
    int good;
} worker;

static const chat_msg THREAD_CONV[] = {
    {"system", " S ", NULL}, {"user", "U", NULL}, {"assistant", "A", "r"}, {"user", "V", NULL}};

static void *render_many(void *arg) {
    worker *w = arg;
    chat_template *t = w->t; /* a request's own reference, taken before it was handed over */
    for (int i = 0; i < 200; i++) {
        char err[256];
        char *out = template_render(t, THREAD_CONV, 4, 1, i & 1, NULL, err, sizeof err);
        w->good += out && !strcmp(out, w->want[i & 1]);
        free(out);
    }
    template_unref(t);
    return NULL;
}

static void test_threads(void) {
    chat_template *t = builtin("qwen35", NULL);
    char err[256];
    char *want[2] = {template_render(t, THREAD_CONV, 4, 1, 0, NULL, err, sizeof err),
                     template_render(t, THREAD_CONV, 4, 1, 1, NULL, err, sizeof err)};
    REQUIRE(want[0] && want[1] && strcmp(want[0], want[1]), "thinking changes the render");
    worker w[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        /* the reference is taken here, as a request takes it before the worker sees it:
         * taken in the thread, it could come after the unref below freed the template */
        w[i] = (worker){template_ref(t), {want[0], want[1]}, 0};
        pthread_create(&th[i], NULL, render_many, &w[i]);
    }
    template_unref(t); /* the threads' references keep it */
    int good = 0;
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL), good += w[i].good;
    CHECK(good == 800, "four threads rendering one template: %d of 800 right", good);
    free(want[0]), free(want[1]);
}

/* ------------------------------------------------------------------ the boundary search's cost */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A system prompt, 50 user/assistant exchanges (replies of about 450 bytes, reasoning on
 * every third) and a last question (tests/jinja/jinja_render.c --bench's conversation). */
static int fifty_turns(chat_msg *m, char (*buf)[1024]) {
    static const char *topic[] = {"the tides", "prime numbers", "sourdough", "TCP congestion control", "Kant"};
    int n = 0;
    m[n++] = (chat_msg){"system", "You are a helpful assistant. Answer briefly and precisely.", NULL};
    for (int i = 0; i < 50; i++) {
        snprintf(buf[n], 1024, "Question %d: tell me something about %s, and why it matters.", i, topic[i % 5]);
        m[n] = (chat_msg){"user", buf[n], NULL}, n++;
        int k = 0;
        for (int j = 0; j < 6; j++)
            k += snprintf(buf[n] + k, 1024 - (size_t)k,
                          "Point %d about %s: it follows from simple rules, yet the details matter. ", j, topic[i % 5]);
        m[n] = (chat_msg){"assistant", buf[n], i % 3 == 0 ? "The user asks a factual question; list the key points." : NULL};
        n++;
    }
    m[n++] = (chat_msg){"user", "And what is the one thing I should remember from all of this?", NULL};
    return n;
}

/* pc_plan is what engine_submit runs after the prompt's own render and tokenization:
 * the boundary search renders the conversation with the last message replaced by two
 * dummies (and [system, user dummy] twice for the system prompt's end), tokenizing only
 * what differs from the prompt. Measured with the real Qwen3.5 template on the bundled
 * model's tokenizer (a trained BPE, qwen35 pre-tokenizer). */
/* Qwen3.5's published template (llama.cpp's tree) over the bundled model's tokenizer, the
 * model in *m; NULL when the tree is not there (test_published_against_python says so) */
static chat_template *qwen35_published(model **m) {
    const char *src = llama_src();
    if (!src) return NULL;
    char path[2048], err[256];
    size_t len;
    snprintf(path, sizeof path, "%s/models/templates/Qwen3.5-4B.jinja", src);
    char *text = read_text(path, &len);
    REQUIRE(text != NULL, "%s", path);
    *m = model_load("models/chatfs-default.gguf", err, sizeof err);
    REQUIRE(*m != NULL, "%s", err);
    chat_template *t = template_new(text, len, (*m)->tok, err, sizeof err);
    REQUIRE(t != NULL, "Qwen3.5: %s", err);
    free(text);
    return t;
}

static void test_boundary_search_cost(void) {
    model *m;
    chat_template *t = qwen35_published(&m);
    if (!t) return;
    char err[256];
    size_t len;
    static chat_msg msgs[128];
    static char buf[128][1024];
    int n = fifty_turns(msgs, buf);
    enum { ROUNDS = 101 };
    double plan[ROUNDS], render[ROUNDS], tokenize[ROUNDS];
    int marks = 0, n_ids = 0, a_pos = 0;
    for (int r = 0; r < ROUNDS; r++) {
        double t0 = now_ms();
        char *prompt = template_render(t, msgs, n, 1, 1, &len, err, sizeof err);
        REQUIRE(prompt != NULL, "%s", err);
        int *ids;
        double tr = now_ms();
        n_ids = tokenizer_encode(m->tok, prompt, len, 1, 1, &ids);
        double t1 = now_ms();
        render[r] = tr - t0;
        tokenize[r] = t1 - tr;
        pc_render pr = {.t = t, .enable_thinking = 1, .text = prompt, .len = len, .ids = ids, .n_ids = n_ids};
        pc_mark *mk;
        marks = pc_plan(m, &pr, msgs, n, 1024, &mk);
        double t2 = now_ms();
        plan[r] = t2 - t1;
        for (int i = 0; i < marks; i++)
            if (mk[i].kind == CK_LAST_USER) a_pos = mk[i].pos;
        if (r == 0) { /* (a) lies where the last question begins: the prompt up to there, tokenized */
            const char *at = prompt, *q;
            while ((q = strstr(at, "<|im_start|>user\n"))) at = q + 1;
            int *head, nh = tokenizer_encode(m->tok, prompt, (size_t)(at - 1 - prompt) + 17, 1, 1, &head);
            CHECK(a_pos == nh && nh > 0 && !memcmp(head, ids, sizeof *ids * (size_t)nh),
                  "(a) at the last question: mark %d, the text before it %d tokens", a_pos, nh);
            free(head);
        }
        free(mk), free(ids), free(prompt);
    }
    qsort(plan, ROUNDS, sizeof *plan, cmp_double);
    qsort(render, ROUNDS, sizeof *render, cmp_double);
    qsort(tokenize, ROUNDS, sizeof *tokenize, cmp_double);
    printf("  boundary search, 50 turns under Qwen3.5's template (%zu bytes, %d tokens, %d marks): %.3f ms (median "
           "of %d, min %.3f); the prompt's own render %.3f ms and tokenization %.3f ms\n",
           len, n_ids, marks, plan[ROUNDS / 2], ROUNDS, plan[0], render[ROUNDS / 2], tokenize[ROUNDS / 2]);
#if defined(__OPTIMIZE__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    CHECK(plan[ROUNDS / 2] < 2.0, "the boundary search takes %.3f ms (limit 2 ms)", plan[ROUNDS / 2]);
#endif
    template_unref(t);
    model_free(m);
}

/* Images as content parts: Qwen3.5's own template writes its vision markers for each image
 * before the turn's text, and refuses an image in a system message with its own words. */
static void test_images(void) {
    model *m;
    chat_template *t = qwen35_published(&m);
    if (!t) return;
    char err[256];
    size_t len;
    const chat_msg two[] = {{"user", "What differs between them?", .n_images = 2}};
    char *out = template_render(t, two, 1, 1, 0, &len, err, sizeof err);
    CHECK(out && strstr(out, "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>"
                             "<|vision_start|><|image_pad|><|vision_end|>What differs between them?<|im_end|>"),
          "two images before the text: %s", out ? out : err);
    free(out);
    const chat_msg sys[] = {{"system", "Look.", .n_images = 1}, {"user", "Hi"}};
    out = template_render(t, sys, 2, 1, 0, &len, err, sizeof err);
    CHECK(!out && strstr(err, "System message cannot contain images."), "an image in a system message: %s",
          out ? out : err);
    free(out);
    template_unref(t);
    model_free(m);
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
    test_variables();
    test_errors();
    test_from_gguf();
    test_resembles();
    test_builtins_against_python();
    test_published_against_python();
    test_threads();
    test_boundary_search_cost();
    test_images();
    return check_report("test_template");
}
