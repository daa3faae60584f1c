/* tokenizer_impl.h - what the tokenizer's files share: the tokenizer struct, its
 * containers, and the few functions one calls in another. Nothing outside engine/
 * includes this; callers use tokenizer.h.
 *
 *   vocab.c        loading from GGUF: vocabulary, merges, special ids, EOG set, pieces
 *   tokenizer.c    accessors, special tokens and tokenizer_encode, decoding and the
 *                  streaming detokenizer
 *   strtab.c       containers: growable int vector, string table, pair map, merge queue
 *   pretokenize.c  pre-tokenizers (the words byte-level BPE encodes one by one)
 *   bpe.c          byte-level BPE, with GPT-2's byte <-> unicode map
 *   spm.c          SentencePiece
 *
 * Merges are ranked through integer "string ids" (sids): every token text and every
 * string that appears as one side of a merge gets a sid (token texts use their token id),
 * and a merge is stored as (sid left, sid right) -> (rank, sid of the concatenation). BPE
 * then merges symbols by integer lookups only, which is exactly llama.cpp's string-pair
 * lookup: two strings can only be merged if both are merge sides, hence have sids. */
#ifndef CHATFS_TOKENIZER_IMPL_H
#define CHATFS_TOKENIZER_IMPL_H

#include <stdint.h>
#include <stdlib.h>

#include "engine/tokenizer/tokenizer.h"

/* ------------------------------------------------------------------ containers (strtab.c) */

typedef struct {
    int32_t *v;
    size_t n, cap;
    int oom;
} ivec;

/* Strings known to the tokenizer: sid -> (offset into arena, length). */
typedef struct {
    char *arena;
    size_t arena_n, arena_cap;
    uint32_t *off, *len;
    size_t n, cap;
    /* hash map text -> sid, linear probing; slot empty when sid == -1 */
    int32_t *slot_sid;
    uint32_t *slot_hash;
    size_t nslots, used;
} strtab;

/* Integer-keyed map: 64-bit key -> two int32 values. Used for merges ((sid,sid) ->
 * rank, result) and the special-token trie ((node,byte) -> child). */
typedef struct {
    uint64_t key;
    int32_t a, b;
} pairslot;

typedef struct {
    pairslot *s;
    size_t nslots, used;
} pairmap;

/* appends x; on OOM sets a->oom and drops x (and every later push) */
void ivec_push(ivec *a, int32_t x);
/* the smallest power of two >= n, at least 16 (hash table sizes) */
size_t pow2_at_least(size_t n);

const char *strtab_text(const strtab *st, int32_t sid);
/* sid of the string s[0..n), or -1 */
int32_t strtab_find(const strtab *st, const char *s, size_t n);
/* resizes the hash map to nslots (a power of two); 0 on OOM */
int strtab_rehash(strtab *st, size_t nslots);
/* Appends a string to the arena (NUL-terminated) and returns its new sid, -1 on OOM. */
int32_t strtab_add_string(strtab *st, const char *s, size_t n);
/* Points the map entry for the text of sid at sid (a later duplicate replaces an
 * earlier one, as llama.cpp's token_to_id[word] = i does). 0 on OOM. */
int strtab_index(strtab *st, int32_t sid);
/* sid of s, adding it as a new (non-token) string if unknown; -1 on OOM */
int32_t strtab_intern(strtab *st, const char *s, size_t n);
void strtab_free(strtab *st);

/* an empty map sized for about expected keys; 0 on OOM */
int pairmap_init(pairmap *m, size_t expected);
/* the slot of key, or NULL */
const pairslot *pairmap_get(const pairmap *m, uint64_t key);
/* Inserts key if absent (the first insert wins). Returns the slot, NULL on OOM. */
pairslot *pairmap_put(pairmap *m, uint64_t key, int32_t a, int32_t b);

static inline uint64_t pair_key(int32_t l, int32_t r) { return ((uint64_t)(uint32_t)l << 32) | (uint32_t)r; }

/* Grows the array p to room for need elements (of elem bytes) and returns it; on
 * failure sets *oom and returns p unchanged. */
static inline void *grow(void *p, size_t *cap, size_t need, size_t elem, int *oom) {
    if (need <= *cap) return p;
    size_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    void *q = realloc(p, nc * elem);
    if (!q) {
        *oom = 1;
        return p;
    }
    *cap = nc;
    return q;
}

/* ------------------------------------------------------------------ the tokenizer */

/* token attributes, as llama.cpp's llama_token_attr bits */
enum {
    ATTR_UNKNOWN = 1 << 0,
    ATTR_UNUSED = 1 << 1,
    ATTR_NORMAL = 1 << 2,
    ATTR_CONTROL = 1 << 3,
    ATTR_USER_DEFINED = 1 << 4,
    ATTR_BYTE = 1 << 5,
};
#define ATTR_SPECIAL_TEXT (ATTR_UNKNOWN | ATTR_CONTROL) /* shown only when rendering specials */

enum { MODEL_BPE, MODEL_SPM };
enum { PRE_DEFAULT, PRE_GPT2, PRE_LLAMA3, PRE_QWEN2, PRE_QWEN35 };

