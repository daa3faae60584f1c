#define _GNU_SOURCE /* memmem */
/* chat.c - the engine API of chat.h: requests in, text and reports out.
 *
 * A request is a small state machine that the worker (scheduler.c) advances one step
 * at a time, together with up to max_batch - 1 others:
 *
 *   QUEUED -> PREFILL (slices of prompt tokens, one per step)
 *          -> GENERATING (one token per step: sample, stream, feed it back)
 *          -> DONE / FAILED (on_done, then freed)
 *
 * Rendering and tokenizing happen in engine_submit, on the caller's thread (the
 * tokenizer and template are read-only), so that a prompt too long for the context is
 * refused at once. This file holds what a request looks like from outside: submit,
 * cancel, the report, the counters; reply.c the text stream (stop strings, the
 * reasoning, tool calls). */
#include "engine/runtime/chat.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/arch/arch.h"
#include "engine/model/mtp.h"
#include "engine/runtime/chat_impl.h"
#include "engine/base/threadpool.h"
#include "engine/base/hash.h"

#define TEXT_CAP 4096

_Static_assert(GEN_MAX_DRAFT == SPEC_MAX_DRAFT, "chat.h and speculative.h disagree on the longest draft");

double request_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void gen_settings_defaults(gen_settings *s) {
    memset(s, 0, sizeof *s);
    sampler_params p;
    sampler_defaults(&p);
    s->temperature = 0.0f; /* greedy: runs are reproducible */
    s->top_k = p.top_k;
    s->top_p = p.top_p;
    s->min_p = p.min_p;
    s->seed = p.seed;
    s->checkpoint_interval = 1024;
    s->checkpoints = 1;
    s->speculative = -1; /* the engine's */
    s->enable_thinking = 1;
    s->thinking_budget = -1;
    s->parallel_tool_calls = 1;
}

/* ---------------------------------------------------------------- rendering */

/* A template a request names (a built-in, or Jinja text of its own), from the engine's
 * cache of compiled ones or compiled now: one more reference, or NULL with err. */
static chat_template *cached_template(chat_engine *e, const char *name, const char *text, char *err, size_t errlen) {
    pthread_mutex_lock(&e->tmpl_lock);
    int slot = 0;
    for (int i = 0; i < (int)(sizeof e->tmpl_cache / sizeof *e->tmpl_cache); i++) {
        const char *key = e->tmpl_cache[i].key;
        if (key && (name ? key[0] == 1 && !strcmp(key + 1, name) : key[0] != 1 && !strcmp(key, text))) {
            e->tmpl_cache[i].used = ++e->tmpl_clock;
            chat_template *t = template_ref(e->tmpl_cache[i].t);
            pthread_mutex_unlock(&e->tmpl_lock);
            return t;
        }
        if (e->tmpl_cache[i].used < e->tmpl_cache[slot].used) slot = i; /* the least recently used */
    }
    pthread_mutex_unlock(&e->tmpl_lock);
    /* compiled outside the lock: another thread may compile the same text meanwhile (both
     * results are equal; the later one is kept) */
    char cerr[256];
    chat_template *t = name ? template_new_builtin(name, e->m->tok, cerr, sizeof cerr)
                            : template_new(text, strlen(text), e->m->tok, cerr, sizeof cerr);
    if (!t) {
        if (name) snprintf(err, errlen, "%s", cerr);
        else snprintf(err, errlen, "chat_template does not compile: %s", cerr);
        return NULL;
    }
    char *key = name ? malloc(strlen(name) + 2) : strdup(text);
    if (key && name) key[0] = 1, strcpy(key + 1, name);
    if (!key) return t; /* not kept: compiled again next time */
    pthread_mutex_lock(&e->tmpl_lock);
    free(e->tmpl_cache[slot].key);
    template_unref(e->tmpl_cache[slot].t);
    e->tmpl_cache[slot].key = key;
    e->tmpl_cache[slot].t = template_ref(t);
    e->tmpl_cache[slot].used = ++e->tmpl_clock;
    pthread_mutex_unlock(&e->tmpl_lock);
    return t;
}

/* The template a request renders with: its own Jinja text, else a built-in it names, else
 * the model's. A reference (template_unref), or NULL with err. */
static chat_template *request_template(chat_engine *e, const gen_settings *s, char *err, size_t errlen) {
    if (s->chat_template) return cached_template(e, NULL, s->chat_template, err, errlen);
    if (s->template_name && *s->template_name) return cached_template(e, s->template_name, NULL, err, errlen);
    if (!e->m->tmpl) snprintf(err, errlen, "the model's chat template does not compile: %s", e->m->tmpl_error);
    return template_ref(e->m->tmpl);
}

/* Renders messages with the request's template and the generation prompt, then
 * tokenizes. Returns the token count (tokens in *out) or -1 with err and errno (EINVAL,
 * ENOMEM). With used, the template (a reference), its switches and the prompt text go
 * there, for the boundary searches. */
