/* json_schema.c - a JSON schema as GBNF, rule by rule as llama.cpp's
 * common/json-schema-to-grammar.cpp names and writes them (its rule names, its primitive
 * rules, its order of keywords: $ref, then oneOf/anyOf, then type, const, enum, ...), so
 * that a schema constrains chatfs's output as it constrains llama-server's.
 *
 * Where llama.cpp would quietly admit what the schema does not (an unsupported keyword
 * dropped, a pattern it cannot translate widened to any string, an allOf of non-objects
 * merged into an empty object), the schema is refused with the keyword and its place (a
 * JSON pointer). Kept from llama.cpp, since common schemas carry them: uniqueItems and a
 * "number"'s bounds are accepted and not enforced (integers' bounds are), and beside a
 * pattern the lengths are left to it. Keywords it does not know annotate (JSON Schema's
 * rule for unknown keywords) and are ignored. The grammar is compiled once before it is
 * returned, so the caller never gets one grammar_compile refuses. */
#define _GNU_SOURCE /* asprintf */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/json_schema_conv.h"
#include "engine/grammar/json_schema_impl.h"

#define MAX_SCHEMA_BYTES (4u << 20)
#define MAX_RULES 20000
#define MAX_BOUND 1e18

static const char SPACE_RULE[] = "| \" \" | \"\\n\"{1,2} [ \\t]{0,20}";

/* llama.cpp's primitive rules and its string formats, with the rules each uses */
static const struct primitive {
    const char *name, *body, *deps[6];
} PRIMITIVES[] = {
    {"boolean", "(\"true\" | \"false\")", {0}},
    {"decimal-part", "[0-9]{1,16}", {0}},
    {"integral-part", "[0] | [1-9] [0-9]{0,15}", {0}},
    {"number", "(\"-\"? integral-part) (\".\" decimal-part)? ([eE] [-+]? integral-part)?", {"integral-part", "decimal-part"}},
    {"integer", "(\"-\"? integral-part)", {"integral-part"}},
    {"value", "object | array | string | number | boolean | null", {"object", "array", "string", "number", "boolean", "null"}},
    {"object", "\"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )? space \"}\"", {"string", "value"}},
    {"array", "\"[\" space ( value (\",\" space value)* )? space \"]\"", {"value"}},
    {"uuid", "\"\\\"\" [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12} \"\\\"\"", {0}},
    {"char", "[^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4})", {0}},
    {"string", "\"\\\"\" char* \"\\\"\"", {"char"}},
    {"null", "\"null\"", {0}},
    {"date", "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [1-2] [0-9] | \"3\" [0-1] )", {0}},
    {"time", "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{3} )? ( \"Z\" | ( \"+\" | \"-\" ) ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )", {0}},
    {"date-time", "date \"T\" time", {"date", "time"}},
    {"date-string", "\"\\\"\" date \"\\\"\"", {"date"}},
    {"time-string", "\"\\\"\" time \"\\\"\"", {"time"}},
    {"date-time-string", "\"\\\"\" date-time \"\\\"\"", {"date-time"}},
};

/* keywords that constrain and have no grammar here: refused by name */
static const char *const REFUSED[] = {
    "not", "if", "then", "else", "patternProperties", "propertyNames", "minProperties", "maxProperties",
    "dependentRequired", "dependentSchemas", "dependencies", "contains", "minContains", "maxContains",
    "unevaluatedProperties", "unevaluatedItems", "multipleOf", "additionalItems", "$dynamicRef", "$recursiveRef",
    "contentSchema",
};

void *schema_fail(conv *c, const char *path, const char *fmt, ...) {
    if (c->failed) return NULL;
    c->failed = 1;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(c->err, sizeof c->err, "schema: %s: %s", path, msg);
    return NULL;
}

char *schema_own(conv *c, char *s) {
    if (!s) return schema_fail(c, "#", "out of memory");
    if (c->n_owned == c->cap_owned) {
        size_t cap = c->cap_owned ? c->cap_owned * 2 : 64;
        char **o = realloc(c->owned, cap * sizeof *o);
        if (!o) {
            free(s);
            return schema_fail(c, "#", "out of memory");
        }
        c->owned = o, c->cap_owned = cap;
    }
    return c->owned[c->n_owned++] = s;
}

