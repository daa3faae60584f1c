/* model.c - loading a model from GGUF and running its residual stack (see model.h). */
#include "engine/model/model.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels/quant.h"
#include "engine/model/state.h"

/* ---------------------------------------------------------------- architectures */

extern const arch_desc arch_qwen35, arch_nemotron_h, arch_mamba2, arch_mamba, arch_granitehybrid, arch_lfm2,
    arch_qwen3, arch_llama;

static const arch_desc *const archs[] = {&arch_qwen35, &arch_nemotron_h,   &arch_mamba2, &arch_mamba,
                                         &arch_granitehybrid, &arch_lfm2, &arch_qwen3,  &arch_llama};

const arch_desc *arch_find(const char *name) {
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (strcmp(archs[i]->name, name) == 0) return archs[i];
    return NULL;
}

static void arch_list(char *buf, size_t n) {
    buf[0] = 0;
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
        size_t k = strlen(buf);
        snprintf(buf + k, n - k, "%s%s", i ? ", " : "", archs[i]->name);
    }
}

/* ---------------------------------------------------------------- loader helpers */

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

int ld_kv_slot(loader *L, int kv_dim) {
    model *m = L->m;
    int *d = realloc(m->kv_dim, (size_t)(m->n_kv_slots + 1) * sizeof *d);
    if (!d) return ld_fail(L, "out of memory"), -1;
    m->kv_dim = d;
    d[m->n_kv_slots] = kv_dim;
    return m->n_kv_slots++;
}

/* ---------------------------------------------------------------- load */

