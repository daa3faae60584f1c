/* filters_seq.c - jinja2's filters over sequences and mappings: length, first, join, map,
 * select, sort, unique, ... As in jinja2, map, select(attr), reject(attr), unique, items,
 * batch and slice give generators: lazy (they run, and fail, only when iterated), without a
 * length, always true, used up by one iteration; reverse gives an iterator. */
#include <string.h>

#include "engine/jinja/eval.h"
#include "engine/jinja/jinja.h"
#include "engine/jinja/pyunicode.h"

static jv opt(jv v, jv dflt) { return v.kind == JV_ABSENT ? dflt : v; }

/* ---- generators ---- */

typedef jv (*jproduce_fn)(jr *r, jv input, const jargs *a);  /* the items, as a list */
struct jgen {
    jproduce_fn fn;
    jv input;
    jargs args;   /* its arrays live in the arena, and values never change */
};

static jv lazy(jr *r, jproduce_fn fn, jv input, const jargs *a) {
    struct jgen *g = jr_alloc(r, sizeof *g);
    g->fn = fn;
    g->input = input;
    g->args = *a;
    jv l = jv_list_new(r, 0);
    l.sub = JL_GEN;
    l.u.list->gen = g;
    return l;
}

void jgen_force(jr *r, jlist *l) {
    const struct jgen *g = l->gen;
    if (!g) return;
    l->gen = NULL;  /* a generator iterating itself finds nothing left */
    jv items = g->fn(r, g->input, &g->args);
    l->v = items.u.list->v;
    l->n = items.u.list->n;
    l->cap = items.u.list->cap;
    l->pos = 0;
}

/* ---- attribute paths ---- */

static jv attr_part(jr *r, jv item, jv part) {
    if (part.kind != JV_STR) return jgetitem(r, item, part);
    /* "0" in a dotted path is the integer 0 (jinja2's _prepare_attribute_parts) */
    int digits = part.len > 0;
    for (uint32_t i = 0; i < part.len && digits; i++) digits = part.u.s[i] >= '0' && part.u.s[i] <= '9';
    int64_t n;
    if (digits && parse_py_int(part.u.s, part.len, 10, &n)) return jgetitem(r, item, jv_int(n));
    return jgetitem(r, item, part);
}

jv jattr_path(jr *r, jv item, jv attribute) {
    if (attribute.kind == JV_NONE || attribute.kind == JV_ABSENT) return item;
    if (attribute.kind != JV_STR) return attr_part(r, item, attribute);
    size_t start = 0;
    for (size_t i = 0; i <= attribute.len; i++) {
        if (i < attribute.len && attribute.u.s[i] != '.') continue;
        jv part = attribute;
        part.u.s = attribute.u.s + start;
        part.len = (uint32_t)(i - start);
        item = attr_part(r, item, part);
        start = i + 1;
    }
    return item;
}

static jv ignore_case(jr *r, jv v) { return v.kind == JV_STR ? jstr_lower(r, v) : v; }

/* the sort key of sort(): a list of one value per comma-separated attribute, as jinja2's
 * make_multi_attrgetter makes it (so equal keys are never ordered with <) */
static jv sort_key(jr *r, jv item, jv attribute, int case_sensitive) {
    jv key = jv_list_new(r, 1);
    if (attribute.kind == JV_STR && memchr(attribute.u.s, ',', attribute.len)) {
        jv parts = jstr_split(r, attribute, jv_cstr(","), -1, 0);
        for (uint32_t i = 0; i < parts.u.list->n; i++) {
            jv v = jattr_path(r, item, parts.u.list->v[i]);
            jv_list_push(r, &key, case_sensitive ? v : ignore_case(r, v));
        }
        return key;
    }
    jv v = jattr_path(r, item, attribute);
    jv_list_push(r, &key, case_sensitive ? v : ignore_case(r, v));
    return key;
}

/* stable merge sort of idx[0..n) by keys (Python's sorted: stable also when reversed) */
static void merge_sort(jr *r, uint32_t *idx, uint32_t *tmp, uint32_t n, const jv *keys, int reverse) {
    if (n < 2) return;
    uint32_t half = n / 2;
    merge_sort(r, idx, tmp, half, keys, reverse);
    merge_sort(r, idx + half, tmp, n - half, keys, reverse);
    uint32_t i = 0, j = half, k = 0;
    while (i < half && j < n) {
        jr_step(r, 1);
        /* take from the right only when it must come strictly before */
        int right_first = reverse ? jv_cmp(r, keys[idx[i]], keys[idx[j]]) < 0 : jv_cmp(r, keys[idx[j]], keys[idx[i]]) < 0;
        tmp[k++] = right_first ? idx[j++] : idx[i++];
    }
    while (i < half) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
}

