/* parse.c - GBNF text to a compiled grammar (grammar.h): the parser, the rewriting of
 * repetitions into rules (as llama.cpp's parser rewrites them), and the checks that
 * every rule is defined, `root` exists and no rule is left-recursive. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/grammar_impl.h"

#define MAX_REPETITION 2000 /* llama.cpp's MAX_REPETITION_THRESHOLD */

typedef struct evec {
    gelem *el;
    uint32_t n, cap;
    struct evec *outer; /* the alternatives being parsed around this one (freed on an error) */
} evec;

typedef struct {
    char *name;
    evec body;
    int defined;
    size_t ref_at; /* where it was first referenced (for "undefined") */
} prule;

typedef struct {
    const char *s;
    size_t len, pos;
    prule *rules;
    int n_rules, cap_rules;
    gclass *cls;
    int n_cls, cap_cls;
    grange *rng;
    uint32_t n_rng, cap_rng;
    evec *open; /* the innermost alternatives being parsed */
    char *err;
    size_t errlen;
    jmp_buf fail;
} parser;

static void where(const parser *p, size_t at, int *line, int *col) {
    *line = 1, *col = 1;
    for (size_t i = 0; i < at && i < p->len; i++) {
        if (p->s[i] == '\n') (*line)++, *col = 1;
        else if (((unsigned char)p->s[i] & 0xc0) != 0x80) (*col)++;
    }
}

static void fail_at(parser *p, size_t at, const char *fmt, ...) {
    int line, col;
    where(p, at, &line, &col);
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(p->err, p->errlen, "grammar: line %d, column %d: %s", line, col, msg);
    longjmp(p->fail, 1);
}

static void fail_plain(parser *p, const char *fmt, ...) {
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(p->err, p->errlen, "grammar: %s", msg);
    longjmp(p->fail, 1);
}

static void *grow(parser *p, void *a, uint32_t *cap, uint32_t need, size_t size) {
    if (need <= *cap) return a;
    uint32_t c = *cap ? *cap : 8;
    while (c < need) c *= 2;
    void *b = realloc(a, (size_t)c * size);
    if (!b) fail_plain(p, "out of memory");
    *cap = c;
    return b;
}

static void push(parser *p, evec *v, uint32_t type, uint32_t value) {
    v->el = grow(p, v->el, &v->cap, v->n + 1, sizeof *v->el);
    v->el[v->n++] = (gelem){type, value};
}

static int peek(const parser *p, size_t k) { return p->pos + k < p->len ? (unsigned char)p->s[p->pos + k] : 0; }
static int at_end(const parser *p) { return p->pos >= p->len; }

