/* arch_qwen35.c - Qwen3.5 dense (docs/engine-math.md §7; llama.cpp src/models/qwen35.cpp):
 * three Gated DeltaNet blocks then one gated attention block, repeated; every block has a
 * SwiGLU FFN.
 *
 *   h += Mixer(RMSNorm(h, attn_norm))          Mixer = GDN, or gated attention with q/k norm
 *   h += FFN(RMSNorm(h, post_attention_norm))     and partial NEOX rope (IMROPE for text)
 *
 * The converter already added 1 to the norm weights, so they are used as stored. The
 * mixers' binder (ld_qwen35_mixer) is shared with qwen35moe and qwen3next.
 * A file converted with the multi-token-prediction weights also has the MTP head (§12). */
#include <stdio.h>
#include <stdlib.h>

#include "engine/arch/arch_common.h"

/* The dense SwiGLU FFN of block i and the norm before it (the trunk's blocks and the MTP block). */
static void qwen35_ffn(loader *L, block *b, int i) {
    b->ffn_norm = ld_vector(L, 1, L->m->n_embd, "blk.%d.post_attention_norm.weight", i);
    ld_ffn(L, b, i, FFN_SWIGLU, (int)ld_layer_i64(L, "feed_forward_length", i, 0));
}

/* The MTP head (model.h), block n_layer - the first of the nextn blocks after the trunk
 * (llama.cpp runs only one): a gated attention block with the trunk's shape and its FFN,
 * plus nextn.eh_proj, enorm, hnorm and the optional shared_head_norm, embed_tokens and
 * shared_head_head (Qwen3.5 has none of those three: then output_norm, token_embd and the
 * output head). Its KV slot is registered only by mtp_enable, so that a model that does not
 * speculate keeps the state layout (and the checkpoints) it has without the head. A file
 * converted without the head (no nextn.eh_proj) just has none. */
static int qwen35_mtp(loader *L, const qwen35_shape *s) {
    model *m = L->m;
    const int i = m->n_layer, E = m->n_embd;
    char name[64];
    snprintf(name, sizeof name, "blk.%d.nextn.eh_proj.weight", i);
    if (!gguf_find_tensor(m->gguf, name)) return 1;
    mtp_head *p = calloc(1, sizeof *p);
    if (!p) return ld_fail(L, "out of memory");
    m->mtp = p;
    block *b = &p->blk;
    b->mixer = MIX_ATTN;
    b->mixer_norm = ld_vector(L, 1, E, "blk.%d.attn_norm.weight", i);
    ld_gated_attention_weights(L, &b->attn, i, s);
    b->attn.kv_slot = -1;
    qwen35_ffn(L, b, i);
    ld_matrix(L, &p->eh_proj, 1, 2 * E, E, "blk.%d.nextn.eh_proj.weight", i);
    p->enorm = ld_vector(L, 1, E, "blk.%d.nextn.enorm.weight", i);
    p->hnorm = ld_vector(L, 1, E, "blk.%d.nextn.hnorm.weight", i);
    p->head_norm = ld_vector(L, 0, E, "blk.%d.nextn.shared_head_norm.weight", i);
    if (!p->head_norm) p->head_norm = m->output_norm;
    if (!ld_matrix(L, &p->embed, 0, E, m->n_vocab, "blk.%d.nextn.embed_tokens.weight", i)) p->embed = m->tok_embd;
    if (!ld_matrix(L, &p->head, 0, E, m->n_vocab, "blk.%d.nextn.shared_head_head.weight", i)) p->head = m->output;
    p->draft_vocab = m->n_vocab;
    return !L->failed;
}

static int qwen35_load(loader *L) {
    model *m = L->m;
    qwen35_shape s;
    if (!ld_qwen35_shape(L, &s)) return 0;
    const int nextn = (int)ld_u32(L, "nextn_predict_layers", 0, 0);
    if (!ld_skip_nextn(L)) return 0; /* the MTP blocks come after the trunk, not in its stack */
    for (int i = 0; i < m->n_layer; i++) {
        block *b = &m->blocks[i];
        ld_qwen35_mixer(L, b, i, &s, 0); /* attn_norm; GDN or gated attention */
        qwen35_ffn(L, b, i);
        if (L->failed) return 0;
    }
    if (!ld_embeddings(L, "output_norm.weight")) return 0;
    return nextn > 0 ? qwen35_mtp(L, &s) : 1;
}

const arch_desc arch_qwen35 = {"qwen35", qwen35_load};
