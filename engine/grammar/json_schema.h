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

#include <cjson/cJSON.h>
#include <stddef.h>

/* A JSON schema (JSON text, len bytes, need not be NUL-terminated) as GBNF text that
 * grammar_compile accepts: malloc'd, NUL-terminated, the caller frees. NULL with one line
 * in err: not JSON, an unsupported keyword (named), a $ref that does not resolve, a schema
 * whose language is empty (e.g. minimum > maximum, an enum with no values, minItems > maxItems). */
char *json_schema_to_gbnf(const char *schema, size_t len, char *err, size_t errlen);

/* Several schemas as rules of one grammar, for a caller that writes the grammar around
 * them (a tool call: each value inside the call's own markup): schema i's value is the
 * rule names[i] (letters, digits and '-', distinct, not "root" nor a primitive's name such
 * as "string"), the rules they use written once. The text has no root rule: the caller
 * adds one and compiles. NULL with one line in err, as above. */
/* The bytes raw[0, n) as a GBNF string literal, quotes included ("a\"b" for a"b):
 * malloc'd, NULL when out of memory. */
char *gbnf_literal(const char *raw, size_t n);

char *json_schemas_to_gbnf_rules(const cJSON *const *schemas, const char *const *names, int n, char *err,
                                 size_t errlen);

#endif