static jv sorted(jr *r, const jlist *items, const jv *keys, int reverse) {
    uint32_t n = items->n;
    uint32_t *idx = jr_alloc(r, (n + 1) * sizeof *idx), *tmp = jr_alloc(r, (n + 1) * sizeof *tmp);
    for (uint32_t i = 0; i < n; i++) idx[i] = i;
    merge_sort(r, idx, tmp, n, keys, reverse);
    jv out = jv_list_new(r, n);
    for (uint32_t i = 0; i < n; i++) out.u.list->v[i] = items->v[idx[i]];
    out.u.list->n = n;
    return out;
}

/* ---- filters ---- */

jv jf_length(jr *r, jv v, const jargs *a) {
    jargs_none(r, a, "length");
    switch (v.kind) {
    case JV_STR: jr_step(r, v.len / 16); return jv_int((int64_t)u8_count(v.u.s, v.len));
    case JV_DICT: return jv_int(v.u.dict->n);
    case JV_UNDEFINED: return jv_int(0);
    case JV_LIST:
        if (!jv_is_iter(v)) return jv_int(v.u.list->n);
        break;
    case JV_LOOP: return jv_int(v.u.loop->n);
    default: break;
    }
    jr_error(r, "object of type '%s' has no len()", jv_type_name(v));
}

jv jf_list(jr *r, jv v, const jargs *a) {
    jargs_none(r, a, "list");
    jv items = jiterate(r, v);
    jv out = jv_list_new(r, items.u.list->n);
    memcpy(out.u.list->v, items.u.list->v, items.u.list->n * sizeof(jv));
    out.u.list->n = items.u.list->n;
    return out;
}

jv jf_first(jr *r, jv v, const jargs *a) {
    jargs_none(r, a, "first");
    if (jv_is_iter(v)) {  /* next() takes one item off a generator */
        jlist *l = v.u.list;
        jgen_force(r, l);
        if (l->pos < l->n) return l->v[l->pos++];
    } else {
        jv items = jiterate(r, v);
        if (items.u.list->n) return items.u.list->v[0];
    }
    return jv_undef_for(r, JU_PLAIN, 0, "No first item, sequence was empty.", 34);
}

jv jf_last(jr *r, jv v, const jargs *a) {
    jargs_none(r, a, "last");
    if (jv_is_iter(v) || v.kind == JV_NONE || v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL ||
        v.kind == JV_NS || v.kind == JV_FUNC)
        jr_error(r, "'%s' object is not reversible", jv_type_name(v));
    jv items = jiterate(r, v);
    if (items.u.list->n) return items.u.list->v[items.u.list->n - 1];
    return jv_undef_for(r, JU_PLAIN, 0, "No last item, sequence was empty.", 33);
}

jv jf_join(jr *r, jv v, const jargs *a) {
    static const char *const names[] = {"d", "attribute"};
    jv arg[2];
    jargs_bind(r, a, "join", names, 2, 0, arg);
    jv sep = jv_to_str(r, opt(arg[0], jv_cstr("")));
    jv attribute = opt(arg[1], jv_none());
    if (attribute.kind == JV_NONE) return jstr_join(r, sep, v);
    jv items = jiterate(r, v), mapped = jv_list_new(r, items.u.list->n);
    for (uint32_t i = 0; i < items.u.list->n; i++) jv_list_push(r, &mapped, jattr_path(r, items.u.list->v[i], attribute));
    return jstr_join(r, sep, mapped);
}

static jv produce_items(jr *r, jv v, const jargs *a) {
    jargs_none(r, a, "items");
    if (v.kind == JV_UNDEFINED) return jv_list_new(r, 0);
    if (v.kind != JV_DICT) jr_error(r, "Can only get item pairs from a mapping.");
    const jdict *d = v.u.dict;
    jv out = jv_list_new(r, d->n);
    for (uint32_t i = 0; i < d->n; i++) jv_list_push(r, &out, jv_tuple2(r, d->keys[i], d->vals[i]));
    return out;
}

