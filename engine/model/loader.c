/* loader.c - the loader helpers of loader.h. */
#include "engine/model/loader.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels/quant.h"

int ld_fail(loader *L, const char *fmt, ...) {
    if (L->failed) return 0;
    L->failed = 1;
    int k = snprintf(L->err, L->errlen, "%s: ", L->file);
    if (k < 0 || (size_t)k >= L->errlen) return 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(L->err + k, L->errlen - (size_t)k, fmt, ap);
    va_end(ap);
    gguf_one_line(L->err);
    return 0;
}

static const gguf_tensor *find_tensor(loader *L, int required, char *name) {
    const gguf_tensor *t = gguf_find_tensor(L->m->gguf, name);
    if (!t && required) ld_fail(L, "tensor '%s' is missing", name);
    return t;
}

static int computable(uint32_t type) {
    switch (type) {
    case GGML_F32: case GGML_F16: case GGML_BF16: case GGML_Q8_0: case GGML_Q4_0: case GGML_Q4_1:
    case GGML_Q5_0: case GGML_Q5_1: case GGML_Q4_K: case GGML_Q5_K: case GGML_Q6_K:
        return 1;
    default:
        return 0;
    }
}

int ld_matrix(loader *L, matrix *w, int required, int64_t n_in, int64_t n_out, const char *fmt, ...) {
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    memset(w, 0, sizeof *w);
    if (L->failed) return 0;
    const gguf_tensor *t = find_tensor(L, required, name);
    if (!t) return 0;
    if (t->ne[0] != n_in || t->ne[1] * t->ne[2] * t->ne[3] != n_out || t->ne[2] != 1 || t->ne[3] != 1)
        return ld_fail(L, "tensor '%s' has shape [%lld, %lld], expected [%lld, %lld]", name, (long long)t->ne[0],
                       (long long)(t->ne[1] * t->ne[2] * t->ne[3]), (long long)n_in, (long long)n_out);
    if (!computable(t->type))
        return ld_fail(L, "tensor '%s' has type %s, which chatfs cannot compute yet", name, ggml_type_name(t->type));
    matrix_from_tensor(w, t);
    return 1;
}

int ld_experts(loader *L, expert_matrix *x, int required, int64_t n_in, int64_t n_out, int64_t n_expert,
               const char *fmt, ...) {
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    memset(x, 0, sizeof *x);
    if (L->failed) return 0;
    const gguf_tensor *t = find_tensor(L, required, name);
    if (!t) return 0;
    if (t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != n_expert || t->ne[3] != 1)
        return ld_fail(L, "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld]", name,
                       (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                       (long long)n_in, (long long)n_out, (long long)n_expert);
    if (!computable(t->type))
        return ld_fail(L, "tensor '%s' has type %s, which chatfs cannot compute yet", name, ggml_type_name(t->type));
    experts_from_tensor(x, t);
    return 1;
}

const float *ld_vector(loader *L, int required, int64_t n, const char *fmt, ...) {
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    if (L->failed) return NULL;
    const gguf_tensor *t = find_tensor(L, required, name);
    if (!t) return NULL;
    int64_t nel = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    if (nel != n) {
        ld_fail(L, "tensor '%s' has %lld elements, expected %lld", name, (long long)nel, (long long)n);
        return NULL;
    }
    if (t->type == GGML_F32) return t->data;
    if (!computable(t->type)) {
        ld_fail(L, "tensor '%s' has type %s, which chatfs cannot compute yet", name, ggml_type_name(t->type));
        return NULL;
    }
    /* small tensors stored in another type: keep a float copy */
    model *m = L->m;
    float *copy = malloc((size_t)n * sizeof(float));
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 64;
        void **o = realloc(m->owned, (size_t)cap * sizeof *o);
        if (!o) {
            free(copy);
            copy = NULL;
        } else {
            m->owned = o;
            m->cap_owned = cap;
        }
    }
    if (!copy) {
        ld_fail(L, "out of memory");
        return NULL;
    }
    m->owned[m->n_owned++] = copy;
    dequantize_row(t->type, t->data, copy, n);
    return copy;
}

