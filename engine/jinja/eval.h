/* eval.h - the interpreter's inside: scopes, callables, loops, and what the builtins
 * (filters, tests, methods, globals) and the evaluator share. */
#ifndef CHATFS_JINJA_EVAL_H
#define CHATFS_JINJA_EVAL_H

#include "engine/jinja/ast.h"
#include "engine/jinja/value.h"

/* Variables. The root scope holds the render's variables and the template's top-level
 * assignments in a slot per symbol; every for-loop iteration, macro call and with block
 * gets a small scope of its own whose lookups fall through to its parent (lexical: a
 * macro's parent is the scope it was defined in, not its caller's). */
typedef struct jscope {
    struct jscope *parent;
    int dense;             /* root: vals[sym] for every symbol, JV_ABSENT if unset */
    uint32_t n, cap;
    int *syms;
    jv *vals;
} jscope;

jscope *jscope_new(jr *r, jscope *parent);
jv *jscope_find(jscope *s, int sym);       /* the nearest binding, or NULL */
void jscope_set(jr *r, jscope *s, int sym, jv v);

/* arguments of a call, evaluated */
typedef struct {
    int n;
    jv *pos;
    int nkw;
    jstr *kwname;
    jv *kwval;
} jargs;

/* Binds a builtin's arguments like Python: positional ones first, then keywords by name;
 * out[i] stays JV_ABSENT when not given. Fails on too many positional arguments, an
 * unknown keyword or fewer than nreq given. names: the parameters, in order. */
void jargs_bind(jr *r, const jargs *a, const char *fname, const char *const *names, int nnames, int nreq,
                jv *out);
void jargs_none(jr *r, const jargs *a, const char *fname);  /* fails unless no arguments */
int64_t jarg_int(jr *r, jv v, const char *what);            /* an int argument (bool counts) */
int jarg_flag(jr *r, jv v);  /* a flag Python reads as an int (sorted's reverse, splitlines' keepends) */
/* Python's int(s, base) and float(s) of a string; 0 when it is not a number */
int parse_py_int(const char *s, size_t n, int base, int64_t *out);
int parse_py_float(const char *s, size_t n, double *out);

typedef jv (*jbuiltin_fn)(jr *r, jv self, const jargs *a);

enum { JF_MACRO, JF_BUILTIN, JF_JOINER, JF_CYCLER };

typedef struct jfunc {
    int kind;
    const char *name;         /* not NUL-terminated: name_len bytes */
    int name_len;
    const char *repr;         /* a global's repr when it is a Python class, or NULL */
    const jnode *node;        /* JF_MACRO: the MACRO or CALL_BLOCK node */
    jscope *closure;          /* JF_MACRO: the scope the macro was defined in */
    jbuiltin_fn fn;           /* JF_BUILTIN */
    jv self;                  /* JF_BUILTIN: the bound object of a method (JV_ABSENT if none) */
    jv state;                 /* JF_JOINER / JF_CYCLER: their mutable state */
    int pos;
} jfunc;

typedef struct jloop {
    const jv *items;
    uint32_t n, i;           /* i = loop.index0 */
    jv changed_last;         /* loop.changed(): the last value seen (JV_ABSENT: none yet) */
    const jnode *node;       /* the FOR node; a recursive loop's loop(items) runs it again */
    jscope *outer;           /* the scope the loop runs in */
    int depth0;              /* loop.depth0: 0, or how deep loop(items) has recursed */
} jloop;

/* ---- evaluator (eval.c, exec.c) ---- */

jv jeval(jr *r, const jnode *n);
enum { JX_NORMAL = 0, JX_BREAK, JX_CONTINUE };
int jexec(jr *r, const jnode *n);  /* runs n in r->scope, writing to r->out */
jv jcall(jr *r, jv callee, const jargs *a);
/* evaluates a call's arguments (expanding *args and **kwargs), plus one more keyword
 * argument extra_name = extra_val if extra_name is not NULL */
