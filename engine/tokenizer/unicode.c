/* unicode.c - UTF-8 helpers and category lookups. See unicode.h. */
#include "engine/tokenizer/unicode.h"

#include <stdlib.h>
#include <string.h>

/* The White_Space property: what llama.cpp's tables (generated with `\s` of Python's
 * regex module) call whitespace. U+001C-001F are not in it, unlike str.isspace(). */
static int is_white_space(uint32_t cp) {
    if (cp < 0x80) return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20;
    if (cp < 0x1680) return cp == 0x85 || cp == 0xA0;
    if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A)) return 1;
    return cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* category bit of a non-ASCII code point: binary search for the last range start <= cp */
static unsigned category(uint32_t cp) {
    size_t lo = 0, hi = unicode_ranges_count; /* invariant: ranges[lo].first <= cp < ranges[hi].first */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if ((unicode_ranges[mid] >> 8) <= cp)
            lo = mid;
        else
            hi = mid;
    }
    return unicode_ranges[lo] & 0xFF;
}

unsigned unicode_flags(uint32_t cp) {
    if (cp < 0x80) {
        unsigned f = unicode_ascii_cat[cp];
        return is_white_space(cp) ? f | UCAT_WHITESPACE : f;
    }
    if (cp > 0x10FFFF) return UCAT_OTHER;
    unsigned f = category(cp);
    return is_white_space(cp) ? f | UCAT_WHITESPACE : f;
}

int utf8_len_from_lead(unsigned char lead) {
    static const unsigned char len_by_high_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return len_by_high_nibble[lead >> 4];
}

static int is_cont(unsigned char b) { return (b & 0xC0) == 0x80; }

uint32_t utf8_decode_lenient(const unsigned char *s, size_t len, size_t *consumed) {
    unsigned char b0 = s[0];
    *consumed = 1;
    if (b0 < 0x80) return b0;
    if (!(b0 & 0x40)) return UNICODE_REPLACEMENT; /* a stray continuation byte */
    if (!(b0 & 0x20)) {
        if (len < 2 || !is_cont(s[1])) return UNICODE_REPLACEMENT;
        *consumed = 2;
        return ((uint32_t)(b0 & 0x1F) << 6) | (s[1] & 0x3F);
    }
    if (!(b0 & 0x10)) {
        if (len < 3 || !is_cont(s[1]) || !is_cont(s[2])) return UNICODE_REPLACEMENT;
        *consumed = 3;
        return ((uint32_t)(b0 & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    }
    if (!(b0 & 0x08)) {
        if (len < 4 || !is_cont(s[1]) || !is_cont(s[2]) || !is_cont(s[3])) return UNICODE_REPLACEMENT;
        *consumed = 4;
        return ((uint32_t)(b0 & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) |
               (s[3] & 0x3F);
    }
    return UNICODE_REPLACEMENT; /* F8-FF */
}

size_t utf8_encode(uint32_t cp, unsigned char *out) {
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp > 0x10FFFF) cp = UNICODE_REPLACEMENT;
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

int utf8_check_char(const unsigned char *s, size_t len) {
    if (len == 0) return 0;
    unsigned char b0 = s[0];
    if (b0 < 0x80) return 1;
    int need;
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 3;
        if (b0 == 0xE0) lo = 0xA0;      /* no overlong forms */
        else if (b0 == 0xED) hi = 0x9F; /* no surrogates */
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 4;
        if (b0 == 0xF0) lo = 0x90;      /* no overlong forms */
        else if (b0 == 0xF4) hi = 0x8F; /* nothing past U+10FFFF */
    } else {
        return -1;
    }
    for (int i = 1; i < need; i++) {
        if ((size_t)i >= len) return 0; /* valid so far, more bytes needed */
        unsigned char b = s[i];
        unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (b < l || b > h) return -i;
    }
    return need;
}

int utf8_is_text(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        int len = p[i] ? utf8_check_char(p + i, n - i) : -1;
        if (len <= 0) return 0;
        i += (size_t)len;
    }
    return 1;
}

char *utf8_repair(const char *s, size_t n, size_t *out_len) {
    char *out = malloc(3 * n + 1); /* at worst each byte becomes three */
    if (!out) return NULL;
    const unsigned char *p = (const unsigned char *)s;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        int len = p[i] ? utf8_check_char(p + i, n - i) : -1;
        if (len > 0) {
            memcpy(out + k, s + i, (size_t)len);
            k += (size_t)len, i += (size_t)len;
            continue;
        }
        memcpy(out + k, "\xEF\xBF\xBD", 3); /* U+FFFD */
        k += 3;
        i++; /* each byte that is not part of a character, as tokenizer_decode does */
    }
    out[k] = 0;
    *out_len = k;
    return out;
}