static int is_word(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'; }

static void space(parser *p, int newline_ok) {
    while (!at_end(p)) {
        int c = peek(p, 0);
        if (c == ' ' || c == '\t' || (newline_ok && (c == '\r' || c == '\n'))) p->pos++;
        else if (c == '#')
            while (!at_end(p) && peek(p, 0) != '\r' && peek(p, 0) != '\n') p->pos++;
        else break;
    }
}

static int new_rule(parser *p, const char *name, size_t n) {
    if (p->n_rules == p->cap_rules) {
        uint32_t cap = (uint32_t)p->cap_rules;
        p->rules = grow(p, p->rules, &cap, (uint32_t)p->n_rules + 1, sizeof *p->rules);
        p->cap_rules = (int)cap;
    }
    prule *r = &p->rules[p->n_rules];
    memset(r, 0, sizeof *r);
    if (!(r->name = malloc(n + 1))) fail_plain(p, "out of memory");
    memcpy(r->name, name, n);
    r->name[n] = 0;
    return p->n_rules++;
}

static int rule_id(parser *p, const char *name, size_t n) {
    for (int i = 0; i < p->n_rules; i++)
        if (strlen(p->rules[i].name) == n && !memcmp(p->rules[i].name, name, n)) return i;
    int id = new_rule(p, name, n);
    p->rules[id].ref_at = p->pos;
    return id;
}

/* a rule of its own for a group or a repetition: "<base>_<n>" */
static int generated_rule(parser *p, int base) {
    char name[300];
    snprintf(name, sizeof name, "%.200s_%d", p->rules[base].name, p->n_rules);
    int id = new_rule(p, name, strlen(name));
    p->rules[id].defined = 1;
    return id;
}

static int new_class(parser *p, int negate) {
    uint32_t cap = (uint32_t)p->cap_cls;
    p->cls = grow(p, p->cls, &cap, (uint32_t)p->n_cls + 1, sizeof *p->cls);
    p->cap_cls = (int)cap;
    p->cls[p->n_cls] = (gclass){.first = p->n_rng, .n = 0, .negate = negate};
    return p->n_cls++;
}

static void class_add(parser *p, int c, uint32_t lo, uint32_t hi) {
    p->rng = grow(p, p->rng, &p->cap_rng, p->n_rng + 1, sizeof *p->rng);
    p->rng[p->n_rng++] = (grange){lo, hi};
    p->cls[c].n++;
}

static uint32_t hex(parser *p, int digits) {
    size_t at = p->pos;
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        int c = peek(p, 0);
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) fail_at(p, at, "expecting %d hex digits", digits);
        v = v << 4 | (uint32_t)d;
        p->pos++;
    }
    return v;
}

/* One character of a literal or a class: an escape or a UTF-8 code point. */
static uint32_t character(parser *p) {
    size_t at = p->pos;
    int c = peek(p, 0);
    if (c == '\\') {
        p->pos++;
        int e = peek(p, 0);
        p->pos++;
        switch (e) {
        case 'x': return hex(p, 2);
        case 'u': return hex(p, 4);
        case 'U': return hex(p, 8);
        case 't': return '\t';
        case 'r': return '\r';
        case 'n': return '\n';
        case '\\': case '"': case '[': case ']': return (uint32_t)e;
        default: fail_at(p, at, "unknown escape '\\%c'", e ? e : '?');
        }
    }
    gutf8 u = {0, 0, 0};
    uint32_t cp = 0;
    for (;;) {
        if (at_end(p)) fail_at(p, at, "unexpected end of input");
        int k = gutf8_byte(&u, (unsigned char)p->s[p->pos++], &cp);
        if (k < 0) fail_at(p, at, "invalid UTF-8");
        if (k > 0) return cp;
    }
}

static int parse_alternates(parser *p, int rule, int nested);

/* The last symbol's elements (from start) repeated min to max times (max < 0: no bound),
 * as llama.cpp rewrites it: S{m,n} is S m times, then S'(n-m) with S'(x) ::= S S'(x-1) |
 * and S'(1) ::= S |; S{m,} is S m times then S' ::= S S' |. */
static void repeat(parser *p, int rule, evec *seq, uint32_t start, long min, long max, long *n_prev, size_t at) {
    if (start == seq->n) fail_at(p, at, "expecting an item before the repetition");
    long total = max > 0 ? max : min > 0 ? min : 1;
    if (*n_prev * total > MAX_REPETITION)
        fail_at(p, at, "repetitions nest to more than %d copies", MAX_REPETITION);
    const uint32_t n = seq->n - start;
    gelem *prev = malloc(n * sizeof *prev);
    if (!prev) fail_plain(p, "out of memory");
    memcpy(prev, seq->el + start, n * sizeof *prev);
    if (min == 0) seq->n = start;
    for (long i = 1; i < min; i++)
        for (uint32_t j = 0; j < n; j++) push(p, seq, prev[j].type, prev[j].value);
    long n_opt = max < 0 ? 1 : max - min;
    int last = -1;
    for (long i = 0; i < n_opt; i++) {
        int id = generated_rule(p, rule);
        evec *b = &p->rules[id].body;
        for (uint32_t j = 0; j < n; j++) push(p, b, prev[j].type, prev[j].value);
        if (max < 0) push(p, b, GE_RULE, (uint32_t)id);
        else if (i > 0) push(p, b, GE_RULE, (uint32_t)last);
        push(p, b, GE_ALT, 0);
        push(p, b, GE_END, 0);
        last = id;
    }
    free(prev);
    if (last >= 0) push(p, seq, GE_RULE, (uint32_t)last);
    *n_prev *= total;
}