char *schema_fmt(conv *c, const char *f, ...) {
    if (c->failed) return NULL;
    va_list ap;
    va_start(ap, f);
    char *s = NULL;
    int k = vasprintf(&s, f, ap);
    va_end(ap);
    return schema_own(c, k < 0 ? NULL : s);
}

/* a buffer's text, owned by the conversion (NULL when the buffer failed) */
char *schema_take(conv *c, strbuf *b) {
    if (b->failed) {
        strbuf_free(b);
        return schema_fail(c, "#", "the grammar grows past %u MiB", SCHEMA_MAX_TEXT >> 20);
    }
    return schema_own(c, strbuf_take(b));
}

static rule *find_rule(conv *c, const char *name) {
    for (int i = 0; i < c->n_rules; i++)
        if (!strcmp(c->rules[i].name, name)) return &c->rules[i];
    return NULL;
}

/* Adds `name ::= body` under the escaped name; a name taken by another body gets a number
 * appended (name0, name1, ...). Returns the name used. */
/* name with each run of characters other than [a-zA-Z0-9-] made one '-' (as llama.cpp's
 * rule names), into out of strlen(name) + 1 bytes at least; returns its length */
static size_t escape_name(const char *name, char *out) {
    size_t k = 0;
    for (size_t i = 0; name[i]; i++) {
        if (isalnum((unsigned char)name[i]) || name[i] == '-') out[k++] = name[i];
        else if (!i || isalnum((unsigned char)name[i - 1]) || name[i - 1] == '-') out[k++] = '-';
    }
    out[k] = 0;
    return k;
}

const char *schema_add_rule(conv *c, const char *name, const char *body) {
    if (c->failed || !name || !body) return NULL;
    char *esc = malloc(strlen(name) + 24);
    if (!esc) return schema_fail(c, "#", "out of memory");
    size_t k = escape_name(name, esc);
    rule *r = find_rule(c, esc);
    for (int i = 0; r && strcmp(r->body, body); i++) {
        snprintf(esc + k, 24, "%d", i);
        r = find_rule(c, esc);
    }
    if (r) {
        free(esc);
        return r->name;
    }
    if (c->n_rules >= MAX_RULES) {
        free(esc);
        return schema_fail(c, "#", "more than %d rules", MAX_RULES);
    }
    c->text += strlen(esc) + strlen(body) + 6;
    if (c->text > SCHEMA_MAX_TEXT) {
        free(esc);
        return schema_fail(c, "#", "the grammar grows past %u MiB", SCHEMA_MAX_TEXT >> 20);
    }
    if (c->n_rules == c->cap_rules) {
        int cap = c->cap_rules ? c->cap_rules * 2 : 32;
        rule *rs = realloc(c->rules, (size_t)cap * sizeof *rs);
        if (!rs) {
            free(esc);
            return schema_fail(c, "#", "out of memory");
        }
        c->rules = rs, c->cap_rules = cap;
    }
    char *b = strdup(body);
    if (!b) {
        free(esc);
        return schema_fail(c, "#", "out of memory");
    }
    c->rules[c->n_rules++] = (rule){esc, b};
    return esc;
}

static const struct primitive *primitive(const char *name) {
    for (size_t i = 0; i < sizeof PRIMITIVES / sizeof *PRIMITIVES; i++)
        if (!strcmp(PRIMITIVES[i].name, name)) return &PRIMITIVES[i];
    return NULL;
}

/* primitive `type` under rule name `name`, and the primitives it uses under their own */
static const char *add_primitive_as(conv *c, const char *name, const char *type) {
    const struct primitive *p = primitive(type);
    const char *got = schema_add_rule(c, name, p->body);
    for (int i = 0; got && i < 6 && p->deps[i]; i++)
        if (!find_rule(c, p->deps[i])) add_primitive_as(c, p->deps[i], p->deps[i]);
    return c->failed ? NULL : got;
}

const char *schema_add_primitive(conv *c, const char *type) { return add_primitive_as(c, type, type); }

