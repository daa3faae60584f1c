/* prefix_cache.h - checkpoints of sequence states for one model: the engine side of
 * store/ckpt_store.h.
 *
 * It knows the model: its fingerprint, how a seq_state is cut into KV page rows and a
 * recurrent blob and put back, and where in a conversation checkpoints pay off
 * (placement). The engine's worker calls it at the start of a request (restore), at
 * marked positions during prefill (save), and after generation (the checkpoint the
 * next turn will start from). */
#ifndef CHATFS_PREFIX_CACHE_H
#define CHATFS_PREFIX_CACHE_H

#include <sqlite3.h>
#include <stdint.h>

#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/template/template.h"
#include "store/ckpt_store.h"

#define FINGERPRINT_BYTES 16

/* The model fingerprint: a hash of the architecture and every metadata key and value
 * of the GGUF file (hyper-parameters, the whole tokenizer, the chat template), every
 * tensor's name, type and shape, a sample of the weight bytes (for each tensor, up to
 * 4 KiB at its start, its middle and its end), and the state layout of this build.
 * Two files that differ in any of those never share checkpoints. */
void model_fingerprint(const model *m, uint8_t out[FINGERPRINT_BYTES]);

/* Opens the checkpoint store of model m in db (NULL: RAM only). A warning (the
 * database could not be read: RAM only) may be left in err even on success. */
ckpt_store *pc_open(const model *m, sqlite3 *db, const cs_config *cfg, char *err, size_t errlen);

/* Placement kinds (the letters of the "Checkpoints" issue). */
enum {
    PC_USER = 'a',      /* where the last user message begins */
    PC_PROMPT = 'b',    /* the end of the rendered prompt (with the logits that follow) */
    PC_NEXT = 'c',      /* after generation: the end of the turn as the next prompt renders it */
    PC_INTERVAL = 'd',  /* every N tokens inside a long prefill */
    PC_SYSTEM = 'e'     /* the end of the system prompt */
};

typedef struct {
    int pos;
    int kind;
} pc_mark;

/* Where to checkpoint while prefilling prompt (the tokens msgs render to with the
 * generation prompt under template t): (e), (a), every `interval` tokens (d), and
 * the end (b). Sorted by position, one mark per position, positions in 1..n_prompt.
 * Returns the count and a malloc'd array in *out (-1 when out of memory). */
int pc_plan(const model *m, const chat_template *t, const chat_msg *msgs, int n_msgs, const int *prompt,
            int n_prompt, int interval, pc_mark **out);

/* (c): the tokens the next prompt will start with after this reply: the common
 * prefix of [msgs..., assistant(reply), user(x)] for two different one-character x,
 * with the generation prompt. Rendering the history this way (not msgs alone) is
 * what makes templates that drop reasoning from history still hit. Returns the count
 * and malloc'd tokens in *out, or -1. */
int pc_next_turn_prefix(const model *m, const chat_template *t, const chat_msg *msgs, int n_msgs, const char *reply,
                        int **out);

/* Length of the longest common prefix of two token lists. */
int pc_common_prefix(const int *a, int na, const int *b, int nb);

/* Restores into s the longest checkpoint for t[0..n) (h: token chain of t from
 * cs_seed, n+1 values). logits (n_vocab floats) may be NULL; when not, a checkpoint at
 * exactly n with stored logits may be used (hit->has_logits). s is reset on a miss.
 * Returns the restored length. */
int pc_restore(ckpt_store *cs, seq_state *s, const int *t, const uint64_t *h, int n, float *logits, cs_hit *hit);
/* Saves s (s->n_past == n, the state after t[0..n)) with the logits after it when
 * given. See cs_save for the result. */
int pc_save(ckpt_store *cs, seq_state *s, const int *t, const uint64_t *h, int n, const float *logits, int kind,
            const char *session);
/* Saves the state after t[0..n) when s has gone on past n: the KV rows below n from s
 * (a pass leaves them as they are) and the recurrent blob rec captured at n (see
 * batch_seq.capture). No logits. */
int pc_save_rec(ckpt_store *cs, seq_state *s, const float *rec, const int *t, const uint64_t *h, int n, int kind,
                const char *session);

#endif
