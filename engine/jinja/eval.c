/* eval.c - expressions: names, attributes and items, operators with Python's semantics,
 * calls, filters and tests. */
#include <math.h>
#include <string.h>

#include "engine/jinja/eval.h"
#include "engine/jinja/jinja.h"
#include "engine/jinja/pyunicode.h"

/* ---- undefined ---- */

void jundef_fail(jr *r, jv u) {
    const char *name = u.u.s ? u.u.s : "";
    int n = (int)u.len;
    switch (u.sub) {
    case JU_NAME: jr_error(r, "'%.*s' is undefined", n, name);
    case JU_ATTR:
        if (u.aux == JV_NONE) jr_error(r, "'None' has no attribute '%.*s'", n, name);
        jr_error(r, "'%s object' has no attribute '%.*s'", jv_kind_name(u.aux), n, name);
    case JU_ITEM_INT: jr_error(r, "%s object has no element %.*s", jv_kind_name(u.aux), n, name);
    case JU_UNSAFE: jr_error(r, "access to attribute '%.*s' of '%s' object is unsafe.", n, name, jv_kind_name(u.aux));
    default: jr_error(r, "%.*s", n, u.u.s ? name : "value is undefined");
    }
}

static jv undef_attr(jr *r, jv obj, const char *name, size_t n) {
    int kind = obj.kind == JV_LIST && obj.sub == JL_TUPLE ? JV_LIST : obj.kind;
    return jv_undef_for(r, JU_ATTR, kind, name, n);
}

/* ---- attributes and items ---- */

int jv_is_seq(jv v) { return v.kind == JV_LIST && v.sub <= JL_RANGE; }
int jv_is_iter(jv v) { return v.kind == JV_LIST && (v.sub == JL_GEN || v.sub == JL_REVERSED); }

static int is_dunder(const char *name, size_t n) {
    return n >= 2 && name[0] == '_' && name[1] == '_';
}

jv jgetattr(jr *r, jv obj, const char *name, size_t n) {
    if (obj.kind == JV_UNDEFINED) jundef_fail(r, obj);
    if (is_dunder(name, n)) return jv_undef_for(r, JU_UNSAFE, obj.kind, name, n);
    if (obj.kind == JV_LOOP) return jloop_attr(r, obj, name, n);
    jv m = jmethod_get(r, obj, name, n);
    if (m.kind != JV_ABSENT) return m;
    if (obj.kind == JV_DICT || obj.kind == JV_NS) {
        jr_step(r, obj.u.dict->n / 16);
        jv *v = jv_dict_get_str(obj.u.dict, name, n);
        if (v) return *v;
    }
    return undef_attr(r, obj, name, n);
}

/* a Python index into a sequence of len items: negative counts from the end; -1 if out of range */
static int64_t seq_index(jv key, int64_t len) {
    int64_t i = key.u.i;
    if (i < 0) i += len;
    return i < 0 || i >= len ? -1 : i;
}

jv jgetitem(jr *r, jv obj, jv key) {
    if (obj.kind == JV_UNDEFINED) jundef_fail(r, obj);
    int int_key = key.kind == JV_INT || key.kind == JV_BOOL;
    if (obj.kind == JV_DICT) {
        if (!(key.kind == JV_LIST && key.sub == JL_LIST) && key.kind != JV_DICT) {
            jv *v = jv_dict_get(r, obj.u.dict, key);
            if (v) return *v;
        }
    } else if (jv_is_seq(obj) && int_key) {
        int64_t i = seq_index(key, obj.u.list->n);
        if (i >= 0) return obj.u.list->v[i];
    } else if (obj.kind == JV_STR && int_key) {
        jr_step(r, obj.len / 16);  /* decoding: a step per 16 bytes */
        int64_t len = (int64_t)u8_count(obj.u.s, obj.len);
        if (seq_index(key, len) >= 0) return jstr_index(r, obj, key.u.i);
    }
    if (key.kind == JV_STR) {
        if (is_dunder(key.u.s, key.len)) return jv_undef_for(r, JU_UNSAFE, obj.kind, key.u.s, key.len);
        if (obj.kind == JV_NS) {  /* a namespace has no items: ns['x'] falls back to ns.x */
            jv *v = jv_dict_get_str(obj.u.dict, key.u.s, key.len);
            if (v) return *v;
        }
        jv m = obj.kind == JV_LOOP ? jloop_attr(r, obj, key.u.s, key.len) : jmethod_get(r, obj, key.u.s, key.len);
        if (m.kind != JV_ABSENT && m.kind != JV_UNDEFINED) return m;
        if (m.kind == JV_UNDEFINED && m.sub == JU_UNSAFE) return m;
        return undef_attr(r, obj, key.u.s, key.len);
    }
    if (int_key) {
        jv s = jv_to_str(r, key);
        return jv_undef_for(r, JU_ITEM_INT, obj.kind, s.u.s, s.len);
    }
    return jv_undef_for(r, JU_PLAIN, 0, NULL, 0);
}