/* a primitive for a schema: under its own name (shared), or as root */
static const char *visit_primitive(conv *c, const char *rule_name, const char *type) {
    return add_primitive_as(c, !strcmp(rule_name, "root") ? "root" : type, type);
}

static int is_reserved(const char *name) { return !strcmp(name, "root") || primitive(name); }

/* A JSON value as the grammar literal of its compact JSON text. */
char *schema_constant(conv *c, const cJSON *v, const char *path) {
    char *json = cJSON_PrintUnformatted(v);
    if (!json) return schema_fail(c, path, "out of memory");
    strbuf b = SCHEMA_BUF;
    schema_gbnf_literal(&b, json, strlen(json));
    free(json);
    return schema_take(c, &b);
}

const cJSON *schema_get(const cJSON *node, const char *key) { return cJSON_GetObjectItemCaseSensitive(node, key); }

/* a count keyword: absent (def), or an integer from 0 to the repetition bound */
static int count(conv *c, const cJSON *node, const char *key, const char *path, int def) {
    const cJSON *v = schema_get(node, key);
    if (!v) return def;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble)) {
        schema_fail(c, path, "%s must be a non-negative integer", key);
        return def;
    }
    if (v->valuedouble > SCHEMA_MAX_REPEAT) {
        schema_fail(c, path, "%s %.0f is past the grammar's repetition bound of %d", key, v->valuedouble, SCHEMA_MAX_REPEAT);
        return def;
    }
    return (int)v->valuedouble;
}

static const char *string_format(const cJSON *node) {
    const cJSON *f = schema_get(node, "format");
    if (!cJSON_IsString(f)) return NULL;
    const char *s = f->valuestring;
    if (!strcmp(s, "date") || !strcmp(s, "time") || !strcmp(s, "date-time")) return s;
    if (!strcmp(s, "uuid") || (!strncmp(s, "uuid", 4) && s[4] >= '1' && s[4] <= '5' && !s[5])) return "uuid";
    return NULL; /* other formats annotate */
}

int schema_has_properties(const cJSON *node) {
    const cJSON *ap = schema_get(node, "additionalProperties");
    return schema_get(node, "properties") || (ap && !cJSON_IsTrue(ap));
}

/* whether the schema constrains nothing (llama.cpp's "any"): true, or an object without
 * a keyword that decides a kind */
int schema_is_any(const cJSON *node) {
    if (cJSON_IsTrue(node)) return 1;
    if (!cJSON_IsObject(node)) return 0;
    static const char *const deciding[] = {"$ref", "oneOf", "anyOf", "type", "const", "enum", "allOf",
                                           "items", "prefixItems", "pattern", "minLength", "maxLength"};
    for (size_t i = 0; i < sizeof deciding / sizeof *deciding; i++)
        if (schema_get(node, deciding[i])) return 0;
    return !schema_has_properties(node) && !string_format(node);
}

/* ---- $ref: a JSON pointer into the same document ---- */

const cJSON *schema_resolve(conv *c, const char *ref, const char *path) {
    if (ref[0] != '#') return schema_fail(c, path, "remote $ref '%s' is not supported (only '#/...' into the same document)", ref);
    if (ref[1] && ref[1] != '/') return schema_fail(c, path, "$ref '%s': anchors are not supported (only '#/...')", ref);
    const cJSON *at = c->doc;
    const char *p = ref + 1;
    while (*p == '/') {
        p++;
        char tok[256];
        size_t k = 0;
        for (; *p && *p != '/'; p++) {
            char ch = *p;
            if (ch == '~' && (p[1] == '0' || p[1] == '1')) ch = p[1] == '0' ? '~' : '/', p++;
            if (k + 1 >= sizeof tok) return schema_fail(c, path, "$ref '%s': a name too long", ref);
            tok[k++] = ch;
        }
        tok[k] = 0;
        const cJSON *next = NULL;
        if (cJSON_IsObject(at)) next = schema_get(at, tok);
        else if (cJSON_IsArray(at)) {
            char *end;
            long idx = strtol(tok, &end, 10);
            if (k && !*end && idx >= 0) next = cJSON_GetArrayItem(at, (int)idx);
        }
        if (!next) return schema_fail(c, path, "$ref '%s' does not resolve: no '%s'", ref, tok);
        at = next;
    }
    return at;
}

