/* json_call.c - the JSON object of a Hermes or Llama 3 call, {"name": ..., "arguments":
 * {...}}: the name, and the arguments object as the model wrote it, minified (its keys in
 * the model's order, its numbers and strings untouched). An arguments value that is a
 * string holding a JSON object (as OpenAI's function.arguments) is unwrapped. The keys of
 * the arguments are checked against the offered function; the values are not converted:
 * they are typed JSON already. */
#include "engine/toolcall/toolcall_impl.h"

#include <string.h>

struct member {
    size_t key, key_end;  /* the key's literal, quotes included */
    size_t val, val_end;
};

/* the next member of an object at p (after '{' or ','): TC_OK, or TC_BAD on anything else;
 * the object was scanned whole before, so the text does not end inside it */
static enum tc_read next_member(const char *s, size_t p, size_t n, struct member *m, size_t *after) {
    p = tc_skip_space(s, p, n);
    if (p >= n || s[p] != '"') return TC_BAD;
    m->key = p;
    if (tc_json_value(s, p, n, &m->key_end) != TC_OK) return TC_BAD;
    p = tc_skip_space(s, m->key_end, n);
    if (p >= n || s[p] != ':') return TC_BAD;
    m->val = p = tc_skip_space(s, p + 1, n);
    enum tc_read r = tc_json_value(s, p, n, &m->val_end);
    if (r == TC_MORE && m->val_end > m->val && m->val_end <= n) r = TC_OK; /* a number at the end */
    if (r != TC_OK) return TC_BAD;
    *after = tc_skip_space(s, m->val_end, n);
    return TC_OK;
}

static bool key_is(const char *s, const struct member *m, const char *key) {
    size_t k = strlen(key);
    return m->key_end - m->key == k + 2 && memcmp(s + m->key + 1, key, k) == 0;
}

/* the members of the object s[i, end): calls fn on each; false when it is not an object */
static bool each_member(const char *s, size_t i, size_t end, bool (*fn)(void *, const char *, const struct member *),
                        void *arg) {
    size_t p = tc_skip_space(s, i + 1, end);
    if (p < end && s[p] == '}') return true;
    for (;;) {
        struct member m;
        if (next_member(s, p, end, &m, &p) != TC_OK) return false;
        if (!fn(arg, s, &m)) return false;
        if (p < end && s[p] == '}') return true;
        if (p >= end || s[p] != ',') return false;
        p++;
    }
}

struct call_fields {
    const char *args_key, *args_key2;
    bool type_field;
    struct member name, args;
    bool has_name, has_args, bad;
};

static bool take_field(void *arg, const char *s, const struct member *m) {
    struct call_fields *f = arg;
    if (key_is(s, m, "name")) {
        if (f->has_name || s[m->val] != '"') return false;
        f->name = *m, f->has_name = true;
    } else if (key_is(s, m, f->args_key) || (f->args_key2 && key_is(s, m, f->args_key2))) {
        if (f->has_args) return false;
        f->args = *m, f->has_args = true;
    } else if (key_is(s, m, "type")) {
        /* the OpenAI wrapper's "type": "function" */
        if (!f->type_field || m->val_end - m->val != 10 || memcmp(s + m->val, "\"function\"", 10) != 0) return false;
    }
    /* other keys (an "id") are left alone, as llama.cpp's optional id fields */
    return true;
}

struct key_check {
    struct tc_scan *sc;
    struct tc_call_build *cb;
    strbuf key;
};

static bool check_key(void *arg, const char *s, const struct member *m) {
    struct key_check *k = arg;
    k->key.n = 0;
    size_t e;
    if (tc_json_string(s, m->key, m->key_end, &k->key, &e) != TC_OK) return false;
    const struct tc_param *param;
    size_t before = k->cb->args.n;
    tc_build_key(k->sc, k->cb, k->key.s ? k->key.s : "", k->key.n, &param);
    k->cb->args.n = before; /* only the checks: the text is the model's */
    return true;
}

enum tc_read tc_json_call(struct tc_scan *sc, size_t i, const char *args_key, const char *args_key2,
                          bool type_field, bool need_args, size_t *end) {
    const char *s = sc->s;
    size_t n = sc->n, e;
    enum tc_read r = tc_json_value(s, i, n, &e);
    if (r != TC_OK) return r;
    struct call_fields f = {.args_key = args_key, .args_key2 = args_key2, .type_field = type_field};
    if (!each_member(s, i, e, take_field, &f) || !f.has_name || (need_args && !f.has_args)) return TC_BAD;

    strbuf name = {0};
    size_t ne;
    if (tc_json_string(s, f.name.val, f.name.val_end, &name, &ne) != TC_OK || name.failed) {
        strbuf_free(&name);
        return name.failed ? (sc->oom = true, TC_BAD) : TC_BAD;
    }
    /* the arguments: an object, a string holding one, or none (no arguments) */
    strbuf unwrapped = {0};
    const char *as = s;
    size_t a0 = 0, a1 = 0;
    if (f.has_args && s[f.args.val] == '"') {
        size_t ue;
        if (tc_json_string(s, f.args.val, f.args.val_end, &unwrapped, &ue) == TC_OK && unwrapped.n &&
            tc_json_whole(unwrapped.s, 0, unwrapped.n)) {
            as = unwrapped.s;
            a0 = tc_skip_space(as, 0, unwrapped.n);
            a1 = unwrapped.n;
            while (a1 > a0 && tc_space(as[a1 - 1])) a1--;
        }
    } else if (f.has_args) {
        a0 = f.args.val, a1 = f.args.val_end;
    }
    if (f.has_args && (a1 <= a0 || as[a0] != '{')) {
        strbuf_free(&name), strbuf_free(&unwrapped);
        return TC_BAD;
    }

    struct tc_call_build cb;
    tc_build_begin(sc, &cb, name.s ? name.s : "", name.n);
    strbuf_free(&name);
    if (f.has_args) {
        struct key_check k = {.sc = sc, .cb = &cb};
        each_member(as, a0, a1, check_key, &k);
        strbuf_free(&k.key);
        cb.args.n = 0;
        tc_json_minify(&cb.args, as, a0, a1);
    } else {
        strbuf_addc(&cb.args, '}');
    }
    strbuf_free(&unwrapped);
    cb.args_done = true;
    *end = e;
    return tc_build_end(sc, &cb, i, e) ? TC_OK : TC_BAD;
}
