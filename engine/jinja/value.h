/* value.h - the interpreter's values, with Python's semantics, and the render state that
 * owns them.
 *
 * A value (jv) is 16 bytes passed by value. Strings are (pointer, length) views: into the
 * compiled template, into the caller's cJSON, or into the render's arena; they are never
 * mutated, so slicing and splitting make new views without copying. Lists, tuples and
 * dicts live in the arena and are immutable once built (the sandbox forbids list.append and
 * friends); a namespace is the one mutable object. Everything a render allocates comes from
 * its arena and goes away at once when the render ends, so errors unwind with longjmp
 * (jr_fail) without leaking. */
#ifndef CHATFS_JINJA_VALUE_H
#define CHATFS_JINJA_VALUE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* ---- arena ---- */

typedef struct jchunk jchunk;
typedef struct {
    jchunk *head;
    size_t total;      /* bytes taken from malloc */
    size_t limit;      /* most bytes it may take */
} jarena;

/* NULL when the limit is reached or malloc fails; memory is 16-byte aligned and not zeroed */
void *jarena_alloc(jarena *a, size_t n);
void jarena_free(jarena *a);

/* ---- values ---- */

typedef enum {
    JV_UNDEFINED = 0,  /* a missing name, attribute or item (prints as "") */
    JV_NONE,
    JV_BOOL,           /* u.i = 0 or 1; a Python bool is also an int in arithmetic */
    JV_INT,            /* u.i; Python ints are unbounded, ours overflow into an error */
    JV_FLOAT,          /* u.f */
    JV_STR,            /* u.s, len bytes of UTF-8 */
    JV_LIST,           /* u.list; sub = JL_TUPLE for a tuple */
    JV_DICT,           /* u.dict, insertion-ordered */
    JV_NS,             /* namespace(): u.dict, mutable through {% set ns.x = ... %} */
    JV_FUNC,           /* macro, builtin function or bound method: u.fn */
    JV_LOOP,           /* the `loop` variable of a for loop: u.loop */
    JV_ABSENT,         /* internal: an empty variable slot; never seen by templates */
} jv_kind;

/* sub of JV_LIST: what Python object the sequence stands for. Only lists, tuples and ranges
 * can be indexed; dict views (d.keys() ...) have a length; generators (what map, select,
 * selectattr, unique, reverse, the items filter return) have none, are always true and
 * are used up by the first iteration (jlist.pos). */
enum { JL_LIST = 0, JL_TUPLE, JL_RANGE, JL_KEYS, JL_VALUES, JL_ITEMS, JL_GEN, JL_REVERSED };
/* sub of JV_STR: markupsafe's Markup (what |safe and |escape give). Even without
 * autoescaping, python-jinja2 keeps Markup's rules: a plain str added to it with + is
 * HTML-escaped first, and its methods and % escape their arguments. */
enum { JS_PLAIN = 0, JS_MARKUP = 1 };
/* sub of JV_UNDEFINED: what was missing, for the error a later use raises */
enum { JU_NAME = 0, JU_ATTR, JU_ITEM_INT, JU_UNSAFE, JU_PLAIN };

struct jlist;
struct jdict;
struct jfunc;
struct jloop;

typedef struct jv {
    uint8_t kind;
    uint8_t sub;       /* see JL_* and JU_* */
    uint16_t aux;      /* JV_UNDEFINED: the jv_kind of the object that lacked the attribute */
    uint32_t len;      /* JV_STR: bytes; JV_UNDEFINED: bytes of the missing name */
    union {
        int64_t i;
        double f;
        const char *s;
        struct jlist *list;
        struct jdict *dict;
        struct jfunc *fn;
        struct jloop *loop;
    } u;
} jv;

typedef struct jlist {
    uint32_t n, cap;
    jv *v;
    uint32_t pos;               /* JL_GEN, JL_REVERSED: items already consumed */
    const struct jgen *gen;     /* JL_GEN not yet run: how to make its items (filters_seq.c) */
    int64_t start, stop, step;  /* JL_RANGE: the range() arguments, for its repr */
} jlist;

typedef struct jdict {
    uint32_t n, cap;
    jv *keys, *vals;
} jdict;

/* ---- render state ---- */

struct jinja_template;
struct jscope;
struct jnode;

typedef struct {
    char *p;
    size_t len, cap;
} jbuf;

typedef struct jr {
    const struct jinja_template *t;
    jarena arena;
    jmp_buf *jmp;             /* where jr_fail goes */
    char *error;              /* malloc'd message after a failure */
    int error_kind;           /* JINJA_* */
    uint64_t steps, max_steps;
    uint64_t put_bytes;       /* bytes written to buffers not yet counted as steps */
    int depth, max_depth;
    size_t max_output;
    jbuf *out;                /* where output goes now (a macro call captures into its own) */
    struct jscope *root;      /* the template's top-level variables */
    struct jscope *scope;     /* the innermost scope of the code being run */
    int line;                 /* line of the statement or expression being evaluated */
    time_t now;
    int fixed_time;
} jr;

/* Leaves the render with an error (kind JINJA_ERROR / JINJA_LIMIT / JINJA_RAISED);
 * the message gets "line N: " in front unless kind is JINJA_RAISED. */
