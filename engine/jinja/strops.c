/* strops.c - Python's str operations on UTF-8 views: strip, case, replace, split, join,
 * find, indexing and slicing by code point. */
#define _GNU_SOURCE
#include <string.h>

#include "engine/jinja/eval.h"
#include "engine/jinja/jinja.h"
#include "engine/jinja/pyunicode.h"

jv jhtml_escape(jr *r, jv v) {
    if (v.kind == JV_STR && v.sub == JS_MARKUP) return v;
    jv s = jv_to_str(r, v);
    jbuf b;
    jbuf_init(r, &b, (size_t)s.len + 16);
    size_t run = 0;
    for (size_t i = 0; i < s.len; i++) {
        const char *ent;
        switch (s.u.s[i]) {
        case '&': ent = "&amp;"; break;
        case '<': ent = "&lt;"; break;
        case '>': ent = "&gt;"; break;
        case '"': ent = "&#34;"; break;
        case '\'': ent = "&#39;"; break;
        default: continue;
        }
        jbuf_put(r, &b, s.u.s + run, i - run);
        jbuf_puts(r, &b, ent);
        run = i + 1;
    }
    jbuf_put(r, &b, s.u.s + run, s.len - run);
    jv out = jbuf_value(&b);
    out.sub = JS_MARKUP;
    return out;
}

static jv view(jv s, size_t from, size_t to) {
    jv v = s;
    v.u.s = s.u.s + from;
    v.len = (uint32_t)(to - from);
    return v;
}

/* is cp one of the code points of chars (a str)? */
static int in_chars(jv chars, uint32_t cp) {
    size_t i = 0;
    while (i < chars.len) {
        size_t adv;
        if (u8_decode(chars.u.s + i, chars.len - i, &adv) == cp) return 1;
        i += adv;
    }
    return 0;
}

jv jstr_strip(jr *r, jv s, jv chars, int left, int right) {
    int ws = chars.kind == JV_ABSENT || chars.kind == JV_NONE;
    if (!ws && chars.kind != JV_STR) jr_error(r, "strip arg must be None or str");
    size_t start = 0, end = s.len;
    if (left) {
        while (start < end) {
            size_t adv;
            uint32_t cp = u8_decode(s.u.s + start, end - start, &adv);
            if (ws ? !py_isspace(cp) : !in_chars(chars, cp)) break;
            start += adv;
        }
    }
    if (right) {
        /* walk forward, remembering where the last kept code point ends */
        size_t i = start, keep = start;
        while (i < end) {
            size_t adv;
            uint32_t cp = u8_decode(s.u.s + i, end - i, &adv);
            i += adv;
            if (ws ? !py_isspace(cp) : !in_chars(chars, cp)) keep = i;
        }
        end = keep;
    }
    jr_step(r, s.len / 16);
    return view(s, start, end);
}

static void put_cps(jr *r, jbuf *b, const uint32_t *cps, int n) {
    for (int i = 0; i < n; i++) {
        char u[4];
        jbuf_put(r, b, u, (size_t)u8_encode(cps[i], u));
    }
}

/* the code point that ends just before byte at (at > 0); *start = where it begins */
static uint32_t decode_before(jv s, size_t at, size_t *start) {
    size_t k = at - 1;
    while (k > 0 && at - k < 4 && ((unsigned char)s.u.s[k] & 0xC0) == 0x80) k--;
    size_t adv;
    uint32_t cp = u8_decode(s.u.s + k, at - k, &adv);
    if (k + adv != at) {  /* not one valid sequence: the last byte stands alone */
        k = at - 1;
        cp = u8_decode(s.u.s + k, 1, &adv);
    }
    *start = k;
    return cp;
}

/* U+03A3 lowercases to final sigma after a cased letter and before nothing cased, skipping
 * case-ignorable characters both ways (Python's handle_capital_sigma) */
static int final_sigma(jr *r, jv s, size_t at, size_t after) {
    size_t i = at;
    uint32_t cp = 0;
    int found = 0;
    while (i > 0) {
        jr_step(r, 1);
        cp = decode_before(s, i, &i);
        if (!py_iscase_ignorable(cp)) { found = 1; break; }
    }
    if (!found || !py_iscased(cp)) return 0;
    i = after;
    while (i < s.len) {
        jr_step(r, 1);
        size_t adv;
        cp = u8_decode(s.u.s + i, s.len - i, &adv);
        if (!py_iscase_ignorable(cp)) return !py_iscased(cp);
        i += adv;
    }
    return 1;
}

