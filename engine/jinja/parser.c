/* parser.c - tokens to the template tree: statements (for, if, set, macro, call, filter,
 * with, ...) as python-jinja2 parses them, and the check of filter and test names. The
 * expressions are parse_expr.c's. */
#include "engine/jinja/parser.h"

/* ---- statements ---- */

static jnode *subparse(P *c, const char *const *end_names);

static int is_any_kw(const jtok *t, const char *const *names) {
    for (; names && *names; names++)
        if (is_kw(t, *names)) return 1;
    return 0;
}

static __attribute__((noinline)) _Noreturn void fail_eof(P *c, const char *const *end_names) {
    char want[200] = "";
    for (const char *const *n = end_names; *n; n++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s'%s'", n == end_names ? "" : " or ", *n);
    jc_fail(c, cur(c)->line, "Unexpected end of template. Jinja was looking for the following tags: %s.", want);
}

/* the body of a statement: after its tag's %}, up to a tag starting with one of end_names
 * (left as the current token; drop_needle consumes it) */
static jnode *parse_statements(P *c, const char *const *end_names, int drop_needle) {
    skip_if(c, JT_COLON);
    expect(c, JT_BLOCK_END);
    jnode *body = subparse(c, end_names);
    if (cur(c)->kind == JT_EOF) fail_eof(c, end_names);
    if (drop_needle) next(c);
    return body;
}

/* an assignment target: a name, a tuple of names, or (with_namespace) name.attr */
static jnode *parse_assign_target(P *c, const char *extra_end, int with_namespace) {
    jtok *t = cur(c);
    if (with_namespace && t->kind == JT_NAME && peek(c)->kind == JT_DOT) {
        next(c);
        next(c);
        jtok *attr = expect(c, JT_NAME);
        jnode *n = mk(c, JN_NSREF, t->line);
        n->sym = sym_of(c, t->text.p, t->text.n);
        n->name.p = attr->text.p;
        n->name.n = attr->text.n;
        return done(c, n);
    }
    jnode *target = jparse_tuple(c, 1, 1, extra_end, 0);
    int ok = target->kind == JN_NAME;
    if (target->kind == JN_TUPLE) {
        ok = 1;
        for (int i = 0; i < target->n; i++) ok &= target->kids[i]->kind == JN_NAME;
    }
    if (!ok) jc_fail(c, target->line, "can't assign to '%s'", target->kind == JN_CONST ? "const" : "expression");
    return target;
}

static int uses_name(const jnode *n, int sym) {
    if (!n) return 0;
    if (n->kind == JN_NAME && n->sym == sym) return 1;
    const jnode *named[] = {n->a, n->b, n->c, n->d, n->e};
    for (int i = 0; i < 5; i++)
        if (uses_name(named[i], sym)) return 1;
    for (int i = 0; i < n->n; i++)
        if (uses_name(n->kids[i], sym)) return 1;
    if (n->args) {
        const jcallargs *a = n->args;
        for (int i = 0; i < a->n; i++)
            if (uses_name(a->pos[i], sym)) return 1;
        for (int i = 0; i < a->nkw; i++)
            if (uses_name(a->kwval[i], sym)) return 1;
        if (uses_name(a->star, sym) || uses_name(a->starstar, sym)) return 1;
    }
    if (n->sig)
        for (int i = 0; i < n->sig->n; i++)
            if (uses_name(n->sig->defaults[i], sym)) return 1;
    return 0;
}

/* does the subtree define a macro or a call block (a function keeping its scope)? */
static int makes_closures(const jnode *n) {
    if (!n) return 0;
    if (n->kind == JN_MACRO || n->kind == JN_CALL_BLOCK) return 1;
    const jnode *named[] = {n->a, n->b, n->c, n->d, n->e};
    for (int i = 0; i < 5; i++)
        if (makes_closures(named[i])) return 1;
    for (int i = 0; i < n->n; i++)
        if (makes_closures(n->kids[i])) return 1;
    return 0;
}

static jsig *parse_signature(P *c) {
    enum { MAX_PARAMS = 64 };
    jsig *s = jc_alloc(c, sizeof *s);
    memset(s, 0, sizeof *s);
    jstr *names = s->names = jc_alloc(c, sizeof(jstr) * MAX_PARAMS);
    jnode **defaults = s->defaults = jc_alloc(c, sizeof(jnode *) * MAX_PARAMS);
    s->syms = jc_alloc(c, sizeof(int) * MAX_PARAMS);
    int have_default = 0;
    expect(c, JT_LPAREN);
    while (cur(c)->kind != JT_RPAREN) {
        if (s->n) expect(c, JT_COMMA);
        if (s->n == MAX_PARAMS) jc_fail(c, cur(c)->line, "too many macro parameters");
        jtok *t = expect(c, JT_NAME);
        names[s->n].p = t->text.p;
        names[s->n].n = t->text.n;
        defaults[s->n] = NULL;
        if (skip_if(c, JT_ASSIGN)) {
            defaults[s->n] = jparse_expression(c, 1);
            have_default = 1;
        } else if (have_default) jc_fail(c, t->line, "non-default argument follows default argument");
        s->n++;
    }
    expect(c, JT_RPAREN);
    for (int i = 0; i < s->n; i++) s->syms[i] = sym_of(c, names[i].p, names[i].n);
    return s;
}

static int sig_has(const jsig *s, const char *name) {
    for (int i = 0; i < s->n; i++)
        if (s->names[i].n == strlen(name) && memcmp(s->names[i].p, name, s->names[i].n) == 0) return 1;
    return 0;
}

/* which of caller/varargs/kwargs the body refers to (jinja2's find_undeclared) */
static void sig_uses(P *c, jsig *s, const jnode *body) {
    s->uses_caller = !sig_has(s, "caller") && uses_name(body, sym_of(c, "caller", 6));
    s->uses_varargs = !sig_has(s, "varargs") && uses_name(body, sym_of(c, "varargs", 7));
    s->uses_kwargs = !sig_has(s, "kwargs") && uses_name(body, sym_of(c, "kwargs", 6));
}

/* a body parsed as its own function (macro, caller): no enclosing loop, no soft frame */
static jnode *parse_function_body(P *c, const char *const *end_names) {
    int loops = c->loops;
    c->loops = 0;
    jnode *body = parse_statements(c, end_names, 1);
    c->loops = loops;
    return body;
}

static jnode *parse_for(P *c) {
    static const char *const end_body[] = {"endfor", "else", NULL}, *const end_else[] = {"endfor", NULL};
    int line = next(c)->line;
    jnode *n = mk(c, JN_FOR, line);
    n->a = parse_assign_target(c, "in", 0);
    expect_kw(c, "in");
    n->b = jparse_tuple(c, 0, 0, "recursive", 0);
    if (skip_kw(c, "if")) n->e = jparse_expression(c, 1);
    if (skip_kw(c, "recursive")) n->op |= JFOR_RECURSIVE;
    c->loops++;
    n->c = parse_statements(c, end_body, 0);
    c->loops--;
    if (makes_closures(n->c)) n->op |= JFOR_CLOSURES;
    if (is_kw(next(c), "else")) n->d = parse_statements(c, end_else, 1);
    return done(c, n);
}

static jnode *parse_if(P *c) {
    static const char *const end_body[] = {"elif", "else", "endif", NULL}, *const end_else[] = {"endif", NULL};
    jnode *result = mk(c, JN_IF, next(c)->line), *node = result;
    nvec chain = {0};
    for (;;) {
        node->a = jparse_tuple(c, 0, 0, NULL, 0);
        node->b = parse_statements(c, end_body, 0);
        push(c, &chain, node);
        jtok *t = next(c);
        if (is_kw(t, "elif")) {
            jnode *elif = mk(c, JN_IF, t->line);
            node->c = elif;
            node = elif;
            continue;
        }
        if (is_kw(t, "else")) node->c = parse_statements(c, end_else, 1);
        break;
    }
    while (chain.n > 0) done(c, chain.v[--chain.n]);  /* heights from the innermost elif out */
    return result;
}

static jnode *parse_set(P *c) {
    static const char *const end[] = {"endset", NULL};
    int line = next(c)->line;
    jnode *target = parse_assign_target(c, NULL, 1);
    if (skip_if(c, JT_ASSIGN)) {
        jnode *n = mk2(c, JN_SET, 0, line, target, jparse_tuple(c, 0, 1, NULL, 0));
        return n;
    }
    jnode *n = mk(c, JN_SET_BLOCK, line);
    n->a = target;
    n->c = jparse_filter(c, NULL, 0);
    n->b = parse_statements(c, end, 1);
    return done(c, n);
}

static jnode *parse_macro(P *c) {
    static const char *const end[] = {"endmacro", NULL};
    int line = next(c)->line;
    jtok *name = expect(c, JT_NAME);
    jnode *n = mk(c, JN_MACRO, line);
    n->name.p = name->text.p;
    n->name.n = name->text.n;
    n->sym = sym_of(c, name->text.p, name->text.n);
    n->sig = parse_signature(c);
    n->a = parse_function_body(c, end);
    sig_uses(c, n->sig, n->a);
    return done(c, n);
}

static jnode *parse_call_block(P *c) {
    static const char *const end[] = {"endcall", NULL};
    int line = next(c)->line;
    jnode *n = mk(c, JN_CALL_BLOCK, line);
    if (cur(c)->kind == JT_LPAREN) n->sig = parse_signature(c);
    else {
        n->sig = jc_alloc(c, sizeof(jsig));
        memset(n->sig, 0, sizeof(jsig));
    }
    n->a = jparse_expression(c, 1);
    if (n->a->kind != JN_CALL) jc_fail(c, line, "expected call");
    n->b = parse_function_body(c, end);
    sig_uses(c, n->sig, n->b);
    n->name.p = "caller";
    n->name.n = 6;
    return done(c, n);
}

static jnode *parse_filter_block(P *c) {
    static const char *const end[] = {"endfilter", NULL};
    int line = next(c)->line;
    jnode *n = mk(c, JN_FILTER_BLOCK, line);
    n->a = jparse_filter(c, NULL, 1);
    n->b = parse_statements(c, end, 1);
    return done(c, n);
}

static jnode *parse_with(P *c) {
    static const char *const end[] = {"endwith", NULL};
    int line = next(c)->line;
    jnode *n = mk(c, JN_WITH, line);
    nvec pairs = {0};
    while (cur(c)->kind != JT_BLOCK_END) {
        if (pairs.n) expect(c, JT_COMMA);
        push(c, &pairs, parse_assign_target(c, NULL, 0));
        expect(c, JT_ASSIGN);
        push(c, &pairs, jparse_expression(c, 1));
    }
    set_kids(n, &pairs);
    n->a = parse_statements(c, end, 1);
    return done(c, n);
}

static jnode *parse_print(P *c) {
    int line = next(c)->line;
    nvec items = {0};
    while (cur(c)->kind != JT_BLOCK_END) {
        if (items.n) expect(c, JT_COMMA);
        push(c, &items, jparse_expression(c, 1));
    }
    jnode *n = mk(c, JN_BODY, line);
    for (int i = 0; i < items.n; i++) items.v[i] = mk1(c, JN_OUTPUT, line, items.v[i]);
    set_kids(n, &items);
    return done(c, n);
}

static jnode *parse_statement(P *c) {
    static const char *const end_generation[] = {"endgeneration", NULL};
    jtok *t = cur(c);
    if (t->kind != JT_NAME) jc_fail(c, t->line, "tag name expected");
    enter(c, t->line);
    jnode *n;
    if (is_kw(t, "for")) n = parse_for(c);
    else if (is_kw(t, "if")) n = parse_if(c);
    else if (is_kw(t, "set")) n = parse_set(c);
    else if (is_kw(t, "macro")) n = parse_macro(c);
    else if (is_kw(t, "call")) n = parse_call_block(c);
    else if (is_kw(t, "filter")) n = parse_filter_block(c);
    else if (is_kw(t, "with")) n = parse_with(c);
    else if (is_kw(t, "print")) n = parse_print(c);
    else if (is_kw(t, "generation")) {
        next(c);
        n = mk1(c, JN_GENERATION, t->line, parse_function_body(c, end_generation));
    } else if (is_kw(t, "break") || is_kw(t, "continue")) {
        next(c);
        if (!c->loops) jc_fail(c, t->line, "'%.*s' outside loop", (int)t->text.n, t->text.p);
        n = done(c, mk(c, is_kw(t, "break") ? JN_BREAK : JN_CONTINUE, t->line));
    } else if (is_kw(t, "block") || is_kw(t, "extends") || is_kw(t, "include") || is_kw(t, "import") ||
               is_kw(t, "from") || is_kw(t, "autoescape")) {
        jc_fail(c, t->line, "the '%.*s' statement is not supported in chat templates", (int)t->text.n, t->text.p);
    } else {
        char d[80];
        describe(t, d, sizeof d);
        jc_fail(c, t->line, "Encountered unknown tag '%s'.", d);
    }
    c->depth--;
    return n;
}

static jnode *subparse(P *c, const char *const *end_names) {
    jnode *body = mk(c, JN_BODY, cur(c)->line);
    nvec items = {0};
    for (;;) {
        jtok *t = cur(c);
        if (t->kind == JT_EOF) break;
        if (t->kind == JT_DATA) {
            next(c);
            jnode *d = mk(c, JN_DATA, t->line);
            d->value = str_const(t->text.p, t->text.n);
            push(c, &items, done(c, d));
        } else if (t->kind == JT_VAR_BEGIN) {
            next(c);
            push(c, &items, mk1(c, JN_OUTPUT, t->line, jparse_tuple(c, 0, 1, NULL, 0)));
            expect(c, JT_VAR_END);
        } else if (t->kind == JT_BLOCK_BEGIN) {
            next(c);
            if (is_any_kw(cur(c), end_names)) break;
            push(c, &items, parse_statement(c));
            expect(c, JT_BLOCK_END);
        } else fail_unexpected(c, t);
    }
    set_kids(body, &items);
    return done(c, body);
}

/* ---- names of filters and tests ----
 * jinja2 looks filters and tests up when it compiles the template, except inside if
 * statements and conditional expressions, where an unknown one fails only when it runs
 * (a template may guard a filter some environments lack). Function bodies (macros,
 * loops, blocks) are compiled as their own frames, outside the if. */
static void check_names(P *c, jnode *n, int soft) {
    if (!n) return;
    switch (n->kind) {
    case JN_IF: check_names(c, n->a, 1); check_names(c, n->b, 1); check_names(c, n->c, 1); return;
    case JN_CONDEXPR: soft = 1; break;
    case JN_FOR:
        check_names(c, n->b, soft);
        check_names(c, n->d, soft);
        check_names(c, n->c, 0);
        check_names(c, n->e, 0);
        return;
    case JN_MACRO: case JN_GENERATION: case JN_FILTER_BLOCK: case JN_SET_BLOCK: soft = 0; break;
    case JN_CALL_BLOCK: check_names(c, n->a, soft); check_names(c, n->b, 0); return;
    case JN_FILTER:
    case JN_TEST: {
        int filter = n->kind == JN_FILTER;
        n->soft = (uint8_t)soft;
        if (n->builtin < 0 && !soft) {
            if (filter && jfilter_unsupported(n->name.p, n->name.n))
                jc_fail(c, n->line, "the filter '%.*s' is not supported", (int)n->name.n, n->name.p);
            jc_fail(c, n->line, "No %s named '%.*s'.", filter ? "filter" : "test", (int)n->name.n, n->name.p);
        }
        break;
    }
    default: break;
    }
    jnode *named[] = {n->a, n->b, n->c, n->d, n->e};
    for (int i = 0; i < 5; i++) check_names(c, named[i], soft);
    for (int i = 0; i < n->n; i++) check_names(c, n->kids[i], soft);
    if (n->args) {
        jcallargs *a = n->args;
        for (int i = 0; i < a->n; i++) check_names(c, a->pos[i], soft);
        for (int i = 0; i < a->nkw; i++) check_names(c, a->kwval[i], soft);
        check_names(c, a->star, soft);
        check_names(c, a->starstar, soft);
    }
    if (n->sig)
        for (int i = 0; i < n->sig->n; i++) check_names(c, n->sig->defaults[i], soft);
}

jnode *jparse(jcompile *c) {
    jnode *body = subparse(c, NULL);
    if (cur(c)->kind != JT_EOF) fail_unexpected(c, cur(c));
    check_names(c, body, 0);
    return body;
}
