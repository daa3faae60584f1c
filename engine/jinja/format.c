/* format.c - Python's string formatting: printf-style (fmt % args, the format filter) and
 * str.format, for the conversions templates use. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/jinja/eval.h"
#include "engine/jinja/jinja.h"
#include "engine/jinja/pyunicode.h"

/* pads s to width code points: left-aligned with align '<', right with '>', centred '^' */
static void put_padded(jr *r, jbuf *b, jv s, int64_t width, char align, const char *fill, size_t fill_len) {
    int64_t len = (int64_t)u8_count(s.u.s, s.len), pad = width > len ? width - len : 0;
    if (pad > (int64_t)r->max_output) jr_fail(r, JINJA_LIMIT, "string length limit (%zu bytes) reached", r->max_output);
    int64_t left = align == '<' ? 0 : align == '^' ? pad / 2 : pad;
    for (int64_t i = 0; i < left; i++) jbuf_put(r, b, fill, fill_len);
    jbuf_put(r, b, s.u.s, s.len);
    for (int64_t i = left; i < pad; i++) jbuf_put(r, b, fill, fill_len);
}

/* n * 10 + the digit c, stopping above any width or precision allowed (so it cannot overflow) */
static int64_t digit(int64_t n, char c) { return n > 1000000 ? n : n * 10 + (c - '0'); }

static jv truncate_cps(jv s, int64_t n) {
    if (n >= 0 && (int64_t)s.len > n) s.len = (uint32_t)u8_offset(s.u.s, s.len, (size_t)n);
    return s;
}

static double num_arg(jr *r, jv v, char type) {
    if (jv_is_num(v)) return jv_num(v);
    jr_error(r, "%%%c format: a real number is required, not %s", type, jv_type_name(v));
}

static int64_t int_arg(jr *r, jv v, char type) {
    if (v.kind == JV_INT || v.kind == JV_BOOL) return v.u.i;
    if (v.kind == JV_FLOAT) {
        if (isnan(v.u.f) || isinf(v.u.f) || fabs(v.u.f) >= 9.2e18) jr_error(r, "cannot convert float to integer");
        return (int64_t)v.u.f;
    }
    if (type == 'd' || type == 'i' || type == 'u') jr_error(r, "%%%c format: a real number is required, not %s", type, jv_type_name(v));
    jr_error(r, "%%%c format: an integer is required, not %s", type, jv_type_name(v));
}

/* ---- fmt % args ---- */