static void lower_cp(jr *r, jbuf *b, jv s, size_t at, size_t adv, uint32_t cp) {
    uint32_t out[3];
    if (cp == 0x3A3) {
        out[0] = final_sigma(r, s, at, at + adv) ? 0x3C2 : 0x3C3;
        put_cps(r, b, out, 1);
        return;
    }
    put_cps(r, b, out, py_lower(cp, out));
}

/* mode: 'u' upper, 'l' lower, 't' title, 'c' capitalize */
static jv recase(jr *r, jv s, char mode) {
    if (u8_is_ascii(s.u.s, s.len)) {
        char *p = jr_alloc(r, (size_t)s.len + 1);
        int prev_cased = 0;
        for (uint32_t i = 0; i < s.len; i++) {
            char ch = s.u.s[i];
            int upper = mode == 'u' || (mode == 't' && !prev_cased) || (mode == 'c' && i == 0);
            int is_alpha = (ch | 32) >= 'a' && (ch | 32) <= 'z';
            p[i] = is_alpha ? (upper ? (char)(ch & ~32) : (char)(ch | 32)) : ch;
            prev_cased = is_alpha;
        }
        p[s.len] = 0;
        jr_step(r, s.len / 64);
        jv out = jv_str(r, p, s.len);
        out.sub = s.sub;
        return out;
    }
    jbuf b;
    jbuf_init(r, &b, (size_t)s.len + 16);
    size_t i = 0;
    int prev_cased = 0;
    while (i < s.len) {
        size_t adv;
        uint32_t cp = u8_decode(s.u.s + i, s.len - i, &adv), out[3];
        if (mode == 'u') put_cps(r, &b, out, py_upper(cp, out));
        else if (mode == 'l') lower_cp(r, &b, s, i, adv, cp);
        else if ((mode == 't' && !prev_cased) || (mode == 'c' && i == 0)) put_cps(r, &b, out, py_title(cp, out));
        else lower_cp(r, &b, s, i, adv, cp);
        prev_cased = py_iscased(cp);
        i += adv;
    }
    jr_step(r, s.len / 16);
    jv out = jbuf_value(&b);
    out.sub = s.sub;
    return out;
}

jv jstr_upper(jr *r, jv s) { return recase(r, s, 'u'); }
jv jstr_lower(jr *r, jv s) { return recase(r, s, 'l'); }
jv jstr_title(jr *r, jv s) { return recase(r, s, 't'); }
jv jstr_capitalize(jr *r, jv s) { return recase(r, s, 'c'); }

int jstr_find(jv hay, jv needle, size_t from) {
    if (from > hay.len) return -1;
    if (needle.len == 0) return (int)from;
    const char *p = memmem(hay.u.s + from, hay.len - from, needle.u.s, needle.len);
    return p ? (int)(p - hay.u.s) : -1;
}

jv jstr_replace(jr *r, jv s, jv old, jv new_, int64_t count) {
    if (count < 0) count = INT64_MAX;
    jbuf b;
    jbuf_init(r, &b, (size_t)s.len + 16);
    jr_step(r, s.len / 16);
    if (old.len == 0) {  /* "ab".replace("", "-") is "-a-b-" */
        size_t i = 0;
        int64_t done = 0;
        while (done < count) {
            jbuf_put(r, &b, new_.u.s, new_.len);
            done++;
            if (i >= s.len) break;
            size_t adv;
            u8_decode(s.u.s + i, s.len - i, &adv);
            jbuf_put(r, &b, s.u.s + i, adv);
            i += adv;
        }
        jbuf_put(r, &b, s.u.s + i, s.len - i);
        return jbuf_value(&b);
    }
    size_t i = 0;
    for (int64_t done = 0; done < count; done++) {
        int at = jstr_find(s, old, i);
        if (at < 0) break;
        jbuf_put(r, &b, s.u.s + i, (size_t)at - i);
        jbuf_put(r, &b, new_.u.s, new_.len);
        i = (size_t)at + old.len;
    }
    jbuf_put(r, &b, s.u.s + i, s.len - i);
    return jbuf_value(&b);
}

