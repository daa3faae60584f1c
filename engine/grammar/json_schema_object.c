/* json_schema_object.c - object schemas as llama.cpp writes them: the required
 * properties in the schema's order, then the optional ones in theirs, each skippable (a
 * -rest rule says what may follow a property), then the additional properties whose keys
 * are any JSON string but the named ones; and allOf, whose objects merge into one (the
 * properties of a union inside it optional) and whose enums intersect. */
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/json_schema_conv.h"

/* the additional keys' trie recurses once per character of a name */
#define MAX_KEY_TRIE 1024

/* `true`: what an absent additionalProperties allows */
static const cJSON TRUE_SCHEMA = {.type = cJSON_True};

/* The JSON text of a string's value, without its quotes (NULL: not UTF-8). */
static char *json_text(conv *c, const char *value, const char *path) {
    strbuf b = SCHEMA_BUF;
    const unsigned char *s = (const unsigned char *)value;
    for (size_t at = 0, len = strlen(value); at < len;) {
        uint32_t cp;
        size_t k = schema_utf8_decode(s + at, len - at, &cp);
        if (!k) {
            strbuf_free(&b);
            return schema_fail(c, path, "a property name that is not UTF-8");
        }
        char e[8];
        strbuf_add(&b, e, schema_json_escape(cp, e));
        at += k;
    }
    return schema_take(c, &b);
}

/* one character (k bytes of UTF-8) inside a GBNF class */
static void class_item(strbuf *o, const char *ch, size_t k) {
    if (k == 1 && strchr("\\]-^[", ch[0])) strbuf_printf(o, "\\x%02X", (unsigned char)ch[0]);
    else strbuf_add(o, ch, k);
}

/* A JSON string other than the given ones (the additional properties' keys): a trie of
 * their JSON text, each node the characters that leave the names or go on. A word that
 * ends at a node is refused there; a node where no word ends may be where the key ends. */
static void not_strings_node(conv *c, strbuf *o, char **names, int n, size_t depth) {
    int alts = 0, escape_child = 0;
    char firsts[128]; /* the single-byte characters the names go on with */
    size_t n_firsts = 0;
    strbuf rejects = SCHEMA_BUF;
    for (int i = 0; i < n;) {
        uint32_t cp;
        size_t k = names[i][depth] ? schema_utf8_decode((unsigned char *)names[i] + depth, strlen(names[i] + depth), &cp) : 0;
        if (!names[i][depth] || !k) {
            i++;
            continue;
        }
        int j = i + 1;
        while (j < n && !strncmp(names[j] + depth, names[i] + depth, k)) j++;
        if (alts++) strbuf_adds(o, " | ");
        strbuf_adds(o, "[");
        class_item(o, names[i] + depth, k);
        strbuf_adds(o, "]");
        class_item(&rejects, names[i] + depth, k);
        escape_child |= names[i][depth] == '\\';
        if (k == 1 && n_firsts < sizeof firsts) firsts[n_firsts++] = names[i][depth];
        /* the names through this character: is one of them its end, does one go on? */
        int ends = 0, goes_on = 0;
        for (int m = i; m < j; m++) names[m][depth + k] ? (goes_on = 1) : (ends = 1);
        if (!goes_on) strbuf_adds(o, " char+");
        else {
            strbuf_adds(o, " (");
            not_strings_node(c, o, names + i, j - i, depth + k);
            /* after a backslash that starts an escape the key cannot end */
            size_t run = 0;
            while (run < depth + k && names[i][depth + k - 1 - run] == '\\') run++;
            strbuf_adds(o, ends || run % 2 ? ")" : ")?");
        }
        i = j;
    }
    /* inside an escape (after an odd run of backslashes): the escape's other letters */
    size_t slashes = 0;
    while (slashes < depth && names[0][depth - 1 - slashes] == '\\') slashes++;
    if (alts && slashes % 2) {
        strbuf_adds(o, " | [");
        for (const char *l = "\"\\bfnrt"; *l; l++)
            if (!memchr(firsts, *l, n_firsts)) class_item(o, l, 1);
        strbuf_adds(o, "] char*");
        alts = 0;
    }
    if (alts) {
        /* any other character, a backslash only as the start of an escape */
        strbuf_adds(o, " | [^\"\\\\");
        strbuf_add(o, rejects.s, rejects.n);
        strbuf_adds(o, "] char*");
        if (!escape_child) strbuf_adds(o, " | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4}) char*");
    }
    strbuf_free(&rejects);
}

