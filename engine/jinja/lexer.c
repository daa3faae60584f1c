/* lexer.c - template text to tokens, following python-jinja2's lexer rule for rule. */
#include "engine/jinja/lexer.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/jinja/pyunicode.h"

void jc_fail(jcompile *c, int line, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(c->error, sizeof c->error, "line %d: %s", line, msg);
    longjmp(c->jmp, 1);
}

void *jc_alloc(jcompile *c, size_t n) {
    void *p = jarena_alloc(&c->t->arena, n);
    if (!p) jc_fail(c, 0, "out of memory");
    return p;
}

typedef struct {
    jcompile *c;
    const char *s;
    size_t n, pos;
    int line;              /* line at pos */
    int line_starting;     /* the previous match ended with a newline */
    char balance[256];     /* open brackets inside a tag, as jinja2's balancing stack */
    int nbalance;
} lexer;

/* bytes of the Python whitespace code point at s[i], or 0 */
static size_t ws_at(const lexer *L, size_t i) {
    if (i >= L->n) return 0;
    unsigned char ch = (unsigned char)L->s[i];
    if (ch < 0x80) return py_isspace(ch) ? 1 : 0;
    size_t adv;
    uint32_t cp = u8_decode(L->s + i, L->n - i, &adv);
    return py_isspace(cp) ? adv : 0;
}

static size_t skip_ws(const lexer *L, size_t i) {
    size_t w;
    while ((w = ws_at(L, i)) > 0) i += w;
    return i;
}

static int starts(const lexer *L, size_t i, const char *lit) {
    size_t k = strlen(lit);
    return i + k <= L->n && memcmp(L->s + i, lit, k) == 0;
}

static int count_lines(const char *s, size_t n) {
    int lines = 0;
    for (size_t i = 0; i < n; i++) lines += s[i] == '\n';
    return lines;
}

static jtok *emit(lexer *L, int kind, size_t start, size_t len) {
    jcompile *c = L->c;
    if (c->ntoks == c->cap) {
        int cap = c->cap ? c->cap * 2 : 256;
        jtok *t = jc_alloc(c, (size_t)cap * sizeof *t);
        if (c->ntoks) memcpy(t, c->toks, (size_t)c->ntoks * sizeof *t);
        c->toks = t;
        c->cap = cap;
    }
    jtok *t = &c->toks[c->ntoks++];
    memset(t, 0, sizeof *t);
    t->kind = (uint8_t)kind;
    t->line = L->line + count_lines(L->s + L->pos, start > L->pos ? start - L->pos : 0);
    t->text.p = L->s + start;
    t->text.n = (uint32_t)len;
    return t;
}

static void advance(lexer *L, size_t to) {
    L->line += count_lines(L->s + L->pos, to - L->pos);
    L->line_starting = to > L->pos && L->s[to - 1] == '\n';
    L->pos = to;
}

/* The text before a tag, as jinja2's OptionalLStrip rule leaves it: sign '-' strips all
 * trailing whitespace; otherwise, for a block or comment tag (not a variable) and without
 * '+', whitespace alone between the last line start and the tag goes (lstrip_blocks). */
static void emit_text(lexer *L, size_t start, size_t end, char sign, int is_variable) {
    size_t e = end;
    if (sign == '-') {  /* rstrip: up to the end of the last code point that is not whitespace */
        size_t i = start;
        e = start;
        while (i < end) {
            size_t adv;
            uint32_t cp = u8_decode(L->s + i, end - i, &adv);
            i += adv;
            if (!py_isspace(cp)) e = i;
        }
    } else if (sign != '+' && !is_variable) {
        size_t l_pos = start;
        for (size_t k = end; k > start; k--)
            if (L->s[k - 1] == '\n') { l_pos = k; break; }
        if ((l_pos > start || (l_pos == start && L->line_starting)) && l_pos < end && skip_ws(L, l_pos) == end)
            e = l_pos;
    }
    if (e > start) emit(L, JT_DATA, start, e - start);
}

/* ---- tokens inside a tag ---- */

