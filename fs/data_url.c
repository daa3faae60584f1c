/* data_url.c - data: URLs of images (see data_url.h). */
#include "fs/data_url.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *data_url_media_type(const void *bytes, size_t len) {
    const unsigned char *b = bytes;
    if (len >= 8 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8)) return "image/png";
    if (len >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff) return "image/jpeg";
    if (len >= 6 && (!memcmp(b, "GIF87a", 6) || !memcmp(b, "GIF89a", 6))) return "image/gif";
    if (len >= 2 && b[0] == 'B' && b[1] == 'M') return "image/bmp";
    if (len >= 12 && !memcmp(b, "RIFF", 4) && !memcmp(b + 8, "WEBP", 4)) return "image/webp";
    return "application/octet-stream";
}

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *data_url_encode(const void *bytes, size_t len) {
    const unsigned char *b = bytes;
    char head[64];
    const int h = snprintf(head, sizeof head, "data:%s;base64,", data_url_media_type(bytes, len));
    char *out = malloc((size_t)h + (len + 2) / 3 * 4 + 1), *o = out;
    if (!out) return NULL;
    memcpy(o, head, (size_t)h), o += h;
    for (size_t i = 0; i < len; i += 3) {
        const uint32_t v = (uint32_t)b[i] << 16 | (i + 1 < len ? (uint32_t)b[i + 1] << 8 : 0) |
                           (i + 2 < len ? b[i + 2] : 0);
        *o++ = alphabet[v >> 18 & 63];
        *o++ = alphabet[v >> 12 & 63];
        *o++ = i + 1 < len ? alphabet[v >> 6 & 63] : '=';
        *o++ = i + 2 < len ? alphabet[v & 63] : '=';
    }
    *o = 0;
    return out;
}

static int sextet(int c) {
    const char *p = c ? strchr(alphabet, c) : NULL;
    return p ? (int)(p - alphabet) : -1;
}

int data_url_decode(const char *url, void **out, size_t *len, char *err, size_t errlen) {
    *out = NULL, *len = 0;
    const char *comma = strchr(url, ',');
    if (strncmp(url, "data:", 5) || !comma) {
        snprintf(err, errlen, "an image must be a data: URL with its bytes (a file path or a web address is not "
                              "read)");
        return -1;
    }
    if ((size_t)(comma - url) < 7 || strncmp(comma - 7, ";base64", 7)) {
        snprintf(err, errlen, "an image's data: URL must be base64 (\"data:image/png;base64,...\")");
        return -1;
    }
    const char *s = comma + 1;
    const size_t n = strlen(s);
    unsigned char *b = malloc(n / 4 * 3 + 3);
    if (!b) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t k = 0;
    uint32_t acc = 0;
    int bits = 0, pad = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '=') {
            pad++;
            continue;
        }
        const int v = sextet((unsigned char)s[i]);
        if (v < 0 || pad) {
            free(b);
            snprintf(err, errlen, "an image's data: URL is not base64 (at character %zu)", i + 1);
            return -1;
        }
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            b[k++] = (unsigned char)(acc >> bits);
        }
    }
    *out = b, *len = k;
    return 0;
}
