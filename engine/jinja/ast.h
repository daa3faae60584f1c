/* ast.h - a compiled template: the tree the parser builds and the interpreter walks.
 *
 * One node type for expressions and statements; the named children a..e mean what the
 * table below says for each kind. Everything lives in the template's arena, is read-only
 * after jinja_compile, and may be walked by several renders at once. */
#ifndef CHATFS_JINJA_AST_H
#define CHATFS_JINJA_AST_H

#include "engine/jinja/value.h"

typedef struct {
    const char *p;
    uint32_t n;
} jstr;

typedef enum {
    /* expressions */
    JN_CONST,      /* value */
    JN_NAME,       /* name, sym */
    JN_LIST,       /* kids */
    JN_TUPLE,      /* kids */
    JN_DICT,       /* kids: key, value, key, value, ... */
    JN_GETATTR,    /* a.name; method = method id of name or -1 */
    JN_GETITEM,    /* a[b] */
    JN_SLICE,      /* a:b:c inside [], each may be NULL */
    JN_CALL,       /* a(args) */
    JN_FILTER,     /* a | name(args); a is NULL in a filter block (the body's output) */
    JN_TEST,       /* a is name(args) */
    JN_UNARY,      /* op a: JOP_NOT, JOP_NEG, JOP_POS */
    JN_BINOP,      /* a op b: JOP_ADD ... JOP_POW */
    JN_AND,        /* a and b */
    JN_OR,         /* a or b */
    JN_COMPARE,    /* a ops[0] kids[0] ops[1] kids[1] ... (chained) */
    JN_CONCAT,     /* kids[0] ~ kids[1] ~ ... */
    JN_CONDEXPR,   /* b if a else c (c may be NULL) */
    /* statements */
    JN_BODY,       /* kids, in order */
    JN_DATA,       /* template text: value */
    JN_OUTPUT,     /* {{ a }} */
    JN_IF,         /* if a: b else c (c: BODY, another IF for elif, or NULL) */
    JN_FOR,        /* for a in b if e: c else d; op: JFOR_* flags */
    JN_SET,        /* set a = b; a is a NAME, a TUPLE of NAMEs or an NSREF */
    JN_SET_BLOCK,  /* set a | c: body b */
    JN_NSREF,      /* target name.attr: sym of name, attr in name */
    JN_MACRO,      /* macro name(sig): body a */
    JN_CALL_BLOCK, /* call(sig) a: body b; a is a CALL */
    JN_FILTER_BLOCK, /* filter a: body b; a is a FILTER chain ending in a NULL operand */
    JN_WITH,       /* with kids (target, value pairs): body a */
    JN_BREAK,
    JN_CONTINUE,
    JN_GENERATION, /* {% generation %} body a (output unchanged) */
} jnode_kind;

enum {
    JFOR_RECURSIVE = 1,  /* the body may call loop(items) */
    JFOR_CLOSURES = 2,   /* the body defines macros or call blocks, which keep their scope */
};

enum {
    JOP_NOT = 1, JOP_NEG, JOP_POS,
    JOP_ADD, JOP_SUB, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD, JOP_POW,
    JOP_EQ, JOP_NE, JOP_LT, JOP_LTEQ, JOP_GT, JOP_GTEQ, JOP_IN, JOP_NOTIN,
};

typedef struct jnode jnode;

typedef struct {
    int n;                /* positional arguments */
    jnode **pos;
    int nkw;              /* keyword arguments */
    jstr *kwname;
    jnode **kwval;
    jnode *star, *starstar;  /* *args and **kwargs, or NULL */
} jcallargs;

/* a macro's or call block's signature */
typedef struct {
    int n;
    jstr *names;
    int *syms;
    jnode **defaults;     /* defaults[i] or NULL */
    int uses_caller, uses_varargs, uses_kwargs;  /* the body names caller/varargs/kwargs */
} jsig;

struct jnode {
    uint8_t kind;
    uint8_t op;
    uint8_t soft;          /* FILTER/TEST: inside if/else, so an unknown name fails only when run */
    uint16_t depth;        /* height of the subtree: bounded, so walking it cannot overflow the stack */
    int line;
    int sym;               /* NAME, NSREF, MACRO: symbol id */
    int builtin;           /* FILTER/TEST: index in the builtin table, -1 if unknown; GETATTR: method id */
    int n;                 /* kids */
    jnode **kids;
    uint8_t *ops;          /* COMPARE: n operators */
    jstr name;
    jv value;              /* CONST, DATA */
    jcallargs *args;       /* CALL, FILTER, TEST */
    jsig *sig;             /* MACRO, CALL_BLOCK */
    jnode *a, *b, *c, *d, *e;
};

struct jinja_template {
    jarena arena;          /* every node, string and table below */
    jnode *body;
    int nsyms;             /* variable names, numbered by the parser */
    jstr *syms;
    int *sym_global;       /* per symbol: a global function's id (range, namespace, ...) or -1 */
    int sym_loop, sym_caller, sym_varargs, sym_kwargs;  /* their symbols, -1 if never named */
};

#endif
