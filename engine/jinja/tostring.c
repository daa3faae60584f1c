/* tostring.c - values as Python writes them: str(), repr() and json.dumps(). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/jinja/eval.h"
#include "engine/jinja/pyunicode.h"

/* repr(float): the shortest digits that read back as the same double, in fixed notation
 * when the decimal point falls within 16 digits of the first one, else as d.ddde+XX */
int py_float_repr(double f, char *buf) {
    if (isnan(f)) return sprintf(buf, "nan");
    if (isinf(f)) return sprintf(buf, f > 0 ? "inf" : "-inf");
    char tmp[48];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp is [-]d[.ddd]e[+-]XX (the decimal point may be the locale's) */
    const char *p = tmp;
    int neg = *p == '-';
    if (neg) p++;
    char digits[24];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && nd < 20) digits[nd++] = *p;
    int exp10 = *p == 'e' ? atoi(p + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    int decpt = exp10 + 1;  /* value = 0.digits * 10^decpt */
    char *o = buf;
    if (neg) *o++ = '-';
    if (decpt <= -4 || decpt > 16) {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, (size_t)nd - 1);
            o += nd - 1;
        }
        o += sprintf(o, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    } else if (decpt <= 0) {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -decpt; i++) *o++ = '0';
        memcpy(o, digits, (size_t)nd);
        o += nd;
    } else if (decpt < nd) {
        memcpy(o, digits, (size_t)decpt);
        o += decpt;
        *o++ = '.';
        memcpy(o, digits + decpt, (size_t)(nd - decpt));
        o += nd - decpt;
    } else {
        memcpy(o, digits, (size_t)nd);
        o += nd;
        for (int i = nd; i < decpt; i++) *o++ = '0';
        *o++ = '.';
        *o++ = '0';
    }
    *o = 0;
    return (int)(o - buf);
}

static void write_str_repr(jr *r, jbuf *b, const char *s, size_t n) {
    int has_single = memchr(s, '\'', n) != NULL, has_double = memchr(s, '"', n) != NULL;
    char quote = has_single && !has_double ? '"' : '\'';
    jbuf_putc(r, b, quote);
    size_t i = 0;
    while (i < n) {
        size_t adv;
        uint32_t c = u8_decode(s + i, n - i, &adv);
        if (c == (uint32_t)quote || c == '\\') {
            jbuf_putc(r, b, '\\');
            jbuf_putc(r, b, (char)c);
        } else if (c == '\t') jbuf_puts(r, b, "\\t");
        else if (c == '\n') jbuf_puts(r, b, "\\n");
        else if (c == '\r') jbuf_puts(r, b, "\\r");
        else if (c & PY_BAD_BYTE) jbuf_printf(r, b, "\\udc%02x", c & 0xFF);  /* surrogateescape */
        else if (py_isprintable(c)) jbuf_put(r, b, s + i, adv);
        else if (c <= 0xFF) jbuf_printf(r, b, "\\x%02x", c);
        else if (c <= 0xFFFF) jbuf_printf(r, b, "\\u%04x", c);
        else jbuf_printf(r, b, "\\U%08x", c);
        i += adv;
    }
    jbuf_putc(r, b, quote);
}

static void write_value(jr *r, jbuf *b, jv v, int repr);

static void write_seq(jr *r, jbuf *b, const jlist *l, const char *open, const char *close, int tuple) {
    jbuf_puts(r, b, open);
    for (uint32_t i = 0; i < l->n; i++) {
        if (i) jbuf_put(r, b, ", ", 2);
        write_value(r, b, l->v[i], 1);
    }
    if (tuple && l->n == 1) jbuf_putc(r, b, ',');
    jbuf_puts(r, b, close);
}

static void write_dict(jr *r, jbuf *b, const jdict *d) {
    jbuf_putc(r, b, '{');
    for (uint32_t i = 0; i < d->n; i++) {
        if (i) jbuf_put(r, b, ", ", 2);
        write_value(r, b, d->keys[i], 1);
        jbuf_put(r, b, ": ", 2);
        write_value(r, b, d->vals[i], 1);
    }
    jbuf_putc(r, b, '}');
}

