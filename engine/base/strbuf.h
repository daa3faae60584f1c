/* strbuf.h - a growing text buffer, for the rooms that write text a piece at a time (a
 * JSON schema's grammar, a tool call's arguments).
 *
 * An append that cannot grow the buffer (out of memory, or past its limit) marks it
 * failed, and a failed buffer takes nothing more: a writer appends freely and looks once,
 * at the end. The text is NUL-terminated after every append. */
#ifndef CHATFS_STRBUF_H
#define CHATFS_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char *s;
    size_t n, cap;
    size_t limit; /* most bytes the text may hold; 0: no limit */
    bool failed;
} strbuf;

void strbuf_add(strbuf *b, const char *p, size_t n);
void strbuf_adds(strbuf *b, const char *s);
void strbuf_addc(strbuf *b, char c);
void strbuf_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* the text, which the caller owns (the buffer is empty again); NULL when it failed (the
 * buffer is freed) */
char *strbuf_take(strbuf *b);
void strbuf_free(strbuf *b);

#endif