static int render_tokens(chat_engine *e, const chat_msg *msgs, int n, const gen_settings *s,
                         const prompt_image *images, int n_images, int **out, char *err, size_t errlen,
                         pc_render *used) {
    __atomic_fetch_add(&e->renders, 1, __ATOMIC_RELAXED); /* stats: prompt_renders */
    chat_template *t = request_template(e, s, err, errlen);
    size_t len = 0;
    char *text = t ? template_render_tools(t, msgs, n, s->tools, 1, s->enable_thinking, &len, err, errlen) : NULL;
    if (!text) {
        template_unref(t);
        errno = EINVAL;
        return -1;
    }
    int placed = 0;
    int k = n_images ? prompt_tokenize(e->m->tok, text, len, images, n_images, out, &placed)
                     : tokenizer_encode(e->m->tok, text, len, 1, 1, out);
    if (k >= 0 && placed < n_images) { /* a template that drops image parts (ChatML) or places them
                                          where mtmd would not */
        snprintf(err, errlen, "the chat template placed %d of the conversation's %d images (it writes no %s)",
                 placed, n_images, IMAGE_PLACE);
        free(*out), *out = NULL;
        k = -1;
        errno = EINVAL;
    } else if (k == -2) {
        snprintf(err, errlen, "the prompt has more places for images (%s) than the conversation has images",
                 IMAGE_PLACE);
        k = -1;
        errno = EINVAL;
    } else if (k < 0) {
        snprintf(err, errlen, "out of memory while tokenizing");
        errno = ENOMEM;
    }
    if (used && k >= 0) {
        *used = (pc_render){.t = t, .tools = s->tools, .enable_thinking = s->enable_thinking != 0, .text = text,
                            .len = len, .ids = *out, .n_ids = k, .images = images, .n_images = n_images};
    } else {
        template_unref(t);
        free(text);
    }
    return k;
}

int engine_count_tokens(chat_engine *e, const chat_msg *msgs, int n, const gen_settings *s) {
    gen_settings defaults;
    if (!s) {
        gen_settings_defaults(&defaults);
        s = &defaults;
    }
    int *ids = NULL, n_images;
    char err[256];
    prompt_image *images;
    if (request_images_collect(e, msgs, n, &images, &n_images, err, sizeof err) != 0) return -1;
    int k = render_tokens(e, msgs, n, s, images, n_images, &ids, err, sizeof err, NULL);
    free(ids);
    request_images_free(images, n_images);
    return k;
}

int engine_check_render(chat_engine *e, const chat_msg *msgs, int n, const gen_settings *s, char *err, size_t errlen) {
    gen_settings defaults;
    if (!s) {
        gen_settings_defaults(&defaults);
        s = &defaults;
    }
    chat_template *t = request_template(e, s, err, errlen);
    size_t len = 0;
    char *text = t ? template_render(t, msgs, n, 1, s->enable_thinking, &len, err, errlen) : NULL;
    template_unref(t);
    if (!text) {
        errno = EINVAL;
        return -1;
    }
    free(text);
    return 0;
}

int engine_context(const chat_engine *e) { return e->n_ctx; }
int engine_draft(const chat_engine *e) { return e->draft; }

/* MemAvailable of /proc/meminfo in bytes; 0 when unknown. CHATFS_TEST_MEM_AVAILABLE
 * (bytes) stands in for it, so that tests can see a machine with little memory. */
static size_t available_memory(void) {
    const char *test = getenv("CHATFS_TEST_MEM_AVAILABLE");
    if (test && *test) return (size_t)strtoull(test, NULL, 10);
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (size_t)kb * 1024;
}

static size_t kv_bytes_per_token(const model *m) { return state_kv_bytes_per_token(m); }

/* The model's trained context, or less (a multiple of 256) when one conversation's KV
 * cache at full length must fit in 1/share of the memory available now (unknown: no
 * limit). */
static int context_within(const model *m, size_t share) {
    size_t kv = kv_bytes_per_token(m), avail = available_memory();
    long long n = m->n_ctx_train;
    if (kv && avail && (long long)(avail / share / kv) < n) n = (long long)(avail / share / kv) / 256 * 256;
    return (int)n;
}

int engine_default_context(const model *m) {
    /* one conversation's KV cache at full length may take a quarter of the memory that
     * is free now: the rest is for the other conversations of a batch, checkpoints and
     * the system */
    int n = context_within(m, 4);
    if (n < 256) n = m->n_ctx_train < 256 ? m->n_ctx_train : 256;
    return n;
}

int engine_largest_context(const model *m) { return context_within(m, 1); }

int engine_set_cache_types(model *m, const char *k, const char *v, char *err, size_t errlen) {
    const char *name[2] = {k ? k : ENGINE_KV_DEFAULT, v ? v : ENGINE_KV_DEFAULT};
    kv_type t[2];
    for (int i = 0; i < 2; i++)
        if (kv_type_parse(name[i], &t[i]) != 0) {
            snprintf(err, errlen, "unknown %s cache type \"%s\": the known ones are %s", i ? "V" : "K", name[i],
                     kv_type_list);
            return -1;
        }
    return model_set_kv_types(m, t[0], t[1], err, errlen);
}

static void human_bytes(double b, char *out, size_t len) {
    const double mib = 1024.0 * 1024.0;
    if (b < 1024.0 * mib) snprintf(out, len, "%.1f MiB", b / mib);
    else snprintf(out, len, "%.2f GiB", b / (1024.0 * mib));
}

const model *engine_model(const chat_engine *e) { return e->m; }

/* ---------------------------------------------------------------- thinking */

/* The markers reasoning models write around their reasoning, each one token of their
 * vocabulary. A model's pair is found in its tokenizer, never from its name. */
static const char *const think_pairs[][2] = {
    {"<think>", "</think>"}, /* Qwen3, Qwen3.5, Qwen3-Next, Nemotron-H (Nano v2), Nemotron-3, LFM2.5, DeepSeek-R1 */
    {"<seed:think>", "</seed:think>"},         /* Seed-OSS */
    {"[THINK]", "[/THINK]"},                   /* Magistral */
    {"<|START_THINKING|>", "<|END_THINKING|>"}, /* Command A Reasoning */
};

/* The vocabulary's first pair of reasoning markers: 1 with their ids, else 0 (-1 in both). */
static int find_think_markers(const tokenizer *tok, int *open, int *close) {
    *open = *close = -1;
    for (size_t i = 0; i < sizeof think_pairs / sizeof *think_pairs; i++) {
        int o = tokenizer_find(tok, think_pairs[i][0]), c = tokenizer_find(tok, think_pairs[i][1]);
        if (o >= 0 && c >= 0) {
            *open = o, *close = c;
            return 1;
        }
    }
    return 0;
}

