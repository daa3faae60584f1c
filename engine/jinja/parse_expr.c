/* parse_expr.c - expressions, following python-jinja2's grammar (jinja2/parser.py: the
 * same precedence climbing, tuples, tests, filters, calls and subscripts). */
#include "engine/jinja/parser.h"

static jnode *parse_unary(P *c, int with_filter);
static jnode *parse_primary(P *c);
static jnode *parse_postfix(P *c, jnode *node);

static jnode *parse_condexpr(P *c) {
    int line = cur(c)->line;
    enter(c, line);
    jnode *expr1 = jparse_expression(c, 0);
    while (skip_kw(c, "if")) {
        jnode *expr2 = jparse_expression(c, 0), *expr3 = NULL;
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
    jstr *kwname = NULL;  /* grows with kwval */
    int require_comma = 0, kwcap = 0;
    while (cur(c)->kind != JT_RPAREN) {
        if (require_comma) {
            expect(c, JT_COMMA);
            if (cur(c)->kind == JT_RPAREN) break;  /* trailing comma */
        }
        if (cur(c)->kind == JT_MUL) {
            if (a->star || a->starstar) jc_fail(c, open->line, "invalid syntax for function call expression");
            next(c);
            a->star = jparse_expression(c, 1);
        } else if (cur(c)->kind == JT_POW) {
            if (a->starstar) jc_fail(c, open->line, "invalid syntax for function call expression");
            next(c);
            a->starstar = jparse_expression(c, 1);
        } else if (cur(c)->kind == JT_NAME && peek(c)->kind == JT_ASSIGN) {
            if (a->starstar) jc_fail(c, open->line, "invalid syntax for function call expression");
            if (kwval.n == kwcap) {
                kwcap = kwcap ? kwcap * 2 : 4;
                jstr *grown = jc_alloc(c, sizeof(jstr) * (size_t)kwcap);
                if (kwval.n) memcpy(grown, kwname, sizeof(jstr) * (size_t)kwval.n);
                kwname = grown;
            }
            jtok *name = next(c);
            next(c);
            kwname[kwval.n].p = name->text.p;
            kwname[kwval.n].n = name->text.n;
            push(c, &kwval, jparse_expression(c, 1));
        } else {
            if (a->star || a->starstar || kwval.n) jc_fail(c, open->line, "invalid syntax for function call expression");
            push(c, &pos, jparse_expression(c, 1));
        }
        require_comma = 1;
    }
    expect(c, JT_RPAREN);
    a->n = pos.n;
    a->pos = pos.v;
    a->nkw = kwval.n;
    a->kwval = kwval.v;
    a->kwname = kwname;
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

jnode *jparse_filter(P *c, jnode *node, int start_inline) {
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
        if (cur(c)->kind == JT_PIPE) node = jparse_filter(c, node, 0);
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
        jnode *node = jparse_expression(c, 1);
        if (cur(c)->kind != JT_COLON) return node;
        next(c);
        parts[0] = node;
    }
    if (cur(c)->kind != JT_COLON && cur(c)->kind != JT_RBRACKET && cur(c)->kind != JT_COMMA)
        parts[1] = jparse_expression(c, 1);
    if (cur(c)->kind == JT_COLON) {
        next(c);
        if (cur(c)->kind != JT_RBRACKET && cur(c)->kind != JT_COMMA) parts[2] = jparse_expression(c, 1);
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
        push(c, &items, jparse_expression(c, 1));
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
        push(c, &items, jparse_expression(c, 1));
        expect(c, JT_COLON);
        push(c, &items, jparse_expression(c, 1));
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
        jnode *n = jparse_tuple(c, 0, 1, NULL, 1);
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

jnode *jparse_tuple(P *c, int simplified, int with_condexpr, const char *extra_end, int explicit_parens) {
    int line = cur(c)->line, is_tuple = 0;
    nvec args = {0};
    for (;;) {
        if (args.n) expect(c, JT_COMMA);
        if (is_tuple_end(c, extra_end)) break;
        push(c, &args, simplified ? parse_primary(c) : jparse_expression(c, with_condexpr));
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

jnode *jparse_expression(P *c, int with_condexpr) {
    return with_condexpr ? parse_condexpr(c) : parse_or(c);
}
