/* strbuf.c - the growing text buffer of strbuf.h. */
#include "engine/base/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* room for `more` bytes and the NUL after them, or the buffer failed */
static bool reserve(strbuf *b, size_t more) {
    if (b->failed) return false;
    if (more > ((size_t)-1) / 2 - b->n || (b->limit && b->n + more + 1 > b->limit)) return b->failed = true, false;
    if (b->n + more + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + more + 1) cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) return b->failed = true, false;
    b->s = s;
    b->cap = cap;
    return true;
}

void strbuf_add(strbuf *b, const char *p, size_t n) {
    if (!reserve(b, n)) return;
    if (n) memcpy(b->s + b->n, p, n);
    b->n += n;
    b->s[b->n] = 0;
}

void strbuf_adds(strbuf *b, const char *s) { strbuf_add(b, s, strlen(s)); }

void strbuf_addc(strbuf *b, char c) { strbuf_add(b, &c, 1); }

void strbuf_printf(strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (k < 0) {
        b->failed = true;
        return;
    }
    if (!reserve(b, (size_t)k)) return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}

char *strbuf_take(strbuf *b) {
    if (!reserve(b, 0)) {
        strbuf_free(b);
        return NULL;
    }
    char *s = b->s;
    s[b->n] = 0; /* an empty buffer's first allocation */
    size_t limit = b->limit;
    *b = (strbuf){.limit = limit};
    return s;
}

void strbuf_free(strbuf *b) {
    size_t limit = b->limit;
    free(b->s);
    *b = (strbuf){.limit = limit};
}
