/* test_thinking.c - reasoning kept apart from the answer, through the engine (issue 25).
 *
 * On the default model (Qwen3.5's template: the prompt ends inside "<think>\n" with
 * thinking on, after "<think>\n\n</think>\n\n" with it off):
 *   - thinking on: the trained reasoning goes to on_reasoning, word for word, before the
 *     answer on on_text; neither has a marker or the newlines around "</think>"; the phase
 *     is GEN_THINKING, then GEN_GENERATING; reasoning_tokens counts up to the closing
 *     marker; thinking off: no reasoning at all;
 *   - thinking_budget: 0 gives an empty reasoning and still an answer; a budget of 3
 *     reasoning tokens ends there (the engine feeds "\n</think>\n\n", which the report
 *     counts: the newline and the marker are the reasoning's); a budget above the
 *     reasoning changes nothing; -2 is refused;
 *   - the second turn of a thinking conversation (its reasoning dropped from the history by
 *     the template) reuses more than the whole first prompt: the checkpoint the first
 *     reply left (c) is keyed by the tokens the second prompt really has.
 * On a copy of the default model whose vocabulary calls two of its ordinary tokens
 * "<think>" and "</think>" (tests/jinja/gguf_set_template.py), with a template that opens
 * nothing, the model opens a reasoning block itself: its first token, "The", becomes the
 * opening marker, " Paris" the closing one. The same copy carries general.sampling.*:
 * engine_settings_defaults takes them. A tiny model without markers cannot think. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/runtime/chat.h"
#include "tests/check.h"
#include "tests/engine_db.h"
#include "tests/reply.h"

#define MODEL "models/chatfs-default.gguf"
#define NO_THINK_MODEL "tests/fixtures/llama-tiny-f32.gguf"

/* a template whose generation prompt opens no reasoning */
static const char chatml[] =
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

