/* test_parity_types.c - the engine's prefix property for every architecture in every
 * weight type it computes (issues "Engine core" and "Architectures", acceptance).
 *
 * The oracle's fixtures are F32 (and F16/Q8_0 for qwen35 only), so this test converts
 * each F32 fixture the way llama-quantize would - the 2-D weight matrices and 3-D expert
 * tensors whose rows fit the type's block; norms, convolution kernels, the SSM's A and D
 * and the MoE routers stay F32 - into F16,
 * BF16, Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1, writes it to tests/tmp and checks the prefix
 * property on it (parity.h, on the first 320 tokens of the long prompt): one chunk vs
 * token by token vs split at K in {1, 63, 64, 65, 300} (all at once, and each alone) vs
 * the state copied at K, logits within 1e-4. The K-quants need 256-element rows, which
 * the tiny fixtures do not have: the qwen35-small Q4_K/Q5_K/Q6_K fixtures carry them.
 * (F32, and qwen35's F16 and Q8_0, are in test_parity_archs and test_parity_qwen35.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/gguf/gguf.h"
#include "cli/synth/quantize.h"
#include "engine/kernels/quant.h"
#include "engine/base/threadpool.h"
#include "tests/parity.h"

static const char *const fixtures[] = {"qwen35-tiny-f32",     "nemotron_h-tiny-f32",    "mamba2-tiny-f32",
                                       "mamba-tiny-f32",      "granitehybrid-tiny-f32", "lfm2-tiny-f32",
                                       "qwen3-tiny-f32",      "qwen2-tiny-f32",         "llama-tiny-f32",
                                       /* mixture of experts: the 3-D expert tensors converted too */
                                       "qwen35moe-tiny-f32",  "nemotron_h_moe-tiny-latent-f32",
                                       "granitehybrid-tiny-moe-f32"};
static const uint32_t types[] = {GGML_F16, GGML_BF16, GGML_Q8_0, GGML_Q4_0, GGML_Q4_1, GGML_Q5_0, GGML_Q5_1};
#define N_FIXTURES (int)(sizeof fixtures / sizeof fixtures[0])
#define N_TYPES (int)(sizeof types / sizeof types[0])
#define N_TOKENS 320 /* of the long prompt: past the last split (300), and quick */

/* a tensor llama-quantize would convert: a 2-D weight matrix or a 3-D expert tensor, not
 * a norm, a conv kernel or an MoE router (ffn_gate_inp stays F32) */
static int converted(const gguf_tensor *t, uint32_t type) {
    const size_t n = strlen(t->name);
    return (t->n_dims == 2 || (t->n_dims == 3 && strstr(t->name, "_exps"))) && n > 7 &&
           !strcmp(t->name + n - 7, ".weight") && !strstr(t->name, "_norm") && !strstr(t->name, "conv1d") &&
           !strstr(t->name, "shortconv.conv") && !strstr(t->name, "ffn_gate_inp") &&
           t->ne[0] % ggml_blck_size(type) == 0;
}

static int write_failed;

static void put(FILE *f, const void *p, size_t n) {
    if (fwrite(p, 1, n, f) != n) write_failed = 1;
}

static void pad(FILE *f, uint64_t *at, uint64_t align) {
    static const char zeros[64];
    while (*at % align) {
        const uint64_t k = align - *at % align < sizeof zeros ? align - *at % align : sizeof zeros;
        put(f, zeros, (size_t)k);
        *at += k;
    }
}

/* writes g (an F32 model) to path with its weight matrices in `type`; returns how many
 * tensors were converted */
