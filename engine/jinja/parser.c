/* parser.c - tokens to the template tree, following python-jinja2's grammar
 * (jinja2/parser.py: the same precedence climbing, tuples, tests, filters and statements). */
#include <stdio.h>
#include <string.h>

#include "engine/jinja/eval.h"
#include "engine/jinja/lexer.h"

typedef jcompile P;

/* ---- tokens ---- */

static jtok *cur(P *c) { return &c->toks[c->pos]; }
static jtok *peek(P *c) { return c->pos + 1 < c->ntoks ? &c->toks[c->pos + 1] : &c->toks[c->ntoks - 1]; }
static jtok *next(P *c) {
    jtok *t = cur(c);
    if (t->kind != JT_EOF) c->pos++;
    return t;
}
static int is_kw(const jtok *t, const char *kw) {
    return t->kind == JT_NAME && t->text.n == strlen(kw) && memcmp(t->text.p, kw, t->text.n) == 0;
}
static int skip_kw(P *c, const char *kw) {
    if (!is_kw(cur(c), kw)) return 0;
    next(c);
    return 1;
}
static int skip_if(P *c, int kind) {
    if (cur(c)->kind != kind) return 0;
    next(c);
    return 1;
}

static const char *kind_text(int kind) {
    static const char *const names[] = {
        [JT_EOF] = "end of template", [JT_DATA] = "template data", [JT_VAR_BEGIN] = "begin of print statement",
        [JT_VAR_END] = "end of print statement", [JT_BLOCK_BEGIN] = "begin of statement block",
        [JT_BLOCK_END] = "end of statement block", [JT_NAME] = "name", [JT_STRING] = "string",
        [JT_INT] = "integer", [JT_FLOAT] = "float", [JT_ADD] = "+", [JT_SUB] = "-", [JT_MUL] = "*",
        [JT_DIV] = "/", [JT_FLOORDIV] = "//", [JT_MOD] = "%", [JT_POW] = "**", [JT_TILDE] = "~",
        [JT_LBRACKET] = "[", [JT_RBRACKET] = "]", [JT_LPAREN] = "(", [JT_RPAREN] = ")", [JT_LBRACE] = "{",
        [JT_RBRACE] = "}", [JT_EQ] = "==", [JT_NE] = "!=", [JT_GT] = ">", [JT_GTEQ] = ">=", [JT_LT] = "<",
        [JT_LTEQ] = "<=", [JT_ASSIGN] = "=", [JT_DOT] = ".", [JT_COLON] = ":", [JT_PIPE] = "|",
        [JT_COMMA] = ",", [JT_SEMICOLON] = ";",
    };
    return kind >= 0 && kind <= JT_SEMICOLON && names[kind] ? names[kind] : "token";
}

/* a token as jinja2's describe_token writes it: a name by its text */
static void describe(const jtok *t, char *buf, size_t n) {
    if (t->kind == JT_NAME) snprintf(buf, n, "%.*s", (int)(t->text.n > 60 ? 60 : t->text.n), t->text.p);
    else snprintf(buf, n, "%s", kind_text(t->kind));
}

static _Noreturn void fail_unexpected(P *c, const jtok *t) {
    char d[80];
    describe(t, d, sizeof d);
    jc_fail(c, t->line, "unexpected '%s'", d);
}

static jtok *expect(P *c, int kind) {
    jtok *t = cur(c);
    if (t->kind != kind) {
        char d[80];
        describe(t, d, sizeof d);
        if (t->kind == JT_EOF) jc_fail(c, t->line, "unexpected end of template, expected '%s'.", kind_text(kind));
        jc_fail(c, t->line, "expected token '%s', got '%s'", kind_text(kind), d);
    }
    return next(c);
}

static void expect_kw(P *c, const char *kw) {
    if (!skip_kw(c, kw)) {
        char d[80];
        describe(cur(c), d, sizeof d);
        jc_fail(c, cur(c)->line, "expected token 'name:%s', got '%s'", kw, d);
    }
}

/* ---- nodes ---- */

typedef struct {
    jnode **v;
    int n, cap;
} nvec;

static void push(P *c, nvec *v, jnode *x) {
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 4;
        jnode **nv = jc_alloc(c, (size_t)cap * sizeof *nv);
        if (v->n) memcpy(nv, v->v, (size_t)v->n * sizeof *nv);
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = x;
}

