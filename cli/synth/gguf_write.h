/* gguf_write.h - writing GGUF v3 files (the format llama.cpp and gguf.h read).
 *
 * Collect metadata and tensor descriptions, then save: the header is written first and
 * the tensor data is streamed one tensor at a time, so a model larger than memory can
 * be written. Tensors are either raw bytes already in their type, or rows of floats a
 * callback produces on demand, converted to the tensor's type with quant.h's weight
 * quantizers (in parallel on the thread pool; the callback must be thread-safe and
 * deterministic). Used by `chatfs synth`, the tests and the training exporter. */
#ifndef CHATFS_GGUF_WRITE_H
#define CHATFS_GGUF_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/gguf/gguf.h"

typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);

/* Metadata, written in the order added. Keys must be unique. Each returns 0, or -1 when
 * out of memory (the writer then refuses to save). */
int gguf_w_u32(gguf_writer *w, const char *key, uint32_t v);
int gguf_w_i32(gguf_writer *w, const char *key, int32_t v);
int gguf_w_f32(gguf_writer *w, const char *key, float v);
int gguf_w_bool(gguf_writer *w, const char *key, int v);
int gguf_w_str(gguf_writer *w, const char *key, const char *v);
/* An array of n numeric elements of gguf type elem_type (GGUF_U8 .. GGUF_F64, GGUF_BOOL),
 * copied from data in that type's little-endian layout. */
int gguf_w_arr(gguf_writer *w, const char *key, uint32_t elem_type, const void *data, uint64_t n);
int gguf_w_arr_str(gguf_writer *w, const char *key, const char *const *strs, uint64_t n);

/* rows [row0, row0 + n) of a tensor whose rows have row_len floats, into out */
typedef void (*gguf_rows_fn)(void *ctx, const char *name, int64_t row0, int64_t n, int64_t row_len, float *out);

/* A tensor of n_dims dims ne (ggml order, ne[0] contiguous) and ggml type `type`: its rows
 * come from fn, converted to type (quantize_row_weight). */
int gguf_w_tensor(gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *ne, gguf_rows_fn fn,
                  void *ctx);
/* A tensor whose bytes are already in its type (not copied: data must live until save). */
int gguf_w_tensor_data(gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *ne,
                       const void *data);

/* Writes the file (through a temporary name, renamed at the end). Returns 0, or -1 with
 * one line in err. */
int gguf_writer_save(gguf_writer *w, const char *path, char *err, size_t errlen);

#endif