static const char *visit_ref(conv *c, const cJSON *refv, const char *path) {
    if (!cJSON_IsString(refv)) return schema_fail(c, path, "$ref must be a string");
    const char *ref = refv->valuestring;
    const cJSON *target = schema_resolve(c, ref, path);
    if (!target) return NULL;
    const char *frag = strchr(ref, '#') + 1;
    char *ref_name = schema_fmt(c, "ref%s", frag);
    if (!ref_name) return NULL;
    /* converted already, or being converted (a cycle): its rule's name, as add_rule writes it */
    char *esc_name = schema_own(c, malloc(strlen(ref_name) + 1));
    if (!esc_name) return NULL;
    escape_name(ref_name, esc_name);
    int being_converted = 0;
    for (int i = 0; i < c->n_resolving; i++) being_converted |= !strcmp(c->resolving[i], ref);
    if (being_converted || find_rule(c, esc_name)) return esc_name;
    if (c->n_resolving == MAX_DEPTH) return schema_fail(c, path, "$refs nested deeper than %d", MAX_DEPTH);
    c->resolving[c->n_resolving++] = ref;
    char *tpath = schema_fmt(c, "%s", ref);
    const char *got = tpath ? schema_visit(c, target, NULL, ref_name, tpath) : NULL;
    c->n_resolving--;
    return got;
}

/* ---- unions, arrays, strings, integers ---- */

static const char *visit_union(conv *c, const cJSON *alts, const char *key, const char *name, const char *rule_name,
                               const char *path) {
    if (!cJSON_IsArray(alts) || !cJSON_GetArraySize(alts)) return schema_fail(c, path, "%s must be a non-empty array of schemas", key);
    strbuf o = SCHEMA_BUF;
    int i = 0;
    const cJSON *a;
    cJSON_ArrayForEach(a, alts) {
        const char *r = schema_visit(c, a, NULL, schema_fmt(c, "%s%s%d", name, *name ? "-" : "alternative-", i), schema_fmt(c, "%s/%s/%d", path, key, i));
        if (!r) break;
        strbuf_adds(&o, i++ ? " | " : "");
        strbuf_adds(&o, r);
    }
    if (c->failed) {
        strbuf_free(&o);
        return NULL;
    }
    return schema_add_rule(c, rule_name, schema_take(c, &o));
}

static const char *visit_types(conv *c, const cJSON *node, const char **types, int n, const char *name, const char *rule_name,
                               const char *path) {
    strbuf o = SCHEMA_BUF;
    for (int i = 0; i < n && !c->failed; i++) {
        const char *r = schema_visit(c, node, types[i], schema_fmt(c, "%s%s%d", name, *name ? "-" : "alternative-", i), schema_fmt(c, "%s/type/%d", path, i));
        strbuf_adds(&o, i ? " | " : "");
        strbuf_adds(&o, r ? r : "");
    }
    if (c->failed) {
        strbuf_free(&o);
        return NULL;
    }
    return schema_add_rule(c, rule_name, schema_take(c, &o));
}

/* item, min to max times (max < 0: no bound), separated by sep when given */
static void repetition(strbuf *o, const char *item, int min, int max, const char *sep) {
    if (max == 0) return;
    if (sep) {
        if (min == 0) strbuf_adds(o, "(");
        strbuf_printf(o, "%s ", item);
        char *inner = NULL;
        if (asprintf(&inner, "(%s %s)", sep, item) < 0) {
            o->failed = 1;
            return;
        }
        repetition(o, inner, min ? min - 1 : 0, max < 0 ? -1 : max - 1, NULL);
        free(inner);
        if (min == 0) strbuf_adds(o, ")?");
        return;
    }
    if (min == 0 && max == 1) strbuf_printf(o, "%s?", item);
    else if (min == 1 && max < 0) strbuf_printf(o, "%s+", item);
    else if (min == 0 && max < 0) strbuf_printf(o, "%s*", item);
    else if (max < 0) strbuf_printf(o, "%s{%d,}", item, min);
    else if (min == max) strbuf_printf(o, "%s{%d}", item, min);
    else strbuf_printf(o, "%s{%d,%d}", item, min, max);
}

