/* parser.h - what the two halves of the parser (parse_expr.c: expressions, parser.c:
 * statements) share: the token cursor, building nodes, and the expression entry points. */
#ifndef CHATFS_JINJA_PARSER_H
#define CHATFS_JINJA_PARSER_H

#include <stdio.h>
#include <string.h>

#include "engine/jinja/eval.h"
#include "engine/jinja/lexer.h"

typedef jcompile P;

/* ---- tokens ---- */

static inline jtok *cur(P *c) { return &c->toks[c->pos]; }
static inline jtok *peek(P *c) { return c->pos + 1 < c->ntoks ? &c->toks[c->pos + 1] : &c->toks[c->ntoks - 1]; }
static inline jtok *next(P *c) {
    jtok *t = cur(c);
    if (t->kind != JT_EOF) c->pos++;
    return t;
}
static inline int is_kw(const jtok *t, const char *kw) {
    return t->kind == JT_NAME && t->text.n == strlen(kw) && memcmp(t->text.p, kw, t->text.n) == 0;
}
static inline int skip_kw(P *c, const char *kw) {
    if (!is_kw(cur(c), kw)) return 0;
    next(c);
    return 1;
}
static inline int skip_if(P *c, int kind) {
    if (cur(c)->kind != kind) return 0;
    next(c);
    return 1;
}

static inline const char *kind_text(int kind) {
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
static inline void describe(const jtok *t, char *buf, size_t n) {
    if (t->kind == JT_NAME) snprintf(buf, n, "%.*s", (int)(t->text.n > 60 ? 60 : t->text.n), t->text.p);
    else snprintf(buf, n, "%s", kind_text(t->kind));
}

static inline _Noreturn void fail_unexpected(P *c, const jtok *t) {
    char d[80];
    describe(t, d, sizeof d);
    jc_fail(c, t->line, "unexpected '%s'", d);
}

static inline jtok *expect(P *c, int kind) {
    jtok *t = cur(c);
    if (t->kind != kind) {
        char d[80];
        describe(t, d, sizeof d);
        if (t->kind == JT_EOF) jc_fail(c, t->line, "unexpected end of template, expected '%s'.", kind_text(kind));
        jc_fail(c, t->line, "expected token '%s', got '%s'", kind_text(kind), d);
    }
    return next(c);
}

static inline void expect_kw(P *c, const char *kw) {
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

static inline void push(P *c, nvec *v, jnode *x) {
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 4;
        jnode **nv = jc_alloc(c, (size_t)cap * sizeof *nv);
        if (v->n) memcpy(nv, v->v, (size_t)v->n * sizeof *nv);
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = x;
}

static inline jnode *mk(P *c, int kind, int line) {
    jnode *n = jc_alloc(c, sizeof *n);
    memset(n, 0, sizeof *n);
    n->kind = (uint8_t)kind;
    n->line = line;
    n->sym = -1;
    n->builtin = -1;
    return n;
}

static inline int height(const jnode *n) { return n ? n->depth : 0; }

/* sets n's height from its children's, which are complete; fails past the limit */
static inline jnode *done(P *c, jnode *n) {
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

static inline void set_kids(jnode *n, nvec *v) {
    n->kids = v->v;
    n->n = v->n;
}

static inline jnode *mk1(P *c, int kind, int line, jnode *a) {
    jnode *n = mk(c, kind, line);
    n->a = a;
    return done(c, n);
}

static inline jnode *mk2(P *c, int kind, int op, int line, jnode *a, jnode *b) {
    jnode *n = mk(c, kind, line);
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    return done(c, n);
}

static inline int sym_of(P *c, const char *p, uint32_t n) {
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

static inline jnode *const_node(P *c, int line, jv v) {
    jnode *n = mk(c, JN_CONST, line);
    n->value = v;
    return done(c, n);
}

static inline jv str_const(const char *p, uint32_t n) {
    jv v = {0};
    v.kind = JV_STR;
    v.u.s = p;
    v.len = n;
    return v;
}

/* nesting guard for the recursive descent itself */
static inline void enter(P *c, int line) {
    if (++c->depth > JINJA_MAX_TREE_DEPTH) jc_fail(c, line, "template nested too deeply (more than %d levels)", JINJA_MAX_TREE_DEPTH);
}

/* the expression grammar (parse_expr.c), as jinja2/parser.py's functions of those names */
jnode *jparse_expression(P *c, int with_condexpr);
jnode *jparse_tuple(P *c, int simplified, int with_condexpr, const char *extra_end, int explicit_parens);
jnode *jparse_filter(P *c, jnode *node, int start_inline);

#endif
