/* call.c - a call as a family's reader builds it: the name checked against the offered
 * functions, each argument's key (a repeat dropped, an unknown one reported), the required
 * parameters, and the finished call appended to the reply with the next index. */
#include "engine/toolcall/toolcall_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tc_build_problem(struct tc_call_build *cb, const char *fmt, ...) {
    if (cb->problem.n) strbuf_adds(&cb->problem, "; ");
    va_list ap;
    va_start(ap, fmt);
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    strbuf_adds(&cb->problem, line);
}

/* a name or key quoted for a problem line, cut to a readable length */
#define SHOW(len) (int)((len) > 80 ? 80 : (len))

void tc_build_begin(struct tc_scan *sc, struct tc_call_build *cb, const char *name, size_t len) {
    *cb = (struct tc_call_build){0};
    strbuf_add(&cb->name, name, len);
    strbuf_addc(&cb->args, '{');
    if (!sc->tools) return;
    cb->tool = tc_tools_find(sc->tools, name, len);
    if (!cb->tool) tc_build_problem(cb, "%.*s is not an offered function", SHOW(len), name);
}

bool tc_build_key(struct tc_scan *sc, struct tc_call_build *cb, const char *key, size_t len,
                  const struct tc_param **param) {
    *param = cb->tool ? tc_tool_param(cb->tool, key, len) : NULL;
    for (size_t k = 0; k < cb->keys.n; k += strlen(cb->keys.s + k) + 1) {
        if (strlen(cb->keys.s + k) == len && memcmp(cb->keys.s + k, key, len) == 0) {
            tc_build_problem(cb, "%.*s given twice (the first kept)", SHOW(len), key);
            return false;
        }
    }
    strbuf_add(&cb->keys, key, len);
    strbuf_addc(&cb->keys, 0);
    if (cb->tool && !*param)
        tc_build_problem(cb, "%.*s is not a parameter of %s", SHOW(len), key, cb->tool->name);
    if (cb->n_args++) strbuf_addc(&cb->args, ',');
    tc_add_json_string(&cb->args, key, len);
    strbuf_addc(&cb->args, ':');
    (void)sc;
    return true;
}

void tc_build_drop(struct tc_call_build *cb) {
    strbuf_free(&cb->name);
    strbuf_free(&cb->args);
    strbuf_free(&cb->problem);
    strbuf_free(&cb->keys);
}

static bool given(const struct tc_call_build *cb, const char *key) {
    for (size_t k = 0; k < cb->keys.n; k += strlen(cb->keys.s + k) + 1)
        if (strcmp(cb->keys.s + k, key) == 0) return true;
    return false;
}

bool tc_build_end(struct tc_scan *sc, struct tc_call_build *cb, size_t start, size_t end) {
    if (!cb->args_done) strbuf_addc(&cb->args, '}');
    if (cb->tool)
        for (int k = 0; k < cb->tool->n_params; k++)
            if (cb->tool->params[k].required && !given(cb, cb->tool->params[k].name))
                tc_build_problem(cb, "the required parameter %s is missing", cb->tool->params[k].name);
    struct tc_reply *r = sc->reply;
    /* a reply holds a few calls: one more slot each time */
    struct tc_call *c = realloc(r->calls, ((size_t)r->n_calls + 1) * sizeof *c);
    if (!c) {
        tc_build_drop(cb);
        return sc->oom = true, false;
    }
    r->calls = c;
    bool oom = cb->name.failed || cb->args.failed || cb->problem.failed || cb->keys.failed;
    struct tc_call call = {.index = r->n_calls, .start = start, .end = end};
    call.name = strbuf_take(&cb->name);
    call.arguments = strbuf_take(&cb->args);
    call.problem = cb->problem.n ? strbuf_take(&cb->problem) : NULL;
    tc_build_drop(cb);
    if (oom || !call.name || !call.arguments) {
        free(call.name), free(call.arguments), free(call.problem);
        return sc->oom = true, false;
    }
    r->calls[r->n_calls++] = call;
    return true;
}
