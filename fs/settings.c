/* settings.c - settings.json parsing, validation and rendering (see settings.h). */
#include "fs/settings.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "engine/template/template.h"
#include "engine/toolcall/toolcall.h"

void settings_builtin(conv_settings *s) {
    memset(s, 0, sizeof *s);
    s->temperature = 0.7;
    s->top_p = 0.95;
    s->min_p = 0.05;
    s->top_k = 40;
    s->seed = -1;
    s->checkpoints = 1;
    s->speculative = -1;
    s->thinking = -1;
    s->thinking_budget = -1;
    s->parallel_tool_calls = 1;
}

void settings_recommend(conv_settings *s, const gen_settings *r) {
    gen_settings base;
    gen_settings_defaults(&base);
    if (r->temperature != base.temperature) s->temperature = r->temperature;
    if (r->top_k != base.top_k) s->top_k = r->top_k;
    if (r->top_p != base.top_p) s->top_p = r->top_p;
    if (r->min_p != base.min_p) s->min_p = r->min_p;
}

void settings_free(conv_settings *s) {
    for (int i = 0; i < s->n_stop; i++) free(s->stop[i]);
    free(s->template_name);
    free(s->chat_template);
    free(s->grammar);
    free(s->response_format);
    free(s->format_gbnf);
    free(s->tools);
    free(s->tool_choice);
    memset(s, 0, sizeof *s);
}

void settings_copy(conv_settings *dst, const conv_settings *src) {
    conv_settings t = *src;
    for (int i = 0; i < t.n_stop; i++) t.stop[i] = strdup(src->stop[i]);
    t.template_name = src->template_name ? strdup(src->template_name) : NULL;
    t.chat_template = src->chat_template ? strdup(src->chat_template) : NULL;
    t.grammar = src->grammar ? strdup(src->grammar) : NULL;
    t.response_format = src->response_format ? strdup(src->response_format) : NULL;
    t.format_gbnf = src->format_gbnf ? strdup(src->format_gbnf) : NULL;
    t.tools = src->tools ? strdup(src->tools) : NULL;
    t.tool_choice = src->tool_choice ? strdup(src->tool_choice) : NULL;
    *dst = t;
}

int settings_equal(const conv_settings *a, const conv_settings *b) {
    char *x = settings_render(a), *y = settings_render(b);
    int eq = x && y && !strcmp(x, y);
    free(x);
    free(y);
    return eq;
}

static int number(const cJSON *v, const char *key, double lo, double hi, double *out, char *err, size_t n) {
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi) {
        snprintf(err, n, "%s must be a number from %g to %g", key, lo, hi);
        return -1;
    }
    *out = v->valuedouble;
    return 0;
}

static int integer(const cJSON *v, const char *key, double lo, double hi, double *out, char *err, size_t n) {
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi) {
        snprintf(err, n, "%s must be an integer from %.0f to %.0f", key, lo, hi);
        return -1;
    }
    *out = v->valuedouble;
    return 0;
}

static int boolean(const cJSON *v, const char *key, int *out, char *err, size_t n) {
    if (!cJSON_IsBool(v)) {
        snprintf(err, n, "%s must be true or false", key);
        return -1;
    }
    *out = cJSON_IsTrue(v);
    return 0;
}

/* 0 when GBNF text compiles, else -1 with "<what> does not compile: <reason>" in err. */
static int grammar_check(const char *gbnf, const char *what, char *err, size_t errlen) {
    char gerr[256];
    grammar *g = grammar_compile(gbnf, strlen(gbnf), gerr, sizeof gerr);
    if (!g) {
        snprintf(err, errlen, "%s does not compile: %s", what, gerr);
        return -1;
    }
    grammar_free(g);
    return 0;
}

/* OpenAI's response_format: {"type": "text"} (none: *gbnf stays NULL), {"type": "json_object"}
 * (any JSON object; a "schema" beside it narrows it, as llama-server allows), or
 * {"type": "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": ...}}. The
 * schema's grammar is made here, once, so that a schema that cannot be followed is refused
 * at the write and not at the reply. */
