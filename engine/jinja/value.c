/* value.c - the render's arena, errors and buffers; values and Python's rules for truth,
 * equality and ordering. */
#include "engine/jinja/value.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/jinja/jinja.h"

/* ---- arena ---- */

struct jchunk {
    jchunk *next;
    size_t cap, used;
    _Alignas(16) unsigned char data[];
};

#define CHUNK_MIN (32u << 10)
#define CHUNK_MAX (1u << 20)

void *jarena_alloc(jarena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    jchunk *h = a->head;
    if (h && h->cap - h->used >= n) {
        void *p = h->data + h->used;
        h->used += n;
        return p;
    }
    /* a new chunk: sizes double up to CHUNK_MAX; a big request gets a chunk of its own,
     * put behind the current one so that the current one's free space stays in use */
    size_t cap = h ? h->cap * 2 : CHUNK_MIN;
    if (cap > CHUNK_MAX) cap = CHUNK_MAX;
    int own = n > cap / 4;
    if (own) cap = n;
    if (n > SIZE_MAX / 2 || a->total + sizeof(jchunk) + cap > a->limit) return NULL;
    jchunk *c = malloc(sizeof(jchunk) + cap);
    if (!c) return NULL;
    a->total += sizeof(jchunk) + cap;
    c->cap = cap;
    c->used = n;
    if (own && h) {
        c->next = h->next;
        h->next = c;
    } else {
        c->next = h;
        a->head = c;
    }
    return c->data;
}

/* grows the most recent allocation p (old bytes) to n bytes in place if it is the last
 * thing in the current chunk and the chunk has room; returns 1 if it did */
static int jarena_extend(jarena *a, void *p, size_t old, size_t n) {
    jchunk *h = a->head;
    old = (old + 15) & ~(size_t)15;
    n = (n + 15) & ~(size_t)15;
    if (!h || (unsigned char *)p + old != h->data + h->used || (unsigned char *)p < h->data) return 0;
    if (n - old > h->cap - h->used) return 0;
    h->used += n - old;
    return 1;
}

