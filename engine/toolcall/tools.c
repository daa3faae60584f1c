/* tools.c - the offered functions: OpenAI's tools array compiled to names and each
 * parameter's types (what an XML call's text values are converted to) and required flag. */
#include "engine/toolcall/toolcall_impl.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned type_bit(const char *t) {
    static const struct { const char *name; unsigned bit; } types[] = {
        {"string", TC_T_STRING},   {"integer", TC_T_INTEGER}, {"number", TC_T_NUMBER}, {"boolean", TC_T_BOOLEAN},
        {"null", TC_T_NULL},       {"object", TC_T_OBJECT},   {"array", TC_T_ARRAY},
    };
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++)
        if (strcmp(t, types[k].name) == 0) return types[k].bit;
    return 0;
}

static unsigned value_bit(const cJSON *v) {
    if (cJSON_IsString(v)) return TC_T_STRING;
    if (cJSON_IsBool(v)) return TC_T_BOOLEAN;
    if (cJSON_IsNull(v)) return TC_T_NULL;
    if (cJSON_IsArray(v)) return TC_T_ARRAY;
    if (cJSON_IsObject(v)) return TC_T_OBJECT;
    if (cJSON_IsNumber(v)) return v->valuedouble == (double)(long long)v->valuedouble ? TC_T_INTEGER : TC_T_NUMBER;
    return 0;
}

/* The types a parameter's schema admits, as llama.cpp's common_chat_schema::value_types
 * reads them: "type" (one or a list), else the values of "enum" / "const", else the union
 * of "anyOf" / "oneOf"; a schema that says none admits every type. */
static unsigned schema_types(const cJSON *schema, int depth) {
    if (!cJSON_IsObject(schema) || depth > 16) return TC_T_ANY;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(schema, "type");
    unsigned t = 0;
    if (cJSON_IsString(type)) {
        t = type_bit(type->valuestring);
    } else if (cJSON_IsArray(type)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, type) if (cJSON_IsString(e)) t |= type_bit(e->valuestring);
    }
    if (t) return t;
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(schema, "enum");
    if (cJSON_IsArray(en)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, en) t |= value_bit(e);
        if (t) return t;
    }
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(schema, "const");
    if (c) return value_bit(c) ? value_bit(c) : TC_T_ANY;
    static const char *const unions[] = {"anyOf", "oneOf"};
    for (int k = 0; k < 2; k++) {
        const cJSON *alts = cJSON_GetObjectItemCaseSensitive(schema, unions[k]);
        if (!cJSON_IsArray(alts)) continue;
        const cJSON *e;
        cJSON_ArrayForEach(e, alts) t |= schema_types(e, depth + 1);
        if (t) return t;
    }
    return TC_T_ANY;
}

static char *dup(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

void tc_tools_free(struct tc_tools *t) {
    if (!t) return;
    for (int i = 0; i < t->n; i++) {
        for (int k = 0; k < t->tools[i].n_params; k++) free(t->tools[i].params[k].name);
        free(t->tools[i].params);
        free(t->tools[i].name);
    }
    free(t->tools);
    free(t);
}

int tc_tools_count(const struct tc_tools *t) { return t ? t->n : 0; }

/* one tool: {"type": "function", "function": {"name", "parameters"}}, or the function alone */
static const char *compile_tool(const cJSON *item, struct tc_tool *out) {
    if (!cJSON_IsObject(item)) return "not an object";
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(item, "type");
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(item, "function");
    if (type && !(cJSON_IsString(type) && strcmp(type->valuestring, "function") == 0))
        return "type is not \"function\"";
    if (!fn) fn = item;
    if (!cJSON_IsObject(fn)) return "function is not an object";
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    if (!cJSON_IsString(name) || !name->valuestring[0]) return "function has no name";
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
    if (params && !cJSON_IsObject(params)) return "function.parameters is not an object";
    const cJSON *props = params ? cJSON_GetObjectItemCaseSensitive(params, "properties") : NULL;
    if (props && !cJSON_IsObject(props)) return "function.parameters.properties is not an object";
    const cJSON *req = params ? cJSON_GetObjectItemCaseSensitive(params, "required") : NULL;
    if (req && !cJSON_IsArray(req)) return "function.parameters.required is not an array";
    if (!(out->name = dup(name->valuestring))) return "out of memory";
    int n = props ? cJSON_GetArraySize(props) : 0;
    out->params = n ? calloc((size_t)n, sizeof *out->params) : NULL;
    if (n && !out->params) return "out of memory";
    const cJSON *p;
    if (props) cJSON_ArrayForEach(p, props) {
        struct tc_param *q = &out->params[out->n_params];
        if (!(q->name = dup(p->string))) return "out of memory";
        out->n_params++;
        q->types = schema_types(p, 0);
        const cJSON *r;
        if (req) cJSON_ArrayForEach(r, req) if (cJSON_IsString(r) && strcmp(r->valuestring, p->string) == 0) q->required = true;
    }
    return NULL;
}

struct tc_tools *tc_tools_parse(const char *json, size_t len, char *err, size_t errlen) {
    char dummy[1];
    if (!err || !errlen) err = dummy, errlen = sizeof dummy;
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) {
        snprintf(err, errlen, "tools: not JSON");
        return NULL;
    }
    if (!cJSON_IsArray(root)) {
        snprintf(err, errlen, "tools: not an array of tools");
        cJSON_Delete(root);
        return NULL;
    }
    struct tc_tools *t = calloc(1, sizeof *t);
    int n = cJSON_GetArraySize(root);
    if (t && n) t->tools = calloc((size_t)n, sizeof *t->tools);
    if (!t || (n && !t->tools)) {
        snprintf(err, errlen, "tools: out of memory");
        free(t);
        cJSON_Delete(root);
        return NULL;
    }
    const cJSON *item;
    cJSON_ArrayForEach(item, root) {
        struct tc_tool *out = &t->tools[t->n++];
        const char *why = compile_tool(item, out);
        if (!why && tc_tools_find(t, out->name, strlen(out->name)) != out) why = "a second function of that name";
        if (why) {
            snprintf(err, errlen, "tools[%d]: %s", t->n - 1, why);
            tc_tools_free(t);
            cJSON_Delete(root);
            return NULL;
        }
    }
    cJSON_Delete(root);
    return t;
}

const struct tc_tool *tc_tools_find(const struct tc_tools *t, const char *name, size_t len) {
    if (!t) return NULL;
    for (int i = 0; i < t->n; i++)
        if (t->tools[i].name && strlen(t->tools[i].name) == len && memcmp(t->tools[i].name, name, len) == 0)
            return &t->tools[i];
    return NULL;
}

const struct tc_param *tc_tool_param(const struct tc_tool *t, const char *name, size_t len) {
    if (!t) return NULL;
    for (int i = 0; i < t->n_params; i++)
        if (strlen(t->params[i].name) == len && memcmp(t->params[i].name, name, len) == 0) return &t->params[i];
    return NULL;
}
