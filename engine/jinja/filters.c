/* filters.c - jinja2's filters on strings and single values (the sequence filters are in
 * filters_seq.c), each as jinja2/filters.py defines it, and the argument binder all
 * builtins share. */
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/jinja/eval.h"
#include "engine/jinja/jinja.h"
#include "engine/jinja/pyunicode.h"

/* ---- arguments ---- */

void jargs_bind(jr *r, const jargs *a, const char *fname, const char *const *names, int nnames, int nreq, jv *out) {
    for (int i = 0; i < nnames; i++) out[i] = jv_absent();
    if (a->n > nnames)
        jr_error(r, "%s() takes at most %d argument%s (%d given)", fname, nnames, nnames == 1 ? "" : "s", a->n);
    for (int i = 0; i < a->n; i++) out[i] = a->pos[i];
    for (int k = 0; k < a->nkw; k++) {
        int i = 0;
        while (i < nnames && (strlen(names[i]) != a->kwname[k].n || memcmp(names[i], a->kwname[k].p, a->kwname[k].n) != 0)) i++;
        if (i == nnames)
            jr_error(r, "%s() got an unexpected keyword argument '%.*s'", fname, (int)a->kwname[k].n, a->kwname[k].p);
        if (out[i].kind != JV_ABSENT) jr_error(r, "%s() got multiple values for argument '%s'", fname, names[i]);
        out[i] = a->kwval[k];
    }
    for (int i = 0; i < nreq; i++)
        if (out[i].kind == JV_ABSENT) jr_error(r, "%s() missing required argument '%s'", fname, names[i]);
}

void jargs_none(jr *r, const jargs *a, const char *fname) {
    if (a->n || a->nkw) jr_error(r, "%s() takes no arguments", fname);
}

/* an optional argument: the default when not given */
static jv opt(jv v, jv dflt) { return v.kind == JV_ABSENT ? dflt : v; }

int64_t jarg_int(jr *r, jv v, const char *what) {
    if (v.kind == JV_INT || v.kind == JV_BOOL) return v.u.i;
    jr_error(r, "%s must be an integer, not %s", what, jv_type_name(v));
}

int jarg_flag(jr *r, jv v) {
    if (v.kind == JV_INT || v.kind == JV_BOOL) return v.u.i != 0;
    jr_error(r, "'%s' object cannot be interpreted as an integer", jv_type_name(v));
}

/* str(v) as jinja2's soft_str: undefined is "" */
static jv soft_str(jr *r, jv v) { return jv_to_str(r, v); }

/* ---- Python number parsing (int(str), float(str)) ---- */

/* int(s, base): whitespace around, a sign, digits with single "_" between them, and for
 * base 16/8/2 (or 0) a matching prefix. Returns 0 when s is not such a number. */
int parse_py_int(const char *s, size_t n, int base, int64_t *out) {
    size_t i = 0, end = n;
    while (i < end && (unsigned char)s[i] < 0x80 && py_isspace((unsigned char)s[i])) i++;
    while (end > i && (unsigned char)s[end - 1] < 0x80 && py_isspace((unsigned char)s[end - 1])) end--;
    int neg = 0;
    if (i < end && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    if (end - i >= 2 && s[i] == '0') {
        int p = s[i + 1] | 32, pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
        if (pb && (base == pb || base == 0)) {
            base = pb;
            i += 2;
            if (i < end && s[i] == '_') i++;
        }
    }
    if (base == 0) base = 10;
    if (i >= end) return 0;
    uint64_t v = 0;
    int prev_us = 1;
    for (; i < end; i++) {
        if (s[i] == '_') {
            if (prev_us) return 0;
            prev_us = 1;
            continue;
        }
        int c = s[i] | 32, d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'z' ? c - 'a' + 10 : 99;
        if (d >= base) return 0;
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) return 0;
        v = v * (uint64_t)base + (uint64_t)d;
        prev_us = 0;
    }
    if (prev_us || v > (uint64_t)INT64_MAX + (uint64_t)neg) return 0;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 1;
}

