/* lexer.h - template text to tokens, with python-jinja2's whitespace rules.
 *
 * The text is first normalised as jinja2 does (\r\n and \r become \n, one trailing newline
 * is dropped: keep_trailing_newline=False). Then template data alternates with tags:
 * {{ expression }}, {% statement %} and {# comment #}. Whitespace control as Hugging Face
 * configures it: trim_blocks (the newline right after a %} or #} goes), lstrip_blocks
 * (spaces and tabs between a line start and a {% or {# go), "-" inside a delimiter strips
 * all whitespace on that side, "+" keeps it. */
#ifndef CHATFS_JINJA_LEXER_H
#define CHATFS_JINJA_LEXER_H

#include <setjmp.h>

#include "engine/jinja/ast.h"

typedef enum {
    JT_EOF = 0,
    JT_DATA,          /* template text between tags: text */
    JT_VAR_BEGIN,     /* {{ */
    JT_VAR_END,       /* }} */
    JT_BLOCK_BEGIN,   /* {% */
    JT_BLOCK_END,     /* %} */
    JT_NAME,          /* text */
    JT_STRING,        /* text: the literal's value, escapes resolved */
    JT_INT,           /* ival */
    JT_FLOAT,         /* fval */
    /* operators */
    JT_ADD, JT_SUB, JT_MUL, JT_DIV, JT_FLOORDIV, JT_MOD, JT_POW, JT_TILDE,
    JT_LBRACKET, JT_RBRACKET, JT_LPAREN, JT_RPAREN, JT_LBRACE, JT_RBRACE,
    JT_EQ, JT_NE, JT_GT, JT_GTEQ, JT_LT, JT_LTEQ, JT_ASSIGN,
    JT_DOT, JT_COLON, JT_PIPE, JT_COMMA, JT_SEMICOLON,
} jtok_kind;

typedef struct {
    uint8_t kind;
    int line;
    jstr text;
    int64_t ival;
    double fval;
} jtok;

/* compile state shared by the lexer and the parser */
typedef struct {
    struct jinja_template *t;
    jmp_buf jmp;
    char error[512];
    jtok *toks;
    int ntoks, cap;
    int pos;              /* the parser's next token */
    int depth;            /* the parser's nesting */
    int loops;            /* for loops around the statement being parsed (break/continue) */
    int soft;             /* inside if/else: unknown filters and tests fail only when run */
    jstr *syms;           /* variable names seen, numbered in order */
    int nsyms, capsyms;
} jcompile;

_Noreturn void jc_fail(jcompile *c, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void *jc_alloc(jcompile *c, size_t n);

/* tokenizes text into c->toks, ending with JT_EOF; fails through jc_fail */
void jlex(jcompile *c, const char *text, size_t len);
/* parses c->toks into the template's tree (parser.c); fails through jc_fail */
jnode *jparse(jcompile *c);

#define JINJA_MAX_TREE_DEPTH 200  /* nesting of the template's expressions and statements */

#endif
