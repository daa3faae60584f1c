/* text.c - what text the filesystem takes: UTF-8 without NUL bytes, with what editors
 * add normalised away.
 *
 * A NUL would cut the prompt where C strings end (the engine, the templates, SQLite's
 * text) while the turn files kept the whole text, and bytes that are not UTF-8 would
 * make messages.json invalid JSON: both are refused (EINVAL) in messages, the system
 * prompt, turns, settings.json and messages.json. A byte-order mark at the start and
 * CRLF line ends (editors on other systems) are normalised: the text is kept without the
 * mark and with LF line ends, so every view shows the same bytes. Replies come from the
 * model; the rare bytes of one that are not UTF-8 (a random model's byte tokens) are
 * replaced by U+FFFD, so that every file stays text.
 *
 * Separate because every way text comes in (writes, renames, imports, replies) goes
 * through the same three rules. */
#include "fs/chatfs_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The length of the UTF-8 character at p[0..n): 1-4, 0 when it is cut short at n (more
 * may come), -1 when it is not UTF-8 (overlong forms, surrogates, above U+10FFFF) or a NUL. */
static int utf8_char(const unsigned char *p, size_t n) {
    unsigned c = p[0];
    if (c == 0) return -1;
    if (c < 0x80) return 1;
    int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    if (!len || c > 0xF4) return -1;
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n) return 0;
        if ((p[i] & 0xC0) != 0x80) return -1;
    }
    if (len == 3 && ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] >= 0xA0))) return -1; /* overlong, surrogate */
    if (len == 4 && ((c == 0xF0 && p[1] < 0x90) || (c == 0xF4 && p[1] >= 0x90))) return -1; /* overlong, > U+10FFFF */
    return len;
}

size_t cfs_utf8_valid_prefix(const char *s, size_t n, int *bad) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    *bad = 0;
    while (i < n) {
        int k = utf8_char(p + i, n - i);
        if (k < 0) {
            *bad = 1;
            break;
        }
        if (k == 0) break; /* cut short: the rest may still come */
        i += (size_t)k;
    }
    return i;
}

int cfs_check_text(conv *c, const char *what, const char *s, size_t n) {
    int bad;
    size_t ok = cfs_utf8_valid_prefix(s, n, &bad);
    if (ok == n) return 0;
    if (c) {
        if (s[ok] == 0) cfs_set_error(c, "%s: a NUL byte at byte %zu (text only)", what, ok);
        else cfs_set_error(c, "%s: not UTF-8 at byte %zu", what, ok);
    }
    return -EINVAL;
}

/* 1 when the JSON text has a \u0000 escape (a NUL inside a string) */
int cfs_json_has_nul(const char *s, size_t n) {
    for (size_t i = 0; i + 1 < n; i++) {
        if (s[i] != '\\') continue;
        if (s[i + 1] == 'u' && i + 5 < n && !memcmp(s + i + 2, "0000", 4)) return 1;
        i++; /* an escaped character, whatever it is */
    }
    return 0;
}

size_t cfs_skip_bom(const char *s, size_t n) { return n >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3) ? 3 : 0; }

char *cfs_normalise(const char *s, size_t n, size_t *out_len) {
    size_t from = cfs_skip_bom(s, n);
    char *out = malloc(n - from + 1);
    if (!out) return NULL;
    size_t k = 0;
    for (size_t i = from; i < n; i++) {
        if (s[i] == '\r' && i + 1 < n && s[i + 1] == '\n') continue; /* CRLF -> LF */
        out[k++] = s[i];
    }
    out[k] = 0;
    *out_len = k;
    return out;
}

char *cfs_utf8_repair(const char *s, size_t n, size_t *out_len) {
    char *out = malloc(3 * n + 1); /* each bad byte becomes three */
    if (!out) return NULL;
    const unsigned char *p = (const unsigned char *)s;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        int len = utf8_char(p + i, n - i);
        if (len > 0) {
            memcpy(out + k, s + i, (size_t)len);
            k += (size_t)len, i += (size_t)len;
        } else {
            memcpy(out + k, "\xEF\xBF\xBD", 3); /* U+FFFD */
            k += 3, i++;
        }
    }
    out[k] = 0;
    *out_len = k;
    return out;
}

/* ---- public (chatfs.h): the rules for a writer without a mount ---- */

char *fs_message_text(const char *s, size_t n, size_t *out_len, char *err, size_t errlen) {
    int bad;
    size_t ok = cfs_utf8_valid_prefix(s, n, &bad);
    if (ok != n) {
        snprintf(err, errlen, ok < n && s[ok] == 0 ? "message: a NUL byte at byte %zu (text only)"
                                                   : "message: not UTF-8 at byte %zu", ok);
        errno = EINVAL;
        return NULL;
    }
    char *t = cfs_normalise(s, n, out_len);
    if (!t) {
        snprintf(err, errlen, "out of memory");
        errno = ENOMEM;
        return NULL;
    }
    *out_len = cfs_strip_newline(t, *out_len);
    t[*out_len] = 0;
    return t;
}

char *fs_reply_text(const char *s, size_t n, size_t *out_len) { return cfs_utf8_repair(s, n, out_len); }

int fs_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strchr(" \t\r\n", s[i])) return 0;
    return 1;
}

int fs_valid_name(const char *name) { return cfs_valid_conv_name(name); }