/* whitespace split (sep None): runs of whitespace separate, ends do not count */
static jv split_ws(jr *r, jv s, int64_t maxsplit, int from_right) {
    jv out = jv_list_new(r, 4);
    if (!from_right) {
        size_t i = 0;
        for (;;) {
            while (i < s.len) {  /* skip whitespace */
                size_t adv;
                if (!py_isspace(u8_decode(s.u.s + i, s.len - i, &adv))) break;
                i += adv;
            }
            if (i >= s.len) break;
            if (maxsplit >= 0 && (int64_t)out.u.list->n == maxsplit) {
                jv_list_push(r, &out, view(s, i, s.len));  /* the rest keeps its trailing space */
                break;
            }
            size_t start = i;
            while (i < s.len) {
                size_t adv;
                if (py_isspace(u8_decode(s.u.s + i, s.len - i, &adv))) break;
                i += adv;
            }
            jv_list_push(r, &out, view(s, start, i));
        }
        return out;
    }
    /* from the right: the words first; what maxsplit leaves on the left stays one piece,
     * with its leading whitespace */
    jv words = split_ws(r, s, -1, 0);
    const jlist *w = words.u.list;
    int64_t nw = w->n, first = maxsplit >= 0 && nw > maxsplit + 1 ? nw - maxsplit - 1 : 0;
    if (first > 0) {
        size_t from = 0, to = (size_t)(w->v[first].u.s - s.u.s) + w->v[first].len;
        jv_list_push(r, &out, view(s, from, to));
    }
    for (int64_t k = first > 0 ? first + 1 : 0; k < nw; k++) jv_list_push(r, &out, w->v[k]);
    return out;
}

jv jstr_split(jr *r, jv s, jv sep, int64_t maxsplit, int from_right) {
    jr_step(r, s.len / 16);
    if (sep.kind == JV_NONE || sep.kind == JV_ABSENT) return split_ws(r, s, maxsplit, from_right);
    if (sep.kind != JV_STR) jr_error(r, "must be str or None, not %s", jv_type_name(sep));
    if (sep.len == 0) jr_error(r, "empty separator");
    jv out = jv_list_new(r, 4);
    if (!from_right) {
        size_t i = 0;
        for (;;) {
            int at = maxsplit >= 0 && (int64_t)out.u.list->n == maxsplit ? -1 : jstr_find(s, sep, i);
            if (at < 0) {
                jv_list_push(r, &out, view(s, i, s.len));
                return out;
            }
            jv_list_push(r, &out, view(s, i, (size_t)at));
            i = (size_t)at + sep.len;
        }
    }
    /* from the right: cut pieces off the end, then reverse */
    size_t end = s.len;
    int64_t cuts = 0;
    for (;;) {
        size_t found = (size_t)-1;
        if (!(maxsplit >= 0 && cuts == maxsplit) && end >= sep.len)
            for (size_t k = end - sep.len + 1; k-- > 0;)
                if (memcmp(s.u.s + k, sep.u.s, sep.len) == 0) { found = k; break; }
        if (found == (size_t)-1) {
            jv_list_push(r, &out, view(s, 0, end));
            break;
        }
        jv_list_push(r, &out, view(s, found + sep.len, end));
        end = found;
        cuts++;
    }
    jlist *l = out.u.list;
    for (uint32_t a = 0, b = l->n - 1; a < b; a++, b--) {
        jv t = l->v[a];
        l->v[a] = l->v[b];
        l->v[b] = t;
    }
    return out;
}

jv jstr_splitlines(jr *r, jv s, int keepends) {
    jv out = jv_list_new(r, 4);
    size_t i = 0, start = 0;
    while (i < s.len) {
        size_t adv;
        uint32_t cp = u8_decode(s.u.s + i, s.len - i, &adv);
        if (!py_islinebreak(cp)) { i += adv; continue; }
        size_t eol = i + adv;
        if (cp == '\r' && eol < s.len && s.u.s[eol] == '\n') eol++;
        jv_list_push(r, &out, view(s, start, keepends ? eol : i));
        i = start = eol;
    }
    if (start < s.len) jv_list_push(r, &out, view(s, start, s.len));
    jr_step(r, s.len / 16);
    return out;
}

jv jstr_join(jr *r, jv sep, jv items) {
    jv l = jiterate(r, items);
    jbuf b;
    jbuf_init(r, &b, 64);
    for (uint32_t i = 0; i < l.u.list->n; i++) {
        jr_step(r, 1);
        if (i) jbuf_put(r, &b, sep.u.s, sep.len);
        jv_write_str(r, &b, l.u.list->v[i]);
    }
    return jbuf_value(&b);
}

