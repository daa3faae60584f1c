/* synth.h - what `chatfs synth` writes: a text model of a published shape (synth_text.c),
 * or a vision projector (synth_mmproj.c). */
#ifndef CHATFS_SYNTH_H
#define CHATFS_SYNTH_H

#include <stdint.h>

#include "cli/synth/gguf_write.h"
#include "cli/synth/random_rows.h"
#include "cli/synth/shapes.h"

/* A random-weight vision projector of shape `shape` (tiny, qwen3.5-35b-a3b) in ggml type
 * `type` (type_name as the user wrote it) whose output width is n_embd_text (0: the
 * shape's own), into `out`. Returns 0, or 1 after one error line. */
int synth_mmproj(const char *shape, uint32_t type, const char *type_name, long n_embd_text, long seed,
                 const char *out, int quiet);

/* A text model being described to the writer: the shape, the type, the counters of
 * llama-quantize's Q4_K_M mix, and every tensor's values (alive until the file is saved). */
typedef struct {
    gguf_writer *w;
    const shape *c;
    uint32_t qtype;
    int n_layer;             /* blocks written: the shape's, or --layers */
    int q4_k_m;              /* llama-quantize's Q4_K_M mix instead of qtype everywhere */
    int i_attn_v, n_attn_v;  /* the mix's counters: tensors seen so far, and in all (a */
    int i_ffn_down, n_ffn_down; /* first pass over the model counts them) */
    uint64_t seed;
    init_spec *specs; /* one per tensor, alive until the file is written */
    int n_specs, cap_specs;
    int n_tensors;
    uint64_t n_params, n_bytes;
    int mtp;                 /* --mtp: Qwen3.5's MTP block after the trunk */
    int failed;
} builder;

/* Describes the model of b->c's architecture to b->w (tensors and metadata after the
 * general.* keys); failures set b->failed. */
void synth_text_build(builder *b);

#endif