/* 1 when token id's text is whitespace only (and not empty) */
static int token_is_space(const tokenizer *tok, int id) {
    char buf[64];
    size_t k = tokenizer_token_bytes(tok, id, 1, buf, sizeof buf);
    if (k == 0 || k > sizeof buf) return 0;
    for (size_t i = 0; i < k; i++)
        if (buf[i] != ' ' && buf[i] != '\n' && buf[i] != '\r' && buf[i] != '\t') return 0;
    return 1;
}

/* Whether generation starts inside a reasoning block: the prompt ends with the opening
 * marker and whitespace (Qwen3.5's generation prompt "<|im_start|>assistant\n<think>\n"),
 * not with a closed block (its "<think>\n\n</think>\n\n" when thinking is off). */
static int prompt_opens_reasoning(const chat_engine *e, const int *ids, int n) {
    if (e->think_open < 0) return 0;
    for (int i = n - 1; i >= 0; i--) {
        if (ids[i] == e->think_open) return 1;
        if (ids[i] == e->think_close || !token_is_space(e->m->tok, ids[i])) return 0;
    }
    return 0;
}

/* The tokens that end a reasoning block as template t writes it: t renders an assistant
 * turn with reasoning_content R and content A, and what lies between them is the end
 * (Qwen3.5: "\n</think>\n\n", Nemotron-3: "\n</think>\n"). When the template does not
 * show reasoning that way, the closing marker alone. Returns the count (tokens in *out,
 * malloc'd) or -1 when out of memory. */
static int reasoning_end_ids(const chat_engine *e, const chat_template *t, int enable_thinking, int **out) {
    static const char R[] = "chatfs-reasoning-5e1d", A[] = "chatfs-answer-5e1d";
    const tokenizer *tok = e->m->tok;
    char marker[64];
    size_t mlen = tokenizer_token_bytes(tok, e->think_close, 1, marker, sizeof marker - 1);
    if (mlen == 0 || mlen >= sizeof marker) mlen = 0;
    marker[mlen] = 0;
    const chat_msg m[2] = {{"user", "Hi", NULL}, {"assistant", A, R}};
    char err[256];
    size_t len = 0;
    char *text = t ? template_render(t, m, 2, 0, enable_thinking, &len, err, sizeof err) : NULL;
    const char *r = text ? strstr(text, R) : NULL;
    const char *a = r ? strstr(r + sizeof R - 1, A) : NULL;
    int k = 0;
    *out = NULL;
    if (a && mlen && memmem(r + sizeof R - 1, (size_t)(a - r) - (sizeof R - 1), marker, mlen)) {
        k = tokenizer_encode(tok, r + sizeof R - 1, (size_t)(a - r) - (sizeof R - 1), 0, 1, out);
        int has_close = 0;
        for (int i = 0; i < k; i++) has_close |= (*out)[i] == e->think_close;
        if (k > FEED_MAX || !has_close) { /* not a plain end: the marker alone */
            free(*out);
            *out = NULL;
            k = 0;
        }
    }
    free(text);
    if (k > 0) return k;
    if (k < 0) return -1;
    if (!(*out = malloc(sizeof **out))) return -1;
    (*out)[0] = e->think_close;
    return 1;
}

int chat_model_can_think(const model *m) {
    int open, close;
    if (find_think_markers(m->tok, &open, &close)) return 1;
    if (!m->tmpl) return 0;
    const chat_msg msg = {"user", "Hi", NULL};
    char err[256];
    size_t n_on = 0, n_off = 0;
    char *on = template_render(m->tmpl, &msg, 1, 1, 1, &n_on, err, sizeof err);
    char *off = template_render(m->tmpl, &msg, 1, 1, 0, &n_off, err, sizeof err);
    const int differ = on && off && (n_on != n_off || memcmp(on, off, n_on) != 0);
    free(on);
    free(off);
    return differ;
}

/* the keys llama.cpp takes its sampling defaults from (common.cpp, LLAMA_MODEL_META_KEY_SAMPLING_*) */
int chat_model_sampling(const model *m, gen_settings *s) {
    gen_settings_defaults(s);
    float v;
    int64_t k;
    int n = 0;
    if (gguf_get_f32(m->gguf, "general.sampling.temp", &v) == 1 && v >= 0 && v <= 100) s->temperature = v, n++;
    if (gguf_get_i64(m->gguf, "general.sampling.top_k", &k) == 1 && k >= 0 && k <= INT32_MAX) s->top_k = (int)k, n++;
    if (gguf_get_f32(m->gguf, "general.sampling.top_p", &v) == 1 && v > 0 && v <= 1) s->top_p = v, n++;
    if (gguf_get_f32(m->gguf, "general.sampling.min_p", &v) == 1 && v >= 0 && v <= 1) s->min_p = v, n++;
    return n;
}

void engine_settings_defaults(const chat_engine *e, gen_settings *s) { *s = e->defaults; }

int engine_can_think(const chat_engine *e) { return e->can_think; }

/* ---------------------------------------------------------------- requests */

