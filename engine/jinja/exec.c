/* exec.c - statements: output, if, for, set, macros and calls, with jinja2's scoping. */
#include <string.h>

#include "engine/jinja/eval.h"
#include "engine/jinja/jinja.h"

/* ---- scopes ---- */

jscope *jscope_new(jr *r, jscope *parent) {
    jscope *s = jr_alloc(r, sizeof *s);
    memset(s, 0, sizeof *s);
    s->parent = parent;
    return s;
}

jv *jscope_find(jscope *s, int sym) {
    for (; s; s = s->parent) {
        if (s->dense) {
            if (s->vals[sym].kind != JV_ABSENT) return &s->vals[sym];
            continue;
        }
        for (uint32_t i = 0; i < s->n; i++)
            if (s->syms[i] == sym) return &s->vals[i];
    }
    return NULL;
}

void jscope_set(jr *r, jscope *s, int sym, jv v) {
    if (s->dense) {
        s->vals[sym] = v;
        return;
    }
    for (uint32_t i = 0; i < s->n; i++)
        if (s->syms[i] == sym) {
            s->vals[i] = v;
            return;
        }
    if (s->n == s->cap) {
        uint32_t cap = s->cap ? s->cap * 2 : 4;
        int *syms = jr_alloc(r, cap * sizeof *syms);
        jv *vals = jr_alloc(r, cap * sizeof *vals);
        if (s->n) {
            memcpy(syms, s->syms, s->n * sizeof *syms);
            memcpy(vals, s->vals, s->n * sizeof *vals);
        }
        s->syms = syms;
        s->vals = vals;
        s->cap = cap;
    }
    s->syms[s->n] = sym;
    s->vals[s->n] = v;
    s->n++;
}

/* ---- helpers ---- */

/* runs body in scope with its output going to a buffer of its own; returns that output */
static jv capture(jr *r, const jnode *body, jscope *scope) {
    jbuf buf;
    jbuf_init(r, &buf, 256);
    jbuf *out = r->out;
    jscope *saved = r->scope;
    r->out = &buf;
    r->scope = scope;
    jexec(r, body);
    r->out = out;
    r->scope = saved;
    return jbuf_value(&buf);
}

static jv apply_filters(jr *r, const jnode *f, jv input) {
    if (!f) return input;
    return jeval_filter(r, f, apply_filters(r, f->a, input));
}

/* Python's unpacking: v must give exactly n items */
static const jv *unpack(jr *r, jv v, int n) {
    jv items = jiterate(r, v);
    const jlist *l = items.u.list;
    if ((int)l->n < n) jr_error(r, "not enough values to unpack (expected %d, got %u)", n, l->n);
    if ((int)l->n > n) jr_error(r, "too many values to unpack (expected %d)", n);
    return l->v;
}

static void assign(jr *r, const jnode *target, jv v) {
    switch (target->kind) {
    case JN_NAME: jscope_set(r, r->scope, target->sym, v); return;
    case JN_TUPLE: {
        const jv *items = unpack(r, v, target->n);
        for (int i = 0; i < target->n; i++) assign(r, target->kids[i], items[i]);
        return;
    }
    case JN_NSREF: {
        jv *ns = jscope_find(r->scope, target->sym);
        if (!ns || ns->kind != JV_NS) jr_error(r, "cannot assign attribute on non-namespace object");
        jv key = {0};
        key.kind = JV_STR;
        key.u.s = target->name.p;
        key.len = target->name.n;
        jv_dict_set(r, ns, key, v);
        return;
    }
    default: jr_error(r, "cannot assign to this target");
    }
}

static jv func_value(jfunc *f) {
    jv v = {0};
    v.kind = JV_FUNC;
    v.u.fn = f;
    return v;
}

static jfunc *new_macro(jr *r, const jnode *n, const char *name, int name_len) {
    jfunc *f = jr_alloc(r, sizeof *f);
    memset(f, 0, sizeof *f);
    f->kind = JF_MACRO;
    f->name = name;
    f->name_len = name_len;
    f->node = n;
    f->closure = r->scope;
    f->self = jv_absent();
    return f;
}

/* ---- macro calls ---- */