static int is_name_start(unsigned char ch) { return ch == '_' || ((ch | 32) >= 'a' && (ch | 32) <= 'z') || ch >= 0x80; }
static int is_name_char(unsigned char ch) { return is_name_start(ch) || (ch >= '0' && ch <= '9'); }
static int is_digit(unsigned char ch) { return ch >= '0' && ch <= '9'; }

/* (\d+_)*\d+ from i; returns the end or i if none */
static size_t digits_us(const lexer *L, size_t i) {
    size_t j = i;
    for (;;) {
        size_t k = j;
        while (k < L->n && is_digit((unsigned char)L->s[k])) k++;
        if (k == j) return j == i ? i : j - 1;  /* a trailing "_" is not part of it */
        if (k < L->n && L->s[k] == '_' && k + 1 < L->n && is_digit((unsigned char)L->s[k + 1])) {
            j = k + 1;
            continue;
        }
        return k;
    }
}

/* jinja2's float_re: digits with an exponent and/or a fraction, not right after a '.' */
static size_t match_float(const lexer *L, size_t i) {
    if (i > 0 && L->s[i - 1] == '.') return 0;
    size_t j = digits_us(L, i);
    if (j == i) return 0;
    size_t frac = 0;
    if (j < L->n && L->s[j] == '.') {
        size_t k = digits_us(L, j + 1);
        if (k > j + 1) frac = k;
    }
    size_t after = frac ? frac : j;
    if (after < L->n && (L->s[after] | 32) == 'e') {
        size_t k = after + 1;
        if (k < L->n && (L->s[k] == '+' || L->s[k] == '-')) k++;
        size_t m = digits_us(L, k);
        if (m > k) return m;
    }
    return frac ? frac : 0;
}

/* jinja2's integer_re: 0b/0o/0x with "_" between digits, decimal, or zeros */
static size_t match_int(const lexer *L, size_t i) {
    const char *s = L->s;
    if (s[i] == '0' && i + 1 < L->n && strchr("bBoOxX", s[i + 1]) && s[i + 1]) {
        int base = (s[i + 1] | 32) == 'b' ? 2 : (s[i + 1] | 32) == 'o' ? 8 : 16;
        size_t j = i + 2;
        for (;;) {
            size_t k = j < L->n && s[j] == '_' ? j + 1 : j;
            if (k >= L->n) break;
            int ch = s[k] | 32, d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : 99;
            if (d >= base) break;
            j = k + 1;
        }
        if (j > i + 2) return j;
    }
    if (s[i] >= '1' && s[i] <= '9') {
        size_t j = i + 1;
        for (;;) {
            size_t k = j < L->n && s[j] == '_' ? j + 1 : j;
            if (k < L->n && is_digit((unsigned char)s[k])) j = k + 1;
            else break;
        }
        return j;
    }
    if (s[i] == '0') {
        size_t j = i + 1;
        for (;;) {
            size_t k = j < L->n && s[j] == '_' ? j + 1 : j;
            if (k < L->n && s[k] == '0') j = k + 1;
            else break;
        }
        return j;
    }
    return 0;
}

static void int_value(lexer *L, jtok *t) {
    char buf[80];
    size_t k = 0;
    for (uint32_t i = 0; i < t->text.n && k < sizeof buf - 1; i++)
        if (t->text.p[i] != '_') buf[k++] = t->text.p[i];
    buf[k] = 0;
    int base = 10;
    const char *digits = buf;
    if (k > 1 && buf[0] == '0' && (buf[1] | 32) >= 'a') {
        base = (buf[1] | 32) == 'b' ? 2 : (buf[1] | 32) == 'o' ? 8 : 16;
        digits = buf + 2;
    }
    errno = 0;
    unsigned long long v = strtoull(digits, NULL, base);
    if (errno || v > INT64_MAX || t->text.n >= sizeof buf - 1)
        jc_fail(L->c, t->line, "integer literal too large");
    t->ival = (int64_t)v;
}