int ld_shape(loader *L, int required, int64_t ne0, int64_t ne1, const char *fmt, ...) {
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    if (L->failed) return 0;
    const gguf_tensor *t = find_tensor(L, required, name);
    if (!t) return 0;
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1)
        return ld_fail(L, "tensor '%s' has shape [%lld, %lld, %lld], expected [%lld, %lld]", name, (long long)t->ne[0],
                       (long long)t->ne[1], (long long)t->ne[2], (long long)ne0, (long long)ne1);
    return 1;
}

static void arch_key(loader *L, const char *key, char *buf, size_t n) { snprintf(buf, n, "%s.%s", L->m->arch, key); }

uint32_t ld_u32(loader *L, const char *key, int required, uint32_t def) {
    char k[160];
    arch_key(L, key, k, sizeof k);
    uint32_t v;
    int r = gguf_get_u32(L->m->gguf, k, &v);
    if (r == 1) return v;
    if (r < 0) ld_fail(L, "metadata '%s' has the wrong type", k);
    else if (required) ld_fail(L, "metadata '%s' is missing", k);
    return def;
}

float ld_f32(loader *L, const char *key, int required, float def) {
    char k[160];
    arch_key(L, key, k, sizeof k);
    float v;
    int r = gguf_get_f32(L->m->gguf, k, &v);
    if (r == 1) return v;
    if (r < 0) ld_fail(L, "metadata '%s' has the wrong type", k);
    else if (required) ld_fail(L, "metadata '%s' is missing", k);
    return def;
}

int ld_bool(loader *L, const char *key, int def) {
    char k[160];
    arch_key(L, key, k, sizeof k);
    int v;
    return gguf_get_bool(L->m->gguf, k, &v) == 1 ? v : def;
}

int64_t ld_layer_i64(loader *L, const char *key, int layer, int64_t def) {
    char k[160];
    arch_key(L, key, k, sizeof k);
    const gguf_kv *kv = gguf_find(L->m->gguf, k);
    if (!kv) return def;
    int64_t v;
    if (kv->type == GGUF_ARRAY) {
        if ((uint64_t)layer >= kv->arr_n || !gguf_arr_i64(kv, (uint64_t)layer, &v)) {
            ld_fail(L, "metadata '%s' has no integer for layer %d", k, layer);
            return def;
        }
        return v;
    }
    if (gguf_get_i64(L->m->gguf, k, &v) != 1) {
        ld_fail(L, "metadata '%s' has the wrong type", k);
        return def;
    }
    return v;
}

int ld_rec_slot(loader *L, size_t conv_floats, size_t ssm_floats) {
    model *m = L->m;
    rec_slot *r = realloc(m->rec, (size_t)(m->n_rec_slots + 1) * sizeof *r);
    if (!r) return ld_fail(L, "out of memory"), -1;
    m->rec = r;
    r[m->n_rec_slots] = (rec_slot){m->rec_floats, conv_floats, m->rec_floats + conv_floats, ssm_floats};
    m->rec_floats += conv_floats + ssm_floats;
    return m->n_rec_slots++;
}

int ld_kv_slot(loader *L, int n_head_kv, int head_dim) {
    if (model_add_kv_slot(L->m, n_head_kv, head_dim) != 0) return ld_fail(L, "out of memory"), -1;
    return L->m->n_kv_slots - 1;
}

/* Binds token_embd, the final norm and the output head (tied when absent). */
int ld_embeddings(loader *L, const char *output_norm_name) {
    model *m = L->m;
    const gguf_tensor *t = gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!t) return ld_fail(L, "tensor 'token_embd.weight' is missing");
    if (t->ne[1] != m->n_vocab)
        return ld_fail(L, "tensor 'token_embd.weight' has %lld rows but the vocabulary has %d tokens",
                       (long long)t->ne[1], m->n_vocab);
    if (!ld_matrix(L, &m->tok_embd, 1, m->n_embd, m->n_vocab, "token_embd.weight")) return 0;
    m->output_norm = ld_vector(L, 1, m->n_embd, "%s", output_norm_name);
    m->tied = !gguf_find_tensor(m->gguf, "output.weight");
    if (m->tied)
        m->output = m->tok_embd;
    else
        ld_matrix(L, &m->output, 1, m->n_embd, m->n_vocab, "output.weight");
    return !L->failed;
}