jv jf_dictsort(jr *r, jv v, const jargs *a) {
    static const char *const names[] = {"case_sensitive", "by", "reverse"};
    jv arg[3];
    jargs_bind(r, a, "dictsort", names, 3, 0, arg);
    int case_sensitive = jv_truthy(opt(arg[0], jv_bool(0))), reverse = jarg_flag(r, opt(arg[2], jv_bool(0)));
    jv by = opt(arg[1], jv_cstr("key"));
    int pos;
    if (by.kind == JV_STR && by.len == 3 && memcmp(by.u.s, "key", 3) == 0) pos = 0;
    else if (by.kind == JV_STR && by.len == 5 && memcmp(by.u.s, "value", 5) == 0) pos = 1;
    else jr_error(r, "You can only sort by either \"key\" or \"value\"");
    if (v.kind == JV_UNDEFINED) jundef_fail(r, v);
    if (v.kind != JV_DICT) jr_error(r, "'%s' object has no attribute 'items'", jv_type_name(v));
    const jdict *d = v.u.dict;
    jv pairs = jv_list_new(r, d->n);
    jv *keys = jr_alloc(r, (d->n + 1) * sizeof(jv));
    for (uint32_t i = 0; i < d->n; i++) {
        jv_list_push(r, &pairs, jv_tuple2(r, d->keys[i], d->vals[i]));
        jv k = pos ? d->vals[i] : d->keys[i];
        keys[i] = case_sensitive ? k : ignore_case(r, k);
    }
    return sorted(r, pairs.u.list, keys, reverse);
}

jv jf_sort(jr *r, jv v, const jargs *a) {
    static const char *const names[] = {"reverse", "case_sensitive", "attribute"};
    jv arg[3];
    jargs_bind(r, a, "sort", names, 3, 0, arg);
    int reverse = jarg_flag(r, opt(arg[0], jv_bool(0))), case_sensitive = jv_truthy(opt(arg[1], jv_bool(0)));
    jv attribute = opt(arg[2], jv_none());
    const jlist *items = jiterate(r, v).u.list;
    jv *keys = jr_alloc(r, (items->n + 1) * sizeof(jv));
    for (uint32_t i = 0; i < items->n; i++) keys[i] = sort_key(r, items->v[i], attribute, case_sensitive);
    return sorted(r, items, keys, reverse);
}

static jv produce_unique(jr *r, jv v, const jargs *a) {
    static const char *const names[] = {"case_sensitive", "attribute"};
    jv arg[2];
    jargs_bind(r, a, "unique", names, 2, 0, arg);
    int case_sensitive = jv_truthy(opt(arg[0], jv_bool(0)));
    jv attribute = opt(arg[1], jv_none());
    const jlist *items = jiterate(r, v).u.list;
    jv out = jv_list_new(r, items->n), seen = jv_list_new(r, items->n);
    for (uint32_t i = 0; i < items->n; i++) {
        jv key = jattr_path(r, items->v[i], attribute);
        if (!case_sensitive) key = ignore_case(r, key);
        jv_check_hashable(r, key);
        int dup = 0;
        jr_step(r, seen.u.list->n / 8 + 1);
        for (uint32_t k = 0; k < seen.u.list->n && !dup; k++) dup = jv_eq(r, seen.u.list->v[k], key);
        if (dup) continue;
        jv_list_push(r, &seen, key);
        jv_list_push(r, &out, items->v[i]);
    }
    return out;
}

static jv min_max(jr *r, jv v, const jargs *a, const char *fname, int want_max) {
    static const char *const names[] = {"case_sensitive", "attribute"};
    jv arg[2];
    jargs_bind(r, a, fname, names, 2, 0, arg);
    int case_sensitive = jv_truthy(opt(arg[0], jv_bool(0)));
    jv attribute = opt(arg[1], jv_none());
    const jlist *items = jiterate(r, v).u.list;
    if (!items->n) return jv_undef_for(r, JU_PLAIN, 0, "No aggregated item, sequence was empty.", 39);
    uint32_t best = 0;
    jv best_key = jattr_path(r, items->v[0], attribute);
    if (!case_sensitive) best_key = ignore_case(r, best_key);
    for (uint32_t i = 1; i < items->n; i++) {
        jv key = jattr_path(r, items->v[i], attribute);
        if (!case_sensitive) key = ignore_case(r, key);
        /* Python's min/max keep the first of equal items */
        if (want_max ? jv_cmp(r, best_key, key) < 0 : jv_cmp(r, key, best_key) < 0) {
            best = i;
            best_key = key;
        }
    }
    return items->v[best];
}