static int by_string(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static const char *not_strings(conv *c, const prop *props, int n, const char *path) {
    char **names = calloc((size_t)n + 1, sizeof *names);
    if (!names) return schema_fail(c, path, "out of memory");
    int empty = 0;
    for (int i = 0; i < n && !c->failed; i++) {
        char *t = json_text(c, props[i].name, path);
        names[i] = t; /* owned by the conversion */
        if (t && strlen(t) > MAX_KEY_TRIE)
            schema_fail(c, path, "a property name longer than %d bytes beside additionalProperties", MAX_KEY_TRIE);
        empty |= t && !t[0];
    }
    const char *got = NULL;
    if (!c->failed) {
        qsort(names, (size_t)n, sizeof *names, by_string);
        schema_add_primitive(c, "char");
        strbuf o = SCHEMA_BUF;
        strbuf_adds(&o, "[\"] ( ");
        not_strings_node(c, &o, names, n, 0);
        strbuf_adds(&o, empty ? " ) [\"]" : " )? [\"]");
        got = schema_take(c, &o);
    }
    free(names);
    return got;
}

/* `"{" space` the required properties, then the optional ones in their order, each
 * skippable (llama.cpp's -rest rules: what may follow a property), then additional
 * properties when allowed, `space "}"`. additional: NULL (none), or a schema. */
static const char *object_rule(conv *c, const prop *props, int n, const char *name, const cJSON *additional,
                               const char *path) {
    const char *sub = *name ? schema_fmt(c, "%s-", name) : "";
    const char **kv = calloc((size_t)n + 1, sizeof *kv);
    int *optional = calloc((size_t)n + 1, sizeof *optional);
    const char **keys = calloc((size_t)n + 1, sizeof *keys);
    if (!kv || !optional || !keys) {
        free(kv), free(optional), free(keys);
        return schema_fail(c, path, "out of memory");
    }
    int n_opt = 0;
    strbuf o = SCHEMA_BUF;
    strbuf_adds(&o, "\"{\" space ");
    int n_req = 0;
    for (int i = 0; i < n && !c->failed; i++) {
        const char *pname = props[i].name[0] ? props[i].name : "empty";
        const char *value = schema_visit(c, props[i].schema, NULL, schema_fmt(c, "%s%s", sub, pname), props[i].path);
        char *text = json_text(c, props[i].name, props[i].path);
        strbuf key = SCHEMA_BUF;
        if (text) strbuf_adds(&key, "\""), strbuf_adds(&key, text), strbuf_adds(&key, "\"");
        strbuf lit = SCHEMA_BUF;
        if (text) schema_gbnf_literal(&lit, key.s, key.n);
        strbuf_free(&key);
        char *key_lit = text ? schema_take(c, &lit) : NULL;
        kv[i] = value && key_lit ? schema_add_rule(c, schema_fmt(c, "%s%s-kv", sub, pname), schema_fmt(c, "%s space \":\" space %s", key_lit, value)) : NULL;
        if (props[i].required) {
            if (n_req++) strbuf_adds(&o, " \",\" space ");
            strbuf_adds(&o, kv[i] ? kv[i] : "");
        } else {
            optional[n_opt] = i;
            keys[n_opt++] = pname;
        }
    }
    const char *add_kv = NULL;
    if (additional && !c->failed) {
        char *aname = schema_fmt(c, "%sadditional", sub);
        const char *value = schema_is_any(additional) ? schema_add_primitive(c, "value") : schema_visit(c, additional, NULL, schema_fmt(c, "%s-value", aname), schema_fmt(c, "%s/additionalProperties", path));
        const char *key = n ? schema_add_rule(c, schema_fmt(c, "%s-k", aname), not_strings(c, props, n, path)) : schema_add_primitive(c, "string");
        add_kv = schema_add_rule(c, schema_fmt(c, "%s-kv", aname), schema_fmt(c, "%s \":\" space %s", key, value));
    }
    int n_tail = n_opt + (add_kv != NULL);
    if (n_tail && !c->failed) {
        /* rest[k]: what may follow the k-th optional property */
        const char **rest = calloc((size_t)n_tail + 1, sizeof *rest);
        if (!rest) schema_fail(c, path, "out of memory");
        for (int k = n_tail - 2; rest && k >= 0 && !c->failed; k--) {
            const char *next_kv = k + 1 < n_opt ? kv[optional[k + 1]] : add_kv;
            const char *body = k + 1 < n_opt ? schema_fmt(c, "( \",\" space %s )?%s%s", next_kv, rest[k + 1] ? " " : "", rest[k + 1] ? rest[k + 1] : "")
                                             : schema_fmt(c, "( \",\" space %s )*", next_kv);
            rest[k] = schema_add_rule(c, schema_fmt(c, "%s%s-rest", sub, keys[k]), body);
        }
        strbuf_adds(&o, n_req ? " ( \",\" space ( " : " (");
        for (int k = 0; rest && k < n_tail && !c->failed; k++) {
            if (k) strbuf_adds(&o, " | ");
            if (k < n_opt) strbuf_printf(&o, "%s%s%s", kv[optional[k]], rest[k] ? " " : "", rest[k] ? rest[k] : "");
            else strbuf_printf(&o, "%s ( \",\" space %s )*", add_kv, add_kv);
        }
        strbuf_adds(&o, n_req ? " ) )?" : " )?");
        free(rest);
    }
    strbuf_adds(&o, " space \"}\"");
    free(kv), free(optional), free(keys);
    if (c->failed) {
        strbuf_free(&o);
        return NULL;
    }
    return schema_take(c, &o);
}

/* properties of an object schema, in the schema's order */
static prop *object_props(conv *c, const cJSON *node, const char *path, int all_required, int *n) {
    const cJSON *ps = schema_get(node, "properties"), *req = schema_get(node, "required");
    *n = 0;
    if (ps && !cJSON_IsObject(ps)) return schema_fail(c, path, "properties must be an object");
    if (req && !cJSON_IsArray(req)) return schema_fail(c, path, "required must be an array of names");
    int cnt = cJSON_GetArraySize(ps);
    prop *out = calloc((size_t)cnt + 1, sizeof *out);
    if (!out) return schema_fail(c, path, "out of memory");
    const cJSON *p;
    cJSON_ArrayForEach(p, ps) {
        out[*n] = (prop){p->string, p, schema_fmt(c, "%s/properties/%s", path, p->string), all_required};
        (*n)++;
    }
    const cJSON *r;
    cJSON_ArrayForEach(r, req) {
        if (!cJSON_IsString(r)) {
            free(out);
            return schema_fail(c, path, "required must be an array of names");
        }
        int found = 0;
        for (int i = 0; i < *n; i++)
            if (!strcmp(out[i].name, r->valuestring)) out[i].required = found = 1;
        if (!found) {
            free(out);
            return schema_fail(c, path, "required property '%s' is not among the properties", r->valuestring);
        }
    }
    return out;
}

const char *schema_visit_object(conv *c, const cJSON *node, const char *name, const char *rule_name, const char *path) {
    const cJSON *ap = schema_get(node, "additionalProperties");
    const cJSON *additional = NULL;
    if (!ap) additional = schema_get(node, "properties") ? NULL : &TRUE_SCHEMA;
    else if (cJSON_IsBool(ap)) additional = cJSON_IsTrue(ap) ? &TRUE_SCHEMA : NULL;
    else if (cJSON_IsObject(ap)) additional = ap;
    else return schema_fail(c, path, "additionalProperties must be a boolean or a schema");
    int n;
    prop *props = object_props(c, node, path, 0, &n);
    if (!props) return NULL;
    const char *got;
    if (!n && additional && schema_is_any(additional)) got = schema_add_rule(c, rule_name, schema_add_primitive(c, "object"));
    else got = schema_add_rule(c, rule_name, object_rule(c, props, n, name, additional, path));
    free(props);
    return got;
}

/* allOf: objects merged, enums intersected */

typedef struct {
    prop *props;
    int n, cap;
    const char **enum_lits; /* one entry per value per component */
    int n_enum, cap_enum;
    int enum_components;
} merged;

static int merge_component(conv *c, merged *m, const cJSON *comp, int required, const char *path, int depth);

static int merge_prop(conv *c, merged *m, const char *name, const cJSON *schema, const char *path, int required) {
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->props[i].name, name)) {
            m->props[i].required |= required;
            return 0;
        }
    if (m->n == m->cap) {
        int cap = m->cap ? m->cap * 2 : 8;
        prop *p = realloc(m->props, (size_t)cap * sizeof *p);
        if (!p) return schema_fail(c, path, "out of memory"), -1;
        m->props = p, m->cap = cap;
    }
    m->props[m->n++] = (prop){name, schema, path, required};
    return 0;
}

