/* state.h - everything needed to continue one sequence: the attention KV cache of
 * positions 0..n_past-1, and the conv and recurrent state of every recurrent layer.
 *
 * This is the object checkpoints persist: the recurrent part is one contiguous blob
 * (model->rec_floats floats, per-layer offsets in model->rec), the KV part is one
 * K and one V array per attention layer, [position][kv_dim] values in the model's cache
 * types (m->kv_k, m->kv_v). */
#ifndef CHATFS_STATE_H
#define CHATFS_STATE_H

#include <stddef.h>

#include "engine/model/model.h"

typedef struct seq_state {
    const model *m;
    int n_past;      /* tokens consumed (rows of the KV cache) */
    /* the rotary position of the next text token minus n_past: 0 until an image, whose
     * rows advance the position by max(columns, rows) rather than by their count
     * (docs/engine-math.md §13) */
    int pos_shift;
    int n_ctx;       /* most tokens this sequence may hold */
    int cap;         /* KV rows allocated */
    uint8_t **k, **v; /* [n_slots] -> cap rows of kv_dim values (state_k_row_bytes each) */
    int n_slots;     /* m->n_kv_slots when made: the kept spare is freed by whichever engine
                        frees the next state, possibly while its own model is being freed */
    float *rec;      /* m->rec_floats */
} seq_state;

/* A fresh, empty sequence (zero recurrent state). n_ctx <= 0 means the model's
 * training context. NULL when out of memory. */
seq_state *state_new(const model *m, int n_ctx);
/* Frees the state; the last one freed is kept for the next state_new of its model
 * (fresh cache pages cost page faults), until state_drop_spare(model or NULL). */
void state_free(seq_state *s);
void state_drop_spare(const model *m);
/* Makes that spare now, with room for n tokens and its pages touched, so that the first
 * request after a start restores into memory that is already there. */
void state_prepare_spare(const model *m, int n_ctx, int n);
/* Makes dst an exact copy of src (same model). Returns 0, or -1 when out of memory. */
int state_copy(seq_state *dst, const seq_state *src);
seq_state *state_clone(const seq_state *src);
/* Back to the empty sequence. */
void state_reset(seq_state *s);
/* Cuts the sequence back to n tokens. Only attention state can be cut; returns -1
 * for models with recurrent layers (their state has no history to cut to). */
int state_trim(seq_state *s, int n);
/* Ensures room for n tokens of KV. Returns 0, or -1 (over n_ctx or out of memory). */
int state_reserve(seq_state *s, int n);

/* Bytes of one position's K row, V row of a slot; KV bytes per token over all attention
 * layers (K and V). */
size_t state_k_row_bytes(const model *m, int slot);
size_t state_v_row_bytes(const model *m, int slot);
size_t state_kv_bytes_per_token(const model *m);
/* Copies KV rows [p0, p1) out of / into a flat buffer laid out slot by slot, K rows
 * then V rows. set grows the cache as needed; returns -1 when it cannot. */
void state_get_kv(const seq_state *s, int p0, int p1, void *buf);
int state_set_kv(seq_state *s, int p0, int p1, const void *buf);
/* Bytes the state occupies now (recurrent blob + used KV rows). */
size_t state_bytes(const seq_state *s);

#endif