/* float(s): Python's literal forms (with "_" between digits), inf, infinity, nan */
int parse_py_float(const char *s, size_t n, double *out) {
    char buf[512];
    size_t i = 0, end = n, k = 0;
    while (i < end && (unsigned char)s[i] < 0x80 && py_isspace((unsigned char)s[i])) i++;
    while (end > i && (unsigned char)s[end - 1] < 0x80 && py_isspace((unsigned char)s[end - 1])) end--;
    if (i >= end || end - i >= sizeof buf) return 0;
    for (size_t j = i; j < end; j++) {
        char c = s[j];
        if (c == '_') {  /* only between two digits */
            if (j == i || j + 1 >= end || !(s[j - 1] >= '0' && s[j - 1] <= '9') || !(s[j + 1] >= '0' && s[j + 1] <= '9')) return 0;
            continue;
        }
        if (!((c >= '0' && c <= '9') || c == '.' || c == '+' || c == '-' || (c | 32) == 'e' || (c | 32) == 'i' ||
              (c | 32) == 'n' || (c | 32) == 'f' || (c | 32) == 't' || (c | 32) == 'y' || (c | 32) == 'a'))
            return 0;
        buf[k++] = c;
    }
    buf[k] = 0;
    const char *p = buf + (buf[0] == '+' || buf[0] == '-');
    if (strcasecmp(p, "inf") == 0 || strcasecmp(p, "infinity") == 0) {
        *out = buf[0] == '-' ? -INFINITY : INFINITY;
        return 1;
    }
    if (strcasecmp(p, "nan") == 0) {
        *out = NAN;
        return 1;
    }
    /* the rest must be a decimal literal: digits, one point, an exponent */
    int digits = 0, point = 0;
    const char *q = p;
    while ((*q >= '0' && *q <= '9') || (*q == '.' && !point)) {
        if (*q == '.') point = 1;
        else digits++;
        q++;
    }
    if (!digits) return 0;
    if ((*q | 32) == 'e') {
        q++;
        if (*q == '+' || *q == '-') q++;
        if (!(*q >= '0' && *q <= '9')) return 0;
        while (*q >= '0' && *q <= '9') q++;
    }
    if (*q) return 0;
    char point_char = localeconv()->decimal_point[0];
    for (char *c = buf; *c; c++)
        if (*c == '.') *c = point_char;
    *out = strtod(buf, NULL);
    return 1;
}

/* the sequence filters (filters_seq.c) */
jv jf_batch(jr *, jv, const jargs *), jf_dictsort(jr *, jv, const jargs *), jf_first(jr *, jv, const jargs *),
    jf_items(jr *, jv, const jargs *), jf_join(jr *, jv, const jargs *), jf_last(jr *, jv, const jargs *),
    jf_length(jr *, jv, const jargs *), jf_list(jr *, jv, const jargs *), jf_map(jr *, jv, const jargs *),
    jf_max(jr *, jv, const jargs *), jf_min(jr *, jv, const jargs *), jf_reject(jr *, jv, const jargs *),
    jf_rejectattr(jr *, jv, const jargs *), jf_reverse(jr *, jv, const jargs *), jf_select(jr *, jv, const jargs *),
    jf_selectattr(jr *, jv, const jargs *), jf_slice(jr *, jv, const jargs *), jf_sort(jr *, jv, const jargs *),
    jf_sum(jr *, jv, const jargs *), jf_unique(jr *, jv, const jargs *);

/* ---- filters ---- */

static jv f_abs(jr *r, jv v, const jargs *a) {
    jargs_none(r, a, "abs");
    if (v.kind == JV_FLOAT) return jv_float(fabs(v.u.f));
    if (v.kind == JV_INT || v.kind == JV_BOOL) {
        if (v.u.i == INT64_MIN) jr_error(r, "integer overflow");
        return jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
    }
    if (v.kind == JV_UNDEFINED) jundef_fail(r, v);
    jr_error(r, "bad operand type for abs(): '%s'", jv_type_name(v));
}

static jv f_attr(jr *r, jv v, const jargs *a) {
    static const char *const names[] = {"name"};
    jv arg[1];
    jargs_bind(r, a, "attr", names, 1, 1, arg);
    if (arg[0].kind != JV_STR) jr_error(r, "attribute name must be string");
    if (v.kind == JV_UNDEFINED) jundef_fail(r, v);
    if (v.kind == JV_LOOP) return jloop_attr(r, v, arg[0].u.s, arg[0].len);
    jv m = jmethod_get(r, v, arg[0].u.s, arg[0].len);
    if (m.kind != JV_ABSENT) return m;
    if (v.kind == JV_NS) {
        jv *x = jv_dict_get_str(v.u.dict, arg[0].u.s, arg[0].len);
        if (x) return *x;
    }
    return jv_undef_for(r, JU_ATTR, v.kind, arg[0].u.s, arg[0].len);
}

