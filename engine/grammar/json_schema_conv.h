/* json_schema_conv.h - the conversion's state, shared by json_schema.c (rules, $refs,
 * the schema's kinds) and json_schema_object.c (objects and allOf): the rules written so
 * far (found by name, so a rule met again is written once), the strings handed out (all
 * freed at the end, so an error anywhere leaks nothing), the $refs being converted, and
 * the first error, which stops the conversion. */
#ifndef CHATFS_GRAMMAR_JSON_SCHEMA_CONV_H
#define CHATFS_GRAMMAR_JSON_SCHEMA_CONV_H

#include <cjson/cJSON.h>

#include "engine/grammar/json_schema_impl.h"

/* nesting of schemas (and of $refs being converted) past which a schema is refused */
#define MAX_DEPTH 64

typedef struct {
    char *name, *body;
} rule;

typedef struct {
    const cJSON *doc;
    rule *rules;
    int n_rules, cap_rules;
    size_t text;  /* bytes of the rules so far */
    char **owned; /* strings handed out, freed at the end */
    size_t n_owned, cap_owned;
    const char *resolving[MAX_DEPTH]; /* the $refs being converted: a cycle stops at them */
    int n_resolving;
    int depth;
    int failed;
    char err[320];
} conv;

/* a property of an object schema */
typedef struct {
    const char *name;    /* the property's name */
    const cJSON *schema; /* its schema */
    const char *path;
    int required;
} prop;

/* The first error, "schema: PATH: message"; returns NULL (a failed conversion writes nothing more). */
void *schema_fail(conv *c, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* s, freed with the conversion (NULL and a failure when s is NULL) */
char *schema_own(conv *c, char *s);
char *schema_fmt(conv *c, const char *f, ...) __attribute__((format(printf, 2, 3)));
/* a buffer's text, owned by the conversion (NULL when the buffer failed) */
char *schema_take(conv *c, strbuf *b);
/* `name ::= body`; the name used (llama.cpp's escaping, a number appended on a clash) */
const char *schema_add_rule(conv *c, const char *name, const char *body);
/* one of llama.cpp's primitive rules (string, value, char, ...) and those it uses */
const char *schema_add_primitive(conv *c, const char *type);
/* a JSON value as the GBNF literal of its compact JSON text */
char *schema_constant(conv *c, const cJSON *v, const char *path);
const cJSON *schema_get(const cJSON *node, const char *key);
int schema_has_properties(const cJSON *node);
/* whether a schema constrains nothing */
int schema_is_any(const cJSON *node);
/* a "#/..." JSON pointer's target in the document */
const cJSON *schema_resolve(conv *c, const char *ref, const char *path);
/* The rule for a schema (type: the one type of a type list being expanded, else NULL). */
const char *schema_visit(conv *c, const cJSON *node, const char *type, const char *name, const char *path);

/* json_schema_object.c */
const char *schema_visit_object(conv *c, const cJSON *node, const char *name, const char *rule_name, const char *path);
const char *schema_visit_all_of(conv *c, const cJSON *all, const char *name, const char *rule_name, const char *path);
/* allOf beside an object's own properties, required or additionalProperties: those are one
 * more component of the merge (llama.cpp lets the object keywords win and drops the allOf,
 * which admits objects the schema does not). */
const char *schema_visit_all_of_siblings(conv *c, const cJSON *node, const char *name, const char *rule_name,
                                         const char *path);

#endif
