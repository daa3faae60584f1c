/* gguf.c - GGUF v3 reader. See gguf.h for the contract.
 *
 * Parsing goes through a cursor that never reads past the end of the mapping:
 * every read checks the remaining length first, and every size computed from file
 * data is checked for overflow. The first problem found ends the parse with one
 * message naming the file and what was wrong. */
#include "engine/gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define GGUF_DEFAULT_ALIGNMENT 32

static const struct {
    const char *name;
    uint32_t blck, size;
} type_traits[GGML_TYPE_COUNT] = {
    [GGML_F32] = {"F32", 1, 4},      [GGML_F16] = {"F16", 1, 2},
    [GGML_Q4_0] = {"Q4_0", 32, 18},  [GGML_Q4_1] = {"Q4_1", 32, 20},
    [GGML_Q5_0] = {"Q5_0", 32, 22},  [GGML_Q5_1] = {"Q5_1", 32, 24},
    [GGML_Q8_0] = {"Q8_0", 32, 34},  [GGML_Q8_1] = {"Q8_1", 32, 36},
    [GGML_Q2_K] = {"Q2_K", 256, 84}, [GGML_Q3_K] = {"Q3_K", 256, 110},
    [GGML_Q4_K] = {"Q4_K", 256, 144}, [GGML_Q5_K] = {"Q5_K", 256, 176},
    [GGML_Q6_K] = {"Q6_K", 256, 210}, [GGML_Q8_K] = {"Q8_K", 256, 292},
    [16] = {"IQ2_XXS", 256, 66},     [17] = {"IQ2_XS", 256, 74},
    [18] = {"IQ3_XXS", 256, 98},     [19] = {"IQ1_S", 256, 50},
    [20] = {"IQ4_NL", 32, 18},       [21] = {"IQ3_S", 256, 110},
    [22] = {"IQ2_S", 256, 82},       [23] = {"IQ4_XS", 256, 136},
    [24] = {"I8", 1, 1},             [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},            [27] = {"I64", 1, 8},
    [28] = {"F64", 1, 8},            [29] = {"IQ1_M", 256, 56},
    [GGML_BF16] = {"BF16", 1, 2},    [34] = {"TQ1_0", 256, 54},
    [35] = {"TQ2_0", 256, 66},       [39] = {"MXFP4", 32, 17},
};

const char *ggml_type_name(uint32_t t) {
    return (t < GGML_TYPE_COUNT && type_traits[t].name) ? type_traits[t].name : "unknown";
}
int ggml_type_known(uint32_t t) { return t < GGML_TYPE_COUNT && type_traits[t].name != NULL; }
uint32_t ggml_blck_size(uint32_t t) { return ggml_type_known(t) ? type_traits[t].blck : 0; }
uint32_t ggml_type_size(uint32_t t) { return ggml_type_known(t) ? type_traits[t].size : 0; }