void request_free(request *r) {
    if (!r) return;
    free(r->prompt);
    request_images_free(r->images, r->n_images);
    free(r->spans);
    for (int i = 0; r->embd && i < r->n_images; i++) free(r->embd[i]);
    free(r->embd);
    template_unref(r->tmpl.t);
    free((char *)r->tmpl.text);
    free(r->strings);
    free(r->held);
    state_free(r->state);
    if (r->spec) { /* not handed back to the engine's spares */
        spec_free(r->spec);
        free(r->spec);
    }
    free(r->logits);
    grammar_matcher_free(r->gm);
    for (int i = 0; i < SPEC_MAX_DRAFT; i++) grammar_matcher_free(r->spec_gm[i]);
    grammar_free(r->gr);
    free(r->masked);
    tc_tools_free(r->tools);
    tc_stream_free(&r->tcs);
    strbuf_free(&r->rpend);
    sampler_free(&r->smp);
    if (r->msgs)
        for (int i = 0; i < r->n_msgs; i++) {
            free((char *)r->msgs[i].content), free((char *)r->msgs[i].reasoning_content);
            free((char *)r->msgs[i].tool_calls), free((char *)r->msgs[i].tool_call_id);
        }
    free(r->msgs);
    free(r->h);
    free(r->marks);
    free(r->gen);
    strbuf_free(&r->reply);
    strbuf_free(&r->reasoning);
    free(r->close_ids);
    free(r);
}

/* A deep copy of the conversation (roles are one of four literals after rendering
 * succeeded, so they are mapped, not copied). */
static int copy_msgs(request *r, const chat_msg *msgs, int n) {
    r->msgs = calloc((size_t)n + 1, sizeof *r->msgs);
    if (!r->msgs) return -1;
    r->n_msgs = n;
    for (int i = 0; i < n; i++) {
        const char *role = msgs[i].role;
        r->msgs[i].role = !strcmp(role, "system") ? "system"
                          : !strcmp(role, "user") ? "user"
                          : !strcmp(role, "tool") ? "tool"
                                                  : "assistant";
        r->msgs[i].content = strdup(msgs[i].content ? msgs[i].content : "");
        if (!r->msgs[i].content) return -1;
        if (msgs[i].reasoning_content && !(r->msgs[i].reasoning_content = strdup(msgs[i].reasoning_content)))
            return -1;
        if (msgs[i].tool_calls && !(r->msgs[i].tool_calls = strdup(msgs[i].tool_calls))) return -1;
        if (msgs[i].tool_call_id && !(r->msgs[i].tool_call_id = strdup(msgs[i].tool_call_id))) return -1;
        r->msgs[i].n_images = msgs[i].images ? msgs[i].n_images : 0; /* the count renders; r->images has the files */
    }
    return 0;
}

/* Copies the settings' strings into one block owned by the request (the template is
 * resolved at the submit: r->tmpl). */
static int copy_settings(request *r, const gen_settings *s) {
    size_t need = 0;
    for (int i = 0; i < s->n_stop; i++) need += strlen(s->stop[i]) + 1;
    if (s->session) need += strlen(s->session) + 1;
    if (s->tools) need += strlen(s->tools) + 1;
    r->s = *s;
    r->s.template_name = r->s.chat_template = r->s.grammar = NULL; /* resolved at the submit */
    r->s.tool_choice = NULL;
    r->s.tools = NULL;
    r->strings = malloc(need + 1);
    if (!r->strings) return -1;
    char *p = r->strings;
    for (int i = 0; i < s->n_stop; i++) {
        r->s.stop[i] = strcpy(p, s->stop[i]);
        p += strlen(p) + 1;
        if ((int)strlen(s->stop[i]) > r->max_stop) r->max_stop = (int)strlen(s->stop[i]);
    }
    if (s->session) r->s.session = strcpy(p, s->session), p += strlen(p) + 1;
    if (s->tools) r->s.tools = strcpy(p, s->tools); /* the boundary searches render them (r->tmpl) */
    return 0;
}

/* The grammar of a request: compiled, a matcher at its start, the engine's vocabulary trie
 * (made by the first request that needs it). 0, or -1 with err (errno EINVAL or ENOMEM). */
static int request_grammar(chat_engine *e, request *r, const char *text, char *err, size_t errlen) {
    if (!(r->gr = grammar_compile(text, strlen(text), err, errlen))) {
        errno = EINVAL;
        return -1;
    }
    pthread_mutex_lock(&e->tmpl_lock);
    if (!e->gvocab) e->gvocab = grammar_vocab_from_tokenizer(e->m->tok);
    const int have = e->gvocab != NULL;
    pthread_mutex_unlock(&e->tmpl_lock);
    r->gm = grammar_matcher_new(r->gr);
    r->masked = malloc(sizeof *r->masked * (size_t)e->m->n_vocab);
    if (!have || !r->gm || !r->masked) {
        snprintf(err, errlen, "out of memory");
        errno = ENOMEM;
        return -1;
    }
    return 0;
}

/* The tools of a request, checked and compiled before anything renders them (their own
 * reasons: "tools[1]: function has no name"). 0, or -1 with err (errno EINVAL). */
static int request_tools_parse(request *r, const gen_settings *s, char *err, size_t errlen) {
    if (!s->tools || !*s->tools) return 0;
    if (!(r->tools = tc_tools_parse(s->tools, strlen(s->tools), err, errlen))) {
        errno = EINVAL;
        return -1;
    }
    return 0;
}

/* Once the prompt is rendered: the answer's reader in the format of the template's family
 * (tc_detect), and for a required call the grammar of the offered calls in *forced
 * (malloc'd). 0, or -1 with err (errno EINVAL). */
