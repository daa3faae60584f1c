/* mtp.h - the MTP head (model.h mtp_head) at work in sequences: its place in the sequence
 * state, its share of every trunk pass, and its draft rows.
 *
 * The head reads pairs (token x_p, the trunk's hidden row h_{p-1}) at position p, where
 * h is the trunk's output-normed final row (what its LM head reads). To draft well at
 * position p it must have seen every earlier pair: its attention has a KV cache of its
 * own. So once enabled, every trunk pass also "catches the head up" on the tokens it
 * consumed (llama.cpp's draft context does the same after each target batch): the head's
 * K and V of each row, with the hidden rows shifted by one - row 0 takes the hidden row
 * the sequence kept from its previous pass (zeros for a fresh sequence, as llama.cpp's
 * pending row starts). Both the cache and that kept row live in the sequence state, so
 * copies, checkpoints and rollbacks carry them like the trunk's own state.
 *
 * A draft row then runs the whole head: (token, h) at a position past the sequence's end
 * gives logits for the token after it and the head's own hidden row, which the next
 * draft row takes as its h. Draft rows write the head's cache at their positions; the
 * trunk pass that verifies the drafts overwrites those rows with the caught-up ones. */
#ifndef CHATFS_MTP_H
#define CHATFS_MTP_H

#include "engine/model/model.h"

struct seq_state;

/* Gives m's MTP head its place in the sequence state (one more KV slot; n_embd floats at
 * the end of the recurrent blob), after which model_forward catches the head up in every
 * pass. Changes the state's layout, so call it before any state of m exists. Returns 0, or
 * -1 when m has no head (or memory ran out). */
int mtp_enable(model *m);

/* model_forward's share (m->mtp_on): the head's cache rows for every row of the batch
 * from seqs' tokens and hn, the trunk's output-normed rows (N rows of n_embd); then each
 * sequence keeps its last row of hn, and each capture the row before its position. */
void mtp_catch_up(const model *m, const batch_seq *seqs, const segment *segs, int n_segs, int N, const float *hn,
                  arena *a);

/* One draft row: the head at `pos` on (token, h). */
typedef struct {
    struct seq_state *state; /* one row per state in a call */
    int token;
    int pos;          /* the state's n_past for the first draft row of a step, one more for each next one */
    const float *h;   /* n_embd floats: the hidden row before the token; NULL: the one the state kept
                         (the trunk's, after its last token) */
    float *h_out;     /* n_embd floats: the head's own hidden row (the next draft row's h; may be h) */
    float *logits;    /* n_vocab floats */
} mtp_row;

/* Draft rows score only the tokens with ids below n (all of them: n <= 0 or n >= n_vocab);
 * the rest get -inf logits. The LM head is most of a draft row's cost where the vocabulary
 * is large (Qwen3.5-0.8B: a third of the model's weights), and byte-level BPE vocabularies
 * number tokens roughly by frequency (merge rank), so a prefix of the ids keeps most
 * drafts for a fraction of the head (as FR-Spec and EAGLE-3 draft over a frequent subset).
 * Drafts change, the output never does: the model verifies every token over the whole
 * vocabulary. Off by default: llama.cpp's drafts are over all tokens. Returns the count. */
int mtp_set_draft_vocab(model *m, int n);

/* Runs n draft rows (of different sequences) in one pass over the head's weights. Returns 0,
 * or -1 for a bad token or position, a model without an enabled head, or no room in a
 * state (nothing is written then). */
int mtp_draft(const model *m, mtp_row *rows, int n, arena *a);

#endif
