/* template.h - chat templates: a conversation -> the prompt text, by the model's own Jinja.
 *
 * A GGUF carries its chat template as Jinja text (tokenizer.chat_template), and that text
 * decides the prompt: where a message begins, what happens to old reasoning, where a
 * system prompt goes. chatfs compiles it once (engine/jinja) and renders it as Hugging
 * Face's apply_chat_template does: messages, add_generation_prompt, enable_thinking,
 * bos_token and eos_token, tools (None without any) and documents None. What llama.cpp
 * adds is done too: the BOS and EOS texts are the tokenizer's, and a BOS text the template
 * writes at the start is dropped when the tokenizer adds BOS itself (an EOS text at the
 * end likewise), so the prompt does not get it twice. A model without a template gets ChatML, as in llama.cpp.
 * builtin.c holds the texts chatfs ships (ChatML, and the families settings.json names). */
#ifndef CHATFS_TEMPLATE_H
#define CHATFS_TEMPLATE_H

#include <stddef.h>
#include <time.h>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"

/* An image a turn carries: the file's bytes as given (the engine decodes them; the
 * template sees only how many a turn has). */
typedef struct {
    const void *bytes;
    size_t len;
} chat_image;

typedef struct {
    const char *role;              /* "system", "user", "assistant", "tool" */
    const char *content;           /* NULL: empty */
    const char *reasoning_content; /* an assistant turn's reasoning kept apart from its content;
                                      NULL or empty: none (the key is left out, as llama.cpp does) */
    const char *tool_calls;        /* an assistant turn's calls: OpenAI's `tool_calls` array as JSON
                                      text (each {"id", "type", "function": {"name", "arguments"}}),
                                      NULL or empty: none */
    const char *tool_call_id;      /* a tool turn's answer to this call id; NULL: none */
    int n_images;                  /* images the turn carries before its text: its content goes to
                                      the template as parts, n_images {"type": "image"} then
                                      {"type": "text", "text": content} (Qwen3.5's template writes
                                      <|vision_start|><|image_pad|><|vision_end|> for each) */
    const chat_image *images;      /* those n_images files, for the engine; NULL: the count alone
                                      (a rendering without the images themselves) */
} chat_msg;

/* A compiled template: read-only, so any number of threads may render it at once, and
 * counted, so that a request keeps the template it was rendered with. */
typedef struct chat_template chat_template;

/* Compiles Jinja text for a model with tokenizer tok (its BOS and EOS texts; NULL: none).
 * NULL with the compile error in err ("line N: ..."). */
chat_template *template_new(const char *text, size_t len, const tokenizer *tok, char *err, size_t errlen);
/* A built-in template by name (template_builtin_text), compiled for tok. NULL with a
 * reason in err for an unknown name. */
chat_template *template_new_builtin(const char *name, const tokenizer *tok, char *err, size_t errlen);
/* The template of GGUF file f: its tokenizer.chat_template, or the built-in ChatML when it
 * has none (or names a built-in, as llama.cpp accepts "chatml" there). NULL with the
 * compile error in err when its text does not compile. */
chat_template *template_from_gguf(const gguf_file *f, const tokenizer *tok, char *err, size_t errlen);

chat_template *template_ref(chat_template *t); /* one more reference; returns t */
void template_unref(chat_template *t);         /* frees with the last reference; NULL is fine */

/* The Jinja text (len in *len when not NULL). */
const char *template_text(const chat_template *t, size_t *len);
/* The built-in's name ("chatml", ...) when t is one, else NULL. */
const char *template_name(const chat_template *t);
/* From now on strftime_now formats `now` instead of reading the clock (tests that compare
 * renders with another renderer's). */
void template_fix_clock(chat_template *t, time_t now);
/* 1 if the template's text reads the variable (e.g. "enable_thinking"). */
int template_uses(const chat_template *t, const char *variable);

/* Renders n messages (roles system, user, assistant and tool) as
 * apply_chat_template(messages, add_generation_prompt, enable_thinking). Returns the
 * malloc'd prompt (NUL-terminated; its length in *len, which counts any NUL the template
 * wrote) or NULL with the reason in err: "chat template: " and the template's own message
 * when it calls raise_exception, "chat template: line N: ..." for another error, or which
 * message has a role chatfs does not know or calls that do not read. */
char *template_render(const chat_template *t, const chat_msg *msgs, int n, int add_generation_prompt,
                      int enable_thinking, size_t *len, char *err, size_t errlen);
/* The same with the functions offered: tools_json is OpenAI's `tools` array as JSON text
 * (NULL or empty: tools is None). The template gets it as parsed, and each call's
 * function.arguments as a mapping, a JSON string being parsed first: what llama.cpp passes
 * to a template that reads arguments as a mapping (`arguments|items`, `arguments|tojson`),
 * which every tool-calling template we know of does. */
char *template_render_tools(const chat_template *t, const chat_msg *msgs, int n, const char *tools_json,
                            int add_generation_prompt, int enable_thinking, size_t *len, char *err, size_t errlen);

/* Compiles text only to check it: 0, or -1 with the compile error in err. */
int template_check(const char *text, size_t len, char *err, size_t errlen);
/* Which built-in family a template text looks like, by the markers it writes ("qwen35",
 * "llama3", ...), or NULL: a hint for `chatfs info`; rendering never depends on it. */
const char *template_resembles(const char *text, size_t len);

/* The Jinja text of a template chatfs ships (builtin.c), by name: "chatml", "qwen3",
 * "qwen35", "llama3", "granite", "lfm2", "nemotron"; NULL for another name. */
const char *template_builtin_text(const char *name);
/* The i-th built-in's name, NULL past the last. */
const char *template_builtin_name(int i);

#endif