jv jcall_macro(jr *r, jfunc *f, const jargs *a) {
    const jnode *node = f->node;
    const jsig *sig = node->sig;
    const jnode *body = node->kind == JN_MACRO ? node->a : node->b;
    const jinja_template *t = r->t;
    jr_enter(r);
    if (a->n > sig->n && !sig->uses_varargs)
        jr_error(r, "macro '%.*s' takes not more than %d argument(s)", f->name_len, f->name, sig->n);
    jscope *s = jscope_new(r, f->closure);
    uint8_t *used = jr_alloc(r, (size_t)a->nkw + 1), *missing = jr_alloc(r, (size_t)sig->n + 1);
    memset(used, 0, (size_t)a->nkw + 1);
    for (int i = 0; i < sig->n; i++) {
        missing[i] = 0;
        if (i < a->n) {
            jscope_set(r, s, sig->syms[i], a->pos[i]);
            continue;
        }
        int k = 0;
        while (k < a->nkw && (used[k] || a->kwname[k].n != sig->names[i].n ||
                              memcmp(a->kwname[k].p, sig->names[i].p, sig->names[i].n) != 0))
            k++;
        if (k < a->nkw) {
            used[k] = 1;
            jscope_set(r, s, sig->syms[i], a->kwval[k]);
        } else missing[i] = 1;
    }
    if (sig->uses_caller) {
        jv caller = jv_undef_for(r, JU_PLAIN, 0, "No caller defined", 17);
        for (int k = 0; k < a->nkw; k++)
            if (!used[k] && a->kwname[k].n == 6 && memcmp(a->kwname[k].p, "caller", 6) == 0) {
                used[k] = 1;
                caller = a->kwval[k];
            }
        jscope_set(r, s, t->sym_caller, caller);
    }
    if (sig->uses_kwargs) {
        jv kw = jv_dict_new(r, 4);
        for (int k = 0; k < a->nkw; k++)
            if (!used[k]) jv_dict_set(r, &kw, jv_str(r, a->kwname[k].p, a->kwname[k].n), a->kwval[k]);
        jscope_set(r, s, t->sym_kwargs, kw);
    } else {
        for (int k = 0; k < a->nkw; k++) {
            if (used[k]) continue;
            if (a->kwname[k].n == 6 && memcmp(a->kwname[k].p, "caller", 6) == 0)
                jr_error(r, "macro '%.*s' was invoked with two values for the special caller argument. This is most likely a bug.",
                         f->name_len, f->name);
            jr_error(r, "macro '%.*s' takes no keyword argument '%.*s'", f->name_len, f->name, (int)a->kwname[k].n,
                     a->kwname[k].p);
        }
    }
    if (sig->uses_varargs) {
        jv rest = jv_list_new(r, a->n > sig->n ? (uint32_t)(a->n - sig->n) : 0);
        rest.sub = JL_TUPLE;
        for (int i = sig->n; i < a->n; i++) jv_list_push(r, &rest, a->pos[i]);
        jscope_set(r, s, t->sym_varargs, rest);
    }
    /* defaults are evaluated inside the macro, in order: they may use the parameters before */
    jscope *saved = r->scope;
    r->scope = s;
    for (int i = 0; i < sig->n; i++) {
        if (!missing[i]) continue;
        jv v = sig->defaults[i] ? jeval(r, sig->defaults[i])
                                : jv_undef_for(r, JU_NAME, 0, sig->names[i].p, sig->names[i].n);
        jscope_set(r, s, sig->syms[i], v);
    }
    r->scope = saved;
    jv out = capture(r, body, s);
    jr_leave(r);
    return out;
}

jv jcall(jr *r, jv callee, const jargs *a) {
    if (callee.kind == JV_FUNC) {
        jfunc *f = callee.u.fn;
        if (f->kind == JF_MACRO) return jcall_macro(r, f, a);
        if (f->kind == JF_BUILTIN) return f->fn(r, f->self, a);
        if (f->kind == JF_JOINER) {
            jargs_none(r, a, "joiner");
            if (!f->pos) {
                f->pos = 1;
                return jv_cstr("");
            }
            return f->state;
        }
    }
    if (callee.kind == JV_LOOP) return jcall_loop(r, callee, a);
    if (callee.kind == JV_UNDEFINED) jundef_fail(r, callee);
    jr_error(r, "'%s' object is not callable", jv_type_name(callee));
}

/* ---- statements ---- */

static int run_loop(jr *r, const jnode *n, jv iterable, jscope *outer, int depth0) {
    jv seq = jiterate(r, iterable);
    const jv *items = seq.u.list->v;
    uint32_t count = seq.u.list->n;
    r->scope = outer;
    if (n->e) {  /* for x in xs if test: the test sees x, the loop only what passed */
        jv kept = jv_list_new(r, count);
        jscope *s = jscope_new(r, outer);
        r->scope = s;
        for (uint32_t i = 0; i < count; i++) {
            jr_step(r, 1);
            assign(r, n->a, items[i]);
            if (jv_truthy(jeval(r, n->e))) jv_list_push(r, &kept, items[i]);
        }
        r->scope = outer;
        items = kept.u.list->v;
        count = kept.u.list->n;
    }
    if (count == 0) return n->d ? jexec(r, n->d) : JX_NORMAL;
    jloop *loop = jr_alloc(r, sizeof *loop);
    loop->items = items;
    loop->n = count;
    loop->changed_last = jv_absent();
    loop->node = n;
    loop->outer = outer;
    loop->depth0 = depth0;
    jv loopv = {0};
    loopv.kind = JV_LOOP;
    loopv.u.loop = loop;
    int sym_loop = r->t->sym_loop;
    /* each iteration starts with a scope of its own; without closures that could keep it,
     * one scope emptied every time serves them all */
    jscope *shared = n->op & JFOR_CLOSURES ? NULL : jscope_new(r, outer);
    for (uint32_t i = 0; i < count; i++) {
        jr_step(r, 1);
        jscope *s = shared ? shared : jscope_new(r, outer);
        s->n = 0;
        loop->i = i;
        if (sym_loop >= 0) jscope_set(r, s, sym_loop, loopv);
        r->scope = s;
        assign(r, n->a, items[i]);
        int status = jexec(r, n->c);
        r->scope = outer;
        if (status == JX_BREAK) break;
    }
    return JX_NORMAL;
}