static int response_format_grammar(const cJSON *v, char **gbnf, char *err, size_t errlen) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(v, "type");
    if (!cJSON_IsObject(v) || !cJSON_IsString(type)) {
        snprintf(err, errlen, "response_format must be null or an object with a \"type\": \"text\", "
                              "\"json_object\" or \"json_schema\"");
        return -1;
    }
    const char *t = type->valuestring;
    const cJSON *schema = NULL;
    for (const cJSON *k = v->child; k; k = k->next) {
        int known = !strcmp(k->string, "type") || (!strcmp(t, "json_object") && !strcmp(k->string, "schema")) ||
                    (!strcmp(t, "json_schema") && !strcmp(k->string, "json_schema"));
        if (!known) {
            snprintf(err, errlen, "response_format of type '%.20s' has no key '%.40s'", t, k->string);
            return -1;
        }
    }
    if (!strcmp(t, "text")) return 0;
    if (!strcmp(t, "json_object")) schema = cJSON_GetObjectItemCaseSensitive(v, "schema");
    else if (!strcmp(t, "json_schema")) {
        const cJSON *js = cJSON_GetObjectItemCaseSensitive(v, "json_schema");
        schema = js ? cJSON_GetObjectItemCaseSensitive(js, "schema") : NULL;
        if (!cJSON_IsObject(js) || !schema) {
            snprintf(err, errlen, "response_format json_schema needs \"json_schema\": {\"name\": ..., "
                                  "\"schema\": {...}}");
            return -1;
        }
        for (const cJSON *k = js->child; k; k = k->next)
            if (strcmp(k->string, "name") && strcmp(k->string, "schema") && strcmp(k->string, "strict") &&
                strcmp(k->string, "description")) {
                snprintf(err, errlen, "response_format json_schema has no key '%.40s' (known: name, description, "
                                      "schema, strict)", k->string);
                return -1;
            }
    } else {
        snprintf(err, errlen, "response_format type must be \"text\", \"json_object\" or \"json_schema\", not "
                              "'%.40s'", t);
        return -1;
    }
    char *text = schema ? cJSON_PrintUnformatted(schema) : strdup("{\"type\": \"object\"}");
    char serr[256] = "out of memory";
    char *g = text ? json_schema_to_gbnf(text, strlen(text), serr, sizeof serr) : NULL;
    free(text);
    if (!g) {
        snprintf(err, errlen, "response_format: %s", serr);
        return -1;
    }
    if (grammar_check(g, "response_format's grammar", err, errlen) != 0) {
        free(g);
        return -1;
    }
    *gbnf = g;
    return 0;
}

