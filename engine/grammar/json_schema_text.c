/* json_schema_text.c - the text the JSON schema conversion writes: GBNF string
 * literals, and characters as JSON strings spell them (the grammar
 * matches the JSON text, so a quote inside a string value is the two characters \"). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/json_schema_impl.h"

void schema_gbnf_literal(strbuf *b, const char *raw, size_t n) {
    strbuf_adds(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)raw[i];
        if (c == '"') strbuf_adds(b, "\\\"");
        else if (c == '\\') strbuf_adds(b, "\\\\");
        else if (c == '\n') strbuf_adds(b, "\\n");
        else if (c == '\r') strbuf_adds(b, "\\r");
        else if (c == '\t') strbuf_adds(b, "\\t");
        else if (c < 0x20 || c == 0x7f) strbuf_printf(b, "\\x%02X", c);
        else strbuf_add(b, raw + i, 1);
    }
    strbuf_adds(b, "\"");
}

char *gbnf_literal(const char *raw, size_t n) {
    strbuf b = SCHEMA_BUF;
    schema_gbnf_literal(&b, raw, n);
    return strbuf_take(&b);
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
