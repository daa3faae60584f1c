/* json_schema.h - a JSON schema as a GBNF grammar, the conversion llama.cpp's
 * common/json-schema-to-grammar.cpp does: objects with their properties in the schema's
 * order (the required ones first, then the optional ones, each optional one skippable),
 * arrays with item counts, strings with lengths, patterns and formats, integers with
 * bounds, enums, consts, unions, allOf merged, local $refs (recursion included). The
 * grammar admits llama.cpp's whitespace between tokens (`space ::= | " " | "\n"{1,2}
 * [ \t]{0,20}`) and none before the value or after it.
 *
 * Where a keyword constrains in a way the grammar cannot follow, the schema is refused by
 * the keyword's name rather than turned into a grammar that admits what the schema does
 * not; keywords that only annotate are ignored. */
#ifndef CHATFS_GRAMMAR_JSON_SCHEMA_H
#define CHATFS_GRAMMAR_JSON_SCHEMA_H

#include <stddef.h>

/* A JSON schema (JSON text, len bytes, need not be NUL-terminated) as GBNF text that
 * grammar_compile accepts: malloc'd, NUL-terminated, the caller frees. NULL with one line
 * in err: not JSON, an unsupported keyword (named), a $ref that does not resolve, a schema
 * whose language is empty (e.g. minimum > maximum, an enum with no values, minItems > maxItems). */
char *json_schema_to_gbnf(const char *schema, size_t len, char *err, size_t errlen);

#endif