static int request_tools(request *r, const gen_settings *s, char **forced, char *err, size_t errlen) {
    *forced = NULL;
    const char *choice = s->tool_choice && *s->tool_choice ? s->tool_choice : "auto";
    const int required = strcmp(choice, "auto") && strcmp(choice, "none");
    if (required && !tc_tools_count(r->tools)) {
        snprintf(err, errlen, "tool_choice '%.80s' needs tools to call", choice);
        errno = EINVAL;
        return -1;
    }
    if (!tc_tools_count(r->tools) || !strcmp(choice, "none")) { /* offered (rendered) at most: all text */
        tc_tools_free(r->tools);
        r->tools = NULL;
        return 0;
    }
    size_t len = 0;
    const char *src = template_text(r->tmpl.t, &len);
    const enum tc_family f = tc_detect(src, len);
    if (required) {
        if (s->grammar) {
            snprintf(err, errlen, "a grammar and tool_choice '%.80s' exclude each other", choice);
            errno = EINVAL;
            return -1;
        }
        *forced = tc_call_grammar(f, s->tools, strlen(s->tools), strcmp(choice, "required") ? choice : NULL,
                                  s->parallel_tool_calls != 0, err, errlen);
        if (!*forced) {
            errno = EINVAL;
            return -1;
        }
    }
    if (f == TC_NONE) { /* the template writes no calls: the answer is all text */
        tc_tools_free(r->tools);
        r->tools = NULL;
        return 0;
    }
    tc_stream_init(&r->tcs, f, r->tools);
    /* a call inside the reasoning ends it (llama.cpp's qwen-xml reading) - unless a grammar
     * follows the answer, which must see the answer from its first token */
    r->call_ends_reasoning = f == TC_QWEN_XML && !*forced && !s->grammar;
    return 0;
}

/* engine_submit's refusals: 0, with errno saying which kind */
/* A checkpoint after each image's rows (CK_INTERVAL: the conversation moving on retires
 * them with the prompt's own): an edit of the text after an image, or another question
 * in its place, restores the image instead of encoding and computing it again. */
static int mark_image_ends(request *r) {
    pc_mark *mk = realloc(r->marks, sizeof *mk * (size_t)(r->n_marks + r->n_spans));
    if (!mk) return -1;
    r->marks = mk;
    for (int i = 0; i < r->n_spans; i++) {
        const int at = r->spans[i].end;
        int j = 0;
        while (j < r->n_marks && mk[j].pos < at) j++;
        if (j < r->n_marks && mk[j].pos == at) continue; /* one mark a position */
        memmove(mk + j + 1, mk + j, sizeof *mk * (size_t)(r->n_marks - j));
        mk[j] = (pc_mark){at, CK_INTERVAL};
        r->n_marks++;
    }
    return 0;
}

static uint64_t refuse(int why) {
    errno = why;
    return 0;
}

uint64_t engine_submit(chat_engine *e, const chat_msg *msgs, int n, const gen_settings *s, const gen_callbacks *cb,
                       char *err, size_t errlen) {
    gen_settings defaults;
    if (!s) {
        gen_settings_defaults(&defaults);
        s = &defaults;
    }
    if (s->n_stop < 0 || s->n_stop > GEN_MAX_STOP || s->max_tokens < 0 || s->temperature < 0 ||
        s->speculative < -1 || s->speculative > SPEC_MAX_DRAFT || s->thinking_budget < -1) {
        snprintf(err, errlen, "invalid generation settings");
        return refuse(EINVAL);
    }
    for (int i = 0; i < s->n_stop; i++)
        if (!s->stop[i] || !*s->stop[i] || strlen(s->stop[i]) > 256) {
            snprintf(err, errlen, "stop strings must be 1 to 256 bytes");
            return refuse(EINVAL);
        }
    request *r = calloc(1, sizeof *r);
    if (!r || copy_settings(r, s) != 0) {
        request_free(r);
        snprintf(err, errlen, "out of memory");
        return refuse(ENOMEM);
    }
    if (request_tools_parse(r, s, err, errlen) != 0) {
        request_free(r);
        return refuse(EINVAL);
    }
    /* the one rendering and tokenization of this message (the filesystem counts only
     * when a message comes near the context, to refuse it at the write) */
    if (request_images_collect(e, msgs, n, &r->images, &r->n_images, err, errlen) != 0) {
        int why = errno;
        request_free(r);
        return refuse(why);
    }
    r->n_prompt = render_tokens(e, msgs, n, s, r->images, r->n_images, &r->prompt, err, errlen, &r->tmpl);
    if (r->n_prompt < 0 || request_images_locate(r) != 0) {
        int why = errno;
        request_free(r);
        return refuse(why);
    }
    r->tmpl.tools = r->s.tools; /* the request's own copy: the boundary searches render after the caller's is gone */
    if (r->n_prompt == 0 || r->n_prompt >= e->n_ctx) {
        snprintf(err, errlen, "the prompt has %d tokens; the context holds %d", r->n_prompt, e->n_ctx);
        int why = r->n_prompt ? EFBIG : EINVAL;
        request_free(r);
        return refuse(why);
    }
    char *forced = NULL; /* the grammar of a required call */
    if (request_tools(r, s, &forced, err, errlen) != 0) {
        int why = errno;
        request_free(r);
        return refuse(why);
    }
    const char *grammar_text = forced ? forced : s->grammar;
    if (grammar_text && request_grammar(e, r, grammar_text, err, errlen) != 0) {
        int why = errno;
        free(forced);
        request_free(r);
        return refuse(why);
    }
    free(forced);
    sampler_params sp = {s->temperature, s->top_k, s->top_p, s->min_p, s->seed};
    r->held = malloc(TEXT_CAP + (size_t)r->max_stop + 64);
    if (!r->held || sampler_init(&r->smp, &sp, e->m->n_vocab) != 0) {
        request_free(r);
        snprintf(err, errlen, "out of memory");
        return refuse(ENOMEM);
    }
    if (s->checkpoints && e->pc) { /* placement: done here, on the caller's thread */
        r->h = malloc(sizeof *r->h * ((size_t)r->n_prompt + 1));
        r->n_marks = pc_plan(e->m, &r->tmpl, msgs, n, s->checkpoint_interval, &r->marks);
        if (!r->h || r->n_marks < 0 || copy_msgs(r, msgs, n) != 0) {
            request_free(r);
            snprintf(err, errlen, "out of memory");
            return refuse(ENOMEM);
        }
        token_chain_all(pc_seed(e->pc), r->prompt, r->n_prompt, r->h);
        if (r->n_spans && mark_image_ends(r) != 0) {
            request_free(r);
            snprintf(err, errlen, "out of memory");
            return refuse(ENOMEM);
        }
    }
    /* reasoning: the reply starts inside a block the prompt opened, may open one, or has none */
    r->think = prompt_opens_reasoning(e, r->prompt, r->n_prompt) ? THINK_IN
               : e->think_open >= 0                              ? THINK_MAY_OPEN
                                                                 : THINK_OVER;
    r->strip_reasoning = 1;
    if (s->thinking_budget >= 0 && e->think_close >= 0 &&
        (r->n_close_ids = reasoning_end_ids(e, r->tmpl.t, s->enable_thinking, &r->close_ids)) < 0) {
        request_free(r);
        snprintf(err, errlen, "out of memory");
        return refuse(ENOMEM);
    }
    detok_init(&r->ds, 0);
    if (cb) r->cb = *cb;
    r->r.phase = GEN_QUEUED;
    r->r.prompt_tokens = r->n_prompt;
    r->r.images = r->n_images;
    r->r.source = "none";
    snprintf(r->r.miss_reason, sizeof r->r.miss_reason, "%s", s->checkpoints ? "none stored" : "disabled");
    r->t_submit = request_now_ms();

    pthread_mutex_lock(&e->lock);
    if (e->stopping) {
        pthread_mutex_unlock(&e->lock);
        request_free(r);
        snprintf(err, errlen, "the engine is shutting down");
        return refuse(ESHUTDOWN);
    }
    r->id = ++e->next_id;
    if (e->queue_tail)
        e->queue_tail->next = r;
    else
        e->queue = r;
    e->queue_tail = r;
    e->stats.requests++;
    e->stats.images += (uint64_t)r->n_images;
    uint64_t id = r->id;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
    return id;
}

