/* text.c - the room's text helpers: JSON string literals, literals a partial text may cut,
 * JSON values scanned (and minified) within their bounds, Python literals as JSON. */
#include "engine/toolcall/toolcall_impl.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- JSON strings ---- */

/* cJSON escapes a NUL-terminated string; a NUL byte in the text is written as \u0000
 * between the pieces around it */
void tc_add_json_string(strbuf *b, const char *p, size_t n) {
    strbuf_addc(b, '"');
    for (size_t i = 0; i <= n && !b->failed;) {
        const char *nul = memchr(p + i, 0, n - i);
        size_t k = nul ? (size_t)(nul - (p + i)) : n - i;
        char *z = malloc(k + 1);
        cJSON *str = NULL;
        if (z) memcpy(z, p + i, k), z[k] = 0, str = cJSON_CreateString(z);
        char *text = str ? cJSON_PrintUnformatted(str) : NULL;
        if (text) strbuf_add(b, text + 1, strlen(text) - 2); /* without its quotes */
        else b->failed = true;
        cJSON_free(text);
        cJSON_Delete(str);
        free(z);
        if (!nul) break;
        strbuf_adds(b, "\\u0000");
        i += k + 1;
    }
    strbuf_addc(b, '"');
}

/* ---- literals and whitespace ---- */

bool tc_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

size_t tc_skip_space(const char *s, size_t i, size_t n) {
    while (i < n && tc_space(s[i])) i++;
    return i;
}

enum tc_read tc_lit(const char *s, size_t i, size_t n, const char *lit, size_t *end) {
    size_t k = 0;
    for (; lit[k]; k++) {
        if (i + k >= n) return TC_MORE;
        if (s[i + k] != lit[k]) return TC_BAD;
    }
    if (end) *end = i + k;
    return TC_OK;
}

size_t tc_find(const char *s, size_t i, size_t n, const char *lit) {
    size_t m = strlen(lit);
    if (m == 0) return i;
    for (; i + m <= n; i++) {
        const char *p = memchr(s + i, lit[0], n - i - m + 1);
        if (!p) return n;
        i = (size_t)(p - s);
        if (memcmp(p, lit, m) == 0) return i;
    }
    return n;
}

size_t tc_tail_prefix(const char *s, size_t n, const char *lit) {
    size_t m = strlen(lit);
    for (size_t k = m ? m - 1 : 0; k > 0; k--)
        if (k <= n && memcmp(s + n - k, lit, k) == 0) return k;
    return 0;
}

/* ---- JSON ---- */

#define TC_MAX_DEPTH 128

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* a number by JSON's grammar; *end past it. A number the text's end may still extend
 * reads TC_MORE on a partial text (the caller decides with final). */
static enum tc_read json_number(const char *s, size_t i, size_t n, size_t *end) {
    size_t p = i;
    if (p < n && s[p] == '-') p++;
    if (p >= n) return TC_MORE;
    if (s[p] == '0') p++;
    else if (is_digit(s[p])) while (p < n && is_digit(s[p])) p++;
    else return TC_BAD;
    if (p < n && s[p] == '.') {
        p++;
        if (p >= n) return TC_MORE;
        if (!is_digit(s[p])) return TC_BAD;
        while (p < n && is_digit(s[p])) p++;
    }
    if (p < n && (s[p] == 'e' || s[p] == 'E')) {
        p++;
        if (p < n && (s[p] == '+' || s[p] == '-')) p++;
        if (p >= n) return TC_MORE;
        if (!is_digit(s[p])) return TC_BAD;
        while (p < n && is_digit(s[p])) p++;
    }
    *end = p;
    return p >= n ? TC_MORE : TC_OK;
}

static bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/* a string literal at i (s[i] == '"'), its escapes checked */
static enum tc_read json_skip_string(const char *s, size_t i, size_t n, size_t *end) {
    for (size_t p = i + 1; p < n; p++) {
        unsigned char c = (unsigned char)s[p];
        if (c == '"') {
            *end = p + 1;
            return TC_OK;
        }
        if (c < 0x20) return TC_BAD;
        if (c != '\\') continue;
        if (++p >= n) return TC_MORE;
        c = (unsigned char)s[p];
        if (c == 'u') {
            for (int k = 0; k < 4; k++) {
                if (++p >= n) return TC_MORE;
                if (!is_hex(s[p])) return TC_BAD;
            }
        } else if (!strchr("\"\\/bfnrt", c) || c == 0) {
            return TC_BAD;
        }
    }
    return TC_MORE;
}

static size_t json_ws(const char *s, size_t i, size_t n) {
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
    return i;
}

