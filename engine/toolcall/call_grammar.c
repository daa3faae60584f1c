/* call_grammar.c - the grammar of an answer that must be calls (tool_choice "required",
 * or one named function): the family's own markup around the offered functions' names,
 * each argument as its parameter's schema allows (grammar/json_schema.h writes the value
 * rules), so that a constrained model writes a call tc_parse reads.
 *
 * The markup is what each family's template writes for a call in the history, so the
 * model's own habit and the grammar agree:
 *   hermes    <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>   (one per block)
 *   llama3    {"name": NAME, "parameters": {...}}                              (one call)
 *   qwen-xml  <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n...</function>\n</tool_call>
 * In the XML families a string value is raw text that holds no "</" (the parser ends a
 * value at the first "</parameter>"; maxLength bounds it, counting a "<" and the
 * character after it as one), a string with an enum one of its values, any other
 * type the JSON its schema allows; the parameters come in the schema's order, the
 * optional ones skippable. */
#include "engine/toolcall/toolcall_impl.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/json_schema.h"

/* the function object of a tools item ({"type": "function", "function": {...}} or the
 * function alone); tc_tools_parse has checked the shape */
static const cJSON *function_of(const cJSON *item) {
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(item, "function");
    return fn ? fn : item;
}

static const char *name_of(const cJSON *fn) {
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fn, "name"));
}

/* true when the XML families write the value as raw text: a schema whose types include
 * string (or say none) */
static bool raw_text(const cJSON *schema) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(schema, "type");
    if (cJSON_IsString(type)) return !strcmp(type->valuestring, "string");
    if (cJSON_IsArray(type)) {
        const cJSON *t;
        cJSON_ArrayForEach(t, type) if (cJSON_IsString(t) && !strcmp(t->valuestring, "string")) return true;
        return false;
    }
    return !cJSON_GetObjectItemCaseSensitive(schema, "enum") && !cJSON_GetObjectItemCaseSensitive(schema, "const");
}

/* a string enum's values as literal alternatives ("celsius" | "fahrenheit"); false when
 * the schema is not one */
static bool enum_literals(const cJSON *schema, strbuf *o) {
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(schema, "enum");
    if (!cJSON_IsArray(en) || !cJSON_GetArraySize(en)) return false;
    const cJSON *v;
    cJSON_ArrayForEach(v, en) if (!cJSON_IsString(v)) return false;
    strbuf_adds(o, "(");
    cJSON_ArrayForEach(v, en) {
        char *lit = gbnf_literal(v->valuestring, strlen(v->valuestring));
        if (!lit) o->failed = true;
        else strbuf_printf(o, "%s%s", v != en->child ? " | " : "", lit);
        free(lit);
    }
    strbuf_adds(o, ")");
    return true;
}

static void add_literal(strbuf *o, const char *s) {
    char *lit = gbnf_literal(s, strlen(s));
    if (!lit) o->failed = true;
    else strbuf_adds(o, lit);
    free(lit);
}

static bool required(const cJSON *params, const char *key) {
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(params, "required"))
        if (cJSON_IsString(r) && !strcmp(r->valuestring, key)) return true;
    return false;
}

/* The schemas the value rules come from: for the JSON families one per function (the
 * whole call object), for XML one per parameter written as JSON. */
struct value_rules {
    cJSON *owned;          /* an array holding the call objects made here */
    const cJSON **schemas;
    char **names;
    int n, cap;
};

static bool add_value_rule(struct value_rules *v, const cJSON *schema, const char *name) {
    if (v->n == v->cap) {
        int cap = v->cap ? 2 * v->cap : 16;
        const cJSON **s = realloc(v->schemas, sizeof *s * (size_t)cap);
        if (s) v->schemas = s;
        char **n = realloc(v->names, sizeof *n * (size_t)cap);
        if (n) v->names = n;
        if (!s || !n) return false;
        v->cap = cap;
    }
    if (!(v->names[v->n] = strdup(name))) return false;
    v->schemas[v->n++] = schema;
    return true;
}

static void value_rules_free(struct value_rules *v) {
    for (int i = 0; i < v->n; i++) free(v->names[i]);
    free(v->names);
    free(v->schemas);
    cJSON_Delete(v->owned);
}

/* {"type": "object", "properties": {"name": {"const": NAME}, ARGS: PARAMS}, "required": [...]} */
static const cJSON *call_object(struct value_rules *v, const char *name, const cJSON *params, const char *args_key) {
    cJSON *o = cJSON_CreateObject(), *props = cJSON_AddObjectToObject(o, "properties");
    cJSON *nm = cJSON_AddObjectToObject(props, "name");
    cJSON_AddStringToObject(nm, "const", name);
    cJSON *p = params ? cJSON_Duplicate(params, 1) : cJSON_CreateObject();
    if (p && !params) cJSON_AddStringToObject(p, "type", "object");
    cJSON_AddItemToObject(props, args_key, p);
    cJSON *req = cJSON_AddArrayToObject(o, "required");
    cJSON_AddItemToArray(req, cJSON_CreateString("name"));
    cJSON_AddItemToArray(req, cJSON_CreateString(args_key));
    cJSON_AddStringToObject(o, "type", "object");
    cJSON_AddItemToArray(v->owned, o);
    return o;
}

