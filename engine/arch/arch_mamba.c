/* arch_mamba.c - Mamba-1 (docs/engine-math.md §5; llama.cpp src/models/mamba.cpp): a
 * stack of selective-scan mixers, no attention, no FFN. FalconMamba is the same with
 * ssm.dt_b_c_rms set.
 *
 *   h += Mamba1(RMSNorm(h, attn_norm)) */
#include "engine/arch/arch_common.h"

static int mamba_load(loader *L) {
    model *m = L->m;
    const int E = m->n_embd;
    mamba1_layer p = {
        .conv_k = (int)ld_u32(L, "ssm.conv_kernel", 1, 0),
        .d_inner = (int)ld_u32(L, "ssm.inner_size", 1, 0),
        .d_state = (int)ld_u32(L, "ssm.state_size", 1, 0),
        .dt_rank = (int)ld_u32(L, "ssm.time_step_rank", 1, 0),
        .dt_b_c_rms = ld_bool(L, "ssm.dt_b_c_rms", 0),
        .eps = m->eps,
    };
    if (L->failed) return 0;
    if (p.conv_k < 1 || p.conv_k > 64 || p.d_state <= 0 || p.d_state > 4096 || p.dt_rank <= 0 ||
        p.dt_rank > p.d_inner)
        return ld_fail(L, "inconsistent Mamba hyper-parameters (conv_kernel %d, inner_size %d, state_size %d, "
                       "time_step_rank %d)", p.conv_k, p.d_inner, p.d_state, p.dt_rank);
    if (p.d_inner != 2 * E) /* as llama.cpp: only an expansion factor of 2 */
        return ld_fail(L, "ssm.inner_size %d is not twice embedding_length %d", p.d_inner, E);

    const int D = p.d_inner, N = p.d_state, K = p.conv_k;
    for (int i = 0; i < m->n_layer && !L->failed; i++) {
        block *b = &m->blocks[i];
        mamba1_layer *l = &b->m1;
        *l = p;
        b->mixer = MIX_MAMBA1;
        b->mixer_norm = ld_vector(L, 1, E, "blk.%d.attn_norm.weight", i);
        ld_matrix(L, &l->w_in, 1, E, 2 * D, "blk.%d.ssm_in.weight", i);
        ld_matrix(L, &l->w_x, 1, D, l->dt_rank + 2 * N, "blk.%d.ssm_x.weight", i);
        ld_matrix(L, &l->w_dt, 1, l->dt_rank, D, "blk.%d.ssm_dt.weight", i);
        ld_matrix(L, &l->w_out, 1, D, E, "blk.%d.ssm_out.weight", i);
        if (ld_shape(L, 1, K, D, "blk.%d.ssm_conv1d.weight", i))
            l->conv_w = ld_vector(L, 1, (int64_t)K * D, "blk.%d.ssm_conv1d.weight", i);
        if (ld_shape(L, 1, N, D, "blk.%d.ssm_a", i)) l->a = ld_vector(L, 1, (int64_t)N * D, "blk.%d.ssm_a", i);
        l->conv_b = ld_vector(L, 1, D, "blk.%d.ssm_conv1d.bias", i);
        l->dt_bias = ld_vector(L, 1, D, "blk.%d.ssm_dt.bias", i);
        l->d = ld_vector(L, 1, D, "blk.%d.ssm_d", i);
        if (!L->failed) l->rec_slot = ld_rec_slot(L, mamba1_conv_floats(l), mamba1_ssm_floats(l));
    }
    if (L->failed) return 0;
    return ld_embeddings(L, "output_norm.weight");
}

const arch_desc arch_mamba = {"mamba", mamba_load};
