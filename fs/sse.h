/* sse.h - a parser for server-sent events (the text/event-stream format an
 * OpenAI-compatible server streams a reply in), fed the bytes as they arrive.
 *
 * The format (WHATWG HTML, "server-sent events"): lines end in \n, \r\n or \r; a line
 * "data: X" appends X (and a \n between lines) to the event's data; a blank line ends
 * the event; lines starting with ':' are comments (keep-alives); "event:", "id:" and
 * "retry:" are read past. Only the data matters here: each chunk of a reply is one
 * event whose data is a JSON object, and the stream ends with data "[DONE]".
 *
 * Bytes come in any pieces (a line may be cut anywhere, even inside \r\n); the parser
 * keeps what it has not finished. A line or an event longer than SSE_MAX_EVENT is an
 * error: a server does not send megabytes in one chunk, and the cap bounds memory. */
#ifndef CHATFS_FS_SSE_H
#define CHATFS_FS_SSE_H

#include <stddef.h>

#define SSE_MAX_EVENT (4u << 20)

typedef struct {
    char *line;         /* the line being read */
    size_t line_len, line_cap;
    char *data;         /* the event's data so far */
    size_t data_len, data_cap;
    int has_data;       /* a data: line came (an event with data "" is still an event) */
    int after_cr;       /* the last byte was \r: a \n right after it ends nothing */
    int failed;
} sse_parser;

/* fn gets each complete event's data (NUL-terminated, len bytes); a nonzero return
 * stops the parsing and is returned by sse_feed. */
typedef int (*sse_event_fn)(void *ud, const char *data, size_t len);

void sse_init(sse_parser *p);
void sse_free(sse_parser *p);
/* 0, fn's nonzero value, or -1 when a line or event exceeds SSE_MAX_EVENT or memory
 * runs out (then the parser stays failed). */
int sse_feed(sse_parser *p, const char *bytes, size_t n, sse_event_fn fn, void *ud);

#endif