static jnode *mk(P *c, int kind, int line) {
    jnode *n = jc_alloc(c, sizeof *n);
    memset(n, 0, sizeof *n);
    n->kind = (uint8_t)kind;
    n->line = line;
    n->sym = -1;
    n->builtin = -1;
    return n;
}

static int height(const jnode *n) { return n ? n->depth : 0; }

/* sets n's height from its children's, which are complete; fails past the limit */
static jnode *done(P *c, jnode *n) {
    int h = 0;
    const jnode *named[] = {n->a, n->b, n->c, n->d, n->e};
    for (int i = 0; i < 5; i++) h = height(named[i]) > h ? height(named[i]) : h;
    for (int i = 0; i < n->n; i++) h = height(n->kids[i]) > h ? height(n->kids[i]) : h;
    if (n->args) {
        const jcallargs *a = n->args;
        for (int i = 0; i < a->n; i++) h = height(a->pos[i]) > h ? height(a->pos[i]) : h;
        for (int i = 0; i < a->nkw; i++) h = height(a->kwval[i]) > h ? height(a->kwval[i]) : h;
        h = height(a->star) > h ? height(a->star) : h;
        h = height(a->starstar) > h ? height(a->starstar) : h;
    }
    if (n->sig)
        for (int i = 0; i < n->sig->n; i++) h = height(n->sig->defaults[i]) > h ? height(n->sig->defaults[i]) : h;
    if (h + 1 > JINJA_MAX_TREE_DEPTH) jc_fail(c, n->line, "template nested too deeply (more than %d levels)", JINJA_MAX_TREE_DEPTH);
    n->depth = (uint16_t)(h + 1);
    return n;
}

static void set_kids(jnode *n, nvec *v) {
    n->kids = v->v;
    n->n = v->n;
}

static jnode *mk1(P *c, int kind, int line, jnode *a) {
    jnode *n = mk(c, kind, line);
    n->a = a;
    return done(c, n);
}

static jnode *mk2(P *c, int kind, int op, int line, jnode *a, jnode *b) {
    jnode *n = mk(c, kind, line);
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    return done(c, n);
}

static int sym_of(P *c, const char *p, uint32_t n) {
    for (int i = 0; i < c->nsyms; i++)
        if (c->syms[i].n == n && memcmp(c->syms[i].p, p, n) == 0) return i;
    if (c->nsyms == c->capsyms) {
        int cap = c->capsyms ? c->capsyms * 2 : 32;
        jstr *s = jc_alloc(c, (size_t)cap * sizeof *s);
        if (c->nsyms) memcpy(s, c->syms, (size_t)c->nsyms * sizeof *s);
        c->syms = s;
        c->capsyms = cap;
    }
    c->syms[c->nsyms].p = p;
    c->syms[c->nsyms].n = n;
    return c->nsyms++;
}

static jnode *const_node(P *c, int line, jv v) {
    jnode *n = mk(c, JN_CONST, line);
    n->value = v;
    return done(c, n);
}

static jv str_const(const char *p, uint32_t n) {
    jv v = {0};
    v.kind = JV_STR;
    v.u.s = p;
    v.len = n;
    return v;
}

/* nesting guard for the recursive descent itself */
static void enter(P *c, int line) {
    if (++c->depth > JINJA_MAX_TREE_DEPTH) jc_fail(c, line, "template nested too deeply (more than %d levels)", JINJA_MAX_TREE_DEPTH);
}

/* ---- expressions ---- */

static jnode *parse_expression(P *c, int with_condexpr);
static jnode *parse_tuple(P *c, int simplified, int with_condexpr, const char *extra_end, int explicit_parens);
static jnode *parse_unary(P *c, int with_filter);
static jnode *parse_primary(P *c);
static jnode *parse_postfix(P *c, jnode *node);
static jnode *parse_filter(P *c, jnode *node, int start_inline);

