/* pyunicode.c - UTF-8 decoding and Python's per-code-point string properties. */
#include "engine/jinja/pyunicode.h"

uint32_t u8_decode(const char *s, size_t n, size_t *adv) {
    const unsigned char *p = (const unsigned char *)s;
    unsigned c = p[0];
    if (c < 0x80) { *adv = 1; return c; }
    int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (len == 0 || c > 0xF4 || (size_t)len > n) goto bad;
    uint32_t cp = c & (0x3F >> (len - 1));
    for (int i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80) goto bad;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    /* overlong forms, surrogates and values past U+10FFFF are not valid UTF-8 */
    static const uint32_t min_for_len[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_for_len[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) goto bad;
    *adv = (size_t)len;
    return cp;
bad:
    *adv = 1;
    return PY_BAD_BYTE | c;
}

int u8_encode(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp & PY_BAD_BYTE) { o[0] = (unsigned char)cp; return 1; }
    if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) { o[0] = 0xC0 | (cp >> 6); o[1] = 0x80 | (cp & 0x3F); return 2; }
    if (cp < 0x10000) {
        o[0] = 0xE0 | (cp >> 12); o[1] = 0x80 | ((cp >> 6) & 0x3F); o[2] = 0x80 | (cp & 0x3F);
        return 3;
    }
    o[0] = 0xF0 | (cp >> 18); o[1] = 0x80 | ((cp >> 12) & 0x3F);
    o[2] = 0x80 | ((cp >> 6) & 0x3F); o[3] = 0x80 | (cp & 0x3F);
    return 4;
}

int u8_is_ascii(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80) return 0;
    return 1;
}

size_t u8_count(const char *s, size_t n) {
    size_t count = 0, i = 0;
    while (i < n) {
        if ((unsigned char)s[i] < 0x80) { i++; count++; continue; }
        size_t adv;
        u8_decode(s + i, n - i, &adv);
        i += adv;
        count++;
    }
    return count;
}

size_t u8_offset(const char *s, size_t n, size_t idx) {
    size_t i = 0;
    while (idx > 0 && i < n) {
        size_t adv = 1;
        if ((unsigned char)s[i] >= 0x80) u8_decode(s + i, n - i, &adv);
        i += adv;
        idx--;
    }
    return i;
}

/* str.isspace(): bidirectional class WS, B or S, or category Zs */
int py_isspace(uint32_t c) {
    if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
           c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

int py_islinebreak(uint32_t c) {
    return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
           c == 0x2028 || c == 0x2029;
}

static int in_ranges(const py_range *r, int n, uint32_t c) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (c < r[mid].first) hi = mid - 1;
        else if (c > r[mid].last) lo = mid + 1;
        else return 1;
    }
    return 0;
}

int py_iscased(uint32_t c) {
    if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    return !(c & PY_BAD_BYTE) && in_ranges(py_cased_ranges, py_cased_ranges_n, c);
}

int py_iscase_ignorable(uint32_t c) {
    return !(c & PY_BAD_BYTE) && in_ranges(py_case_ignorable_ranges, py_case_ignorable_ranges_n, c);
}

int py_isprintable(uint32_t c) {
    if (c < 0x80) return c >= 0x20 && c < 0x7F;
    return !(c & PY_BAD_BYTE) && in_ranges(py_printable_ranges, py_printable_ranges_n, c);
}

int py_islower(uint32_t c) {
    if (c < 0x80) return c >= 'a' && c <= 'z';
    return !(c & PY_BAD_BYTE) && in_ranges(py_lower_ranges, py_lower_ranges_n, c);
}

int py_isupper(uint32_t c) {
    if (c < 0x80) return c >= 'A' && c <= 'Z';
    return !(c & PY_BAD_BYTE) && in_ranges(py_upper_ranges, py_upper_ranges_n, c);
}

int py_isalnum(uint32_t c) {
    if (c < 0x80) return (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z');
    return !(c & PY_BAD_BYTE) && in_ranges(py_alnum_ranges, py_alnum_ranges_n, c);
}

int py_istitle(uint32_t c) {
    return c >= 0x80 && !(c & PY_BAD_BYTE) && in_ranges(py_titlecase_ranges, py_titlecase_ranges_n, c);
}

/* the mapping of c if the map has it (returns its length), else 0 */
static int map_lookup(const py_case_entry *m, int n, uint32_t c, uint32_t out[3]) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (c < m[mid].cp) hi = mid - 1;
        else if (c > m[mid].cp) lo = mid + 1;
        else {
            int k = 0;
            while (k < 3 && (k == 0 || m[mid].to[k])) { out[k] = m[mid].to[k]; k++; }
            return k;
        }
    }
    return 0;
}

int py_upper(uint32_t c, uint32_t out[3]) {
    if (c < 0x80) { out[0] = (c >= 'a' && c <= 'z') ? c - 32 : c; return 1; }
    if (!(c & PY_BAD_BYTE)) {
        int k = map_lookup(py_upper_map, py_upper_map_n, c, out);
        if (k) return k;
    }
    out[0] = c;
    return 1;
}

int py_lower(uint32_t c, uint32_t out[3]) {
    if (c < 0x80) { out[0] = (c >= 'A' && c <= 'Z') ? c + 32 : c; return 1; }
    if (!(c & PY_BAD_BYTE)) {
        int k = map_lookup(py_lower_map, py_lower_map_n, c, out);
        if (k) return k;
    }
    out[0] = c;
    return 1;
}

/* title case is upper case except for the code points the title map lists */
int py_title(uint32_t c, uint32_t out[3]) {
    if (c >= 0x80 && !(c & PY_BAD_BYTE)) {
        int k = map_lookup(py_title_map, py_title_map_n, c, out);
        if (k) return k;
    }
    return py_upper(c, out);
}