static int merge_component(conv *c, merged *m, const cJSON *comp, int required, const char *path, int depth) {
    if (depth > MAX_DEPTH) return schema_fail(c, path, "allOf nested deeper than %d", MAX_DEPTH), -1;
    if (schema_is_any(comp)) return 0;
    if (!cJSON_IsObject(comp)) return schema_fail(c, path, "allOf: a component must be a schema object"), -1;
    const cJSON *ref = schema_get(comp, "$ref");
    if (ref) {
        if (!cJSON_IsString(ref)) return schema_fail(c, path, "$ref must be a string"), -1;
        const cJSON *target = schema_resolve(c, ref->valuestring, path);
        return target ? merge_component(c, m, target, required, ref->valuestring, depth + 1) : -1;
    }
    const cJSON *alts = schema_get(comp, "oneOf");
    if (!alts) alts = schema_get(comp, "anyOf");
    if (alts) {
        /* a union's branches: their properties, each optional */
        if (!cJSON_IsArray(alts)) return schema_fail(c, path, "anyOf / oneOf must be an array of schemas"), -1;
        int i = 0;
        const cJSON *a;
        const char *key = schema_get(comp, "oneOf") ? "oneOf" : "anyOf";
        cJSON_ArrayForEach(a, alts) if (merge_component(c, m, a, 0, schema_fmt(c, "%s/%s/%d", path, key, i++), depth + 1)) return -1;
        return 0;
    }
    const cJSON *en = schema_get(comp, "enum");
    if (en) {
        if (!cJSON_IsArray(en) || !cJSON_GetArraySize(en)) return schema_fail(c, path, "enum has no values"), -1;
        m->enum_components++;
        const cJSON *v;
        cJSON_ArrayForEach(v, en) {
            const char *lit = schema_constant(c, v, path);
            if (!lit) return -1;
            if (m->n_enum == m->cap_enum) {
                int cap = m->cap_enum ? m->cap_enum * 2 : 16;
                const char **e = realloc(m->enum_lits, (size_t)cap * sizeof *e);
                if (!e) return schema_fail(c, path, "out of memory"), -1;
                m->enum_lits = e, m->cap_enum = cap;
            }
            m->enum_lits[m->n_enum++] = lit;
        }
        return 0;
    }
    const cJSON *t = schema_get(comp, "type");
    if (schema_get(comp, "allOf") && !schema_has_properties(comp)) {
        const cJSON *a;
        int i = 0;
        cJSON_ArrayForEach(a, schema_get(comp, "allOf")) if (merge_component(c, m, a, required, schema_fmt(c, "%s/allOf/%d", path, i++), depth + 1)) return -1;
        return 0;
    }
    if (schema_has_properties(comp) || (cJSON_IsString(t) && !strcmp(t->valuestring, "object"))) {
        /* additionalProperties sees only its own object's properties, so in a component (or
         * beside allOf) false forbids what the other components require: not what a merge of
         * the properties would mean */
        const cJSON *ap = schema_get(comp, "additionalProperties");
        if (ap && !cJSON_IsTrue(ap))
            return schema_fail(c, path, "allOf: additionalProperties in a merged object (or beside allOf) is not "
                                        "supported: it sees only that object's own properties"), -1;
        int n;
        prop *ps = object_props(c, comp, path, required, &n);
        if (!ps) return -1;
        int bad = 0;
        for (int i = 0; i < n && !bad; i++) bad = merge_prop(c, m, ps[i].name, ps[i].schema, ps[i].path, ps[i].required);
        free(ps);
        return bad;
    }
    return schema_fail(c, path, "allOf: only objects and enums are merged, this component is neither"), -1;
}

