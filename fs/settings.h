/* settings.h - a conversation's generation settings: the settings.json files.
 *
 * The file holds every key; a write may give any subset, and the keys it leaves out
 * take the defaults (the root settings.json for a conversation, the built-in values for
 * the root itself). Unknown keys, wrong types and out-of-range values are refused with
 * a one-line reason; a chat_template that does not compile is refused with its compile
 * error, a grammar or response_format that does not (or that constrains to nothing) with
 * the reason, so that a constrained reply can always be made. */
#ifndef CHATFS_FS_SETTINGS_H
#define CHATFS_FS_SETTINGS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/runtime/chat.h"

typedef struct {
    double temperature, top_p, min_p;
    int top_k;
    int64_t seed;            /* -1 (JSON null): a new random seed for every reply */
    int max_tokens;          /* 0: until the model ends its turn or the context is full */
    char *stop[GEN_MAX_STOP];
    int n_stop;
    int checkpoint_interval; /* 0: the engine's default */
    char *template_name;     /* a built-in template by name; NULL: the model's own template */
    char *chat_template;     /* Jinja text rendered instead of the model's template (and instead
                                of template_name); NULL: none */
    int checkpoints;         /* 1: reuse and record checkpoints (default); 0: compute every prompt */
    int ignore_eos;          /* 1: the model's end-of-turn token does not end the reply (llama.cpp's ignore_eos) */
    int speculative;         /* drafts per step with the model's MTP head: -1 (JSON null) the mount's
                                --draft, 0 none, N up to N (only where the mount speculates) */
    int thinking;            /* 1 / 0: the template's thinking switch; -1 (JSON null): the model's default,
                                which is enable_thinking 1 as llama.cpp passes it */
    int thinking_budget;     /* most reasoning tokens, then the engine closes the reasoning; -1 (null): none */
    char *grammar;           /* GBNF text (llama.cpp's syntax) the answer follows; NULL: none */
    char *response_format;   /* OpenAI's response_format object as given (compact JSON); NULL: none */
    char *format_gbnf;       /* response_format's grammar (its JSON schema converted), derived when it is
                                parsed and not rendered; NULL: none or {"type": "text"} */
    char *tools;             /* the functions offered: OpenAI's tools array (compact JSON, checked by
                                tc_tools_parse); NULL: none. The tools.json files show it */
    char *tool_choice;       /* "auto" (NULL), "none", "required" or a function's name */
    int parallel_tool_calls; /* 1 (default): a reply may make several calls; 0: at most one */
} conv_settings;

void settings_builtin(conv_settings *s);
/* The sampling a backend recommends (engine_settings_defaults: the model's
 * general.sampling.* keys) over s: each of temperature, top_k, top_p, min_p that
 * `recommended` sets differently from gen_settings_defaults replaces s's. */
void settings_recommend(conv_settings *s, const gen_settings *recommended);
void settings_copy(conv_settings *dst, const conv_settings *src);
void settings_free(conv_settings *s);
int settings_equal(const conv_settings *a, const conv_settings *b);

/* Parses a JSON object over defaults into out. 1: done; 0: the text is not complete
 * JSON yet (a writer may still be writing); -1: invalid, reason in err. */
int settings_parse(const char *text, size_t len, const conv_settings *defaults, conv_settings *out, char *err,
                   size_t errlen);
/* Pretty JSON ending in a newline; malloc'd. */
char *settings_render(const conv_settings *s);
/* Fills g (pointers into s stay valid while s lives); random seeds are drawn here. */
void settings_to_gen(const conv_settings *s, gen_settings *g);

#endif