static jnode *parse_condexpr(P *c) {
    int line = cur(c)->line;
    enter(c, line);
    jnode *expr1 = parse_expression(c, 0);
    while (skip_kw(c, "if")) {
        jnode *expr2 = parse_expression(c, 0), *expr3 = NULL;
        if (skip_kw(c, "else")) expr3 = parse_condexpr(c);
        jnode *n = mk(c, JN_CONDEXPR, line);
        n->a = expr2;
        n->b = expr1;
        n->c = expr3;
        expr1 = done(c, n);
        line = cur(c)->line;
    }
    c->depth--;
    return expr1;
}

static jnode *parse_not(P *c);
static jnode *parse_and(P *c) {
    int line = cur(c)->line;
    jnode *left = parse_not(c);
    while (skip_kw(c, "and")) {
        left = mk2(c, JN_AND, 0, line, left, parse_not(c));
        line = cur(c)->line;
    }
    return left;
}

static jnode *parse_or(P *c) {
    int line = cur(c)->line;
    jnode *left = parse_and(c);
    while (skip_kw(c, "or")) {
        left = mk2(c, JN_OR, 0, line, left, parse_and(c));
        line = cur(c)->line;
    }
    return left;
}

static jnode *parse_math1(P *c);
static jnode *parse_compare(P *c) {
    int line = cur(c)->line;
    jnode *expr = parse_math1(c);
    nvec operands = {0};
    uint8_t ops[64];
    for (;;) {
        int k = cur(c)->kind, op;
        if (k == JT_EQ) op = JOP_EQ;
        else if (k == JT_NE) op = JOP_NE;
        else if (k == JT_LT) op = JOP_LT;
        else if (k == JT_LTEQ) op = JOP_LTEQ;
        else if (k == JT_GT) op = JOP_GT;
        else if (k == JT_GTEQ) op = JOP_GTEQ;
        else if (is_kw(cur(c), "in")) op = JOP_IN;
        else if (is_kw(cur(c), "not") && is_kw(peek(c), "in")) {
            next(c);
            op = JOP_NOTIN;
        } else break;
        next(c);
        if (operands.n == (int)sizeof ops) jc_fail(c, line, "too many chained comparisons");
        ops[operands.n] = (uint8_t)op;
        push(c, &operands, parse_math1(c));
        line = cur(c)->line;
    }
    if (!operands.n) return expr;
    jnode *n = mk(c, JN_COMPARE, line);
    n->a = expr;
    set_kids(n, &operands);
    n->ops = jc_alloc(c, (size_t)operands.n);
    memcpy(n->ops, ops, (size_t)operands.n);
    return done(c, n);
}

static jnode *parse_not(P *c) {
    if (is_kw(cur(c), "not")) {
        int line = next(c)->line;
        enter(c, line);
        jnode *n = mk1(c, JN_UNARY, line, parse_not(c));
        n->op = JOP_NOT;
        c->depth--;
        return n;
    }
    return parse_compare(c);
}

static jnode *parse_math2(P *c);
static jnode *parse_concat(P *c) {
    int line = cur(c)->line;
    nvec args = {0};
    push(c, &args, parse_math2(c));
    while (skip_if(c, JT_TILDE)) push(c, &args, parse_math2(c));
    if (args.n == 1) return args.v[0];
    jnode *n = mk(c, JN_CONCAT, line);
    set_kids(n, &args);
    return done(c, n);
}

static jnode *parse_math1(P *c) {
    int line = cur(c)->line;
    jnode *left = parse_concat(c);
    while (cur(c)->kind == JT_ADD || cur(c)->kind == JT_SUB) {
        int op = next(c)->kind == JT_ADD ? JOP_ADD : JOP_SUB;
        left = mk2(c, JN_BINOP, op, line, left, parse_concat(c));
        line = cur(c)->line;
    }
    return left;
}

static jnode *parse_pow(P *c) {
    int line = cur(c)->line;
    jnode *left = parse_unary(c, 1);
    while (skip_if(c, JT_POW)) {
        left = mk2(c, JN_BINOP, JOP_POW, line, left, parse_unary(c, 1));
        line = cur(c)->line;
    }
    return left;
}

static jnode *parse_math2(P *c) {
    int line = cur(c)->line;
    jnode *left = parse_pow(c);
    for (;;) {
        int k = cur(c)->kind, op;
        if (k == JT_MUL) op = JOP_MUL;
        else if (k == JT_DIV) op = JOP_DIV;
        else if (k == JT_FLOORDIV) op = JOP_FLOORDIV;
        else if (k == JT_MOD) op = JOP_MOD;
        else break;
        next(c);
        left = mk2(c, JN_BINOP, op, line, left, parse_pow(c));
        line = cur(c)->line;
    }
    return left;
}