static enum tc_read json_value(const char *s, size_t i, size_t n, size_t *end, int depth) {
    if (i >= n) return TC_MORE;
    if (depth > TC_MAX_DEPTH) return TC_BAD;
    char c = s[i];
    if (c == '"') return json_skip_string(s, i, n, end);
    if (c == '-' || is_digit(c)) {
        enum tc_read r = json_number(s, i, n, end);
        return r;
    }
    if (c == 't') return tc_lit(s, i, n, "true", end);
    if (c == 'f') return tc_lit(s, i, n, "false", end);
    if (c == 'n') return tc_lit(s, i, n, "null", end);
    if (c != '{' && c != '[') return TC_BAD;
    char close = c == '{' ? '}' : ']';
    size_t p = json_ws(s, i + 1, n);
    if (p >= n) return TC_MORE;
    if (s[p] == close) {
        *end = p + 1;
        return TC_OK;
    }
    for (;;) {
        if (c == '{') {
            if (p >= n) return TC_MORE;
            if (s[p] != '"') return TC_BAD;
            enum tc_read r = json_skip_string(s, p, n, &p);
            if (r != TC_OK) return r;
            p = json_ws(s, p, n);
            if (p >= n) return TC_MORE;
            if (s[p] != ':') return TC_BAD;
            p = json_ws(s, p + 1, n);
        }
        size_t q;
        enum tc_read r = json_value(s, p, n, &q, depth + 1);
        /* a number at the very end is cut, whatever the text is */
        if (r != TC_OK) return r;
        p = json_ws(s, q, n);
        if (p >= n) return TC_MORE;
        if (s[p] == close) {
            *end = p + 1;
            return TC_OK;
        }
        if (s[p] != ',') return TC_BAD;
        p = json_ws(s, p + 1, n);
    }
}

enum tc_read tc_json_value(const char *s, size_t i, size_t n, size_t *end) {
    return json_value(s, i, n, end, 0);
}

bool tc_json_whole(const char *s, size_t i, size_t n) {
    size_t e = 0;
    enum tc_read r = json_value(s, i, n, &e, 0);
    /* a number that reaches the end of the slice is whole: nothing follows it */
    if (r == TC_MORE && i < n && (s[i] == '-' || is_digit(s[i]))) return e == n;
    return r == TC_OK && json_ws(s, e, n) == n;
}

void tc_json_minify(strbuf *b, const char *s, size_t i, size_t end) {
    bool in_str = false;
    for (size_t p = i; p < end; p++) {
        char c = s[p];
        if (in_str) {
            if (c == '\\' && p + 1 < end) {
                strbuf_add(b, s + p, 2);
                p++;
                continue;
            }
            if (c == '"') in_str = false;
            strbuf_addc(b, c);
        } else if (c == '"') {
            in_str = true;
            strbuf_addc(b, c);
        } else if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
            strbuf_addc(b, c);
        }
    }
}

static void add_utf8(strbuf *b, unsigned long cp) {
    char u[4];
    size_t k;
    if (cp < 0x80) u[0] = (char)cp, k = 1;
    else if (cp < 0x800) u[0] = (char)(0xC0 | (cp >> 6)), u[1] = (char)(0x80 | (cp & 0x3F)), k = 2;
    else if (cp < 0x10000)
        u[0] = (char)(0xE0 | (cp >> 12)), u[1] = (char)(0x80 | ((cp >> 6) & 0x3F)), u[2] = (char)(0x80 | (cp & 0x3F)),
        k = 3;
    else
        u[0] = (char)(0xF0 | (cp >> 18)), u[1] = (char)(0x80 | ((cp >> 12) & 0x3F)),
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), u[3] = (char)(0x80 | (cp & 0x3F)), k = 4;
    strbuf_add(b, u, k);
}

static unsigned long hex4(const char *s) { return strtoul((char[5]){s[0], s[1], s[2], s[3], 0}, NULL, 16); }

enum tc_read tc_json_string(const char *s, size_t i, size_t n, strbuf *b, size_t *end) {
    size_t e;
    enum tc_read r = json_skip_string(s, i, n, &e);
    if (r != TC_OK) return r;
    for (size_t p = i + 1; p < e - 1; p++) {
        if (s[p] != '\\') {
            strbuf_addc(b, s[p]);
            continue;
        }
        char c = s[++p];
        if (c == 'n') strbuf_addc(b, '\n');
        else if (c == 't') strbuf_addc(b, '\t');
        else if (c == 'r') strbuf_addc(b, '\r');
        else if (c == 'b') strbuf_addc(b, '\b');
        else if (c == 'f') strbuf_addc(b, '\f');
        else if (c == 'u') {
            unsigned long cp = hex4(s + p + 1);
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && p + 6 < e && s[p + 1] == '\\' && s[p + 2] == 'u') {
                unsigned long lo = hex4(s + p + 3);
                if (lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p += 6;
                }
            }
            add_utf8(b, cp);
        } else strbuf_addc(b, c); /* " \ / */
    }
    *end = e;
    return TC_OK;
}