static void float_value(lexer *L, jtok *t) {
    char buf[400];
    size_t k = 0;
    for (uint32_t i = 0; i < t->text.n && k < sizeof buf - 1; i++)
        if (t->text.p[i] != '_') buf[k++] = t->text.p[i];
    buf[k] = 0;
    /* strtod reads the locale's decimal point: give it the one it expects */
    char point = localeconv()->decimal_point[0];
    for (size_t i = 0; i < k; i++)
        if (buf[i] == '.') buf[i] = point;
    t->fval = strtod(buf, NULL);
}

static int hexval(int ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    ch |= 32;
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    return -1;
}

/* The value of a string literal's body: Python's unicode-escape decoding of the text with
 * non-ASCII characters written as escapes first (jinja2 encodes with backslashreplace), so a
 * backslash before a non-ASCII character leaves the text of that escape. */
static void string_value(lexer *L, jtok *t, size_t body, size_t len) {
    char *out = jc_alloc(L->c, len * 4 + 1), *o = out;
    const char *s = L->s + body;
    size_t i = 0;
    while (i < len) {
        if (s[i] != '\\') { *o++ = s[i++]; continue; }
        i++;  /* the body never ends in a lone backslash: the literal's pattern pairs them */
        unsigned char e = (unsigned char)s[i];
        if (e >= 0x80) {
            size_t adv;
            uint32_t cp = u8_decode(s + i, len - i, &adv);
            *o++ = '\\';
            if (cp & PY_BAD_BYTE) { *o++ = (char)e; i++; continue; }
            o += cp < 0x100 ? sprintf(o, "x%02x", cp) : cp < 0x10000 ? sprintf(o, "u%04x", cp) : sprintf(o, "U%08x", cp);
            i += adv;
            continue;
        }
        i++;
        switch (e) {
        case '\n': break;  /* line continuation */
        case '\\': *o++ = '\\'; break;
        case '\'': *o++ = '\''; break;
        case '"': *o++ = '"'; break;
        case 'a': *o++ = '\a'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'v': *o++ = '\v'; break;
        case 'x': case 'u': case 'U': {
            int want = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int k = 0; k < want; k++) {
                int h = i < len ? hexval((unsigned char)s[i]) : -1;
                if (h < 0) jc_fail(L->c, t->line, "truncated \\%c%s escape", e, e == 'x' ? "XX" : e == 'u' ? "XXXX" : "XXXXXXXX");
                cp = cp * 16 + (uint32_t)h;
                i++;
            }
            if (cp > 0x10FFFF) jc_fail(L->c, t->line, "illegal Unicode character");
            o += u8_encode(cp, o);
            break;
        }
        case 'N': jc_fail(L->c, t->line, "\\N{...} escapes are not supported");
        default:
            if (e >= '0' && e <= '7') {
                uint32_t cp = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && i < len && s[i] >= '0' && s[i] <= '7'; k++) cp = cp * 8 + (uint32_t)(s[i++] - '0');
                o += u8_encode(cp, o);
            } else {
                *o++ = '\\';
                *o++ = (char)e;
            }
        }
    }
    *o = 0;
    t->text.p = out;
    t->text.n = (uint32_t)(o - out);
}

static const struct {
    const char *text;
    int kind;
} operators[] = {
    {"//", JT_FLOORDIV}, {"**", JT_POW}, {"==", JT_EQ}, {"!=", JT_NE}, {">=", JT_GTEQ}, {"<=", JT_LTEQ},
    {"+", JT_ADD}, {"-", JT_SUB}, {"/", JT_DIV}, {"*", JT_MUL}, {"%", JT_MOD}, {"~", JT_TILDE},
    {"[", JT_LBRACKET}, {"]", JT_RBRACKET}, {"(", JT_LPAREN}, {")", JT_RPAREN}, {"{", JT_LBRACE},
    {"}", JT_RBRACE}, {">", JT_GT}, {"<", JT_LT}, {"=", JT_ASSIGN}, {".", JT_DOT}, {":", JT_COLON},
    {"|", JT_PIPE}, {",", JT_COMMA}, {";", JT_SEMICOLON},
};