int settings_parse(const char *text, size_t len, const conv_settings *defaults, conv_settings *out, char *err,
                   size_t errlen) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        /* an error with nothing but whitespace after it: a writer still writing */
        size_t at = end ? (size_t)(end - text) : 0;
        int more = 0;
        for (size_t i = at + 1; i < len; i++) more |= !strchr(" \t\r\n", text[i]);
        snprintf(err, errlen, "settings.json: not valid JSON (at byte %zu)", at);
        return more ? -1 : 0;
    }
    for (size_t i = end - text; i < len; i++)
        if (!strchr(" \t\r\n", text[i])) {
            snprintf(err, errlen, "settings.json: text after the JSON object");
            cJSON_Delete(root);
            return -1;
        }
    conv_settings s;
    settings_copy(&s, defaults);
    int rc = 1;
    if (!cJSON_IsObject(root)) {
        snprintf(err, errlen, "settings.json must be a JSON object");
        rc = -1;
    }
    for (cJSON *v = rc > 0 ? root->child : NULL; v && rc > 0; v = v->next) {
        const char *k = v->string;
        double d = 0;
        if (!strcmp(k, "temperature")) rc = number(v, k, 0, 100, &s.temperature, err, errlen) ? -1 : 1;
        else if (!strcmp(k, "top_p")) rc = number(v, k, 0, 1, &s.top_p, err, errlen) ? -1 : 1;
        else if (!strcmp(k, "min_p")) rc = number(v, k, 0, 1, &s.min_p, err, errlen) ? -1 : 1;
        else if (!strcmp(k, "top_k")) {
            rc = integer(v, k, 0, 1 << 20, &d, err, errlen) ? -1 : 1;
            s.top_k = (int)d;
        } else if (!strcmp(k, "max_tokens")) {
            rc = integer(v, k, 0, 1 << 24, &d, err, errlen) ? -1 : 1;
            s.max_tokens = (int)d;
        } else if (!strcmp(k, "checkpoint_interval")) {
            rc = integer(v, k, 0, 1 << 24, &d, err, errlen) ? -1 : 1;
            s.checkpoint_interval = (int)d;
        } else if (!strcmp(k, "checkpoints")) rc = boolean(v, k, &s.checkpoints, err, errlen) ? -1 : 1;
        else if (!strcmp(k, "ignore_eos")) rc = boolean(v, k, &s.ignore_eos, err, errlen) ? -1 : 1;
        else if (!strcmp(k, "speculative")) {
            if (cJSON_IsNull(v)) s.speculative = -1;
            else {
                rc = integer(v, "speculative (drafted tokens per step, 0 for none, or null for the mount's)", 0,
                             GEN_MAX_DRAFT, &d, err, errlen) ? -1 : 1;
                s.speculative = (int)d;
            }
        }
        else if (!strcmp(k, "seed")) {
            if (cJSON_IsNull(v)) s.seed = -1;
            else {
                rc = integer(v, "seed (or null for random)", 0, 9007199254740991.0, &d, err, errlen) ? -1 : 1;
                s.seed = (int64_t)d;
            }
        } else if (!strcmp(k, "stop")) {
            int n = cJSON_GetArraySize(v);
            if (!cJSON_IsArray(v) || n > GEN_MAX_STOP) {
                snprintf(err, errlen, "stop must be an array of at most %d strings", GEN_MAX_STOP);
                rc = -1;
                break;
            }
            for (int i = 0; i < s.n_stop; i++) free(s.stop[i]);
            s.n_stop = 0;
            for (cJSON *e = v->child; e; e = e->next) {
                if (!cJSON_IsString(e) || !e->valuestring[0]) {
                    snprintf(err, errlen, "stop must be an array of non-empty strings");
                    rc = -1;
                    break;
                }
                s.stop[s.n_stop++] = strdup(e->valuestring);
            }
        } else if (!strcmp(k, "thinking")) {
            if (cJSON_IsNull(v)) s.thinking = -1;
            else rc = boolean(v, "thinking (or null for the model's default)", &s.thinking, err, errlen) ? -1 : 1;
        } else if (!strcmp(k, "thinking_budget")) {
            if (cJSON_IsNull(v)) s.thinking_budget = -1;
            else {
                rc = integer(v, "thinking_budget (or null for none)", 0, 1 << 24, &d, err, errlen) ? -1 : 1;
                s.thinking_budget = (int)d;
            }
        } else if (!strcmp(k, "template")) {
            free(s.template_name);
            s.template_name = NULL;
            if (cJSON_IsNull(v)) continue;
            if (!cJSON_IsString(v) || !template_builtin_text(v->valuestring)) {
                char names[128] = "";
                for (int i = 0; template_builtin_name(i); i++) {
                    size_t at = strlen(names);
                    snprintf(names + at, sizeof names - at, "%s%s", i ? ", " : "", template_builtin_name(i));
                }
                snprintf(err, errlen, "template must be null (the model's own) or one of %s", names);
                rc = -1;
            } else
                s.template_name = strdup(v->valuestring);
        } else if (!strcmp(k, "chat_template")) {
            free(s.chat_template);
            s.chat_template = NULL;
            if (cJSON_IsNull(v)) continue;
            char cerr[256];
            if (!cJSON_IsString(v) || !v->valuestring[0]) {
                snprintf(err, errlen, "chat_template must be null (the model's own) or Jinja text");
                rc = -1;
            } else if (template_check(v->valuestring, strlen(v->valuestring), cerr, sizeof cerr)) {
                snprintf(err, errlen, "chat_template does not compile: %s", cerr);
                rc = -1;
            } else
                s.chat_template = strdup(v->valuestring);
        } else if (!strcmp(k, "grammar")) {
            free(s.grammar);
            s.grammar = NULL;
            if (cJSON_IsNull(v)) continue;
            if (!cJSON_IsString(v) || !v->valuestring[0]) {
                snprintf(err, errlen, "grammar must be null (none) or GBNF text");
                rc = -1;
            } else if (grammar_check(v->valuestring, "grammar", err, errlen) == 0)
                s.grammar = strdup(v->valuestring);
            else
                rc = -1;
        } else if (!strcmp(k, "response_format")) {
            free(s.response_format);
            free(s.format_gbnf);
            s.response_format = s.format_gbnf = NULL;
            if (cJSON_IsNull(v)) continue;
            if (response_format_grammar(v, &s.format_gbnf, err, errlen) != 0) rc = -1;
            else s.response_format = cJSON_PrintUnformatted(v);
        } else if (!strcmp(k, "tools")) {
            free(s.tools);
            s.tools = NULL;
            if (cJSON_IsNull(v)) continue;
            char *text = cJSON_PrintUnformatted(v);
            struct tc_tools *t = text ? tc_tools_parse(text, strlen(text), err, errlen) : NULL;
            if (!t) rc = -1, free(text);
            else if (!tc_tools_count(t)) free(text); /* [] offers nothing: none */
            else s.tools = text;
            tc_tools_free(t);
        } else if (!strcmp(k, "tool_choice")) {
            free(s.tool_choice);
            s.tool_choice = NULL;
            /* OpenAI's {"type": "function", "function": {"name": N}} is the name N */
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(v, "function");
            const char *name = cJSON_IsString(v) ? v->valuestring
                               : cJSON_IsObject(fn) ? cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fn, "name"))
                                                    : NULL;
            if (cJSON_IsNull(v) || (name && !strcmp(name, "auto"))) continue;
            if (!name || !*name) {
                snprintf(err, errlen, "tool_choice must be \"auto\", \"none\", \"required\", a function's name or "
                                      "{\"type\": \"function\", \"function\": {\"name\": ...}}");
                rc = -1;
            } else
                s.tool_choice = strdup(name);
        } else if (!strcmp(k, "parallel_tool_calls")) {
            rc = boolean(v, k, &s.parallel_tool_calls, err, errlen) ? -1 : 1;
        } else {
            snprintf(err, errlen,
                     "unknown setting '%.60s' (known: temperature, top_p, top_k, min_p, seed, max_tokens, stop, "
                     "checkpoint_interval, checkpoints, ignore_eos, speculative, thinking, thinking_budget, template, "
                     "chat_template, grammar, response_format, tools, tool_choice, parallel_tool_calls)",
                     k);
            rc = -1;
        }
    }
    cJSON_Delete(root);
    if (rc > 0 && s.grammar && s.response_format) {
        /* llama.cpp refuses both as well: which one the answer follows would be a guess */
        snprintf(err, errlen, "grammar and response_format cannot both be set: set the other to null");
        rc = -1;
    }
    if (rc < 0) {
        settings_free(&s);
        return -1;
    }
    *out = s;
    return 1;
}

