/* tests.c - jinja2's tests (`x is defined`, `x is string`, ...) as jinja2/tests.py
 * defines them. */
#include <string.h>

#include "engine/jinja/eval.h"
#include "engine/jinja/jinja.h"
#include "engine/jinja/pyunicode.h"

static jv one_arg(jr *r, const jargs *a, const char *name) {
    static const char *const names[] = {"other"};
    jv arg[1];
    jargs_bind(r, a, name, names, 1, 1, arg);
    return arg[0];
}

static jv yes(int b) { return jv_bool(b); }

static jv t_odd(jr *r, jv v, const jargs *a) {
    jargs_none(r, a, "odd");
    return yes(jv_eq(r, jarith(r, JOP_MOD, v, jv_int(2)), jv_int(1)));
}
static jv t_even(jr *r, jv v, const jargs *a) {
    jargs_none(r, a, "even");
    return yes(jv_eq(r, jarith(r, JOP_MOD, v, jv_int(2)), jv_int(0)));
}
static jv t_divisibleby(jr *r, jv v, const jargs *a) {
    return yes(jv_eq(r, jarith(r, JOP_MOD, v, one_arg(r, a, "divisibleby")), jv_int(0)));
}
static jv t_defined(jr *r, jv v, const jargs *a) { jargs_none(r, a, "defined"); return yes(v.kind != JV_UNDEFINED); }
static jv t_undefined(jr *r, jv v, const jargs *a) { jargs_none(r, a, "undefined"); return yes(v.kind == JV_UNDEFINED); }
static jv t_none(jr *r, jv v, const jargs *a) { jargs_none(r, a, "none"); return yes(v.kind == JV_NONE); }
static jv t_boolean(jr *r, jv v, const jargs *a) { jargs_none(r, a, "boolean"); return yes(v.kind == JV_BOOL); }
static jv t_false(jr *r, jv v, const jargs *a) { jargs_none(r, a, "false"); return yes(v.kind == JV_BOOL && !v.u.i); }
static jv t_true(jr *r, jv v, const jargs *a) { jargs_none(r, a, "true"); return yes(v.kind == JV_BOOL && v.u.i); }
static jv t_integer(jr *r, jv v, const jargs *a) { jargs_none(r, a, "integer"); return yes(v.kind == JV_INT); }
static jv t_float(jr *r, jv v, const jargs *a) { jargs_none(r, a, "float"); return yes(v.kind == JV_FLOAT); }
static jv t_number(jr *r, jv v, const jargs *a) { jargs_none(r, a, "number"); return yes(jv_is_num(v)); }
static jv t_string(jr *r, jv v, const jargs *a) { jargs_none(r, a, "string"); return yes(v.kind == JV_STR); }
static jv t_mapping(jr *r, jv v, const jargs *a) { jargs_none(r, a, "mapping"); return yes(v.kind == JV_DICT); }

/* len() and __getitem__: strings, lists, tuples, ranges, dicts - and Undefined, which has both */
static jv t_sequence(jr *r, jv v, const jargs *a) {
    jargs_none(r, a, "sequence");
    return yes(v.kind == JV_STR || v.kind == JV_DICT || v.kind == JV_UNDEFINED || jv_is_seq(v));
}

static jv t_iterable(jr *r, jv v, const jargs *a) {
    jargs_none(r, a, "iterable");
    return yes(v.kind == JV_STR || v.kind == JV_DICT || v.kind == JV_UNDEFINED || v.kind == JV_LIST || v.kind == JV_LOOP);
}

static jv t_callable(jr *r, jv v, const jargs *a) {
    jargs_none(r, a, "callable");
    return yes((v.kind == JV_FUNC && v.u.fn->kind != JF_CYCLER) || v.kind == JV_LOOP);
}

/* `is`: the same object. Python shares None, the booleans and small ints. */
static jv t_sameas(jr *r, jv v, const jargs *a) {
    jv o = one_arg(r, a, "sameas");
    if (v.kind != o.kind) return yes(0);
    switch (v.kind) {
    case JV_NONE: return yes(1);
    case JV_BOOL: return yes(v.u.i == o.u.i);
    case JV_INT: return yes(v.u.i == o.u.i && v.u.i >= -5 && v.u.i <= 256);
    case JV_STR: return yes(v.u.s == o.u.s && v.len == o.len);
    case JV_FLOAT: return yes(0);
    default: return yes(v.u.list == o.u.list);
    }
}

/* str.islower()/isupper(): at least one character of the case, none of the other case or
 * titlecase (CPython's unicode_islower_impl) */
