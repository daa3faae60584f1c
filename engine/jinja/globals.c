/* globals.c - the functions a template can call by name (range, dict, namespace, cycler,
 * joiner, and Hugging Face's raise_exception and strftime_now) and the attributes of the
 * loop variable. */
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "engine/jinja/eval.h"
#include "engine/jinja/jinja.h"

#define MAX_RANGE 100000  /* jinja2's sandbox refuses longer ranges */

static int64_t int_arg(jr *r, jv v) {
    if (v.kind == JV_INT || v.kind == JV_BOOL) return v.u.i;
    jr_error(r, "'%s' object cannot be interpreted as an integer", jv_type_name(v));
}

static jv g_range(jr *r, jv self, const jargs *a) {
    if (a->nkw) jr_error(r, "range() takes no keyword arguments");
    if (a->n < 1 || a->n > 3) jr_error(r, "range expected at most 3 arguments, got %d", a->n);
    int64_t start = 0, stop, step = 1;
    if (a->n == 1) stop = int_arg(r, a->pos[0]);
    else {
        start = int_arg(r, a->pos[0]);
        stop = int_arg(r, a->pos[1]);
        if (a->n == 3) step = int_arg(r, a->pos[2]);
    }
    if (step == 0) jr_error(r, "range() arg 3 must not be zero");
    int64_t n = 0;
    if (step > 0 && start < stop) n = (int64_t)(((__int128)stop - start - 1) / step + 1);
    if (step < 0 && start > stop) n = (int64_t)(((__int128)start - stop - 1) / -step + 1);
    if (n > MAX_RANGE)
        jr_error(r, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", MAX_RANGE);
    jr_step(r, (uint64_t)n / 16);
    jv l = jv_list_new(r, (uint32_t)n);
    l.sub = JL_RANGE;
    for (int64_t i = 0; i < n; i++) l.u.list->v[i] = jv_int((int64_t)(start + (__int128)i * step));
    l.u.list->n = (uint32_t)n;
    l.u.list->start = start;
    l.u.list->stop = stop;
    l.u.list->step = step;
    return l;
}

/* dict(mapping or pairs, **kwargs) - also the body of namespace(...) */
static jv make_dict(jr *r, const jargs *a, const char *fname) {
    if (a->n > 1) jr_error(r, "%s expected at most 1 argument, got %d", fname, a->n);
    jv d = jv_dict_new(r, 4);
    if (a->n == 1) {
        jv src = a->pos[0];
        if (src.kind == JV_DICT) {
            for (uint32_t i = 0; i < src.u.dict->n; i++) jv_dict_set(r, &d, src.u.dict->keys[i], src.u.dict->vals[i]);
        } else {
            const jlist *items = jiterate(r, src).u.list;
            for (uint32_t i = 0; i < items->n; i++) {
                const jlist *pair = jiterate(r, items->v[i]).u.list;
                if (pair->n != 2)
                    jr_error(r, "dictionary update sequence element #%u has length %u; 2 is required", i, pair->n);
                jv_dict_set(r, &d, pair->v[0], pair->v[1]);
            }
        }
    }
    for (int k = 0; k < a->nkw; k++) jv_dict_set(r, &d, jv_str(r, a->kwname[k].p, a->kwname[k].n), a->kwval[k]);
    return d;
}

static jv g_dict(jr *r, jv self, const jargs *a) { return make_dict(r, a, "dict"); }

static jv g_namespace(jr *r, jv self, const jargs *a) {
    jv ns = make_dict(r, a, "namespace");
    ns.kind = JV_NS;
    return ns;
}

static jv g_raise_exception(jr *r, jv self, const jargs *a) {
    static const char *const names[] = {"message"};
    jv arg[1];
    jargs_bind(r, a, "raise_exception", names, 1, 1, arg);
    jv msg = jv_to_str(r, arg[0]);
    jr_raise(r, msg.u.s, msg.len);
}

/* datetime.now().strftime(format): the local time; a naive datetime has no zone, so %z and
 * %Z are empty, and %f is the microseconds */
static jv g_strftime_now(jr *r, jv self, const jargs *a) {
    static const char *const names[] = {"format"};
    jv arg[1];
    jargs_bind(r, a, "strftime_now", names, 1, 1, arg);
    if (arg[0].kind != JV_STR) jr_error(r, "strftime() argument 1 must be str, not %s", jv_type_name(arg[0]));
    jv fmt = arg[0];
    time_t now;
    long usec = 0;
    if (r->fixed_time) now = r->now;
    else {
        struct timeval tv;
        gettimeofday(&tv, NULL);
        now = tv.tv_sec;
        usec = (long)tv.tv_usec;
    }
    struct tm tm;
    localtime_r(&now, &tm);
    jbuf f;  /* the format with %f, %z, %Z resolved, NUL-terminated for strftime */
    jbuf_init(r, &f, (size_t)fmt.len + 16);
    for (uint32_t i = 0; i < fmt.len; i++) {
        char c = fmt.u.s[i];
        if (c == 0) break;
        if (c == '%' && i + 1 < fmt.len) {
            char d = fmt.u.s[i + 1];
            if (d == 'f') { jbuf_printf(r, &f, "%06ld", usec); i++; continue; }
            if (d == 'z' || d == 'Z') { i++; continue; }
            jbuf_putc(r, &f, c);
            jbuf_putc(r, &f, d);
            i++;
            continue;
        }
        jbuf_putc(r, &f, c);
    }
    jbuf_putc(r, &f, 0);
    if (f.len == 1) return jv_cstr("");
    for (size_t cap = 256; cap <= (1u << 20); cap *= 4) {
        char *out = jr_alloc(r, cap);
        size_t n = strftime(out, cap, f.p, &tm);
        if (n > 0) return jv_str(r, out, n);
    }
    return jv_cstr("");  /* a format whose expansion is empty */
}

static jv g_joiner(jr *r, jv self, const jargs *a) {
    static const char *const names[] = {"sep"};
    jv arg[1];
    jargs_bind(r, a, "joiner", names, 1, 0, arg);
    jfunc *f = jr_alloc(r, sizeof *f);
    memset(f, 0, sizeof *f);
    f->kind = JF_JOINER;
    f->name = "joiner";
    f->name_len = 6;
    f->self = jv_absent();
    f->state = arg[0].kind == JV_ABSENT ? jv_cstr(", ") : jv_to_str(r, arg[0]);
    jv v = {0};
    v.kind = JV_FUNC;
    v.u.fn = f;
    return v;
}

static jv g_cycler(jr *r, jv self, const jargs *a) {
    if (a->nkw) jr_error(r, "cycler() takes no keyword arguments");
    if (a->n == 0) jr_error(r, "at least one item has to be provided");
    jv items = jv_list_new(r, (uint32_t)a->n);
    for (int i = 0; i < a->n; i++) jv_list_push(r, &items, a->pos[i]);
    jfunc *f = jr_alloc(r, sizeof *f);
    memset(f, 0, sizeof *f);
    f->kind = JF_CYCLER;
    f->name = "cycler";
    f->name_len = 6;
    f->self = jv_absent();
    f->state = items;
    jv v = {0};
    v.kind = JV_FUNC;
    v.u.fn = f;
    return v;
}

static jv bound(jr *r, jv self, const char *name, jbuiltin_fn fn) {
    jfunc *f = jr_alloc(r, sizeof *f);
    memset(f, 0, sizeof *f);
    f->kind = JF_BUILTIN;
    f->name = name;
    f->name_len = (int)strlen(name);
    f->fn = fn;
    f->self = self;
    jv v = {0};
    v.kind = JV_FUNC;
    v.u.fn = f;
    return v;
}

static jv cycler_next(jr *r, jv self, const jargs *a) {
    jargs_none(r, a, "next");
    jfunc *f = self.u.fn;
    jv v = f->state.u.list->v[f->pos];
    f->pos = (f->pos + 1) % (int)f->state.u.list->n;
    return v;
}

static jv cycler_reset(jr *r, jv self, const jargs *a) {
    jargs_none(r, a, "reset");
    self.u.fn->pos = 0;
    return jv_none();
}

jv jcycler_attr(jr *r, jv cycler, const char *name, size_t n) {
    jfunc *f = cycler.u.fn;
    if (n == 7 && memcmp(name, "current", 7) == 0) return f->state.u.list->v[f->pos];
    if (n == 4 && memcmp(name, "next", 4) == 0) return bound(r, cycler, "next", cycler_next);
    if (n == 5 && memcmp(name, "reset", 5) == 0) return bound(r, cycler, "reset", cycler_reset);
    if (n == 5 && memcmp(name, "items", 5) == 0) return f->state;
    return jv_absent();
}

/* ---- the loop variable ---- */

static jv loop_cycle(jr *r, jv self, const jargs *a) {
    if (a->nkw) jr_error(r, "cycle() takes no keyword arguments");
    if (a->n == 0) jr_error(r, "no items for cycling given");
    return a->pos[self.u.loop->i % (uint32_t)a->n];
}

static jv loop_changed(jr *r, jv self, const jargs *a) {
    jloop *l = self.u.loop;
    jv now = jv_list_new(r, (uint32_t)a->n);
    now.sub = JL_TUPLE;
    for (int i = 0; i < a->n; i++) jv_list_push(r, &now, a->pos[i]);
    if (l->changed_last.kind != JV_ABSENT && jv_eq(r, l->changed_last, now)) return jv_bool(0);
    l->changed_last = now;
    return jv_bool(1);
}

jv jloop_attr(jr *r, jv loopv, const char *name, size_t n) {
    const jloop *l = loopv.u.loop;
    char key[16];
    if (n >= sizeof key) return jv_undef_for(r, JU_ATTR, JV_LOOP, name, n);
    memcpy(key, name, n);
    key[n] = 0;
    int64_t i = l->i, len = l->n;
    if (!strcmp(key, "index")) return jv_int(i + 1);
    if (!strcmp(key, "index0")) return jv_int(i);
    if (!strcmp(key, "revindex")) return jv_int(len - i);
    if (!strcmp(key, "revindex0")) return jv_int(len - i - 1);
    if (!strcmp(key, "first")) return jv_bool(i == 0);
    if (!strcmp(key, "last")) return jv_bool(i == len - 1);
    if (!strcmp(key, "length")) return jv_int(len);
    if (!strcmp(key, "depth")) return jv_int(l->depth0 + 1);
    if (!strcmp(key, "depth0")) return jv_int(l->depth0);
    if (!strcmp(key, "previtem"))
        return i > 0 ? l->items[i - 1] : jv_undef_for(r, JU_PLAIN, 0, "there is no previous item", 25);
    if (!strcmp(key, "nextitem"))
        return i + 1 < len ? l->items[i + 1] : jv_undef_for(r, JU_PLAIN, 0, "there is no next item", 21);
    if (!strcmp(key, "cycle")) return bound(r, loopv, "cycle", loop_cycle);
    if (!strcmp(key, "changed")) return bound(r, loopv, "changed", loop_changed);
    return jv_undef_for(r, JU_ATTR, JV_LOOP, name, n);
}

/* ---- the table ---- */

/* repr: what printing it shows in Python when it is a class */
#define GLOBAL(n, f, r) {.kind = JF_BUILTIN, .name = n, .name_len = sizeof n - 1, .fn = f, .self = {.kind = JV_ABSENT}, .repr = r}
static const jfunc globals[] = {
    GLOBAL("range", g_range, "<class 'range'>"), GLOBAL("dict", g_dict, "<class 'dict'>"),
    GLOBAL("namespace", g_namespace, "<class 'jinja2.utils.Namespace'>"),
    GLOBAL("cycler", g_cycler, "<class 'jinja2.utils.Cycler'>"),
    GLOBAL("joiner", g_joiner, "<class 'jinja2.utils.Joiner'>"),
    GLOBAL("raise_exception", g_raise_exception, NULL), GLOBAL("strftime_now", g_strftime_now, NULL),
};

int jglobal_find(const char *name, size_t n) {
    for (size_t i = 0; i < sizeof globals / sizeof globals[0]; i++)
        if ((size_t)globals[i].name_len == n && memcmp(globals[i].name, name, n) == 0) return (int)i;
    return -1;
}

const jfunc *jglobal_func(int id) { return &globals[id]; }
