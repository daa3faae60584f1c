/* shapes.h - the model shapes and weight types of `chatfs synth` (shapes.c). */
#ifndef CHATFS_SYNTH_SHAPES_H
#define CHATFS_SYNTH_SHAPES_H

#include <stdint.h>

#include "engine/gguf/gguf.h"

typedef struct {
    const char *name, *arch;
    int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, tied, ctx;
    float rope_base, eps;
    /* qwen35 */
    int rope_dim, lin_k, lin_v, lin_dk, conv_k;
    /* mamba / hybrid: pattern (M mamba2, * attention, - MLP) or attention layer list */
    const char *pattern;
    int ssm_heads, ssm_head_dim, ssm_groups, ssm_state, dt_rank;
    int attn_layers[8], n_attn_layers;
    /* granite */
    float emb_scale, res_scale, logit_scale, attn_scale;
    /* mixture of experts: experts per block, chosen per token, their width, the shared
     * expert's width (0: none), dense blocks before the first MoE block (lfm2moe), the
     * routing weights' scale (nemotron_h_moe) */
    int n_expert, n_used, n_ff_exp, n_ff_shexp, n_dense_lead;
    float w_scale;
} shape;

extern const shape synth_shapes[];
extern const int synth_n_shapes;

typedef struct {
    const char *name;
    uint32_t type, ftype; /* ggml type, llama_ftype for general.file_type */
} synth_type;

extern const synth_type synth_types[];
extern const int synth_n_types;
#define FTYPE_Q4_K_M 15 /* synth_types' q4_k_m: llama-quantize's mix (synth_text.c mix_type) */

#endif