void jeval_args(jr *r, const jcallargs *ca, jargs *out, const char *extra_name, jv extra_val);
/* applies a FILTER node (its arguments evaluated now) to v */
jv jeval_filter(jr *r, const jnode *f, jv v);
/* Jinja's getattr: a method of the object, else its item; undefined if neither */
jv jgetattr(jr *r, jv obj, const char *name, size_t n);
/* Jinja's getitem: obj[key], else (for a string key) its attribute; undefined if neither */
jv jgetitem(jr *r, jv obj, jv key);
/* the items iterating v gives, as a list (a string gives its characters, a dict its keys,
 * undefined nothing); fails as Python does for what cannot be iterated */
jv jiterate(jr *r, jv v);
/* fails with the error an undefined value raises when used */
_Noreturn void jundef_fail(jr *r, jv u);
jv jcall_macro(jr *r, jfunc *f, const jargs *a);
jv jcall_loop(jr *r, jv loop, const jargs *a);  /* loop(items) in a recursive for loop */
int jv_is_seq(jv v);     /* a list, tuple or range: indexable, with a length */
int jv_is_iter(jv v);    /* a generator or reversed iterator: no length, used up when iterated */
/* runs a generator's filter if it has not run yet: like Python's, map/select/... do their
 * work (and fail) only when something iterates what they returned */
void jgen_force(jr *r, jlist *l);

/* ---- builtins (filters.c, tests.c, methods.c, globals.c) ---- */

typedef struct {
    const char *name;
    jbuiltin_fn fn;
} jbuiltin_def;

int jfilter_find(const char *name, size_t n);  /* index in jfilter_table, -1 if none */
int jtest_find(const char *name, size_t n);
int jglobal_find(const char *name, size_t n);
const jfunc *jglobal_func(int id);  /* the global function id as a value's jfunc */
extern const jbuiltin_def jfilter_table[], jtest_table[];
/* names python-jinja2 has but this interpreter does not implement: a clear error */
int jfilter_unsupported(const char *name, size_t n);

jv jfilter_call(jr *r, int id, jv v, const jargs *a);
int jtest_call(jr *r, int id, jv v, const jargs *a);
/* the method of obj called name, bound, or JV_ABSENT; sandbox-forbidden mutators give an
 * undefined that fails when called */
jv jmethod_get(jr *r, jv obj, const char *name, size_t n);
/* the attributes of the loop variable (loop.index, ...), of a cycler (JV_ABSENT if none) */
jv jloop_attr(jr *r, jv loop, const char *name, size_t n);
jv jcycler_attr(jr *r, jv cycler, const char *name, size_t n);

/* python str helpers shared by filters and methods (strops.c) */
jv jstr_strip(jr *r, jv s, jv chars, int left, int right);
jv jstr_lower(jr *r, jv s);
jv jstr_upper(jr *r, jv s);
jv jstr_title(jr *r, jv s);
jv jstr_capitalize(jr *r, jv s);
jv jstr_replace(jr *r, jv s, jv old, jv new_, int64_t count);
jv jstr_split(jr *r, jv s, jv sep, int64_t maxsplit, int from_right);
jv jstr_splitlines(jr *r, jv s, int keepends);
jv jstr_join(jr *r, jv sep, jv items);       /* sep.join(str(x) for x in items) */
int jstr_find(jv hay, jv needle, size_t from);  /* byte offset or -1 */
jv jstr_index(jr *r, jv s, int64_t i);          /* s[i] by code point (negative from the end) */
/* markupsafe.escape: Markup stays as it is, anything else becomes str(v) with & < > " '
 * written as entities, marked Markup */
jv jhtml_escape(jr *r, jv v);
jv jv_slice(jr *r, jv obj, jv start, jv stop, jv step);
jv jformat_printf(jr *r, jv fmt, jv args);      /* fmt % args (a Markup fmt escapes the args) */
jv jformat_str(jr *r, jv fmt, const jargs *a);  /* fmt.format(*args, **kwargs) */
jv jarith(jr *r, int op, jv a, jv b);            /* a op b for JOP_ADD ... JOP_POW */
/* attribute getters of map(attribute=), sort(attribute=), ...: "a.b.0" walks items */
jv jattr_path(jr *r, jv item, jv attribute);

#endif
