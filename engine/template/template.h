/* template.h - chat templates: a list of {role, content} messages -> prompt text.
 *
 * chatfs does not interpret Jinja. It recognises the template families that GGUF
 * files ship (docs/engine-math.md §9) from the template text and renders them with code
 * that produces the same text. An unknown template falls back to ChatML. */
#ifndef CHATFS_TEMPLATE_H
#define CHATFS_TEMPLATE_H

#include <stddef.h>

typedef struct {
    const char *role;    /* "system", "user", "assistant" */
    const char *content;
} chat_msg;

typedef enum {
    TMPL_CHATML = 0,   /* <|im_start|>role\ncontent<|im_end|>\n ... */
    TMPL_QWEN3,        /* ChatML + <think> handling of Qwen3 */
    TMPL_QWEN35,       /* ChatML + <think> handling of Qwen3.5 (trimmed contents) */
    TMPL_LLAMA3,
    TMPL_GRANITE,      /* Granite 3.x / 4.0 role markers */
    TMPL_LFM2,
    TMPL_NEMOTRON,     /* Nemotron Nano v2 <SPECIAL_10>/<SPECIAL_11> */
    TMPL_COUNT
} tmpl_family;

typedef struct {
    tmpl_family family;
    int known;            /* 0: the template text was not recognised, family is the fallback */
    char bos_text[64];    /* the tokenizer's BOS text if the template emits it (LFM2, Llama 3); left
                           * empty by detect/force: llama.cpp strips it from the render whenever the
                           * tokenizer adds BOS itself, so set it only when tokenizer_add_bos() is 0 */
    int enable_thinking;  /* as llama.cpp: defaults to 1 */
    int variant;          /* family-specific flavour recognised in the template text (template.c) */
} chat_template;

/* Detects the family from the Jinja text stored in tokenizer.chat_template (may be NULL).
 * Initialises every field (enable_thinking = 1, bos_text empty). */
void template_detect(chat_template *t, const char *jinja_text);
/* Forces a family by name ("chatml", "qwen3", "qwen35", "llama3", "granite", "lfm2",
 * "nemotron"), initialising every field like template_detect. Returns 0 for an unknown
 * name and leaves *t untouched. */
int template_force(chat_template *t, const char *name);
const char *template_family_name(tmpl_family f);

/* Renders messages into a malloc'd NUL-terminated string; add_generation_prompt
 * appends the assistant header. Returns NULL on a message with an unknown role. */
char *template_render(const chat_template *t, const chat_msg *msgs, int n, int add_generation_prompt);

/* The Jinja text of a template chatfs ships (builtin.c), by name: "chatml", "qwen3",
 * "qwen35", "llama3", "granite", "lfm2", "nemotron"; NULL for another name. */
const char *template_builtin_text(const char *name);
/* The i-th built-in's name, NULL past the last. */
const char *template_builtin_name(int i);

#endif