/* ---- iteration ---- */

jv jiterate(jr *r, jv v) {
    switch (v.kind) {
    case JV_LIST: {
        jlist *l = v.u.list;
        if (!jv_is_iter(v)) return v;
        jgen_force(r, l);
        /* a generator gives what it has left, once */
        jv rest = jv_list_new(r, 0);
        rest.u.list->v = l->v + l->pos;
        rest.u.list->n = l->n - l->pos;
        l->pos = l->n;
        return rest;
    }
    case JV_DICT: {
        jv keys = jv_list_new(r, v.u.dict->n);
        memcpy(keys.u.list->v, v.u.dict->keys, v.u.dict->n * sizeof(jv));
        keys.u.list->n = v.u.dict->n;
        return keys;
    }
    case JV_STR: {
        jv chars = jv_list_new(r, v.len);
        size_t i = 0;
        while (i < v.len) {
            size_t adv = 1;
            if ((unsigned char)v.u.s[i] >= 0x80) u8_decode(v.u.s + i, v.len - i, &adv);
            jv c = jv_str(r, v.u.s + i, adv);  /* iterating a Markup gives plain strings */
            chars.u.list->v[chars.u.list->n++] = c;
            i += adv;
        }
        jr_step(r, chars.u.list->n / 16);
        return chars;
    }
    case JV_UNDEFINED: return jv_list_new(r, 0);
    default: jr_error(r, "'%s' object is not iterable", jv_type_name(v));
    }
}

/* ---- arithmetic ---- */

static _Noreturn void bad_operands(jr *r, const char *op, jv a, jv b) {
    jr_error(r, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(a), jv_type_name(b));
}

static _Noreturn void overflow(jr *r) {
    jr_error(r, "integer overflow (integers are 64-bit here; Python's are unbounded)");
}

static jv concat_str(jr *r, jv a, jv b) {
    size_t n = (size_t)a.len + b.len;
    if (n > r->max_output) jr_fail(r, JINJA_LIMIT, "string length limit (%zu bytes) reached", r->max_output);
    char *p = jr_alloc(r, n + 1);
    memcpy(p, a.u.s, a.len);
    memcpy(p + a.len, b.u.s, b.len);
    p[n] = 0;
    jr_step(r, n / 256);
    return jv_str(r, p, n);
}

static jv concat_list(jr *r, jv a, jv b) {
    uint32_t n = a.u.list->n + b.u.list->n;
    jv l = jv_list_new(r, n);
    l.sub = a.sub;
    memcpy(l.u.list->v, a.u.list->v, a.u.list->n * sizeof(jv));
    memcpy(l.u.list->v + a.u.list->n, b.u.list->v, b.u.list->n * sizeof(jv));
    l.u.list->n = n;
    jr_step(r, n / 16);
    return l;
}

