/* arch.c - the table of architectures, and model_load (arch.h). */
#include "engine/arch/arch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- architectures */

extern const arch_desc arch_qwen35, arch_qwen35moe, arch_qwen3next, arch_nemotron_h, arch_nemotron_h_moe,
    arch_mamba2, arch_mamba, arch_granitehybrid, arch_lfm2, arch_lfm2moe, arch_qwen3, arch_qwen2, arch_llama;

static const arch_desc *const archs[] = {&arch_qwen35,  &arch_qwen35moe,      &arch_qwen3next, &arch_nemotron_h,
                                         &arch_nemotron_h_moe, &arch_mamba2,  &arch_mamba,     &arch_granitehybrid,
                                         &arch_lfm2,    &arch_lfm2moe,        &arch_qwen3,     &arch_qwen2,
                                         &arch_llama};

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
    /* a template that does not compile does not stop the model: a conversation may bring
     * its own (settings.json's chat_template), and every other one is refused with why */
    m->tmpl = template_from_gguf(f, m->tok, m->tmpl_error, sizeof m->tmpl_error);

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