jv jf_min(jr *r, jv v, const jargs *a) { return min_max(r, v, a, "min", 0); }
jv jf_max(jr *r, jv v, const jargs *a) { return min_max(r, v, a, "max", 1); }

jv jf_sum(jr *r, jv v, const jargs *a) {
    static const char *const names[] = {"attribute", "start"};
    jv arg[2];
    jargs_bind(r, a, "sum", names, 2, 0, arg);
    jv attribute = opt(arg[0], jv_none()), total = opt(arg[1], jv_int(0));
    const jlist *items = jiterate(r, v).u.list;
    for (uint32_t i = 0; i < items->n; i++) {
        if (total.kind == JV_STR) jr_error(r, "sum() can't sum strings [use ''.join(seq) instead]");
        total = jarith(r, JOP_ADD, total, jattr_path(r, items->v[i], attribute));
    }
    return total;
}

jv jf_reverse(jr *r, jv v, const jargs *a) {
    jargs_none(r, a, "reverse");
    if (v.kind == JV_STR) return jv_slice(r, v, jv_none(), jv_none(), jv_int(-1));
    if (v.kind == JV_NONE || v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL || v.kind == JV_NS)
        jr_error(r, "'%s' object is not iterable", jv_type_name(v));
    int iter = jv_is_iter(v);
    const jlist *items = jiterate(r, v).u.list;
    jv out = jv_list_new(r, items->n);
    for (uint32_t i = 0; i < items->n; i++) out.u.list->v[i] = items->v[items->n - 1 - i];
    out.u.list->n = items->n;
    if (iter) return out;  /* reversed() refused it: jinja2 falls back to a reversed list */
    out.sub = JL_REVERSED;
    return out;
}

static jv produce_batch(jr *r, jv v, const jargs *a) {
    static const char *const names[] = {"linecount", "fill_with"};
    jv arg[2];
    jargs_bind(r, a, "batch", names, 2, 1, arg);
    int64_t count = jarg_int(r, arg[0], "linecount");
    if (count <= 0) jr_error(r, "batch size must be positive");
    jv fill = opt(arg[1], jv_none());
    const jlist *items = jiterate(r, v).u.list;
    jv out = jv_list_new(r, 4), row = jv_list_new(r, 4);
    for (uint32_t i = 0; i < items->n; i++) {
        if ((int64_t)row.u.list->n == count) {
            jv_list_push(r, &out, row);
            row = jv_list_new(r, 4);
        }
        jv_list_push(r, &row, items->v[i]);
    }
    if (row.u.list->n) {
        if (fill.kind != JV_NONE)
            while ((int64_t)row.u.list->n < count) jv_list_push(r, &row, fill);
        jv_list_push(r, &out, row);
    }
    return out;
}

static jv produce_slice(jr *r, jv v, const jargs *a) {
    static const char *const names[] = {"slices", "fill_with"};
    jv arg[2];
    jargs_bind(r, a, "slice", names, 2, 1, arg);
    int64_t slices = jarg_int(r, arg[0], "slices");
    if (slices <= 0 || slices > (1 << 20)) jr_error(r, "slice count out of range");
    jv fill = opt(arg[1], jv_none());
    const jlist *seq = jiterate(r, v).u.list;
    int64_t length = seq->n, per = length / slices, extra = length % slices, offset = 0;
    jv out = jv_list_new(r, (uint32_t)slices);
    for (int64_t k = 0; k < slices; k++) {
        int64_t start = offset + k * per;
        if (k < extra) offset++;
        int64_t end = offset + (k + 1) * per;
        jv tmp = jv_list_new(r, (uint32_t)(end - start + 1));
        for (int64_t i = start; i < end; i++) jv_list_push(r, &tmp, seq->v[i]);
        if (fill.kind != JV_NONE && k >= extra) jv_list_push(r, &tmp, fill);
        jv_list_push(r, &out, tmp);
    }
    return out;
}

/* ---- map, select, reject, selectattr, rejectattr ---- */

static jargs rest_args(const jargs *a, int skip) {
    jargs rest = *a;
    rest.n = a->n > skip ? a->n - skip : 0;
    rest.pos = a->n > skip ? a->pos + skip : NULL;
    return rest;
}