static const char *python(void) { return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3"; }

static void greedy(chat_engine *e, gen_settings *s) {
    engine_settings_defaults(e, s);
    s->temperature = 0;
    s->max_tokens = 96;
}

static int has_marker(const char *s) { return strstr(s, "<think>") || strstr(s, "</think>"); }

static void default_model(void) {
    test_store ram; /* the checkpoints the second turn reuses, in RAM */
    engine_config cfg = {.model_path = MODEL, .checkpoints = test_store_open(&ram, NULL), .threads = 2, .n_ctx = 512};
    char err[256];
    chat_engine *e = engine_open(&cfg, err, sizeof err);
    REQUIRE(e, "%s", err);
    CHECK(engine_can_think(e) == 1, "the default model can think");
    gen_settings s, plain;
    engine_settings_defaults(e, &s);
    gen_settings_defaults(&plain);
    CHECK(s.temperature == plain.temperature && s.top_k == plain.top_k && s.top_p == plain.top_p &&
              s.min_p == plain.min_p && s.thinking_budget == -1,
          "no general.sampling.* in the file: today's defaults");

    const chat_msg q[1] = {{"user", "What is 7 + 26 + 13?", NULL}};
    static test_reply r;

    /* thinking on */
    greedy(e, &s);
    REQUIRE(reply_run(e, q, 1, &s, &r) == 0, "%s", r.error);
    CHECK(!strcmp(r.reasoning, "7 + 26 = 33.\n33 + 13 = 46."), "reasoning '%s'", r.reasoning);
    CHECK(!strcmp(r.answer, "7 + 26 + 13 = 46."), "answer '%s'", r.answer);
    CHECK(!has_marker(r.answer) && !has_marker(r.reasoning), "markers shown");
    CHECK(r.saw_thinking && r.saw_generating && !r.thinking_after_generating && !r.reasoning_after_answer,
          "phases: thinking %d generating %d", r.saw_thinking, r.saw_generating);
    /* the reasoning's 22 tokens, "\n" and "</think>"; then "\n" "\n", the answer's tokens, <|im_end|> */
    int *ids = NULL, n_answer = tokenizer_encode(engine_model(e)->tok, r.answer, r.n_answer, 0, 0, &ids);
    free(ids);
    CHECK(r.report.reasoning_tokens == 24, "reasoning_tokens %d", r.report.reasoning_tokens);
    CHECK(r.report.generated_tokens == 24 + 2 + n_answer + 1, "generated_tokens %d (answer %d)",
          r.report.generated_tokens, n_answer);
    CHECK(r.report.finish == FINISH_EOG, "finish %d", r.report.finish);
    const int on_prompt = r.report.prompt_tokens;
    char reasoning1[sizeof r.reasoning], answer1[sizeof r.answer];
    snprintf(reasoning1, sizeof reasoning1, "%s", r.reasoning);
    snprintf(answer1, sizeof answer1, "%s", r.answer);

    /* thinking off */
    s.enable_thinking = 0;
    REQUIRE(reply_run(e, q, 1, &s, &r) == 0, "%s", r.error);
    CHECK(r.n_reasoning == 0 && r.report.reasoning_tokens == 0 && !r.saw_thinking, "thinking off: reasoning '%s'",
          r.reasoning);
    CHECK(!strcmp(r.answer, "7 + 26 + 13 = 46."), "thinking off: answer '%s'", r.answer);

    /* budgets */
    greedy(e, &s);
    s.thinking_budget = 0;
    REQUIRE(reply_run(e, q, 1, &s, &r) == 0, "%s", r.error);
    CHECK(r.n_reasoning == 0 && r.report.reasoning_tokens == 2, "budget 0: reasoning '%s', %d tokens", r.reasoning,
          r.report.reasoning_tokens);
    CHECK(!strncmp(r.answer, "7 + 26 + 13 = ", 14) && !has_marker(r.answer), "budget 0: answer '%s'", r.answer);
    s.thinking_budget = 3;
    REQUIRE(reply_run(e, q, 1, &s, &r) == 0, "%s", r.error);
    CHECK(!strcmp(r.reasoning, "7 +"), "budget 3: reasoning '%s'", r.reasoning); /* "7" " +" " " */
    CHECK(r.report.reasoning_tokens == 3 + 2, "budget 3: reasoning_tokens %d", r.report.reasoning_tokens);
    /* (cut that short, this tiny model's sum goes wrong: "7 + 25 + 13 = 45.") */
    CHECK(!strncmp(r.answer, "7 + ", 4) && !has_marker(r.answer), "budget 3: answer '%s'", r.answer);
    CHECK(r.saw_thinking && !r.thinking_after_generating, "budget 3: phases");
    s.thinking_budget = 22;
    REQUIRE(reply_run(e, q, 1, &s, &r) == 0, "%s", r.error);
    CHECK(!strcmp(r.reasoning, reasoning1) && !strcmp(r.answer, answer1) && r.report.reasoning_tokens == 24,
          "a budget the reasoning fits in changes nothing: '%s' '%s' %d", r.reasoning, r.answer,
          r.report.reasoning_tokens);
    s.thinking_budget = -2;
    CHECK(engine_submit(e, q, 1, &s, NULL, err, sizeof err) == 0 && errno == EINVAL, "budget -2 accepted");

    /* the second turn reuses the first turn's end, though its prompt drops the reasoning */
    greedy(e, &s);
    const chat_msg q2[3] = {{"user", "What is 7 + 26 + 13?", NULL}, {"assistant", answer1, reasoning1},
                            {"user", "Add 5 to that.", NULL}};
    REQUIRE(reply_run(e, q2, 3, &s, &r) == 0, "%s", r.error);
    printf("thinking conversation: first prompt %d tokens; second prompt %d, %d reused (%s)\n", on_prompt,
           r.report.prompt_tokens, r.report.reused_tokens, r.report.source);
    CHECK(r.report.reused_tokens > on_prompt, "the second turn reused %d of %d (first prompt %d)",
          r.report.reused_tokens, r.report.prompt_tokens, on_prompt);
    /* all but "Add 5 to that.<|im_end|>\n<|im_start|>assistant\n<think>\n" */
    CHECK(r.report.reused_tokens == r.report.prompt_tokens - 13, "reused %d of %d: up to the new question",
          r.report.reused_tokens, r.report.prompt_tokens);
    CHECK(!strcmp(r.answer, "46 + 5 = 51."), "follow-up answer '%s' (reasoning '%s')", r.answer, r.reasoning);
    engine_close(e);
    test_store_close(&ram);
}

/* A copy of the default model: "The" (404) is "<think>", " Paris" (1162) "</think>", the
 * real markers renamed away; the recommended sampling set. */
static void model_opens_block(void) {
    char dir[] = "/tmp/chatfs-thinking-XXXXXX";
    REQUIRE(mkdtemp(dir), "mkdtemp");
    char path[256], cmd[1024];
    snprintf(path, sizeof path, "%s/opens.gguf", dir);
    snprintf(cmd, sizeof cmd,
             "%s tests/jinja/gguf_set_template.py %s - %s --token 404='<think>' --token 1162='</think>' "
             "--token 1567='<unused-1>' --token 1568='<unused-2>' --f32 general.sampling.temp=0.6 "
             "--i32 general.sampling.top_k=20 --f32 general.sampling.top_p=0.8 --f32 general.sampling.min_p=0.01 "
             ">/dev/null",
             python(), MODEL, path);
    REQUIRE(system(cmd) == 0, "%s failed", cmd);
    engine_config cfg = {.model_path = path, .threads = 2, .n_ctx = 512};
    char err[256];
    chat_engine *e = engine_open(&cfg, err, sizeof err);
    REQUIRE(e, "%s", err);
    CHECK(engine_can_think(e) == 1, "a vocabulary with the marker pair can think");
    gen_settings s;
    engine_settings_defaults(e, &s);
    CHECK(s.temperature > 0.599f && s.temperature < 0.601f && s.top_k == 20 && s.top_p > 0.799f && s.top_p < 0.801f &&
              s.min_p > 0.0099f && s.min_p < 0.0101f,
          "the file's sampling: temp %g top_k %d top_p %g min_p %g", s.temperature, s.top_k, s.top_p, s.min_p);
    CHECK(s.enable_thinking == 1 && s.thinking_budget == -1 && s.checkpoints == 1, "the rest as gen_settings_defaults");

    const chat_msg q[1] = {{"user", "What is the capital of France?", NULL}};
    static test_reply r;
    greedy(e, &s);
    s.chat_template = chatml;
    REQUIRE(reply_run(e, q, 1, &s, &r) == 0, "%s", r.error);
    CHECK(!strcmp(r.reasoning, "capital of France is"), "reasoning '%s'", r.reasoning);
    CHECK(!strcmp(r.answer, "."), "answer '%s'", r.answer);
    CHECK(r.report.reasoning_tokens == 6, "reasoning_tokens %d", r.report.reasoning_tokens); /* both markers */
    CHECK(r.saw_thinking && r.saw_generating && !r.thinking_after_generating, "phases");
    /* a budget: the template writes no reasoning, so the closing marker alone is fed */
    s.thinking_budget = 2;
    REQUIRE(reply_run(e, q, 1, &s, &r) == 0, "%s", r.error);
    CHECK(!strcmp(r.reasoning, "capital of"), "budget 2: reasoning '%s'", r.reasoning);
    CHECK(r.report.reasoning_tokens == 1 + 2 + 1, "budget 2: reasoning_tokens %d", r.report.reasoning_tokens);
    engine_close(e);
    unlink(path);
    rmdir(dir);
}

static void model_without_markers(void) {
    engine_config cfg = {.model_path = NO_THINK_MODEL, .threads = 2, .n_ctx = 256};
    char err[256];
    chat_engine *e = engine_open(&cfg, err, sizeof err);
    REQUIRE(e, "%s", err);
    CHECK(engine_can_think(e) == 0, "a ChatML model without markers cannot think");
    gen_settings s;
    greedy(e, &s);
    s.max_tokens = 24;
    s.ignore_eog = 1;
    s.thinking_budget = 4; /* accepted, without effect */
    const chat_msg q[1] = {{"user", "Hello", NULL}};
    static test_reply r;
    REQUIRE(reply_run(e, q, 1, &s, &r) == 0, "%s", r.error);
    CHECK(r.n_reasoning == 0 && r.report.reasoning_tokens == 0 && !r.saw_thinking && r.report.generated_tokens == 24,
          "no reasoning: %zu bytes, %d tokens", r.n_reasoning, r.report.reasoning_tokens);
    CHECK(r.n_answer > 0, "an answer");
    engine_close(e);
}

int main(void) {
    default_model();
    model_opens_block();
    model_without_markers();
    return check_report("test_thinking");
}
