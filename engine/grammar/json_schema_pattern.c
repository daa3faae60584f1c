/* json_schema_pattern.c - a schema's `pattern` (an ECMA-262 regular expression) as GBNF,
 * as llama.cpp's _visit_pattern translates it: literals, classes, groups, alternation,
 * `? * + {m,n}`, `.`, the anchors ^ and $ at the ends (`^a|b$` takes each alternative
 * whole, as llama.cpp does: what such a schema means, a subset of what the regex admits).
 *
 * Unlike llama.cpp the grammar matches the JSON text of the string: a quote the pattern
 * admits is written \", a newline \n, and `.` or a negated class never admits a raw quote,
 * backslash or control character (each becomes its escape; those without a short escape
 * are left out). A side without its anchor admits any characters there, as the pattern
 * matches anywhere in the value. What has no grammar equivalent (lookaround,
 * backreferences, word boundaries, anchors inside) is refused with the reason, never
 * widened to any string. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/json_schema_impl.h"

#define MAX_DEPTH 100
#define MAX_RANGES 512
#define MAX_CP 0x10FFFFu

typedef struct {
    uint32_t lo, hi;
} cp_range;

typedef struct {
    cp_range r[MAX_RANGES + 1]; /* a negation adds one */
    int n;
} cp_set;

typedef struct {
    const char *s;
    size_t n, i;
    int depth;
    char *err;
    size_t errlen;
    int failed;
} rx;

static int rx_fail(rx *r, const char *what) {
    if (!r->failed) snprintf(r->err, r->errlen, "%s", what);
    r->failed = 1;
    return -1;
}

static int set_add(rx *r, cp_set *s, uint32_t lo, uint32_t hi) {
    if (s->n == MAX_RANGES) return rx_fail(r, "a character class with too many ranges");
    s->r[s->n++] = (cp_range){lo, hi};
    return 0;
}

static int by_lo(const void *a, const void *b) {
    const cp_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static void set_normalize(cp_set *s) {
    qsort(s->r, (size_t)s->n, sizeof *s->r, by_lo);
    int k = 0;
    for (int i = 0; i < s->n; i++) {
        if (k && s->r[i].lo <= s->r[k - 1].hi + 1) {
            if (s->r[i].hi > s->r[k - 1].hi) s->r[k - 1].hi = s->r[i].hi;
        } else s->r[k++] = s->r[i];
    }
    s->n = k;
}

static void set_negate(cp_set *s) {
    set_normalize(s);
    cp_set out = {.n = 0};
    uint32_t next = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->r[i].lo > next) out.r[out.n++] = (cp_range){next, s->r[i].lo - 1};
        next = s->r[i].hi + 1;
    }
    if (next <= MAX_CP) out.r[out.n++] = (cp_range){next, MAX_CP};
    *s = out;
}

static int set_has(const cp_set *s, uint32_t cp) {
    for (int i = 0; i < s->n; i++)
        if (s->r[i].lo <= cp && cp <= s->r[i].hi) return 1;
    return 0;
}

static void class_char(strbuf *o, uint32_t cp) {
    if (cp == '\\' || cp == ']' || cp == '-' || cp == '^' || cp == '[' || cp < 0x20 || cp == 0x7F) strbuf_printf(o, "\\x%02X", (unsigned)cp);
    else if (cp >= 0xD800 && cp <= 0xDFFF) strbuf_printf(o, "\\u%04X", (unsigned)cp);
    else if (cp > 0xFFFF) strbuf_printf(o, "\\U%08X", (unsigned)cp); /* rare planes: readable as numbers */
    else {
        char u[8];
        strbuf_add(o, u, schema_json_escape(cp, u));
    }
}

/* A set of code points as a single GBNF item for the JSON text of one such character:
 * a class of the characters a JSON string holds raw, and the escapes of the others. */