jv jformat_printf(jr *r, jv fmt, jv args) {
    const jv *items = &args;
    uint32_t nitems = 1, next = 0;
    int mapping = args.kind == JV_DICT;
    if (args.kind == JV_LIST && args.sub == JL_TUPLE) {
        items = args.u.list->v;
        nitems = args.u.list->n;
    }
    jbuf b;
    jbuf_init(r, &b, (size_t)fmt.len + 32);
    const char *s = fmt.u.s;
    size_t n = fmt.len, i = 0;
    int used_mapping = 0, markup = fmt.sub == JS_MARKUP;
    while (i < n) {
        if (s[i] != '%') {
            jbuf_putc(r, &b, s[i++]);
            continue;
        }
        if (++i >= n) jr_error(r, "incomplete format");
        jv arg = jv_none();
        int have_arg = 0;
        if (s[i] == '(') {  /* %(name)s */
            if (!mapping) jr_error(r, "format requires a mapping");
            size_t start = ++i;
            int depth = 1;
            while (i < n && depth) depth += s[i] == '(' ? 1 : s[i] == ')' ? -1 : 0, i++;
            if (depth) jr_error(r, "incomplete format key");
            jv *v = jv_dict_get_str(args.u.dict, s + start, i - 1 - start);
            if (!v) jr_error(r, "'%.*s'", (int)(i - 1 - start), s + start);
            arg = *v;
            have_arg = used_mapping = 1;
        }
        char flags[8] = "";
        int nf = 0;
        while (i < n && strchr("#0- +", s[i]) && nf < 7) flags[nf++] = s[i++];
        flags[nf] = 0;
        int64_t width = -1, prec = -1;
        if (i < n && s[i] == '*') {
            if (next >= nitems) jr_error(r, "not enough arguments for format string");
            width = int_arg(r, items[next++], '*');
            i++;
        } else
            for (width = -1; i < n && s[i] >= '0' && s[i] <= '9'; i++) width = digit(width < 0 ? 0 : width, s[i]);
        if (i < n && s[i] == '.') {
            i++;
            prec = 0;
            if (i < n && s[i] == '*') {
                if (next >= nitems) jr_error(r, "not enough arguments for format string");
                prec = int_arg(r, items[next++], '*');
                i++;
            } else
                for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) prec = digit(prec, s[i]);
        }
        if (width > 100000 || prec > 100000) jr_error(r, "width or precision too big");
        while (i < n && (s[i] == 'h' || s[i] == 'l' || s[i] == 'L')) i++;
        if (i >= n) jr_error(r, "incomplete format");
        char type = s[i++];
        if (type == '%') {
            jbuf_putc(r, &b, '%');
            continue;
        }
        if (!have_arg) {
            if (mapping) arg = args;
            else {
                if (next >= nitems) jr_error(r, "not enough arguments for format string");
                arg = items[next++];
            }
        }
        int left = strchr(flags, '-') != NULL;
        char spec[64], num[512];
        switch (type) {
        case 's': case 'r': case 'a': {
            jv text = type == 's' ? jv_to_str(r, arg) : jv_to_repr(r, arg);
            if (markup) text = jhtml_escape(r, type == 's' ? arg : text);
            put_padded(r, &b, truncate_cps(text, prec), width, left ? '<' : '>', " ", 1);
            break;
        }
        case 'c': {
            jv ch;
            if (arg.kind == JV_STR && u8_count(arg.u.s, arg.len) == 1) ch = arg;
            else {
                int64_t cp = int_arg(r, arg, 'c');
                if (cp < 0 || cp > 0x10FFFF) jr_error(r, "%%c arg not in range(0x110000)");
                char u[4];
                ch = jv_str_copy(r, u, (size_t)u8_encode((uint32_t)cp, u));
            }
            put_padded(r, &b, ch, width, left ? '<' : '>', " ", 1);
            break;
        }
        case 'd': case 'i': case 'u': case 'x': case 'X': case 'o': {
            int64_t v = int_arg(r, arg, type);
            char t = type == 'i' || type == 'u' ? 'd' : type;
            if (prec >= 0) snprintf(spec, sizeof spec, "%%%s*.%lldll%c", flags, (long long)prec, t);
            else snprintf(spec, sizeof spec, "%%%s*ll%c", flags, t);
            int len;
            if (t == 'd') len = snprintf(num, sizeof num, spec, (int)(width < 0 ? 0 : width), (long long)v);
            else {  /* Python writes negative hex/octal with a minus sign */
                unsigned long long mag = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
                char body[80];
                snprintf(spec, sizeof spec, "%%%sll%c", strchr(flags, '#') ? "#" : "", t);
                snprintf(body, sizeof body, spec, mag);
                if (t == 'o' && strchr(flags, '#')) snprintf(body, sizeof body, "0o%llo", mag);
                jv text = jv_str_copy(r, num, (size_t)snprintf(num, sizeof num, "%s%s", v < 0 ? "-" : "", body));
                put_padded(r, &b, text, width, left ? '<' : '>', strchr(flags, '0') && !left ? "0" : " ", 1);
                break;
            }
            jbuf_put(r, &b, num, (size_t)len);
            break;
        }
        case 'e': case 'E': case 'f': case 'F': case 'g': case 'G': {
            double v = num_arg(r, arg, type);
            snprintf(spec, sizeof spec, "%%%s*.*%c", flags, type);
            int len = snprintf(num, sizeof num, spec, (int)(width < 0 ? 0 : width), (int)(prec < 0 ? 6 : prec), v);
            if (len < 0 || len >= (int)sizeof num) jr_error(r, "formatted number too long");
            jbuf_put(r, &b, num, (size_t)len);
            break;
        }
        default: jr_error(r, "unsupported format character '%c' (0x%x)", type, (unsigned char)type);
        }
    }
    if (!mapping && !used_mapping && next < nitems) jr_error(r, "not all arguments converted during string formatting");
    jv out = jbuf_value(&b);
    out.sub = fmt.sub;
    return out;
}

/* ---- str.format ---- */

/* format(value, spec) for the format mini-language's common forms:
 * [[fill]align][sign][#][0][width][,][.precision][type] */
