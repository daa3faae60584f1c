/* model.c - a model's residual stack (see model.h): the forward pass over a batch of
 * sequences, and what `chatfs info` asks of a loaded model. */
#include "engine/model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/mtp.h"
#include "engine/model/state.h"

void model_free(model *m) {
    if (!m) return;
    state_drop_spare(m); /* a kept state points at this model */
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->blocks);
    free(m->mtp);
    free(m->rec);
    free(m->kv_dim);
    free(m->kv_head_dim);
    tokenizer_free(m->tok);
    template_unref(m->tmpl);
    gguf_close(m->gguf);
    free(m);
}

int model_add_kv_slot(model *m, int n_head_kv, int head_dim) {
    int *d = realloc(m->kv_dim, (size_t)(m->n_kv_slots + 1) * sizeof *d);
    if (!d) return -1;
    m->kv_dim = d;
    int *h = realloc(m->kv_head_dim, (size_t)(m->n_kv_slots + 1) * sizeof *h);
    if (!h) return -1;
    m->kv_head_dim = h;
    d[m->n_kv_slots] = n_head_kv * head_dim;
    h[m->n_kv_slots] = head_dim;
    m->n_kv_slots++;
    return 0;
}

int model_set_kv_types(model *m, kv_type k, kv_type v, char *err, size_t errlen) {
    const kv_type t[2] = {k, v};
    for (int c = 0; c < 2; c++) {
        const int blk = kv_type_block(t[c]);
        for (int i = 0; i < m->n_kv_slots; i++)
            if (m->kv_head_dim[i] % blk) {
                snprintf(err, errlen, "a %s cache stores blocks of %d values, and this model's attention heads have %d",
                         kv_type_name(t[c]), blk, m->kv_head_dim[i]);
                return -1;
            }
    }
    if (m->kv_k != k || m->kv_v != v) state_drop_spare(m); /* a kept state has the old rows */
    m->kv_k = k;
    m->kv_v = v;
    return 0;
}

void model_pattern(const model *m, char *buf, size_t n) {
    static const char sym[] = {'-', '*', 'G', 'M', 'S', 'C'};
    size_t k = 0;
    for (int i = 0; i < m->n_layer && k + 1 < n; i++) {
        const block *b = &m->blocks[i];
        buf[k++] = b->mixer == MIX_NONE && b->moe.n_expert ? 'E' : sym[b->mixer];
    }
    if (n) buf[k] = 0;
}

/* the block a tensor belongs to ("blk.N."), or -1 */
static int tensor_block(const char *name) {
    if (strncmp(name, "blk.", 4)) return -1;
    char *end;
    const long i = strtol(name + 4, &end, 10);
    return end != name + 4 && *end == '.' && i >= 0 && i < (1 << 20) ? (int)i : -1;
}