void jarena_free(jarena *a) {
    jchunk *c = a->head;
    while (c) {
        jchunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->total = 0;
}

/* ---- errors and limits ---- */

void jr_fail(jr *r, int kind, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    free(r->error);
    size_t need = strlen(msg) + 32;
    r->error = malloc(need);
    if (r->error) {
        if (kind == JINJA_RAISED) snprintf(r->error, need, "%s", msg);
        else snprintf(r->error, need, "line %d: %s", r->line, msg);
    }
    r->error_kind = kind;
    longjmp(*r->jmp, 1);
}

void jr_raise(jr *r, const char *msg, size_t len) {
    free(r->error);
    r->error = malloc(len + 1);
    if (r->error) {
        memcpy(r->error, msg, len);
        r->error[len] = 0;
    }
    r->error_kind = JINJA_RAISED;
    longjmp(*r->jmp, 1);
}

void *jr_alloc(jr *r, size_t n) {
    void *p = jarena_alloc(&r->arena, n);
    if (!p) jr_fail(r, JINJA_LIMIT, "memory limit (%zu bytes) reached", r->arena.limit);
    return p;
}

void jr_enter(jr *r) {
    if (++r->depth > r->max_depth) {
        r->depth = 0;  /* the error path must not trip over it again */
        jr_fail(r, JINJA_LIMIT, "nesting depth limit (%d) reached", r->max_depth);
    }
}

/* ---- buffers ---- */

void jbuf_init(jr *r, jbuf *b, size_t cap) {
    if (cap < 64) cap = 64;
    b->p = jr_alloc(r, cap);
    b->len = 0;
    b->cap = cap;
}

void jbuf_put(jr *r, jbuf *b, const char *s, size_t n) {
    if (n == 0) return;
    r->put_bytes += n;  /* every 256 bytes written anywhere count a step */
    if (r->put_bytes >= 256) {
        jr_step(r, r->put_bytes / 256);
        r->put_bytes %= 256;
    }
    if (b->len + n > r->max_output)
        jr_fail(r, JINJA_LIMIT, "output limit (%zu bytes) reached", r->max_output);
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        while (cap < b->len + n) cap *= 2;
        if (!b->p || !jarena_extend(&r->arena, b->p, b->cap, cap)) {
            char *p = jr_alloc(r, cap);
            if (b->len) memcpy(p, b->p, b->len);
            b->p = p;
        }
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

void jbuf_puts(jr *r, jbuf *b, const char *s) { jbuf_put(r, b, s, strlen(s)); }

void jbuf_printf(jr *r, jbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) { jbuf_put(r, b, tmp, (size_t)n); return; }
    char *big = jr_alloc(r, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    jbuf_put(r, b, big, (size_t)n);
}

jv jbuf_value(jbuf *b) {
    jv v = {0};
    v.kind = JV_STR;
    v.u.s = b->p ? b->p : "";
    v.len = (uint32_t)b->len;
    return v;
}

/* ---- constructors ---- */

jv jv_str(jr *r, const char *s, size_t n) {
    if (n > r->max_output) jr_fail(r, JINJA_LIMIT, "string length limit (%zu bytes) reached", r->max_output);
    jv v = {0};
    v.kind = JV_STR;
    v.u.s = n ? s : "";
    v.len = (uint32_t)n;
    return v;
}

jv jv_str_copy(jr *r, const char *s, size_t n) {
    if (n > r->max_output) jr_fail(r, JINJA_LIMIT, "string length limit (%zu bytes) reached", r->max_output);
    char *p = jr_alloc(r, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return jv_str(r, p, n);
}

jv jv_cstr(const char *s) {
    jv v = {0};
    v.kind = JV_STR;
    v.u.s = s;
    v.len = (uint32_t)strlen(s);
    return v;
}

jv jv_undef_for(jr *r, int what, int objkind, const char *name, size_t n) {
    (void)r;
    jv v = {0};
    v.kind = JV_UNDEFINED;
    v.sub = (uint8_t)what;
    v.aux = (uint16_t)objkind;
    v.u.s = name;
    v.len = (uint32_t)(n > 200 ? 200 : n);  /* only for the message */
    return v;
}

jv jv_list_new(jr *r, uint32_t cap) {
    jlist *l = jr_alloc(r, sizeof *l);
    memset(l, 0, sizeof *l);
    l->cap = cap ? cap : 1;  /* never NULL: offsets into an empty list stay defined */
    l->v = jr_alloc(r, (size_t)l->cap * sizeof(jv));
    jv v = {0};
    v.kind = JV_LIST;
    v.u.list = l;
    return v;
}

void jv_list_push(jr *r, jv *list, jv item) {
    jlist *l = list->u.list;
    if (l->n == l->cap) {
        uint32_t cap = l->cap ? l->cap * 2 : 4;
        if (cap > (1u << 28)) jr_fail(r, JINJA_LIMIT, "list length limit reached");
        jv *nv = jr_alloc(r, (size_t)cap * sizeof(jv));
        if (l->n) memcpy(nv, l->v, (size_t)l->n * sizeof(jv));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = item;
}

jv jv_tuple2(jr *r, jv a, jv b) {
    jv t = jv_list_new(r, 2);
    t.sub = JL_TUPLE;
    t.u.list->v[0] = a;
    t.u.list->v[1] = b;
    t.u.list->n = 2;
    return t;
}

jv jv_dict_new(jr *r, uint32_t cap) {
    jdict *d = jr_alloc(r, sizeof *d);
    d->n = 0;
    d->cap = cap;
    d->keys = cap ? jr_alloc(r, (size_t)cap * sizeof(jv)) : NULL;
    d->vals = cap ? jr_alloc(r, (size_t)cap * sizeof(jv)) : NULL;
    jv v = {0};
    v.kind = JV_DICT;
    v.u.dict = d;
    return v;
}

jv *jv_dict_get_str(const jdict *d, const char *s, size_t n) {
    for (uint32_t i = 0; i < d->n; i++) {
        const jv *k = &d->keys[i];
        if (k->kind == JV_STR && k->len == n && memcmp(k->u.s, s, n) == 0) return &d->vals[i];
    }
    return NULL;
}

jv *jv_dict_get(jr *r, const jdict *d, jv key) {
    jv_check_hashable(r, key);
    jr_step(r, d->n / 16);  /* a linear search: big dicts cost steps, so they cannot hang */
    if (key.kind == JV_STR) return jv_dict_get_str(d, key.u.s, key.len);
    for (uint32_t i = 0; i < d->n; i++)
        if (d->keys[i].kind != JV_STR && jv_eq(r, d->keys[i], key)) return &d->vals[i];
    return NULL;
}

void jv_dict_set(jr *r, jv *dict, jv key, jv val) {
    jdict *d = dict->u.dict;
    jv *slot = jv_dict_get(r, d, key);
    if (slot) { *slot = val; return; }
    if (d->n == d->cap) {
        uint32_t cap = d->cap ? d->cap * 2 : 4;
        if (cap > (1u << 26)) jr_fail(r, JINJA_LIMIT, "dict size limit reached");
        jv *nk = jr_alloc(r, (size_t)cap * sizeof(jv)), *nv = jr_alloc(r, (size_t)cap * sizeof(jv));
        if (d->n) {
            memcpy(nk, d->keys, (size_t)d->n * sizeof(jv));
            memcpy(nv, d->vals, (size_t)d->n * sizeof(jv));
        }
        d->keys = nk;
        d->vals = nv;
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
}

/* ---- Python semantics ---- */

const char *jv_kind_name(int kind) {
    switch (kind) {
    case JV_UNDEFINED: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_FUNC: return "function";
    case JV_LOOP: return "LoopContext";
    default: return "object";
    }
}

const char *jv_type_name(jv v) {
    if (v.kind == JV_LIST) {
        static const char *const names[] = {[JL_LIST] = "list", [JL_TUPLE] = "tuple", [JL_RANGE] = "range",
                                            [JL_KEYS] = "dict_keys", [JL_VALUES] = "dict_values",
                                            [JL_ITEMS] = "dict_items", [JL_GEN] = "generator",
                                            [JL_REVERSED] = "list_reverseiterator"};
        return v.sub <= JL_REVERSED ? names[v.sub] : "list";
    }
    if (v.kind == JV_STR && v.sub == JS_MARKUP) return "Markup";
    return jv_kind_name(v.kind);
}

int jv_truthy(jv v) {
    switch (v.kind) {
    case JV_UNDEFINED: case JV_NONE: case JV_ABSENT: return 0;
    case JV_BOOL: case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;  /* NaN is true */
    case JV_STR: return v.len != 0;
    case JV_LIST: return v.sub == JL_GEN || v.sub == JL_REVERSED || v.u.list->n != 0;
    case JV_DICT: return v.u.dict->n != 0;
    default: return 1;
    }
}

int jv_is_num(jv v) { return v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL; }

double jv_num(jv v) { return v.kind == JV_FLOAT ? v.u.f : (double)v.u.i; }

void jv_check_hashable(jr *r, jv v) {
    if (v.kind == JV_LIST && v.sub == JL_TUPLE) {
        for (uint32_t i = 0; i < v.u.list->n; i++) jv_check_hashable(r, v.u.list->v[i]);
        return;
    }
    if ((v.kind == JV_LIST && (v.sub == JL_LIST || v.sub == JL_KEYS || v.sub == JL_ITEMS)) || v.kind == JV_DICT)
        jr_error(r, "unhashable type: '%s'", jv_type_name(v));
}

/* exact comparison of an int with a double, as Python does: -1, 0, 1, or 2 if f is NaN */
static int cmp_int_float(int64_t i, double f) {
    if (isnan(f)) return 2;
    if (f >= 9223372036854775808.0) return -1;
    if (f < -9223372036854775808.0) return 1;
    double fl = floor(f);
    int64_t fi = (int64_t)fl;
    if (i < fi) return -1;
    if (i > fi) return 1;
    return fl == f ? 0 : -1;  /* i == floor(f) < f */
}

/* -1, 0, 1 for numbers; 2 when unordered (NaN) */
static int num_cmp(jv a, jv b) {
    if (a.kind != JV_FLOAT && b.kind != JV_FLOAT) return a.u.i < b.u.i ? -1 : a.u.i > b.u.i;
    if (a.kind == JV_FLOAT && b.kind == JV_FLOAT) {
        if (isnan(a.u.f) || isnan(b.u.f)) return 2;
        return a.u.f < b.u.f ? -1 : a.u.f > b.u.f;
    }
    if (a.kind == JV_FLOAT) {
        int c = cmp_int_float(b.u.i, a.u.f);
        return c == 2 ? 2 : -c;
    }
    return cmp_int_float(a.u.i, b.u.f);
}

static int list_kind_match(jv a, jv b) { return a.sub == b.sub; }

int jv_eq(jr *r, jv a, jv b) {
    if (jv_is_num(a) && jv_is_num(b)) return num_cmp(a, b) == 0;
    if (a.kind != b.kind) return 0;
    switch (a.kind) {
    case JV_UNDEFINED: case JV_NONE: return 1;
    case JV_STR:
        if (a.len != b.len) return 0;
        jr_step(r, a.len / 256);
        return memcmp(a.u.s, b.u.s, a.len) == 0;
    case JV_LIST: {
        if (a.u.list == b.u.list) return 1;
        if (!list_kind_match(a, b) || a.sub > JL_RANGE || a.u.list->n != b.u.list->n) return 0;
        jr_step(r, a.u.list->n / 16);
        jr_enter(r);
        int eq = 1;
        for (uint32_t i = 0; i < a.u.list->n && eq; i++) eq = jv_eq(r, a.u.list->v[i], b.u.list->v[i]);
        jr_leave(r);
        return eq;
    }
    case JV_DICT: {
        const jdict *x = a.u.dict, *y = b.u.dict;
        if (x->n != y->n) return 0;
        if (x == y) return 1;
        jr_step(r, x->n / 16);
        jr_enter(r);
        int eq = 1;
        for (uint32_t i = 0; i < x->n && eq; i++) {
            jv *other = jv_dict_get(r, y, x->keys[i]);
            eq = other && jv_eq(r, x->vals[i], *other);
        }
        jr_leave(r);
        return eq;
    }
    case JV_NS: return a.u.dict == b.u.dict;
    case JV_FUNC: return a.u.fn == b.u.fn;
    case JV_LOOP: return a.u.loop == b.u.loop;
    default: return 0;
    }
}

/* three-way comparison for ordering: -1, 0, 1, or 2 when unordered (NaN);
 * fails with Python's TypeError for op on types that have no order */
static int order(jr *r, jv a, jv b, const char *op) {
    if (jv_is_num(a) && jv_is_num(b)) return num_cmp(a, b);
    if (a.kind == JV_STR && b.kind == JV_STR) {
        size_t n = a.len < b.len ? a.len : b.len;
        jr_step(r, n / 256);
        int c = memcmp(a.u.s, b.u.s, n);  /* UTF-8 byte order is code point order */
        if (c) return c < 0 ? -1 : 1;
        return a.len < b.len ? -1 : a.len > b.len;
    }
    if (a.kind == JV_LIST && b.kind == JV_LIST && list_kind_match(a, b) && a.sub <= JL_TUPLE) {
        const jlist *x = a.u.list, *y = b.u.list;
        uint32_t n = x->n < y->n ? x->n : y->n;
        jr_step(r, n / 16);
        for (uint32_t i = 0; i < n; i++) {
            if (jv_eq(r, x->v[i], y->v[i])) continue;
            jr_enter(r);
            int c = order(r, x->v[i], y->v[i], op);
            jr_leave(r);
            return c;
        }
        return x->n < y->n ? -1 : x->n > y->n;
    }
    jr_error(r, "'%s' not supported between instances of '%s' and '%s'", op, jv_type_name(a), jv_type_name(b));
}

int jv_lt(jr *r, jv a, jv b, const char *op) {
    int c = order(r, a, b, op);
    return c == -1;
}

int jv_cmp(jr *r, jv a, jv b) {
    int c = order(r, a, b, "<");
    return c == 2 ? 0 : c;
}

int jv_compare_op(jr *r, jv a, jv b, const char *op) {
    int c = order(r, a, b, op);
    if (c == 2) return 0;
    if (op[0] == '<') return op[1] ? c <= 0 : c < 0;
    return op[1] ? c >= 0 : c > 0;
}