static void format_spec(jr *r, jbuf *b, jv v, jv spec) {
    if (spec.len == 0) {
        jv_write_str(r, b, v);
        return;
    }
    const char *s = spec.u.s;
    size_t n = spec.len, i = 0;
    char align = 0, sign = 0, type = 0;
    const char *fill = " ";
    size_t fill_len = 1, adv;
    if (n > 1) {
        u8_decode(s, n, &adv);
        if (adv < n && strchr("<>^=", s[adv])) {
            fill = s;
            fill_len = adv;
            align = s[adv];
            i = adv + 1;
        }
    }
    if (!align && i < n && strchr("<>^=", s[i])) align = s[i++];
    if (i < n && strchr("+- ", s[i])) sign = s[i++];
    int alt = i < n && s[i] == '#' ? (i++, 1) : 0;
    if (i < n && s[i] == '0') {
        if (!align) { fill = "0"; fill_len = 1; align = '='; }
        i++;
    }
    int64_t width = 0, prec = -1;
    while (i < n && s[i] >= '0' && s[i] <= '9') width = digit(width, s[i++]);
    int comma = i < n && (s[i] == ',' || s[i] == '_') ? (i++, 1) : 0;
    if (i < n && s[i] == '.') {
        prec = 0;
        for (i++; i < n && s[i] >= '0' && s[i] <= '9';) prec = digit(prec, s[i++]);
    }
    if (i < n) type = s[i++];
    if (i != n || width > 100000 || prec > 100000 || comma) jr_error(r, "Invalid format specifier");
    char num[512];
    jv text;
    if (v.kind == JV_STR || (!type && !jv_is_num(v)) || type == 's') {
        if (v.kind != JV_STR && type == 's') jr_error(r, "Unknown format code 's' for object of type '%s'", jv_type_name(v));
        if (!jv_is_num(v) && v.kind != JV_STR) jr_error(r, "unsupported format string passed to %s.__format__", jv_type_name(v));
        put_padded(r, b, truncate_cps(v, prec), width, align ? align : '<', fill, fill_len);
        return;
    }
    if (!jv_is_num(v)) jr_error(r, "unsupported format string passed to %s.__format__", jv_type_name(v));
    if ((v.kind == JV_INT || v.kind == JV_BOOL) && (!type || strchr("dxXob", type))) {
        int64_t x = v.u.i;
        unsigned long long mag = x < 0 ? 0ull - (unsigned long long)x : (unsigned long long)x;
        char body[80];
        if (type == 'x' || type == 'X') snprintf(body, sizeof body, type == 'x' ? "%s%llx" : "%s%llX", alt ? (type == 'x' ? "0x" : "0X") : "", mag);
        else if (type == 'o') snprintf(body, sizeof body, "%s%llo", alt ? "0o" : "", mag);
        else if (type == 'b') {
            char bits[70];
            int k = 0;
            do bits[k++] = (char)('0' + (mag & 1)); while (mag >>= 1);
            int o = snprintf(body, sizeof body, "%s", alt ? "0b" : "");
            while (k) body[o++] = bits[--k];
            body[o] = 0;
        } else snprintf(body, sizeof body, "%llu", mag);
        snprintf(num, sizeof num, "%s%s", x < 0 ? "-" : sign == '+' ? "+" : sign == ' ' ? " " : "", body);
    } else {
        double x = jv_num(v);
        char t = type ? type : 'g';
        if (!strchr("eEfFgG%", t)) jr_error(r, "Unknown format code '%c' for object of type '%s'", t, jv_type_name(v));
        if (!type && prec < 0) {
            py_float_repr(x, num);  /* format(x, "") and friends: repr */
        } else {
            char spec2[32];
            snprintf(spec2, sizeof spec2, "%%%s.*%c", sign == '+' ? "+" : sign == ' ' ? " " : "", t == '%' ? 'f' : t);
            snprintf(num, sizeof num - 2, spec2, (int)(prec < 0 ? 6 : prec), t == '%' ? x * 100 : x);
            if (t == '%') strcat(num, "%");
        }
    }
    text = jv_str_copy(r, num, strlen(num));
    if (align == '=' && (num[0] == '-' || num[0] == '+' || num[0] == ' ')) {  /* padding after the sign */
        jbuf_putc(r, b, num[0]);
        text.u.s++;
        text.len--;
        width--;
    }
    put_padded(r, b, text, width, align == '=' ? '>' : align ? align : '>', fill, fill_len);
}