static jcallargs *parse_call_args(P *c) {
    jtok *open = expect(c, JT_LPAREN);
    jcallargs *a = jc_alloc(c, sizeof *a);
    memset(a, 0, sizeof *a);
    nvec pos = {0}, kwval = {0};
    jstr kwname[64];
    int require_comma = 0;
    while (cur(c)->kind != JT_RPAREN) {
        if (require_comma) {
            expect(c, JT_COMMA);
            if (cur(c)->kind == JT_RPAREN) break;  /* trailing comma */
        }
        if (cur(c)->kind == JT_MUL) {
            if (a->star || a->starstar) jc_fail(c, open->line, "invalid syntax for function call expression");
            next(c);
            a->star = parse_expression(c, 1);
        } else if (cur(c)->kind == JT_POW) {
            if (a->starstar) jc_fail(c, open->line, "invalid syntax for function call expression");
            next(c);
            a->starstar = parse_expression(c, 1);
        } else if (cur(c)->kind == JT_NAME && peek(c)->kind == JT_ASSIGN) {
            if (a->starstar) jc_fail(c, open->line, "invalid syntax for function call expression");
            if (kwval.n == 64) jc_fail(c, open->line, "too many keyword arguments");
            jtok *name = next(c);
            next(c);
            kwname[kwval.n].p = name->text.p;
            kwname[kwval.n].n = name->text.n;
            push(c, &kwval, parse_expression(c, 1));
        } else {
            if (a->star || a->starstar || kwval.n) jc_fail(c, open->line, "invalid syntax for function call expression");
            push(c, &pos, parse_expression(c, 1));
        }
        require_comma = 1;
    }
    expect(c, JT_RPAREN);
    a->n = pos.n;
    a->pos = pos.v;
    a->nkw = kwval.n;
    a->kwval = kwval.v;
    a->kwname = jc_alloc(c, sizeof(jstr) * (size_t)(kwval.n ? kwval.n : 1));
    memcpy(a->kwname, kwname, sizeof(jstr) * (size_t)kwval.n);
    return a;
}

static jnode *parse_call(P *c, jnode *callee) {
    int line = cur(c)->line;
    jnode *n = mk(c, JN_CALL, line);
    n->a = callee;
    n->args = parse_call_args(c);
    return done(c, n);
}

/* a dotted name after | or is: name(.name)* */
static jstr dotted_name(P *c) {
    jtok *t = expect(c, JT_NAME);
    jstr s = {t->text.p, t->text.n};
    while (cur(c)->kind == JT_DOT) {
        next(c);
        jtok *more = expect(c, JT_NAME);
        char *buf = jc_alloc(c, s.n + 1 + more->text.n);
        memcpy(buf, s.p, s.n);
        buf[s.n] = '.';
        memcpy(buf + s.n + 1, more->text.p, more->text.n);
        s.p = buf;
        s.n += 1 + more->text.n;
    }
    return s;
}

static jnode *parse_filter(P *c, jnode *node, int start_inline) {
    while (cur(c)->kind == JT_PIPE || start_inline) {
        if (!start_inline) next(c);
        int line = cur(c)->line;
        jnode *f = mk(c, JN_FILTER, line);
        f->a = node;
        f->name = dotted_name(c);
        f->builtin = jfilter_find(f->name.p, f->name.n);
        if (cur(c)->kind == JT_LPAREN) f->args = parse_call_args(c);
        node = done(c, f);
        start_inline = 0;
    }
    return node;
}