static long number(parser *p) {
    size_t at = p->pos;
    long v = 0;
    if (!(peek(p, 0) >= '0' && peek(p, 0) <= '9')) fail_at(p, at, "expecting a number");
    while (peek(p, 0) >= '0' && peek(p, 0) <= '9') {
        if (v > 1000000) fail_at(p, at, "number too large");
        v = v * 10 + (peek(p, 0) - '0');
        p->pos++;
    }
    return v;
}

/* A sequence of items into seq; returns the largest repetition product inside it (for the
 * bound on nested repetitions). */
static long parse_sequence(parser *p, int rule, evec *seq, int nested) {
    uint32_t last_start = seq->n;
    long n_prev = 1, most = 1;
    while (!at_end(p)) {
        const size_t at = p->pos;
        const int c = peek(p, 0);
        if (c == '"') {
            p->pos++;
            last_start = seq->n;
            n_prev = 1;
            while (peek(p, 0) != '"') {
                if (at_end(p)) fail_at(p, at, "unterminated string literal");
                uint32_t cp = character(p);
                int k = new_class(p, 0);
                class_add(p, k, cp, cp);
                push(p, seq, GE_CHAR, (uint32_t)k);
            }
            p->pos++;
        } else if (c == '[') {
            p->pos++;
            last_start = seq->n;
            n_prev = 1;
            int negate = peek(p, 0) == '^';
            if (negate) p->pos++;
            int k = new_class(p, negate);
            while (peek(p, 0) != ']') {
                if (at_end(p)) fail_at(p, at, "unterminated character class");
                uint32_t lo = character(p), hi = lo;
                if (peek(p, 0) == '-' && peek(p, 1) != ']' && p->pos + 1 < p->len) {
                    p->pos++;
                    size_t rat = p->pos;
                    hi = character(p);
                    if (hi < lo) fail_at(p, rat, "character range out of order");
                }
                class_add(p, k, lo, hi);
            }
            p->pos++;
            push(p, seq, GE_CHAR, (uint32_t)k);
        } else if (is_word(c)) {
            size_t s = p->pos;
            while (is_word(peek(p, 0))) p->pos++;
            last_start = seq->n;
            n_prev = 1;
            size_t keep = p->pos;
            p->pos = s; /* a first reference is remembered where the name starts */
            int id = rule_id(p, p->s + s, keep - s);
            p->pos = keep;
            push(p, seq, GE_RULE, (uint32_t)id);
        } else if (c == '(') {
            int line, col;
            p->pos++;
            space(p, 1);
            int id = generated_rule(p, rule);
            n_prev = parse_alternates(p, id, 1);
            if (peek(p, 0) != ')') fail_at(p, p->pos, "expecting ')' (the group opened at line %d)", (where(p, at, &line, &col), line));
            p->pos++;
            last_start = seq->n;
            push(p, seq, GE_RULE, (uint32_t)id);
        } else if (c == '.') {
            p->pos++;
            last_start = seq->n;
            n_prev = 1;
            push(p, seq, GE_CHAR, (uint32_t)new_class(p, 1));
        } else if (c == '*' || c == '+' || c == '?') {
            p->pos++;
            repeat(p, rule, seq, last_start, c == '+' ? 1 : 0, c == '?' ? 1 : -1, &n_prev, at);
        } else if (c == '{') {
            p->pos++;
            space(p, nested);
            long min = number(p), max = min;
            space(p, nested);
            if (peek(p, 0) == ',') {
                p->pos++;
                space(p, nested);
                max = peek(p, 0) >= '0' && peek(p, 0) <= '9' ? number(p) : -1;
                space(p, nested);
            }
            if (peek(p, 0) != '}') fail_at(p, p->pos, "expecting '}'");
            p->pos++;
            if (min > MAX_REPETITION) fail_at(p, at, "a repetition of more than %d", MAX_REPETITION);
            if (max > MAX_REPETITION) max = -1; /* as llama.cpp: a bound past it is no bound */
            if (max >= 0 && max < min) fail_at(p, at, "a repetition {%ld,%ld} with its bounds out of order", min, max);
            repeat(p, rule, seq, last_start, min, max, &n_prev, at);
        } else
            break;
        if (n_prev > most) most = n_prev;
        space(p, nested);
    }
    return most;
}

