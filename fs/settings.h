/* settings.h - a conversation's generation settings: the settings.json files.
 *
 * The file holds every key; a write may give any subset, and the keys it leaves out
 * take the defaults (the root settings.json for a conversation, the built-in values for
 * the root itself). Unknown keys, wrong types and out-of-range values are refused with
 * a one-line reason. */
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
    char *template_name;     /* NULL: the model's own template */
    int checkpoints;         /* 1: reuse and record checkpoints (default); 0: compute every prompt */
    int ignore_eos;          /* 1: the model's end-of-turn token does not end the reply (llama.cpp's ignore_eos) */
    int speculative;         /* drafts per step with the model's MTP head: -1 (JSON null) the mount's
                                --draft, 0 none, N up to N (only where the mount speculates) */
} conv_settings;

void settings_builtin(conv_settings *s);
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