static jv f_capitalize(jr *r, jv v, const jargs *a) {
    jargs_none(r, a, "capitalize");
    return jstr_capitalize(r, soft_str(r, v));
}

static jv f_center(jr *r, jv v, const jargs *a) {
    static const char *const names[] = {"width"};
    jv arg[1];
    jargs_bind(r, a, "center", names, 1, 0, arg);
    jv s = soft_str(r, v);
    int64_t width = jarg_int(r, opt(arg[0], jv_int(80)), "width"), len = (int64_t)u8_count(s.u.s, s.len);
    if (width <= len) return s;
    if (width > (int64_t)r->max_output) jr_fail(r, JINJA_LIMIT, "string length limit (%zu bytes) reached", r->max_output);
    int64_t pad = width - len, left = pad / 2 + (pad & width & 1);
    jbuf b;
    jbuf_init(r, &b, (size_t)(s.len + pad));
    for (int64_t i = 0; i < left; i++) jbuf_putc(r, &b, ' ');
    jbuf_put(r, &b, s.u.s, s.len);
    for (int64_t i = left; i < pad; i++) jbuf_putc(r, &b, ' ');
    jv out = jbuf_value(&b);
    out.sub = s.sub;
    return out;
}

static jv f_default(jr *r, jv v, const jargs *a) {
    static const char *const names[] = {"default_value", "boolean"};
    jv arg[2];
    jargs_bind(r, a, "default", names, 2, 0, arg);
    if (v.kind == JV_UNDEFINED || (jv_truthy(opt(arg[1], jv_bool(0))) && !jv_truthy(v)))
        return opt(arg[0], jv_cstr(""));
    return v;
}

static jv f_escape(jr *r, jv v, const jargs *a) {
    jargs_none(r, a, "escape");
    return jhtml_escape(r, v);
}

static jv f_forceescape(jr *r, jv v, const jargs *a) {
    jargs_none(r, a, "forceescape");
    if (v.kind == JV_STR) v.sub = JS_PLAIN;
    return jhtml_escape(r, v);
}

static jv f_float(jr *r, jv v, const jargs *a) {
    static const char *const names[] = {"default"};
    jv arg[1];
    jargs_bind(r, a, "float", names, 1, 0, arg);
    jv dflt = opt(arg[0], jv_float(0.0));
    double f;
    switch (v.kind) {
    case JV_FLOAT: return v;
    case JV_INT: case JV_BOOL: return jv_float((double)v.u.i);
    case JV_STR: return parse_py_float(v.u.s, v.len, &f) ? jv_float(f) : dflt;
    case JV_UNDEFINED: jundef_fail(r, v);
    default: return dflt;
    }
}

static jv f_format(jr *r, jv v, const jargs *a) {
    if (a->n && a->nkw) jr_error(r, "can't handle positional and keyword arguments at the same time");
    jv args;
    if (a->nkw) {
        args = jv_dict_new(r, (uint32_t)a->nkw);
        for (int i = 0; i < a->nkw; i++) jv_dict_set(r, &args, jv_str(r, a->kwname[i].p, a->kwname[i].n), a->kwval[i]);
    } else {
        args = jv_list_new(r, (uint32_t)a->n);
        args.sub = JL_TUPLE;
        for (int i = 0; i < a->n; i++) jv_list_push(r, &args, a->pos[i]);
    }
    return jformat_printf(r, soft_str(r, v), args);
}

static jv f_indent(jr *r, jv v, const jargs *a) {
    static const char *const names[] = {"width", "first", "blank"};
    jv arg[3];
    jargs_bind(r, a, "indent", names, 3, 0, arg);
    jv width = opt(arg[0], jv_int(4)), indention = width;
    if (width.kind != JV_STR) {
        int64_t w = jarg_int(r, width, "width");
        jbuf ib;
        jbuf_init(r, &ib, w > 0 ? (size_t)w : 1);
        for (int64_t i = 0; i < w; i++) jbuf_putc(r, &ib, ' ');
        indention = jbuf_value(&ib);
    }
    /* jinja2 appends "\n" with += and calls splitlines(): only strings get through */
    if (v.kind == JV_UNDEFINED) jundef_fail(r, v);
    if (v.kind == JV_LIST && v.sub == JL_LIST) jr_error(r, "'list' object has no attribute 'splitlines'");
    if (v.kind != JV_STR) jr_error(r, "unsupported operand type(s) for +=: '%s' and 'str'", jv_type_name(v));
    jv s = v;
    jbuf sb;
    jbuf_init(r, &sb, (size_t)s.len + 1);
    jbuf_put(r, &sb, s.u.s, s.len);
    jbuf_putc(r, &sb, '\n');  /* jinja2's quirk for splitlines */
    const jlist *lines = jstr_splitlines(r, jbuf_value(&sb), 0).u.list;
    jbuf b;
    jbuf_init(r, &b, (size_t)s.len + 64);
    if (jv_truthy(opt(arg[1], jv_bool(0)))) jbuf_put(r, &b, indention.u.s, indention.len);
    int blank = jv_truthy(opt(arg[2], jv_bool(0)));
    for (uint32_t i = 0; i < lines->n; i++) {
        jv line = lines->v[i];
        if (i) {
            jbuf_putc(r, &b, '\n');
            if (blank || line.len) jbuf_put(r, &b, indention.u.s, indention.len);
        }
        jbuf_put(r, &b, line.u.s, line.len);
    }
    jv out = jbuf_value(&b);
    out.sub = s.sub;  /* a Markup stays Markup */
    return out;
}