struct tokenizer {
    int model; /* MODEL_BPE or MODEL_SPM */
    char model_name[16];
    char pre_name[64];
    int pre;
    int ignore_merges, add_bos, add_eos, add_space_prefix;

    int n_vocab;
    strtab st;         /* sids 0..n_vocab-1 are the tokens; more sids are merge sides */
    float *score;      /* [n_vocab] */
    uint8_t *attr;     /* [n_vocab] ATTR_* bits */
    uint8_t *eog;      /* [n_vocab] 1 = end of generation */
    pairmap merges;    /* (sid, sid) -> (rank, sid of the merged text or -1) */

    int32_t byte_sid[256];    /* BPE: sid of the GPT-2 character that stands for a byte */
    int32_t single_byte[256]; /* BPE: token whose text is exactly that one byte, or -1 */
    int32_t spm_byte[256];    /* SPM: <0xXX> token for a byte (or the one-byte token), or -1 */

    int bos, eos, eot, eom, unk, pad;

    /* what each token decodes to with specials rendered: piece_off/len into piece_arena */
    char *piece_arena;
    uint32_t *piece_off, *piece_len;

    /* special tokens (CONTROL, USER_DEFINED, UNKNOWN), longest text first, and a byte
     * trie over their texts: node -> special order index (or -1) */
    int32_t *special;
    int n_special;
    pairmap trie;         /* (node << 8 | byte) -> child node */
    int32_t *trie_order;  /* [n_nodes] */
    int n_nodes;
};

static inline int in_vocab(const tokenizer *t, int id) { return id >= 0 && id < t->n_vocab; }
/* the stored text of token id (a valid id) */
static inline const char *tok_text(const tokenizer *t, int id) { return strtab_text(&t->st, id); }
static inline size_t tok_len(const tokenizer *t, int id) { return t->st.len[id]; }

/* token id whose text is s[0..n), or -1 */
static inline int find_token(const tokenizer *t, const char *s, size_t n) {
    int32_t sid = strtab_find(&t->st, s, n);
    return (sid >= 0 && sid < t->n_vocab) ? sid : -1;
}

/* ------------------------------------------------------------------ pre-tokenizers (pretokenize.c) */

/* One raw-text fragment as code points: cp[i], its category flags fl[i], and where its
 * re-encoded UTF-8 starts in bytes (llama.cpp re-encodes, so invalid input bytes become
 * U+FFFD's three bytes). Words are cut at code point indices. */
typedef struct {
    uint32_t *cp;
    uint8_t *fl;
    uint32_t *off; /* [n + 1] */
    unsigned char *bytes;
    size_t n;
} cptext;

/* Decodes text into c (leniently: invalid bytes become U+FFFD). 0 on OOM or when text
 * is too long; cptext_free(c) either way. */
int cptext_init(cptext *c, const char *text, size_t len);
void cptext_free(cptext *c);
/* Splits a whole fragment into words with t's pre-tokenizer. 0 on OOM. */
int pretokenize(const tokenizer *t, const cptext *c, ivec *ends);

/* ------------------------------------------------------------------ merge queue (strtab.c) */

/* A candidate merge of two neighbouring symbols, for byte-level BPE and SentencePiece:
 * the lowest key merges first, ties go to the leftmost. */
typedef struct {
    double key;          /* BPE: the merge's rank; SentencePiece: minus the joined token's score */
    int32_t left, right; /* the symbols */
    uint32_t llen, rlen; /* their lengths when queued (a merge whose sides changed since is stale) */
    int32_t merged;      /* BPE: the string id of the merged symbol */
} bigram;

/* a binary min-heap of bigrams on (key, left) */
typedef struct {
    bigram *v;
    size_t n, cap;
} bigram_heap;

/* sets *oom (and drops g) when out of memory */
void bigram_push(bigram_heap *h, bigram g, int *oom);
/* the top of a heap with h->n > 0 */
bigram bigram_pop(bigram_heap *h);

/* ------------------------------------------------------------------ byte-level BPE (bpe.c) */

extern unsigned char gpt2_enc[256][2]; /* UTF-8 of each byte's GPT-2 character */
extern unsigned char gpt2_enc_len[256];
extern int16_t gpt2_dec[324];          /* cp -> byte for cp < 324, -1 otherwise */
/* fills the three tables above once per process */
void gpt2_tables_init(void);

typedef struct {
    uint32_t start, len;
    int32_t sid, prev, next;
} symbol;

/* scratch space reused across the words of one encode call */
typedef struct {
    symbol *sym;
    size_t sym_cap;
    bigram_heap heap;
    unsigned char *tmp;
    size_t tmp_cap;
    int oom;
} workspace;

/* Pre-tokenizes a raw fragment and appends the BPE tokens of its words. 0 on OOM. */
int bpe_fragment(const tokenizer *t, workspace *ws, const char *text, size_t len, ivec *out);

/* ------------------------------------------------------------------ SentencePiece (spm.c) */

/* escapes and tokenizes one SPM fragment, with the optional leading space */
int spm_encode(const tokenizer *t, const char *text, size_t len, int prefix_space, ivec *out);

#endif