static int case_test(jr *r, jv v, int want_upper) {
    jv s = jv_to_str(r, v);
    int cased = 0;
    size_t i = 0;
    while (i < s.len) {
        size_t adv;
        uint32_t cp = u8_decode(s.u.s + i, s.len - i, &adv);
        i += adv;
        int lower = py_islower(cp), upper = py_isupper(cp);
        if ((want_upper ? lower : upper) || py_istitle(cp)) return 0;
        cased |= want_upper ? upper : lower;
    }
    return cased;
}

static jv t_lower(jr *r, jv v, const jargs *a) { jargs_none(r, a, "lower"); return yes(case_test(r, v, 0)); }
static jv t_upper(jr *r, jv v, const jargs *a) { jargs_none(r, a, "upper"); return yes(case_test(r, v, 1)); }
static jv t_escaped(jr *r, jv v, const jargs *a) {
    jargs_none(r, a, "escaped");
    return yes(v.kind == JV_STR && v.sub == JS_MARKUP);
}

static jv t_in(jr *r, jv v, const jargs *a) {
    jv seq = one_arg(r, a, "in");
    if (seq.kind == JV_STR) {
        if (v.kind != JV_STR) jr_error(r, "'in <string>' requires string as left operand, not %s", jv_type_name(v));
        jr_step(r, seq.len / 256);
        return yes(jstr_find(seq, v, 0) >= 0);
    }
    if (seq.kind == JV_DICT) return yes(jv_dict_get(r, seq.u.dict, v) != NULL);
    const jlist *items = jiterate(r, seq).u.list;
    for (uint32_t i = 0; i < items->n; i++)
        if (jv_eq(r, items->v[i], v)) return yes(1);
    return yes(0);
}

static jv t_eq(jr *r, jv v, const jargs *a) { return yes(jv_eq(r, v, one_arg(r, a, "eq"))); }
static jv t_ne(jr *r, jv v, const jargs *a) { return yes(!jv_eq(r, v, one_arg(r, a, "ne"))); }
static jv t_gt(jr *r, jv v, const jargs *a) { return yes(jv_compare_op(r, v, one_arg(r, a, "gt"), ">")); }
static jv t_ge(jr *r, jv v, const jargs *a) { return yes(jv_compare_op(r, v, one_arg(r, a, "ge"), ">=")); }
static jv t_lt(jr *r, jv v, const jargs *a) { return yes(jv_compare_op(r, v, one_arg(r, a, "lt"), "<")); }
static jv t_le(jr *r, jv v, const jargs *a) { return yes(jv_compare_op(r, v, one_arg(r, a, "le"), "<=")); }

static jv t_filter(jr *r, jv v, const jargs *a) {
    jargs_none(r, a, "filter");
    return yes(v.kind == JV_STR && (jfilter_find(v.u.s, v.len) >= 0 || jfilter_unsupported(v.u.s, v.len)));
}

static jv t_test(jr *r, jv v, const jargs *a) {
    jargs_none(r, a, "test");
    return yes(v.kind == JV_STR && jtest_find(v.u.s, v.len) >= 0);
}

const jbuiltin_def jtest_table[] = {
    {"odd", t_odd}, {"even", t_even}, {"divisibleby", t_divisibleby}, {"defined", t_defined},
    {"undefined", t_undefined}, {"filter", t_filter}, {"test", t_test}, {"none", t_none}, {"boolean", t_boolean},
    {"false", t_false}, {"true", t_true}, {"integer", t_integer}, {"float", t_float}, {"lower", t_lower},
    {"upper", t_upper}, {"string", t_string}, {"mapping", t_mapping}, {"number", t_number},
    {"sequence", t_sequence}, {"iterable", t_iterable}, {"callable", t_callable}, {"sameas", t_sameas},
    {"escaped", t_escaped}, {"in", t_in}, {"==", t_eq}, {"eq", t_eq}, {"equalto", t_eq}, {"!=", t_ne},
    {"ne", t_ne}, {">", t_gt}, {"gt", t_gt}, {"greaterthan", t_gt}, {"ge", t_ge}, {">=", t_ge}, {"<", t_lt},
    {"lt", t_lt}, {"lessthan", t_lt}, {"<=", t_le}, {"le", t_le}, {NULL, NULL},
};

int jtest_find(const char *name, size_t n) {
    for (int i = 0; jtest_table[i].name; i++)
        if (strlen(jtest_table[i].name) == n && memcmp(jtest_table[i].name, name, n) == 0) return i;
    return -1;
}

int jtest_call(jr *r, int id, jv v, const jargs *a) {
    jr_step(r, 1);
    return jtest_table[id].fn(r, v, a).u.i != 0;
}