/* sizes of scalar value types; 0 for string/array */
static const uint32_t vtype_size[GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

typedef struct {
    const uint8_t *p, *end;
    const char *name; /* file name for messages */
    char *err;
    size_t errlen;
    int failed;
} cursor;

static int fail(cursor *c, const char *fmt, ...) {
    if (c->failed) return 0;
    c->failed = 1;
    if (c->err && c->errlen) {
        int n = snprintf(c->err, c->errlen, "%s: ", c->name);
        if (n < 0) n = 0;
        if ((size_t)n < c->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
        gguf_one_line(c->err);
    }
    return 0;
}

static uint64_t remaining(const cursor *c) { return (uint64_t)(c->end - c->p); }

static int take(cursor *c, void *out, uint64_t n, const char *what) {
    if (c->failed) return 0;
    if (remaining(c) < n) return fail(c, "file is truncated (while reading %s)", what);
    if (out) memcpy(out, c->p, (size_t)n);
    c->p += n;
    return 1;
}

static int read_u32(cursor *c, uint32_t *v, const char *what) { return take(c, v, 4, what); }
static int read_u64(cursor *c, uint64_t *v, const char *what) { return take(c, v, 8, what); }

static int read_str(cursor *c, gguf_str *s, const char *what) {
    uint64_t len = 0;
    if (!read_u64(c, &len, what)) return 0;
    if (len > remaining(c))
        return fail(c, "%s length %llu runs past the end of the file", what, (unsigned long long)len);
    s->s = (const char *)c->p;
    s->len = len;
    c->p += len;
    return 1;
}

/* a key is printable for messages: copy at most 80 bytes, replacing control bytes */
static void printable(gguf_str s, char *buf, size_t n) {
    size_t k = 0;
    for (uint64_t i = 0; i < s.len && k + 1 < n && i < 80; i++) {
        unsigned char ch = (unsigned char)s.s[i];
        buf[k++] = (ch < 32 || ch == 127) ? '?' : (char)ch;
    }
    buf[k] = 0;
}

static int read_value(cursor *c, gguf_kv *kv, const char *key) {
    const uint8_t *start = c->p;
    if (kv->type >= GGUF_VTYPE_COUNT)
        return fail(c, "metadata '%s' has unknown value type %u", key, kv->type);
    if (kv->type == GGUF_STRING) {
        gguf_str s;
        kv->data = c->p;
        if (!read_str(c, &s, "a metadata string")) return 0;
    } else if (kv->type == GGUF_ARRAY) {
        if (!read_u32(c, &kv->arr_type, "an array type") || !read_u64(c, &kv->arr_n, "an array length"))
            return 0;
        if (kv->arr_type >= GGUF_VTYPE_COUNT || kv->arr_type == GGUF_ARRAY)
            return fail(c, "metadata '%s' is an array of unsupported type %u", key, kv->arr_type);
        kv->data = c->p;
        if (kv->arr_type == GGUF_STRING) {
            /* each element takes at least 8 bytes: a count that could not fit is refused
             * before the loop, so a huge count cannot make us spin */
            if (kv->arr_n > remaining(c) / 8)
                return fail(c, "metadata '%s' array of %llu strings runs past the end of the file", key,
                            (unsigned long long)kv->arr_n);
            for (uint64_t i = 0; i < kv->arr_n; i++) {
                gguf_str s;
                if (!read_str(c, &s, "an array string")) return 0;
            }
        } else {
            uint64_t es = vtype_size[kv->arr_type];
            if (kv->arr_n > remaining(c) / es)
                return fail(c, "metadata '%s' array of %llu elements runs past the end of the file", key,
                            (unsigned long long)kv->arr_n);
            c->p += kv->arr_n * es;
        }
    } else {
        kv->data = c->p;
        if (!take(c, NULL, vtype_size[kv->type], "a metadata value")) return 0;
        if (kv->type == GGUF_BOOL && *kv->data > 1)
            return fail(c, "metadata '%s' is a bool with value %u", key, *kv->data);
    }
    kv->size = (uint64_t)(c->p - start);
    return 1;
}

static int str_eq(gguf_str a, gguf_str b) { return a.len == b.len && memcmp(a.s, b.s, (size_t)a.len) == 0; }

static gguf_file *parse(const uint8_t *map, uint64_t size, const char *name, char *err, size_t errlen) {
    cursor c = {map, map + size, name, err, errlen, 0};
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) {
        fail(&c, "out of memory");
        return NULL;
    }
    snprintf(f->path, sizeof f->path, "%s", name);
    f->map = map;
    f->size = size;
    f->alignment = GGUF_DEFAULT_ALIGNMENT;

    uint32_t magic = 0;
    if (!read_u32(&c, &magic, "the header")) goto bad;
    if (magic != GGUF_MAGIC) {
        fail(&c, "not a GGUF file (bad magic)");
        goto bad;
    }
    if (!read_u32(&c, &f->version, "the header")) goto bad;
    if (f->version != 2 && f->version != 3) {
        fail(&c, "unsupported GGUF version %u (need 2 or 3)", f->version);
        goto bad;
    }
    if (!read_u64(&c, &f->n_tensors, "the header") || !read_u64(&c, &f->n_kv, "the header")) goto bad;
    /* a key/value pair takes at least 12 bytes and a tensor info at least 24 */
    if (f->n_kv > remaining(&c) / 12) {
        fail(&c, "file is truncated or corrupt: the header claims %llu metadata entries, more than %llu bytes hold",
             (unsigned long long)f->n_kv, (unsigned long long)size);
        goto bad;
    }
    if (f->n_tensors > remaining(&c) / 24) {
        fail(&c, "file is truncated or corrupt: the header claims %llu tensors, more than %llu bytes hold",
             (unsigned long long)f->n_tensors, (unsigned long long)size);
        goto bad;
    }
    f->kv = calloc(f->n_kv ? f->n_kv : 1, sizeof *f->kv);
    f->tensors = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *f->tensors);
    if (!f->kv || !f->tensors) {
        fail(&c, "out of memory");
        goto bad;
    }

    for (uint64_t i = 0; i < f->n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        char key[96];
        if (!read_str(&c, &kv->key, "a metadata key")) goto bad;
        printable(kv->key, key, sizeof key);
        if (kv->key.len == 0) {
            fail(&c, "metadata entry %llu has an empty key", (unsigned long long)i);
            goto bad;
        }
        for (uint64_t j = 0; j < i; j++)
            if (str_eq(f->kv[j].key, kv->key)) {
                fail(&c, "metadata key '%s' appears twice", key);
                goto bad;
            }
        if (!read_u32(&c, &kv->type, "a metadata type") || !read_value(&c, kv, key)) goto bad;
    }

    const gguf_kv *al = gguf_find(f, "general.alignment");
    if (al) {
        uint32_t a;
        if (gguf_get_u32(f, "general.alignment", &a) != 1 || a == 0 || (a & (a - 1)) != 0 || a > (1u << 20)) {
            fail(&c, "general.alignment must be a power of two (u32)");
            goto bad;
        }
        f->alignment = a;
    }

    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        gguf_str nm;
        if (!read_str(&c, &nm, "a tensor name")) goto bad;
        if (nm.len == 0 || nm.len >= sizeof t->name) {
            char shown[96];
            printable(nm, shown, sizeof shown);
            fail(&c, "tensor %llu has a name of %llu bytes ('%s')", (unsigned long long)i,
                 (unsigned long long)nm.len, shown);
            goto bad;
        }
        memcpy(t->name, nm.s, (size_t)nm.len);
        t->name[nm.len] = 0;
        if (memchr(t->name, 0, (size_t)nm.len)) {
            fail(&c, "tensor %llu has a NUL byte in its name", (unsigned long long)i);
            goto bad;
        }
        for (uint64_t j = 0; j < i; j++)
            if (strcmp(f->tensors[j].name, t->name) == 0) {
                fail(&c, "tensor '%s' appears twice", t->name);
                goto bad;
            }
        if (!read_u32(&c, &t->n_dims, "a tensor's dimension count")) goto bad;
        if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS) {
            fail(&c, "tensor '%s' has %u dimensions (1 to %d allowed)", t->name, t->n_dims, GGUF_MAX_DIMS);
            goto bad;
        }
        uint64_t nel = 1;
        for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            uint64_t ne = 0;
            if (!read_u64(&c, &ne, "a tensor shape")) goto bad;
            if (ne == 0 || ne > (uint64_t)INT64_MAX || nel > (uint64_t)INT64_MAX / ne) {
                fail(&c, "tensor '%s' has an invalid shape (dimension %u is %llu)", t->name, d,
                     (unsigned long long)ne);
                goto bad;
            }
            t->ne[d] = (int64_t)ne;
            nel *= ne;
        }
        if (!read_u32(&c, &t->type, "a tensor type") || !read_u64(&c, &t->offset, "a tensor offset")) goto bad;
        if (!ggml_type_known(t->type)) {
            fail(&c, "tensor '%s' has unknown type %u", t->name, t->type);
            goto bad;
        }
        uint64_t bs = ggml_blck_size(t->type), ts = ggml_type_size(t->type);
        if ((uint64_t)t->ne[0] % bs != 0) {
            fail(&c, "tensor '%s' has a row of %lld elements, not a multiple of the %s block size %llu", t->name,
                 (long long)t->ne[0], ggml_type_name(t->type), (unsigned long long)bs);
            goto bad;
        }
        if (nel / bs > UINT64_MAX / ts) {
            fail(&c, "tensor '%s' is too large", t->name);
            goto bad;
        }
        t->nbytes = nel / bs * ts;
        if (t->offset % f->alignment != 0) {
            fail(&c, "tensor '%s' data offset %llu is not aligned to %llu bytes", t->name,
                 (unsigned long long)t->offset, (unsigned long long)f->alignment);
            goto bad;
        }
    }

    uint64_t header_end = (uint64_t)(c.p - map);
    f->data_offset = (header_end + f->alignment - 1) / f->alignment * f->alignment;
    if (f->data_offset > size && f->n_tensors > 0) {
        fail(&c, "file is truncated before the tensor data");
        goto bad;
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        if (t->offset > size || t->nbytes > size || f->data_offset > size - t->offset ||
            t->nbytes > size - f->data_offset - t->offset) {
            fail(&c, "tensor '%s' runs past the end of the file", t->name);
            goto bad;
        }
        t->data = map + f->data_offset + t->offset;
    }
    return f;