static jnode *parse_test(P *c, jnode *node) {
    int line = next(c)->line;  /* is */
    int negated = skip_kw(c, "not");
    jnode *t = mk(c, JN_TEST, line);
    t->a = node;
    t->name = dotted_name(c);
    t->builtin = jtest_find(t->name.p, t->name.n);
    int k = cur(c)->kind;
    if (k == JT_LPAREN) t->args = parse_call_args(c);
    else if ((k == JT_NAME || k == JT_STRING || k == JT_INT || k == JT_FLOAT || k == JT_LPAREN || k == JT_LBRACKET ||
              k == JT_LBRACE) && !is_kw(cur(c), "else") && !is_kw(cur(c), "or") && !is_kw(cur(c), "and")) {
        if (is_kw(cur(c), "is")) jc_fail(c, cur(c)->line, "You cannot chain multiple tests with is");
        jcallargs *a = jc_alloc(c, sizeof *a);
        memset(a, 0, sizeof *a);
        a->n = 1;
        a->pos = jc_alloc(c, sizeof(jnode *));
        a->pos[0] = parse_postfix(c, parse_primary(c));
        t->args = a;
    }
    node = done(c, t);
    if (negated) {
        node = mk1(c, JN_UNARY, line, node);
        node->op = JOP_NOT;
    }
    return node;
}

static jnode *parse_filter_expr(P *c, jnode *node) {
    for (;;) {
        if (cur(c)->kind == JT_PIPE) node = parse_filter(c, node, 0);
        else if (is_kw(cur(c), "is")) node = parse_test(c, node);
        else if (cur(c)->kind == JT_LPAREN) node = parse_call(c, node);
        else return node;
    }
}

/* one subscript inside []: an expression or a slice */
static jnode *parse_subscribed(P *c) {
    int line = cur(c)->line;
    jnode *parts[3] = {NULL, NULL, NULL};
    if (cur(c)->kind == JT_COLON) next(c);
    else {
        jnode *node = parse_expression(c, 1);
        if (cur(c)->kind != JT_COLON) return node;
        next(c);
        parts[0] = node;
    }
    if (cur(c)->kind != JT_COLON && cur(c)->kind != JT_RBRACKET && cur(c)->kind != JT_COMMA)
        parts[1] = parse_expression(c, 1);
    if (cur(c)->kind == JT_COLON) {
        next(c);
        if (cur(c)->kind != JT_RBRACKET && cur(c)->kind != JT_COMMA) parts[2] = parse_expression(c, 1);
    }
    jnode *n = mk(c, JN_SLICE, line);
    n->a = parts[0];
    n->b = parts[1];
    n->c = parts[2];
    return done(c, n);
}

static jnode *parse_subscript(P *c, jnode *node) {
    jtok *t = next(c);
    if (t->kind == JT_DOT) {
        jtok *attr = next(c);
        if (attr->kind == JT_NAME) {
            jnode *n = mk(c, JN_GETATTR, t->line);
            n->a = node;
            n->name.p = attr->text.p;
            n->name.n = attr->text.n;
            return done(c, n);
        }
        if (attr->kind != JT_INT) jc_fail(c, attr->line, "expected name or number");
        return mk2(c, JN_GETITEM, 0, t->line, node, const_node(c, attr->line, jv_int(attr->ival)));
    }
    nvec args = {0};
    while (cur(c)->kind != JT_RBRACKET) {
        if (args.n) expect(c, JT_COMMA);
        push(c, &args, parse_subscribed(c));
    }
    expect(c, JT_RBRACKET);
    if (args.n == 1) return mk2(c, JN_GETITEM, 0, t->line, node, args.v[0]);
    jnode *tuple = mk(c, JN_TUPLE, t->line);
    set_kids(tuple, &args);
    return mk2(c, JN_GETITEM, 0, t->line, node, done(c, tuple));
}

static jnode *parse_postfix(P *c, jnode *node) {
    for (;;) {
        int k = cur(c)->kind;
        if (k == JT_DOT || k == JT_LBRACKET) node = parse_subscript(c, node);
        else if (k == JT_LPAREN) node = parse_call(c, node);
        else return node;
    }
}

static jnode *parse_unary(P *c, int with_filter) {
    jtok *t = cur(c);
    jnode *node;
    enter(c, t->line);
    if (t->kind == JT_SUB || t->kind == JT_ADD) {
        next(c);
        node = mk1(c, JN_UNARY, t->line, parse_unary(c, 0));
        node->op = t->kind == JT_SUB ? JOP_NEG : JOP_POS;
    } else node = parse_primary(c);
    node = parse_postfix(c, node);
    if (with_filter) node = parse_filter_expr(c, node);
    c->depth--;
    return node;
}