void engine_cancel(chat_engine *e, uint64_t id) {
    pthread_mutex_lock(&e->lock);
    for (int i = 0; i < e->n_act; i++)
        if (e->act[i]->id == id) e->act[i]->cancelled = 1;
    for (request *r = e->queue; r; r = r->next)
        if (r->id == id) r->cancelled = 1;
    pthread_cond_signal(&e->wake); /* a queued request ends at once, not when a slot frees */
    pthread_mutex_unlock(&e->lock);
}

/* ---------------------------------------------------------------- the caller's view */

void request_progress(request *r) {
    if (r->cb.on_progress) r->cb.on_progress(r->cb.ud, &r->r);
}

void request_finish(chat_engine *e, request *r, int how, const char *error) {
    request_flush_text(r);
    r->t_done = request_now_ms();
    r->r.finish = how;
    r->r.phase = error ? GEN_FAILED : GEN_DONE;
    r->r.grammar_incomplete = r->gm && !error && how != FINISH_EOG && how != FINISH_CANCELLED &&
                              (r->think == THINK_IN || !grammar_matcher_can_end(r->gm));
    double decode_ms = r->t_first > 0 ? r->t_done - r->t_first : 0;
    if (r->r.generated_tokens > 1 && decode_ms > 0)
        r->r.decode_tokens_per_s = (r->r.generated_tokens - 1) / (decode_ms / 1e3);
    pthread_mutex_lock(&e->lock);
    if (how == FINISH_CANCELLED) e->stats.cancelled++;
    else if (error) e->stats.failed++;
    else e->stats.completed++;
    e->stats.generated_tokens += (uint64_t)r->r.generated_tokens;
    e->stats.computed_tokens += (uint64_t)r->r.computed_tokens;
    e->stats.prompt_tokens += (uint64_t)r->r.prompt_tokens;
    e->stats.drafted += (uint64_t)r->r.drafted_tokens;
    e->stats.accepted += (uint64_t)r->r.accepted_tokens;
    pthread_mutex_unlock(&e->lock);
    if (r->cb.on_done) r->cb.on_done(r->cb.ud, &r->r, error);
}

/* ---------------------------------------------------------------- open / close */

/* Frees what engine_open made (any part may be missing). */
static void engine_free(chat_engine *e) {
    pc_close(e->pc); /* writes what is still only in RAM */
    grammar_vocab_free(e->gvocab);
    for (size_t i = 0; i < sizeof e->tmpl_cache / sizeof *e->tmpl_cache; i++) {
        free(e->tmpl_cache[i].key);
        template_unref(e->tmpl_cache[i].t);
    }
    pthread_mutex_destroy(&e->tmpl_lock);
    arena_free(&e->arena);
    free(e->act);
    free(e->rows);
    free(e->row_of);
    free(e->row_ok);
    for (int i = 0; e->capture && i < e->max_batch; i++) free(e->capture[i]);
    free(e->capture);
    for (int i = 0; i < e->n_spec_spare; i++) {
        spec_free(e->spec_spare[i]);
        free(e->spec_spare[i]);
    }
    free(e->spec_spare);
    for (size_t i = 0; i < sizeof e->encoded / sizeof *e->encoded; i++) free(e->encoded[i].rows);
    for (int i = 0; e->row_pos && i < e->max_batch; i++) free(e->row_pos[i]);
    free(e->row_pos);
    projector_free(e->proj);
    model_free(e->m);
    free(e->model_path);
    free(e);
}