/* ---- Python literals as JSON (LFM2's arguments) ---- */

static bool word_char(char c) {
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

/* a quoted Python string at i, written as a JSON string: the escapes JSON shares pass as
 * they are, \' becomes ', a " inside '...' is escaped */
static enum tc_read py_string(const char *s, size_t i, size_t n, strbuf *b, size_t *end) {
    char q = s[i];
    strbuf_addc(b, '"');
    for (size_t p = i + 1; p < n; p++) {
        unsigned char c = (unsigned char)s[p];
        if (c == (unsigned char)q) {
            strbuf_addc(b, '"');
            *end = p + 1;
            return TC_OK;
        }
        if (c == '\\') {
            if (++p >= n) return TC_MORE;
            char e = s[p];
            if (e == '\'') strbuf_addc(b, '\'');
            else if (e == 'u') {
                for (int k = 1; k <= 4; k++) {
                    if (p + k >= n) return TC_MORE;
                    if (!is_hex(s[p + k])) return TC_BAD;
                }
                strbuf_add(b, s + p - 1, 6);
                p += 4;
            } else if (strchr("\"\\/bfnrt", e) && e) {
                strbuf_addc(b, '\\');
                strbuf_addc(b, e);
            } else return TC_BAD;
            continue;
        }
        if (c == '"') strbuf_adds(b, "\\\"");
        else if (c == '\n') strbuf_adds(b, "\\n");
        else if (c == '\t') strbuf_adds(b, "\\t");
        else if (c == '\r') strbuf_adds(b, "\\r");
        else if (c < 0x20) strbuf_printf(b, "\\u%04x", c);
        else strbuf_addc(b, (char)c);
    }
    return TC_MORE;
}

static enum tc_read py_value(const char *s, size_t i, size_t n, strbuf *b, size_t *end, int depth) {
    if (i >= n) return TC_MORE;
    if (depth > TC_MAX_DEPTH) return TC_BAD;
    char c = s[i];
    if (c == '"' || c == '\'') return py_string(s, i, n, b, end);
    if (c == '-' || is_digit(c)) {
        size_t e = i;
        enum tc_read r = json_number(s, i, n, &e);
        if (r == TC_BAD) return r;
        if (r == TC_MORE && e <= i) return TC_MORE;
        strbuf_add(b, s + i, e - i);
        *end = e;
        return r;
    }
    if (word_char(c)) {
        static const char *const words[][2] = {
            {"True", "true"}, {"False", "false"}, {"None", "null"},
            {"true", "true"}, {"false", "false"}, {"null", "null"},
        };
        size_t e = i;
        while (e < n && word_char(s[e])) e++;
        for (size_t k = 0; k < sizeof words / sizeof words[0]; k++) {
            size_t m = strlen(words[k][0]);
            if (e - i == m && memcmp(s + i, words[k][0], m) == 0) {
                if (e >= n) return TC_MORE; /* "Tru" may be "True", "None" "Nonesuch" */
                strbuf_adds(b, words[k][1]);
                *end = e;
                return TC_OK;
            }
            if (e >= n && e - i < m && memcmp(s + i, words[k][0], e - i) == 0) return TC_MORE;
        }
        return TC_BAD;
    }
    if (c != '{' && c != '[') return TC_BAD;
    char close = c == '{' ? '}' : ']';
    strbuf_addc(b, c);
    size_t p = tc_skip_space(s, i + 1, n);
    if (p >= n) return TC_MORE;
    if (s[p] == close) {
        strbuf_addc(b, close);
        *end = p + 1;
        return TC_OK;
    }
    for (bool first = true;; first = false) {
        if (!first) strbuf_addc(b, ',');
        if (c == '{') {
            if (p >= n) return TC_MORE;
            if (s[p] != '"' && s[p] != '\'') return TC_BAD;
            enum tc_read r = py_string(s, p, n, b, &p);
            if (r != TC_OK) return r;
            p = tc_skip_space(s, p, n);
            if (p >= n) return TC_MORE;
            if (s[p] != ':') return TC_BAD;
            strbuf_addc(b, ':');
            p = tc_skip_space(s, p + 1, n);
        }
        size_t q;
        enum tc_read r = py_value(s, p, n, b, &q, depth + 1);
        if (r != TC_OK) return r;
        p = tc_skip_space(s, q, n);
        if (p >= n) return TC_MORE;
        if (s[p] == close) {
            strbuf_addc(b, close);
            *end = p + 1;
            return TC_OK;
        }
        if (s[p] != ',') return TC_BAD;
        p = tc_skip_space(s, p + 1, n);
    }
}

enum tc_read tc_py_value(const char *s, size_t i, size_t n, strbuf *b, size_t *end) {
    return py_value(s, i, n, b, end, 0);
}
