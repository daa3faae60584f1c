/* gguf_write.c - GGUF v3 writer; see gguf_write.h.
 *
 * Layout: magic "GGUF", version 3, tensor count, metadata count (u64s); the metadata
 * key/value pairs; the tensor infos (name, n_dims, ne[], type, offset); padding to the
 * alignment (32, recorded as general.alignment when the caller adds it); then the tensor
 * data, each tensor starting at an aligned offset. */
#include "cli/synth/gguf_write.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/synth/quantize.h"
#include "engine/kernels/quant.h"
#include "engine/base/threadpool.h"

#define ALIGN 32

/* a growable byte buffer */
typedef struct {
    uint8_t *p;
    size_t n, cap;
    int oom;
} bytes;

static void put(bytes *b, const void *src, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void put_u32(bytes *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(bytes *b, uint64_t v) { put(b, &v, 8); }
static void put_str(bytes *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}

typedef struct {
    char name[128];
    uint32_t type;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    gguf_rows_fn fn;
    void *ctx;
    const void *data;
    uint64_t offset, nbytes;
} wtensor;

struct gguf_writer {
    bytes kv;          /* serialised metadata pairs */
    uint64_t n_kv;
    wtensor *t;
    int n_t, cap_t;
    int failed;
};

gguf_writer *gguf_writer_new(void) { return calloc(1, sizeof(gguf_writer)); }

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    free(w->kv.p);
    free(w->t);
    free(w);
}

static int kv_head(gguf_writer *w, const char *key, uint32_t type) {
    put_str(&w->kv, key);
    put_u32(&w->kv, type);
    w->n_kv++;
    if (w->kv.oom) w->failed = 1;
    return w->failed ? -1 : 0;
}

static int kv_done(gguf_writer *w) {
    if (w->kv.oom) w->failed = 1;
    return w->failed ? -1 : 0;
}

int gguf_w_u32(gguf_writer *w, const char *key, uint32_t v) {
    kv_head(w, key, GGUF_U32);
    put_u32(&w->kv, v);
    return kv_done(w);
}
int gguf_w_i32(gguf_writer *w, const char *key, int32_t v) {
    kv_head(w, key, GGUF_I32);
    put(&w->kv, &v, 4);
    return kv_done(w);
}
int gguf_w_f32(gguf_writer *w, const char *key, float v) {
    kv_head(w, key, GGUF_F32);
    put(&w->kv, &v, 4);
    return kv_done(w);
}
int gguf_w_bool(gguf_writer *w, const char *key, int v) {
    uint8_t b = v ? 1 : 0;
    kv_head(w, key, GGUF_BOOL);
    put(&w->kv, &b, 1);
    return kv_done(w);
}
int gguf_w_str(gguf_writer *w, const char *key, const char *v) {
    kv_head(w, key, GGUF_STRING);
    put_str(&w->kv, v);
    return kv_done(w);
}

static size_t vtype_size(uint32_t t) {
    static const size_t sz[GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < GGUF_VTYPE_COUNT ? sz[t] : 0;
}

int gguf_w_arr(gguf_writer *w, const char *key, uint32_t elem_type, const void *data, uint64_t n) {
    if (!vtype_size(elem_type)) return w->failed = 1, -1;
    kv_head(w, key, GGUF_ARRAY);
    put_u32(&w->kv, elem_type);
    put_u64(&w->kv, n);
    put(&w->kv, data, (size_t)n * vtype_size(elem_type));
    return kv_done(w);
}

int gguf_w_arr_str(gguf_writer *w, const char *key, const char *const *strs, uint64_t n) {
    kv_head(w, key, GGUF_ARRAY);
    put_u32(&w->kv, GGUF_STRING);
    put_u64(&w->kv, n);
    for (uint64_t i = 0; i < n; i++) put_str(&w->kv, strs[i]);
    return kv_done(w);
}

static wtensor *add_tensor(gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *ne) {
    if (w->failed || n_dims < 1 || n_dims > GGUF_MAX_DIMS || strlen(name) >= sizeof w->t->name ||
        !ggml_type_known(type) || ne[0] % ggml_blck_size(type)) {
        w->failed = 1;
        return NULL;
    }
    if (w->n_t == w->cap_t) {
        int cap = w->cap_t ? 2 * w->cap_t : 64;
        wtensor *t = realloc(w->t, (size_t)cap * sizeof *t);
        if (!t) {
            w->failed = 1;
            return NULL;
        }
        w->t = t;
        w->cap_t = cap;
    }
    wtensor *t = &w->t[w->n_t++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = type;
    t->n_dims = n_dims;
    uint64_t nel = 1;
    for (int i = 0; i < GGUF_MAX_DIMS; i++) {
        t->ne[i] = i < n_dims ? ne[i] : 1;
        nel *= (uint64_t)t->ne[i];
    }
    t->nbytes = nel / ggml_blck_size(type) * ggml_type_size(type);
    return t;
}

int gguf_w_tensor(gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *ne, gguf_rows_fn fn,
                  void *ctx) {
    wtensor *t = add_tensor(w, name, type, n_dims, ne);
    if (!t) return -1;
    t->fn = fn;
    t->ctx = ctx;
    return 0;
}

int gguf_w_tensor_data(gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *ne,
                       const void *data) {
    wtensor *t = add_tensor(w, name, type, n_dims, ne);
    if (!t) return -1;
    t->data = data;
    return 0;
}

/* rows of a tensor produced and converted in parallel */
typedef struct {
    const wtensor *t;
    int64_t row0, n_rows, row_len;
    float *f;
    uint8_t *out;
    size_t row_bytes;
    int bad;
} conv_job;

static void convert_rows(void *arg, int ith, int nth) {
    conv_job *j = arg;
    long b, e;
    pool_split((long)j->n_rows, ith, nth, 1, &b, &e);
    if (b >= e) return;
    float *f = j->f + (size_t)b * (size_t)j->row_len;
    j->t->fn(j->t->ctx, j->t->name, j->row0 + b, e - b, j->row_len, f);
    for (long r = b; r < e; r++)
        if (quantize_row_weight(j->t->type, f + (size_t)(r - b) * (size_t)j->row_len, j->out + (size_t)r * j->row_bytes,
                                j->row_len) != 0)
            j->bad = 1;
}

static int write_tensor(FILE *fp, const wtensor *t, char *err, size_t errlen) {
    if (t->data) return fwrite(t->data, 1, t->nbytes, fp) == t->nbytes ? 0 : -1;
    const int64_t row_len = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    const size_t row_bytes = quant_row_bytes(t->type, row_len);
    /* batches of about 16 MB of floats */
    int64_t batch = (int64_t)((16u << 20) / (sizeof(float) * (size_t)row_len));
    if (batch < 1) batch = 1;
    if (batch > rows) batch = rows;
    float *f = malloc(sizeof(float) * (size_t)row_len * (size_t)batch);
    uint8_t *out = malloc(row_bytes * (size_t)batch);
    int rc = f && out ? 0 : -1;
    if (rc) snprintf(err, errlen, "out of memory writing tensor '%s'", t->name);
    for (int64_t r0 = 0; !rc && r0 < rows; r0 += batch) {
        conv_job j = {t, r0, rows - r0 < batch ? rows - r0 : batch, row_len, f, out, row_bytes, 0};
        pool_run_n(convert_rows, &j, 4 * pool_threads());
        if (j.bad) {
            snprintf(err, errlen, "cannot convert tensor '%s' to %s", t->name, ggml_type_name(t->type));
            rc = -1;
        } else if (fwrite(out, row_bytes, (size_t)j.n_rows, fp) != (size_t)j.n_rows) {
            rc = -1;
        }
    }
    free(f);
    free(out);
    return rc;
}

int gguf_writer_save(gguf_writer *w, const char *path, char *err, size_t errlen) {
    if (w->failed) {
        snprintf(err, errlen, "%s: invalid tensor or out of memory while describing the file", path);
        return -1;
    }
    bytes h = {0};
    put_u32(&h, 0x46554747u); /* "GGUF" */
    put_u32(&h, 3);
    put_u64(&h, (uint64_t)w->n_t);
    put_u64(&h, w->n_kv);
    put(&h, w->kv.p, w->kv.n);
    uint64_t off = 0;
    for (int i = 0; i < w->n_t; i++) {
        wtensor *t = &w->t[i];
        put_str(&h, t->name);
        put_u32(&h, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) put_u64(&h, (uint64_t)t->ne[d]);
        put_u32(&h, t->type);
        put_u64(&h, off);
        t->offset = off;
        off += (t->nbytes + ALIGN - 1) / ALIGN * ALIGN;
    }
    static const uint8_t zeros[ALIGN];
    put(&h, zeros, (ALIGN - h.n % ALIGN) % ALIGN);
    if (h.oom) {
        free(h.p);
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
        snprintf(err, errlen, "%s: %s", tmp, strerror(errno));
        free(h.p);
        return -1;
    }
    int rc = fwrite(h.p, 1, h.n, fp) == h.n ? 0 : -1;
    free(h.p);
    char msg[256] = "";
    for (int i = 0; !rc && i < w->n_t; i++) {
        rc = write_tensor(fp, &w->t[i], msg, sizeof msg);
        if (!rc) rc = fwrite(zeros, 1, (size_t)((ALIGN - w->t[i].nbytes % ALIGN) % ALIGN), fp) ==
                              (size_t)((ALIGN - w->t[i].nbytes % ALIGN) % ALIGN) ? 0 : -1;
    }
    /* Pages just written stay in the page cache in 4 KB pieces; read back from disk, the
     * file comes in up to 2 MB pieces and is mapped with 2 MB pages, with which the
     * several-token kernels miss the TLB less (docs/performance.md, "Page size of the
     * mapped file"). So the written pages go to disk and leave the cache. */
    if (!rc && (fflush(fp) != 0 || fdatasync(fileno(fp)) != 0)) rc = -1;
    if (!rc) posix_fadvise(fileno(fp), 0, 0, POSIX_FADV_DONTNEED); /* only advice: a refusal changes nothing */
    if (fclose(fp) != 0) rc = -1;
    if (!rc && rename(tmp, path) != 0) rc = -1;
    if (rc) {
        if (msg[0])
            snprintf(err, errlen, "%s: %s", path, msg);
        else
            snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno));
        remove(tmp);
    }
    return rc;
}
