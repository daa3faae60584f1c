/* template.c - chat template families, recognised from the Jinja text and rendered by
 * hand so the result is byte for byte what llama.cpp renders (docs/engine-math.md §9).
 *
 * Each family's renderer follows the Jinja template it stands for; where a family has
 * published variants that render differently, template_detect records which one it saw
 * in chat_template.variant:
 *   TMPL_CHATML    0: the messages as given; 1: a default system turn "You are a helpful
 *                     assistant." when the first message is not a system one (Qwen1.5 /
 *                     Qwen2); 2: the same with Qwen2.5's "You are Qwen, created by ..."
 *   TMPL_QWEN35    0: assistant turns after the last user query always get a think block
 *                     (Qwen3.5-4B); 1: only when they have reasoning ("... and reasoning_content");
 *                  2: also earlier turns that have reasoning ("... or reasoning_content")
 *   TMPL_GRANITE   0: one turn per message (Granite 3.x / 4.1, llama.cpp's legacy renderer);
 *                  1: Granite 4.0, which always opens with a system turn (a default one)
 *   TMPL_LFM2      0: past assistant turns lose their <think> part unless keep_past_thinking
 *                     (LFM2.5-Instruct); 1: contents as given (LFM2-8B-A1B);
 *                  2: turns up to the last user message lose it (preserve_thinking, LFM2.5-8B)
 *   TMPL_NEMOTRON  0: "<think>\n" and "\n<SPECIAL_12>\n"; 1: "<think>\n\n" and "\n<SPECIAL_12>\n\n"
 *
 * llama.cpp renders with enable_thinking = true unless told otherwise; chat_template
 * carries the same default. Contents are trimmed with the ASCII whitespace set, as
 * llama.cpp's own trim and its Jinja engine's trim/strip do. */
#include "engine/template/template.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ strings */

typedef struct {
    const char *s;
    size_t n;
} view;

static view V(const char *s) {
    view v = {s ? s : "", s ? strlen(s) : 0};
    return v;
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

static view trim(view v) {
    while (v.n && is_ws(v.s[0])) v.s++, v.n--;
    while (v.n && is_ws(v.s[v.n - 1])) v.n--;
    return v;
}

static view lstrip_nl(view v) {
    while (v.n && v.s[0] == '\n') v.s++, v.n--;
    return v;
}

static view rstrip_nl(view v) {
    while (v.n && v.s[v.n - 1] == '\n') v.n--;
    return v;
}

/* position of the first / last occurrence of needle in v, or -1 */
static long find_first(view v, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= v.n; i++)
        if (memcmp(v.s + i, needle, k) == 0) return (long)i;
    return -1;
}

static long find_last(view v, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = v.n + 1; i-- > 0;)
        if (i + k <= v.n && memcmp(v.s + i, needle, k) == 0) return (long)i;
    return -1;
}

static int contains(view v, const char *needle) { return find_first(v, needle) >= 0; }

static int starts_with(view v, const char *p) { return v.n >= strlen(p) && memcmp(v.s, p, strlen(p)) == 0; }

static int ends_with(view v, const char *p) {
    size_t k = strlen(p);
    return v.n >= k && memcmp(v.s + v.n - k, p, k) == 0;
}

/* Python's s.split(sep)[-1]: the text after the last sep (all of s when absent) */
static view after_last(view v, const char *sep) {
    long i = find_last(v, sep);
    if (i < 0) return v;
    view r = {v.s + i + strlen(sep), v.n - (size_t)i - strlen(sep)};
    return r;
}

/* Python's s.split(sep)[0]: the text before the first sep */
static view before_first(view v, const char *sep) {
    long i = find_first(v, sep);
    if (i >= 0) v.n = (size_t)i;
    return v;
}

/* Python's s.split(sep)[1] (empty when sep is absent) */
static view second_part(view v, const char *sep) {
    long i = find_first(v, sep);
    view r = {"", 0};
    if (i < 0) return r;
    r.s = v.s + i + strlen(sep);
    r.n = v.n - (size_t)i - strlen(sep);
    long j = find_first(r, sep);
    if (j >= 0) r.n = (size_t)j;
    return r;
}

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} out_t;