char *settings_render(const conv_settings *s) {
    cJSON *o = cJSON_CreateObject();
    char num[32];
    /* %.6g keeps 0.7 as 0.7 instead of 0.69999999999999996 */
    snprintf(num, sizeof num, "%.6g", s->temperature);
    cJSON_AddRawToObject(o, "temperature", num);
    snprintf(num, sizeof num, "%.6g", s->top_p);
    cJSON_AddRawToObject(o, "top_p", num);
    cJSON_AddNumberToObject(o, "top_k", s->top_k);
    snprintf(num, sizeof num, "%.6g", s->min_p);
    cJSON_AddRawToObject(o, "min_p", num);
    if (s->seed < 0) cJSON_AddNullToObject(o, "seed");
    else {
        snprintf(num, sizeof num, "%lld", (long long)s->seed);
        cJSON_AddRawToObject(o, "seed", num);
    }
    cJSON_AddNumberToObject(o, "max_tokens", s->max_tokens);
    cJSON *stop = cJSON_AddArrayToObject(o, "stop");
    for (int i = 0; i < s->n_stop; i++) cJSON_AddItemToArray(stop, cJSON_CreateString(s->stop[i]));
    cJSON_AddNumberToObject(o, "checkpoint_interval", s->checkpoint_interval);
    cJSON_AddBoolToObject(o, "checkpoints", s->checkpoints);
    cJSON_AddBoolToObject(o, "ignore_eos", s->ignore_eos);
    if (s->speculative < 0) cJSON_AddNullToObject(o, "speculative");
    else cJSON_AddNumberToObject(o, "speculative", s->speculative);
    if (s->thinking < 0) cJSON_AddNullToObject(o, "thinking");
    else cJSON_AddBoolToObject(o, "thinking", s->thinking);
    if (s->thinking_budget < 0) cJSON_AddNullToObject(o, "thinking_budget");
    else cJSON_AddNumberToObject(o, "thinking_budget", s->thinking_budget);
    if (s->template_name) cJSON_AddStringToObject(o, "template", s->template_name);
    else cJSON_AddNullToObject(o, "template");
    if (s->chat_template) cJSON_AddStringToObject(o, "chat_template", s->chat_template);
    else cJSON_AddNullToObject(o, "chat_template");
    if (s->grammar) cJSON_AddStringToObject(o, "grammar", s->grammar);
    else cJSON_AddNullToObject(o, "grammar");
    cJSON *format = s->response_format ? cJSON_Parse(s->response_format) : NULL;
    if (format) cJSON_AddItemToObject(o, "response_format", format);
    else cJSON_AddNullToObject(o, "response_format");
    cJSON *tools = s->tools ? cJSON_Parse(s->tools) : NULL;
    if (tools) cJSON_AddItemToObject(o, "tools", tools);
    else cJSON_AddNullToObject(o, "tools");
    cJSON_AddStringToObject(o, "tool_choice", s->tool_choice ? s->tool_choice : "auto");
    cJSON_AddBoolToObject(o, "parallel_tool_calls", s->parallel_tool_calls);
    /* one key per line, two-space indent: what people expect to edit */
    size_t cap = 256, len = 0;
    char *out = malloc(cap);
    int ok = out != NULL;
    if (ok) len = (size_t)snprintf(out, cap, "{");
    for (cJSON *v = o->child; ok && v; v = v->next) {
        char *val = cJSON_PrintUnformatted(v);
        size_t need = len + strlen(v->string) + (val ? strlen(val) : 0) + 16;
        if (need > cap) {
            while (cap < need) cap *= 2;
            char *p = realloc(out, cap);
            if (!p) ok = 0;
            else out = p;
        }
        if (ok && val) len += (size_t)snprintf(out + len, cap - len, "%s\n  \"%s\": %s", v == o->child ? "" : ",",
                                               v->string, val);
        ok = ok && val;
        cJSON_free(val);
    }
    if (ok) snprintf(out + len, cap - len, "\n}\n");
    cJSON_Delete(o);
    if (!ok) {
        free(out);
        return NULL;
    }
    return out;
}

