/* kv_type.c - cache row formats (kv_type.h). */
#include "engine/layers/kv_type.h"

#include <string.h>

#include "engine/gguf/gguf.h"
#include "engine/kernels/quant.h"
#include "engine/layers/simd.h"

_Static_assert((int)KV_F32 == (int)GGML_F32 && (int)KV_F16 == (int)GGML_F16 && (int)KV_BF16 == (int)GGML_BF16 &&
                   (int)KV_Q8_0 == (int)GGML_Q8_0 && (int)KV_Q4_0 == (int)GGML_Q4_0,
               "kv_type values are GGML type ids");

const char kv_type_list[] = "f32, f16, bf16, q8_0, q4_0";

static const struct {
    kv_type t;
    const char *name;
} kv_names[] = {{KV_F32, "f32"}, {KV_F16, "f16"}, {KV_BF16, "bf16"}, {KV_Q8_0, "q8_0"}, {KV_Q4_0, "q4_0"}};

const char *kv_type_name(kv_type t) {
    for (size_t i = 0; i < sizeof kv_names / sizeof *kv_names; i++)
        if (kv_names[i].t == t) return kv_names[i].name;
    return "?";
}

int kv_type_parse(const char *name, kv_type *t) {
    for (size_t i = 0; name && i < sizeof kv_names / sizeof *kv_names; i++)
        if (!strcmp(kv_names[i].name, name)) {
            *t = kv_names[i].t;
            return 0;
        }
    return -1;
}

int kv_type_block(kv_type t) { return t == KV_Q8_0 || t == KV_Q4_0 ? QK8_0 : 1; }

size_t kv_row_bytes(kv_type t, int n) { return quant_row_bytes((uint32_t)t, n); }

void kv_row_store(kv_type t, const float *x, void *dst, int n) {
    const layer_simd *k = layer_simd_active();
    switch (t) {
    case KV_F16:
        if (k->f32_to_f16) k->f32_to_f16(dst, x, (size_t)n);
        else quantize_activation(GGML_F16, x, dst, n);
        break;
    case KV_BF16: quantize_activation(GGML_BF16, x, dst, n); break;
    case KV_Q8_0: quantize_activation(GGML_Q8_0, x, dst, n); break; /* the CPU backend's from_float */
    case KV_Q4_0: quantize_row_q4_0_ref(x, dst, n); break;
    default: memcpy(dst, x, (size_t)n * sizeof(float)); break;
    }
}

void kv_rows_to_f32(kv_type t, const uint8_t *src, size_t src_stride, float *dst, int rows, int n) {
    const layer_simd *k = layer_simd_active();
    for (int r = 0; r < rows; r++, src += src_stride, dst += n) {
        if (t == KV_F16 && k->f16_to_f32) k->f16_to_f32(dst, (const uint16_t *)src, (size_t)n);
        else if (t == KV_F32) memcpy(dst, src, (size_t)n * sizeof(float));
        else dequantize_row((uint32_t)t, src, dst, n);
    }
}

void kv_round_query(kv_type t, float *q, int n) {
    switch (t) {
    case KV_F16:
        for (int i = 0; i < n; i++) q[i] = fp16_to_f32(f32_to_fp16(q[i]));
        break;
    case KV_BF16:
        for (int i = 0; i < n; i++) q[i] = bf16_to_f32(f32_to_bf16(q[i]));
        break;
    case KV_Q8_0:
    case KV_Q4_0: { /* both multiply Q8_0 activations */
        block_q8_0 b;
        for (int i = 0; i + QK8_0 <= n; i += QK8_0) {
            quantize_activation(GGML_Q8_0, q + i, &b, QK8_0);
            dequantize_row(GGML_Q8_0, &b, q + i, QK8_0);
        }
        break;
    }
    default: break;
    }
}

void kv_round_weights(kv_type t, float *p, int n) {
    if (t == KV_F16 || t == KV_BF16) kv_round_query(t, p, n);
}