static void put(out_t *o, view v) {
    if (o->oom || v.n == 0) return;
    if (o->n + v.n + 1 > o->cap) {
        size_t nc = o->cap ? o->cap : 256;
        while (nc < o->n + v.n + 1) nc *= 2;
        char *p = realloc(o->p, nc);
        if (!p) {
            o->oom = 1;
            return;
        }
        o->p = p;
        o->cap = nc;
    }
    memcpy(o->p + o->n, v.s, v.n);
    o->n += v.n;
}

static void puts_(out_t *o, const char *s) { put(o, V(s)); }

/* Python's s.replace(what, "") into o */
static void put_without(out_t *o, view v, const char *what) {
    size_t k = strlen(what);
    size_t i = 0, start = 0;
    while (i + k <= v.n) {
        if (memcmp(v.s + i, what, k) == 0) {
            view part = {v.s + start, i - start};
            put(o, part);
            i += k;
            start = i;
        } else {
            i++;
        }
    }
    view rest = {v.s + start, v.n - start};
    put(o, rest);
}

/* ------------------------------------------------------------------ families */

static int is_role(const chat_msg *m, const char *role) { return m->role && strcmp(m->role, role) == 0; }

static view content(const chat_msg *m) { return V(m->content); }

/* the reasoning and the answer of an assistant message holding "<think>...</think>",
 * as the Qwen templates split it */
static void split_think(view c, view *reasoning, view *answer) {
    view r = {"", 0};
    if (contains(c, "</think>")) {
        r = lstrip_nl(after_last(rstrip_nl(before_first(c, "</think>")), "<think>"));
        c = lstrip_nl(after_last(c, "</think>"));
    }
    *reasoning = r;
    *answer = c;
}

#define QWEN2_DEFAULT_SYSTEM "You are a helpful assistant."
#define QWEN25_DEFAULT_SYSTEM "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

/* ChatML as llama.cpp's legacy renderer: contents as given; the Qwen1.5/2/2.5 templates
 * open with their default system turn when the conversation has none */
static void render_chatml(out_t *o, const chat_template *t, const chat_msg *m, int n, int gen) {
    if (t->variant && n > 0 && !is_role(&m[0], "system")) {
        puts_(o, "<|im_start|>system\n");
        puts_(o, t->variant == 2 ? QWEN25_DEFAULT_SYSTEM : QWEN2_DEFAULT_SYSTEM);
        puts_(o, "<|im_end|>\n");
    }
    for (int i = 0; i < n; i++) {
        puts_(o, "<|im_start|>");
        puts_(o, m[i].role);
        puts_(o, "\n");
        put(o, content(&m[i]));
        puts_(o, "<|im_end|>\n");
    }
    if (gen) puts_(o, "<|im_start|>assistant\n");
}