static int emit_set(rx *r, strbuf *o, cp_set *s) {
    set_normalize(s);
    /* the raw part: the set within what a JSON string holds unescaped */
    static const cp_range plain[] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, MAX_CP}};
    strbuf raw = SCHEMA_BUF;
    for (int i = 0; i < s->n; i++) {
        for (size_t k = 0; k < sizeof plain / sizeof *plain; k++) {
            uint32_t lo = s->r[i].lo > plain[k].lo ? s->r[i].lo : plain[k].lo;
            uint32_t hi = s->r[i].hi < plain[k].hi ? s->r[i].hi : plain[k].hi;
            if (lo > hi) continue;
            class_char(&raw, lo);
            if (hi > lo) strbuf_adds(&raw, "-"), class_char(&raw, hi);
        }
    }
    int items = 0;
    strbuf alt = SCHEMA_BUF;
    if (raw.n) strbuf_adds(&alt, "["), strbuf_add(&alt, raw.s, raw.n), strbuf_adds(&alt, "]"), items++;
    strbuf_free(&raw);
    static const uint32_t named[] = {'"', '\\', '\n', '\t', '\r', '\b', '\f'};
    for (size_t k = 0; k < sizeof named / sizeof *named; k++) {
        if (!set_has(s, named[k])) continue;
        char e[8];
        size_t n = schema_json_escape(named[k], e);
        if (items++) strbuf_adds(&alt, " | ");
        schema_gbnf_literal(&alt, e, n);
    }
    int all_controls = 1;
    for (uint32_t c = 0; c < 0x20; c++) all_controls &= set_has(s, c);
    if (all_controls) strbuf_adds(&alt, items++ ? " | " : ""), strbuf_adds(&alt, "\"\\\\u00\" [01] [0-9a-fA-F]");
    if (!items) {
        strbuf_free(&alt);
        return rx_fail(r, "a character class that matches nothing");
    }
    if (items > 1) strbuf_adds(o, "("), strbuf_add(o, alt.s, alt.n), strbuf_adds(o, ")");
    else strbuf_add(o, alt.s, alt.n);
    strbuf_free(&alt);
    return 0;
}

static int hex_value(rx *r, size_t digits, uint32_t *cp) {
    if (r->i + digits > r->n) return rx_fail(r, "a \\x or \\u escape without its hex digits");
    uint32_t v = 0;
    for (size_t k = 0; k < digits; k++) {
        char h = r->s[r->i + k];
        int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (d < 0) return rx_fail(r, "a \\x or \\u escape without its hex digits");
        v = v * 16 + (uint32_t)d;
    }
    r->i += digits;
    *cp = v;
    return 0;
}

/* The escape after a backslash (r->i past it): a single code point (returns 1, *cp), or
 * a shorthand class added to s (returns 2); -1 on an unsupported one. */
static int escape(rx *r, uint32_t *cp, cp_set *s, int in_class) {
    if (r->i >= r->n) return rx_fail(r, "a trailing backslash");
    char e = r->s[r->i++];
    switch (e) {
    case 'n': *cp = '\n'; return 1;
    case 't': *cp = '\t'; return 1;
    case 'r': *cp = '\r'; return 1;
    case 'f': *cp = '\f'; return 1;
    case 'v': *cp = '\v'; return 1;
    case '0': *cp = 0; return 1;
    case 'x': return hex_value(r, 2, cp) ? -1 : 1;
    case 'u':
        if (r->i < r->n && r->s[r->i] == '{') return rx_fail(r, "unsupported escape \\u{...}");
        return hex_value(r, 4, cp) ? -1 : 1;
    case 'd': return set_add(r, s, '0', '9') ? -1 : 2;
    case 'w':
        if (set_add(r, s, '0', '9') || set_add(r, s, 'A', 'Z') || set_add(r, s, '_', '_') || set_add(r, s, 'a', 'z'))
            return -1;
        return 2;
    case 's':
        if (in_class) return rx_fail(r, "unsupported escape \\s inside a character class");
        if (set_add(r, s, '\t', '\r') || set_add(r, s, ' ', ' ')) return -1;
        return 2;
    default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '1' && e <= '9')) {
            char m[64];
            snprintf(m, sizeof m, "unsupported escape \\%c", e);
            return rx_fail(r, m);
        }
        if (e == 'b' && in_class) {
            *cp = '\b';
            return 1;
        }
        *cp = (unsigned char)e; /* an escaped punctuation character is itself */
        return 1;
    }
}

/* one code point of the pattern's text (UTF-8) */
static int literal_cp(rx *r, uint32_t *cp) {
    size_t k = schema_utf8_decode((const unsigned char *)r->s + r->i, r->n - r->i, cp);
    if (!k) return rx_fail(r, "the pattern is not UTF-8");
    r->i += k;
    return 0;
}