static jv produce_map(jr *r, jv v, const jargs *a) {
    jv out = jv_list_new(r, 4);
    if (!jv_truthy(v)) return out;
    const jlist *items = jiterate(r, v).u.list;
    if (a->n == 0 && a->nkw > 0) {  /* map(attribute=..., default=...) */
        jv attribute = jv_absent(), dflt = jv_none();
        for (int k = 0; k < a->nkw; k++) {
            jstr name = a->kwname[k];
            if (name.n == 9 && memcmp(name.p, "attribute", 9) == 0) attribute = a->kwval[k];
            else if (name.n == 7 && memcmp(name.p, "default", 7) == 0) dflt = a->kwval[k];
            else jr_error(r, "Unexpected keyword argument '%.*s'", (int)name.n, name.p);
        }
        if (attribute.kind == JV_ABSENT) jr_error(r, "map requires a filter argument");
        for (uint32_t i = 0; i < items->n; i++) {
            jv x = jattr_path(r, items->v[i], attribute);
            jv_list_push(r, &out, x.kind == JV_UNDEFINED && dflt.kind != JV_NONE ? dflt : x);
        }
        return out;
    }
    if (a->n == 0) jr_error(r, "map requires a filter argument");
    jv name = a->pos[0];
    int id = name.kind == JV_STR ? jfilter_find(name.u.s, name.len) : -1;
    if (id < 0) {
        jv s = jv_to_str(r, name);
        jr_error(r, "No filter named '%.*s'.", (int)s.len, s.u.s);
    }
    jargs rest = rest_args(a, 1);
    for (uint32_t i = 0; i < items->n; i++) jv_list_push(r, &out, jfilter_call(r, id, items->v[i], &rest));
    return out;
}

static jv select_or_reject(jr *r, jv v, const jargs *a, int keep_if, int lookup_attr) {
    jv out = jv_list_new(r, 4);
    if (!jv_truthy(v)) return out;
    const jlist *items = jiterate(r, v).u.list;
    jv attribute = jv_none();
    int off = 0;
    if (lookup_attr) {
        if (a->n < 1) jr_error(r, "Missing parameter for attribute name");
        attribute = a->pos[0];
        off = 1;
    }
    int id = -1;
    jargs rest = rest_args(a, off + 1);
    if (a->n > off) {
        jv name = a->pos[off];
        id = name.kind == JV_STR ? jtest_find(name.u.s, name.len) : -1;
        if (id < 0) {
            jv s = jv_to_str(r, name);
            jr_error(r, "No test named '%.*s'.", (int)s.len, s.u.s);
        }
    }
    for (uint32_t i = 0; i < items->n; i++) {
        jv x = lookup_attr ? jattr_path(r, items->v[i], attribute) : items->v[i];
        int ok = id < 0 ? jv_truthy(x) : jtest_call(r, id, x, &rest);
        if (ok == keep_if) jv_list_push(r, &out, items->v[i]);
    }
    return out;
}

static jv produce_select(jr *r, jv v, const jargs *a) { return select_or_reject(r, v, a, 1, 0); }
static jv produce_reject(jr *r, jv v, const jargs *a) { return select_or_reject(r, v, a, 0, 0); }
static jv produce_selectattr(jr *r, jv v, const jargs *a) { return select_or_reject(r, v, a, 1, 1); }
static jv produce_rejectattr(jr *r, jv v, const jargs *a) { return select_or_reject(r, v, a, 0, 1); }

jv jf_items(jr *r, jv v, const jargs *a) { return lazy(r, produce_items, v, a); }
jv jf_unique(jr *r, jv v, const jargs *a) { return lazy(r, produce_unique, v, a); }
jv jf_batch(jr *r, jv v, const jargs *a) { return lazy(r, produce_batch, v, a); }
jv jf_slice(jr *r, jv v, const jargs *a) { return lazy(r, produce_slice, v, a); }
jv jf_map(jr *r, jv v, const jargs *a) { return lazy(r, produce_map, v, a); }
jv jf_select(jr *r, jv v, const jargs *a) { return lazy(r, produce_select, v, a); }
jv jf_reject(jr *r, jv v, const jargs *a) { return lazy(r, produce_reject, v, a); }
jv jf_selectattr(jr *r, jv v, const jargs *a) { return lazy(r, produce_selectattr, v, a); }
jv jf_rejectattr(jr *r, jv v, const jargs *a) { return lazy(r, produce_rejectattr, v, a); }