/* index of the last user message that is a real query (not a wrapped tool response) */
static int last_query_index(const chat_msg *m, int n, int trimmed) {
    for (int i = n - 1; i >= 0; i--) {
        if (!is_role(&m[i], "user")) continue;
        view c = trimmed ? trim(content(&m[i])) : content(&m[i]);
        if (!(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"))) return i;
    }
    return n - 1; /* the templates' default (Qwen3.5 would raise an error instead) */
}

/* Qwen3 (Qwen3-0.6B.jinja) */
static void render_qwen3(out_t *o, const chat_template *t, const chat_msg *m, int n, int gen) {
    int lq = last_query_index(m, n, 0);
    for (int i = 0; i < n; i++) {
        if (!is_role(&m[i], "assistant")) { /* system and user turns: plain ChatML */
            puts_(o, "<|im_start|>");
            puts_(o, m[i].role);
            puts_(o, "\n");
            put(o, content(&m[i]));
            puts_(o, "<|im_end|>\n");
            continue;
        }
        view reasoning, answer;
        split_think(content(&m[i]), &reasoning, &answer);
        puts_(o, "<|im_start|>assistant\n");
        if (i > lq && (i == n - 1 || reasoning.n > 0)) {
            puts_(o, "<think>\n");
            put(o, lstrip_nl(rstrip_nl(reasoning)));
            puts_(o, "\n</think>\n\n");
            put(o, lstrip_nl(answer));
        } else {
            put(o, answer);
        }
        puts_(o, "<|im_end|>\n");
    }
    if (gen) {
        puts_(o, "<|im_start|>assistant\n");
        if (!t->enable_thinking) puts_(o, "<think>\n\n</think>\n\n");
    }
}

/* Qwen3.5 (Qwen3.5-4B.jinja): contents trimmed, a think block for recent turns */
static void render_qwen35(out_t *o, const chat_template *t, const chat_msg *m, int n, int gen) {
    int lq = last_query_index(m, n, 1);
    for (int i = 0; i < n; i++) {
        view c = trim(content(&m[i]));
        if (!is_role(&m[i], "assistant")) {
            /* a system message after the first makes the template raise; render it as ChatML */
            puts_(o, "<|im_start|>");
            puts_(o, m[i].role);
            puts_(o, "\n");
            put(o, c);
            puts_(o, "<|im_end|>\n");
            continue;
        }
        view reasoning, answer;
        split_think(c, &reasoning, &answer);
        reasoning = trim(reasoning);
        int recent = i > lq, think;
        if (t->variant == 1) think = recent && reasoning.n > 0;
        else if (t->variant == 2) think = recent || reasoning.n > 0;
        else think = recent;
        puts_(o, "<|im_start|>assistant\n");
        if (think) {
            puts_(o, "<think>\n");
            put(o, reasoning);
            puts_(o, "\n</think>\n\n");
        }
        put(o, answer);
        puts_(o, "<|im_end|>\n");
    }
    if (gen) {
        puts_(o, "<|im_start|>assistant\n");
        puts_(o, t->enable_thinking ? "<think>\n" : "<think>\n\n</think>\n\n");
    }
}

/* Llama 3: trimmed contents; the BOS comes from the tokenizer */
static void render_llama3(out_t *o, const chat_template *t, const chat_msg *m, int n, int gen) {
    puts_(o, t->bos_text);
    for (int i = 0; i < n; i++) {
        puts_(o, "<|start_header_id|>");
        puts_(o, m[i].role);
        puts_(o, "<|end_header_id|>\n\n");
        put(o, trim(content(&m[i])));
        puts_(o, "<|eot_id|>");
    }
    if (gen) puts_(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

#define GRANITE4_DEFAULT_SYSTEM "You are a helpful assistant. Please ensure responses are professional, accurate, and safe."

static void granite_turn(out_t *o, const char *role, view c) {
    puts_(o, "<|start_of_role|>");
    puts_(o, role);
    puts_(o, "<|end_of_role|>");
    put(o, c);
    puts_(o, "<|end_of_text|>\n");
}

/* Granite 3.x / 4.x */
static void render_granite(out_t *o, const chat_template *t, const chat_msg *m, int n, int gen) {
    int i = 0;
    if (t->variant == 1) { /* Granite 4.0 always opens with a system turn */
        view sys = V(GRANITE4_DEFAULT_SYSTEM);
        if (n > 0 && is_role(&m[0], "system")) {
            if (content(&m[0]).n > 0) sys = content(&m[0]);
            i = 1;
        }
        granite_turn(o, "system", sys);
    }
    for (; i < n; i++) granite_turn(o, m[i].role, content(&m[i]));
    if (gen) puts_(o, "<|start_of_role|>assistant<|end_of_role|>");
}

/* LFM2 / LFM2.5 */
static void render_lfm2(out_t *o, const chat_template *t, const chat_msg *m, int n, int gen) {
    puts_(o, t->bos_text);
    if (n > 0 && is_role(&m[0], "system")) {
        if (content(&m[0]).n > 0) {
            puts_(o, "<|im_start|>system\n");
            put(o, content(&m[0]));
            puts_(o, "<|im_end|>\n");
        }
        m++;
        n--;
    }
    int last_assistant = -1, last_user = -1;
    for (int i = 0; i < n; i++) {
        if (is_role(&m[i], "assistant")) last_assistant = i;
        if (is_role(&m[i], "user")) last_user = i;
    }
    for (int i = 0; i < n; i++) {
        view c = content(&m[i]);
        int strip = 0;
        if (is_role(&m[i], "assistant")) {
            if (t->variant == 0) strip = i != last_assistant;
            else if (t->variant == 2) strip = i <= last_user;
        }
        if (strip && contains(c, "</think>")) c = trim(after_last(c, "</think>"));
        puts_(o, "<|im_start|>");
        puts_(o, m[i].role);
        puts_(o, "\n");
        put(o, c);
        puts_(o, "<|im_end|>\n");
    }
    if (gen) puts_(o, "<|im_start|>assistant\n");
}

/* Nemotron Nano v2: /think and /no_think in system or user text switch thinking */
static void render_nemotron(out_t *o, const chat_template *t, const chat_msg *m, int n, int gen) {
    const char *end_turn = t->variant == 1 ? "\n<SPECIAL_12>\n\n" : "\n<SPECIAL_12>\n";
    const char *think_open = t->variant == 1 ? "<think>\n\n" : "<think>\n";
    int thinking = 1;
    for (int i = 0; i < n; i++) {
        if (!is_role(&m[i], "user") && !is_role(&m[i], "system")) continue;
        if (contains(content(&m[i]), "/think")) thinking = 1;
        else if (contains(content(&m[i]), "/no_think")) thinking = 0;
    }
    puts_(o, "<SPECIAL_10>System\n");
    if (n > 0 && is_role(&m[0], "system")) {
        out_t tmp = {0}, tmp2 = {0};
        put_without(&tmp, content(&m[0]), "/think");
        view v1 = {tmp.p ? tmp.p : "", tmp.n};
        put_without(&tmp2, v1, "/no_think");
        view v2 = {tmp2.p ? tmp2.p : "", tmp2.n};
        put(o, trim(v2));
        o->oom |= tmp.oom | tmp2.oom;
        free(tmp.p);
        free(tmp2.p);
        m++;
        n--;
    }
    puts_(o, "\n\n");
    view last = {"", 0};
    if (n > 0 && is_role(&m[n - 1], "assistant")) { /* the last assistant turn is continued */
        last = trim(content(&m[n - 1]));
        n--;
    }
    for (int i = 0; i < n; i++) {
        if (is_role(&m[i], "user")) {
            out_t tmp = {0}, tmp2 = {0};
            put_without(&tmp, content(&m[i]), "/think");
            view v1 = {tmp.p ? tmp.p : "", tmp.n};
            put_without(&tmp2, v1, "/no_think");
            view v2 = {tmp2.p ? tmp2.p : "", tmp2.n};
            puts_(o, "<SPECIAL_11>User\n");
            put(o, trim(v2));
            puts_(o, "\n");
            o->oom |= tmp.oom | tmp2.oom;
            free(tmp.p);
            free(tmp2.p);
        } else if (is_role(&m[i], "assistant")) {
            view c = content(&m[i]);
            if (c.n && contains(c, "</think>")) c = trim(second_part(c, "</think>"));
            puts_(o, "<SPECIAL_11>Assistant\n");
            put(o, trim(c));
            puts_(o, end_turn);
        } /* a later system message is not rendered by this template */
    }
    if (gen) {
        puts_(o, "<SPECIAL_11>Assistant\n");
        puts_(o, thinking ? think_open : "<think></think>");
        put(o, last);
    } else if (last.n > 0) {
        puts_(o, "<SPECIAL_11>Assistant\n");
        puts_(o, thinking ? think_open : "<think></think>");
        put(o, last);
        puts_(o, end_turn);
    }
}

/* ------------------------------------------------------------------ API */

static const char *const family_names[TMPL_COUNT] = {
    [TMPL_CHATML] = "chatml", [TMPL_QWEN3] = "qwen3",     [TMPL_QWEN35] = "qwen35",     [TMPL_LLAMA3] = "llama3",
    [TMPL_GRANITE] = "granite", [TMPL_LFM2] = "lfm2",     [TMPL_NEMOTRON] = "nemotron",
};

const char *template_family_name(tmpl_family f) {
    return (f >= 0 && f < TMPL_COUNT) ? family_names[f] : "unknown";
}

static void init(chat_template *t, tmpl_family f, int known, int variant) {
    memset(t, 0, sizeof *t);
    t->family = f;
    t->known = known;
    t->enable_thinking = 1;
    t->variant = variant;
}

int template_force(chat_template *t, const char *name) {
    if (!name) return 0;
    for (int f = 0; f < TMPL_COUNT; f++)
        if (strcmp(name, family_names[f]) == 0) {
            /* a forced granite is Granite 4.0, the family chatfs's granitehybrid models use */
            init(t, (tmpl_family)f, 1, f == TMPL_GRANITE ? 1 : 0);
            return 1;
        }
    return 0;
}

static int has_any(view v, const char *const *needles) {
    for (; *needles; needles++)
        if (contains(v, *needles)) return 1;
    return 0;
}

/* Which flavour of a Qwen3.5 template: how it decides on think blocks in history. */
static int qwen35_variant(view v) {
    if (contains(v, "last_query_index and reasoning_content") ||
        contains(v, "last_query_index  and reasoning_content"))
        return 1;
    if (contains(v, "last_query_index or reasoning_content") || contains(v, "last_query_index  or reasoning_content"))
        return 2;
    return 0;
}

void template_detect(chat_template *t, const char *jinja_text) {
    view v = V(jinja_text);
    init(t, TMPL_CHATML, 0, 0);
    if (v.n == 0) return;
    if (template_force(t, jinja_text)) return; /* a bare family name, as llama.cpp accepts */

    if (contains(v, "<|im_start|>")) {
        /* llama.cpp maps all of these to ChatML; chatfs tells the thinking families apart */
        if (contains(v, "<|im_sep|>") || contains(v, "<end_of_utterance>")) return; /* Phi-4, SmolVLM */
        static const char *const lfm2_marks[] = {"keep_past_thinking", "preserve_thinking", "List of tools",
                                                 "<|tool_list_start|>", "<|tool_call_start|>", NULL};
        if (has_any(v, lfm2_marks)) {
            int variant = contains(v, "preserve_thinking") ? 2
                          : (contains(v, "keep_past_thinking") || contains(v, "</think>")) ? 0 : 1;
            init(t, TMPL_LFM2, 1, variant);
            return;
        }
        if (contains(v, "<think>")) {
            /* Qwen3.5 trims contents through its render_content macro and opens the
             * generation with "<think>\n"; Qwen3 does neither */
            if (contains(v, "render_content") || contains(v, "|trim") || contains(v, "| trim"))
                init(t, TMPL_QWEN35, 1, qwen35_variant(v));
            else
                init(t, TMPL_QWEN3, 1, 0);
            return;
        }
        /* Qwen1.5/2/2.5: the default system turn as a literal, "\n" escaped in the Jinja */
        const int qwen2 = contains(v, "<|im_start|>system\\n" QWEN2_DEFAULT_SYSTEM "<|im_end|>") ||
                          contains(v, "<|im_start|>system\n" QWEN2_DEFAULT_SYSTEM "<|im_end|>");
        const int qwen25 = contains(v, "<|im_start|>system\\n" QWEN25_DEFAULT_SYSTEM "<|im_end|>") ||
                           contains(v, "<|im_start|>system\n" QWEN25_DEFAULT_SYSTEM "<|im_end|>");
        init(t, TMPL_CHATML, 1, qwen25 ? 2 : qwen2 ? 1 : 0);
        return;
    }
    if (contains(v, "<|start_header_id|>") && contains(v, "<|end_header_id|>")) {
        init(t, TMPL_LLAMA3, 1, 0);
        return;
    }
    if (contains(v, "<|start_of_role|>")) {
        int g40 = contains(v, "g4_default_system_message") || contains(v, GRANITE4_DEFAULT_SYSTEM);
        init(t, TMPL_GRANITE, 1, g40 ? 1 : 0);
        return;
    }
    if (contains(v, "<SPECIAL_10>") || contains(v, "<SPECIAL_11>")) {
        int v1 = contains(v, "<think>\n\n'") || contains(v, "<think>\\n\\n'");
        init(t, TMPL_NEMOTRON, 1, v1 ? 1 : 0);
        return;
    }
    /* unknown: ChatML, known = 0 */
}

char *template_render(const chat_template *t, const chat_msg *msgs, int n, int add_generation_prompt) {
    if (n < 0 || (n > 0 && !msgs)) return NULL;
    for (int i = 0; i < n; i++)
        if (!is_role(&msgs[i], "system") && !is_role(&msgs[i], "user") && !is_role(&msgs[i], "assistant"))
            return NULL;
    out_t o = {0};
    int gen = add_generation_prompt != 0;
    switch (t->family) {
    case TMPL_QWEN3: render_qwen3(&o, t, msgs, n, gen); break;
    case TMPL_QWEN35: render_qwen35(&o, t, msgs, n, gen); break;
    case TMPL_LLAMA3: render_llama3(&o, t, msgs, n, gen); break;
    case TMPL_GRANITE: render_granite(&o, t, msgs, n, gen); break;
    case TMPL_LFM2: render_lfm2(&o, t, msgs, n, gen); break;
    case TMPL_NEMOTRON: render_nemotron(&o, t, msgs, n, gen); break;
    default: render_chatml(&o, t, msgs, n, gen); break;
    }
    if (o.oom) {
        free(o.p);
        return NULL;
    }
    if (!o.p) o.p = calloc(1, 1);
    else o.p[o.n] = 0;
    return o.p;
}