jv jstr_index(jr *r, jv s, int64_t i) {
    if (u8_is_ascii(s.u.s, s.len)) {
        if (i < 0) i += s.len;
        return view(s, (size_t)i, (size_t)i + 1);
    }
    int64_t len = (int64_t)u8_count(s.u.s, s.len);
    if (i < 0) i += len;
    size_t at = u8_offset(s.u.s, s.len, (size_t)i), adv;
    u8_decode(s.u.s + at, s.len - at, &adv);
    jr_step(r, s.len / 16);
    return view(s, at, at + adv);
}

/* ---- slicing ---- */

static int64_t slice_arg(jr *r, jv v, int64_t dflt) {
    if (v.kind == JV_NONE || v.kind == JV_ABSENT) return dflt;
    if (v.kind == JV_INT || v.kind == JV_BOOL) return v.u.i;
    jr_error(r, "slice indices must be integers or None or have an __index__ method");
}

/* PySlice_AdjustIndices: clamps start/stop into len, returns how many items */
static int64_t adjust(int64_t len, int64_t *start, int64_t *stop, int64_t step) {
    if (*start < 0) {
        *start += len;
        if (*start < 0) *start = step < 0 ? -1 : 0;
    } else if (*start >= len) *start = step < 0 ? len - 1 : len;
    if (*stop < 0) {
        *stop += len;
        if (*stop < 0) *stop = step < 0 ? -1 : 0;
    } else if (*stop >= len) *stop = step < 0 ? len - 1 : len;
    if (step < 0) return *stop < *start ? (int64_t)(((__int128)*start - *stop - 1) / -(__int128)step + 1) : 0;
    return *start < *stop ? (*stop - *start - 1) / step + 1 : 0;
}

jv jv_slice(jr *r, jv obj, jv vstart, jv vstop, jv vstep) {
    int64_t step = slice_arg(r, vstep, 1);
    if (step == 0) jr_error(r, "slice step cannot be zero");
    int64_t start = slice_arg(r, vstart, step < 0 ? INT64_MAX : 0);
    int64_t stop = slice_arg(r, vstop, step < 0 ? INT64_MIN : INT64_MAX);
    if (obj.kind == JV_STR) {
        int ascii = u8_is_ascii(obj.u.s, obj.len);
        int64_t len = ascii ? obj.len : (int64_t)u8_count(obj.u.s, obj.len);
        int64_t n = adjust(len, &start, &stop, step);
        jr_step(r, (ascii ? obj.len / 256 : obj.len / 16) + (uint64_t)n / 16);
        if (ascii && step == 1) return view(obj, (size_t)start, (size_t)(start + n));
        /* byte offsets of every code point, then pick */
        size_t *off = jr_alloc(r, sizeof(size_t) * (size_t)(len + 1));
        size_t i = 0;
        for (int64_t k = 0; k < len; k++) {
            off[k] = i;
            size_t adv = 1;
            if (!ascii) u8_decode(obj.u.s + i, obj.len - i, &adv);
            i += adv;
        }
        off[len] = obj.len;
        if (step == 1) return view(obj, off[start], off[start + n]);
        jbuf b;
        jbuf_init(r, &b, (size_t)n + 1);
        for (int64_t k = 0; k < n; k++) {
            int64_t at = (int64_t)(start + (__int128)k * step);  /* within [0, len): the count says so */
            jbuf_put(r, &b, obj.u.s + off[at], off[at + 1] - off[at]);
        }
        jv out = jbuf_value(&b);
        out.sub = obj.sub;
        return out;
    }
    const jlist *l = obj.u.list;
    int64_t n = adjust(l->n, &start, &stop, step);
    jv out = jv_list_new(r, (uint32_t)n);
    out.sub = obj.sub == JL_TUPLE ? JL_TUPLE : JL_LIST;
    for (int64_t k = 0; k < n; k++) out.u.list->v[k] = l->v[(int64_t)(start + (__int128)k * step)];
    out.u.list->n = (uint32_t)n;
    if (obj.sub == JL_RANGE) {  /* a slice of a range is a range (CPython's compute_slice) */
        __int128 rstart = l->start + (__int128)start * l->step, rstop = l->start + (__int128)stop * l->step,
                 rstep = (__int128)l->step * step;
        if (rstart >= INT64_MIN && rstart <= INT64_MAX && rstop >= INT64_MIN && rstop <= INT64_MAX &&
            rstep >= INT64_MIN && rstep <= INT64_MAX) {  /* else Python's bigints: it stays a list */
            out.sub = JL_RANGE;
            out.u.list->start = (int64_t)rstart;
            out.u.list->stop = (int64_t)rstop;
            out.u.list->step = (int64_t)rstep;
        }
    }
    jr_step(r, (uint64_t)n / 16);
    return out;
}