/* str * n or list * n */
static jv repeat(jr *r, jv seq, int64_t times) {
    if (times <= 0) {
        if (seq.kind == JV_STR) return jv_cstr("");
        jv l = jv_list_new(r, 0);
        l.sub = seq.sub;
        return l;
    }
    if (seq.kind == JV_STR) {
        if (seq.len && (uint64_t)times > r->max_output / seq.len)
            jr_fail(r, JINJA_LIMIT, "string length limit (%zu bytes) reached", r->max_output);
        size_t n = (size_t)times * seq.len;
        char *p = jr_alloc(r, n + 1);
        for (int64_t i = 0; i < times; i++) memcpy(p + (size_t)i * seq.len, seq.u.s, seq.len);
        p[n] = 0;
        jr_step(r, n / 256);
        jv out = jv_str(r, p, n);
        out.sub = seq.sub;
        return out;
    }
    const jlist *src = seq.u.list;
    if (src->n && (uint64_t)times > (1u << 26) / src->n) jr_fail(r, JINJA_LIMIT, "list length limit reached");
    uint32_t n = (uint32_t)times * src->n;
    jv l = jv_list_new(r, n);
    l.sub = seq.sub;
    for (int64_t i = 0; i < times; i++) memcpy(l.u.list->v + (size_t)i * src->n, src->v, src->n * sizeof(jv));
    l.u.list->n = n;
    jr_step(r, n / 16);
    return l;
}

jv jarith(jr *r, int op, jv a, jv b) {
    static const char *const names[] = {[JOP_ADD] = "+", [JOP_SUB] = "-", [JOP_MUL] = "*", [JOP_DIV] = "/",
                                        [JOP_FLOORDIV] = "//", [JOP_MOD] = "%", [JOP_POW] = "** or pow()"};
    if (a.kind == JV_UNDEFINED) jundef_fail(r, a);
    if (b.kind == JV_UNDEFINED) jundef_fail(r, b);
    int nums = jv_is_num(a) && jv_is_num(b);
    int ints = nums && a.kind != JV_FLOAT && b.kind != JV_FLOAT;
    int64_t x = a.u.i, y = b.u.i, z;
    switch (op) {
    case JOP_ADD:
        if (ints) {
            if (__builtin_add_overflow(x, y, &z)) overflow(r);
            return jv_int(z);
        }
        if (nums) return jv_float(jv_num(a) + jv_num(b));
        if (a.kind == JV_STR && b.kind == JV_STR) {
            if (a.sub != JS_MARKUP && b.sub != JS_MARKUP) return concat_str(r, a, b);
            jv m = concat_str(r, jhtml_escape(r, a), jhtml_escape(r, b));  /* Markup + str escapes the str */
            m.sub = JS_MARKUP;
            return m;
        }
        if (a.kind == JV_LIST && b.kind == JV_LIST && a.sub == b.sub && a.sub <= JL_TUPLE) return concat_list(r, a, b);
        if (a.kind == JV_STR) jr_error(r, "can only concatenate str (not \"%s\") to str", jv_type_name(b));
        if (a.kind == JV_LIST && a.sub <= JL_TUPLE)
            jr_error(r, "can only concatenate %s (not \"%s\") to %s", jv_type_name(a), jv_type_name(b), jv_type_name(a));
        break;
    case JOP_SUB:
        if (ints) {
            if (__builtin_sub_overflow(x, y, &z)) overflow(r);
            return jv_int(z);
        }
        if (nums) return jv_float(jv_num(a) - jv_num(b));
        break;
    case JOP_MUL:
        if (ints) {
            if (__builtin_mul_overflow(x, y, &z)) overflow(r);
            return jv_int(z);
        }
        if (nums) return jv_float(jv_num(a) * jv_num(b));
        if ((a.kind == JV_STR || (a.kind == JV_LIST && a.sub <= JL_TUPLE)) && (b.kind == JV_INT || b.kind == JV_BOOL))
            return repeat(r, a, y);
        if ((b.kind == JV_STR || (b.kind == JV_LIST && b.sub <= JL_TUPLE)) && (a.kind == JV_INT || a.kind == JV_BOOL))
            return repeat(r, b, x);
        if (a.kind == JV_STR || b.kind == JV_STR)
            jr_error(r, "can't multiply sequence by non-int of type '%s'", jv_type_name(a.kind == JV_STR ? b : a));
        break;
    case JOP_DIV:
        if (nums) {
            if (jv_num(b) == 0) jr_error(r, ints ? "division by zero" : "float division by zero");
            return jv_float(jv_num(a) / jv_num(b));
        }
        break;
    case JOP_FLOORDIV:
        if (ints) {
            if (y == 0) jr_error(r, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) overflow(r);
            int64_t q = x / y;
            if ((x % y != 0) && ((x < 0) != (y < 0))) q--;
            return jv_int(q);
        }
        if (nums) {
            double fy = jv_num(b), fx = jv_num(a);
            if (fy == 0) jr_error(r, "float floor division by zero");
            double mod = fmod(fx, fy), div = (fx - mod) / fy;
            if (mod != 0 && ((fy < 0) != (mod < 0))) div -= 1.0;
            double fl = floor(div);
            if (div - fl > 0.5) fl += 1.0;
            return jv_float(div == 0 ? copysign(0.0, fx / fy) : fl);
        }
        break;
    case JOP_MOD:
        if (a.kind == JV_STR) return jformat_printf(r, a, b);
        if (ints) {
            if (y == 0) jr_error(r, "integer division or modulo by zero");
            if (y == -1) return jv_int(0);
            int64_t m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            return jv_int(m);
        }
        if (nums) {
            double fx = jv_num(a), fy = jv_num(b);
            if (fy == 0) jr_error(r, "float modulo");
            double m = fmod(fx, fy);
            if (m != 0) {
                if ((fy < 0) != (m < 0)) m += fy;
            } else m = copysign(0.0, fy);
            return jv_float(m);
        }
        break;
    case JOP_POW:
        if (ints && y >= 0) {
            int64_t result = 1, base = x;
            for (int64_t e = y; e > 0; e >>= 1) {
                if (e & 1 && __builtin_mul_overflow(result, base, &result)) overflow(r);
                if (e > 1 && __builtin_mul_overflow(base, base, &base)) overflow(r);
            }
            return jv_int(result);
        }
        if (nums) {
            double fx = jv_num(a), fy = jv_num(b);
            if (fx == 0 && fy < 0) jr_error(r, "0.0 cannot be raised to a negative power");
            if (fx < 0 && fy != floor(fy)) jr_error(r, "a negative number to a fractional power is complex");
            return jv_float(pow(fx, fy));
        }
        break;
    }
    bad_operands(r, names[op], a, b);
}

