/* cmd_synth.c - `chatfs synth`: a random-weight GGUF with the exact shape of a real model
 * (docs/engine-math.md §10), for benchmarks and tests.
 *
 *   chatfs synth --shape qwen3.5-0.8b --type q8_0 --out FILE [--layers N] [--seed S] [-t N] [--mtp]
 *   chatfs synth --mmproj tiny --n-embd 64 --type f32 --out FILE     (a vision projector:
 *                                                                    synth_mmproj.c)
 *
 * --layers N keeps the first N blocks of the shape's layer pattern (for machines that
 * cannot hold a whole mixture-of-experts model): every layer keeps its real size.
 * Metadata keys, tensor names and shapes follow what llama.cpp's loader expects (so the
 * same file runs in llama.cpp for side-by-side comparisons). Weights are deterministic
 * normal values (std 1/sqrt(fan-in), like tools' mkgguf.py) from (seed, tensor name, row),
 * converted to the requested type; norms are ones, decay and time-step parameters are
 * drawn from the ranges the real models use. Matrices whose row length does not fit the
 * type's block fall back like llama-quantize (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0,
 * then F16). Type q4_k_m is llama-quantize's Q4_K_M mix (see mix_type), the file most
 * people download (synth_text.c; the shapes in shapes.c). The tokenizer is byte-level (256 byte tokens, a few merges, the ChatML
 * specials), padded to the real vocabulary size. --mtp (Qwen3.5 shapes) appends the
 * multi-token-prediction block that Qwen3.5 GGUFs converted with it carry (block_count one
 * more than the trunk, nextn_predict_layers 1; docs/engine-math.md §12), for speculative
 * decoding benchmarks. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/synth/synth.h"
#include "engine/kernels/quant.h"
#include "engine/base/threadpool.h"

static void usage_lists(void) {
    fprintf(stderr, "shapes:");
    for (int i = 0; i < synth_n_shapes; i++) fprintf(stderr, " %s", synth_shapes[i].name);
    fprintf(stderr, "\ntypes:");
    for (int i = 0; i < synth_n_types; i++) fprintf(stderr, " %s", synth_types[i].name);
    fprintf(stderr, "\n");
}

int cmd_synth(int argc, char **argv) {
    const char *shape_name = NULL, *type_name = NULL, *out = NULL, *mmproj = NULL;
    long seed = 1234, threads = 0, layers = 0, n_embd_text = 0;
    int quiet = 0, mtp = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--shape")) shape_name = v, i++;
        else if (!strcmp(a, "--mtp")) mtp = 1;
        else if (!strcmp(a, "--mmproj")) mmproj = v, i++;
        else if (!strcmp(a, "--n-embd")) { if (!cli_int(a, v, 1, 1 << 20, &n_embd_text)) return 1; i++; }
        else if (!strcmp(a, "--type")) type_name = v, i++;
        else if (!strcmp(a, "--out")) out = v, i++;
        else if (!strcmp(a, "--seed")) { if (!cli_int(a, v, 0, 0x7fffffffL, &seed)) return 1; i++; }
        else if (!strcmp(a, "--layers")) { if (!cli_int(a, v, 1, 1024, &layers)) return 1; i++; }
        else if (!strcmp(a, "-t")) { if (!cli_int(a, v, 0, 256, &threads)) return 1; i++; }
        else if (!strcmp(a, "-q")) quiet = 1;
        else { cli_error("synth: unknown option '%s'", a); return 1; }
    }
    const shape *c = NULL;
    for (int i = 0; shape_name && i < synth_n_shapes; i++)
        if (!strcmp(synth_shapes[i].name, shape_name)) c = &synth_shapes[i];
    int ti = -1;
    for (int i = 0; type_name && i < synth_n_types; i++)
        if (!strcasecmp(synth_types[i].name, type_name)) ti = i;
    if (mmproj && ti >= 0 && out) {
        if (synth_types[ti].ftype == FTYPE_Q4_K_M) {
            cli_error("synth: a projector takes one type (f32, f16, bf16, q8_0), not the q4_k_m mix");
            return 1;
        }
        return synth_mmproj(mmproj, synth_types[ti].type, synth_types[ti].name, n_embd_text, seed, out, quiet);
    }
    if (!c || ti < 0 || !out) {
        cli_error("synth needs --shape SHAPE --type TYPE --out FILE%s", (shape_name && !c) || (type_name && ti < 0) ? " (unknown shape or type)" : "");
        usage_lists();
        return 1;
    }
    if (mtp && strcmp(c->arch, "qwen35") && strcmp(c->arch, "qwen35moe")) {
        cli_error("synth: --mtp is for Qwen3.5 shapes (%s is %s)", c->name, c->arch);
        return 1;
    }
    pool_set_threads((int)threads);
    const int full = c->pattern ? (int)strlen(c->pattern) : c->n_layer;
    builder b = {.w = gguf_writer_new(),
                 .c = c,
                 .n_layer = layers > 0 && layers < full ? (int)layers : full,
                 .qtype = synth_types[ti].type,
                 .q4_k_m = synth_types[ti].ftype == FTYPE_Q4_K_M,
                 .mtp = mtp,
                 .seed = (uint64_t)seed * 0x9e3779b97f4a7c15ULL};
    b.cap_specs = 4096;
    b.specs = calloc((size_t)b.cap_specs, sizeof *b.specs);
    if (!b.w || !b.specs) {
        cli_error("out of memory");
        gguf_writer_free(b.w);
        free(b.specs);
        return 1;
    }
    char name[160];
    if (b.n_layer < full)
        snprintf(name, sizeof name, "chatfs-synth-%s-%dL-%s%s", c->name, b.n_layer, synth_types[ti].name, mtp ? "-mtp" : "");
    else
        snprintf(name, sizeof name, "chatfs-synth-%s-%s%s", c->name, synth_types[ti].name, mtp ? "-mtp" : "");
    /* the Q4_K_M mix needs how many attn_v and ffn_down tensors there are: a first pass
     * describes the model to a writer that is thrown away, and counts them */
    for (int pass = b.q4_k_m ? 0 : 1; pass < 2; pass++) {
        if (pass == 1 && b.q4_k_m) {
            gguf_writer_free(b.w);
            b.w = gguf_writer_new();
            b.n_attn_v = b.i_attn_v, b.n_ffn_down = b.i_ffn_down;
            b.i_attn_v = b.i_ffn_down = b.n_specs = b.n_tensors = 0;
            b.n_params = b.n_bytes = 0;
            if (!b.w) {
                cli_error("out of memory");
                free(b.specs);
                return 1;
            }
        }
        gguf_w_str(b.w, "general.architecture", c->arch);
        gguf_w_str(b.w, "general.type", "model");
        gguf_w_str(b.w, "general.name", name);
        gguf_w_u32(b.w, "general.file_type", synth_types[ti].ftype);
        gguf_w_u32(b.w, "general.quantization_version", 2);
        gguf_w_u32(b.w, "general.alignment", 32);
        synth_text_build(&b);
    }
    char err[512];
    int rc = 0;
    if (b.failed) {
        cli_error("synth: could not describe %s", c->name);
        rc = 1;
    } else if (gguf_writer_save(b.w, out, err, sizeof err) != 0) {
        cli_error("%s", err);
        rc = 1;
    } else if (!quiet) {
        fprintf(stderr, "wrote %s: %s (%d of %d blocks) %s, %d tensors, %llu parameters, %.1f MB of tensor data\n",
                out, c->name, b.n_layer, full, synth_types[ti].name, b.n_tensors, (unsigned long long)b.n_params,
                (double)b.n_bytes / 1e6);
    }
    gguf_writer_free(b.w);
    free(b.specs);
    return rc;
}