jv jformat_str(jr *r, jv fmt, const jargs *a) {
    jbuf b;
    jbuf_init(r, &b, (size_t)fmt.len + 32);
    const char *s = fmt.u.s;
    size_t n = fmt.len, i = 0;
    int auto_index = 0, manual = 0, next_auto = 0;
    while (i < n) {
        char c = s[i];
        if (c == '}') {
            if (i + 1 < n && s[i + 1] == '}') { jbuf_putc(r, &b, '}'); i += 2; continue; }
            jr_error(r, "Single '}' encountered in format string");
        }
        if (c != '{') { jbuf_putc(r, &b, c); i++; continue; }
        if (i + 1 < n && s[i + 1] == '{') { jbuf_putc(r, &b, '{'); i += 2; continue; }
        size_t start = ++i;
        int depth = 1;
        while (i < n && depth) {
            if (s[i] == '{') depth++;
            else if (s[i] == '}') depth--;
            i++;
        }
        if (depth) jr_error(r, "expected '}' before end of string");
        size_t end = i - 1, k = start;
        /* field name: [index or name] then .attr / [key] */
        while (k < end && s[k] != '.' && s[k] != '[' && s[k] != '!' && s[k] != ':') k++;
        jv v;
        int64_t index;
        if (k == start) {
            if (manual) jr_error(r, "cannot switch from manual field specification to automatic field numbering");
            if (next_auto >= a->n) jr_error(r, "Replacement index %d out of range for positional args tuple", next_auto);
            v = a->pos[next_auto++];
            auto_index = 1;
        } else if (parse_py_int(s + start, k - start, 10, &index) && s[start] >= '0' && s[start] <= '9') {
            if (auto_index) jr_error(r, "cannot switch from automatic field numbering to manual field specification");
            manual = 1;
            if (index >= a->n) jr_error(r, "Replacement index %lld out of range for positional args tuple", (long long)index);
            v = a->pos[index];
        } else {
            int q = 0;
            while (q < a->nkw && (a->kwname[q].n != k - start || memcmp(a->kwname[q].p, s + start, k - start) != 0)) q++;
            if (q == a->nkw) jr_error(r, "'%.*s'", (int)(k - start), s + start);
            v = a->kwval[q];
        }
        while (k < end && (s[k] == '.' || s[k] == '[')) {
            if (s[k] == '.') {
                size_t at = ++k;
                while (k < end && s[k] != '.' && s[k] != '[' && s[k] != '!' && s[k] != ':') k++;
                v = jgetattr(r, v, s + at, k - at);
            } else {
                size_t at = ++k;
                while (k < end && s[k] != ']') k++;
                if (k >= end) jr_error(r, "Missing ']' in format string");
                jv key = parse_py_int(s + at, k - at, 10, &index) ? jv_int(index) : jv_str(r, s + at, k - at);
                v = jgetitem(r, v, key);
                k++;
            }
        }
        if (k < end && s[k] == '!') {
            if (k + 1 >= end) jr_error(r, "end of string while looking for conversion specifier");
            char conv = s[k + 1];
            if (conv == 'r' || conv == 'a') v = jv_to_repr(r, v);
            else if (conv == 's') v = jv_to_str(r, v);
            else jr_error(r, "Unknown conversion specifier %c", conv);
            k += 2;
        }
        jv spec = jv_cstr("");
        if (k < end && s[k] == ':') spec = jv_str(r, s + k + 1, end - k - 1);
        else if (k < end) jr_error(r, "expected ':' after conversion specifier");
        if (fmt.sub == JS_MARKUP) {  /* Markup.format escapes what it inserts */
            jbuf field;
            jbuf_init(r, &field, 32);
            format_spec(r, &field, v, spec);
            jv text = jbuf_value(&field);
            if (v.kind == JV_STR && v.sub == JS_MARKUP) text.sub = JS_MARKUP;
            text = jhtml_escape(r, text);
            jbuf_put(r, &b, text.u.s, text.len);
        } else format_spec(r, &b, v, spec);
    }
    jv out = jbuf_value(&b);
    out.sub = fmt.sub;
    return out;
}