bad:
    free(f->kv);
    free(f->tensors);
    free(f);
    return NULL;
}

gguf_file *gguf_open_buffer(const void *buf, size_t size, const char *name, char *err, size_t errlen) {
    return parse(buf, size, name, err, errlen);
}

gguf_file *gguf_open(const char *path, char *err, size_t errlen) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    if (st.st_size < 8) {
        snprintf(err, errlen, "%s: file is truncated (%lld bytes)", base, (long long)st.st_size);
        close(fd);
        return NULL;
    }
    /* MAP_POPULATE: the page tables are filled now, while the model loads, instead of by
     * a page fault per 64 KB during the first request (a restart's first answer) */
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        snprintf(err, errlen, "%s: mmap failed: %s", path, strerror(errno));
        return NULL;
    }
    gguf_file *f = parse(map, (uint64_t)st.st_size, base, err, errlen);
    if (!f) {
        munmap(map, (size_t)st.st_size);
        return NULL;
    }
    snprintf(f->path, sizeof f->path, "%s", path);
    f->owns_map = 1;
    return f;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    if (f->owns_map) munmap((void *)f->map, (size_t)f->size);
    free(f->kv);
    free(f->tensors);
    free(f);
}

/* ---------------------------------------------------------------- lookup */

void gguf_one_line(char *msg) {
    for (unsigned char *p = (unsigned char *)msg; *p; p++)
        if (*p < 32 || *p == 127) *p = '?';
}

