/* template.c - chat templates compiled once and rendered as apply_chat_template does
 * (template.h), through the Jinja interpreter (engine/jinja).
 *
 * The variables follow Hugging Face's apply_chat_template: messages (role, content, and
 * reasoning_content where a turn has one), add_generation_prompt, tools and documents as
 * None, the special tokens' texts as bos_token and eos_token, and enable_thinking, which
 * llama.cpp always passes (true unless told otherwise) and transformers passes when asked.
 * After the render, llama.cpp's one change: a leading BOS text is dropped when the
 * tokenizer adds BOS itself, a trailing EOS text when it adds EOS (common/chat.cpp,
 * common_chat_template_direct_apply). */
#include "engine/template/template.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/jinja/jinja.h"

struct chat_template {
    int refs;              /* atomic */
    jinja_template *jinja;
    char *text;            /* the source, NUL-terminated (it may hold NULs: len counts them) */
    size_t len;
    const char *name;      /* a built-in's name, else NULL */
    char *bos, *eos;       /* the tokenizer's BOS and EOS texts ("" when it has none) */
    int strip_bos, strip_eos;
    jinja_options opt;     /* the defaults, or a fixed clock (template_fix_clock) */
};

/* the text a special token stands for, malloc'd ("" for none) */
static char *token_text(const tokenizer *tok, int id) {
    char buf[256];
    size_t n = tok && id >= 0 ? tokenizer_token_bytes(tok, id, 1, buf, sizeof buf) : 0;
    if (n >= sizeof buf) n = 0; /* no special token is that long: not a marker a template writes */
    char *s = malloc(n + 1);
    if (s) memcpy(s, buf, n), s[n] = 0;
    return s;
}

