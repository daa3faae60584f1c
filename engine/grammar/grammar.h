/* grammar.h - GBNF grammars (llama.cpp's syntax): compiled once, matched over UTF-8, and
 * the token mask they allow next over a vocabulary.
 *
 * A grammar is rules `name ::= alternatives`, one a line (a rule goes on over newlines
 * inside parentheses and after `|`); `root` is where matching starts. Alternatives are
 * sequences of string literals ("..." with \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH),
 * character classes ([a-z], [^...]), `.` (any character), rule names, groups (...), each
 * with `*` `+` `?` `{m}` `{m,}` `{m,n}`; `#` starts a comment. Repetitions become rules of
 * their own as llama.cpp rewrites them, so the compiled grammar is plain alternatives of
 * characters and rule references, and left recursion (a rule that can reach itself without
 * consuming a character) is refused.
 *
 * The matcher is llama.cpp's pushdown automaton: its state is a set of stacks of positions
 * in the rules, each stack's top a character element (or empty: the text may end there);
 * a code point replaces every stack whose top matches it by its continuations. A text is
 * accepted when all of it was consumed and some stack is empty. */
#ifndef CHATFS_GRAMMAR_H
#define CHATFS_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "engine/tokenizer/tokenizer.h"

typedef struct grammar grammar;
typedef struct grammar_matcher grammar_matcher;
typedef struct grammar_vocab grammar_vocab;

/* Compiles GBNF text (len bytes, need not be NUL-terminated). NULL with one line in err:
 * a syntax error at line:column, an undefined rule, no `root`, left recursion, a
 * repetition past llama.cpp's bound of 2000. */
grammar *grammar_compile(const char *text, size_t len, char *err, size_t errlen);
void grammar_free(grammar *g);
int grammar_n_rules(const grammar *g); /* rules after the rewriting (tests) */

/* A matcher at the start of the grammar; NULL when out of memory. Matchers of one grammar
 * are independent; the grammar must outlive them. */
grammar_matcher *grammar_matcher_new(const grammar *g);
void grammar_matcher_free(grammar_matcher *m);
/* dst takes src's state (both of one grammar): a scratch matcher that explores where src
 * could go (speculation's drafts) without moving src. Each keeps its own mask cache. 0, or
 * -1 when out of memory or the grammars differ (dst then unchanged or at src's state:
 * assign again before use). */
int grammar_matcher_assign(grammar_matcher *dst, const grammar_matcher *src);
/* Consumes n bytes (UTF-8; a code point may be split across calls). 0, or -1 when the
 * grammar does not allow them (the matcher is then unchanged). */
int grammar_matcher_accept(grammar_matcher *m, const char *s, size_t n);
/* 1 when the text so far is a whole sentence of the grammar (no code point pending). */
int grammar_matcher_can_end(const grammar_matcher *m);
/* 1 when nothing but the end can follow: no character is allowed next. */
int grammar_matcher_must_end(const grammar_matcher *m);

/* 1 when the grammar accepts exactly these n bytes, else 0 (-1: out of memory). */
int grammar_accepts(const grammar *g, const char *s, size_t n);

/* A vocabulary as the mask sees it: each token's bytes in a byte trie (tokens sharing a
 * prefix are walked once), and which tokens end the generation. n tokens; bytes[i] of
 * lens[i] bytes; is_eog[i] nonzero for end-of-generation tokens (their bytes unused).
 * Tokens with no bytes and not end-of-generation (control tokens) are never allowed. */
grammar_vocab *grammar_vocab_new(int n, const char *const *bytes, const size_t *lens, const unsigned char *is_eog);
/* The same from a tokenizer: tokenizer_token_bytes without special rendering, and its
 * end-of-generation set. */
grammar_vocab *grammar_vocab_from_tokenizer(const tokenizer *t);
void grammar_vocab_free(grammar_vocab *v);
int grammar_vocab_size(const grammar_vocab *v);

/* The tokens the matcher allows next, as a bit set of (n + 31) / 32 words (bit i of word
 * i / 32 set: token i allowed): those whose bytes the grammar accepts from here, and the
 * end-of-generation tokens where the grammar may end. Returns how many are allowed, or -1
 * when out of memory. The last few results are kept, keyed by the matcher's state, so a
 * state met again costs a lookup. */
int grammar_mask(grammar_matcher *m, const grammar_vocab *v, uint32_t *allowed);
/* grammar_mask applied to logits: every token it does not allow gets -inf. Returns the
 * number allowed (0: nothing may follow, not even the end), -1 out of memory. */
int grammar_mask_logits(grammar_matcher *m, const grammar_vocab *v, float *logits);
/* Advances the matcher over token id's bytes. 0, or -1 when the grammar does not allow the
 * token (end-of-generation tokens: allowed where the grammar may end, and change nothing). */
int grammar_accept_token(grammar_matcher *m, const grammar_vocab *v, int id);

#endif