/* The vision projector of cfg->mmproj_path, for this model's embeddings. */
static int open_projector(chat_engine *e, const engine_config *cfg, char *err, size_t errlen) {
    char why[400];
    if (cfg->draft > 0) {
        snprintf(err, errlen, "speculative decoding (--draft) does not run with a vision projector: an image's rows "
                              "have no tokens for the MTP head");
        return -1;
    }
    gguf_file *f = gguf_open(cfg->mmproj_path, why, sizeof why);
    e->proj = f ? projector_load(f, why, sizeof why) : NULL;
    if (!e->proj) {
        snprintf(err, errlen, "%s: %s", cfg->mmproj_path, why);
        return -1;
    }
    if (e->proj->n_embd_out != e->m->n_embd) {
        snprintf(err, errlen, "%s gives embeddings of width %d, and this model's are %d: it is another model's projector",
                 cfg->mmproj_path, e->proj->n_embd_out, e->m->n_embd);
        return -1;
    }
    e->proj_fp = gguf_fingerprint(e->proj->file);
    return 0;
}

chat_engine *engine_open(const engine_config *cfg, char *err, size_t errlen) {
    if (!cfg || !cfg->model_path) {
        snprintf(err, errlen, "no model given");
        return NULL;
    }
    chat_engine *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    e->cfg = *cfg;
    e->model_path = strdup(cfg->model_path);
    pthread_mutex_init(&e->tmpl_lock, NULL);
    e->m = model_load(cfg->model_path, err, errlen);
    if (!e->m) {
        engine_free(e);
        return NULL;
    }
    if (cfg->mmproj_path && open_projector(e, cfg, err, errlen) != 0) {
        engine_free(e);
        return NULL;
    }
    /* the MTP head's share of the sequence state: before any state or checkpoint exists;
     * with a projector off by default (its catch-up embeds tokens, an image's rows have none) */
    const int draft_default = e->proj ? 0 : -1;
    e->draft = spec_configure(e->m, cfg->draft == 0 ? draft_default : cfg->draft < 0 ? 0 : cfg->draft, err, errlen);
    if (e->draft < 0) {
        engine_free(e);
        return NULL;
    }
    mtp_set_draft_vocab(e->m, cfg->draft_vocab);
    if (engine_set_cache_types(e->m, cfg->cache_type_k, cfg->cache_type_v, err, errlen) != 0) {
        engine_free(e);
        return NULL;
    }
    for (int id = 0; id < e->m->n_vocab && e->n_eog < (int)(sizeof e->eog / sizeof *e->eog); id++)
        if (tokenizer_is_eog(e->m->tok, id)) e->eog[e->n_eog++] = id;
    find_think_markers(e->m->tok, &e->think_open, &e->think_close);
    e->can_think = chat_model_can_think(e->m);
    chat_model_sampling(e->m, &e->defaults);
    e->n_ctx = cfg->n_ctx > 0 ? cfg->n_ctx : engine_default_context(e->m);
    if (e->n_ctx > e->m->n_ctx_train) e->n_ctx = e->m->n_ctx_train;
    int fits = engine_largest_context(e->m);
    if (cfg->n_ctx > 0 && e->n_ctx > fits) { /* it would fail, or swap, in the middle of a conversation */
        char need[32], have[32];
        human_bytes((double)kv_bytes_per_token(e->m) * e->n_ctx, need, sizeof need);
        human_bytes((double)available_memory(), have, sizeof have);
        snprintf(err, errlen,
                 "-c %d: one conversation's KV cache at that length takes %s, more than the %s of memory "
                 "available; the largest context that fits is %d",
                 e->n_ctx, need, have, fits);
        engine_free(e);
        return NULL;
    }
    e->chunk = cfg->prefill_chunk > 0 ? cfg->prefill_chunk : DEFAULT_CHUNK;
    model_usage u;
    model_usage_of(e->m, 1, &u);
    e->cost_token = (double)u.params_active;
    for (int i = 0; i < e->m->n_layer; i++)
        if (e->m->blocks[i].mixer == MIX_ATTN)
            e->cost_position += 2.0 * e->m->blocks[i].attn.n_head * e->m->blocks[i].attn.head_dim;
    e->max_batch = cfg->max_batch > 0 ? cfg->max_batch : DEFAULT_BATCH;
    e->act = calloc((size_t)e->max_batch, sizeof *e->act);
    e->rows = calloc((size_t)e->max_batch, sizeof *e->rows);
    e->row_of = calloc((size_t)e->max_batch, sizeof *e->row_of);
    e->row_ok = calloc((size_t)e->max_batch, sizeof *e->row_ok);
    e->capture = calloc((size_t)e->max_batch, sizeof *e->capture);
    e->row_pos = calloc((size_t)e->max_batch, sizeof *e->row_pos);
    e->spec_spare = calloc((size_t)e->max_batch, sizeof *e->spec_spare);
    if (!e->act || !e->rows || !e->row_of || !e->row_ok || !e->capture || !e->spec_spare || !e->row_pos) {
        snprintf(err, errlen, "out of memory");
        engine_free(e);
        return NULL;
    }
    pool_set_threads(cfg->threads);
    /* the first request's state: room for a long system prompt, faulted in now */
    state_prepare_spare(e->m, e->n_ctx, SPARE_PREPARED_TOKENS);
    char cerr[512] = "";
    e->pc = pc_open(e->m, cfg->checkpoints, cerr, sizeof cerr);
    if (!e->pc) {
        snprintf(err, errlen, "%s", cerr[0] ? cerr : "cannot open the checkpoint store");
        engine_free(e);
        return NULL;
    }
    if (cerr[0]) fprintf(stderr, "chatfs: %s\n", cerr);
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->wake, NULL);
    if (pthread_create(&e->worker, NULL, engine_worker, e) != 0) {
        snprintf(err, errlen, "cannot start the engine thread");
        pthread_mutex_destroy(&e->lock);
        pthread_cond_destroy(&e->wake);
        engine_free(e);
        return NULL;
    }
    return e;
}

void engine_close(chat_engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->lock);
    e->stopping = 1; /* the worker cancels every request, queued or running, and returns */
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
    pthread_join(e->worker, NULL);
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->wake);
    engine_free(e);
}

