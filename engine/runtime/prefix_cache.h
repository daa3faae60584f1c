/* prefix_cache.h - checkpoints of sequence states for one model: the engine's one way
 * to the checkpoint store its caller hands it (checkpoint_port.h).
 *
 * It knows the model: its fingerprint, how a seq_state is cut into KV page rows and a
 * recurrent blob and put back, and where in a conversation checkpoints pay off
 * (placement). The engine's worker calls it at the start of a request (restore), at
 * marked positions during prefill (save), after generation (the checkpoint the next
 * turn will start from) and when idle (flush); other threads for counters and
 * forgetting a conversation. Each call takes the cache's lock: the store itself is not
 * thread-safe. */
#ifndef CHATFS_PREFIX_CACHE_H
#define CHATFS_PREFIX_CACHE_H

#include <stdint.h>

#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/template/template.h"
#include "engine/runtime/checkpoint_port.h"
#include "engine/runtime/prompt_images.h"

#define FINGERPRINT_BYTES 16

/* The model fingerprint: a hash of the architecture and every metadata key and value
 * of the GGUF file (hyper-parameters, the whole tokenizer, the chat template), every
 * tensor's name, type and shape, a sample of the weight bytes (for each tensor, up to
 * 4 KiB at its start, its middle and its end), and the state layout of this build.
 * Two files that differ in any of those never share checkpoints. */
void model_fingerprint(const model *m, uint8_t out[FINGERPRINT_BYTES]);

/* The part of the fingerprint any GGUF file has (its metadata, tensors and a sample of
 * their bytes): a vision projector's, mixed into its images' keys. */
uint64_t gguf_fingerprint(const gguf_file *f);

typedef struct prefix_cache prefix_cache;

/* The checkpoints of model m in the store behind port, which the caller made and closes
 * after pc_close; port.ops NULL: no checkpoints (restores find nothing, saves keep
 * nothing). The model is attached to the store here. A warning (the store keeps RAM
 * only) may be left in err even on success; NULL with the reason in err. */
prefix_cache *pc_open(const model *m, ckpt_port port, char *err, size_t errlen);
/* Writes what is only in RAM. */
void pc_close(prefix_cache *pc);
/* h[0] of the token chain (engine/base/hash.h) for this model. */
uint64_t pc_seed(prefix_cache *pc);
int pc_persistent(prefix_cache *pc); /* 1: checkpoints reach a database */
/* The port's release, has, count_miss, note_request, forget_session, stats_json and
 * session_usage (checkpoint_port.h) under the cache's lock; stats_json NULL and
 * session_usage -1 without a store (or one that cannot tell), else 0. */
void pc_release(prefix_cache *pc, ckpt_hit *hit);
int pc_has(prefix_cache *pc, const uint64_t *h, int n);
void pc_count_miss(prefix_cache *pc, const char *reason);
void pc_note_request(prefix_cache *pc, int prompt_tokens, int reused, int computed);
void pc_forget_session(prefix_cache *pc, const char *session);
char *pc_stats_json(prefix_cache *pc);
int pc_session_usage(prefix_cache *pc, const char *session, ckpt_usage *out);
/* The session's conversation has moved on past t[0..n) (h: its chain, n+1 values), the
 * start of its newest message: the session's prompt-end and interval checkpoints before
 * n on this prefix served only the earlier prompts that ended there, and go. What an
 * edit or a fork of an earlier turn restores, the starts of its messages (CK_LAST_USER,
 * CK_NEXT_TURN) and of the conversation (CK_SYSTEM_END), stays. */
void pc_retire(prefix_cache *pc, const uint64_t *h, int n, const char *session);
/* Writes the checkpoints only in RAM to lasting storage; with stop (may be NULL), ending
 * early when stop(ud) says so. 0 all written (or nothing lasting), 1 some left, -1 error. */
int pc_flush(prefix_cache *pc, int (*stop)(void *ud), void *ud);

