/* xml.c - the XML calls of Qwen3.5, Qwen3-Coder and Nemotron-3 (llama.cpp's
 * common/parsers/qwen3-coder.cpp):
 *
 *     <tool_call>
 *     <function=NAME>
 *     <parameter=KEY>
 *     VALUE
 *     </parameter>
 *     </function>
 *     </tool_call>
 *
 * A value is text: the newline after <parameter=KEY> and the one before </parameter> are
 * the format's (llama.cpp's literals ">\n" and "\n</parameter>\n"), the rest is the value,
 * its own trailing newline included. The value is converted to the parameter's type in the
 * offered function's schema: a string stays text; integer, number, boolean, null, object and
 * array read as JSON (for a type list with string, the other types first, as llama.cpp tries
 * them); a value that reads as none of its types is kept as a string and the call's problem
 * says which parameter. Whitespace between the tags is free (llama.cpp wants the newlines;
 * models do write them). A last </parameter> may be left out: the value then ends at
 * </function>. Qwen3-Coder may leave out the first call's <tool_call> (llama.cpp accepts
 * <function=NAME> for an offered NAME there). */
#include "engine/toolcall/toolcall_impl.h"

#include <string.h>

/* the name after "<function=" or "<parameter=": up to '>', no newline or '<' in it */
static enum tc_read tag_name(const char *s, size_t i, size_t n, size_t *name_end, size_t *end) {
    for (size_t p = i; p < n; p++) {
        if (s[p] == '>') {
            if (p == i) return TC_BAD;
            *name_end = p;
            *end = p + 1;
            return TC_OK;
        }
        if (s[p] == '\n' || s[p] == '<' || p - i > 256) return TC_BAD;
    }
    return TC_MORE;
}

static bool is_int_text(const char *s, size_t n, size_t *digits) {
    size_t p = 0;
    if (p < n && s[p] == '-') p++;
    size_t d0 = p;
    while (p < n && s[p] >= '0' && s[p] <= '9') p++;
    if (p == d0 || (s[d0] == '0' && p - d0 > 1)) return false;
    *digits = p;
    /* 140.0 is the integer 140: a zero fraction is dropped */
    if (p < n && s[p] == '.') {
        size_t q = p + 1;
        while (q < n && s[q] == '0') q++;
        if (q == p + 1 || q != n) return false;
        return true;
    }
    return p == n;
}

/* the value's text converted to its types into cb->args; false when none fits */
static bool typed_value(struct tc_call_build *cb, unsigned types, const char *v, size_t n) {
    size_t a = 0, b = n;
    while (a < b && tc_space(v[a])) a++;
    while (b > a && tc_space(v[b - 1])) b--;
    const char *t = v + a;
    size_t m = b - a;
    if (m && (types & (TC_T_OBJECT | TC_T_ARRAY)) && (t[0] == '{' || t[0] == '[') &&
        (types & (t[0] == '{' ? TC_T_OBJECT : TC_T_ARRAY)) && tc_json_whole(t, 0, m)) {
        tc_json_minify(&cb->args, t, 0, m);
        return true;
    }
    size_t digits;
    if ((types & TC_T_INTEGER) && is_int_text(t, m, &digits)) {
        strbuf_add(&cb->args, t, digits);
        return true;
    }
    if ((types & TC_T_NUMBER) && m && (t[0] == '-' || (t[0] >= '0' && t[0] <= '9')) && tc_json_whole(t, 0, m)) {
        strbuf_add(&cb->args, t, m);
        return true;
    }
    if ((types & TC_T_BOOLEAN) && ((m == 4 && !memcmp(t, "true", 4)) || (m == 5 && !memcmp(t, "false", 5)))) {
        strbuf_add(&cb->args, t, m);
        return true;
    }
    if ((types & TC_T_NULL) && m == 4 && !memcmp(t, "null", 4)) {
        strbuf_add(&cb->args, t, m);
        return true;
    }
    if (types & TC_T_STRING) {
        tc_add_json_string(&cb->args, v, n);
        return true;
    }
    return false;
}