const char *schema_visit_all_of(conv *c, const cJSON *all, const char *name, const char *rule_name, const char *path) {
    if (!cJSON_IsArray(all) || !cJSON_GetArraySize(all)) return schema_fail(c, path, "allOf must be a non-empty array of schemas");
    merged m = {0};
    int i = 0, n_children = 0;
    const cJSON *comp;
    cJSON_ArrayForEach(comp, all) {
        n_children++;
        if (merge_component(c, &m, comp, 1, schema_fmt(c, "%s/allOf/%d", path, i++), 0)) break;
    }
    const char *got = NULL;
    if (!c->failed && m.enum_components) {
        /* the values every component's enum has (llama.cpp: counted over all children) */
        strbuf o = SCHEMA_BUF;
        int kept = 0;
        for (int a = 0; a < m.n_enum; a++) {
            int seen = 0, first = 1;
            for (int b = 0; b < m.n_enum; b++)
                if (!strcmp(m.enum_lits[a], m.enum_lits[b])) {
                    seen++;
                    if (b < a) first = 0;
                }
            if (!first || seen != n_children) continue;
            strbuf_adds(&o, kept++ ? " | " : "(");
            strbuf_adds(&o, m.enum_lits[a]);
        }
        if (!kept) {
            strbuf_free(&o);
            schema_fail(c, path, "allOf: no value is in every enum (the schema admits nothing)");
        } else {
            strbuf_adds(&o, ")");
            got = schema_add_rule(c, rule_name, schema_take(c, &o));
        }
    } else if (!c->failed) {
        got = schema_add_rule(c, rule_name, object_rule(c, m.props, m.n, name, NULL, path));
    }
    free(m.props);
    free(m.enum_lits);
    return got;
}

const char *schema_visit_all_of_siblings(conv *c, const cJSON *node, const char *name, const char *rule_name,
                                         const char *path) {
    /* a copy of the components plus the node without its allOf, freed once visited: the
     * conversion keeps no pointer into the schema past the visit (names and rules are its own) */
    cJSON *all = cJSON_Duplicate(schema_get(node, "allOf"), 1), *own = cJSON_Duplicate(node, 1);
    const char *got = NULL;
    if (!all || !own || !cJSON_IsArray(all)) {
        cJSON_Delete(own);
        if (all && !cJSON_IsArray(all)) schema_fail(c, path, "allOf must be a non-empty array of schemas");
        else schema_fail(c, path, "out of memory");
    } else {
        cJSON_DeleteItemFromObjectCaseSensitive(own, "allOf");
        cJSON_InsertItemInArray(all, 0, own); /* its own properties first, in the order given */
        got = schema_visit_all_of(c, all, name, rule_name, path);
    }
    cJSON_Delete(all);
    return got;
}