void engine_forget_session(chat_engine *e, const char *session) { pc_forget_session(e->pc, session); }

int engine_session_usage(chat_engine *e, const char *session, ckpt_usage *out) {
    return pc_session_usage(e->pc, session, out);
}

char *engine_stats_json(chat_engine *e) {
    char *s = malloc(2304);
    if (!s) return NULL;
    /* what runs, for people: the file and the architecture (the path may need escapes) */
    cJSON *file = cJSON_CreateString(e->model_path ? e->model_path : "");
    char *file_json = file ? cJSON_PrintUnformatted(file) : NULL;
    cJSON_Delete(file);
    pthread_mutex_lock(&e->lock);
    /* busy: requests waiting or running, including a finished one's checkpoint job */
    int queued = 0;
    for (request *r = e->queue; r; r = r->next) queued++;
    snprintf(s, 2304,
             "{\"model\":{\"file\":%s,\"architecture\":\"%s\",\"parameters\":%llu,\"context\":%d},"
             "\"requests\":%llu,\"completed\":%llu,\"cancelled\":%llu,\"failed\":%llu,"
             "\"prompt_tokens\":%llu,\"computed_tokens\":%llu,\"generated_tokens\":%llu,"
             "\"queued\":%d,\"active\":%d,\"max_batch\":%d,\"prefill_chunk\":%d,"
             "\"steps\":%llu,\"decode_rows\":%llu,\"prefill_rows\":%llu,\"retried_steps\":%llu,"
             "\"max_active\":%llu,\"single_flight_requests\":%llu,\"single_flight_tokens\":%llu,"
             "\"post_jobs\":%llu,\"post_tokens\":%llu,\"prompt_renders\":%llu,\"draft\":%d,"
             "\"speculative_steps\":%llu,\"drafted_tokens\":%llu,\"accepted_tokens\":%llu,"
             "\"vision\":%s,\"images\":%llu,\"images_encoded\":%llu}",
             file_json && strlen(file_json) < 1000 ? file_json : "\"\"", e->m->arch, (unsigned long long)e->m->n_params, e->n_ctx,
             (unsigned long long)e->stats.requests, (unsigned long long)e->stats.completed,
             (unsigned long long)e->stats.cancelled, (unsigned long long)e->stats.failed,
             (unsigned long long)e->stats.prompt_tokens, (unsigned long long)e->stats.computed_tokens,
             (unsigned long long)e->stats.generated_tokens, queued, e->n_act, e->max_batch, e->chunk,
             (unsigned long long)e->stats.steps, (unsigned long long)e->stats.decode_rows,
             (unsigned long long)e->stats.prefill_rows, (unsigned long long)e->stats.retried_steps,
             (unsigned long long)e->stats.max_active, (unsigned long long)e->stats.flight_requests,
             (unsigned long long)e->stats.flight_tokens, (unsigned long long)e->stats.post_jobs,
             (unsigned long long)e->stats.post_tokens,
             (unsigned long long)__atomic_load_n(&e->renders, __ATOMIC_RELAXED), e->draft,
             (unsigned long long)e->stats.spec_steps, (unsigned long long)e->stats.drafted,
             (unsigned long long)e->stats.accepted, e->proj ? "true" : "false",
             (unsigned long long)e->stats.images, (unsigned long long)e->stats.images_encoded);
    pthread_mutex_unlock(&e->lock);
    cJSON_free(file_json);
    /* then the checkpoint counters, as members of the same object */
    char *c = pc_stats_json(e->pc);
    size_t ls = strlen(s), lc = c ? strlen(c) : 0;
    char *all = c && lc > 2 ? malloc(ls + lc + 2) : NULL;
    if (all) {
        memcpy(all, s, ls - 1); /* without '}' */
        all[ls - 1] = ',';
        memcpy(all + ls, c + 1, lc); /* without '{', with the NUL */
        free(s);
        s = all;
    }
    free(c);
    return s;
}

/* ---------------------------------------------------------------- blocking run */

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t done_cv;
    int done;
    gen_report report;
    char error[256];
    void (*on_text)(void *, const char *, size_t);
    void *ud;
} run_wait;

static void run_text(void *ud, const char *t, size_t n) {
    run_wait *w = ud;
    if (w->on_text) w->on_text(w->ud, t, n);
}

static void run_done(void *ud, const gen_report *r, const char *error) {
    run_wait *w = ud;
    pthread_mutex_lock(&w->lock);
    w->report = *r;
    if (error) snprintf(w->error, sizeof w->error, "%s", error);
    w->done = 1;
    pthread_cond_signal(&w->done_cv);
    pthread_mutex_unlock(&w->lock);
}

int engine_run(chat_engine *e, const chat_msg *msgs, int n, const gen_settings *s,
               void (*on_text)(void *ud, const char *text, size_t len), void *ud, gen_report *out, char *err,
               size_t errlen) {
    run_wait w = {.on_text = on_text, .ud = ud};
    pthread_mutex_init(&w.lock, NULL);
    pthread_cond_init(&w.done_cv, NULL);
    gen_callbacks cb = {.on_text = run_text, .on_done = run_done, .ud = &w};
    int rc = -1;
    if (engine_submit(e, msgs, n, s, &cb, err, errlen)) {
        pthread_mutex_lock(&w.lock);
        while (!w.done) pthread_cond_wait(&w.done_cv, &w.lock);
        pthread_mutex_unlock(&w.lock);
        if (out) *out = w.report;
        if (w.error[0]) snprintf(err, errlen, "%s", w.error);
        else rc = 0;
    }
    pthread_cond_destroy(&w.done_cv);
    pthread_mutex_destroy(&w.lock);
    return rc;
}
