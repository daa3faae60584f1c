/* jinja.h - a Jinja interpreter for chat templates, rendering as Hugging Face does.
 *
 * A GGUF's chat template is Jinja text; Hugging Face's apply_chat_template renders it with
 * python-jinja2 configured as ImmutableSandboxedEnvironment(trim_blocks=True,
 * lstrip_blocks=True, extensions=[loopcontrols, the {% generation %} tag]), tojson =
 * json.dumps(ensure_ascii=False) and the globals raise_exception and strftime_now. This
 * interpreter produces the same bytes for the language chat templates use (see README.md).
 *
 * Compile once, render many times: a compiled template is read-only, so one may be rendered
 * from several threads at once. A render allocates from its own arena and frees it before
 * returning; nothing global changes. It is sandboxed: no file or environment access, lists
 * and dicts cannot be mutated (list.append errors as in the sandbox; namespace() attributes
 * are the one mutable thing), and output bytes, memory, evaluation steps and nesting depth
 * are bounded, so a hostile template fails with a clear error instead of hanging or
 * exhausting the process. */
#ifndef CHATFS_JINJA_H
#define CHATFS_JINJA_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cjson/cJSON.h>

typedef struct jinja_template jinja_template;

/* Compiles template text (UTF-8, len bytes, may contain NULs). Returns NULL and sets
 * *error (malloc'd, "line N: ...") when the text is not a valid template or uses a
 * statement this interpreter does not support (include, extends, import, ...). */
jinja_template *jinja_compile(const char *text, size_t len, char **error);
void jinja_free(jinja_template *t);
/* 1 if the template's text names the variable (e.g. "enable_thinking", "tools"): whether
 * passing it can change the output at all */
int jinja_uses_variable(const jinja_template *t, const char *name);

typedef struct {
    size_t max_output;    /* bytes of the output and of any string made on the way;
                           * 0 = JINJA_DEFAULT_MAX_OUTPUT */
    size_t max_memory;    /* bytes one render may allocate; 0 = JINJA_DEFAULT_MAX_MEMORY */
    uint64_t max_steps;   /* evaluation steps (statements, expressions, elements filters
                           * walk); 0 = JINJA_DEFAULT_MAX_STEPS */
    int max_depth;        /* nesting of expressions, statements, macro calls and values;
                           * 0 = JINJA_DEFAULT_MAX_DEPTH (which needs under 100 KB of stack) */
    int fixed_time;       /* 1: strftime_now formats `now` instead of the clock (tests) */
    time_t now;
} jinja_options;

#define JINJA_DEFAULT_MAX_OUTPUT (16u << 20)
#define JINJA_DEFAULT_MAX_MEMORY (256u << 20)
#define JINJA_DEFAULT_MAX_STEPS  20000000u
#define JINJA_DEFAULT_MAX_DEPTH  500

enum {
    JINJA_OK = 0,
    JINJA_ERROR,     /* a runtime error: "line N: message" (undefined attribute, type error, ...) */
    JINJA_RAISED,    /* the template called raise_exception(message): the error is message */
    JINJA_LIMIT,     /* a limit of jinja_options was hit: "line N: ... limit ..." */
};

/* Renders t with the variables of the JSON object vars (NULL = none): for a chat template
 * messages, add_generation_prompt, bos_token, eos_token, enable_thinking, tools, ...
 * JSON values become Python's: objects dicts (insertion order; a repeated key keeps its
 * first place and last value), arrays lists, integral numbers up to 2^53 ints and other
 * numbers floats. opt may be NULL (defaults). On JINJA_OK *out is the malloc'd
 * NUL-terminated output and *out_len its length (the output may contain NUL bytes);
 * otherwise *out is NULL and *error the malloc'd message. error may be NULL. */
int jinja_render(const jinja_template *t, const cJSON *vars, const jinja_options *opt,
                 char **out, size_t *out_len, char **error);

#endif