static const char *visit_tuple(conv *c, const cJSON *items, const char *key, const char *sub, const char *rule_name, const char *path) {
    strbuf o = SCHEMA_BUF;
    strbuf_adds(&o, "\"[\" space ");
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, items) {
        const char *r = schema_visit(c, it, NULL, schema_fmt(c, "%stuple-%d", sub, i), schema_fmt(c, "%s/%s/%d", path, key, i));
        if (!r) break;
        if (i++) strbuf_adds(&o, " \",\" space ");
        strbuf_adds(&o, r);
    }
    strbuf_adds(&o, " space \"]\"");
    if (c->failed) {
        strbuf_free(&o);
        return NULL;
    }
    return schema_add_rule(c, rule_name, schema_take(c, &o));
}

static const char *visit_array(conv *c, const cJSON *node, const char *sub, const char *rule_name, const char *path) {
    const cJSON *items = schema_get(node, "items"), *prefix = schema_get(node, "prefixItems");
    const char *key = items ? "items" : "prefixItems";
    if (cJSON_IsFalse(items) && cJSON_IsArray(prefix)) return visit_tuple(c, prefix, "prefixItems", sub, rule_name, path);
    if (!items) items = prefix;
    if (cJSON_IsArray(items)) return visit_tuple(c, items, key, sub, rule_name, path);
    int min = count(c, node, "minItems", path, 0), max = count(c, node, "maxItems", path, -1);
    if (cJSON_IsFalse(items)) max = 0;
    if (c->failed) return NULL;
    if (max >= 0 && min > max) return schema_fail(c, path, "minItems %d is greater than maxItems %d (the schema admits nothing)", min, max);
    if ((!items || schema_is_any(items)) && min == 0 && max < 0) return visit_primitive(c, rule_name, "array");
    const char *item = max == 0 ? "" : (!items || schema_is_any(items)) ? schema_add_primitive(c, "value") : schema_visit(c, items, NULL, schema_fmt(c, "%sitem", sub), schema_fmt(c, "%s/%s", path, key));
    if (!item) return NULL;
    strbuf o = SCHEMA_BUF;
    strbuf_adds(&o, "\"[\" space ");
    repetition(&o, item, min, max, "\",\" space");
    strbuf_adds(&o, " space \"]\"");
    return schema_add_rule(c, rule_name, schema_take(c, &o));
}

static const char *visit_string(conv *c, const cJSON *node, const char *rule_name, const char *path) {
    const cJSON *pat = schema_get(node, "pattern");
    if (pat) {
        if (!cJSON_IsString(pat)) return schema_fail(c, path, "pattern must be a string");
        strbuf o = SCHEMA_BUF;
        int uses_char = 0;
        char why[200];
        if (schema_pattern(&o, pat->valuestring, strlen(pat->valuestring), &uses_char, why, sizeof why)) {
            strbuf_free(&o);
            return schema_fail(c, path, "pattern '%.80s': %s", pat->valuestring, why);
        }
        if (uses_char) schema_add_primitive(c, "char");
        return schema_add_rule(c, rule_name, schema_take(c, &o));
    }
    const cJSON *f = schema_get(node, "format");
    if (f && !cJSON_IsString(f)) return schema_fail(c, path, "format must be a string");
    const char *format = string_format(node);
    if (format && !strcmp(format, "uuid")) return visit_primitive(c, rule_name, "uuid");
    if (format) return schema_add_rule(c, rule_name, schema_add_primitive(c, !strcmp(format, "date") ? "date-string" : !strcmp(format, "time") ? "time-string" : "date-time-string"));
    int min = count(c, node, "minLength", path, 0), max = count(c, node, "maxLength", path, -1);
    if (c->failed) return NULL;
    if (max >= 0 && min > max) return schema_fail(c, path, "minLength %d is greater than maxLength %d (the schema admits nothing)", min, max);
    if (min == 0 && max < 0) return visit_primitive(c, rule_name, "string");
    const char *ch = schema_add_primitive(c, "char");
    strbuf o = SCHEMA_BUF;
    strbuf_adds(&o, "\"\\\"\" ");
    repetition(&o, ch ? ch : "char", min, max, NULL);
    strbuf_adds(&o, " \"\\\"\"");
    return schema_add_rule(c, rule_name, schema_take(c, &o));
}