static int contains(jr *r, jv container, jv item) {
    switch (container.kind) {
    case JV_STR:
        if (item.kind != JV_STR) jr_error(r, "'in <string>' requires string as left operand, not %s", jv_type_name(item));
        jr_step(r, container.len / 256);
        return jstr_find(container, item, 0) >= 0;
    case JV_DICT: return jv_dict_get(r, container.u.dict, item) != NULL;
    case JV_UNDEFINED: return 0;
    case JV_LIST: {
        jlist *l = container.u.list;
        int iter = jv_is_iter(container);
        jgen_force(r, l);
        if (container.sub == JL_KEYS) jv_check_hashable(r, item);
        for (uint32_t i = iter ? l->pos : 0; i < l->n; i++) {
            jr_step(r, 1);
            if (jv_eq(r, l->v[i], item)) {
                if (iter) l->pos = i + 1;  /* a generator is used up to what it found */
                return 1;
            }
        }
        if (iter) l->pos = l->n;
        return 0;
    }
    default: jr_error(r, "argument of type '%s' is not iterable", jv_type_name(container));
    }
}

static int compare(jr *r, int op, jv a, jv b) {
    switch (op) {
    case JOP_EQ: return jv_eq(r, a, b);
    case JOP_NE: return !jv_eq(r, a, b);
    case JOP_IN: return contains(r, b, a);
    case JOP_NOTIN: return !contains(r, b, a);
    }
    if (a.kind == JV_UNDEFINED) jundef_fail(r, a);
    if (b.kind == JV_UNDEFINED) jundef_fail(r, b);
    return jv_compare_op(r, a, b, op == JOP_LT ? "<" : op == JOP_LTEQ ? "<=" : op == JOP_GT ? ">" : ">=");
}