static chat_template *compile(const char *text, size_t len, const char *name, const tokenizer *tok, char *err,
                              size_t errlen) {
    char *jerr = NULL;
    jinja_template *j = jinja_compile(text, len, &jerr);
    if (!j) {
        snprintf(err, errlen, "%s", jerr ? jerr : "out of memory");
        free(jerr);
        return NULL;
    }
    chat_template *t = calloc(1, sizeof *t);
    if (t) {
        t->refs = 1;
        t->jinja = j;
        t->text = malloc(len + 1);
        t->len = len;
        t->name = name;
        t->bos = token_text(tok, tok ? tokenizer_bos(tok) : -1);
        t->eos = token_text(tok, tok ? tokenizer_eos(tok) : -1);
        t->strip_bos = tok && tokenizer_add_bos(tok);
        t->strip_eos = tok && tokenizer_add_eos(tok);
    }
    if (!t || !t->text || !t->bos || !t->eos) {
        if (t) template_unref(t); /* frees j with it */
        else jinja_free(j);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    memcpy(t->text, text, len);
    t->text[len] = 0;
    return t;
}

chat_template *template_new(const char *text, size_t len, const tokenizer *tok, char *err, size_t errlen) {
    return compile(text ? text : "", text ? len : 0, NULL, tok, err, errlen);
}

chat_template *template_new_builtin(const char *name, const tokenizer *tok, char *err, size_t errlen) {
    const char *text = template_builtin_text(name);
    if (!text) {
        char names[128] = "";
        for (int i = 0; template_builtin_name(i); i++) {
            size_t k = strlen(names);
            snprintf(names + k, sizeof names - k, "%s%s", i ? ", " : "", template_builtin_name(i));
        }
        snprintf(err, errlen, "unknown template '%.40s' (built in: %s)", name ? name : "", names);
        return NULL;
    }
    for (int i = 0; template_builtin_name(i); i++) /* the name as a static string */
        if (!strcmp(template_builtin_name(i), name)) name = template_builtin_name(i);
    return compile(text, strlen(text), name, tok, err, errlen);
}

chat_template *template_from_gguf(const gguf_file *f, const tokenizer *tok, char *err, size_t errlen) {
    gguf_str s = {NULL, 0};
    if (gguf_get_str(f, "tokenizer.chat_template", &s) != 1 || s.len == 0)
        return template_new_builtin("chatml", tok, err, errlen);
    char name[16];
    if (s.len < sizeof name) { /* a bare built-in name instead of a template */
        gguf_str_copy(s, name, sizeof name);
        if (template_builtin_text(name)) return template_new_builtin(name, tok, err, errlen);
    }
    return template_new(s.s, (size_t)s.len, tok, err, errlen);
}

chat_template *template_ref(chat_template *t) {
    if (t) __atomic_add_fetch(&t->refs, 1, __ATOMIC_RELAXED);
    return t;
}

void template_unref(chat_template *t) {
    if (!t || __atomic_sub_fetch(&t->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
    jinja_free(t->jinja);
    free(t->text);
    free(t->bos);
    free(t->eos);
    free(t);
}

const char *template_text(const chat_template *t, size_t *len) {
    if (len) *len = t->len;
    return t->text;
}

const char *template_name(const chat_template *t) { return t->name; }

void template_fix_clock(chat_template *t, time_t now) {
    t->opt.fixed_time = 1;
    t->opt.now = now;
}

int template_uses(const chat_template *t, const char *variable) { return jinja_uses_variable(t->jinja, variable); }

int template_check(const char *text, size_t len, char *err, size_t errlen) {
    char *jerr = NULL;
    jinja_template *j = jinja_compile(text, len, &jerr);
    if (!j) snprintf(err, errlen, "%s", jerr ? jerr : "out of memory");
    free(jerr);
    jinja_free(j);
    return j ? 0 : -1;
}

/* ------------------------------------------------------------------ rendering */

static int known_role(const char *role) {
    return role && (!strcmp(role, "system") || !strcmp(role, "user") || !strcmp(role, "assistant") ||
                    !strcmp(role, "tool"));
}

/* A message's calls as the template reads them: the array parsed, and each function's
 * arguments a mapping (a JSON string parsed first, as llama.cpp's func_args_not_string
 * does). NULL with the reason in err. */
static cJSON *calls_for_template(const char *text, int msg, char *err, size_t errlen) {
    cJSON *calls = cJSON_Parse(text);
    if (!cJSON_IsArray(calls)) {
        snprintf(err, errlen, "message %d: tool_calls is not a JSON array", msg);
        cJSON_Delete(calls);
        return NULL;
    }
    int k = 0;
    for (cJSON *call = calls->child; call; call = call->next, k++) {
        cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
        cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsObject(fn) || !cJSON_IsString(name)) {
            snprintf(err, errlen, "message %d: tool call %d has no function.name", msg, k + 1);
            cJSON_Delete(calls);
            return NULL;
        }
        cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        if (cJSON_IsString(args)) {
            cJSON *parsed = cJSON_Parse(args->valuestring);
            if (!parsed) {
                snprintf(err, errlen, "message %d: tool call %d: arguments are not JSON", msg, k + 1);
                cJSON_Delete(calls);
                return NULL;
            }
            cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", parsed);
        }
    }
    return calls;
}

/* The variables apply_chat_template passes. Message strings are referenced, not copied:
 * they live as long as the render. NULL with the reason in err. */
static cJSON *variables(const chat_template *t, const chat_msg *msgs, int n, const char *tools_json, int gen,
                        int thinking, char *err, size_t errlen) {
    cJSON *v = cJSON_CreateObject(), *list = v ? cJSON_AddArrayToObject(v, "messages") : NULL;
    int ok = list != NULL, said = 0; /* said: err holds the reason */
    for (int i = 0; ok && i < n; i++) {
        cJSON *m = cJSON_CreateObject();
        if (m && !cJSON_AddItemToArray(list, m)) cJSON_Delete(m), m = NULL;
        ok = m && cJSON_AddItemToObject(m, "role", cJSON_CreateStringReference(msgs[i].role));
        if (ok && msgs[i].n_images > 0) { /* content parts: the images, then the text */
            cJSON *parts = cJSON_AddArrayToObject(m, "content"), *part;
            ok = parts != NULL;
            for (int k = 0; ok && k <= msgs[i].n_images; k++) {
                ok = (part = cJSON_CreateObject()) && cJSON_AddItemToArray(parts, part);
                if (ok && k < msgs[i].n_images) ok = cJSON_AddStringToObject(part, "type", "image") != NULL;
                else if (ok)
                    ok = cJSON_AddStringToObject(part, "type", "text") &&
                         cJSON_AddItemToObject(part, "text", cJSON_CreateStringReference(msgs[i].content ? msgs[i].content : ""));
            }
        } else {
            ok = ok && cJSON_AddItemToObject(m, "content", cJSON_CreateStringReference(msgs[i].content ? msgs[i].content : ""));
        }
        if (ok && msgs[i].reasoning_content && *msgs[i].reasoning_content)
            ok = cJSON_AddItemToObject(m, "reasoning_content", cJSON_CreateStringReference(msgs[i].reasoning_content));
        if (ok && msgs[i].tool_calls && *msgs[i].tool_calls) {
            cJSON *calls = calls_for_template(msgs[i].tool_calls, i + 1, err, errlen);
            said = !calls;
            ok = calls && cJSON_AddItemToObject(m, "tool_calls", calls);
            if (calls && !ok) cJSON_Delete(calls);
        }
        if (ok && msgs[i].tool_call_id)
            ok = cJSON_AddItemToObject(m, "tool_call_id", cJSON_CreateStringReference(msgs[i].tool_call_id));
    }
    cJSON *tools = NULL;
    if (ok && tools_json && *tools_json) {
        tools = cJSON_Parse(tools_json);
        if (!cJSON_IsArray(tools)) {
            snprintf(err, errlen, "tools is not a JSON array");
            ok = 0, said = 1;
        } else if (!cJSON_GetArraySize(tools)) { /* no functions: None, as for a request without any */
            cJSON_Delete(tools);
            tools = NULL;
        }
    }
    if (ok) {
        ok = tools ? cJSON_AddItemToObject(v, "tools", tools) : cJSON_AddNullToObject(v, "tools") != NULL;
        if (tools && !ok) cJSON_Delete(tools);
        tools = NULL;
    }
    cJSON_Delete(tools);
    ok = ok && cJSON_AddBoolToObject(v, "add_generation_prompt", gen) && cJSON_AddNullToObject(v, "documents") &&
         cJSON_AddItemToObject(v, "bos_token", cJSON_CreateStringReference(t->bos)) &&
         cJSON_AddItemToObject(v, "eos_token", cJSON_CreateStringReference(t->eos)) &&
         cJSON_AddBoolToObject(v, "enable_thinking", thinking);
    if (!ok) {
        if (!said) snprintf(err, errlen, "out of memory");
        cJSON_Delete(v);
        return NULL;
    }
    return v;
}

char *template_render_tools(const chat_template *t, const chat_msg *msgs, int n, const char *tools_json,
                            int add_generation_prompt, int enable_thinking, size_t *len, char *err, size_t errlen) {
    if (n < 0 || (n > 0 && !msgs)) {
        snprintf(err, errlen, "no messages");
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (!known_role(msgs[i].role)) {
            snprintf(err, errlen, "message %d has the role '%.40s' (system, user, assistant or tool)", i + 1,
                     msgs[i].role ? msgs[i].role : "(none)");
            return NULL;
        }
    cJSON *vars = variables(t, msgs, n, tools_json, add_generation_prompt != 0, enable_thinking != 0, err, errlen);
    if (!vars) return NULL;
    char *out = NULL, *jerr = NULL;
    size_t n_out = 0;
    int rc = jinja_render(t->jinja, vars, &t->opt, &out, &n_out, &jerr);
    cJSON_Delete(vars);
    if (rc != JINJA_OK) {
        snprintf(err, errlen, "chat template: %s", jerr ? jerr : "out of memory");
        free(jerr);
        return NULL;
    }
    size_t nb = strlen(t->bos), ne = strlen(t->eos), skip = 0;
    if (t->strip_bos && nb && n_out >= nb && !memcmp(out, t->bos, nb)) skip = nb;
    if (t->strip_eos && ne && n_out - skip >= ne && !memcmp(out + n_out - ne, t->eos, ne)) n_out -= ne;
    if (skip) memmove(out, out + skip, n_out - skip);
    n_out -= skip;
    out[n_out] = 0;
    if (len) *len = n_out;
    return out;
}

char *template_render(const chat_template *t, const chat_msg *msgs, int n, int add_generation_prompt,
                      int enable_thinking, size_t *len, char *err, size_t errlen) {
    return template_render_tools(t, msgs, n, NULL, add_generation_prompt, enable_thinking, len, err, errlen);
}

/* ------------------------------------------------------------------ the family hint */

static int has(const char *text, size_t len, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= len; i++)
        if (text[i] == needle[0] && !memcmp(text + i, needle, k)) return 1;
    return 0;
}

const char *template_resembles(const char *text, size_t len) {
    if (!text || !len) return NULL;
    if (has(text, len, "<|im_start|>")) {
        if (has(text, len, "<|im_sep|>") || has(text, len, "<end_of_utterance>")) return NULL; /* Phi-4, SmolVLM */
        if (has(text, len, "keep_past_thinking") || has(text, len, "preserve_thinking") ||
            has(text, len, "List of tools") || has(text, len, "<|tool_list_start|>") ||
            has(text, len, "<|tool_call_start|>"))
            return "lfm2";
        if (has(text, len, "<think>"))
            return has(text, len, "render_content") || has(text, len, "|trim") || has(text, len, "| trim") ? "qwen35"
                                                                                                            : "qwen3";
        return "chatml";
    }
    if (has(text, len, "<|start_header_id|>") && has(text, len, "<|end_header_id|>")) return "llama3";
    if (has(text, len, "<|start_of_role|>")) return "granite";
    if (has(text, len, "<SPECIAL_10>") || has(text, len, "<SPECIAL_11>")) return "nemotron";
    return NULL;
}
