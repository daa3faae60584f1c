/* jinja.c - the API: compile a template once, render it with JSON variables. */
#include "engine/jinja/jinja.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/jinja/eval.h"
#include "engine/jinja/lexer.h"

#define COMPILE_MEMORY (256u << 20)

static char *dup_text(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

static int find_sym(const jinja_template *t, const char *name, size_t n) {
    for (int i = 0; i < t->nsyms; i++)
        if (t->syms[i].n == n && memcmp(t->syms[i].p, name, n) == 0) return i;
    return -1;
}

/* the part of compiling that can fail: 0 with c->error set, or 1 */
static int compile_into(jcompile *c, const char *text, size_t len) {
    jinja_template *t = c->t;
    if (setjmp(c->jmp)) return 0;
    if (!text && len) jc_fail(c, 0, "no template text");
    jlex(c, text ? text : "", len);
    t->body = jparse(c);
    t->nsyms = c->nsyms;
    t->syms = c->syms;
    t->sym_global = jc_alloc(c, sizeof(int) * (size_t)(c->nsyms + 1));
    for (int i = 0; i < c->nsyms; i++) t->sym_global[i] = jglobal_find(t->syms[i].p, t->syms[i].n);
    t->sym_loop = find_sym(t, "loop", 4);
    t->sym_caller = find_sym(t, "caller", 6);
    t->sym_varargs = find_sym(t, "varargs", 7);
    t->sym_kwargs = find_sym(t, "kwargs", 6);
    return 1;
}

jinja_template *jinja_compile(const char *text, size_t len, char **error) {
    if (error) *error = NULL;
    jinja_template *t = calloc(1, sizeof *t);
    jcompile *c = calloc(1, sizeof *c);
    if (!t || !c) {
        free(t);
        free(c);
        if (error) *error = dup_text("out of memory");
        return NULL;
    }
    t->arena.limit = COMPILE_MEMORY;
    c->t = t;
    if (!compile_into(c, text, len)) {
        if (error) *error = dup_text(c->error);
        jarena_free(&t->arena);
        free(t);
        t = NULL;
    }
    free(c);
    return t;
}

int jinja_uses_variable(const jinja_template *t, const char *name) {
    return t && name && find_sym(t, name, strlen(name)) >= 0;
}

void jinja_free(jinja_template *t) {
    if (!t) return;
    jarena_free(&t->arena);
    free(t);
}

/* ---- JSON to values ---- */

static jv from_json(jr *r, const cJSON *j) {
    if (cJSON_IsString(j)) return jv_str(r, j->valuestring, strlen(j->valuestring));
    if (cJSON_IsTrue(j)) return jv_bool(1);
    if (cJSON_IsFalse(j)) return jv_bool(0);
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        /* Python's json gives an int for 5 and a float for 5.5; cJSON keeps only the double */
        if (d == floor(d) && fabs(d) <= 9007199254740992.0) return jv_int((int64_t)d);
        return jv_float(d);
    }
    if (cJSON_IsArray(j)) {
        jr_enter(r);
        jv l = jv_list_new(r, (uint32_t)cJSON_GetArraySize(j));
        for (const cJSON *e = j->child; e; e = e->next) jv_list_push(r, &l, from_json(r, e));
        jr_leave(r);
        return l;
    }
    if (cJSON_IsObject(j)) {
        jr_enter(r);
        jv d = jv_dict_new(r, (uint32_t)cJSON_GetArraySize(j));
        for (const cJSON *e = j->child; e; e = e->next) {
            const char *k = e->string ? e->string : "";
            jv_dict_set(r, &d, jv_str(r, k, strlen(k)), from_json(r, e));
        }
        jr_leave(r);
        return d;
    }
    return jv_none();
}

/* the part of rendering that can fail: 0 with r->error set, or 1 with the output in *res */
static int render_into(jr *r, const cJSON *vars, jbuf *res) {
    jmp_buf jmp;
    r->jmp = &jmp;
    if (setjmp(jmp)) return 0;
    const jinja_template *t = r->t;
    /* the root scope: a slot per symbol, filled from vars */
    jscope *root = jscope_new(r, NULL);
    root->dense = 1;
    root->vals = jr_alloc(r, sizeof(jv) * (size_t)(t->nsyms + 1));
    for (int i = 0; i < t->nsyms; i++) root->vals[i] = jv_absent();
    if (vars && cJSON_IsObject(vars))
        for (const cJSON *e = vars->child; e; e = e->next) {
            if (!e->string) continue;
            int sym = find_sym(t, e->string, strlen(e->string));
            if (sym >= 0) root->vals[sym] = from_json(r, e);  /* names the template never uses are skipped */
        }
    r->root = r->scope = root;
    jbuf_init(r, res, 4096);
    r->out = res;
    jexec(r, t->body);
    return 1;
}

int jinja_render(const jinja_template *t, const cJSON *vars, const jinja_options *opt, char **out, size_t *out_len,
                 char **error) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (error) *error = NULL;
    jinja_options o = {0};
    if (opt) o = *opt;
    jr *r = calloc(1, sizeof *r);
    if (!r) {
        if (error) *error = dup_text("out of memory");
        return JINJA_ERROR;
    }
    r->t = t;
    r->max_output = o.max_output ? o.max_output : JINJA_DEFAULT_MAX_OUTPUT;
    if (r->max_output > UINT32_MAX / 2) r->max_output = UINT32_MAX / 2;  /* string lengths are 32-bit */
    r->arena.limit = o.max_memory ? o.max_memory : JINJA_DEFAULT_MAX_MEMORY;
    r->max_steps = o.max_steps ? o.max_steps : JINJA_DEFAULT_MAX_STEPS;
    r->max_depth = o.max_depth > 0 ? o.max_depth : JINJA_DEFAULT_MAX_DEPTH;
    r->fixed_time = o.fixed_time;
    r->now = o.now;
    r->line = 1;
    jbuf res = {0};
    int kind = JINJA_OK;
    if (!render_into(r, vars, &res)) {
        kind = r->error_kind ? r->error_kind : JINJA_ERROR;
        if (error) *error = r->error ? r->error : dup_text("out of memory");
        else free(r->error);
    } else {
        char *text = malloc(res.len + 1);
        if (text) {
            memcpy(text, res.p, res.len);
            text[res.len] = 0;
            *out = text;
            if (out_len) *out_len = res.len;
        } else {
            kind = JINJA_LIMIT;
            if (error) *error = dup_text("out of memory");
        }
    }
    jarena_free(&r->arena);
    free(r);
    return kind;
}
