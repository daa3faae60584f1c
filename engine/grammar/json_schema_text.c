/* json_schema_text.c - the text the JSON schema conversion writes: a bounded growing
 * buffer, GBNF string literals, and characters as JSON strings spell them (the grammar
 * matches the JSON text, so a quote inside a string value is the two characters \"). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/json_schema_impl.h"

void schema_addn(schema_buf *b, const char *s, size_t n) {
    if (b->failed) return;
    if (b->n + n + 1 > SCHEMA_MAX_TEXT) {
        b->failed = 1;
        return;
    }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *s2 = realloc(b->s, cap);
        if (!s2) {
            b->failed = 1;
            return;
        }
        b->s = s2, b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

void schema_add(schema_buf *b, const char *s) { schema_addn(b, s, strlen(s)); }

void schema_printf(schema_buf *b, const char *fmt, ...) {
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (k < 0) {
        b->failed = 1;
        return;
    }
    if ((size_t)k < sizeof small) {
        schema_addn(b, small, (size_t)k);
        return;
    }
    char *big = malloc((size_t)k + 1);
    if (!big) {
        b->failed = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)k + 1, fmt, ap);
    va_end(ap);
    schema_addn(b, big, (size_t)k);
    free(big);
}

void schema_buf_free(schema_buf *b) {
    free(b->s);
    memset(b, 0, sizeof *b);
}

void schema_gbnf_literal(schema_buf *b, const char *raw, size_t n) {
    schema_add(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)raw[i];
        if (c == '"') schema_add(b, "\\\"");
        else if (c == '\\') schema_add(b, "\\\\");
        else if (c == '\n') schema_add(b, "\\n");
        else if (c == '\r') schema_add(b, "\\r");
        else if (c == '\t') schema_add(b, "\\t");
        else if (c < 0x20 || c == 0x7f) schema_printf(b, "\\x%02X", c);
        else schema_addn(b, raw + i, 1);
    }
    schema_add(b, "\"");
}

char *gbnf_literal(const char *raw, size_t n) {
    schema_buf b = {0};
    schema_gbnf_literal(&b, raw, n);
    if (!b.failed) return b.s;
    schema_buf_free(&b);
    return NULL;
}

size_t schema_json_escape(uint32_t cp, char out[8]) {
    static const char named[] = {['\b'] = 'b', ['\f'] = 'f', ['\n'] = 'n', ['\r'] = 'r', ['\t'] = 't'};
    if (cp == '"' || cp == '\\') {
        out[0] = '\\', out[1] = (char)cp;
        return 2;
    }
    if (cp < 0x20) {
        if (cp < sizeof named && named[cp]) {
            out[0] = '\\', out[1] = named[cp];
            return 2;
        }
        snprintf(out, 8, "\\u%04x", (unsigned)cp);
        return 6;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12), out[1] = (char)(0x80 | (cp >> 6 & 0x3F)), out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18), out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F)), out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t schema_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned char c = s[0];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || len > n) return 0;
    uint32_t v = len == 1 ? c : len == 2 ? c & 0x1Fu : len == 3 ? c & 0x0Fu : c & 0x07u;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3Fu);
    }
    static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < least[len] || v > 0x10FFFF) return 0;
    *cp = v;
    return len;
}