/* rule ::= alternatives, into the rule's body */
static int parse_alternates(parser *p, int rule, int nested) {
    /* on the heap, in the parser's list: an error's longjmp leaves it to grammar_compile */
    evec *v = calloc(1, sizeof *v);
    if (!v) fail_plain(p, "out of memory");
    v->outer = p->open;
    p->open = v;
    long most = parse_sequence(p, rule, v, nested);
    while (peek(p, 0) == '|') {
        push(p, v, GE_ALT, 0);
        p->pos++;
        space(p, 1);
        long k = parse_sequence(p, rule, v, nested);
        if (k > most) most = k;
    }
    push(p, v, GE_END, 0);
    p->open = v->outer;
    v->outer = NULL;
    free(p->rules[rule].body.el);
    p->rules[rule].body = *v;
    free(v);
    return (int)most;
}

static void parse_rule(parser *p) {
    size_t at = p->pos;
    while (is_word(peek(p, 0))) p->pos++;
    if (p->pos == at) fail_at(p, at, "expecting a rule name");
    int id = rule_id(p, p->s + at, p->pos - at);
    if (p->rules[id].defined) fail_at(p, at, "rule '%s' is defined twice", p->rules[id].name);
    p->rules[id].defined = 1;
    space(p, 0);
    if (!(peek(p, 0) == ':' && peek(p, 1) == ':' && peek(p, 2) == '=')) fail_at(p, p->pos, "expecting '::='");
    p->pos += 3;
    space(p, 1);
    parse_alternates(p, id, 0);
    if (peek(p, 0) == '\r') p->pos += peek(p, 1) == '\n' ? 2 : 1;
    else if (peek(p, 0) == '\n') p->pos++;
    else if (!at_end(p)) fail_at(p, p->pos, "unexpected '%c' (expecting the end of the rule)", peek(p, 0));
    space(p, 1);
}

/* nullable[r]: rule r matches the empty text */
static void nullable_rules(const grammar *g, unsigned char *nullable) {
    for (int changed = 1; changed;) {
        changed = 0;
        for (int r = 0; r < g->n_rules; r++) {
            if (nullable[r]) continue;
            const gelem *e = g->el + g->rule_start[r];
            for (;;) { /* each alternative */
                int all = 1;
                for (; e->type != GE_ALT && e->type != GE_END; e++)
                    if (e->type == GE_CHAR || !nullable[e->value]) all = 0;
                if (all) {
                    nullable[r] = 1, changed = 1;
                    break;
                }
                if (e->type == GE_END) break;
                e++;
            }
        }
    }
}

/* The left edges: "r may start with s" (s after nothing but rules that match the empty
 * text, in one of r's alternatives), each marked growing when more of the alternative
 * follows s. A cycle of left edges is left recursion; one of only non-growing edges is
 * harmless (the expansion comes back to the same stack and stops there, as llama.cpp's
 * does for ( [x]* )*), one with a growing edge would grow the stack forever. */
typedef struct {
    int *to;
    unsigned char *grows;
    int n, cap;
} edges;