static jv f_int(jr *r, jv v, const jargs *a) {
    static const char *const names[] = {"default", "base"};
    jv arg[2];
    jargs_bind(r, a, "int", names, 2, 0, arg);
    jv dflt = opt(arg[0], jv_int(0));
    int64_t base = jarg_int(r, opt(arg[1], jv_int(10)), "base"), i;
    double f;
    switch (v.kind) {
    case JV_INT: return v;
    case JV_BOOL: return jv_int(v.u.i);
    case JV_FLOAT:
        if (isnan(v.u.f)) return dflt;
        if (isinf(v.u.f) || fabs(v.u.f) >= 9.2e18) jr_error(r, "cannot convert float infinity or a huge float to integer");
        return jv_int((int64_t)v.u.f);
    case JV_STR:
        if ((base == 0 || (base >= 2 && base <= 36)) && parse_py_int(v.u.s, v.len, (int)base, &i)) return jv_int(i);
        if (parse_py_float(v.u.s, v.len, &f) && !isnan(f)) {
            if (isinf(f) || fabs(f) >= 9.2e18) jr_error(r, "cannot convert float infinity or a huge float to integer");
            return jv_int((int64_t)f);
        }
        return dflt;
    case JV_UNDEFINED: jundef_fail(r, v);
    default: return dflt;
    }
}

static jv f_lower(jr *r, jv v, const jargs *a) {
    jargs_none(r, a, "lower");
    return jstr_lower(r, soft_str(r, v));
}

static jv f_upper(jr *r, jv v, const jargs *a) {
    jargs_none(r, a, "upper");
    return jstr_upper(r, soft_str(r, v));
}

static jv f_replace(jr *r, jv v, const jargs *a) {
    static const char *const names[] = {"old", "new", "count"};
    jv arg[3];
    jargs_bind(r, a, "replace", names, 3, 2, arg);
    jv count = opt(arg[2], jv_none());
    int64_t n = count.kind == JV_NONE ? -1 : jarg_int(r, count, "count");
    return jstr_replace(r, soft_str(r, v), soft_str(r, arg[0]), soft_str(r, arg[1]), n);
}

/* round half to even on the exact binary value, as Python's round(x, n) */
static double py_round(double x, int64_t ndigits) {
    if (isnan(x) || isinf(x) || x == 0) return x;
    if (ndigits > 400) return x;
    if (ndigits >= 0) {
        char buf[512];
        snprintf(buf, sizeof buf, "%.*f", (int)ndigits, x);
        return strtod(buf, NULL);
    }
    double scale = pow(10.0, (double)-ndigits);
    if (isinf(scale)) return copysign(0.0, x);
    double y = x / scale, rounded = nearbyint(y);  /* default rounding mode: half to even */
    return rounded * scale;
}

