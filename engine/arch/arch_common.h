/* arch_common.h - the binders the architecture files share (arch_common.c): each binds
 * the tensors of one kind of layer of block i, checking every shape. */
#ifndef CHATFS_ARCH_COMMON_H
#define CHATFS_ARCH_COMMON_H

#include "engine/arch/arch.h"
#include "engine/model/loader.h"

/* Rope settings common to all families: rope.freq_base (default 10000), the linear
 * rope.scaling.* factor, rope.dimension_count (default head_dim) and the optional
 * rope_freqs.weight factors; kind is the family's rope kind. Other scaling types fail. */
int ld_rope(loader *L, attn_layer *at, int kind);
/* Attention of block i with the shape, rope and scale already set in *proto: attn_q/k/v
 * (or fused attn_qkv), attn_output, their optional biases, and attn_q_norm/attn_k_norm
 * when qk_norm. Registers the KV slot. */
int ld_attention(loader *L, block *b, int i, const attn_layer *proto, int qk_norm);
/* The Mamba-2 shape from <arch>.ssm.* into proto (checked). */
int ld_mamba2_shape(loader *L, mamba2_layer *proto);
/* The Mamba-2 mixer of block i with proto's shape; registers its recurrent state. */
int ld_mamba2(loader *L, block *b, int i, const mamba2_layer *proto);
/* FFN of block i (its norm is bound by the caller): ffn_up/ffn_down (and ffn_gate for
 * SwiGLU) of width n_ff, with optional biases. */
int ld_ffn(loader *L, block *b, int i, int kind, int n_ff);
/* Fails (naming the architecture) when <arch>.expert_count > 0: MoE is not supported. */
int ld_no_experts(loader *L);

#endif