/* Where a checkpoint is placed (docs/checkpoints.md says why each pays). The value is
 * the letter the store keeps in its kind column, so the names can change and stored
 * checkpoints keep theirs. */
typedef enum {
    CK_LAST_USER = 'a',  /* where the last user message begins */
    CK_PROMPT_END = 'b', /* the end of the rendered prompt (with the logits that follow) */
    CK_NEXT_TURN = 'c',  /* after generation: the end of the turn as the next prompt renders it */
    CK_INTERVAL = 'd',   /* every N tokens inside a long prefill */
    CK_SYSTEM_END = 'e'  /* the end of the system prompt */
} ckpt_place;

typedef struct {
    int pos;
    ckpt_place kind;
} pc_mark;

/* How a conversation's prompt was rendered: the template and its switches, and the
 * prompt it gave (text and tokens, with the generation prompt). The boundary searches
 * render the same conversation with other last messages through the same template, and
 * tokenize only what differs from this prompt (tokenizer_encode_like). */
typedef struct {
    chat_template *t;
    const char *tools; /* the functions offered (gen_settings.tools), NULL: none */
    int enable_thinking;
    const char *text; /* the prompt text, len bytes */
    size_t len;
    const int *ids;   /* its tokens */
    int n_ids;
    const prompt_image *images; /* the conversation's images, in order: renderings tokenize with
                                   their rows in place (prompt_tokenize); NULL: none */
    int n_images;
} pc_render;

/* Where to checkpoint while prefilling the prompt msgs rendered to (r): CK_SYSTEM_END,
 * CK_LAST_USER, every `interval` tokens (CK_INTERVAL), and CK_PROMPT_END. Sorted by position, one mark per position,
 * positions in 1..r->n_ids. Returns the count and a malloc'd array in *out (-1 when out
 * of memory). */
int pc_plan(const model *m, const pc_render *r, const chat_msg *msgs, int n_msgs, int interval, pc_mark **out);

/* CK_NEXT_TURN: the tokens the next prompt will start with after this reply: the common
 * prefix of [msgs..., assistant(reply, reasoning), user(x)] for two different
 * one-character x, with the generation prompt. Rendering the history this way (not msgs
 * alone) is what makes templates that drop reasoning from history still hit. reasoning:
 * the reply's reasoning_content (NULL or empty: none). A reply that made calls
 * (tool_calls: their JSON array, else NULL) is followed by its first result instead,
 * tool(x): the next prompt carries the results. Returns the count and malloc'd tokens in
 * *out, or -1. */
int pc_next_turn_prefix(const model *m, const pc_render *r, const chat_msg *msgs, int n_msgs, const char *reply,
                        const char *reasoning, const char *tool_calls, int **out);

/* Length of the longest common prefix of two token lists. */
int pc_common_prefix(const int *a, int na, const int *b, int nb);

/* Restores into s the longest checkpoint for t[0..n) (h: token chain of t from
 * pc_seed, n+1 values). logits (n_vocab floats) may be NULL; when not, a checkpoint at
 * exactly n with stored logits may be used (hit->has_logits). s is reset on a miss.
 * Returns the restored length. */
int pc_restore(prefix_cache *pc, seq_state *s, const int *t, const uint64_t *h, int n, float *logits, ckpt_hit *hit);
/* Saves s (s->n_past == n, the state after t[0..n)) with the logits after it when
 * given. The port's save gives the result (0 without a store). */
int pc_save(prefix_cache *pc, seq_state *s, const int *t, const uint64_t *h, int n, const float *logits, ckpt_place kind,
            const char *session);
/* Saves the state after t[0..n) when s has gone on past n: the KV rows below n from s
 * (a pass leaves them as they are) and the recurrent blob rec captured at n (see
 * batch_seq.capture). No logits. */
int pc_save_rec(prefix_cache *pc, seq_state *s, const float *rec, const int *t, const uint64_t *h, int n, ckpt_place kind,
                const char *session);

#endif