void model_usage_of(const model *m, int tokens, model_usage *u) {
    memset(u, 0, sizeof *u);
    for (int i = 0; i < m->n_layer; i++) {
        const moe_layer *l = &m->blocks[i].moe;
        if (!l->n_expert) continue;
        if (!u->moe_layers++) {
            u->n_expert = l->n_expert;
            u->n_used = l->n_used;
            u->n_shared = l->shared.kind != FFN_NONE;
        }
    }
    for (uint64_t i = 0; i < m->gguf->n_tensors; i++) {
        const gguf_tensor *t = &m->gguf->tensors[i];
        const uint64_t n = (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        u->params += n;
        u->bytes += t->nbytes;
        const int blk = tensor_block(t->name);
        double share = 1; /* of this tensor one token reads */
        if (blk >= m->n_layer) {
            share = 0; /* a block that is not run */
        } else if (!strcmp(t->name, "token_embd.weight") && !m->tied) {
            share = (double)tokens / (double)t->ne[1];
        } else if (blk >= 0 && strstr(t->name, "_exps") && m->blocks[blk].moe.n_expert == t->ne[2]) {
            share = 1.0 - pow(1.0 - (double)m->blocks[blk].moe.n_used / (double)t->ne[2], tokens);
        }
        u->params_active += (uint64_t)((double)n * share + 0.5);
        u->bytes_active += (uint64_t)((double)t->nbytes * share + 0.5);
    }
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

void block_ffn(const block *b, int rows, int n_embd, const float *x, float *y, arena *a) {
    if (b->moe.n_expert > 0)
        moe_forward(&b->moe, rows, n_embd, x, y, a);
    else
        ffn_forward(&b->ffn, rows, n_embd, x, y, a);
}

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

int model_image_positions(int p0, int nx, int ny, int *rope_pos) {
    for (int i = 0; i < nx * ny; i++)
        rope_pos[3 * i] = p0, rope_pos[3 * i + 1] = p0 + i / nx, rope_pos[3 * i + 2] = p0 + i % nx;
    return p0 + (nx > ny ? nx : ny);
}

int model_forward(const model *m, batch_seq *seqs, int n_seqs, arena *a) {
    const int E = m->n_embd;
    int N = 0, n_logit_rows = 0;
    for (int i = 0; i < n_seqs; i++) {
        batch_seq *b = &seqs[i];
        if (b->n_tokens <= 0 || b->state->m != m) return -1;
        /* the MTP head's catch-up reads each row's token, which an image's rows have not */
        if (b->embd && (!b->rope_pos || m->mtp_on)) return -1;
        for (int t = 0; !b->embd && t < b->n_tokens; t++)
            if (b->tokens[t] < 0 || b->tokens[t] >= m->n_vocab) return -1;
        if (state_reserve(b->state, b->state->n_past + b->n_tokens) != 0) return -1;
        N += b->n_tokens;
        n_logit_rows += logit_rows(b);
    }
    if (N == 0) return 0;

    segment *segs = arena_alloc(a, (size_t)n_seqs * sizeof *segs);
    for (int i = 0, row = 0; i < n_seqs; i++) {
        const batch_seq *b = &seqs[i];
        const int n_cap = b->n_capture > 0 && b->capture > 0 && b->capture + b->n_capture <= b->n_tokens &&
                                  b->capture_rec ? b->n_capture : 0;
        const seq_state *s = b->state;
        segs[i] = (segment){.k = s->k, .v = s->v, .k_type = m->kv_k, .v_type = m->kv_v, .rec = s->rec, .rec_slots = m->rec, .row0 = row,
                            .n = b->n_tokens, .pos0 = s->n_past, .capture = n_cap ? b->capture : 0,
                            .n_capture = n_cap, .capture_rec = b->capture_rec, .keep = logit_rows(b),
                            .pos_shift = s->pos_shift, .rope_pos = b->embd ? b->rope_pos : NULL};
        row += b->n_tokens;
    }
    float *h = arena_floats(a, (size_t)N * E), *x = arena_floats(a, (size_t)N * E), *y = arena_floats(a, (size_t)N * E);

    /* h = embedding_scale * token_embd[token] */
    for (int i = 0; i < n_seqs; i++)
        for (int t = 0; t < seqs[i].n_tokens; t++) {
            float *hr = h + (size_t)(segs[i].row0 + t) * E;
            if (seqs[i].embd) { /* an image's rows enter unscaled, as llama.cpp's ubatch.embd */
                memcpy(hr, seqs[i].embd + (size_t)t * E, sizeof(float) * (size_t)E);
                continue;
            }
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
        const int trim = li == m->n_layer - 1 && n_logit_rows < N && !m->mtp_on; /* the MTP head reads every row */
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
            block_ffn(b, rows, E, x, y, a);
            add_scaled(h, y, m->residual_scale, (size_t)rows * E);
        }
    }
    /* the output-normed rows the LM head reads: only the rows asked for, which h starts
     * with, in order (kept by the last layer, or every row when all give logits) - or, for
     * the MTP head's catch-up, every row (then the logit rows are gathered after it) */
    float *xo = NULL;
    if (m->mtp_on) {
        xo = arena_floats(a, (size_t)N * E);
        rmsnorm_rows(xo, h, m->output_norm, N, E, m->eps);
        mtp_catch_up(m, seqs, segs, n_seqs, N, xo, a);
        if (n_logit_rows < N) keep_logit_rows(xo, segs, n_seqs, E);
    } else if (n_logit_rows > 0) {
        xo = arena_floats(a, (size_t)n_logit_rows * E);
        rmsnorm_rows(xo, h, m->output_norm, n_logit_rows, E, m->eps);
    }
    for (int i = 0; i < n_seqs; i++) {
        seq_state *s = seqs[i].state;
        s->n_past += seqs[i].n_tokens;
        if (seqs[i].embd) s->pos_shift = seqs[i].rope_next - s->n_past;
    }

    if (n_logit_rows > 0) {
        float *lo = arena_floats(a, (size_t)n_logit_rows * m->n_vocab);
        float **dst = arena_alloc(a, sizeof *dst * (size_t)n_logit_rows);
        for (int i = 0, r = 0; i < n_seqs; r += segs[i++].keep)
            for (int k = 0; k < segs[i].keep; k++) dst[r + k] = seqs[i].out + (size_t)k * m->n_vocab;
        /* as llama.cpp, a logit scale is a multiplication by its reciprocal */
        matmul_scatter(&m->output, xo, n_logit_rows, lo, dst, 1.0f / m->logit_scale);
        if (m->output_bias)
            for (int r = 0; r < n_logit_rows; r++) add_scaled(dst[r], m->output_bias, 1.0f, (size_t)m->n_vocab);
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
