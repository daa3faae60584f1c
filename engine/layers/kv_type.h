/* kv_type.h - the number formats an attention cache may keep its K and V rows in,
 * llama.cpp's --cache-type-k / --cache-type-v: f32, f16, bf16, q8_0, q4_0 (GGML type ids,
 * so the kernels' block formats and conversions apply).
 *
 * A row of a cache type is stored as llama.cpp stores it (its set_rows: round to nearest
 * even for the halves, the CPU backend's Q8_0 quantizer, Q4_0's reference quantizer).
 * Attention multiplies a row with a vector the way llama.cpp's CPU backend does: the
 * vector is first rounded to the row type's dot type (kv_round_*), then the products are
 * summed in floats. F32 rows are read in place; the others are widened to floats a block
 * of positions at a time (kv_rows_to_f32), which is exact. */
#ifndef CHATFS_KV_TYPE_H
#define CHATFS_KV_TYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    KV_F32 = 0,  /* GGML_F32: the arithmetic of the reference results, bit for bit */
    KV_F16 = 1,  /* GGML_F16: llama.cpp's default */
    KV_Q4_0 = 2, /* GGML_Q4_0 */
    KV_Q8_0 = 8, /* GGML_Q8_0 */
    KV_BF16 = 30 /* GGML_BF16 */
} kv_type;

/* "f16" etc.; the list of every name, comma separated, for error messages */
const char *kv_type_name(kv_type t);
extern const char kv_type_list[];
/* 0 and *t set, or -1 for a name that is none of kv_type_list */
int kv_type_parse(const char *name, kv_type *t);
/* Elements per block (1, or 32 for the quantized types): a head's slice of a row is
 * stored whole only when the head dimension is a multiple of it. */
int kv_type_block(kv_type t);
/* Bytes of n elements (n a multiple of kv_type_block). */
size_t kv_row_bytes(kv_type t, int n);

/* Stores n floats as one row of type t. */
void kv_row_store(kv_type t, const float *x, void *dst, int n);
/* Widens `rows` rows of n elements each, the first at src and the next ones src_stride
 * bytes apart, into dst (rows of n floats, back to back). */
void kv_rows_to_f32(kv_type t, const uint8_t *src, size_t src_stride, float *dst, int rows, int n);
/* A query as it meets K rows of type t (ggml's vec_dot_type): rounded to half or bfloat,
 * or for the quantized types quantized to Q8_0 blocks and widened again (n a multiple of
 * 32); unchanged for F32. */
void kv_round_query(kv_type t, float *q, int n);
/* Attention weights as they meet V rows of type t: rounded to half or bfloat (llama.cpp
 * without flash attention multiplies the transposed V cache with them in its type); for
 * F32 and the quantized types unchanged (llama.cpp takes a quantized V cache only with
 * flash attention, which weights the widened rows by float probabilities). */
void kv_round_weights(kv_type t, float *p, int n);

#endif
