/* gguf.h - a defensive reader for GGUF v3 files (the format llama.cpp loads).
 *
 * The file is mmapped read-only. Every count, length, offset, shape and type read
 * from it is checked against the file size and against integer overflow before it
 * is used, so a broken or hostile file produces one clear error line, never a crash.
 *
 * Metadata values and tensor data are not copied: strings and arrays point into
 * the mapping, which lives until gguf_close(). */
#ifndef CHATFS_GGUF_H
#define CHATFS_GGUF_H

#include <stddef.h>
#include <stdint.h>

enum gguf_vtype {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5,
    GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_U64 = 10,
    GGUF_I64 = 11, GGUF_F64 = 12,
    GGUF_VTYPE_COUNT
};

/* ggml tensor types (ggml.h). Only some are computable; gguf accepts all known ones. */
enum ggml_type {
    GGML_F32 = 0, GGML_F16 = 1, GGML_Q4_0 = 2, GGML_Q4_1 = 3, GGML_Q5_0 = 6, GGML_Q5_1 = 7,
    GGML_Q8_0 = 8, GGML_Q8_1 = 9, GGML_Q2_K = 10, GGML_Q3_K = 11, GGML_Q4_K = 12,
    GGML_Q5_K = 13, GGML_Q6_K = 14, GGML_Q8_K = 15, GGML_BF16 = 30,
    GGML_TYPE_COUNT = 43
};

/* A string inside the file: not NUL-terminated. */
typedef struct {
    const char *s;
    uint64_t len;
} gguf_str;

typedef struct {
    gguf_str key;
    uint32_t type;        /* enum gguf_vtype */
    uint32_t arr_type;    /* element type when type == GGUF_ARRAY */
    uint64_t arr_n;       /* element count when type == GGUF_ARRAY */
    const uint8_t *data;  /* scalar value, or first array element (strings: first gguf string) */
    uint64_t size;        /* bytes of the value in the file */
} gguf_kv;

#define GGUF_MAX_DIMS 4

typedef struct {
    char name[128];           /* NUL-terminated copy (names longer than 127 bytes are refused) */
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ggml order: ne[0] is contiguous; unused dims are 1 */
    uint32_t type;            /* enum ggml_type */
    uint64_t offset;          /* relative to the data section */
    uint64_t nbytes;
    const void *data;         /* inside the mapping */
} gguf_tensor;

typedef struct gguf_file {
    char path[512];
    const uint8_t *map;
    uint64_t size;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;
    uint64_t n_kv, n_tensors;
    int owns_map;              /* 1 when opened from a path (we munmap on close) */
    gguf_kv *kv;
    gguf_tensor *tensors;
} gguf_file;

/* Opens and validates a GGUF file. On failure returns NULL and writes one line
 * (without trailing newline) such as "m.gguf: tensor 'x' runs past the end of the file"
 * to err. */
gguf_file *gguf_open(const char *path, char *err, size_t errlen);
/* Same checks on a buffer the caller owns (used by the fuzzer); name is for messages. */
gguf_file *gguf_open_buffer(const void *buf, size_t size, const char *name, char *err, size_t errlen);
void gguf_close(gguf_file *f);

/* Metadata lookup. */
const gguf_kv *gguf_find(const gguf_file *f, const char *key);
/* Typed getters: return 1 and store the value if key exists and converts losslessly
 * (any integer type to the requested integer type when in range; f32/f64 to float),
 * 0 if the key is missing, -1 if present with an incompatible type. */
int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out);
int gguf_get_f32(const gguf_file *f, const char *key, float *out);
int gguf_get_bool(const gguf_file *f, const char *key, int *out);
int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);
/* Array helpers: element i of a numeric array as int64 / float; returns 0 when out of range or not numeric. */
int gguf_arr_i64(const gguf_kv *kv, uint64_t i, int64_t *out);
int gguf_arr_f32(const gguf_kv *kv, uint64_t i, float *out);
/* Strings of a string array, in order: iterate with a cursor. gguf_arr_strs fills
 * out[0..n) (n = kv->arr_n); the caller provides the array. Returns 0 if not a string array. */
int gguf_arr_strs(const gguf_kv *kv, gguf_str *out);

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Type traits. */
const char *ggml_type_name(uint32_t type);
int ggml_type_known(uint32_t type);
/* elements per block and bytes per block; 0 for unknown types */
uint32_t ggml_blck_size(uint32_t type);
uint32_t ggml_type_size(uint32_t type);

/* Copies a metadata string into a NUL-terminated buffer (truncating). */
void gguf_str_copy(gguf_str s, char *buf, size_t n);
int gguf_str_eq(gguf_str s, const char *lit);
/* Replaces control bytes (newlines included) with '?': a message that quotes names or
 * strings from a file stays one line. */
void gguf_one_line(char *msg);

#endif
