/* gguf_build.h - builds small GGUF v3 files (metadata only, no tensors) in memory, so
 * tests can make vocabularies that no fixture ships and feed them to gguf_open_buffer.
 *
 *   gguf_build b; gb_init(&b);
 *   gb_str(&b, "tokenizer.ggml.model", "llama");
 *   gb_arr_str(&b, "tokenizer.ggml.tokens", texts, n);
 *   ... gb_finish(&b) -> b.p / b.n is the file; gb_free(&b) */
#ifndef CHATFS_TESTS_GGUF_BUILD_H
#define CHATFS_TESTS_GGUF_BUILD_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    unsigned char *p;
    size_t n, cap;
    uint64_t n_kv;
} gguf_build;

static inline void gb_bytes(gguf_build *b, const void *s, size_t n) {
    if (b->n + n > b->cap) {
        size_t nc = b->cap ? b->cap : 4096;
        while (nc < b->n + n) nc *= 2;
        b->p = realloc(b->p, nc);
        if (!b->p) abort();
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}
static inline void gb_u32v(gguf_build *b, uint32_t v) { gb_bytes(b, &v, 4); }
static inline void gb_u64v(gguf_build *b, uint64_t v) { gb_bytes(b, &v, 8); }
static inline void gb_strv(gguf_build *b, const char *s, size_t n) {
    gb_u64v(b, n);
    gb_bytes(b, s, n);
}

/* header with placeholder counts, patched by gb_finish */
static inline void gb_init(gguf_build *b) {
    memset(b, 0, sizeof *b);
    gb_u32v(b, 0x46554747u); /* "GGUF" */
    gb_u32v(b, 3);
    gb_u64v(b, 0); /* tensors */
    gb_u64v(b, 0); /* metadata entries */
}

static inline void gb_key(gguf_build *b, const char *key, uint32_t type) {
    gb_strv(b, key, strlen(key));
    gb_u32v(b, type);
    b->n_kv++;
}

static inline void gb_str(gguf_build *b, const char *key, const char *v) {
    gb_key(b, key, 8);
    gb_strv(b, v, strlen(v));
}
static inline void gb_u32(gguf_build *b, const char *key, uint32_t v) {
    gb_key(b, key, 4);
    gb_u32v(b, v);
}
static inline void gb_bool(gguf_build *b, const char *key, int v) {
    unsigned char c = v ? 1 : 0;
    gb_key(b, key, 7);
    gb_bytes(b, &c, 1);
}
/* n strings; lens may be NULL (then strlen) */
static inline void gb_arr_str_n(gguf_build *b, const char *key, const char *const *v, const size_t *lens, size_t n) {
    gb_key(b, key, 9);
    gb_u32v(b, 8);
    gb_u64v(b, n);
    for (size_t i = 0; i < n; i++) gb_strv(b, v[i], lens ? lens[i] : strlen(v[i]));
}
static inline void gb_arr_str(gguf_build *b, const char *key, const char *const *v, size_t n) {
    gb_arr_str_n(b, key, v, NULL, n);
}
static inline void gb_arr_i32(gguf_build *b, const char *key, const int32_t *v, size_t n) {
    gb_key(b, key, 9);
    gb_u32v(b, 5);
    gb_u64v(b, n);
    gb_bytes(b, v, n * 4);
}
static inline void gb_arr_f32(gguf_build *b, const char *key, const float *v, size_t n) {
    gb_key(b, key, 9);
    gb_u32v(b, 6);
    gb_u64v(b, n);
    gb_bytes(b, v, n * 4);
}

static inline void gb_finish(gguf_build *b) { memcpy(b->p + 16, &b->n_kv, 8); }
static inline void gb_free(gguf_build *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

#endif
