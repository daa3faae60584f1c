/* speculative.h - speculative decoding with the model's MTP head (model/mtp.h;
 * docs/engine-math.md §12): the head drafts, the model verifies, the state rolls back.
 *
 * One step of one sequence, whose last sampled token has not been fed yet:
 *
 *   draft    from (last, the state's kept hidden row) at p0 = n_past, the head proposes
 *            up to N tokens d1..dn, each row taking the previous draft and the head's own
 *            hidden row (spec_draft: one mtp_draft pass per draft position for every
 *            sequence drafting in the step);
 *   verify   one model pass over [last, d1..dn] with the logits of every row; it captures
 *            the recurrent state after rows 1..n (spec_verify_row: a batch_seq the caller
 *            puts in its model_forward, beside other sequences' rows);
 *   accept   row i's logits give the model's token after d_i (after last for i = 0). Greedy:
 *            the drafts are accepted while they equal the model's argmax, and the model's
 *            token after the last accepted one follows. With temperature, the standard
 *            speculative-sampling rule keeps the output distribution exactly the
 *            sampler's: with p the model's distribution at a row (sampler_probs) and q the
 *            head's, under the same settings, from which the draft was drawn, d_i is
 *            accepted with probability min(1, p(d_i) / q(d_i)); at the first rejection the
 *            token is drawn from max(0, p - q) normalised instead, and when every draft
 *            passed, the token after them from p (spec_accept);
 *   keep     the state keeps as many verify rows as tokens were taken (a caller that stops
 *            at a token - end of generation, a stop string, the length - keeps fewer): its
 *            length is cut there and its recurrent blob swapped with the capture after that
 *            row, so it equals, bit for bit, the state plain decoding would have (spec_keep).
 *
 * Every row of a verify pass is computed as it would be alone, one token at a time, so the
 * tokens are the ones plain decoding gives (greedy: identical; sampling: the same
 * distribution), whatever was drafted and whatever else shares the pass. */
#ifndef CHATFS_SPECULATIVE_H
#define CHATFS_SPECULATIVE_H

#include <stdint.h>

#include "engine/base/arena.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/runtime/sampler.h"

#define SPEC_MAX_DRAFT 8 /* most tokens one step drafts */
/* The drafts per step when a model with an MTP head is not told otherwise: the best
 * measured on Qwen3.5-0.8B's shape at llama.cpp's published acceptance (a step verifying
 * k + 1 tokens costs about 1 + 0.3 k plain steps on the development machine, a draft row
 * with the whole vocabulary 0.3; docs/performance.md). llama.cpp's default is 3. */
#define SPEC_DEFAULT_DRAFT 1

/* Resolves a --draft / engine setting for model m: draft < 0 means the default
 * (SPEC_DEFAULT_DRAFT when m has an MTP head, else 0), 0 off, N > 0 drafts of up to N
 * tokens (m must have the head). Enables the head (mtp_enable) when the result is > 0, so
 * call it before any state of m exists. Returns the drafts per step (0: no speculation),
 * or -1 with one line in err. */
int spec_configure(model *m, int draft, char *err, size_t errlen);

/* What constrains a sequence's tokens beside its sampler (a grammar): every row a token is
 * chosen from - the head's for a draft, the model's for the step's tokens - is masked as
 * plain decoding would mask it after the same tokens, so the drafts are ones the constraint
 * allows and the accepted tokens are plain decoding's (greedy: identical; sampling: the
 * masked distribution, the rule of spec_accept being exact for any p and q).
 *   mask(ud, j, logits)  masks, in place, the logits of the token after tokens[0..j]
 *                        (j = 0: after the caller's last token, where it stands now);
 *                        returns how many tokens are allowed (0: none; -1: out of memory);
 *   next(ud, j, tok)     the token after tokens[0..j] is tok: row j + 1's constraint
 *                        follows from row j's; 0, or -1 when tok is not allowed there.
 * Rows are asked for in order, row j + 1 only after next(ud, j, ...) on the same step's
 * draft d(j+1). */
typedef struct {
    int (*mask)(void *ud, int row, float *logits);
    int (*next)(void *ud, int row, int tok);
    void *ud;
} spec_constraint;

typedef struct {
    const model *m;
    int n_max;
    spec_constraint c;               /* the caller's; {0}: none */                       /* most tokens drafted per step (1..SPEC_MAX_DRAFT) */
    /* this step */
    int pos0;                        /* the state's length when it began */
    int n_draft;                     /* tokens drafted */
    int tokens[SPEC_MAX_DRAFT + 1];  /* [last, d1..dn]: tokens[0] is the caller's */
    float *q;                        /* n_max rows of n_vocab: the head's distributions (sampling) */
    float *logits;                   /* n_max + 1 rows of n_vocab: the verify rows' logits */
    float *rec[SPEC_MAX_DRAFT];      /* recurrent blobs: the state after verify rows 1..n */
    float *h;                        /* n_embd: the head's hidden row, chained through the drafts */
    float *p;                        /* n_vocab: scratch */
    /* since spec_init */
    uint64_t steps, drafted, accepted;
} spec_seq;

/* For drafts of up to n_max tokens with m's head (mtp_enable'd). 0, or -1 (no head, bad
 * n_max, out of memory: then nothing is held). */
int spec_init(spec_seq *sp, const model *m, int n_max);
void spec_free(spec_seq *sp);

/* Drafts for n sequences at once, after each one's last token (sp[i]->tokens[0], set by
 * the caller): up to want[i] tokens (at most n_max, and only as many as the state has
 * room for beside the verify row), one mtp_draft pass per draft position over every
 * sequence still drafting. smp[i] is the sequence's sampler: greedy drafts take the head's
 * argmax, otherwise a draw from the head's distribution under its settings, after sp[i]->c's
 * mask (drafting stops where it allows nothing). Sets each sp[i]->n_draft (0 when
 * want[i] <= 0). Returns 0, or -1 when a pass failed (the drafts
 * made before it stand). */
int spec_draft(spec_seq *const *sp, seq_state *const *st, sampler *const *smp, const int *want, int n, arena *a);

/* The verify row of a drafted sequence for model_forward: [last, d1..dn], every row's
 * logits into sp->logits, the recurrent state after rows 1..n captured into sp->rec. */
batch_seq spec_verify_row(spec_seq *sp, seq_state *st);

/* After the verify pass: the step's tokens into out (1 to n_draft + 1 of them: the accepted
 * drafts, then the model's own); token out[i] is what the model gives after verify rows
 * 0..i (each row masked first by sp->c; a row whose mask ran out of memory gives -1 and
 * ends the step). Returns their count. */
int spec_accept(spec_seq *sp, sampler *smp, int *out);

/* The state keeps the first `rows` verify rows (1 <= rows <= n_draft + 1): as after
 * feeding [last, d1..d(rows-1)] one token at a time. */
void spec_keep(spec_seq *sp, seq_state *st, int rows);

#endif
