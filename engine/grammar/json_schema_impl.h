/* json_schema_impl.h - what the JSON schema conversion's files share: a bounded text
 * buffer (engine/base's strbuf, so that a hostile schema cannot grow the grammar without end), the
 * JSON text of a character as a GBNF literal, and the two translations that are
 * languages of their own: integer ranges as digit rules, regular expressions as GBNF. */
#ifndef CHATFS_GRAMMAR_JSON_SCHEMA_IMPL_H
#define CHATFS_GRAMMAR_JSON_SCHEMA_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/strbuf.h"

/* the grammar text's bound: far past any schema a request carries */
#define SCHEMA_MAX_TEXT (8u << 20)
/* llama.cpp's (and grammar_compile's) bound on a repetition's count */
#define SCHEMA_MAX_REPEAT 2000

/* the conversion's text buffers: bounded, and failed once out of memory or past the bound
 * (the text is then not to be used) */
#define SCHEMA_BUF ((strbuf){.limit = SCHEMA_MAX_TEXT})

/* The raw bytes as a GBNF string literal, quotes included ("a\"b" for a"b). */
void schema_gbnf_literal(strbuf *b, const char *raw, size_t n);
/* Code point cp as it stands inside a JSON string (\" \\ \n ... \u00XX, else UTF-8). */
size_t schema_json_escape(uint32_t cp, char out[8]);
/* Decodes one UTF-8 code point at s (n > 0 bytes): its length, 0 when malformed. */
size_t schema_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);

/* Integers from min to max (has_min / has_max: whether that side is bounded; both within
 * +-10^18, min <= max) as one parenthesised GBNF expression over digits, no leading zeros,
 * at most 16 digits on an unbounded side as in llama.cpp's integral-part. */
void schema_integer_range(strbuf *out, int has_min, int64_t min, int has_max, int64_t max);

/* A JSON Schema pattern (ECMA-262 syntax, n bytes) as a GBNF expression for the JSON
 * string whose value it matches, quotes included. An unanchored side admits any characters
 * there (rule `char`, *uses_char set). 0, or -1 with the reason in err. */
int schema_pattern(strbuf *out, const char *pattern, size_t n, int *uses_char, char *err, size_t errlen);

#endif