char *tc_call_grammar(enum tc_family f, const char *tools_json, size_t len, const char *only, bool parallel, char *err,
                      size_t errlen) {
    char dummy[1];
    if (!err || !errlen) err = dummy, errlen = sizeof dummy;
    if (f != TC_HERMES && f != TC_LLAMA3 && f != TC_QWEN_XML && f != TC_QWEN3_CODER) {
        snprintf(err, errlen, "a call cannot be required in the %s family's format", tc_family_name(f));
        return NULL;
    }
    struct tc_tools *checked = tc_tools_parse(tools_json, len, err, errlen);
    if (!checked) return NULL;
    tc_tools_free(checked);
    cJSON *tools = cJSON_ParseWithLength(tools_json, len);
    struct value_rules v = {.owned = cJSON_CreateArray()};
    strbuf alts = {0}, xml = {0}, o = {0};
    char *out = NULL, *values = NULL, rule[64];
    bool ok = tools && v.owned;
    int i = 0, chosen = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, tools) {
        if (!ok) break;
        const cJSON *fn = function_of(item), *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        const char *name = name_of(fn);
        i++;
        if (only && strcmp(only, name)) continue;
        chosen++;
        if (alts.n) strbuf_adds(&alts, " | ");
        snprintf(rule, sizeof rule, "tc-call-%d", i);
        strbuf_adds(&alts, rule);
        if (f == TC_HERMES || f == TC_LLAMA3) {
            const cJSON *call = call_object(&v, name, params, f == TC_HERMES ? "arguments" : "parameters");
            ok = add_value_rule(&v, call, rule);
            continue;
        }
        /* XML: the function's markup here, its non-text values as JSON value rules */
        strbuf_printf(&xml, "%s ::= \"<function=\" ", rule);
        add_literal(&xml, name);
        strbuf_adds(&xml, " \">\\n\"");
        int k = 0;
        const cJSON *p;
        cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(params, "properties")) {
            k++;
            strbuf_adds(&xml, " (\"<parameter=\" ");
            add_literal(&xml, p->string);
            strbuf_adds(&xml, " \">\\n\" ");
            if (!enum_literals(p, &xml)) {
                const cJSON *max = cJSON_GetObjectItemCaseSensitive(p, "maxLength");
                if (raw_text(p) && cJSON_IsNumber(max) && max->valuedouble >= 0 && max->valuedouble <= 2000) {
                    strbuf_printf(&xml, "tc-xml-char{0,%d}", (int)max->valuedouble);
                } else if (raw_text(p)) {
                    strbuf_adds(&xml, "tc-xml-char*");
                } else {
                    snprintf(rule, sizeof rule, "tc-value-%d-%d", i, k);
                    strbuf_adds(&xml, rule);
                    ok = ok && add_value_rule(&v, p, rule);
                }
            }
            strbuf_adds(&xml, required(params, p->string) ? " \"\\n</parameter>\\n\")" : " \"\\n</parameter>\\n\")?");
        }
        strbuf_adds(&xml, " \"</function>\\n\"\n");
    }
    if (ok && !chosen) {
        snprintf(err, errlen, "tool_choice: no offered function is named '%.80s'", only ? only : "");
        goto done;
    }
    if (ok && v.n) {
        values = json_schemas_to_gbnf_rules(v.schemas, (const char *const *)v.names, v.n, err, errlen);
        if (!values) goto done;
    }
    if (!ok || xml.failed || alts.failed) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    if (f == TC_LLAMA3) {
        strbuf_printf(&o, "root ::= %s\n", alts.s);
    } else {
        strbuf_printf(&o, "root ::= tc-call%s\n", parallel ? " (\"\\n\" tc-call)*" : "");
        if (f == TC_HERMES) strbuf_printf(&o, "tc-call ::= \"<tool_call>\\n\" (%s) \"\\n</tool_call>\"\n", alts.s);
        else strbuf_printf(&o, "tc-call ::= \"<tool_call>\\n\" (%s) \"</tool_call>\"\n", alts.s);
        if (xml.n) strbuf_printf(&o, "%stc-xml-char ::= [^<] | \"<\" [^/]\n", xml.s);
    }
    if (values) strbuf_adds(&o, values);
    out = strbuf_take(&o);
    if (!out) snprintf(err, errlen, "out of memory");
done:
    free(values);
    strbuf_free(&o);
    strbuf_free(&alts);
    strbuf_free(&xml);
    value_rules_free(&v);
    cJSON_Delete(tools);
    return out;
}