/* an integer bound: absent, a number (fractions rounded inwards), or draft 4's boolean
 * exclusiveMinimum / exclusiveMaximum beside minimum / maximum */
static int bound(conv *c, const cJSON *node, const char *key, const char *ex_key, int upper, int64_t *out, const char *path) {
    const cJSON *v = schema_get(node, key), *ex = schema_get(node, ex_key);
    int has = 0;
    int64_t b = 0;
    if (v) {
        if (!cJSON_IsNumber(v)) return schema_fail(c, path, "%s must be a number", key), 0;
        if (fabs(v->valuedouble) > MAX_BOUND) return schema_fail(c, path, "%s is out of range (past 10^18)", key), 0;
        b = (int64_t)(upper ? floor(v->valuedouble) : ceil(v->valuedouble));
        if (cJSON_IsTrue(ex)) b += upper ? (floor(v->valuedouble) == v->valuedouble ? -1 : 0) : (ceil(v->valuedouble) == v->valuedouble ? 1 : 0);
        has = 1;
    }
    if (ex && !cJSON_IsBool(ex)) {
        if (!cJSON_IsNumber(ex)) return schema_fail(c, path, "%s must be a number", ex_key), 0;
        if (fabs(ex->valuedouble) > MAX_BOUND) return schema_fail(c, path, "%s is out of range (past 10^18)", ex_key), 0;
        int64_t e = (int64_t)(upper ? ceil(ex->valuedouble) - 1 : floor(ex->valuedouble) + 1);
        if (!has || (upper ? e < b : e > b)) b = e;
        has = 1;
    }
    *out = b;
    return has;
}

static const char *visit_integer(conv *c, const cJSON *node, const char *rule_name, const char *path) {
    int64_t lo = 0, hi = 0;
    int has_lo = bound(c, node, "minimum", "exclusiveMinimum", 0, &lo, path);
    int has_hi = bound(c, node, "maximum", "exclusiveMaximum", 1, &hi, path);
    if (c->failed) return NULL;
    if (!has_lo && !has_hi) return visit_primitive(c, rule_name, "integer");
    if (has_lo && has_hi && lo > hi)
        return schema_fail(c, path, "minimum %lld is greater than maximum %lld (the schema admits no integer)", (long long)lo, (long long)hi);
    strbuf o = SCHEMA_BUF;
    schema_integer_range(&o, has_lo, lo, has_hi, hi);
    return schema_add_rule(c, rule_name, schema_take(c, &o));
}

/* ---- the schema's kind, in llama.cpp's order of keywords ---- */

static int check_keywords(conv *c, const cJSON *node, const char *path) {
    const cJSON *k;
    cJSON_ArrayForEach(k, node) {
        for (size_t i = 0; i < sizeof REFUSED / sizeof *REFUSED; i++)
            if (!strcmp(k->string, REFUSED[i])) return schema_fail(c, path, "unsupported keyword '%s'", k->string), -1;
    }
    return 0;
}

#define MAX_TYPES 8