/* one token inside a tag at L->pos (whitespace skipped); returns 0 at the end of the text */
static int tag_token(lexer *L) {
    size_t i = L->pos, w = skip_ws(L, i);
    if (w > i) { advance(L, w); return 1; }
    if (i >= L->n) return 0;
    const char *s = L->s;
    unsigned char ch = (unsigned char)s[i];
    size_t end;
    if (is_digit(ch)) {
        if ((end = match_float(L, i)) > 0) {
            float_value(L, emit(L, JT_FLOAT, i, end - i));
            advance(L, end);
            return 1;
        }
        end = match_int(L, i);
        int_value(L, emit(L, JT_INT, i, end - i));
        advance(L, end);
        return 1;
    }
    if (is_name_start(ch)) {
        end = i;
        while (end < L->n && is_name_char((unsigned char)s[end]) && !ws_at(L, end)) end++;
        emit(L, JT_NAME, i, end - i);
        advance(L, end);
        return 1;
    }
    if (ch == '\'' || ch == '"') {
        end = i + 1;
        while (end < L->n && s[end] != (char)ch) end += s[end] == '\\' ? 2 : 1;
        if (end < L->n) {
            jtok *t = emit(L, JT_STRING, i, end + 1 - i);
            string_value(L, t, i + 1, end - i - 1);
            advance(L, end + 1);
            return 1;
        }
    }
    for (size_t k = 0; k < sizeof operators / sizeof operators[0]; k++) {
        if (!starts(L, i, operators[k].text)) continue;
        int kind = operators[k].kind, line = L->line;
        if (kind == JT_LBRACE || kind == JT_LPAREN || kind == JT_LBRACKET) {
            if (L->nbalance == (int)sizeof L->balance) jc_fail(L->c, line, "brackets nested too deeply");
            L->balance[L->nbalance++] = kind == JT_LBRACE ? '}' : kind == JT_LPAREN ? ')' : ']';
        } else if (kind == JT_RBRACE || kind == JT_RPAREN || kind == JT_RBRACKET) {
            char c = s[i];
            if (!L->nbalance) jc_fail(L->c, line, "unexpected '%c'", c);
            char want = L->balance[--L->nbalance];
            if (want != c) jc_fail(L->c, line, "unexpected '%c', expected '%c'", c, want);
        }
        emit(L, kind, i, strlen(operators[k].text));
        advance(L, i + strlen(operators[k].text));
        return 1;
    }
    if (ch == '\'') jc_fail(L->c, L->line, "unexpected char \"'\"");
    if (ch >= 0x20 && ch < 0x7F) jc_fail(L->c, L->line, "unexpected char '%c'", ch);
    jc_fail(L->c, L->line, "unexpected char 0x%02x", ch);
}

/* the end of a {% %} or {{ }} tag at i, or 0: sets *end past it (and what it strips) */
static int tag_end(const lexer *L, size_t i, int block, size_t *end) {
    const char *close = block ? "%}" : "}}";
    if (block && starts(L, i, "+%}")) { *end = i + 3; return 1; }
    if (L->s[i] == '-' && starts(L, i + 1, close)) { *end = skip_ws(L, i + 3); return 1; }
    if (starts(L, i, close)) {
        *end = i + 2;
        if (block && *end < L->n && L->s[*end] == '\n') (*end)++;  /* trim_blocks */
        return 1;
    }
    return 0;
}

static void lex_tag(lexer *L, int block) {
    L->nbalance = 0;
    for (;;) {
        size_t end;
        if (L->pos < L->n && !L->nbalance && tag_end(L, L->pos, block, &end)) {
            emit(L, block ? JT_BLOCK_END : JT_VAR_END, L->pos, end - L->pos);
            advance(L, end);
            return;
        }
        if (!tag_token(L)) return;  /* the end of the text: the parser reports it */
    }
}