void settings_to_gen(const conv_settings *s, gen_settings *g) {
    gen_settings_defaults(g);
    g->temperature = (float)s->temperature;
    g->top_k = s->top_k;
    g->top_p = (float)s->top_p;
    g->min_p = (float)s->min_p;
    if (s->seed >= 0) g->seed = (uint64_t)s->seed;
    else if (getrandom(&g->seed, sizeof g->seed, 0) != sizeof g->seed) g->seed = (uint64_t)time(NULL);
    g->max_tokens = s->max_tokens;
    for (int i = 0; i < s->n_stop; i++) g->stop[i] = s->stop[i];
    g->n_stop = s->n_stop;
    g->checkpoint_interval = s->checkpoint_interval;
    g->template_name = s->template_name;
    g->chat_template = s->chat_template;
    g->checkpoints = s->checkpoints;
    g->ignore_eog = s->ignore_eos;
    g->speculative = s->speculative;
    g->enable_thinking = s->thinking != 0; /* null: the model's default, 1 as llama.cpp */
    g->thinking_budget = s->thinking_budget;
    g->grammar = s->grammar ? s->grammar : s->format_gbnf;
    g->response_format = s->format_gbnf ? s->response_format : NULL; /* {"type": "text"} asks for nothing */
    g->tools = s->tools;
    g->tool_choice = s->tool_choice;
    g->parallel_tool_calls = s->parallel_tool_calls;
}