static int write_converted(const gguf_file *g, uint32_t type, const char *path) {
    uint64_t kv_end = 24;
    for (uint64_t i = 0; i < g->n_kv; i++) kv_end += 8 + g->kv[i].key.len + 4 + g->kv[i].size;
    uint64_t *off = calloc(g->n_tensors, sizeof *off), *nbytes = calloc(g->n_tensors, sizeof *nbytes), data = 0;
    REQUIRE(off && nbytes, "out of memory");
    int n_conv = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        REQUIRE(t->type == GGML_F32, "%s is not F32", t->name);
        const int conv = converted(t, type);
        n_conv += conv;
        nbytes[i] = conv ? (uint64_t)(t->ne[1] * t->ne[2]) * t->ne[0] / ggml_blck_size(type) * ggml_type_size(type)
                         : t->nbytes;
        off[i] = data;
        data = (data + nbytes[i] + g->alignment - 1) / g->alignment * g->alignment;
    }
    FILE *f = fopen(path, "wb");
    REQUIRE(f, "cannot write %s", path);
    uint64_t at = kv_end;
    put(f, g->map, (size_t)kv_end); /* header and metadata as they are */
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        const uint64_t len = strlen(t->name);
        const uint32_t ty = converted(t, type) ? type : t->type;
        put(f, &len, 8);
        put(f, t->name, (size_t)len);
        put(f, &t->n_dims, 4);
        for (uint32_t d = 0; d < t->n_dims; d++) put(f, &t->ne[d], 8);
        put(f, &ty, 4);
        put(f, &off[i], 8);
        at += 8 + len + 4 + 8 * (uint64_t)t->n_dims + 4 + 8;
    }
    pad(f, &at, g->alignment);
    const uint64_t base = at;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        at = base + off[i];
        if (!converted(t, type)) {
            put(f, t->data, (size_t)t->nbytes);
        } else {
            const size_t row = (size_t)t->ne[0] / ggml_blck_size(type) * ggml_type_size(type);
            char *q = malloc(row);
            REQUIRE(q, "out of memory");
            int ok = 1;
            for (int64_t r = 0; r < t->ne[1] * t->ne[2]; r++) {
                ok &= quantize_row_weight(type, (const float *)t->data + r * t->ne[0], q, t->ne[0]) == 0;
                put(f, q, row);
            }
            REQUIRE(ok, "cannot convert %s to %s", t->name, ggml_type_name(type));
            free(q);
        }
        at += nbytes[i];
        if (i + 1 < g->n_tensors) pad(f, &at, g->alignment);
    }
    REQUIRE(fclose(f) == 0 && !write_failed, "cannot write %s", path);
    free(off);
    free(nbytes);
    return n_conv;
}

int main(void) {
    pool_set_threads(2);
    mkdir("tests/tmp", 0755);
    char path[256], tmp[256], err[256], label[96];
    for (int i = 0; i < N_FIXTURES; i++) {
        snprintf(path, sizeof path, FIXTURES "%s.gguf", fixtures[i]);
        gguf_file *g = gguf_open(path, err, sizeof err);
        REQUIRE(g, "%s", err);
        for (int k = 0; k < N_TYPES; k++) {
            snprintf(tmp, sizeof tmp, "tests/tmp/test_parity_types.%d.gguf", (int)getpid());
            const int n_conv = write_converted(g, types[k], tmp);
            model *m = model_load(tmp, err, sizeof err);
            CHECK(m, "%s as %s: %s", fixtures[i], ggml_type_name(types[k]), err);
            if (m) {
                /* the matrices really are in the type: the file is not the F32 one again */
                CHECK(n_conv >= m->n_layer, "%s as %s: only %d tensors converted", fixtures[i],
                      ggml_type_name(types[k]), n_conv);
                for (int li = 0; li < m->n_layer; li++) /* and so are the experts */
                    if (m->blocks[li].moe.n_expert)
                        CHECK(m->blocks[li].moe.up.m.type == types[k] && m->blocks[li].moe.down.m.type == types[k],
                              "%s as %s: layer %d's experts are %s", fixtures[i], ggml_type_name(types[k]), li,
                              ggml_type_name(m->blocks[li].moe.up.m.type));
                snprintf(label, sizeof label, "%.*s %s", (int)(strlen(fixtures[i]) - 4), fixtures[i],
                         ggml_type_name(types[k]));
                parity_prefix_model(m, label, N_TOKENS, 1, 1);
                model_free(m);
            }
            remove(tmp);
        }
        gguf_close(g);
    }
    static const char *const kquants[] = {"qwen35-small-q4_k", "qwen35-small-q5_k", "qwen35-small-q6_k"};
    for (int i = 0; i < 3; i++) {
        model *m = parity_load(kquants[i]);
        parity_prefix_model(m, kquants[i], N_TOKENS, 1, 1);
        model_free(m);
    }
    pool_shutdown();
    return check_report("test_parity_types");
}
