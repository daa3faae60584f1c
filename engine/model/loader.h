/* loader.h - what an architecture's loader (arch/) describes a model with: binding
 * tensors by name with their shapes checked, reading "<arch>.*" metadata, and
 * registering the state a sequence keeps per layer. Every helper fails the loader with
 * one line of text (the file's name, then what is wrong) instead of returning garbage. */
#ifndef CHATFS_LOADER_H
#define CHATFS_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "engine/model/model.h"

typedef struct {
    model *m;
    char *err;
    size_t errlen;
    int failed;
    const char *file; /* base name for messages */
} loader;

/* Binds a 2-D weight named by printf(fmt, ...) with shape [n_in, n_out]. Missing
 * required tensors, wrong shapes and unsupported types fail the loader. Returns 1 if
 * bound. */
int ld_matrix(loader *L, matrix *w, int required, int64_t n_in, int64_t n_out, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* Binds a 3-D expert tensor [n_in, n_out, n_expert] (mixture-of-experts layers), checked
 * like ld_matrix. Returns 1 if bound. */
int ld_experts(loader *L, expert_matrix *x, int required, int64_t n_in, int64_t n_out, int64_t n_expert,
               const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* Binds a tensor of n elements as floats (any shape with that element count). */
const float *ld_vector(loader *L, int required, int64_t n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Checks that the tensor printf(fmt, ...) has shape [ne0, ne1] (1-D: [ne0, 1]). Missing
 * fails only when required. Returns 1 when present with that shape. */
int ld_shape(loader *L, int required, int64_t ne0, int64_t ne1, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Metadata with the architecture prefix: ld_u32(L, "embedding_length", ...) reads
 * "<arch>.embedding_length". */
uint32_t ld_u32(loader *L, const char *key, int required, uint32_t def);
float ld_f32(loader *L, const char *key, int required, float def);
int ld_bool(loader *L, const char *key, int def);
/* Per-layer value: a scalar key applies to every layer, an array key gives one per layer. */
int64_t ld_layer_i64(loader *L, const char *key, int layer, int64_t def);
int ld_fail(loader *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Binds token_embd.weight, the final norm (named output_norm_name) and output.weight
 * (tied to token_embd when absent). */
int ld_embeddings(loader *L, const char *output_norm_name);

/* Registers a recurrent layer's state: returns its slot index. */
int ld_rec_slot(loader *L, size_t conv_floats, size_t ssm_floats);
/* Registers an attention layer's cache (n_head_kv heads of head_dim): returns its slot. */
int ld_kv_slot(loader *L, int n_head_kv, int head_dim);

#endif