static const char *type_words(unsigned types) {
    if (types == TC_T_INTEGER) return "an integer";
    if (types == TC_T_NUMBER || types == (TC_T_NUMBER | TC_T_INTEGER)) return "a number";
    if (types == TC_T_BOOLEAN) return "a boolean";
    if (types == TC_T_NULL) return "null";
    if (types == TC_T_OBJECT) return "a JSON object";
    if (types == TC_T_ARRAY) return "a JSON array";
    return "of its schema's types";
}

static void add_value(struct tc_call_build *cb, const struct tc_param *param, const char *key, size_t klen,
                      const char *v, size_t n) {
    /* no schema for it (no tools given, or not a parameter of the function): every type */
    unsigned types = param ? param->types : TC_T_ANY;
    if (typed_value(cb, types, v, n)) return;
    tc_add_json_string(&cb->args, v, n);
    tc_build_problem(cb, "%.*s: \"%.*s\" is not %s (kept as a string)", (int)(klen > 80 ? 80 : klen), key,
                     (int)(n > 80 ? 80 : n), v, type_words(types));
}

enum tc_read tc_read_xml(struct tc_scan *sc, size_t at, size_t marker_len, size_t *end) {
    const char *s = sc->s;
    size_t n = sc->n, p = at + marker_len, name_at, name_end;
    bool bare = sc->family == TC_QWEN3_CODER && marker_len == strlen("<function=") && s[at + 1] == 'f';
    if (bare) {
        if (sc->reply->n_calls > 0) return TC_BAD; /* only the first call may come bare */
        name_at = p;
    } else {
        p = tc_skip_space(s, p, n);
        enum tc_read r = tc_lit(s, p, n, "<function=", &p);
        if (r != TC_OK) return r;
        name_at = p;
    }
    enum tc_read r = tag_name(s, name_at, n, &name_end, &p);
    if (r != TC_OK) return r;
    if (bare && sc->tools && !tc_tools_find(sc->tools, s + name_at, name_end - name_at)) return TC_BAD;

    struct tc_call_build cb;
    tc_build_begin(sc, &cb, s + name_at, name_end - name_at);
    for (;;) {
        p = tc_skip_space(s, p, n);
        size_t q;
        if ((r = tc_lit(s, p, n, "<parameter=", &q)) == TC_OK) {
            size_t key_end;
            if ((r = tag_name(s, q, n, &key_end, &q)) != TC_OK) break;
            size_t v0 = q, close = tc_find(s, v0, n, "</parameter>"), fend = tc_find(s, v0, n, "</function>");
            size_t v1, next;
            if (close < n && close < fend) v1 = close, next = close + strlen("</parameter>");
            else if (fend < n) v1 = next = fend; /* the last </parameter> left out */
            else {
                r = TC_MORE;
                break;
            }
            if (v0 < v1 && s[v0] == '\n') v0++;
            if (v1 > v0 && s[v1 - 1] == '\n') v1--;
            const struct tc_param *param;
            if (tc_build_key(sc, &cb, s + p + strlen("<parameter="), key_end - p - strlen("<parameter="), &param))
                add_value(&cb, param, s + p + strlen("<parameter="), key_end - p - strlen("<parameter="), s + v0,
                          v1 - v0);
            p = next;
            continue;
        }
        if (r == TC_MORE) break;
        if ((r = tc_lit(s, p, n, "</function>", &p)) != TC_OK) break;
        p = tc_skip_space(s, p, n);
        r = tc_lit(s, p, n, "</tool_call>", &q);
        /* a finished answer may end right after </function> */
        if (r == TC_MORE && sc->final && p >= n) r = TC_OK, q = n;
        if (r != TC_OK) break;
        *end = q;
        return tc_build_end(sc, &cb, at, q) ? TC_OK : TC_BAD;
    }
    tc_build_drop(&cb);
    return r == TC_MORE ? TC_MORE : TC_BAD;
}
