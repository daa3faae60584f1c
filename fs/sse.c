/* sse.c - server-sent events, incrementally (see sse.h). */
#include "fs/sse.h"

#include <stdlib.h>
#include <string.h>

void sse_init(sse_parser *p) { memset(p, 0, sizeof *p); }

void sse_free(sse_parser *p) {
    free(p->line);
    free(p->data);
    memset(p, 0, sizeof *p);
}

/* appends n bytes to *buf (keeping it NUL-terminated); -1 past the cap or out of memory */
static int append(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > SSE_MAX_EVENT) return -1;
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1) c *= 2;
        char *b = realloc(*buf, c);
        if (!b) return -1;
        *buf = b;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
    return 0;
}

/* One complete line (without its end). A blank line dispatches the event. */
static int end_line(sse_parser *p, sse_event_fn fn, void *ud) {
    const char *l = p->line ? p->line : "";
    size_t n = p->line_len;
    p->line_len = 0;
    if (n == 0) {
        if (!p->has_data) return 0;
        p->has_data = 0;
        size_t len = p->data_len;
        p->data_len = 0;
        return fn(ud, p->data ? p->data : "", len);
    }
    if (l[0] == ':') return 0; /* a comment */
    const char *colon = memchr(l, ':', n);
    size_t field = colon ? (size_t)(colon - l) : n;
    if (field != 4 || memcmp(l, "data", 4)) return 0; /* event:, id:, retry:, unknown fields */
    const char *v = colon ? colon + 1 : l + n;
    if (v < l + n && *v == ' ') v++;
    if (p->has_data && append(&p->data, &p->data_len, &p->data_cap, "\n", 1)) return -1;
    p->has_data = 1;
    return append(&p->data, &p->data_len, &p->data_cap, v, (size_t)(l + n - v));
}

int sse_feed(sse_parser *p, const char *bytes, size_t n, sse_event_fn fn, void *ud) {
    if (p->failed) return -1;
    size_t i = 0;
    while (i < n) {
        char c = bytes[i];
        if (c == '\n' && p->after_cr) { /* the \n of a \r\n cut between two pieces */
            p->after_cr = 0;
            i++;
            continue;
        }
        p->after_cr = 0;
        if (c == '\r' || c == '\n') {
            p->after_cr = c == '\r';
            i++;
            int rc = end_line(p, fn, ud);
            if (rc == -1) p->failed = 1;
            if (rc) return rc;
            continue;
        }
        /* the rest of the line in one copy */
        size_t j = i;
        while (j < n && bytes[j] != '\r' && bytes[j] != '\n') j++;
        if (append(&p->line, &p->line_len, &p->line_cap, bytes + i, j - i)) {
            p->failed = 1;
            return -1;
        }
        i = j;
    }
    return 0;
}