static int add_edge(edges *e, int to, int grows) {
    if (e->n == e->cap) {
        int c = e->cap ? 2 * e->cap : 8;
        int *t = realloc(e->to, (size_t)c * sizeof *t);
        if (!t) return -1;
        e->to = t;
        unsigned char *gr = realloc(e->grows, (size_t)c);
        if (!gr) return -1;
        e->grows = gr, e->cap = c;
    }
    e->to[e->n] = to, e->grows[e->n++] = (unsigned char)grows;
    return 0;
}

static int left_edges(const grammar *g, const unsigned char *nullable, edges *out) {
    for (int r = 0; r < g->n_rules; r++) {
        const gelem *e = g->el + g->rule_start[r];
        for (;;) {
            for (; e->type != GE_ALT && e->type != GE_END; e++) {
                if (e->type == GE_CHAR) break;
                if (add_edge(&out[r], (int)e->value, e[1].type != GE_ALT && e[1].type != GE_END) != 0) return -1;
                if (!nullable[e->value]) break;
            }
            while (e->type != GE_ALT && e->type != GE_END) e++;
            if (e->type == GE_END) break;
            e++;
        }
    }
    return 0;
}

/* 1 when rule to is reached from rule from over left edges (seen: scratch, cleared) */
static int reaches(const edges *ed, int from, int to, unsigned char *seen, int *todo) {
    int n = 0;
    todo[n++] = from;
    seen[from] = 1;
    while (n) {
        int r = todo[--n];
        if (r == to) return 1;
        for (int i = 0; i < ed[r].n; i++)
            if (!seen[ed[r].to[i]]) seen[ed[r].to[i]] = 1, todo[n++] = ed[r].to[i];
    }
    return 0;
}

/* A rule that is left-recursive, or -1 (-2: out of memory). */
static int left_recursive(const grammar *g, const unsigned char *nullable) {
    const int R = g->n_rules;
    edges *ed = calloc((size_t)R, sizeof *ed);
    unsigned char *seen = malloc((size_t)R);
    int *todo = malloc((size_t)R * sizeof *todo), found = -2;
    if (ed && seen && todo && left_edges(g, nullable, ed) == 0) {
        found = -1;
        for (int r = 0; r < R && found < 0; r++)
            for (int i = 0; i < ed[r].n && found < 0; i++) {
                if (!ed[r].grows[i]) continue;
                memset(seen, 0, (size_t)R);
                if (reaches(ed, ed[r].to[i], r, seen, todo)) found = r;
            }
    }
    for (int r = 0; ed && r < R; r++) free(ed[r].to), free(ed[r].grows);
    free(ed);
    free(seen);
    free(todo);
    return found;
}

/* Marks the productive rules: those that can complete, i.e. with an alternative of nothing
 * but characters of non-empty classes and productive rules (the least fixed point). A
 * root that is not productive admits no text at all (`a ::= "x" a` with no way out): the
 * mask would allow nothing from the first token on, so such a grammar is refused. */
static int class_empty(const grammar *g, const gclass *c) {
    if (!c->negate) return c->n == 0;
    for (uint32_t i = 0; i < c->n; i++)
        if (g->rng[c->first + i].lo == 0 && g->rng[c->first + i].hi >= 0x10ffff) return 1;
    return 0;
}

static void productive_rules(const grammar *g, unsigned char *prod) {
    for (int changed = 1; changed;) {
        changed = 0;
        for (int r = 0; r < g->n_rules; r++) {
            if (prod[r]) continue;
            const gelem *e = g->el + g->rule_start[r];
            for (int ok = 1;; e++) {
                if (e->type == GE_ALT || e->type == GE_END) {
                    if (ok) {
                        prod[r] = 1, changed = 1;
                        break;
                    }
                    if (e->type == GE_END) break;
                    ok = 1;
                } else if (e->type == GE_CHAR) ok &= !class_empty(g, &g->cls[e->value]);
                else ok &= prod[e->value];
            }
        }
    }
}