static void lex_comment(lexer *L) {
    for (size_t i = L->pos; i < L->n; i++) {
        if (L->s[i] == '+' && starts(L, i + 1, "#}")) { advance(L, i + 3); return; }
        if (L->s[i] == '-' && starts(L, i + 1, "#}")) { advance(L, skip_ws(L, i + 3)); return; }
        if (starts(L, i, "#}")) {
            size_t end = i + 2;
            if (end < L->n && L->s[end] == '\n') end++;  /* trim_blocks */
            advance(L, end);
            return;
        }
    }
    jc_fail(L->c, L->line, "Missing end of comment tag");
}

/* {%(-|+|)\s*WORD\s*(-%}\s*|%}) at i for WORD raw: sets *end; for endraw also +%} and the
 * trimmed newline. *sign = the character after {% */
static int match_raw_tag(const lexer *L, size_t i, const char *word, size_t *end, char *sign) {
    if (!starts(L, i, "{%")) return 0;
    size_t j = i + 2;
    *sign = 0;
    if (j < L->n && (L->s[j] == '-' || L->s[j] == '+')) *sign = L->s[j++];
    j = skip_ws(L, j);
    if (!starts(L, j, word)) return 0;
    j = skip_ws(L, j + strlen(word));
    int endraw = word[0] == 'e';
    if (endraw && starts(L, j, "+%}")) { *end = j + 3; return 1; }
    if (starts(L, j, "-%}")) { *end = skip_ws(L, j + 3); return 1; }
    if (starts(L, j, "%}")) {
        *end = j + 2;
        if (endraw && *end < L->n && L->s[*end] == '\n') (*end)++;
        return 1;
    }
    return 0;
}

static void lex_raw(lexer *L) {
    for (size_t i = L->pos; i < L->n; i++) {
        size_t end;
        char sign;
        if (L->s[i] == '{' && match_raw_tag(L, i, "endraw", &end, &sign)) {
            emit_text(L, L->pos, i, sign, 0);
            advance(L, end);
            return;
        }
    }
    jc_fail(L->c, L->line, "Missing end of raw directive");
}

/* \r\n and \r become \n; one trailing newline goes (keep_trailing_newline=False) */
static size_t normalize(const char *in, size_t n, char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (in[i] == '\r') {
            out[k++] = '\n';
            if (i + 1 < n && in[i + 1] == '\n') i++;
        } else out[k++] = in[i];
    }
    if (k > 0 && out[k - 1] == '\n') k--;
    out[k] = 0;
    return k;
}

void jlex(jcompile *c, const char *text, size_t len) {
    char *src = jc_alloc(c, len + 1);
    lexer L = {.c = c, .s = src, .n = normalize(text, len, src), .pos = 0, .line = 1, .line_starting = 1};
    while (L.pos < L.n) {
        /* the next tag start; data before it */
        size_t i = L.pos;
        const char *s = L.s;
        for (;;) {
            const char *brace = memchr(s + i, '{', L.n - i);
            if (!brace) { i = L.n; break; }
            i = (size_t)(brace - s);
            if (i + 1 < L.n && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#')) break;
            i++;
        }
        if (i >= L.n) {
            emit(&L, JT_DATA, L.pos, L.n - L.pos);
            advance(&L, L.n);
            break;
        }
        char type = s[i + 1];
        char sign = i + 2 < L.n && (s[i + 2] == '-' || s[i + 2] == '+') ? s[i + 2] : 0;
        size_t raw_end;
        char raw_sign;
        if (type == '%' && match_raw_tag(&L, i, "raw", &raw_end, &raw_sign)) {
            emit_text(&L, L.pos, i, raw_sign, 0);
            advance(&L, raw_end);
            lex_raw(&L);
            continue;
        }
        emit_text(&L, L.pos, i, sign, type == '{');
        size_t begin_len = sign ? 3 : 2;
        if (type == '#') {
            advance(&L, i + begin_len);
            lex_comment(&L);
            continue;
        }
        emit(&L, type == '%' ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, i, begin_len);
        advance(&L, i + begin_len);
        lex_tag(&L, type == '%');
    }
    emit(&L, JT_EOF, L.n, 0);
}