_Noreturn void jr_fail(jr *r, int kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define jr_error(r, ...) jr_fail((r), 1 /* JINJA_ERROR */, __VA_ARGS__)
/* leaves the render as raise_exception(message) does: the error is the message itself */
_Noreturn void jr_raise(jr *r, const char *msg, size_t len);
void *jr_alloc(jr *r, size_t n);
/* counts n evaluation steps against the limit */
static inline void jr_step(jr *r, uint64_t n) {
    r->steps += n;
    if (r->steps > r->max_steps) jr_fail(r, 3 /* JINJA_LIMIT */, "evaluation step limit (%llu) reached",
                                         (unsigned long long)r->max_steps);
}
void jr_enter(jr *r);  /* one level deeper (expressions, statements, calls, nested values) */
static inline void jr_leave(jr *r) { r->depth--; }

/* ---- byte buffers (arena-backed; growing past max_output fails) ---- */

void jbuf_init(jr *r, jbuf *b, size_t cap);
void jbuf_put(jr *r, jbuf *b, const char *s, size_t n);
static inline void jbuf_putc(jr *r, jbuf *b, char c) {
    if (b->len < b->cap) b->p[b->len++] = c;
    else jbuf_put(r, b, &c, 1);
}
void jbuf_puts(jr *r, jbuf *b, const char *s);
void jbuf_printf(jr *r, jbuf *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
jv jbuf_value(jbuf *b);  /* the bytes as a string value (no copy) */

/* ---- constructors ---- */

static inline jv jv_undef(void) { jv v = {0}; v.kind = JV_UNDEFINED; v.sub = JU_PLAIN; return v; }
static inline jv jv_none(void) { jv v = {0}; v.kind = JV_NONE; return v; }
static inline jv jv_bool(int b) { jv v = {0}; v.kind = JV_BOOL; v.u.i = b != 0; return v; }
static inline jv jv_int(int64_t i) { jv v = {0}; v.kind = JV_INT; v.u.i = i; return v; }
static inline jv jv_float(double f) { jv v = {0}; v.kind = JV_FLOAT; v.u.f = f; return v; }
static inline jv jv_absent(void) { jv v = {0}; v.kind = JV_ABSENT; return v; }
jv jv_str(jr *r, const char *s, size_t n);       /* a view of s (no copy) */
jv jv_str_copy(jr *r, const char *s, size_t n);  /* a copy in the arena */
jv jv_cstr(const char *s);                       /* a view of a NUL-terminated literal */
/* an undefined value that remembers what was missing: JU_NAME (name), JU_ATTR (attribute
 * name of an object of kind objkind), JU_ITEM_INT, JU_UNSAFE (a method the sandbox forbids) */
jv jv_undef_for(jr *r, int what, int objkind, const char *name, size_t n);

jv jv_list_new(jr *r, uint32_t cap);
void jv_list_push(jr *r, jv *list, jv item);     /* only while building a new list */
jv jv_tuple2(jr *r, jv a, jv b);
jv jv_dict_new(jr *r, uint32_t cap);
/* sets key in a dict being built (or a namespace): replaces the value of an equal key,
 * which keeps its place, as Python does; unhashable keys fail */
void jv_dict_set(jr *r, jv *dict, jv key, jv val);
/* the value of key, or NULL; unhashable keys fail as in Python */
jv *jv_dict_get(jr *r, const jdict *d, jv key);
jv *jv_dict_get_str(const jdict *d, const char *s, size_t n);

/* ---- Python semantics ---- */

int jv_truthy(jv v);
int jv_is_num(jv v);                 /* int, float or bool */
double jv_num(jv v);                 /* as a double (for int, float, bool) */
int jv_eq(jr *r, jv a, jv b);        /* a == b */
/* a < b as Python compares (numbers, strings, lists/tuples of the same kind);
 * other pairs fail with Python's TypeError text for op ("<", ">", ...) */
int jv_lt(jr *r, jv a, jv b, const char *op);
int jv_cmp(jr *r, jv a, jv b);       /* -1, 0, 1 by jv_lt; for sorting */
int jv_compare_op(jr *r, jv a, jv b, const char *op);  /* op: "<", "<=", ">", ">=" */
void jv_check_hashable(jr *r, jv v);
const char *jv_type_name(jv v);      /* Python's type name: "str", "int", "dict", ... */
const char *jv_kind_name(int kind);

/* ---- text (tostring.c) ---- */

void jv_write_str(jr *r, jbuf *b, jv v);   /* str(v) */
void jv_write_repr(jr *r, jbuf *b, jv v);  /* repr(v) */
jv jv_to_str(jr *r, jv v);                 /* str(v) as a string value */
jv jv_to_repr(jr *r, jv v);
/* Python's repr of a float into buf (at least 32 bytes); returns its length */
int py_float_repr(double f, char *buf);
typedef struct {
    int indent;               /* -1: none; else spaces per level */
    const char *indent_str;   /* when the indent is a string (NULL: use indent spaces) */
    size_t indent_len;
    const char *item_sep, *key_sep;
    size_t item_sep_len, key_sep_len;
    int sort_keys;
    int ensure_ascii;
} jjson_opts;
void jjson_default_opts(jjson_opts *o);
/* json.dumps(v, ...) as Python writes it */
void jv_write_json(jr *r, jbuf *b, jv v, const jjson_opts *o);

#endif
