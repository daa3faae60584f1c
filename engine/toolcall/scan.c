/* scan.c - an answer split into content and calls, the same way for every family: the
 * text up to a family's start marker is content; at a marker the family's reader reads
 * the calls, or says the text may still become calls (a partial text: held back), or that
 * the marker is text after all. The whitespace at the start of the answer and right after
 * each call is dropped, as llama.cpp's parsers consume it (space() between the generation
 * prompt, the content and the calls). On a partial text a tail that may be the start of a
 * marker ("<tool_") is held back, so the content only ever grows. */
#include "engine/toolcall/toolcall_impl.h"

#include <stdlib.h>
#include <string.h>

struct family {
    const char *const *markers; /* NULL-terminated */
    tc_reader read;
};

static const char *const m_tool_call[] = {"<tool_call>", NULL};
static const char *const m_coder[] = {"<tool_call>", "<function=", NULL};
static const char *const m_llama3[] = {"{", NULL};
static const char *const m_lfm2[] = {"<|tool_call_start|>", NULL};

static const struct family *family_of(enum tc_family f) {
    static const struct family xml = {m_tool_call, tc_read_xml}, coder = {m_coder, tc_read_xml},
                               hermes = {m_tool_call, tc_read_hermes}, llama3 = {m_llama3, tc_read_llama3},
                               lfm2 = {m_lfm2, tc_read_lfm2};
    switch (f) {
    case TC_QWEN_XML: return &xml;
    case TC_QWEN3_CODER: return &coder;
    case TC_HERMES: return &hermes;
    case TC_LLAMA3: return &llama3;
    case TC_LFM2: return &lfm2;
    case TC_NONE: break;
    }
    return NULL;
}

static bool add_content(struct tc_stream *st, const char *p, size_t n) {
    struct tc_reply *r = &st->reply;
    if (n == 0 && r->content) return true;
    if (r->content_len + n + 1 > st->content_cap) {
        size_t cap = st->content_cap ? st->content_cap : 256;
        while (cap < r->content_len + n + 1) {
            if (cap > ((size_t)-1) / 4) return false;
            cap *= 2;
        }
        char *c = realloc(r->content, cap);
        if (!c) return false;
        r->content = c;
        st->content_cap = cap;
    }
    if (n) memcpy(r->content + r->content_len, p, n);
    r->content_len += n;
    r->content[r->content_len] = 0;
    return true;
}

static void free_calls_from(struct tc_reply *r, int from) {
    for (int k = from; k < r->n_calls; k++) {
        free(r->calls[k].name);
        free(r->calls[k].arguments);
        free(r->calls[k].problem);
    }
    if (from < r->n_calls) r->n_calls = from;
}

void tc_stream_init(struct tc_stream *s, enum tc_family f, const struct tc_tools *tools) {
    *s = (struct tc_stream){.family = f, .tools = tools, .skip_space = true};
}

void tc_stream_free(struct tc_stream *s) {
    tc_reply_free(&s->reply);
    s->content_cap = 0;
}

void tc_reply_free(struct tc_reply *r) {
    free_calls_from(r, 0);
    free(r->calls);
    free(r->content);
    *r = (struct tc_reply){0};
}

/* the earliest marker at or after i: its offset (n when none) and length */
static size_t next_marker(const struct family *fam, const char *s, size_t i, size_t n, size_t *len) {
    size_t best = n;
    *len = 0;
    for (int k = 0; fam->markers[k]; k++) {
        size_t m = tc_find(s, i, n, fam->markers[k]);
        if (m < best) best = m, *len = strlen(fam->markers[k]);
    }
    return best;
}

static size_t held_tail(const struct family *fam, const char *s, size_t n) {
    size_t hold = 0;
    for (int k = 0; fam->markers[k]; k++) {
        size_t h = tc_tail_prefix(s, n, fam->markers[k]);
        if (h > hold) hold = h;
    }
    return hold;
}

int tc_stream_feed(struct tc_stream *st, const char *text, size_t len, bool final) {
    if (!add_content(st, "", 0)) return -1; /* content is a string from the first feed on */
    if (len < st->settled) return 0;       /* not the text fed before: nothing new */
    const struct family *fam = family_of(st->family);
    size_t pos = st->settled;
    struct tc_scan sc = {.family = st->family, .tools = st->tools, .s = text, .n = len, .final = final,
                         .reply = &st->reply};
    for (;;) {
        if (st->skip_space) {
            pos = tc_skip_space(text, pos, len);
            st->settled = pos;
            if (pos >= len && !final) return 0; /* more whitespace may come: still dropped */
            st->skip_space = false;
        }
        size_t mlen = 0, m = fam ? next_marker(fam, text, pos, len, &mlen) : len;
        if (m >= len) {
            size_t hold = final || !fam ? 0 : held_tail(fam, text + pos, len - pos);
            if (!add_content(st, text + pos, len - pos - hold)) return -1;
            st->settled = len - hold;
            return 0;
        }
        if (!add_content(st, text + pos, m - pos)) return -1;
        st->settled = pos = m;
        int before = st->reply.n_calls;
        size_t end = m;
        enum tc_read r = fam->read(&sc, m, mlen, &end);
        if (sc.oom) return -1;
        if (r == TC_OK && end > m) {
            st->settled = pos = end;
            st->skip_space = true;
            continue;
        }
        free_calls_from(&st->reply, before);
        if (r == TC_MORE && !final) return 0; /* the calls may still come: wait at the marker */
        /* not a call: the marker is text, and the reading goes on after it */
        if (!add_content(st, text + m, mlen)) return -1;
        st->settled = pos = m + mlen;
    }
}

int tc_parse(enum tc_family f, const struct tc_tools *tools, const char *text, size_t len, bool final,
             struct tc_reply *out) {
    struct tc_stream st;
    tc_stream_init(&st, f, tools);
    if (tc_stream_feed(&st, text, len, final) < 0) {
        tc_stream_free(&st);
        *out = (struct tc_reply){0};
        return -1;
    }
    *out = st.reply;
    return 0;
}

size_t tc_reasoning_end(enum tc_family f, const char *text, size_t len, size_t *safe) {
    static const char marker[] = "<tool_call>";
    size_t cut = f == TC_QWEN_XML ? tc_find(text, 0, len, marker) : len;
    if (safe) *safe = cut < len || f != TC_QWEN_XML ? cut : len - tc_tail_prefix(text, len, marker);
    return cut;
}