const char *schema_visit(conv *c, const cJSON *node, const char *type, const char *name, const char *path) {
    if (c->failed || !name || !path) return NULL;
    if (c->depth >= MAX_DEPTH) return schema_fail(c, path, "schemas nested deeper than %d", MAX_DEPTH);
    const char *rule_name = is_reserved(name) ? schema_fmt(c, "%s-", name) : *name ? name : "root";
    const char *sub = *name ? schema_fmt(c, "%s-", name) : "";
    if (!rule_name || !sub) return NULL;
    if (cJSON_IsFalse(node)) return schema_fail(c, path, "the schema false admits no value");
    if (cJSON_IsTrue(node)) return schema_add_rule(c, rule_name, schema_add_primitive(c, "value"));
    if (!cJSON_IsObject(node)) return schema_fail(c, path, "a schema must be an object or a boolean");
    if (!type && check_keywords(c, node, path)) return NULL;
    c->depth++;
    const char *got = NULL;
    const cJSON *t = schema_get(node, "type"), *v;
    if (!type && (v = schema_get(node, "$ref"))) {
        const char *target = visit_ref(c, v, path);
        got = target ? schema_add_rule(c, rule_name, target) : NULL;
    } else if (!type && ((v = schema_get(node, "oneOf")) || (v = schema_get(node, "anyOf")))) {
        got = visit_union(c, v, schema_get(node, "oneOf") ? "oneOf" : "anyOf", name, rule_name, path);
    } else if (!type && (cJSON_IsArray(t) || (cJSON_IsString(t) && cJSON_IsTrue(schema_get(node, "nullable")) && strcmp(t->valuestring, "null")))) {
        /* a list of types (or OpenAPI's nullable): one alternative per type */
        const char *types[MAX_TYPES];
        int n = 0;
        const cJSON *e;
        if (cJSON_IsString(t)) types[n++] = t->valuestring, types[n++] = "null";
        else cJSON_ArrayForEach(e, t) {
                if (!cJSON_IsString(e)) {
                    n = -1;
                    break;
                }
                if (n < MAX_TYPES) types[n++] = e->valuestring;
            }
        if (n < 0) schema_fail(c, path, "type must be a string or an array of strings");
        else if (n == 0) schema_fail(c, path, "type is an empty list (the schema admits nothing)");
        else got = visit_types(c, node, types, n, name, rule_name, path);
    } else if ((v = schema_get(node, "const"))) {
        got = schema_add_rule(c, rule_name, schema_constant(c, v, path));
    } else if ((v = schema_get(node, "enum"))) {
        if (!cJSON_IsArray(v)) schema_fail(c, path, "enum must be an array");
        else if (!cJSON_GetArraySize(v)) schema_fail(c, path, "enum has no values (the schema admits nothing)");
        strbuf o = SCHEMA_BUF;
        const cJSON *e;
        int i = 0;
        if (!c->failed) cJSON_ArrayForEach(e, v) {
                const char *lit = schema_constant(c, e, path);
                if (!lit) break;
                strbuf_adds(&o, i++ ? " | " : "(");
                strbuf_adds(&o, lit);
            }
        strbuf_adds(&o, ")");
        if (c->failed) strbuf_free(&o);
        else got = schema_add_rule(c, rule_name, schema_take(c, &o));
    } else {
        const char *tn = type ? type : cJSON_IsString(t) ? t->valuestring : NULL;
        if (!type && t && !cJSON_IsString(t)) schema_fail(c, path, "type must be a string or an array of strings");
        else if (!tn) {
            /* no type: the structural keywords decide, as in llama.cpp */
            if (schema_has_properties(node) && schema_get(node, "allOf"))
                got = schema_visit_all_of_siblings(c, node, name, rule_name, path);
            else if (schema_has_properties(node)) got = schema_visit_object(c, node, name, rule_name, path);
            else if ((v = schema_get(node, "allOf"))) got = schema_visit_all_of(c, v, name, rule_name, path);
            else if (schema_get(node, "items") || schema_get(node, "prefixItems")) got = visit_array(c, node, sub, rule_name, path);
            else if (schema_get(node, "pattern") || schema_get(node, "minLength") || schema_get(node, "maxLength") || string_format(node))
                got = visit_string(c, node, rule_name, path);
            else got = schema_add_rule(c, rule_name, schema_add_primitive(c, "value"));
        } else if (!strcmp(tn, "object")) {
            if (!schema_has_properties(node) && (v = schema_get(node, "allOf"))) got = schema_visit_all_of(c, v, name, rule_name, path);
            else if (schema_get(node, "allOf")) got = schema_visit_all_of_siblings(c, node, name, rule_name, path);
            else got = schema_visit_object(c, node, name, rule_name, path);
        } else if (!strcmp(tn, "string")) {
            if ((v = schema_get(node, "allOf"))) got = schema_visit_all_of(c, v, name, rule_name, path);
            else got = visit_string(c, node, rule_name, path);
        } else if (!strcmp(tn, "array")) {
            got = visit_array(c, node, sub, rule_name, path);
        } else if (!strcmp(tn, "integer")) {
            got = visit_integer(c, node, rule_name, path);
        } else if (!strcmp(tn, "number") || !strcmp(tn, "boolean") || !strcmp(tn, "null")) {
            got = visit_primitive(c, rule_name, tn);
        } else {
            schema_fail(c, path, "unknown type '%.60s'", tn);
        }
    }
    c->depth--;
    return c->failed ? NULL : got;
}