/* ---- calls, filters, tests ---- */

void jeval_args(jr *r, const jcallargs *ca, jargs *out, const char *extra_name, jv extra_val) {
    memset(out, 0, sizeof *out);
    jv pos = jv_list_new(r, ca ? (uint32_t)ca->n : 0);
    int nkw = 0, capkw = (ca ? ca->nkw : 0) + (extra_name ? 1 : 0);
    jv kwdict = {0};
    if (ca) {
        for (int i = 0; i < ca->n; i++) jv_list_push(r, &pos, jeval(r, ca->pos[i]));
        if (ca->star) {
            jv extra = jiterate(r, jeval(r, ca->star));
            for (uint32_t i = 0; i < extra.u.list->n; i++) jv_list_push(r, &pos, extra.u.list->v[i]);
        }
        if (ca->starstar) {
            kwdict = jeval(r, ca->starstar);
            if (kwdict.kind != JV_DICT) jr_error(r, "argument after ** must be a mapping, not %s", jv_type_name(kwdict));
            capkw += (int)kwdict.u.dict->n;
        }
    }
    out->kwname = jr_alloc(r, sizeof(jstr) * (size_t)(capkw + 1));
    out->kwval = jr_alloc(r, sizeof(jv) * (size_t)(capkw + 1));
    if (ca) {
        for (int i = 0; i < ca->nkw; i++) {
            out->kwname[nkw] = ca->kwname[i];
            out->kwval[nkw++] = jeval(r, ca->kwval[i]);
        }
        if (kwdict.kind == JV_DICT)
            for (uint32_t i = 0; i < kwdict.u.dict->n; i++) {
                jv k = kwdict.u.dict->keys[i];
                if (k.kind != JV_STR) jr_error(r, "keywords must be strings");
                out->kwname[nkw].p = k.u.s;
                out->kwname[nkw].n = k.len;
                out->kwval[nkw++] = kwdict.u.dict->vals[i];
            }
    }
    if (extra_name) {
        out->kwname[nkw].p = extra_name;
        out->kwname[nkw].n = (uint32_t)strlen(extra_name);
        out->kwval[nkw++] = extra_val;
    }
    out->n = (int)pos.u.list->n;
    out->pos = pos.u.list->v;
    out->nkw = nkw;
}

jv jeval_filter(jr *r, const jnode *f, jv v) {
    if (f->builtin < 0) {
        if (jfilter_unsupported(f->name.p, f->name.n))
            jr_error(r, "the filter '%.*s' is not supported", (int)f->name.n, f->name.p);
        jr_error(r, "No filter named '%.*s' found.", (int)f->name.n, f->name.p);
    }
    jargs a;
    jeval_args(r, f->args, &a, NULL, jv_none());
    r->line = f->line;
    return jfilter_call(r, f->builtin, v, &a);
}

static int eval_test(jr *r, const jnode *t) {
    if (t->builtin < 0) jr_error(r, "No test named '%.*s' found.", (int)t->name.n, t->name.p);
    jv v = jeval(r, t->a);
    jargs a;
    jeval_args(r, t->args, &a, NULL, jv_none());
    r->line = t->line;
    return jtest_call(r, t->builtin, v, &a);
}

/* ---- expressions ---- */