static void write_value(jr *r, jbuf *b, jv v, int repr) {
    char num[48];
    switch (v.kind) {
    case JV_UNDEFINED: if (repr) jbuf_puts(r, b, "Undefined"); return;
    case JV_NONE: jbuf_puts(r, b, "None"); return;
    case JV_BOOL: jbuf_puts(r, b, v.u.i ? "True" : "False"); return;
    case JV_INT: jbuf_printf(r, b, "%lld", (long long)v.u.i); return;
    case JV_FLOAT: jbuf_put(r, b, num, (size_t)py_float_repr(v.u.f, num)); return;
    case JV_STR:
        if (repr && v.sub == JS_MARKUP) {
            jbuf_puts(r, b, "Markup(");
            write_str_repr(r, b, v.u.s, v.len);
            jbuf_putc(r, b, ')');
        } else if (repr) write_str_repr(r, b, v.u.s, v.len);
        else jbuf_put(r, b, v.u.s, v.len);
        return;
    default: break;
    }
    jr_enter(r);
    switch (v.kind) {
    case JV_LIST:
        if (v.sub == JL_RANGE) {
            const jlist *l = v.u.list;
            if (l->step == 1) jbuf_printf(r, b, "range(%lld, %lld)", (long long)l->start, (long long)l->stop);
            else jbuf_printf(r, b, "range(%lld, %lld, %lld)", (long long)l->start, (long long)l->stop, (long long)l->step);
        } else if (v.sub == JL_TUPLE) write_seq(r, b, v.u.list, "(", ")", 1);
        else if (v.sub == JL_KEYS) write_seq(r, b, v.u.list, "dict_keys([", "])", 0);
        else if (v.sub == JL_VALUES) write_seq(r, b, v.u.list, "dict_values([", "])", 0);
        else if (v.sub == JL_ITEMS) write_seq(r, b, v.u.list, "dict_items([", "])", 0);
        else if (v.sub == JL_GEN) jbuf_puts(r, b, "<generator object>");
        else if (v.sub == JL_REVERSED) jbuf_puts(r, b, "<list_reverseiterator object>");
        else write_seq(r, b, v.u.list, "[", "]", 0);
        break;
    case JV_DICT: write_dict(r, b, v.u.dict); break;
    case JV_NS:
        jbuf_puts(r, b, "<Namespace ");
        write_dict(r, b, v.u.dict);
        jbuf_putc(r, b, '>');
        break;
    case JV_FUNC: {
        const jfunc *f = v.u.fn;
        if (f->kind == JF_MACRO) jbuf_printf(r, b, "<Macro '%.*s'>", f->name_len, f->name);
        else if (f->kind == JF_JOINER) jbuf_puts(r, b, "<jinja2.utils.Joiner object>");
        else if (f->kind == JF_CYCLER) jbuf_puts(r, b, "<jinja2.utils.Cycler object>");
        else if (f->repr) jbuf_puts(r, b, f->repr);
        else if (f->self.kind != JV_ABSENT)
            jbuf_printf(r, b, "<built-in method %s of %s object>", f->name, jv_type_name(f->self));
        else jbuf_printf(r, b, "<built-in function %s>", f->name);
        break;
    }
    case JV_LOOP: jbuf_printf(r, b, "<LoopContext %u/%u>", v.u.loop->i + 1, v.u.loop->n); break;
    default: break;
    }
    jr_leave(r);
}

void jv_write_str(jr *r, jbuf *b, jv v) { write_value(r, b, v, 0); }
void jv_write_repr(jr *r, jbuf *b, jv v) { write_value(r, b, v, 1); }

jv jv_to_str(jr *r, jv v) {
    if (v.kind == JV_STR) return v;
    if (v.kind == JV_UNDEFINED) return jv_cstr("");
    if (v.kind == JV_BOOL) return jv_cstr(v.u.i ? "True" : "False");
    if (v.kind == JV_NONE) return jv_cstr("None");
    jbuf b;
    jbuf_init(r, &b, 32);
    write_value(r, &b, v, 0);
    return jbuf_value(&b);
}

jv jv_to_repr(jr *r, jv v) {
    jbuf b;
    jbuf_init(r, &b, 32);
    write_value(r, &b, v, 1);
    return jbuf_value(&b);
}

/* ---- json.dumps ---- */

void jjson_default_opts(jjson_opts *o) {
    memset(o, 0, sizeof *o);
    o->indent = -1;
    o->item_sep = ", ";
    o->item_sep_len = 2;
    o->key_sep = ": ";
    o->key_sep_len = 2;
}

static void json_string(jr *r, jbuf *b, const char *s, size_t n, int ensure_ascii) {
    jbuf_putc(r, b, '"');
    size_t i = 0, run = 0;  /* bytes [run, i) are copied as they are */
    while (i < n) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch != '"' && ch != '\\' && (!ensure_ascii || ch < 0x7F)) {
            i++;
            continue;
        }
        jbuf_put(r, b, s + run, i - run);
        size_t adv = 1;
        switch (ch) {
        case '"': jbuf_puts(r, b, "\\\""); break;
        case '\\': jbuf_puts(r, b, "\\\\"); break;
        case '\n': jbuf_puts(r, b, "\\n"); break;
        case '\r': jbuf_puts(r, b, "\\r"); break;
        case '\t': jbuf_puts(r, b, "\\t"); break;
        case '\b': jbuf_puts(r, b, "\\b"); break;
        case '\f': jbuf_puts(r, b, "\\f"); break;
        default:
            if (ch < 0x80) jbuf_printf(r, b, "\\u%04x", ch);
            else {  /* ensure_ascii: \uXXXX, with a surrogate pair past the BMP */
                uint32_t c = u8_decode(s + i, n - i, &adv);
                if (c & PY_BAD_BYTE) c = 0xDC00 | (c & 0xFF);
                if (c >= 0x10000) {
                    c -= 0x10000;
                    jbuf_printf(r, b, "\\u%04x\\u%04x", 0xD800 | (c >> 10), 0xDC00 | (c & 0x3FF));
                } else jbuf_printf(r, b, "\\u%04x", c);
            }
        }
        i += adv;
        run = i;
    }
    jbuf_put(r, b, s + run, n - run);
    jbuf_putc(r, b, '"');
}

