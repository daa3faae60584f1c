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
/* nextn_predict_layers: the multi-token-prediction blocks are appended after the trunk
 * and not run, so they are left out of m->n_layer. */
int ld_skip_nextn(loader *L);
/* The head size of a hybrid whose head_count is per layer (0 in its recurrent blocks):
 * attention.key_length, by default n_embd / head_count of the first layer with heads. */
int ld_hybrid_head_dim(loader *L);

/* A pre-norm transformer block i (llama, qwen2, qwen3): attention behind attn_norm with
 * proto's n_head, head_dim, eps and kq_scale, head_count_kv[i] KV heads, rope of the
 * given kind over the whole head (as llama.cpp requires) and q/k norms when qk_norm;
 * then a SwiGLU FFN behind ffn_norm. */
int ld_transformer_block(loader *L, block *b, int i, const attn_layer *proto, int rope, int qk_norm);

/* The mixture-of-experts FFN of block i (its norm is bound by the caller), with the
 * routing, activation and sizes already set in *proto (n_expert, n_used, n_ff, n_latent,
 * gating, norm_w, w_scale, act, shared.kind and shared.n_ff): ffn_gate_inp, the experts
 * ffn_{gate,up,down}_exps (gate and up also as one ffn_gate_up_exps, gate rows first;
 * gate optional when gate_optional), exp_probs_b.bias when sel_bias, ffn_latent_down/_up
 * when n_latent differs from the embedding, the shared expert ffn_{gate,up,down}_shexp
 * and, when shared_gated, its gate ffn_gate_inp_shexp. */
int ld_moe(loader *L, block *b, int i, const moe_layer *proto, int sel_bias, int gate_optional, int shared_gated);
/* The experts' sizes of layer i as llama.cpp reads them: expert_count, expert_used_count
 * (per layer or one) and expert_feed_forward_length (per layer or one; when absent or 0,
 * feed_forward_length / expert_used_count) into proto; 0 when the layer has no experts
 * (expert_count 0). */
int ld_moe_shape(loader *L, int i, moe_layer *proto);

/* Qwen3.5's hyper-parameters (qwen35, qwen35moe, qwen3next) and its two mixers. */
typedef struct {
    int n_head, n_head_kv, head_dim, n_rot;
    float rope_base;
    int conv_k, d_k, n_k_heads, n_v_heads;
    uint32_t interval; /* full_attention_interval */
} qwen35_shape;
int ld_qwen35_shape(loader *L, qwen35_shape *s);
/* recurrent_layers[i] when present, else every interval-th layer is attention */
int qwen35_is_recurrent(loader *L, int i, int n_layer, uint32_t interval);
/* Gated DeltaNet of block i. qwen3next: beta and alpha in one ssm_ba (per key head j: the
 * r = Hv/Hk betas then the r alphas of value heads j*r .. j*r+r-1), and value head h reads
 * key head h / r (qwen35's converter reorders heads so that it is h mod Hk). */
int ld_gdn(loader *L, block *b, int i, const qwen35_shape *s, int qwen3next);
/* Gated attention of block i: attn_q holds [q, gate] per head, q/k norms, NEOX rope;
 * registers its KV slot. */
int ld_gated_attention(loader *L, block *b, int i, const qwen35_shape *s);
/* The same weights into *at without a KV slot (Qwen3.5's MTP block: mtp_enable adds it). */
int ld_gated_attention_weights(loader *L, attn_layer *at, int i, const qwen35_shape *s);
/* The mixer of block i behind attn_norm: Gated DeltaNet (ld_gdn's qwen3next layouts when
 * qwen3next) in a recurrent layer, else gated attention. */
int ld_qwen35_mixer(loader *L, block *b, int i, const qwen35_shape *s, int qwen3next);
/* The FFN of block i in qwen35moe and qwen3next, behind post_attention_norm: SwiGLU
 * experts (softmax router, weights renormalised, no scale) plus a SwiGLU shared expert of
 * width expert_shared_feed_forward_length (or feed_forward_length) gated by
 * sigmoid(ffn_gate_inp_shexp . y). Every block must have experts. */
int ld_qwen35_moe_ffn(loader *L, block *b, int i);
/* The dense SwiGLU FFN of block i in qwen35, behind post_attention_norm. */
int ld_qwen35_ffn(loader *L, block *b, int i);
/* Qwen3.5's MTP head (model.h), when the file has one (blk.<n_layer>.nextn.eh_proj): the
 * block after the trunk, a gated attention block with the trunk's shape whose FFN `ffn`
 * binds (ld_qwen35_ffn in qwen35, ld_qwen35_moe_ffn in qwen35moe), and the nextn
 * projections. Returns 1 without a head when the file has none. */
int ld_qwen35_mtp(loader *L, const qwen35_shape *s, int (*ffn)(loader *L, block *b, int i));

/* Nemotron-H's hyper-parameters (nemotron_h, nemotron_h_moe). */
typedef struct {
    mamba2_layer m2;
    int head_dim;
    float attn_scale; /* attention.scale; 0: 1/sqrt(head_dim) */
} nemotron_h_shape;
/* Read after ld_skip_nextn (the head size comes from the trunk's layers). */
int ld_nemotron_h_shape(loader *L, nemotron_h_shape *s);
/* Block i of Nemotron-H, one layer behind the block's one norm attn_norm: a ReLU² MLP
 * ('-') when feed_forward_length[i] > 0, else attention without rope ('*') when
 * head_count_kv[i] > 0, else Mamba-2 ('M'). */
int ld_nemotron_h_block(loader *L, block *b, int i, const nemotron_h_shape *s);

/* LFM2's gated short convolution of block i (lfm2, lfm2moe). */
int ld_shortconv(loader *L, block *b, int i, int l_cache);
/* LFM2's mixer of block i behind attn_norm: the short convolution when
 * head_count_kv[i] is 0, else attention with q/k norms and NEOX rope over heads of
 * head_dim. */
int ld_lfm2_mixer(loader *L, block *b, int i, int l_cache, int head_dim);

#endif