static int by_name(const void *a, const void *b) { return strcmp(((const rule *)a)->name, ((const rule *)b)->name); }

static void conv_free(conv *c) {
    for (int i = 0; i < c->n_rules; i++) free(c->rules[i].name), free(c->rules[i].body);
    free(c->rules);
    for (size_t i = 0; i < c->n_owned; i++) free(c->owned[i]);
    free(c->owned);
}

/* The rules as GBNF text, sorted by name (NULL after a failure, which c then holds). */
static char *rules_text(conv *c) {
    if (c->failed) return NULL;
    qsort(c->rules, (size_t)c->n_rules, sizeof *c->rules, by_name);
    strbuf o = SCHEMA_BUF;
    for (int i = 0; i < c->n_rules; i++) strbuf_printf(&o, "%s ::= %s\n", c->rules[i].name, c->rules[i].body);
    if (o.failed) {
        strbuf_free(&o);
        return schema_fail(c, "#", "the grammar grows past %u MiB", SCHEMA_MAX_TEXT >> 20);
    }
    return strbuf_take(&o);
}

char *json_schema_to_gbnf(const char *schema, size_t len, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    if (!schema) {
        if (err) snprintf(err, errlen, "schema: no schema");
        return NULL;
    }
    if (len > MAX_SCHEMA_BYTES) {
        if (err) snprintf(err, errlen, "schema: larger than %u MiB", MAX_SCHEMA_BYTES >> 20);
        return NULL;
    }
    const char *end = NULL;
    cJSON *doc = cJSON_ParseWithLengthOpts(schema, len, &end, 0);
    if (doc && end) {
        while (end < schema + len && (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t')) end++;
        if (end < schema + len && *end) cJSON_Delete(doc), doc = NULL;
    }
    if (!doc) {
        if (err) snprintf(err, errlen, "schema: not JSON (near byte %zu)", end ? (size_t)(end - schema) : (size_t)0);
        return NULL;
    }
    conv c = {.doc = doc};
    schema_add_rule(&c, "space", SPACE_RULE);
    const char *root = schema_visit(&c, doc, NULL, "", "#");
    if (root && strcmp(root, "root")) schema_add_rule(&c, "root", root);
    char *out = rules_text(&c);
    char gerr[256];
    grammar *g = out ? grammar_compile(out, strlen(out), gerr, sizeof gerr) : NULL;
    if (out && !g) {
        schema_fail(&c, "#", "the grammar does not compile: %s", gerr);
        free(out);
        out = NULL;
    }
    grammar_free(g);
    if (!out && err) snprintf(err, errlen, "%s", c.err[0] ? c.err : "schema: out of memory");
    conv_free(&c);
    cJSON_Delete(doc);
    return out;
}

char *json_schemas_to_gbnf_rules(const cJSON *const *schemas, const char *const *names, int n, char *err,
                                 size_t errlen) {
    if (err && errlen) err[0] = 0;
    conv c = {0};
    schema_add_rule(&c, "space", SPACE_RULE);
    for (int i = 0; i < n && !c.failed; i++) {
        c.doc = schemas[i]; /* a "#/..." $ref points into the schema it is in */
        const char *got = schema_visit(&c, schemas[i], NULL, names[i], "#");
        if (got && strcmp(got, names[i]) && (got = schema_add_rule(&c, names[i], got)) && strcmp(got, names[i]))
            schema_fail(&c, "#", "the rule name %s is taken", names[i]);
    }
    char *out = rules_text(&c);
    if (!out && err) snprintf(err, errlen, "%s", c.err[0] ? c.err : "schema: out of memory");
    conv_free(&c);
    return out;
}