model *model_load(const char *path, char *err, size_t errlen) {
    gguf_file *f = gguf_open(path, err, errlen);
    if (!f) return NULL;
    model *m = calloc(1, sizeof *m);
    if (!m) {
        gguf_close(f);
        snprintf(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    m->gguf = f;
    const char *base = strrchr(path, '/');
    loader L = {.m = m, .err = err, .errlen = errlen, .file = base ? base + 1 : path};

    gguf_str s;
    if (gguf_get_str(f, "general.architecture", &s) != 1 || s.len == 0 || s.len >= sizeof m->arch) {
        ld_fail(&L, "metadata 'general.architecture' is missing");
        goto fail;
    }
    gguf_str_copy(s, m->arch, sizeof m->arch);
    if (gguf_get_str(f, "general.name", &s) == 1) gguf_str_copy(s, m->name, sizeof m->name);
    const arch_desc *arch = arch_find(m->arch);
    if (!arch) {
        char list[256];
        arch_list(list, sizeof list);
        ld_fail(&L, "architecture '%s' is not supported (supported: %s)", m->arch, list);
        goto fail;
    }

    m->n_embd = (int)ld_u32(&L, "embedding_length", 1, 0);
    m->n_layer = (int)ld_u32(&L, "block_count", 1, 0);
    m->n_ctx_train = (int)ld_u32(&L, "context_length", 0, 4096);
    m->eps = ld_f32(&L, "attention.layer_norm_rms_epsilon", 0, 1e-5f);
    m->embedding_scale = m->residual_scale = m->logit_scale = 1.0f;
    if (L.failed) goto fail;
    if (m->n_embd <= 0 || m->n_embd > (1 << 16) || m->n_layer <= 0 || m->n_layer > 1024) {
        ld_fail(&L, "implausible model size (embedding_length %d, block_count %d)", m->n_embd, m->n_layer);
        goto fail;
    }
    if (m->n_ctx_train <= 0 || m->n_ctx_train > (1 << 20)) m->n_ctx_train = 1 << 20;

    char tok_err[256];
    m->tok = tokenizer_load(f, tok_err, sizeof tok_err);
    if (!m->tok) {
        ld_fail(&L, "%s", tok_err[0] ? tok_err : "the tokenizer cannot be loaded"); /* with the file's name */
        goto fail;
    }
    m->n_vocab = tokenizer_n_vocab(m->tok);
    gguf_str tmpl;
    char *jinja = NULL;
    if (gguf_get_str(f, "tokenizer.chat_template", &tmpl) == 1 && (jinja = malloc((size_t)tmpl.len + 1)))
        gguf_str_copy(tmpl, jinja, (size_t)tmpl.len + 1);
    template_detect(&m->tmpl, jinja);
    free(jinja);

    m->blocks = calloc((size_t)m->n_layer, sizeof *m->blocks);
    if (!m->blocks) {
        ld_fail(&L, "out of memory");
        goto fail;
    }
    if (!arch->load(&L) || L.failed) goto fail;
    if (!m->tok_embd.data) {
        ld_fail(&L, "architecture loader bound no token embeddings");
        goto fail;
    }
    m->trimmable = m->n_rec_slots == 0;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        m->n_params += (uint64_t)(f->tensors[i].ne[0] * f->tensors[i].ne[1] * f->tensors[i].ne[2] * f->tensors[i].ne[3]);
    return m;
fail:
    model_free(m);
    return NULL;
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

void model_free(model *m) {
    if (!m) return;
    state_drop_spare(m); /* a kept state points at this model */
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->blocks);
    free(m->rec);
    free(m->kv_dim);
    tokenizer_free(m->tok);
    gguf_close(m->gguf);
    free(m);
}

void model_pattern(const model *m, char *buf, size_t n) {
    static const char sym[] = {'-', '*', 'G', 'M', 'S', 'C'};
    size_t k = 0;
    for (int i = 0; i < m->n_layer && k + 1 < n; i++) buf[k++] = sym[m->blocks[i].mixer];
    if (n) buf[k] = 0;
}

int model_tensor_types(const model *m, uint32_t *types, uint64_t *counts, int max) {
    int n = 0;
    for (uint64_t i = 0; i < m->gguf->n_tensors; i++) {
        uint32_t t = m->gguf->tensors[i].type;
        int j = 0;
        while (j < n && types[j] != t) j++;
        if (j == n) {
            if (n == max) continue;
            types[n] = t;
            counts[n++] = 0;
        }
        counts[j]++;
    }
    return n;
}

/* ---------------------------------------------------------------- forward */

/* each segment's last `keep` rows of buf moved to its front, one segment after the other;
 * returns their count */
static int keep_logit_rows(float *buf, const segment *segs, int n_segs, int E) {
    int r = 0;
    for (int i = 0; i < n_segs; i++)
        for (int t = segs[i].n - segs[i].keep; t < segs[i].n; t++, r++)
            if (segs[i].row0 + t != r)
                memmove(buf + (size_t)r * E, buf + (size_t)(segs[i].row0 + t) * E, (size_t)E * sizeof *buf);
    return r;
}

/* rows of a sequence that give logits: all, its last, or none */
static int logit_rows(const batch_seq *b) { return b->logits == 2 ? b->n_tokens : b->logits == 1 ? 1 : 0; }

int model_forward(const model *m, batch_seq *seqs, int n_seqs, arena *a) {
    const int E = m->n_embd;
    int N = 0, n_logit_rows = 0;
    for (int i = 0; i < n_seqs; i++) {
        batch_seq *b = &seqs[i];
        if (b->n_tokens <= 0 || b->state->m != m) return -1;
        for (int t = 0; t < b->n_tokens; t++)
            if (b->tokens[t] < 0 || b->tokens[t] >= m->n_vocab) return -1;
        if (state_reserve(b->state, b->state->n_past + b->n_tokens) != 0) return -1;
        N += b->n_tokens;
        n_logit_rows += logit_rows(b);
    }
    if (N == 0) return 0;

    segment *segs = arena_alloc(a, (size_t)n_seqs * sizeof *segs);
    for (int i = 0, row = 0; i < n_seqs; i++) {
        const int cap = seqs[i].capture > 0 && seqs[i].capture < seqs[i].n_tokens && seqs[i].capture_rec
                            ? seqs[i].capture : 0;
        const seq_state *s = seqs[i].state;
        segs[i] = (segment){.k = s->k, .v = s->v, .rec = s->rec, .rec_slots = m->rec, .row0 = row,
                            .n = seqs[i].n_tokens, .pos0 = s->n_past, .capture = cap,
                            .capture_rec = seqs[i].capture_rec, .keep = logit_rows(&seqs[i])};
        row += seqs[i].n_tokens;
    }
    float *h = arena_floats(a, (size_t)N * E), *x = arena_floats(a, (size_t)N * E), *y = arena_floats(a, (size_t)N * E);

    /* h = embedding_scale * token_embd[token] */
    for (int i = 0; i < n_seqs; i++)
        for (int t = 0; t < seqs[i].n_tokens; t++) {
            float *hr = h + (size_t)(segs[i].row0 + t) * E;
            matrix_get_row(&m->tok_embd, seqs[i].tokens[t], hr);
            if (m->embedding_scale != 1.0f)
                for (int c = 0; c < E; c++) hr[c] *= m->embedding_scale;
        }

    int rows = N; /* rows still carried; only the logit rows once the last layer keeps them */
    for (int li = 0; li < m->n_layer; li++) {
        const block *b = &m->blocks[li];
        /* Past the last layer only the logit rows are read; its state and cache still take
         * every row. So its attention, output projection and FFN run on those rows alone
         * (llama.cpp drops the others there too, or later). A row's result does not depend
         * on the other rows of a batch, in every kernel, so the logits stay the same. */
        const int trim = li == m->n_layer - 1 && n_logit_rows < N;
        if (b->mixer != MIX_NONE) {
            rmsnorm_rows(x, h, b->mixer_norm, N, E, m->eps);
            switch (b->mixer) {
            case MIX_ATTN: attention_forward(&b->attn, segs, n_seqs, N, E, x, y, trim, a); break;
            case MIX_GDN: gdn_forward(&b->gdn, segs, n_seqs, N, E, x, y, a); break;
            case MIX_MAMBA2: mamba2_forward(&b->m2, segs, n_seqs, N, E, x, y, a); break;
            case MIX_MAMBA1: mamba1_forward(&b->m1, segs, n_seqs, N, E, x, y, a); break;
            case MIX_SHORTCONV: shortconv_forward(&b->sc, segs, n_seqs, N, x, y, a); break;
            default: return -1;
            }
            if (trim) {
                rows = keep_logit_rows(h, segs, n_seqs, E);
                if (b->mixer != MIX_ATTN) keep_logit_rows(y, segs, n_seqs, E); /* attention wrote only those */
            }
            add_scaled(h, y, m->residual_scale, (size_t)rows * E);
        } else if (trim) {
            rows = keep_logit_rows(h, segs, n_seqs, E);
        }
        if (b->ffn_norm && rows > 0) {
            rmsnorm_rows(x, h, b->ffn_norm, rows, E, m->eps);
            ffn_forward(&b->ffn, rows, E, x, y, a);
            add_scaled(h, y, m->residual_scale, (size_t)rows * E);
        }
    }
    for (int i = 0; i < n_seqs; i++) seqs[i].state->n_past += seqs[i].n_tokens;

    /* logits only for the rows asked for: h starts with them, in order (kept by the last
     * layer, or every row when all give logits) */
    if (n_logit_rows > 0) {
        float *xo = arena_floats(a, (size_t)n_logit_rows * E);
        float *lo = arena_floats(a, (size_t)n_logit_rows * m->n_vocab);
        float **dst = arena_alloc(a, sizeof *dst * (size_t)n_logit_rows);
        for (int i = 0, r = 0; i < n_seqs; r += segs[i++].keep)
            for (int k = 0; k < segs[i].keep; k++) dst[r + k] = seqs[i].out + (size_t)k * m->n_vocab;
        rmsnorm_rows(xo, h, m->output_norm, n_logit_rows, E, m->eps);
        /* as llama.cpp, a logit scale is a multiplication by its reciprocal */
        matmul_scatter(&m->output, xo, n_logit_rows, lo, dst, 1.0f / m->logit_scale);
    }
    arena_reset(a);
    return 0;
}

int model_prefill(const model *m, struct seq_state *s, const int *tokens, int n, int chunk, float *logits, arena *a) {
    if (chunk <= 0) chunk = 512;
    for (int i = 0; i < n; i += chunk) {
        int k = n - i < chunk ? n - i : chunk;
        batch_seq b = {.state = s, .tokens = tokens + i, .n_tokens = k, .logits = (i + k == n && logits) ? 1 : 0,
                       .out = logits};
        if (model_forward(m, &b, 1, a) != 0) return -1;
    }
    return 0;
}