static jv f_round(jr *r, jv v, const jargs *a) {
    static const char *const names[] = {"precision", "method"};
    jv arg[2];
    jargs_bind(r, a, "round", names, 2, 0, arg);
    int64_t precision = jarg_int(r, opt(arg[0], jv_int(0)), "precision");
    jv method = opt(arg[1], jv_cstr("common"));
    int common = method.kind == JV_STR && method.len == 6 && memcmp(method.u.s, "common", 6) == 0;
    int ceil_ = method.kind == JV_STR && method.len == 4 && memcmp(method.u.s, "ceil", 4) == 0;
    int floor_ = method.kind == JV_STR && method.len == 5 && memcmp(method.u.s, "floor", 5) == 0;
    if (!common && !ceil_ && !floor_) jr_error(r, "method must be common, ceil or floor");
    if (v.kind == JV_UNDEFINED) jundef_fail(r, v);
    if (!jv_is_num(v)) jr_error(r, "type %s doesn't define __round__ method", jv_type_name(v));
    if (common) {
        if (v.kind != JV_FLOAT) {
            if (precision >= 0) return jv_int(v.u.i);
            return jv_int((int64_t)py_round((double)v.u.i, precision));
        }
        return jv_float(py_round(v.u.f, precision));
    }
    double scale = pow(10.0, (double)precision), x = jv_num(v) * scale;
    return jv_float((ceil_ ? ceil(x) : floor(x)) / scale);
}

static jv f_safe(jr *r, jv v, const jargs *a) {
    jargs_none(r, a, "safe");
    jv s = soft_str(r, v);
    s.sub = JS_MARKUP;
    return s;
}

static jv f_string(jr *r, jv v, const jargs *a) {
    jargs_none(r, a, "string");
    return soft_str(r, v);
}

/* jinja2's title: words start after runs of whitespace, '-', '(', '{', '[' or '<' */
static int title_sep(uint32_t cp) {
    return py_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
}

static jv f_title(jr *r, jv v, const jargs *a) {
    jargs_none(r, a, "title");
    jv s = soft_str(r, v);
    jbuf b;
    jbuf_init(r, &b, (size_t)s.len + 8);
    size_t i = 0;
    while (i < s.len) {
        /* one item: a run of separators or a run of others; its first code point goes to
         * upper case, the rest to lower case */
        size_t adv, start = i;
        int sep = title_sep(u8_decode(s.u.s + i, s.len - i, &adv));
        i += adv;
        size_t first_end = i;
        while (i < s.len && title_sep(u8_decode(s.u.s + i, s.len - i, &adv)) == sep) i += adv;
        jv first = s, rest = s;
        first.u.s = s.u.s + start;
        first.len = (uint32_t)(first_end - start);
        rest.u.s = s.u.s + first_end;
        rest.len = (uint32_t)(i - first_end);
        jv up = jstr_upper(r, first), low = jstr_lower(r, rest);
        jbuf_put(r, &b, up.u.s, up.len);
        jbuf_put(r, &b, low.u.s, low.len);
    }
    return jbuf_value(&b);
}

/* truncate(s, length=255, killwords=False, end='...', leeway=5): cut at a word boundary */
static jv f_truncate(jr *r, jv v, const jargs *a) {
    static const char *const names[] = {"length", "killwords", "end", "leeway"};
    jv arg[4];
    jargs_bind(r, a, "truncate", names, 4, 0, arg);
    int64_t length = jarg_int(r, opt(arg[0], jv_int(255)), "length");
    jv end = opt(arg[2], jv_cstr("..."));
    int64_t leeway = jarg_int(r, opt(arg[3], jv_int(5)), "leeway");
    if (end.kind != JV_STR) jr_error(r, "object of type '%s' has no len()", jv_type_name(end));
    int64_t end_len = (int64_t)u8_count(end.u.s, end.len);
    if (length < end_len) jr_error(r, "expected length >= %lld, got %lld", (long long)end_len, (long long)length);
    if (leeway < 0) jr_error(r, "expected leeway >= 0, got %lld", (long long)leeway);
    if (v.kind == JV_UNDEFINED) return v;  /* len(Undefined) is 0 */
    jargs none = {0};
    int64_t len = jf_length(r, v, &none).u.i;
    if (len <= length + leeway) return v;  /* whatever it is, as it is */
    if (v.kind != JV_STR) jr_error(r, "'%s' object has no attribute 'rsplit'", jv_type_name(v));
    jv head = jv_slice(r, v, jv_none(), jv_int(length - end_len), jv_none());
    if (!jv_truthy(opt(arg[1], jv_bool(0)))) head = jstr_split(r, head, jv_cstr(" "), 1, 1).u.list->v[0];
    return jarith(r, JOP_ADD, head, end);
}

/* wordcount: the matches of \w+ (letters and digits of any script, and _) */
static jv f_wordcount(jr *r, jv v, const jargs *a) {
    jargs_none(r, a, "wordcount");
    jv s = soft_str(r, v);
    int64_t words = 0;
    int in_word = 0;
    size_t i = 0;
    while (i < s.len) {
        size_t adv;
        uint32_t cp = u8_decode(s.u.s + i, s.len - i, &adv);
        int w = cp == '_' || py_isalnum(cp);
        words += w && !in_word;
        in_word = w;
        i += adv;
    }
    jr_step(r, s.len / 16);
    return jv_int(words);
}

