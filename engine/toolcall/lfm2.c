/* lfm2.c - LFM2's and LFM2.5's calls (llama.cpp's common/parsers/lfm2.cpp and the
 * builder's python_style_tool_calls): a Python-like list of calls between markers,
 *
 *     <|tool_call_start|>[get_time(city="Paris"), toggle(enabled=True)]<|tool_call_end|>
 *
 * Names may be dotted (Calendar.create_event); arguments are keyword arguments whose values
 * are Python literals (or JSON's true/false/null), converted to JSON: quoted strings in ' or
 * ", numbers, True/False/None, lists and dicts. Values are not converted to the schema's
 * types: they are typed as written. One block holds one or more calls, each its own index;
 * a finished answer may end without <|tool_call_end|>. */
#include "engine/toolcall/toolcall_impl.h"

static bool name_char(char c, bool dotted) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           (dotted && (c == '.' || c == '-'));
}

/* an identifier at p: TC_OK with *e past it (the text must go on after it) */
static enum tc_read ident(const char *s, size_t p, size_t n, bool dotted, size_t *e) {
    size_t q = p;
    while (q < n && name_char(s[q], dotted) && q - p <= 256) q++;
    if (q >= n) return TC_MORE;
    if (q == p || q - p > 256) return TC_BAD;
    *e = q;
    return TC_OK;
}

/* one call NAME(key=value, ...) at p, appended */
static enum tc_read one_call(struct tc_scan *sc, size_t p, size_t *end) {
    const char *s = sc->s;
    size_t n = sc->n, ne;
    enum tc_read r = ident(s, p, n, true, &ne);
    if (r != TC_OK) return r;
    size_t q;
    if ((r = tc_lit(s, ne, n, "(", &q)) != TC_OK) return r;
    struct tc_call_build cb;
    tc_build_begin(sc, &cb, s + p, ne - p);
    strbuf value = {0};
    q = tc_skip_space(s, q, n);
    if (q < n && s[q] == ')') {
        q++;
    } else {
        for (;;) {
            size_t ke;
            if ((r = ident(s, q, n, false, &ke)) != TC_OK) break;
            size_t v = tc_skip_space(s, ke, n);
            if ((r = tc_lit(s, v, n, "=", &v)) != TC_OK) break;
            v = tc_skip_space(s, v, n);
            value.n = 0;
            if ((r = tc_py_value(s, v, n, &value, &v)) != TC_OK) break;
            const struct tc_param *param;
            if (tc_build_key(sc, &cb, s + q, ke - q, &param)) strbuf_add(&cb.args, value.s ? value.s : "", value.n);
            q = tc_skip_space(s, v, n);
            if (q >= n) {
                r = TC_MORE;
                break;
            }
            if (s[q] == ')') {
                q++;
                break;
            }
            if (s[q] != ',') {
                r = TC_BAD;
                break;
            }
            q = tc_skip_space(s, q + 1, n);
        }
    }
    bool oom = value.failed;
    strbuf_free(&value);
    if (r != TC_OK || oom) {
        tc_build_drop(&cb);
        if (oom) sc->oom = true;
        return r == TC_OK ? TC_BAD : r;
    }
    *end = q;
    return tc_build_end(sc, &cb, p, q) ? TC_OK : TC_BAD;
}

enum tc_read tc_read_lfm2(struct tc_scan *sc, size_t at, size_t marker_len, size_t *end) {
    const char *s = sc->s;
    size_t n = sc->n, p = tc_skip_space(s, at + marker_len, n);
    enum tc_read r = tc_lit(s, p, n, "[", &p);
    if (r != TC_OK) return r;
    int first = sc->reply->n_calls;
    for (;;) {
        p = tc_skip_space(s, p, n);
        if ((r = one_call(sc, p, &p)) != TC_OK) return r;
        p = tc_skip_space(s, p, n);
        if (p >= n) return TC_MORE;
        if (s[p] == ']') break;
        if (s[p] != ',') return TC_BAD;
        p++;
    }
    p = tc_skip_space(s, p + 1, n);
    size_t q;
    r = tc_lit(s, p, n, "<|tool_call_end|>", &q);
    if (r == TC_MORE && sc->final && p >= n) r = TC_OK, q = n;
    if (r != TC_OK) return r;
    /* the block's markers belong to its first and last call */
    sc->reply->calls[first].start = at;
    sc->reply->calls[sc->reply->n_calls - 1].end = q;
    *end = q;
    return TC_OK;
}