/* '[' ... ']' (r->i past '[') */
static int char_class(rx *r, strbuf *o) {
    cp_set s = {.n = 0};
    int negate = r->i < r->n && r->s[r->i] == '^';
    if (negate) r->i++;
    int first = 1;
    while (r->i < r->n && (r->s[r->i] != ']' || first)) {
        first = 0;
        uint32_t lo;
        int kind = 1;
        if (r->s[r->i] == '\\') {
            r->i++;
            kind = escape(r, &lo, &s, 1);
            if (kind < 0) return -1;
        } else if (r->s[r->i] == '[' && r->i + 1 < r->n && r->s[r->i + 1] == ':') {
            return rx_fail(r, "unsupported POSIX class [:...:]");
        } else if (literal_cp(r, &lo)) return -1;
        if (kind == 2) continue;
        uint32_t hi = lo;
        if (r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
            r->i++;
            if (r->s[r->i] == '\\') {
                r->i++;
                cp_set dummy = {.n = 0};
                int k2 = escape(r, &hi, &dummy, 1);
                if (k2 < 0) return -1;
                if (k2 == 2) return rx_fail(r, "a range to a shorthand class");
            } else if (literal_cp(r, &hi)) return -1;
            if (hi < lo) return rx_fail(r, "a character range out of order");
        }
        if (set_add(r, &s, lo, hi)) return -1;
    }
    if (r->i >= r->n) return rx_fail(r, "an unterminated character class");
    r->i++;
    if (negate) set_negate(&s);
    return emit_set(r, o, &s);
}

static int alternatives(rx *r, strbuf *o);

/* a quantifier after an item, appended to it; 0 when there is none */
static int quantifier(rx *r, strbuf *item) {
    if (r->i >= r->n) return 0;
    char c = r->s[r->i];
    if (c == '*' || c == '+' || c == '?') {
        r->i++;
        strbuf_add(item, &c, 1);
    } else if (c == '{') {
        size_t j = r->i + 1;
        long m = -1, n = -1;
        char *end;
        if (j < r->n && r->s[j] >= '0' && r->s[j] <= '9') m = strtol(r->s + j, &end, 10), j = (size_t)(end - r->s);
        int comma = j < r->n && r->s[j] == ',';
        if (comma) {
            j++;
            if (j < r->n && r->s[j] >= '0' && r->s[j] <= '9') n = strtol(r->s + j, &end, 10), j = (size_t)(end - r->s);
        }
        if (m < 0 || j >= r->n || r->s[j] != '}') return rx_fail(r, "a '{' that is not a repetition {m}, {m,} or {m,n}");
        if (m > SCHEMA_MAX_REPEAT || n > SCHEMA_MAX_REPEAT) return rx_fail(r, "a repetition past 2000, the grammar's bound");
        if (comma && n >= 0 && n < m) return rx_fail(r, "a repetition's bounds out of order");
        r->i = j + 1;
        if (!comma) strbuf_printf(item, "{%ld}", m);
        else if (n < 0) strbuf_printf(item, "{%ld,}", m);
        else strbuf_printf(item, "{%ld,%ld}", m, n);
    } else return 0;
    if (r->i < r->n && r->s[r->i] == '?') r->i++; /* lazy: the same language */
    else if (r->i < r->n && r->s[r->i] == '+') return rx_fail(r, "unsupported possessive quantifier");
    if (r->i < r->n && strchr("*+?{", r->s[r->i])) return rx_fail(r, "a quantifier after a quantifier");
    return 1;
}

static void flush_literal(strbuf *o, strbuf *lit, int *items) {
    if (!lit->n) return;
    if ((*items)++) strbuf_adds(o, " ");
    schema_gbnf_literal(o, lit->s, lit->n);
    lit->n = 0;
}