static int exec_for(jr *r, const jnode *n) { return run_loop(r, n, jeval(r, n->b), r->scope, 0); }

jv jcall_loop(jr *r, jv loopv, const jargs *a) {
    const jloop *l = loopv.u.loop;
    if (!(l->node->op & JFOR_RECURSIVE)) jr_error(r, "Tried to call non recursive loop.  Maybe you forgot the 'recursive' modifier.");
    if (a->n != 1 || a->nkw) jr_error(r, "loop() takes exactly one argument");
    jr_enter(r);
    jbuf buf;
    jbuf_init(r, &buf, 256);
    jbuf *out = r->out;
    jscope *saved = r->scope;
    r->out = &buf;
    run_loop(r, l->node, a->pos[0], l->outer, l->depth0 + 1);
    r->out = out;
    r->scope = saved;
    jr_leave(r);
    return jbuf_value(&buf);
}

static void exec_call_block(jr *r, const jnode *n) {
    jfunc *caller = new_macro(r, n, "caller", 6);
    const jnode *call = n->a;
    jv callee = jeval(r, call->a);
    jargs a;
    jeval_args(r, call->args, &a, "caller", func_value(caller));
    jv_write_str(r, r->out, jcall(r, callee, &a));
}

int jexec(jr *r, const jnode *n) {
    jr_step(r, 1);
    r->line = n->line;
    switch (n->kind) {
    case JN_DATA: jbuf_put(r, r->out, n->value.u.s, n->value.len); return JX_NORMAL;
    case JN_OUTPUT: {
        jv v = jeval(r, n->a);
        r->line = n->line;
        if (v.kind == JV_STR) jbuf_put(r, r->out, v.u.s, v.len);
        else jv_write_str(r, r->out, v);
        return JX_NORMAL;
    }
    case JN_BREAK: return JX_BREAK;
    case JN_CONTINUE: return JX_CONTINUE;
    case JN_SET: assign(r, n->a, jeval(r, n->b)); return JX_NORMAL;
    case JN_MACRO: {
        jfunc *f = new_macro(r, n, n->name.p, (int)n->name.n);
        jscope_set(r, r->scope, n->sym, func_value(f));
        return JX_NORMAL;
    }
    default: break;
    }
    int status = JX_NORMAL;
    jr_enter(r);
    switch (n->kind) {
    case JN_BODY:
        for (int i = 0; i < n->n && status == JX_NORMAL; i++) status = jexec(r, n->kids[i]);
        break;
    case JN_IF:
        /* the elif chain is walked here, not recursed into */
        while (n && n->kind == JN_IF) {
            r->line = n->line;
            if (jv_truthy(jeval(r, n->a))) {
                status = jexec(r, n->b);
                n = NULL;
            } else n = n->c;
        }
        if (n) status = jexec(r, n);
        break;
    case JN_FOR: status = exec_for(r, n); break;
    case JN_SET_BLOCK: {
        jv v = capture(r, n->b, jscope_new(r, r->scope));
        assign(r, n->a, apply_filters(r, n->c, v));
        break;
    }
    case JN_FILTER_BLOCK: {
        /* jinja2 yields the filter's result as it is, and joining the output then refuses
         * anything but a string */
        jv v = apply_filters(r, n->a, capture(r, n->b, jscope_new(r, r->scope)));
        if (v.kind != JV_STR) jr_error(r, "sequence item: expected str instance, %s found", jv_type_name(v));
        jbuf_put(r, r->out, v.u.s, v.len);
        break;
    }
    case JN_CALL_BLOCK: exec_call_block(r, n); break;
    case JN_WITH: {
        jscope *s = jscope_new(r, r->scope), *outer = r->scope;
        for (int i = 0; i + 1 < n->n; i += 2) {
            jv v = jeval(r, n->kids[i + 1]);  /* values see the outer scope */
            r->scope = s;
            assign(r, n->kids[i], v);
            r->scope = outer;
        }
        r->scope = s;
        status = jexec(r, n->a);
        r->scope = outer;
        break;
    }
    case JN_GENERATION: {
        jscope *outer = r->scope;
        r->scope = jscope_new(r, outer);
        jexec(r, n->a);
        r->scope = outer;
        break;
    }
    default: jr_error(r, "internal error: statement kind %d", n->kind);
    }
    jr_leave(r);
    return status;
}