static jnode *parse_list(P *c) {
    int line = expect(c, JT_LBRACKET)->line;
    nvec items = {0};
    while (cur(c)->kind != JT_RBRACKET) {
        if (items.n) expect(c, JT_COMMA);
        if (cur(c)->kind == JT_RBRACKET) break;
        push(c, &items, parse_expression(c, 1));
    }
    expect(c, JT_RBRACKET);
    jnode *n = mk(c, JN_LIST, line);
    set_kids(n, &items);
    return done(c, n);
}

static jnode *parse_dict(P *c) {
    int line = expect(c, JT_LBRACE)->line;
    nvec items = {0};
    while (cur(c)->kind != JT_RBRACE) {
        if (items.n) expect(c, JT_COMMA);
        if (cur(c)->kind == JT_RBRACE) break;
        push(c, &items, parse_expression(c, 1));
        expect(c, JT_COLON);
        push(c, &items, parse_expression(c, 1));
    }
    expect(c, JT_RBRACE);
    jnode *n = mk(c, JN_DICT, line);
    set_kids(n, &items);
    return done(c, n);
}

static jnode *parse_primary(P *c) {
    jtok *t = cur(c);
    switch (t->kind) {
    case JT_NAME: {
        next(c);
        if (is_kw(t, "true") || is_kw(t, "True")) return const_node(c, t->line, jv_bool(1));
        if (is_kw(t, "false") || is_kw(t, "False")) return const_node(c, t->line, jv_bool(0));
        if (is_kw(t, "none") || is_kw(t, "None")) return const_node(c, t->line, jv_none());
        jnode *n = mk(c, JN_NAME, t->line);
        n->name.p = t->text.p;
        n->name.n = t->text.n;
        n->sym = sym_of(c, t->text.p, t->text.n);
        return done(c, n);
    }
    case JT_STRING: {
        next(c);
        if (cur(c)->kind != JT_STRING) return const_node(c, t->line, str_const(t->text.p, t->text.n));
        size_t total = t->text.n;  /* adjacent literals join: "a" "b" is "ab" */
        int first = c->pos - 1, last = c->pos;
        while (c->toks[last].kind == JT_STRING) total += c->toks[last++].text.n;
        char *buf = jc_alloc(c, total + 1), *o = buf;
        for (int i = first; i < last; i++) {
            memcpy(o, c->toks[i].text.p, c->toks[i].text.n);
            o += c->toks[i].text.n;
        }
        c->pos = last;
        if (total > UINT32_MAX / 2) jc_fail(c, t->line, "string literal too long");
        return const_node(c, t->line, str_const(buf, (uint32_t)total));
    }
    case JT_INT: next(c); return const_node(c, t->line, jv_int(t->ival));
    case JT_FLOAT: next(c); return const_node(c, t->line, jv_float(t->fval));
    case JT_LPAREN: {
        next(c);
        jnode *n = parse_tuple(c, 0, 1, NULL, 1);
        expect(c, JT_RPAREN);
        return n;
    }
    case JT_LBRACKET: return parse_list(c);
    case JT_LBRACE: return parse_dict(c);
    default: fail_unexpected(c, t);
    }
}

static int is_tuple_end(P *c, const char *extra_end) {
    int k = cur(c)->kind;
    if (k == JT_VAR_END || k == JT_BLOCK_END || k == JT_RPAREN) return 1;
    return extra_end && is_kw(cur(c), extra_end);
}

static jnode *parse_tuple(P *c, int simplified, int with_condexpr, const char *extra_end, int explicit_parens) {
    int line = cur(c)->line, is_tuple = 0;
    nvec args = {0};
    for (;;) {
        if (args.n) expect(c, JT_COMMA);
        if (is_tuple_end(c, extra_end)) break;
        push(c, &args, simplified ? parse_primary(c) : parse_expression(c, with_condexpr));
        if (cur(c)->kind == JT_COMMA) is_tuple = 1;
        else break;
        line = cur(c)->line;
    }
    if (!is_tuple) {
        if (args.n) return args.v[0];
        if (!explicit_parens) {
            char d[80];
            describe(cur(c), d, sizeof d);
            jc_fail(c, cur(c)->line, "Expected an expression, got '%s'", d);
        }
    }
    jnode *n = mk(c, JN_TUPLE, line);
    set_kids(n, &args);
    return done(c, n);
}