/* a sequence up to '|' or ')' or the end; consecutive literal characters merge */
static int sequence(rx *r, strbuf *o) {
    strbuf lit = SCHEMA_BUF;
    int items = 0;
    while (r->i < r->n && r->s[r->i] != '|' && r->s[r->i] != ')') {
        char c = r->s[r->i];
        strbuf item = SCHEMA_BUF;
        uint32_t cp = 0;
        int is_literal = 0;
        if (c == '(') {
            r->i++;
            if (r->i < r->n && r->s[r->i] == '?') {
                if (r->i + 1 < r->n && r->s[r->i + 1] == ':') r->i += 2;
                else if (r->i + 2 < r->n && (r->s[r->i + 1] == '<' || r->s[r->i + 1] == 'P') && r->s[r->i + 2] != '=' &&
                         r->s[r->i + 2] != '!') {
                    const char *close = memchr(r->s + r->i, '>', r->n - r->i); /* a named group is a group */
                    if (!close) rx_fail(r, "an unterminated group name");
                    else r->i = (size_t)(close - r->s) + 1;
                } else rx_fail(r, "unsupported group (?...): lookaround or inline flags");
            }
            if (!r->failed && ++r->depth > MAX_DEPTH) rx_fail(r, "groups nested deeper than 100");
            if (!r->failed) {
                strbuf_adds(&item, "(");
                alternatives(r, &item);
                strbuf_adds(&item, ")");
                if (!r->failed && (r->i >= r->n || r->s[r->i] != ')')) rx_fail(r, "unbalanced parentheses");
                r->i++, r->depth--;
            }
        } else if (c == '[') {
            r->i++;
            char_class(r, &item);
        } else if (c == '.') {
            r->i++;
            cp_set s = {.n = 2, .r = {{'\n', '\n'}, {'\r', '\r'}}};
            set_negate(&s);
            emit_set(r, &item, &s);
        } else if (c == '^' || c == '$') {
            rx_fail(r, "an anchor ^ or $ inside the pattern");
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            rx_fail(r, c == '{' ? "a '{' that is not a repetition {m}, {m,} or {m,n}" : "nothing to repeat");
        } else if (c == ']' || c == '}') {
            rx_fail(r, "an unbalanced ']' or '}'");
        } else if (c == '\\') {
            r->i++;
            cp_set s = {.n = 0};
            int kind = escape(r, &cp, &s, 0);
            if (kind == 2) emit_set(r, &item, &s);
            else if (kind == 1) is_literal = 1;
        } else if (!literal_cp(r, &cp)) {
            is_literal = 1;
        }
        if (r->failed) {
            strbuf_free(&item), strbuf_free(&lit);
            return -1;
        }
        if (is_literal) {
            char e[8];
            size_t k = schema_json_escape(cp, e);
            strbuf one = SCHEMA_BUF;
            schema_gbnf_literal(&one, e, k);
            int q = quantifier(r, &one);
            if (q == 0) strbuf_add(&lit, e, k);
            else if (q > 0) flush_literal(o, &lit, &items), strbuf_adds(o, items++ ? " " : ""), strbuf_add(o, one.s, one.n);
            strbuf_free(&one);
        } else {
            quantifier(r, &item); /* appended to the item, when there is one */
            flush_literal(o, &lit, &items);
            if (!r->failed) strbuf_adds(o, items++ ? " " : ""), strbuf_add(o, item.s, item.n);
        }
        strbuf_free(&item);
        if (r->failed) {
            strbuf_free(&lit);
            return -1;
        }
    }
    flush_literal(o, &lit, &items);
    strbuf_free(&lit);
    return 0;
}

static int alternatives(rx *r, strbuf *o) {
    if (sequence(r, o)) return -1;
    while (r->i < r->n && r->s[r->i] == '|') {
        r->i++;
        strbuf_adds(o, " | ");
        if (sequence(r, o)) return -1;
    }
    return 0;
}

int schema_pattern(strbuf *out, const char *pattern, size_t n, int *uses_char, char *err, size_t errlen) {
    size_t start = 0, end = n;
    int anchored_start = n > 0 && pattern[0] == '^';
    if (anchored_start) start = 1;
    int anchored_end = 0;
    if (end > start && pattern[end - 1] == '$') {
        size_t slashes = 0;
        while (end - 1 - slashes > start && pattern[end - 2 - slashes] == '\\') slashes++;
        anchored_end = slashes % 2 == 0;
        if (anchored_end) end--;
    }
    rx r = {.s = pattern + start, .n = end - start, .err = err, .errlen = errlen};
    strbuf body = SCHEMA_BUF;
    alternatives(&r, &body);
    if (!r.failed && r.i < r.n) rx_fail(&r, "unbalanced parentheses");
    if (r.failed) {
        strbuf_free(&body);
        return -1;
    }
    strbuf_adds(out, "\"\\\"\" ");
    if (!anchored_start) strbuf_adds(out, "char* "), *uses_char = 1;
    strbuf_adds(out, "(");
    strbuf_add(out, body.s ? body.s : "", body.n);
    strbuf_adds(out, ")");
    if (!anchored_end) strbuf_adds(out, " char*"), *uses_char = 1;
    strbuf_adds(out, " \"\\\"\"");
    strbuf_free(&body);
    return 0;
}
