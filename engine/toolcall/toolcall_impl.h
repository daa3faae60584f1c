/* toolcall_impl.h - what the toolcall room's files share: JSON string literals, literals that
 * may be cut by the end of a partial text, JSON and Python values scanned within bounds, the
 * compiled tools, and the interface of one family's call reader. */
#ifndef CHATFS_TOOLCALL_IMPL_H
#define CHATFS_TOOLCALL_IMPL_H

#include "engine/base/strbuf.h"
#include "engine/toolcall/toolcall.h"

#include <stdbool.h>
#include <stddef.h>

/* ---- text out: the room's buffers are engine/base's strbuf ---- */

/* a JSON string literal of the bytes (quotes, and cJSON's escapes for " \ and control
 * characters) */
void tc_add_json_string(strbuf *b, const char *p, size_t n);

/* ---- reading within bounds: s[0, n) is the text, i a position in it ---- */

/* how a piece reads: complete, cut by the end of a partial text (it may still complete),
 * or not what was wanted */
enum tc_read { TC_OK, TC_MORE, TC_BAD };

bool tc_space(char c); /* llama.cpp's space(): isspace in the C locale */
size_t tc_skip_space(const char *s, size_t i, size_t n);
/* the literal at i: TC_OK (*end past it), TC_MORE (the text ends inside a prefix of it),
 * TC_BAD */
enum tc_read tc_lit(const char *s, size_t i, size_t n, const char *lit, size_t *end);
/* the first occurrence of lit in s[i, n), or n */
size_t tc_find(const char *s, size_t i, size_t n, const char *lit);
/* the length of the longest tail of s[0, n) that is a proper prefix of lit */
size_t tc_tail_prefix(const char *s, size_t n, const char *lit);

/* A JSON value at i (no leading whitespace skipped): TC_OK and *end past it; TC_MORE when
 * the text ends inside it; TC_BAD when it is not JSON (nesting deeper than 128 included). */
enum tc_read tc_json_value(const char *s, size_t i, size_t n, size_t *end);
/* s[i, n) is one JSON value and nothing else but whitespace after it */
bool tc_json_whole(const char *s, size_t i, size_t n);
/* s[i, end), a JSON value, without the whitespace outside its strings */
void tc_json_minify(strbuf *b, const char *s, size_t i, size_t end);
/* a JSON string literal's value at i (s[i] is '"'), unescaped into b; *end past the quote */
enum tc_read tc_json_string(const char *s, size_t i, size_t n, strbuf *b, size_t *end);

/* A Python literal at i (strings in ' or ", numbers, True/False/None and JSON's
 * true/false/null, lists, dicts with string keys), written to b as compact JSON. */
enum tc_read tc_py_value(const char *s, size_t i, size_t n, strbuf *b, size_t *end);

/* ---- the offered functions ---- */
enum {
    TC_T_STRING = 1, TC_T_INTEGER = 2, TC_T_NUMBER = 4, TC_T_BOOLEAN = 8,
    TC_T_NULL = 16, TC_T_OBJECT = 32, TC_T_ARRAY = 64,
    TC_T_ANY = 127, /* no type said: every type, as llama.cpp's schema types of {} */
};
struct tc_param {
    char *name;
    unsigned types;
    bool required;
};
struct tc_tool {
    char *name;
    struct tc_param *params;
    int n_params;
};
struct tc_tools {
    struct tc_tool *tools;
    int n;
};
const struct tc_tool *tc_tools_find(const struct tc_tools *t, const char *name, size_t len);
const struct tc_param *tc_tool_param(const struct tc_tool *t, const char *name, size_t len);

/* ---- one reading of a text: the reply being built ---- */
struct tc_scan {
    enum tc_family family;
    const struct tc_tools *tools;
    const char *s;
    size_t n;
    bool final;
    struct tc_reply *reply;
    bool oom;
};

/* A call as it is read: its name, the arguments so far ("{" and the members), what is
 * wrong with it (one line, the problems joined by "; "). */
struct tc_call_build {
    strbuf name, args, problem;
    strbuf keys;         /* the keys given, each NUL-terminated: a repeat is dropped */
    const struct tc_tool *tool; /* NULL: not offered, or no tools given */
    int n_args;
    bool args_done; /* args holds the whole object (the JSON families): not closed again */
};
void tc_build_begin(struct tc_scan *sc, struct tc_call_build *cb, const char *name, size_t len);
/* the next argument's key, written; *param its schema (NULL: unknown). False when the key
 * was given already: the caller drops the value. */
bool tc_build_key(struct tc_scan *sc, struct tc_call_build *cb, const char *key, size_t len,
                  const struct tc_param **param);
void tc_build_problem(struct tc_call_build *cb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* closes the arguments, checks the required parameters, appends the call to the reply
 * (start, end: its bytes) and frees cb; false when out of memory */
bool tc_build_end(struct tc_scan *sc, struct tc_call_build *cb, size_t start, size_t end);
void tc_build_drop(struct tc_call_build *cb);

/* One family's reader of the calls that begin at a start marker found at `at`: TC_OK
 * appends them (one or more) to the reply and sets *end past them; TC_MORE: the text may
 * still become calls (partial texts only); TC_BAD: the marker is text. A reader that fails
 * after appending calls leaves the count to the caller, which cuts it back. */
typedef enum tc_read (*tc_reader)(struct tc_scan *sc, size_t at, size_t marker_len, size_t *end);

enum tc_read tc_read_xml(struct tc_scan *sc, size_t at, size_t marker_len, size_t *end);
enum tc_read tc_read_hermes(struct tc_scan *sc, size_t at, size_t marker_len, size_t *end);
enum tc_read tc_read_llama3(struct tc_scan *sc, size_t at, size_t marker_len, size_t *end);
enum tc_read tc_read_lfm2(struct tc_scan *sc, size_t at, size_t marker_len, size_t *end);

/* The JSON object of a Hermes or Llama call at i, appended as a call: the name, and the
 * arguments (under args_key or args_key2) as compact JSON; type_field admits a
 * "type": "function" member; need_args refuses an object without arguments (else {}). */
enum tc_read tc_json_call(struct tc_scan *sc, size_t i, const char *args_key, const char *args_key2,
                          bool type_field, bool need_args, size_t *end);

#endif
