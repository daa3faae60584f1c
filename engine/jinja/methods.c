/* methods.c - the Python methods templates call on strings, dicts and lists (s.strip(),
 * d.get(k), d.items(), ...), and the sandbox's refusal of the ones that mutate. */
#include <string.h>

#include "engine/jinja/eval.h"
#include "engine/jinja/jinja.h"
#include "engine/jinja/pyunicode.h"

static jv opt(jv v, jv dflt) { return v.kind == JV_ABSENT ? dflt : v; }

static jv need_str(jr *r, jv v, const char *what) {
    if (v.kind != JV_STR) jr_error(r, "%s must be str, not %s", what, jv_type_name(v));
    return v;
}

/* s[start:end] for the optional start/end arguments of find, count, startswith, ... ;
 * *offset = code points before it */
static jv sub_range(jr *r, jv s, jv start, jv end, int64_t *offset) {
    *offset = 0;
    jr_step(r, s.len / 16);  /* the searches that follow scan s, and count code points */
    if (start.kind == JV_ABSENT && end.kind == JV_ABSENT) return s;
    jv sub = jv_slice(r, s, opt(start, jv_none()), opt(end, jv_none()), jv_none());
    *offset = (int64_t)u8_count(s.u.s, (size_t)(sub.u.s - s.u.s));
    return sub;
}

/* ---- str ---- */