static jv f_tojson(jr *r, jv v, const jargs *a) {
    static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
    jv arg[4];
    jargs_bind(r, a, "tojson", names, 4, 0, arg);
    jjson_opts o;
    jjson_default_opts(&o);
    o.ensure_ascii = jv_truthy(opt(arg[0], jv_bool(0)));
    o.sort_keys = jv_truthy(opt(arg[3], jv_bool(0)));
    jv indent = opt(arg[1], jv_none());
    if (indent.kind == JV_STR) {
        o.indent = 0;
        o.indent_str = indent.u.s;
        o.indent_len = indent.len;
    } else if (indent.kind != JV_NONE) {
        int64_t n = jarg_int(r, indent, "indent");
        o.indent = n < 0 ? 0 : n > 1000 ? 1000 : (int)n;
    }
    if (o.indent >= 0 || o.indent_str) {
        o.item_sep = ",";
        o.item_sep_len = 1;
    }
    jv seps = opt(arg[2], jv_none());
    if (seps.kind != JV_NONE) {
        jv items = jiterate(r, seps);
        if (items.u.list->n != 2 || items.u.list->v[0].kind != JV_STR || items.u.list->v[1].kind != JV_STR)
            jr_error(r, "separators must be a pair of strings");
        o.item_sep = items.u.list->v[0].u.s;
        o.item_sep_len = items.u.list->v[0].len;
        o.key_sep = items.u.list->v[1].u.s;
        o.key_sep_len = items.u.list->v[1].len;
    }
    jbuf b;
    jbuf_init(r, &b, 64);
    jv_write_json(r, &b, v, &o);
    return jbuf_value(&b);
}

static jv f_trim(jr *r, jv v, const jargs *a) {
    static const char *const names[] = {"chars"};
    jv arg[1];
    jargs_bind(r, a, "trim", names, 1, 0, arg);
    return jstr_strip(r, soft_str(r, v), opt(arg[0], jv_none()), 1, 1);
}

const jbuiltin_def jfilter_table[] = {
    {"abs", f_abs}, {"attr", f_attr}, {"batch", jf_batch}, {"capitalize", f_capitalize}, {"center", f_center},
    {"count", jf_length}, {"d", f_default}, {"default", f_default}, {"dictsort", jf_dictsort}, {"e", f_escape},
    {"escape", f_escape}, {"first", jf_first}, {"float", f_float}, {"forceescape", f_forceescape}, {"format", f_format},
    {"indent", f_indent}, {"int", f_int}, {"items", jf_items}, {"join", jf_join}, {"last", jf_last},
    {"length", jf_length}, {"list", jf_list}, {"lower", f_lower}, {"map", jf_map}, {"max", jf_max},
    {"min", jf_min}, {"reject", jf_reject}, {"rejectattr", jf_rejectattr}, {"replace", f_replace},
    {"reverse", jf_reverse}, {"round", f_round}, {"safe", f_safe}, {"select", jf_select},
    {"selectattr", jf_selectattr}, {"slice", jf_slice}, {"sort", jf_sort}, {"string", f_string}, {"sum", jf_sum},
    {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim}, {"truncate", f_truncate}, {"unique", jf_unique},
    {"upper", f_upper}, {"wordcount", f_wordcount},
    {NULL, NULL},
};

static int table_find(const jbuiltin_def *t, const char *name, size_t n) {
    for (int i = 0; t[i].name; i++)
        if (strlen(t[i].name) == n && memcmp(t[i].name, name, n) == 0) return i;
    return -1;
}

int jfilter_find(const char *name, size_t n) { return table_find(jfilter_table, name, n); }

int jfilter_unsupported(const char *name, size_t n) {
    static const char *const names[] = {"filesizeformat", "groupby", "pprint", "random", "striptags",
                                        "urlencode", "urlize", "wordwrap", "xmlattr", NULL};
    for (int i = 0; names[i]; i++)
        if (strlen(names[i]) == n && memcmp(names[i], name, n) == 0) return 1;
    return 0;
}

jv jfilter_call(jr *r, int id, jv v, const jargs *a) {
    jr_step(r, 1);
    return jfilter_table[id].fn(r, v, a);
}