static jnode *parse_expression(P *c, int with_condexpr) {
    return with_condexpr ? parse_condexpr(c) : parse_or(c);
}

/* ---- statements ---- */

static jnode *subparse(P *c, const char *const *end_names);

static int is_any_kw(const jtok *t, const char *const *names) {
    for (; names && *names; names++)
        if (is_kw(t, *names)) return 1;
    return 0;
}

/* the body of a statement: after its tag's %}, up to a tag starting with one of end_names
 * (left as the current token; drop_needle consumes it) */
static jnode *parse_statements(P *c, const char *const *end_names, int drop_needle) {
    skip_if(c, JT_COLON);
    expect(c, JT_BLOCK_END);
    jnode *body = subparse(c, end_names);
    if (cur(c)->kind == JT_EOF) {
        char want[200] = "";
        for (const char *const *n = end_names; *n; n++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s'%s'", n == end_names ? "" : " or ", *n);
        jc_fail(c, cur(c)->line, "Unexpected end of template. Jinja was looking for the following tags: %s.", want);
    }
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
    jnode *target = parse_tuple(c, 1, 1, extra_end, 0);
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
    jsig *s = jc_alloc(c, sizeof *s);
    memset(s, 0, sizeof *s);
    jstr names[64];
    jnode *defaults[64];
    int have_default = 0;
    expect(c, JT_LPAREN);
    while (cur(c)->kind != JT_RPAREN) {
        if (s->n) expect(c, JT_COMMA);
        if (s->n == 64) jc_fail(c, cur(c)->line, "too many macro parameters");
        jtok *t = expect(c, JT_NAME);
        names[s->n].p = t->text.p;
        names[s->n].n = t->text.n;
        defaults[s->n] = NULL;
        if (skip_if(c, JT_ASSIGN)) {
            defaults[s->n] = parse_expression(c, 1);
            have_default = 1;
        } else if (have_default) jc_fail(c, t->line, "non-default argument follows default argument");
        s->n++;
    }
    expect(c, JT_RPAREN);
    s->names = jc_alloc(c, sizeof(jstr) * (size_t)(s->n + 1));
    s->syms = jc_alloc(c, sizeof(int) * (size_t)(s->n + 1));
    s->defaults = jc_alloc(c, sizeof(jnode *) * (size_t)(s->n + 1));
    for (int i = 0; i < s->n; i++) {
        s->names[i] = names[i];
        s->syms[i] = sym_of(c, names[i].p, names[i].n);
        s->defaults[i] = defaults[i];
    }
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
    n->b = parse_tuple(c, 0, 0, "recursive", 0);
    if (skip_kw(c, "if")) n->e = parse_expression(c, 1);
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
    jnode *chain[JINJA_MAX_TREE_DEPTH];
    int nchain = 0;
    for (;;) {
        node->a = parse_tuple(c, 0, 0, NULL, 0);
        node->b = parse_statements(c, end_body, 0);
        if (nchain == JINJA_MAX_TREE_DEPTH) jc_fail(c, node->line, "too many elif branches");
        chain[nchain++] = node;
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
    while (nchain > 0) done(c, chain[--nchain]);  /* heights from the innermost elif out */
    return result;
}

static jnode *parse_set(P *c) {
    static const char *const end[] = {"endset", NULL};
    int line = next(c)->line;
    jnode *target = parse_assign_target(c, NULL, 1);
    if (skip_if(c, JT_ASSIGN)) {
        jnode *n = mk2(c, JN_SET, 0, line, target, parse_tuple(c, 0, 1, NULL, 0));
        return n;
    }
    jnode *n = mk(c, JN_SET_BLOCK, line);
    n->a = target;
    n->c = parse_filter(c, NULL, 0);
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
    n->a = parse_expression(c, 1);
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
    n->a = parse_filter(c, NULL, 1);
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
        push(c, &pairs, parse_expression(c, 1));
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
        push(c, &items, parse_expression(c, 1));
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
            push(c, &items, mk1(c, JN_OUTPUT, t->line, parse_tuple(c, 0, 1, NULL, 0)));
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