static void ascii_tables(grammar *g) {
    for (int k = 0; k < g->n_cls; k++) {
        gclass *c = &g->cls[k];
        c->ascii[0] = c->ascii[1] = 0;
        for (uint32_t cp = 0; cp < 128; cp++) {
            int in = 0;
            for (uint32_t i = 0; i < c->n && !in; i++) in = g->rng[c->first + i].lo <= cp && cp <= g->rng[c->first + i].hi;
            if (in != c->negate) c->ascii[cp >> 6] |= 1ull << (cp & 63);
        }
    }
}

void grammar_free(grammar *g) {
    if (!g) return;
    free(g->el);
    free(g->rule_start);
    free(g->cls);
    free(g->rng);
    free(g);
}

int grammar_n_rules(const grammar *g) { return g->n_rules; }

grammar *grammar_compile(const char *text, size_t len, char *err, size_t errlen) {
    parser p = {.s = text ? text : "", .len = text ? len : 0, .err = err, .errlen = errlen};
    grammar *volatile g = NULL;
    unsigned char *volatile marks = NULL;
    if (setjmp(p.fail)) {
        grammar_free(g);
        free(marks);
        for (evec *v = p.open, *o; v; v = o) o = v->outer, free(v->el), free(v);
        for (int i = 0; i < p.n_rules; i++) free(p.rules[i].name), free(p.rules[i].body.el);
        free(p.rules);
        free(p.cls);
        free(p.rng);
        return NULL;
    }
    space(&p, 1);
    if (at_end(&p)) fail_plain(&p, "the grammar is empty (it needs a 'root' rule)");
    while (!at_end(&p)) parse_rule(&p);
    int root = -1;
    for (int i = 0; i < p.n_rules; i++) {
        if (!p.rules[i].defined) fail_at(&p, p.rules[i].ref_at, "undefined rule '%s'", p.rules[i].name);
        if (!strcmp(p.rules[i].name, "root")) root = i;
    }
    if (root < 0) fail_plain(&p, "no rule named 'root' (where matching starts)");
    g = calloc(1, sizeof *g);
    if (!g) fail_plain(&p, "out of memory");
    size_t n_el = 0;
    for (int i = 0; i < p.n_rules; i++) n_el += p.rules[i].body.n;
    g->el = malloc(n_el * sizeof *g->el);
    g->rule_start = malloc((size_t)p.n_rules * sizeof *g->rule_start);
    if (!g->el || !g->rule_start) fail_plain(&p, "out of memory");
    n_el = 0;
    for (int i = 0; i < p.n_rules; i++) {
        g->rule_start[i] = (uint32_t)n_el;
        memcpy(g->el + n_el, p.rules[i].body.el, p.rules[i].body.n * sizeof *g->el);
        n_el += p.rules[i].body.n;
    }
    g->n_rules = p.n_rules;
    g->root = root;
    g->cls = p.cls, g->n_cls = p.n_cls, g->rng = p.rng;
    p.cls = NULL, p.rng = NULL, p.n_cls = 0;
    ascii_tables(g);
    marks = calloc((size_t)g->n_rules, 1);
    if (!marks) fail_plain(&p, "out of memory");
    nullable_rules(g, marks);
    int k = left_recursive(g, marks);
    if (k == -2) fail_plain(&p, "out of memory");
    if (k >= 0) fail_plain(&p, "rule '%s' is left-recursive (it can reach itself before any character)", p.rules[k].name);
    memset(marks, 0, (size_t)g->n_rules);
    productive_rules(g, marks);
    if (!marks[g->root]) fail_plain(&p, "the grammar admits no text: rule 'root' can never be completed (each way "
                                        "through it needs a rule that never ends)");
    free(marks);
    for (int i = 0; i < p.n_rules; i++) free(p.rules[i].name), free(p.rules[i].body.el);
    free(p.rules);
    return g;
}