static void json_float(jr *r, jbuf *b, double f) {
    if (isnan(f)) jbuf_puts(r, b, "NaN");
    else if (isinf(f)) jbuf_puts(r, b, f > 0 ? "Infinity" : "-Infinity");
    else {
        char num[48];
        jbuf_put(r, b, num, (size_t)py_float_repr(f, num));
    }
}

static void json_newline(jr *r, jbuf *b, const jjson_opts *o, int level) {
    jbuf_putc(r, b, '\n');
    for (int i = 0; i < level; i++) {
        if (o->indent_str) jbuf_put(r, b, o->indent_str, o->indent_len);
        else for (int k = 0; k < o->indent; k++) jbuf_putc(r, b, ' ');
    }
}

/* a dict key as json writes it: strings as they are, numbers, booleans and None as text */
static jv json_key(jr *r, jv k) {
    switch (k.kind) {
    case JV_STR: return k;
    case JV_BOOL: return jv_cstr(k.u.i ? "true" : "false");
    case JV_NONE: return jv_cstr("null");
    case JV_INT: return jv_to_str(r, k);
    case JV_FLOAT: {
        jbuf b;
        jbuf_init(r, &b, 32);
        json_float(r, &b, k.u.f);
        return jbuf_value(&b);
    }
    default:
        jr_error(r, "keys must be str, int, float, bool or None, not %s", jv_type_name(k));
    }
}

static void json_value(jr *r, jbuf *b, jv v, const jjson_opts *o, int level);

static void json_dict(jr *r, jbuf *b, const jdict *d, const jjson_opts *o, int level) {
    if (d->n == 0) { jbuf_puts(r, b, "{}"); return; }
    uint32_t *order = jr_alloc(r, (size_t)d->n * sizeof *order);
    for (uint32_t i = 0; i < d->n; i++) order[i] = i;
    if (o->sort_keys) {  /* insertion sort keeps it simple; dicts in templates are small */
        jr_step(r, (uint64_t)d->n * d->n / 8);
        for (uint32_t i = 1; i < d->n; i++) {
            uint32_t k = order[i], j = i;
            while (j > 0 && jv_cmp(r, d->keys[k], d->keys[order[j - 1]]) < 0) {
                order[j] = order[j - 1];
                j--;
            }
            order[j] = k;
        }
    }
    jbuf_putc(r, b, '{');
    for (uint32_t i = 0; i < d->n; i++) {
        if (i) jbuf_put(r, b, o->item_sep, o->item_sep_len);
        if (o->indent >= 0) json_newline(r, b, o, level + 1);
        jv k = json_key(r, d->keys[order[i]]);
        json_string(r, b, k.u.s, k.len, o->ensure_ascii);
        jbuf_put(r, b, o->key_sep, o->key_sep_len);
        json_value(r, b, d->vals[order[i]], o, level + 1);
    }
    if (o->indent >= 0) json_newline(r, b, o, level);
    jbuf_putc(r, b, '}');
}

static void json_value(jr *r, jbuf *b, jv v, const jjson_opts *o, int level) {
    jr_step(r, 1);
    switch (v.kind) {
    case JV_NONE: jbuf_puts(r, b, "null"); return;
    case JV_BOOL: jbuf_puts(r, b, v.u.i ? "true" : "false"); return;
    case JV_INT: jbuf_printf(r, b, "%lld", (long long)v.u.i); return;
    case JV_FLOAT: json_float(r, b, v.u.f); return;
    case JV_STR: json_string(r, b, v.u.s, v.len, o->ensure_ascii); return;
    case JV_LIST: {
        if (v.sub > JL_TUPLE) break;
        const jlist *l = v.u.list;
        if (l->n == 0) { jbuf_puts(r, b, "[]"); return; }
        jr_enter(r);
        jbuf_putc(r, b, '[');
        for (uint32_t i = 0; i < l->n; i++) {
            if (i) jbuf_put(r, b, o->item_sep, o->item_sep_len);
            if (o->indent >= 0) json_newline(r, b, o, level + 1);
            json_value(r, b, l->v[i], o, level + 1);
        }
        if (o->indent >= 0) json_newline(r, b, o, level);
        jbuf_putc(r, b, ']');
        jr_leave(r);
        return;
    }
    case JV_DICT:
        jr_enter(r);
        json_dict(r, b, v.u.dict, o, level);
        jr_leave(r);
        return;
    default: break;
    }
    jr_error(r, "Object of type %s is not JSON serializable", jv_type_name(v));
}

void jv_write_json(jr *r, jbuf *b, jv v, const jjson_opts *o) { json_value(r, b, v, o, 0); }