#define STR_METHOD(fn, pyname, ...)                                               \
    static jv fn(jr *r, jv s, const jargs *a) {                                   \
        static const char *const names[] = {__VA_ARGS__};                         \
        enum { N = sizeof names / sizeof names[0] };                              \
        jv arg[N];                                                                \
        jargs_bind(r, a, pyname, names, N, 0, arg);
#define END_METHOD }

static jv m_upper(jr *r, jv s, const jargs *a) { jargs_none(r, a, "upper"); return jstr_upper(r, s); }
static jv m_lower(jr *r, jv s, const jargs *a) { jargs_none(r, a, "lower"); return jstr_lower(r, s); }
static jv m_title(jr *r, jv s, const jargs *a) { jargs_none(r, a, "title"); return jstr_title(r, s); }
static jv m_capitalize(jr *r, jv s, const jargs *a) { jargs_none(r, a, "capitalize"); return jstr_capitalize(r, s); }

STR_METHOD(m_strip, "strip", "chars") return jstr_strip(r, s, opt(arg[0], jv_none()), 1, 1); END_METHOD
STR_METHOD(m_lstrip, "lstrip", "chars") return jstr_strip(r, s, opt(arg[0], jv_none()), 1, 0); END_METHOD
STR_METHOD(m_rstrip, "rstrip", "chars") return jstr_strip(r, s, opt(arg[0], jv_none()), 0, 1); END_METHOD

STR_METHOD(m_split, "split", "sep", "maxsplit")
    return jstr_split(r, s, opt(arg[0], jv_none()), jarg_int(r, opt(arg[1], jv_int(-1)), "maxsplit"), 0);
END_METHOD
STR_METHOD(m_rsplit, "rsplit", "sep", "maxsplit")
    return jstr_split(r, s, opt(arg[0], jv_none()), jarg_int(r, opt(arg[1], jv_int(-1)), "maxsplit"), 1);
END_METHOD
STR_METHOD(m_splitlines, "splitlines", "keepends")
    return jstr_splitlines(r, s, jarg_flag(r, opt(arg[0], jv_bool(0))));
END_METHOD

STR_METHOD(m_replace, "replace", "old", "new", "count")
    if (arg[0].kind == JV_ABSENT || arg[1].kind == JV_ABSENT) jr_error(r, "replace expected at least 2 arguments");
    jv old = need_str(r, arg[0], "replace() argument 1"), new_ = need_str(r, arg[1], "replace() argument 2");
    if (s.sub == JS_MARKUP) {  /* Markup.replace escapes its arguments */
        old = jhtml_escape(r, old);
        new_ = jhtml_escape(r, new_);
    }
    jv out = jstr_replace(r, s, old, new_, jarg_int(r, opt(arg[2], jv_int(-1)), "count"));
    out.sub = s.sub;
    return out;
END_METHOD

/* startswith/endswith: a str or a tuple of them */
static jv affix(jr *r, jv s, const jargs *a, const char *name, int at_end) {
    static const char *const names[] = {"prefix", "start", "end"};
    jv arg[3];
    jargs_bind(r, a, name, names, 3, 1, arg);
    int64_t off;
    jv sub = sub_range(r, s, arg[1], arg[2], &off);
    jv want = arg[0];
    uint32_t n = 1;
    const jv *cands = &want;
    if (want.kind == JV_LIST && want.sub == JL_TUPLE) {
        n = want.u.list->n;
        cands = want.u.list->v;
    }
    for (uint32_t i = 0; i < n; i++) {
        jv c = cands[i];
        if (c.kind != JV_STR)
            jr_error(r, "%s first arg must be str or a tuple of str, not %s", name, jv_type_name(c));
        if (c.len > sub.len) continue;
        if (memcmp(sub.u.s + (at_end ? sub.len - c.len : 0), c.u.s, c.len) == 0) return jv_bool(1);
    }
    return jv_bool(0);
}

static jv m_startswith(jr *r, jv s, const jargs *a) { return affix(r, s, a, "startswith", 0); }
static jv m_endswith(jr *r, jv s, const jargs *a) { return affix(r, s, a, "endswith", 1); }

/* find/rfind/index/rindex: the code point index of sub, or -1 (find) / an error (index) */
static jv finder(jr *r, jv s, const jargs *a, const char *name, int from_right, int must) {
    static const char *const names[] = {"sub", "start", "end"};
    jv arg[3];
    jargs_bind(r, a, name, names, 3, 1, arg);
    jv needle = need_str(r, arg[0], "must be str");
    int64_t off;
    jv sub = sub_range(r, s, arg[1], arg[2], &off);
    int at = -1;
    if (!from_right) at = jstr_find(sub, needle, 0);
    else
        for (int k = jstr_find(sub, needle, 0); k >= 0; k = jstr_find(sub, needle, (size_t)k + 1)) {
            jr_step(r, 1);
            at = k;
            if ((size_t)k >= sub.len) break;
        }
    if (at < 0) {
        if (must) jr_error(r, "substring not found");
        return jv_int(-1);
    }
    return jv_int(off + (int64_t)u8_count(sub.u.s, (size_t)at));
}

static jv m_find(jr *r, jv s, const jargs *a) { return finder(r, s, a, "find", 0, 0); }
static jv m_rfind(jr *r, jv s, const jargs *a) { return finder(r, s, a, "rfind", 1, 0); }
static jv m_index(jr *r, jv s, const jargs *a) { return finder(r, s, a, "index", 0, 1); }
static jv m_rindex(jr *r, jv s, const jargs *a) { return finder(r, s, a, "rindex", 1, 1); }

STR_METHOD(m_count, "count", "sub", "start", "end")
    if (arg[0].kind == JV_ABSENT) jr_error(r, "count() takes at least 1 argument (0 given)");
    jv needle = need_str(r, arg[0], "must be str");
    int64_t off;
    jv sub = sub_range(r, s, arg[1], arg[2], &off);
    if (needle.len == 0) return jv_int((int64_t)u8_count(sub.u.s, sub.len) + 1);
    int64_t n = 0;
    for (int k = jstr_find(sub, needle, 0); k >= 0; k = jstr_find(sub, needle, (size_t)k + needle.len)) {
        jr_step(r, 1);
        n++;
    }
    return jv_int(n);
END_METHOD

/* str.join: every item must be a str */
static jv m_join(jr *r, jv s, const jargs *a) {
    static const char *const names[] = {"iterable"};
    jv arg[1];
    jargs_bind(r, a, "join", names, 1, 1, arg);
    const jlist *items = jiterate(r, arg[0]).u.list;
    jv l = jv_list_new(r, items->n);
    for (uint32_t i = 0; i < items->n; i++) {
        jv item = items->v[i];
        if (s.sub == JS_MARKUP) item = jhtml_escape(r, item);  /* Markup.join escapes the items */
        else if (item.kind != JV_STR)
            jr_error(r, "sequence item %u: expected str instance, %s found", i, jv_type_name(item));
        jv_list_push(r, &l, item);
    }
    jv out = jstr_join(r, s, l);
    out.sub = s.sub;
    return out;
}

static jv m_format(jr *r, jv s, const jargs *a) { return jformat_str(r, s, a); }

static jv partition(jr *r, jv s, const jargs *a, const char *name, int from_right) {
    static const char *const names[] = {"sep"};
    jv arg[1];
    jargs_bind(r, a, name, names, 1, 1, arg);
    jv sep = need_str(r, arg[0], "must be str");
    if (sep.len == 0) jr_error(r, "empty separator");
    jr_step(r, s.len / 256);
    int at = jstr_find(s, sep, 0);
    if (from_right)
        for (int k = at; k >= 0; k = jstr_find(s, sep, (size_t)k + 1)) {
            jr_step(r, 1);
            at = k;
        }
    jv out = jv_list_new(r, 3);
    out.sub = JL_TUPLE;
    jv empty = jv_cstr(""), before = s, after = s;
    if (at < 0) {
        jv_list_push(r, &out, from_right ? empty : s);
        jv_list_push(r, &out, empty);
        jv_list_push(r, &out, from_right ? s : empty);
        return out;
    }
    before.len = (uint32_t)at;
    after.u.s = s.u.s + at + sep.len;
    after.len = s.len - (uint32_t)at - sep.len;
    jv_list_push(r, &out, before);
    jv_list_push(r, &out, sep);
    jv_list_push(r, &out, after);
    return out;
}

static jv m_partition(jr *r, jv s, const jargs *a) { return partition(r, s, a, "partition", 0); }
static jv m_rpartition(jr *r, jv s, const jargs *a) { return partition(r, s, a, "rpartition", 1); }

STR_METHOD(m_removeprefix, "removeprefix", "prefix")
    jv p = need_str(r, arg[0].kind == JV_ABSENT ? jv_none() : arg[0], "removeprefix() argument");
    if (p.len <= s.len && memcmp(s.u.s, p.u.s, p.len) == 0) {
        s.u.s += p.len;
        s.len -= p.len;
    }
    return s;
END_METHOD

STR_METHOD(m_removesuffix, "removesuffix", "suffix")
    jv p = need_str(r, arg[0].kind == JV_ABSENT ? jv_none() : arg[0], "removesuffix() argument");
    if (p.len && p.len <= s.len && memcmp(s.u.s + s.len - p.len, p.u.s, p.len) == 0) s.len -= p.len;
    return s;
END_METHOD

static jv m_isspace(jr *r, jv s, const jargs *a) {
    jargs_none(r, a, "isspace");
    size_t i = 0;
    while (i < s.len) {
        size_t adv;
        if (!py_isspace(u8_decode(s.u.s + i, s.len - i, &adv))) return jv_bool(0);
        i += adv;
    }
    return jv_bool(s.len > 0);
}

/* ---- dict ---- */

static jv m_get(jr *r, jv d, const jargs *a) {
    static const char *const names[] = {"key", "default"};
    jv arg[2];
    jargs_bind(r, a, "get", names, 2, 1, arg);
    jv *v = jv_dict_get(r, d.u.dict, arg[0]);
    return v ? *v : opt(arg[1], jv_none());
}

static jv dict_view(jr *r, jv d, int sub) {
    const jdict *x = d.u.dict;
    jv out = jv_list_new(r, x->n);
    for (uint32_t i = 0; i < x->n; i++)
        out.u.list->v[i] = sub == JL_KEYS ? x->keys[i] : sub == JL_VALUES ? x->vals[i] : jv_tuple2(r, x->keys[i], x->vals[i]);
    out.u.list->n = x->n;
    out.sub = (uint8_t)sub;
    return out;
}

static jv m_items(jr *r, jv d, const jargs *a) { jargs_none(r, a, "items"); return dict_view(r, d, JL_ITEMS); }
static jv m_keys(jr *r, jv d, const jargs *a) { jargs_none(r, a, "keys"); return dict_view(r, d, JL_KEYS); }
static jv m_values(jr *r, jv d, const jargs *a) { jargs_none(r, a, "values"); return dict_view(r, d, JL_VALUES); }

static jv m_dict_copy(jr *r, jv d, const jargs *a) {
    jargs_none(r, a, "copy");
    jv out = jv_dict_new(r, d.u.dict->n);
    for (uint32_t i = 0; i < d.u.dict->n; i++) jv_dict_set(r, &out, d.u.dict->keys[i], d.u.dict->vals[i]);
    return out;
}

/* ---- list ---- */

static jv m_list_index(jr *r, jv l, const jargs *a) {
    static const char *const names[] = {"value"};
    jv arg[1];
    jargs_bind(r, a, "index", names, 1, 1, arg);
    for (uint32_t i = 0; i < l.u.list->n; i++)
        if (jv_eq(r, l.u.list->v[i], arg[0])) return jv_int(i);
    jr_error(r, "value is not in %s", jv_type_name(l));
}

static jv m_list_count(jr *r, jv l, const jargs *a) {
    static const char *const names[] = {"value"};
    jv arg[1];
    jargs_bind(r, a, "count", names, 1, 1, arg);
    int64_t n = 0;
    for (uint32_t i = 0; i < l.u.list->n; i++) n += jv_eq(r, l.u.list->v[i], arg[0]);
    return jv_int(n);
}

static jv m_list_copy(jr *r, jv l, const jargs *a) {
    jargs_none(r, a, "copy");
    jv out = jv_list_new(r, l.u.list->n);
    memcpy(out.u.list->v, l.u.list->v, l.u.list->n * sizeof(jv));
    out.u.list->n = l.u.list->n;
    return out;
}

/* ---- lookup ---- */

static const jbuiltin_def str_methods[] = {
    {"capitalize", m_capitalize}, {"count", m_count}, {"endswith", m_endswith}, {"find", m_find},
    {"format", m_format}, {"index", m_index}, {"isspace", m_isspace}, {"join", m_join}, {"lower", m_lower},
    {"lstrip", m_lstrip}, {"partition", m_partition}, {"removeprefix", m_removeprefix},
    {"removesuffix", m_removesuffix}, {"replace", m_replace}, {"rfind", m_rfind}, {"rindex", m_rindex},
    {"rpartition", m_rpartition}, {"rsplit", m_rsplit}, {"rstrip", m_rstrip}, {"split", m_split},
    {"splitlines", m_splitlines}, {"startswith", m_startswith}, {"strip", m_strip}, {"title", m_title},
    {"upper", m_upper}, {NULL, NULL},
};
static const jbuiltin_def dict_methods[] = {
    {"copy", m_dict_copy}, {"get", m_get}, {"items", m_items}, {"keys", m_keys}, {"values", m_values}, {NULL, NULL},
};
static const jbuiltin_def list_methods[] = {
    {"copy", m_list_copy}, {"count", m_list_count}, {"index", m_list_index}, {NULL, NULL},
};
static const char *const dict_mutators[] = {"clear", "pop", "popitem", "setdefault", "update", NULL};
static const char *const list_mutators[] = {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort", NULL};

static int name_is(const char *want, const char *name, size_t n) { return strlen(want) == n && memcmp(want, name, n) == 0; }

static jv bind(jr *r, jv self, const jbuiltin_def *def) {
    jfunc *f = jr_alloc(r, sizeof *f);
    memset(f, 0, sizeof *f);
    f->kind = JF_BUILTIN;
    f->name = def->name;
    f->name_len = (int)strlen(def->name);
    f->fn = def->fn;
    f->self = self;
    jv v = {0};
    v.kind = JV_FUNC;
    v.u.fn = f;
    return v;
}

jv jmethod_get(jr *r, jv obj, const char *name, size_t n) {
    const jbuiltin_def *table = NULL;
    const char *const *mutators = NULL;
    if (obj.kind == JV_STR) table = str_methods;
    else if (obj.kind == JV_DICT) table = dict_methods, mutators = dict_mutators;
    else if (obj.kind == JV_LIST && (obj.sub == JL_LIST || obj.sub == JL_TUPLE)) {
        table = list_methods;
        if (obj.sub == JL_LIST) mutators = list_mutators;
    } else if (obj.kind == JV_FUNC && obj.u.fn->kind == JF_CYCLER) return jcycler_attr(r, obj, name, n);
    if (table)
        for (int i = 0; table[i].name; i++)
            if (name_is(table[i].name, name, n)) return bind(r, obj, &table[i]);
    if (mutators)
        for (int i = 0; mutators[i]; i++)
            if (name_is(mutators[i], name, n)) return jv_undef_for(r, JU_UNSAFE, obj.kind, name, n);
    return jv_absent();
}