static jv eval_compound(jr *r, const jnode *n) {
    switch (n->kind) {
    case JN_LIST:
    case JN_TUPLE: {
        jv l = jv_list_new(r, (uint32_t)n->n);
        if (n->kind == JN_TUPLE) l.sub = JL_TUPLE;
        for (int i = 0; i < n->n; i++) jv_list_push(r, &l, jeval(r, n->kids[i]));
        return l;
    }
    case JN_DICT: {
        jv d = jv_dict_new(r, (uint32_t)(n->n / 2));
        for (int i = 0; i + 1 < n->n; i += 2) {
            jv k = jeval(r, n->kids[i]);
            jv_dict_set(r, &d, k, jeval(r, n->kids[i + 1]));
        }
        return d;
    }
    case JN_GETATTR: return jgetattr(r, jeval(r, n->a), n->name.p, n->name.n);
    case JN_GETITEM: {
        jv obj = jeval(r, n->a);
        const jnode *k = n->b;
        if (k->kind == JN_SLICE) {
            jv start = k->a ? jeval(r, k->a) : jv_none(), stop = k->b ? jeval(r, k->b) : jv_none(),
               step = k->c ? jeval(r, k->c) : jv_none();
            /* jinja2 slices with Python's own [], not its forgiving getitem */
            if (obj.kind == JV_UNDEFINED) jundef_fail(r, obj);
            if (obj.kind == JV_STR || jv_is_seq(obj)) return jv_slice(r, obj, start, stop, step);
            if (obj.kind == JV_DICT) jr_error(r, "unhashable type: 'slice'");
            jr_error(r, "'%s' object is not subscriptable", jv_type_name(obj));
        }
        return jgetitem(r, obj, jeval(r, k));
    }
    case JN_CALL: {
        jv callee = jeval(r, n->a);
        jargs a;
        jeval_args(r, n->args, &a, NULL, jv_none());
        r->line = n->line;
        return jcall(r, callee, &a);
    }
    case JN_FILTER: return jeval_filter(r, n, jeval(r, n->a));
    case JN_TEST: return jv_bool(eval_test(r, n));
    case JN_UNARY: {
        jv v = jeval(r, n->a);
        if (n->op == JOP_NOT) return jv_bool(!jv_truthy(v));
        if (v.kind == JV_UNDEFINED) jundef_fail(r, v);
        if (v.kind == JV_FLOAT) return jv_float(n->op == JOP_NEG ? -v.u.f : v.u.f);
        if (v.kind == JV_INT || v.kind == JV_BOOL) {
            if (n->op == JOP_POS) return jv_int(v.u.i);
            if (v.u.i == INT64_MIN) overflow(r);
            return jv_int(-v.u.i);
        }
        jr_error(r, "bad operand type for unary %s: '%s'", n->op == JOP_NEG ? "-" : "+", jv_type_name(v));
    }
    case JN_BINOP: {
        jv a = jeval(r, n->a), b = jeval(r, n->b);
        r->line = n->line;
        return jarith(r, n->op, a, b);
    }
    case JN_AND: {
        jv a = jeval(r, n->a);
        return jv_truthy(a) ? jeval(r, n->b) : a;
    }
    case JN_OR: {
        jv a = jeval(r, n->a);
        return jv_truthy(a) ? a : jeval(r, n->b);
    }
    case JN_COMPARE: {
        jv left = jeval(r, n->a);
        for (int i = 0; i < n->n; i++) {
            jv right = jeval(r, n->kids[i]);
            r->line = n->line;
            if (!compare(r, n->ops[i], left, right)) return jv_bool(0);
            left = right;
        }
        return jv_bool(1);
    }
    case JN_CONCAT: {
        jbuf b;
        jbuf_init(r, &b, 64);
        for (int i = 0; i < n->n; i++) jv_write_str(r, &b, jeval(r, n->kids[i]));
        return jbuf_value(&b);
    }
    case JN_CONDEXPR:
        if (jv_truthy(jeval(r, n->a))) return jeval(r, n->b);
        return n->c ? jeval(r, n->c) : jv_undef_for(r, JU_PLAIN, 0, NULL, 0);
    default: jr_error(r, "internal error: expression kind %d", n->kind);
    }
}

jv jeval(jr *r, const jnode *n) {
    jr_step(r, 1);
    switch (n->kind) {
    case JN_CONST: return n->value;
    case JN_NAME: {
        jv *v = jscope_find(r->scope, n->sym);
        if (v) return *v;
        int g = r->t->sym_global[n->sym];
        if (g >= 0) {
            jv f = {0};
            f.kind = JV_FUNC;
            f.u.fn = (jfunc *)jglobal_func(g);
            return f;
        }
        return jv_undef_for(r, JU_NAME, 0, n->name.p, n->name.n);
    }
    default: break;
    }
    r->line = n->line;
    jr_enter(r);
    jv v = eval_compound(r, n);
    jr_leave(r);
    return v;
}