int gguf_str_eq(gguf_str s, const char *lit) {
    size_t n = strlen(lit);
    return s.len == n && memcmp(s.s, lit, n) == 0;
}

void gguf_str_copy(gguf_str s, char *buf, size_t n) {
    if (!n) return;
    size_t k = s.len < n - 1 ? (size_t)s.len : n - 1;
    memcpy(buf, s.s, k);
    buf[k] = 0;
}

const gguf_kv *gguf_find(const gguf_file *f, const char *key) {
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (gguf_str_eq(f->kv[i].key, key)) return &f->kv[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

/* reads one numeric element of type t at p as int64 (floats refused) */
static int num_i64(uint32_t t, const uint8_t *p, int64_t *out) {
    switch (t) {
    case GGUF_U8: *out = *p; return 1;
    case GGUF_I8: *out = (int8_t)*p; return 1;
    case GGUF_BOOL: *out = *p; return 1;
    case GGUF_U16: { uint16_t v; memcpy(&v, p, 2); *out = v; return 1; }
    case GGUF_I16: { int16_t v; memcpy(&v, p, 2); *out = v; return 1; }
    case GGUF_U32: { uint32_t v; memcpy(&v, p, 4); *out = v; return 1; }
    case GGUF_I32: { int32_t v; memcpy(&v, p, 4); *out = v; return 1; }
    case GGUF_U64: { uint64_t v; memcpy(&v, p, 8); if (v > (uint64_t)INT64_MAX) return 0; *out = (int64_t)v; return 1; }
    case GGUF_I64: { int64_t v; memcpy(&v, p, 8); *out = v; return 1; }
    default: return 0;
    }
}

static int num_f32(uint32_t t, const uint8_t *p, float *out) {
    if (t == GGUF_F32) { memcpy(out, p, 4); return 1; }
    if (t == GGUF_F64) { double v; memcpy(&v, p, 8); *out = (float)v; return 1; }
    int64_t i;
    if (num_i64(t, p, &i)) { *out = (float)i; return 1; }
    return 0;
}

int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 0;
    return num_i64(kv->type, kv->data, out) ? 1 : -1;
}

int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    int64_t v;
    int r = gguf_get_i64(f, key, &v);
    if (r != 1) return r;
    if (v < 0 || v > (int64_t)UINT32_MAX) return -1;
    *out = (uint32_t)v;
    return 1;
}

int gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 0;
    return num_f32(kv->type, kv->data, out) ? 1 : -1;
}

int gguf_get_bool(const gguf_file *f, const char *key, int *out) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 0;
    if (kv->type != GGUF_BOOL) return -1;
    *out = *kv->data != 0;
    return 1;
}

int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 0;
    if (kv->type != GGUF_STRING) return -1;
    memcpy(&out->len, kv->data, 8);
    out->s = (const char *)kv->data + 8;
    return 1;
}

int gguf_arr_i64(const gguf_kv *kv, uint64_t i, int64_t *out) {
    if (kv->type != GGUF_ARRAY || i >= kv->arr_n || kv->arr_type == GGUF_STRING) return 0;
    return num_i64(kv->arr_type, kv->data + i * vtype_size[kv->arr_type], out);
}

int gguf_arr_f32(const gguf_kv *kv, uint64_t i, float *out) {
    if (kv->type != GGUF_ARRAY || i >= kv->arr_n || kv->arr_type == GGUF_STRING) return 0;
    return num_f32(kv->arr_type, kv->data + i * vtype_size[kv->arr_type], out);
}

int gguf_arr_strs(const gguf_kv *kv, gguf_str *out) {
    if (kv->type != GGUF_ARRAY || kv->arr_type != GGUF_STRING) return 0;
    const uint8_t *p = kv->data;
    for (uint64_t i = 0; i < kv->arr_n; i++) { /* lengths were validated by the parser */
        memcpy(&out[i].len, p, 8);
        out[i].s = (const char *)p + 8;
        p += 8 + out[i].len;
    }
    return 1;
}
