/* tokenizer.c - text <-> token ids the way llama.cpp computes them (spec section 10).
 *
 * Layout of this file:
 *   1. small containers (growable int vector, two open-addressing hash maps)
 *   2. the tokenizer struct and the GPT-2 byte <-> unicode map
 *   3. loading: vocab, merges, special ids, EOG set, piece cache, special-token trie
 *   4. pre-tokenizers (hand-written scanners, mirroring llama.cpp's)
 *   5. byte-level BPE and SentencePiece word encoders
 *   6. special-token partitioning and tokenizer_encode
 *   7. decoding and the streaming detokenizer
 *
 * Merges are ranked through integer "string ids" (sids): every token text and every
 * string that appears as one side of a merge gets a sid (token texts use their token id),
 * and a merge is stored as (sid left, sid right) -> (rank, sid of the concatenation). BPE
 * then merges symbols by integer lookups only, which is exactly llama.cpp's string-pair
 * lookup: two strings can only be merged if both are merge sides, hence have sids. */
#include "engine/tokenizer.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/unicode.h"

/* ------------------------------------------------------------------ containers */

typedef struct {
    int32_t *v;
    size_t n, cap;
    int oom;
} ivec;

static void ivec_push(ivec *a, int32_t x) {
    if (a->oom) return;
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 64;
        int32_t *p = realloc(a->v, nc * sizeof *p);
        if (!p) {
            a->oom = 1;
            return;
        }
        a->v = p;
        a->cap = nc;
    }
    a->v[a->n++] = x;
}

static uint64_t hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, then a final mix so low bits are usable */
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    h ^= h >> 31;
    h *= 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

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

static const char *strtab_text(const strtab *st, int32_t sid) { return st->arena + st->off[sid]; }

static int32_t strtab_find(const strtab *st, const char *s, size_t n) {
    uint64_t h = hash_bytes(s, n);
    size_t mask = st->nslots - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        int32_t sid = st->slot_sid[i];
        if (sid < 0) return -1;
        if (st->slot_hash[i] == (uint32_t)(h >> 32) && st->len[sid] == n &&
            memcmp(st->arena + st->off[sid], s, n) == 0)
            return sid;
    }
}

static int strtab_rehash(strtab *st, size_t nslots) {
    int32_t *ns = malloc(nslots * sizeof *ns);
    uint32_t *nh = malloc(nslots * sizeof *nh);
    if (!ns || !nh) {
        free(ns);
        free(nh);
        return 0;
    }
    for (size_t i = 0; i < nslots; i++) ns[i] = -1;
    for (size_t i = 0; i < st->nslots; i++) {
        int32_t sid = st->slot_sid[i];
        if (sid < 0) continue;
        uint64_t h = hash_bytes(st->arena + st->off[sid], st->len[sid]);
        size_t j = (size_t)h & (nslots - 1);
        while (ns[j] >= 0) j = (j + 1) & (nslots - 1);
        ns[j] = sid;
        nh[j] = (uint32_t)(h >> 32);
    }
    free(st->slot_sid);
    free(st->slot_hash);
    st->slot_sid = ns;
    st->slot_hash = nh;
    st->nslots = nslots;
    return 1;
}

/* Appends a string to the arena (NUL-terminated) and returns its new sid, -1 on OOM. */
static int32_t strtab_add_string(strtab *st, const char *s, size_t n) {
    if (st->n >= (size_t)INT32_MAX - 1 || n > UINT32_MAX / 2) return -1;
    if (st->n == st->cap) {
        size_t nc = st->cap ? st->cap * 2 : 1024;
        uint32_t *o = realloc(st->off, nc * sizeof *o);
        if (!o) return -1;
        st->off = o;
        uint32_t *l = realloc(st->len, nc * sizeof *l);
        if (!l) return -1;
        st->len = l;
        st->cap = nc;
    }
    if (st->arena_n + n + 1 > st->arena_cap) {
        size_t nc = st->arena_cap ? st->arena_cap : 4096;
        while (nc < st->arena_n + n + 1) nc *= 2;
        if (nc > UINT32_MAX) return -1; /* offsets are 32-bit */
        char *a = realloc(st->arena, nc);
        if (!a) return -1;
        st->arena = a;
        st->arena_cap = nc;
    }
    memcpy(st->arena + st->arena_n, s, n);
    st->arena[st->arena_n + n] = 0;
    st->off[st->n] = (uint32_t)st->arena_n;
    st->len[st->n] = (uint32_t)n;
    st->arena_n += n + 1;
    return (int32_t)st->n++;
}

/* Points the map entry for the text of sid at sid (a later duplicate replaces an
 * earlier one, as llama.cpp's token_to_id[word] = i does). 0 on OOM. */
static int strtab_index(strtab *st, int32_t sid) {
    if ((st->used + 1) * 2 > st->nslots && !strtab_rehash(st, st->nslots ? st->nslots * 2 : 1024)) return 0;
    const char *s = st->arena + st->off[sid];
    size_t n = st->len[sid];
    uint64_t h = hash_bytes(s, n);
    size_t mask = st->nslots - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        int32_t old = st->slot_sid[i];
        if (old < 0) {
            st->slot_sid[i] = sid;
            st->slot_hash[i] = (uint32_t)(h >> 32);
            st->used++;
            return 1;
        }
        if (st->slot_hash[i] == (uint32_t)(h >> 32) && st->len[old] == n &&
            memcmp(st->arena + st->off[old], s, n) == 0) {
            st->slot_sid[i] = sid;
            return 1;
        }
    }
}

/* sid of s, adding it as a new (non-token) string if unknown; -1 on OOM */
static int32_t strtab_intern(strtab *st, const char *s, size_t n) {
    int32_t sid = strtab_find(st, s, n);
    if (sid >= 0) return sid;
    sid = strtab_add_string(st, s, n);
    if (sid < 0 || !strtab_index(st, sid)) return -1;
    return sid;
}

static void strtab_free(strtab *st) {
    free(st->arena);
    free(st->off);
    free(st->len);
    free(st->slot_sid);
    free(st->slot_hash);
}

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

#define PAIR_EMPTY UINT64_MAX

static int pairmap_init(pairmap *m, size_t expected) {
    m->nslots = pow2_at_least(expected * 2 + 16);
    m->used = 0;
    m->s = malloc(m->nslots * sizeof *m->s);
    if (!m->s) return 0;
    for (size_t i = 0; i < m->nslots; i++) m->s[i].key = PAIR_EMPTY;
    return 1;
}

static const pairslot *pairmap_get(const pairmap *m, uint64_t key) {
    size_t mask = m->nslots - 1;
    for (size_t i = (size_t)hash_u64(key) & mask;; i = (i + 1) & mask) {
        if (m->s[i].key == key) return &m->s[i];
        if (m->s[i].key == PAIR_EMPTY) return NULL;
    }
}

/* Inserts key if absent (the first insert wins). Returns the slot, NULL on OOM. */
static pairslot *pairmap_put(pairmap *m, uint64_t key, int32_t a, int32_t b) {
    if ((m->used + 1) * 2 > m->nslots) {
        pairmap bigger = {0};
        bigger.nslots = m->nslots * 2;
        bigger.s = malloc(bigger.nslots * sizeof *bigger.s);
        if (!bigger.s) return NULL;
        for (size_t i = 0; i < bigger.nslots; i++) bigger.s[i].key = PAIR_EMPTY;
        for (size_t i = 0; i < m->nslots; i++)
            if (m->s[i].key != PAIR_EMPTY) {
                size_t j = (size_t)hash_u64(m->s[i].key) & (bigger.nslots - 1);
                while (bigger.s[j].key != PAIR_EMPTY) j = (j + 1) & (bigger.nslots - 1);
                bigger.s[j] = m->s[i];
            }
        bigger.used = m->used;
        free(m->s);
        *m = bigger;
    }
    size_t mask = m->nslots - 1;
    for (size_t i = (size_t)hash_u64(key) & mask;; i = (i + 1) & mask) {
        if (m->s[i].key == key) return &m->s[i];
        if (m->s[i].key == PAIR_EMPTY) {
            m->s[i].key = key;
            m->s[i].a = a;
            m->s[i].b = b;
            m->used++;
            return &m->s[i];
        }
    }
}

static uint64_t pair_key(int32_t l, int32_t r) { return ((uint64_t)(uint32_t)l << 32) | (uint32_t)r; }

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

#define MAX_VOCAB (1 << 24)

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

/* GPT-2's byte <-> unicode map: printable Latin-1 bytes stand for themselves, the other
 * 68 bytes map in order to U+0100.. (space -> U+0120 'Ġ', newline -> U+010A 'Ċ'). */
static uint32_t gpt2_byte_cp(unsigned b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) return b;
    unsigned n = 0;
    for (unsigned c = 0; c < b; c++)
        if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF))) n++;
    return 256 + n;
}

/* byte for a GPT-2 character, -1 when cp is not one */
static int gpt2_cp_byte(uint32_t cp) {
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) return (int)cp;
    if (cp < 256 || cp >= 256 + 68) return -1;
    unsigned n = 0;
    for (unsigned c = 0; c < 256; c++) {
        if ((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF)) continue;
        if (256 + n == cp) return (int)c;
        n++;
    }
    return -1;
}

static unsigned char gpt2_enc[256][2]; /* UTF-8 of each byte's GPT-2 character */
static unsigned char gpt2_enc_len[256];
static int16_t gpt2_dec[324];          /* cp -> byte for cp < 324, -1 otherwise */

static void gpt2_tables_fill(void) {
    for (unsigned b = 0; b < 256; b++) {
        unsigned char u[4];
        size_t n = utf8_encode(gpt2_byte_cp(b), u);
        gpt2_enc[b][0] = u[0];
        gpt2_enc[b][1] = n > 1 ? u[1] : 0;
        gpt2_enc_len[b] = (unsigned char)n;
    }
    for (uint32_t cp = 0; cp < 324; cp++) gpt2_dec[cp] = (int16_t)gpt2_cp_byte(cp);
}

static void gpt2_tables_init(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, gpt2_tables_fill);
}

static int in_vocab(const tokenizer *t, int id) { return id >= 0 && id < t->n_vocab; }

static const char *tok_text(const tokenizer *t, int id) { return strtab_text(&t->st, id); }
static size_t tok_len(const tokenizer *t, int id) { return t->st.len[id]; }

/* token id whose text is s[0..n), or -1 */
static int find_token(const tokenizer *t, const char *s, size_t n) {
    int32_t sid = strtab_find(&t->st, s, n);
    return (sid >= 0 && sid < t->n_vocab) ? sid : -1;
}

/* ------------------------------------------------------------------ loading */

typedef struct {
    char *err;
    size_t errlen;
    int failed;
} errsink;

static void load_fail(errsink *e, const char *fmt, ...) {
    if (e->failed) return;
    e->failed = 1;
    if (e->err && e->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->err, e->errlen, fmt, ap);
        va_end(ap);
    }
}

/* pre-tokenizer names (tokenizer.ggml.pre) -> scanner and flags, per spec 10.3 */
static const struct {
    const char *name;
    int pre, ignore_merges, add_bos, no_bos;
} pre_table[] = {
    {"llama3", PRE_LLAMA3, 1, 1, 0},     {"llama-v3", PRE_LLAMA3, 1, 1, 0},  {"llama-bpe", PRE_LLAMA3, 1, 1, 0},
    {"falcon3", PRE_LLAMA3, 1, 1, 0},    {"falcon-h1", PRE_LLAMA3, 1, 1, 0}, {"pixtral", PRE_LLAMA3, 1, 1, 0},
    {"midm-2.0", PRE_LLAMA3, 1, 1, 0},   {"lfm2", PRE_LLAMA3, 1, 1, 0},      {"jina-v5-nano", PRE_LLAMA3, 1, 1, 0},
    {"dbrx", PRE_LLAMA3, 0, 0, 0},       {"smaug-bpe", PRE_LLAMA3, 0, 0, 0}, {"glm4", PRE_LLAMA3, 0, 0, 1},
    {"chatglm-bpe", PRE_LLAMA3, 0, 0, 1},
    {"qwen2", PRE_QWEN2, 0, 0, 0},       {"deepseek-r1-qwen", PRE_QWEN2, 0, 0, 0},
    {"kormo", PRE_QWEN2, 0, 0, 0},       {"f2llmv2", PRE_QWEN2, 0, 0, 0},    {"megrez", PRE_QWEN2, 0, 0, 0},
    {"stablelm2", PRE_QWEN2, 0, 0, 0},   {"hunyuan", PRE_QWEN2, 0, 0, 0},    {"solar-open", PRE_QWEN2, 0, 0, 0},
    {"grok-2", PRE_QWEN2, 0, 0, 0},
    {"qwen35", PRE_QWEN35, 0, 0, 0},
    {"default", PRE_DEFAULT, 0, 0, 0},
};

static void set_pre(tokenizer *t, int have_pre) {
    t->pre = PRE_DEFAULT;
    if (!have_pre) return;
    for (size_t i = 0; i < sizeof pre_table / sizeof pre_table[0]; i++) {
        if (strcmp(pre_table[i].name, t->pre_name) != 0) continue;
        t->pre = pre_table[i].pre;
        t->ignore_merges = pre_table[i].ignore_merges;
        if (pre_table[i].add_bos) t->add_bos = 1;
        if (pre_table[i].no_bos) t->bos = -1;
        return;
    }
    /* gpt-2, phi-2, mpt, olmo, jais, ... and names we do not know: the GPT-2 regex */
    t->pre = PRE_GPT2;
}

/* reads an optional bool key into *v; 0 (and an error) when it has the wrong type */
static int opt_bool(const gguf_file *f, const char *key, int *v, errsink *e) {
    int r = gguf_get_bool(f, key, v);
    if (r < 0) {
        load_fail(e, "%s has the wrong type (want a bool)", key);
        return 0;
    }
    return 1;
}

/* Loads tokens, scores and types. */
static int load_vocab(tokenizer *t, const gguf_file *f, errsink *e) {
    const gguf_kv *kv = gguf_find(f, "tokenizer.ggml.tokens");
    if (!kv) {
        load_fail(e, "tokenizer.ggml.tokens is missing");
        return 0;
    }
    if (kv->type != GGUF_ARRAY || kv->arr_type != GGUF_STRING) {
        load_fail(e, "tokenizer.ggml.tokens is not an array of strings");
        return 0;
    }
    if (kv->arr_n == 0 || kv->arr_n > MAX_VOCAB) {
        load_fail(e, "tokenizer.ggml.tokens has %llu entries (want 1..%d)", (unsigned long long)kv->arr_n, MAX_VOCAB);
        return 0;
    }
    int n = (int)kv->arr_n;
    t->n_vocab = n;

    const gguf_kv *sc = gguf_find(f, "tokenizer.ggml.scores");
    if (sc && (sc->type != GGUF_ARRAY || sc->arr_type == GGUF_STRING || sc->arr_n != (uint64_t)n)) {
        load_fail(e, "tokenizer.ggml.scores must be a numeric array of %d entries (has %llu)", n,
                  sc->type == GGUF_ARRAY ? (unsigned long long)sc->arr_n : 0ull);
        return 0;
    }
    const gguf_kv *ty = gguf_find(f, "tokenizer.ggml.token_type");
    if (ty && (ty->type != GGUF_ARRAY || ty->arr_type == GGUF_STRING || ty->arr_type == GGUF_F32 ||
               ty->arr_type == GGUF_F64 || ty->arr_n != (uint64_t)n)) {
        load_fail(e, "tokenizer.ggml.token_type must be an integer array of %d entries (has %llu)", n,
                  ty->type == GGUF_ARRAY ? (unsigned long long)ty->arr_n : 0ull);
        return 0;
    }

    gguf_str *strs = malloc((size_t)n * sizeof *strs);
    t->score = calloc((size_t)n, sizeof *t->score);
    t->attr = calloc((size_t)n, 1);
    t->eog = calloc((size_t)n, 1);
    if (!strs || !t->score || !t->attr || !t->eog) {
        free(strs);
        load_fail(e, "out of memory for a vocabulary of %d tokens", n);
        return 0;
    }
    gguf_arr_strs(kv, strs);
    if (!strtab_rehash(&t->st, pow2_at_least((size_t)n * 2 + 16))) {
        free(strs);
        load_fail(e, "out of memory for a vocabulary of %d tokens", n);
        return 0;
    }
    for (int i = 0; i < n; i++) {
        char empty[32];
        const char *s = strs[i].s;
        size_t len = (size_t)strs[i].len;
        if (len == 0) { /* llama.cpp renames empty tokens so they can never match */
            len = (size_t)snprintf(empty, sizeof empty, "[EMPTY_%d]", i);
            s = empty;
        }
        if (strtab_add_string(&t->st, s, len) != i || !strtab_index(&t->st, i)) {
            free(strs);
            load_fail(e, "out of memory for the token texts");
            return 0;
        }
        float v = 0.0f;
        if (sc) gguf_arr_f32(sc, (uint64_t)i, &v);
        t->score[i] = v;
        int64_t type = 1;
        if (ty) gguf_arr_i64(ty, (uint64_t)i, &type);
        switch (type) {
        case TOK_NORMAL: t->attr[i] = ATTR_NORMAL; break;
        case TOK_UNKNOWN: t->attr[i] = ATTR_UNKNOWN; break;
        case TOK_CONTROL: t->attr[i] = ATTR_CONTROL; break;
        case TOK_USER_DEFINED: t->attr[i] = ATTR_USER_DEFINED; break;
        case TOK_UNUSED: t->attr[i] = ATTR_UNUSED; break;
        case TOK_BYTE: t->attr[i] = ATTR_BYTE; break;
        default: t->attr[i] = 0; break; /* undefined: never rendered, never special */
        }
    }
    free(strs);
    return 1;
}

/* Parses tokenizer.ggml.merges into the merge map. */
static int load_merges(tokenizer *t, const gguf_file *f, errsink *e) {
    const gguf_kv *kv = gguf_find(f, "tokenizer.ggml.merges");
    if (!kv) {
        load_fail(e, "tokenizer.ggml.merges is missing (a gpt2 tokenizer needs it)");
        return 0;
    }
    if (kv->type != GGUF_ARRAY || kv->arr_type != GGUF_STRING) {
        load_fail(e, "tokenizer.ggml.merges is not an array of strings");
        return 0;
    }
    if (kv->arr_n > MAX_VOCAB) {
        load_fail(e, "tokenizer.ggml.merges has %llu entries (at most %d)", (unsigned long long)kv->arr_n, MAX_VOCAB);
        return 0;
    }
    size_t n = (size_t)kv->arr_n;
    gguf_str *strs = malloc((n ? n : 1) * sizeof *strs);
    int32_t *sides = malloc((n ? n : 1) * 2 * sizeof *sides);
    char *buf = NULL;
    size_t bufcap = 0;
    int ok = strs && sides && pairmap_init(&t->merges, n);
    if (!ok) goto oom;
    gguf_arr_strs(kv, strs);

    /* pass 1: give every merge side a sid, so the merged texts can be looked up next */
    for (size_t i = 0; i < n; i++) {
        const char *s = strs[i].s;
        size_t len = (size_t)strs[i].len;
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL; /* first space after index 0 */
        if (!sp) {
            sides[2 * i] = sides[2 * i + 1] = -1; /* llama.cpp ranks ("", "") here: never matches */
            continue;
        }
        size_t ll = (size_t)(sp - s), rl = len - ll - 1;
        sides[2 * i] = strtab_intern(&t->st, s, ll);
        sides[2 * i + 1] = strtab_intern(&t->st, sp + 1, rl);
        if (sides[2 * i] < 0 || sides[2 * i + 1] < 0) goto oom;
    }
    /* pass 2: rank = index; the first occurrence of a pair wins */
    for (size_t i = 0; i < n; i++) {
        int32_t l = sides[2 * i], r = sides[2 * i + 1];
        if (l < 0 || r < 0) continue;
        size_t ll = t->st.len[l], rl = t->st.len[r];
        if (ll + rl > bufcap) {
            bufcap = (ll + rl) * 2 + 64;
            char *nb = realloc(buf, bufcap);
            if (!nb) goto oom;
            buf = nb;
        }
        memcpy(buf, strtab_text(&t->st, l), ll);
        memcpy(buf + ll, strtab_text(&t->st, r), rl);
        int32_t merged = strtab_find(&t->st, buf, ll + rl); /* -1: can neither merge on nor be a token */
        if (!pairmap_put(&t->merges, pair_key(l, r), (int32_t)i, merged)) goto oom;
    }
    free(strs);
    free(sides);
    free(buf);
    return 1;
oom:
    free(strs);
    free(sides);
    free(buf);
    load_fail(e, "out of memory for %zu merges", n);
    return 0;
}

/* Reads the special-token ids; an explicit BOS/EOS id outside the vocabulary is an error,
 * other out-of-range ids are ignored (llama.cpp warns and keeps its default). */
static int load_special_ids(tokenizer *t, const gguf_file *f, errsink *e) {
    static const struct {
        const char *key;
        int strict;
    } keys[] = {{"tokenizer.ggml.bos_token_id", 1},     {"tokenizer.ggml.eos_token_id", 1},
                {"tokenizer.ggml.eot_token_id", 0},     {"tokenizer.ggml.eom_token_id", 0},
                {"tokenizer.ggml.unknown_token_id", 0}, {"tokenizer.ggml.padding_token_id", 0}};
    int *dst[] = {&t->bos, &t->eos, &t->eot, &t->eom, &t->unk, &t->pad};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        uint32_t v;
        int r = gguf_get_u32(f, keys[i].key, &v);
        if (r == 0) continue;
        if (r < 0) {
            load_fail(e, "%s has the wrong type or a negative value", keys[i].key);
            return 0;
        }
        if (v >= (uint32_t)t->n_vocab) {
            if (keys[i].strict) {
                load_fail(e, "%s = %u is out of range (vocabulary of %d tokens)", keys[i].key, v, t->n_vocab);
                return 0;
            }
            continue;
        }
        *dst[i] = (int)v;
    }
    /* defaults (gpt2: 11, llama: 1/2/0) can be past the end of a tiny vocabulary */
    for (size_t i = 0; i < sizeof dst / sizeof dst[0]; i++)
        if (!in_vocab(t, *dst[i])) *dst[i] = -1;
    return 1;
}

/* first token (lowest id) whose text is one of names, or -1 */
static int find_any(const tokenizer *t, const char *const *names) {
    int best = -1;
    for (; *names; names++) {
        int id = find_token(t, *names, strlen(*names));
        if (id >= 0 && (best < 0 || id < best)) best = id;
    }
    return best;
}

static void force_control(tokenizer *t, int id) {
    if (in_vocab(t, id)) t->attr[id] |= ATTR_CONTROL;
}

/* The end-of-generation set and the attribute fix-ups llama.cpp makes from token texts
 * (spec 10.5). Token ids named by metadata were read before. */
static void build_eog(tokenizer *t, const gguf_file *f) {
    static const char *const eot_names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                            "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
                                            "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                            "<end_of_utterance>", NULL};
    static const char *const eom_names[] = {"<|eom_id|>", NULL};
    static const char *const fim_pre[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                                          "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<PRE>",
                                          "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL};
    static const char *const fim_suf[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                                          "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>", "<SUF>",
                                          "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL};
    static const char *const fim_mid[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                                          "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", "<MID>",
                                          "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL};
    static const char *const fim_pad[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL};
    static const char *const fim_rep[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL};
    static const char *const fim_sep[] = {"<|file_sep|>", NULL};
    static const char *const eog_names[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
        "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
        "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
        "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "[e~[",
        "<|content_model_end_sampling|>", NULL};

    /* FIM ids from metadata (current and deprecated key names), else by text */
    static const char *const fim_keys[6][2] = {
        {"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id"},
        {"tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id"},
        {"tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id"},
        {"tokenizer.ggml.fim_pad_token_id", NULL},
        {"tokenizer.ggml.fim_rep_token_id", NULL},
        {"tokenizer.ggml.fim_sep_token_id", NULL},
    };
    const char *const *fim_names[6] = {fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep};
    int fim[6];
    for (int k = 0; k < 6; k++) {
        fim[k] = -1;
        for (int j = 0; j < 2 && fim_keys[k][j]; j++) {
            uint32_t v;
            if (gguf_get_u32(f, fim_keys[k][j], &v) == 1 && v < (uint32_t)t->n_vocab) fim[k] = (int)v;
        }
        if (fim[k] < 0) {
            fim[k] = find_any(t, fim_names[k]);
            force_control(t, fim[k]);
        }
    }
    if (t->eot < 0) {
        t->eot = find_any(t, eot_names);
        force_control(t, t->eot);
    }
    if (t->eom < 0) {
        t->eom = find_any(t, eom_names);
        force_control(t, t->eom);
    }

    /* control tokens named "...unused..." are unused */
    for (int i = 0; i < t->n_vocab; i++)
        if ((t->attr[i] & ATTR_CONTROL) && strstr(tok_text(t, i), "unused")) t->attr[i] |= ATTR_UNUSED;

    for (int k = 3; k < 6; k++)
        if (fim[k] >= 0) t->eog[fim[k]] = 1;
    for (const char *const *p = eog_names; *p; p++) {
        int id = find_token(t, *p, strlen(*p));
        if (id < 0) continue;
        t->eog[id] = 1;
        t->attr[id] |= ATTR_CONTROL;
    }
    /* gpt-oss: these always render */
    static const char *const always_render[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", NULL};
    for (const char *const *p = always_render; *p; p++) {
        int id = find_token(t, *p, strlen(*p));
        if (id >= 0) t->attr[id] = ATTR_USER_DEFINED;
    }
    if (t->eos >= 0) t->eog[t->eos] = 1;
    if (t->eot >= 0) t->eog[t->eot] = 1;
    if (t->eom >= 0) t->eog[t->eom] = 1;

    /* o200k_harmony / solar-open: <|end|> ends a message, not the generation */
    int id_return = find_token(t, "<|return|>", 10), id_call = find_token(t, "<|call|>", 8);
    int id_calls = find_token(t, "<|calls|>", 9), id_flush = find_token(t, "<|flush|>", 9);
    int id_end = find_token(t, "<|end|>", 7);
    int has_return = id_return >= 0 && t->eog[id_return];
    int has_call = (id_call >= 0 && t->eog[id_call]) || (id_calls >= 0 && t->eog[id_calls]);
    int has_flush = id_flush >= 0 && t->eog[id_flush];
    if (id_end >= 0 && t->eog[id_end] && ((has_return && has_call) || (has_call && has_flush))) {
        t->eog[id_end] = 0;
        t->attr[id_end] = ATTR_USER_DEFINED;
    }
    /* gemma4 / paddleocr: </s> is not an end of generation when <|tool_response> is */
    int id_tr = find_token(t, "<|tool_response>", 16), id_s = find_token(t, "</s>", 4);
    if (id_tr >= 0 && t->eog[id_tr] && id_s >= 0 && t->eog[id_s]) {
        t->eog[id_s] = 0;
        t->attr[id_s] = ATTR_NORMAL;
    }
}

/* The bytes token id stands for, with specials rendered (llama.cpp's piece cache).
 * Appends to *out; 0 on OOM. */
typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static int sbuf_put(sbuf *b, const void *s, size_t n) {
    if (b->n + n > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n) nc *= 2;
        char *p = realloc(b->p, nc);
        if (!p) return 0;
        b->p = p;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 1;
}

/* value of the two hex digits of a <0xXX> token (lenient like strtol on text[3..5)) */
static int byte_token_value(const char *s, size_t n) {
    int v = 0;
    for (size_t i = 3; i < 5 && i < n; i++) {
        char c = s[i];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (d < 0) break;
        v = v * 16 + d;
    }
    return v;
}

static int piece_of(const tokenizer *t, int id, sbuf *out) {
    const char *s = tok_text(t, id);
    size_t n = tok_len(t, id);
    unsigned a = t->attr[id];
    if (a & (ATTR_SPECIAL_TEXT | ATTR_USER_DEFINED)) return sbuf_put(out, s, n);
    if (a & ATTR_NORMAL) {
        if (t->model == MODEL_SPM) { /* '▁' -> ' ' */
            for (size_t i = 0; i < n;) {
                if (i + 3 <= n && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
                    if (!sbuf_put(out, " ", 1)) return 0;
                    i += 3;
                } else {
                    if (!sbuf_put(out, s + i, 1)) return 0;
                    i++;
                }
            }
            return 1;
        }
        /* byte-level BPE: each character back to its byte */
        for (size_t i = 0; i < n;) {
            size_t used;
            uint32_t cp = utf8_decode_lenient((const unsigned char *)s + i, n - i, &used);
            i += used;
            int b = cp < 324 ? gpt2_dec[cp] : -1;
            if (b >= 0) {
                unsigned char c = (unsigned char)b;
                if (!sbuf_put(out, &c, 1)) return 0;
                continue;
            }
            /* not a GPT-2 character: llama.cpp writes this marker */
            unsigned char u[4];
            size_t un = utf8_encode(cp, u);
            char hex[16];
            if (!sbuf_put(out, "[UNK_BYTE_0x", 12)) return 0;
            for (size_t k = 0; k < un; k++) {
                snprintf(hex, sizeof hex, "%02x", u[k]);
                if (!sbuf_put(out, hex, 2)) return 0;
            }
            if (!sbuf_put(out, s, n) || !sbuf_put(out, "]", 1)) return 0;
        }
        return 1;
    }
    if (a & ATTR_BYTE) {
        unsigned char c = (unsigned char)byte_token_value(s, n);
        return sbuf_put(out, &c, 1);
    }
    return 1; /* unused / undefined tokens render as nothing */
}

static int build_pieces(tokenizer *t, errsink *e) {
    sbuf b = {0};
    t->piece_off = malloc((size_t)t->n_vocab * sizeof *t->piece_off);
    t->piece_len = malloc((size_t)t->n_vocab * sizeof *t->piece_len);
    if (!t->piece_off || !t->piece_len) goto oom;
    for (int i = 0; i < t->n_vocab; i++) {
        size_t start = b.n;
        if (!piece_of(t, i, &b)) goto oom;
        if (b.n > UINT32_MAX) goto oom;
        t->piece_off[i] = (uint32_t)start;
        t->piece_len[i] = (uint32_t)(b.n - start);
    }
    t->piece_arena = b.p ? b.p : malloc(1);
    if (!t->piece_arena) goto oom;
    return 1;
oom:
    free(b.p);
    load_fail(e, "out of memory for the token pieces");
    return 0;
}

/* special-token list (longest text first, then lowest id) and its byte trie */
static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int build_specials(tokenizer *t, errsink *e) {
    int n = 0;
    size_t bytes = 1;
    for (int i = 0; i < t->n_vocab; i++)
        if (t->attr[i] & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN)) {
            n++;
            bytes += tok_len(t, i);
        }
    t->special = malloc((size_t)(n ? n : 1) * sizeof *t->special);
    t->trie_order = malloc(bytes * sizeof *t->trie_order);
    if (!t->special || !t->trie_order || !pairmap_init(&t->trie, bytes)) goto oom;
    /* sort keys: (inverted length, id), so ascending order is longest first, then lowest id */
    uint64_t *keys = malloc((size_t)(n ? n : 1) * sizeof *keys);
    if (!keys) goto oom;
    n = 0;
    for (int i = 0; i < t->n_vocab; i++)
        if (t->attr[i] & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN))
            keys[n++] = ((uint64_t)(UINT32_MAX - t->st.len[i]) << 32) | (uint32_t)i;
    qsort(keys, (size_t)n, sizeof *keys, cmp_u64);
    for (int k = 0; k < n; k++) t->special[k] = (int32_t)(keys[k] & 0xFFFFFFFFu);
    free(keys);
    t->n_special = n;

    t->n_nodes = 1;
    t->trie_order[0] = -1;
    for (int k = 0; k < n; k++) {
        const unsigned char *s = (const unsigned char *)tok_text(t, t->special[k]);
        size_t len = tok_len(t, t->special[k]);
        int32_t node = 0;
        for (size_t i = 0; i < len; i++) {
            uint64_t key = ((uint64_t)(uint32_t)node << 8) | s[i];
            const pairslot *ps = pairmap_get(&t->trie, key);
            if (ps) {
                node = ps->a;
                continue;
            }
            int32_t child = t->n_nodes++;
            t->trie_order[child] = -1;
            if (!pairmap_put(&t->trie, key, child, 0)) goto oom;
            node = child;
        }
        if (t->trie_order[node] < 0) t->trie_order[node] = k; /* a duplicate text keeps the first */
    }
    return 1;
oom:
    load_fail(e, "out of memory for the special tokens");
    return 0;
}

/* byte tables used by the encoders */
static void build_byte_tables(tokenizer *t) {
    for (int b = 0; b < 256; b++) {
        t->byte_sid[b] = strtab_find(&t->st, (const char *)gpt2_enc[b], gpt2_enc_len[b]);
        char one = (char)b;
        t->single_byte[b] = find_token(t, &one, 1);
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        int id = find_token(t, hex, 6);
        t->spm_byte[b] = id >= 0 ? id : t->single_byte[b];
    }
}

tokenizer *tokenizer_load(const gguf_file *f, char *err, size_t errlen) {
    errsink e = {err, errlen, 0};
    if (err && errlen) err[0] = 0;
    gpt2_tables_init();
    tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        load_fail(&e, "out of memory");
        return NULL;
    }

    gguf_str model;
    int r = gguf_get_str(f, "tokenizer.ggml.model", &model);
    if (r <= 0) {
        load_fail(&e, r == 0 ? "tokenizer.ggml.model is missing" : "tokenizer.ggml.model is not a string");
        goto fail;
    }
    if (gguf_str_eq(model, "gpt2")) {
        t->model = MODEL_BPE;
        t->bos = t->eos = 11; /* llama.cpp's placeholders */
        t->unk = -1;
    } else if (gguf_str_eq(model, "llama")) {
        t->model = MODEL_SPM;
        t->bos = 1;
        t->eos = 2;
        t->unk = 0;
        t->add_space_prefix = 1;
        t->add_bos = 1;
    } else {
        char name[64];
        gguf_str_copy(model, name, sizeof name);
        load_fail(&e, "unsupported tokenizer model '%s' (chatfs reads gpt2 and llama)", name);
        goto fail;
    }
    gguf_str_copy(model, t->model_name, sizeof t->model_name);
    t->eot = t->eom = t->pad = -1;

    gguf_str pre;
    r = gguf_get_str(f, "tokenizer.ggml.pre", &pre);
    if (r < 0) {
        load_fail(&e, "tokenizer.ggml.pre is not a string");
        goto fail;
    }
    if (r == 1) gguf_str_copy(pre, t->pre_name, sizeof t->pre_name);
    if (t->model == MODEL_BPE) set_pre(t, r == 1);

    if (!opt_bool(f, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, &e)) goto fail;
    if (!opt_bool(f, "tokenizer.ggml.add_bos_token", &t->add_bos, &e)) goto fail;
    if (!opt_bool(f, "tokenizer.ggml.add_eos_token", &t->add_eos, &e)) goto fail;

    if (!load_vocab(t, f, &e)) goto fail;
    if (t->model == MODEL_BPE && !load_merges(t, f, &e)) goto fail;
    if (!load_special_ids(t, f, &e)) goto fail;
    build_eog(t, f);
    build_byte_tables(t);
    if (!build_pieces(t, &e) || !build_specials(t, &e)) goto fail;
    return t;
fail:
    tokenizer_free(t);
    return NULL;
}

void tokenizer_free(tokenizer *t) {
    if (!t) return;
    strtab_free(&t->st);
    free(t->score);
    free(t->attr);
    free(t->eog);
    free(t->merges.s);
    free(t->piece_arena);
    free(t->piece_off);
    free(t->piece_len);
    free(t->special);
    free(t->trie.s);
    free(t->trie_order);
    free(t);
}

int tokenizer_n_vocab(const tokenizer *t) { return t->n_vocab; }
const char *tokenizer_model(const tokenizer *t) { return t->model_name; }
const char *tokenizer_pre(const tokenizer *t) { return t->pre_name; }
int tokenizer_bos(const tokenizer *t) { return t->bos; }
int tokenizer_eos(const tokenizer *t) { return t->eos; }
int tokenizer_add_bos(const tokenizer *t) { return t->add_bos && t->bos >= 0; }
int tokenizer_is_eog(const tokenizer *t, int id) { return in_vocab(t, id) && t->eog[id]; }

int tokenizer_token_type(const tokenizer *t, int id) {
    if (!in_vocab(t, id)) return 0;
    unsigned a = t->attr[id];
    if (a & ATTR_UNUSED) return TOK_UNUSED;
    if (a & ATTR_CONTROL) return TOK_CONTROL;
    if (a & ATTR_USER_DEFINED) return TOK_USER_DEFINED;
    if (a & ATTR_UNKNOWN) return TOK_UNKNOWN;
    if (a & ATTR_BYTE) return TOK_BYTE;
    if (a & ATTR_NORMAL) return TOK_NORMAL;
    return 0;
}

int tokenizer_find(const tokenizer *t, const char *s) { return find_token(t, s, strlen(s)); }

const char *tokenizer_token_text(const tokenizer *t, int id) { return in_vocab(t, id) ? tok_text(t, id) : ""; }

/* ------------------------------------------------------------------ pre-tokenizers */

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

static void cptext_free(cptext *c) {
    free(c->cp);
    free(c->fl);
    free(c->off);
    free(c->bytes);
}

static int cptext_init(cptext *c, const char *text, size_t len) {
    memset(c, 0, sizeof *c);
    if (len > UINT32_MAX / 4) return 0;
    c->cp = malloc((len + 1) * sizeof *c->cp);
    c->fl = malloc(len + 1);
    c->off = malloc((len + 1) * sizeof *c->off);
    c->bytes = malloc(len * 3 + 4); /* each input byte re-encodes to at most 3 bytes */
    if (!c->cp || !c->fl || !c->off || !c->bytes) return 0;
    size_t nb = 0;
    for (size_t i = 0; i < len;) {
        size_t used;
        uint32_t cp = utf8_decode_lenient((const unsigned char *)text + i, len - i, &used);
        i += used;
        c->cp[c->n] = cp;
        c->fl[c->n] = (uint8_t)unicode_flags(cp);
        c->off[c->n] = (uint32_t)nb;
        nb += utf8_encode(cp, c->bytes + nb);
        c->n++;
    }
    c->off[c->n] = (uint32_t)nb;
    return 1;
}

#define OUT_OF_RANGE 0xFFFFFFFFu

/* word ends (exclusive code point indices) */
typedef struct {
    ivec ends;
    size_t prev;
} words;

static void word_end(words *w, size_t end) {
    if (end > w->prev) ivec_push(&w->ends, (int32_t)end);
    w->prev = end;
}

static uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

/* length of an English contraction ('s 't 're 've 'm 'll 'd) at pos, 0 if none */
static size_t contraction(const uint32_t *cp, size_t pos, size_t end, int fold_case) {
    if (cp[pos] != '\'' || pos + 1 >= end) return 0;
    uint32_t a = fold_case ? ascii_lower(cp[pos + 1]) : cp[pos + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (pos + 2 >= end) return 0;
    uint32_t b = fold_case ? ascii_lower(cp[pos + 2]) : cp[pos + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* flags / code point at p, or 0 / OUT_OF_RANGE past the end b of the range scanned */
static inline unsigned flags_at(const cptext *c, size_t p, size_t b) { return p < b ? c->fl[p] : 0u; }
static inline uint32_t cp_at(const cptext *c, size_t p, size_t b) { return p < b ? c->cp[p] : OUT_OF_RANGE; }
#define FL(p) flags_at(c, (p), b)
#define CP(p) cp_at(c, (p), b)

/* The LLAMA3 / QWEN2 / QWEN35 regex family, as llama.cpp's hand-written scanner:
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N}{1,max_digits}
 *   | ?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
 * QWEN35 (marks = 1) lets letter runs absorb \p{M} and keeps marks out of the
 * punctuation run. */
static void scan_llama3(const cptext *c, size_t a, size_t b, size_t max_digits, int marks, words *w) {
    const unsigned LET = UCAT_LETTER | (marks ? UCAT_MARK : 0);
    const unsigned NOT_PUNCT = UCAT_WHITESPACE | UCAT_LETTER | UCAT_NUMBER | (marks ? UCAT_MARK : 0);
    w->prev = a;
    size_t pos = a;
    while (pos < b) {
        uint32_t ch = c->cp[pos];
        unsigned f = c->fl[pos];
        size_t k = contraction(c->cp, pos, b, 1);
        if (k) {
            pos += k;
            word_end(w, pos);
            continue;
        }
        if (!(ch == '\r' || ch == '\n' || (f & UCAT_NUMBER)) && ((f & LET) || (FL(pos + 1) & LET))) {
            pos++;
            while (FL(pos) & LET) pos++;
            word_end(w, pos);
            continue;
        }
        if (f & UCAT_NUMBER) {
            size_t ini = pos;
            while (FL(pos) & UCAT_NUMBER) {
                if (++pos - ini >= max_digits) {
                    word_end(w, pos);
                    ini = pos;
                }
            }
            word_end(w, pos);
            continue;
        }
        unsigned f2 = ch == ' ' ? FL(pos + 1) : f;
        if (!(f2 & NOT_PUNCT) && f) {
            pos += (ch == ' ');
            while (!(f2 & NOT_PUNCT) && f2) f2 = FL(++pos);
            uint32_t c2 = CP(pos);
            while (c2 == '\r' || c2 == '\n') c2 = CP(++pos);
            word_end(w, pos);
            continue;
        }
        size_t nws = 0, last_nl = 0;
        while (FL(pos + nws) & UCAT_WHITESPACE) {
            uint32_t c2 = c->cp[pos + nws];
            if (c2 == '\r' || c2 == '\n') last_nl = pos + nws + 1;
            nws++;
        }
        if (last_nl > 0) {
            pos = last_nl; /* \s*[\r\n]+ : up to the last line break of the run */
        } else if (nws > 1 && pos + nws < b) {
            pos += nws - 1; /* \s+(?!\S) : the last space goes with the next word */
        } else if (nws > 0) {
            pos += nws;
        } else {
            pos++;
        }
        word_end(w, pos);
    }
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static void scan_gpt2(const cptext *c, size_t a, size_t b, words *w) {
    w->prev = a;
    size_t pos = a;
    while (pos < b) {
        uint32_t ch = c->cp[pos];
        size_t k = contraction(c->cp, pos, b, 0);
        if (k) {
            pos += k;
            word_end(w, pos);
            continue;
        }
        unsigned f2 = ch == ' ' ? FL(pos + 1) : c->fl[pos];
        unsigned cls = (f2 & UCAT_LETTER) ? UCAT_LETTER : (f2 & UCAT_NUMBER) ? UCAT_NUMBER : 0;
        if (cls) {
            pos += (ch == ' ');
            while (f2 & cls) f2 = FL(++pos);
            word_end(w, pos);
            continue;
        }
        const unsigned NOT_PUNCT = UCAT_WHITESPACE | UCAT_LETTER | UCAT_NUMBER;
        if (!(f2 & NOT_PUNCT) && f2) {
            pos += (ch == ' ');
            while (!(f2 & NOT_PUNCT) && f2) f2 = FL(++pos);
            word_end(w, pos);
            continue;
        }
        size_t nws = 0;
        while (FL(pos + nws) & UCAT_WHITESPACE) nws++;
        if (nws > 1 && pos + nws < b)
            pos += nws - 1;
        else if (nws > 0)
            pos += nws;
        else
            pos++;
        word_end(w, pos);
    }
}
#undef FL
#undef CP

/* One refining pass of the DEFAULT pre-tokenizer: inside [a,b), runs of code points for
 * which in_class() holds become words, and so do the gaps between them. */
static int default_class1(const cptext *c, size_t i) { /* [\p{P}\$\+<=>\^~\|] */
    uint32_t ch = c->cp[i];
    return (c->fl[i] & UCAT_PUNCT) || (ch < 0x80 && ch && strchr("$+<=>^~|", (int)ch));
}
static int default_class3(const cptext *c, size_t i) { return (c->fl[i] & UCAT_NUMBER) != 0; }

static void split_runs(const cptext *c, size_t a, size_t b, int (*in_class)(const cptext *, size_t), words *w) {
    w->prev = a;
    size_t i = a;
    while (i < b) {
        int cls = in_class(c, i);
        while (i < b && in_class(c, i) == cls) i++;
        word_end(w, i);
    }
}

/* [0-9][0-9][0-9]: each group of three ASCII digits is a word, leftmost first */
static void split_three_digits(const cptext *c, size_t a, size_t b, words *w) {
    w->prev = a;
    size_t i = a;
    while (i < b) {
        if (i + 3 <= b && c->cp[i] >= '0' && c->cp[i] <= '9' && c->cp[i + 1] >= '0' && c->cp[i + 1] <= '9' &&
            c->cp[i + 2] >= '0' && c->cp[i + 2] <= '9') {
            word_end(w, i);
            i += 3;
            word_end(w, i);
        } else {
            i++;
        }
    }
    word_end(w, b);
}

/* Splits a whole fragment into words with t's pre-tokenizer. 0 on OOM. */
static int pretokenize(const tokenizer *t, const cptext *c, ivec *ends) {
    words w = {{0}, 0};
    if (c->n == 0) {
        *ends = w.ends;
        return 1;
    }
    switch (t->pre) {
    case PRE_LLAMA3: scan_llama3(c, 0, c->n, 3, 0, &w); break;
    case PRE_QWEN2: scan_llama3(c, 0, c->n, 1, 0, &w); break;
    case PRE_QWEN35: scan_llama3(c, 0, c->n, 1, 1, &w); break;
    case PRE_GPT2: scan_gpt2(c, 0, c->n, &w); break;
    default: {
        /* DEFAULT: four regexes in sequence, each refining the previous words */
        ivec cur = {0};
        ivec_push(&cur, (int32_t)c->n);
        for (int pass = 0; pass < 4 && !cur.oom; pass++) {
            words next = {{0}, 0};
            size_t start = 0;
            for (size_t k = 0; k < cur.n; k++) {
                size_t end = (size_t)cur.v[k];
                if (pass == 0) split_runs(c, start, end, default_class1, &next);
                else if (pass == 1) scan_gpt2(c, start, end, &next);
                else if (pass == 2) split_runs(c, start, end, default_class3, &next);
                else split_three_digits(c, start, end, &next);
                start = end;
            }
            free(cur.v);
            cur = next.ends;
        }
        w.ends = cur;
        break;
    }
    }
    *ends = w.ends;
    return !w.ends.oom;
}

int tokenizer_pretokenize(const tokenizer *t, const char *text, size_t len, size_t **ends) {
    *ends = NULL;
    if (t->model == MODEL_SPM) {
        *ends = malloc(sizeof **ends);
        if (!*ends) return -1;
        (*ends)[0] = len;
        return len ? 1 : 0;
    }
    cptext c;
    ivec w = {0};
    int n = -1;
    if (cptext_init(&c, text, len) && pretokenize(t, &c, &w)) {
        *ends = malloc((w.n ? w.n : 1) * sizeof **ends);
        if (*ends) {
            for (size_t k = 0; k < w.n; k++) (*ends)[k] = c.off[w.v[k]];
            n = (int)w.n;
        }
    }
    free(w.v);
    cptext_free(&c);
    return n;
}

/* ------------------------------------------------------------------ BPE */

typedef struct {
    int32_t rank, left, right;
    uint32_t llen, rlen;
    int32_t merged;
} bigram;

typedef struct {
    uint32_t start, len;
    int32_t sid, prev, next;
} symbol;

/* scratch space reused across the words of one encode call */
typedef struct {
    symbol *sym;
    size_t sym_cap;
    bigram *heap;
    size_t heap_n, heap_cap;
    unsigned char *tmp;
    size_t tmp_cap;
    int oom;
} workspace;

static void *grow(void *p, size_t *cap, size_t need, size_t elem, int *oom) {
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

/* min-heap on (rank, left): the lowest rank merges first, ties go to the leftmost */
static int bigram_less(const bigram *x, const bigram *y) {
    return x->rank < y->rank || (x->rank == y->rank && x->left < y->left);
}

static void heap_push(workspace *ws, bigram g) {
    ws->heap = grow(ws->heap, &ws->heap_cap, ws->heap_n + 1, sizeof *ws->heap, &ws->oom);
    if (ws->oom) return;
    size_t i = ws->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_less(&g, &ws->heap[p])) break;
        ws->heap[i] = ws->heap[p];
        i = p;
    }
    ws->heap[i] = g;
}

static bigram heap_pop(workspace *ws) {
    bigram top = ws->heap[0], last = ws->heap[--ws->heap_n];
    size_t i = 0, n = ws->heap_n;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        const bigram *best = &last;
        if (l < n && bigram_less(&ws->heap[l], best)) {
            m = l;
            best = &ws->heap[l];
        }
        if (l + 1 < n && bigram_less(&ws->heap[l + 1], best)) m = l + 1;
        if (m == i) break;
        ws->heap[i] = ws->heap[m];
        i = m;
    }
    if (n) ws->heap[i] = last;
    return top;
}

static void try_merge(const tokenizer *t, workspace *ws, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const symbol *L = &ws->sym[l], *R = &ws->sym[r];
    if (L->sid < 0 || R->sid < 0) return;
    const pairslot *m = pairmap_get(&t->merges, pair_key(L->sid, R->sid));
    if (!m) return;
    bigram g = {m->a, l, r, L->len, R->len, m->b};
    heap_push(ws, g);
}

/* emits the tokens of one symbol that is not itself a token: llama.cpp looks up each
 * byte of its GPT-2-encoded text as a one-byte token (usually none exist) */
static void emit_unknown_symbol(const tokenizer *t, const unsigned char *w, size_t n, ivec *out) {
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < gpt2_enc_len[w[i]]; k++) {
            int id = t->single_byte[gpt2_enc[w[i]][k]];
            if (id >= 0) ivec_push(out, id);
        }
}

/* Byte-level BPE of one pre-tokenized word (its UTF-8 bytes). */
static void bpe_word(const tokenizer *t, workspace *ws, const unsigned char *w, size_t n, ivec *out) {
    if (n == 0) return;
    if (t->ignore_merges) { /* a word that is a whole token is taken as is */
        ws->tmp = grow(ws->tmp, &ws->tmp_cap, n * 2, 1, &ws->oom);
        if (ws->oom) return;
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            for (int j = 0; j < gpt2_enc_len[w[i]]; j++) ws->tmp[k++] = gpt2_enc[w[i]][j];
        int id = find_token(t, (const char *)ws->tmp, k);
        if (id >= 0) {
            ivec_push(out, id);
            return;
        }
    }
    if (n == 1) {
        int32_t sid = t->byte_sid[w[0]];
        if (sid >= 0 && sid < t->n_vocab)
            ivec_push(out, sid);
        else
            emit_unknown_symbol(t, w, 1, out);
        return;
    }
    ws->sym = grow(ws->sym, &ws->sym_cap, n, sizeof *ws->sym, &ws->oom);
    if (ws->oom) return;
    for (size_t i = 0; i < n; i++) {
        symbol s = {(uint32_t)i, 1, t->byte_sid[w[i]], (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1};
        ws->sym[i] = s;
    }
    ws->heap_n = 0;
    for (size_t i = 1; i < n; i++) try_merge(t, ws, (int32_t)i - 1, (int32_t)i);
    while (ws->heap_n > 0 && !ws->oom) {
        bigram g = heap_pop(ws);
        symbol *L = &ws->sym[g.left], *R = &ws->sym[g.right];
        if (L->len != g.llen || R->len != g.rlen) continue; /* one side changed since: stale */
        L->len += R->len;
        L->sid = g.merged;
        R->len = 0;
        L->next = R->next;
        if (R->next >= 0) ws->sym[R->next].prev = g.left;
        try_merge(t, ws, L->prev, g.left);
        try_merge(t, ws, g.left, L->next);
    }
    for (int32_t i = 0; i >= 0; i = ws->sym[i].next) {
        const symbol *s = &ws->sym[i];
        if (s->sid >= 0 && s->sid < t->n_vocab)
            ivec_push(out, s->sid);
        else
            emit_unknown_symbol(t, w + s->start, s->len, out);
    }
}

static int bpe_fragment(const tokenizer *t, workspace *ws, const char *text, size_t len, ivec *out) {
    cptext c;
    ivec ends = {0};
    int ok = cptext_init(&c, text, len) && pretokenize(t, &c, &ends);
    if (ok) {
        size_t start = 0;
        for (size_t k = 0; k < ends.n && !ws->oom; k++) {
            size_t end = (size_t)ends.v[k];
            bpe_word(t, ws, c.bytes + c.off[start], c.off[end] - c.off[start], out);
            start = end;
        }
    }
    free(ends.v);
    cptext_free(&c);
    return ok && !ws->oom;
}

/* ------------------------------------------------------------------ SentencePiece */

typedef struct {
    float score;
    int32_t left, right;
    uint32_t size;
} spm_bigram;

/* max-heap on (score, -left): the best score merges first, ties go to the leftmost */
static int spm_before(const spm_bigram *x, const spm_bigram *y) {
    return x->score > y->score || (x->score == y->score && x->left < y->left);
}

typedef struct {
    spm_bigram *v;
    size_t n, cap;
    int oom;
} spm_heap;

static void spm_push(spm_heap *h, spm_bigram g) {
    h->v = grow(h->v, &h->cap, h->n + 1, sizeof *h->v, &h->oom);
    if (h->oom) return;
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!spm_before(&g, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = g;
}

static spm_bigram spm_pop(spm_heap *h) {
    spm_bigram top = h->v[0], last = h->v[--h->n];
    size_t i = 0, n = h->n;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        const spm_bigram *best = &last;
        if (l < n && spm_before(&h->v[l], best)) {
            m = l;
            best = &h->v[l];
        }
        if (l + 1 < n && spm_before(&h->v[l + 1], best)) m = l + 1;
        if (m == i) break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (n) h->v[i] = last;
    return top;
}

static void spm_try(const tokenizer *t, const char *s, const symbol *sym, int32_t l, int32_t r, spm_heap *h) {
    if (l < 0 || r < 0) return;
    uint32_t size = sym[l].len + sym[r].len;
    int id = find_token(t, s + sym[l].start, size); /* the pair must be a token (any type) */
    if (id < 0) return;
    spm_bigram g = {t->score[id], l, r, size};
    spm_push(h, g);
}

/* SentencePiece BPE of one raw fragment (spaces already escaped to '▁'). */
static int spm_fragment(const tokenizer *t, const char *s, size_t n, ivec *out) {
    if (n == 0) return 1;
    symbol *sym = malloc(n * sizeof *sym);
    spm_heap h = {0};
    if (!sym) return 0;
    int32_t count = 0;
    for (size_t off = 0; off < n;) {
        size_t len = (size_t)utf8_len_from_lead((unsigned char)s[off]);
        if (len > n - off) len = n - off;
        symbol x = {(uint32_t)off, (uint32_t)len, -1, count - 1, off + len < n ? count + 1 : -1};
        sym[count++] = x;
        off += len;
    }
    for (int32_t i = 1; i < count; i++) spm_try(t, s, sym, i - 1, i, &h);
    while (h.n > 0 && !h.oom) {
        spm_bigram g = spm_pop(&h);
        symbol *L = &sym[g.left], *R = &sym[g.right];
        if (L->len == 0 || R->len == 0 || L->len + R->len != g.size) continue; /* stale */
        L->len += R->len;
        R->len = 0;
        L->next = R->next;
        if (R->next >= 0) sym[R->next].prev = g.left;
        spm_try(t, s, sym, L->prev, g.left, &h);
        spm_try(t, s, sym, g.left, L->next, &h);
    }
    /* every merged symbol is a token; what is left over goes out as byte tokens */
    for (int32_t i = 0; i >= 0 && !h.oom; i = sym[i].next) {
        int id = find_token(t, s + sym[i].start, sym[i].len);
        if (id >= 0) {
            ivec_push(out, id);
            continue;
        }
        for (uint32_t k = 0; k < sym[i].len; k++) {
            int b = t->spm_byte[(unsigned char)s[sym[i].start + k]];
            if (b < 0) b = t->unk; /* llama.cpp throws here; unk (if any) is the gentler choice */
            if (b >= 0) ivec_push(out, b);
        }
    }
    int ok = !h.oom;
    free(h.v);
    free(sym);
    return ok;
}

/* escapes and tokenizes one SPM fragment, with the optional leading space */
static int spm_encode(const tokenizer *t, const char *text, size_t len, int prefix_space, ivec *out) {
    size_t spaces = prefix_space ? 1 : 0;
    for (size_t i = 0; i < len; i++) spaces += text[i] == ' ';
    size_t n = len + (prefix_space ? 1 : 0) + spaces * 2;
    char *buf = malloc(n ? n : 1);
    if (!buf) return 0;
    size_t k = 0;
    if (prefix_space) {
        memcpy(buf, "\xe2\x96\x81", 3);
        k = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(buf + k, "\xe2\x96\x81", 3);
            k += 3;
        } else {
            buf[k++] = text[i];
        }
    }
    int ok = spm_fragment(t, buf, k, out);
    free(buf);
    return ok;
}

/* ------------------------------------------------------------------ special tokens */

typedef struct {
    int32_t order, pos;
} occurrence;

static int cmp_occurrence(const void *a, const void *b) {
    const occurrence *x = a, *y = b;
    if (x->order != y->order) return x->order < y->order ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

typedef struct {
    int32_t pos, len, id; /* id >= 0: a special token at text[pos..pos+len) */
} accepted;

static int cmp_accepted(const void *a, const void *b) {
    const accepted *x = a, *y = b;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Finds the special tokens in text the way llama.cpp's tokenizer_st_partition does:
 * specials are taken longest first; each one splits every remaining raw fragment at its
 * leftmost non-overlapping occurrences. With parse_special off only USER_DEFINED tokens
 * count. Returns the accepted matches sorted by position (malloc'd), count in *n_out,
 * NULL with *n_out = -1 on OOM. */
static accepted *partition(const tokenizer *t, const char *text, size_t len, int parse_special, int *n_out) {
    *n_out = 0;
    if (t->n_special == 0 || len == 0) return NULL;
    occurrence *occ = NULL;
    size_t n_occ = 0, cap_occ = 0;
    int oom = 0;
    /* all occurrences of all specials, through the trie */
    for (size_t pos = 0; pos < len && !oom; pos++) {
        int32_t node = 0;
        for (size_t i = pos; i < len; i++) {
            const pairslot *ps = pairmap_get(&t->trie, ((uint64_t)(uint32_t)node << 8) | (unsigned char)text[i]);
            if (!ps) break;
            node = ps->a;
            int32_t ord = t->trie_order[node];
            if (ord < 0) continue;
            unsigned a = t->attr[t->special[ord]];
            if (!parse_special && (a & (ATTR_CONTROL | ATTR_UNKNOWN))) continue;
            occ = grow(occ, &cap_occ, n_occ + 1, sizeof *occ, &oom);
            if (oom) break;
            occurrence o = {ord, (int32_t)pos};
            occ[n_occ++] = o;
        }
    }
    if (oom || n_occ == 0) {
        free(occ);
        *n_out = oom ? -1 : 0;
        return NULL;
    }
    qsort(occ, n_occ, sizeof *occ, cmp_occurrence);
    unsigned char *taken = calloc(len, 1);
    accepted *acc = malloc(n_occ * sizeof *acc);
    if (!taken || !acc) {
        free(occ);
        free(taken);
        free(acc);
        *n_out = -1;
        return NULL;
    }
    int n_acc = 0;
    for (size_t k = 0; k < n_occ;) {
        int32_t ord = occ[k].order;
        size_t L = tok_len(t, t->special[ord]);
        size_t resume = 0; /* the search for this special continues after its last match */
        for (; k < n_occ && occ[k].order == ord; k++) {
            size_t p = (size_t)occ[k].pos;
            if (p < resume) continue;
            int free_span = 1;
            for (size_t i = p; i < p + L; i++)
                if (taken[i]) {
                    free_span = 0;
                    break;
                }
            if (!free_span) continue;
            memset(taken + p, 1, L);
            accepted a = {(int32_t)p, (int32_t)L, t->special[ord]};
            acc[n_acc++] = a;
            resume = p + L;
        }
    }
    free(occ);
    free(taken);
    qsort(acc, (size_t)n_acc, sizeof *acc, cmp_accepted);
    *n_out = n_acc;
    return acc;
}

static int encode_raw(const tokenizer *t, workspace *ws, const char *s, size_t n, int after_special, ivec *out) {
    if (n == 0) return 1;
    if (t->model == MODEL_SPM) return spm_encode(t, s, n, t->add_space_prefix && after_special, out);
    return bpe_fragment(t, ws, s, n, out);
}

int tokenizer_encode(const tokenizer *t, const char *text, size_t len, int add_special, int parse_special,
                     int **out) {
    ivec v = {0};
    workspace ws = {0};
    *out = NULL;
    if (add_special && t->add_bos && t->bos >= 0) ivec_push(&v, t->bos);
    int n_acc = 0;
    accepted *acc = partition(t, text, len, parse_special, &n_acc);
    int ok = n_acc >= 0;
    size_t pos = 0;
    int after_special = 1; /* SPM prefixes a space to the first fragment and after specials */
    for (int k = 0; ok && k <= n_acc; k++) {
        size_t end = k < n_acc ? (size_t)acc[k].pos : len;
        if (end > pos) {
            ok = encode_raw(t, &ws, text + pos, end - pos, after_special, &v);
            after_special = 0;
        }
        if (k < n_acc) {
            ivec_push(&v, acc[k].id);
            after_special = 1;
            pos = end + (size_t)acc[k].len;
        }
    }
    if (add_special && t->add_eos && t->eos >= 0) ivec_push(&v, t->eos);
    free(acc);
    free(ws.sym);
    free(ws.heap);
    free(ws.tmp);
    if (!ok || v.oom || ws.oom || v.n > INT32_MAX) {
        free(v.v);
        return -1;
    }
    if (!v.v) v.v = malloc(sizeof *v.v);
    if (!v.v) return -1;
    *out = v.v;
    return (int)v.n;
}

/* ------------------------------------------------------------------ decoding */

/* piece of id as shown with render_special; sets *n */
static const char *piece(const tokenizer *t, int id, int render_special, size_t *n) {
    *n = 0;
    if (!in_vocab(t, id)) return "";
    if (!render_special && (t->attr[id] & ATTR_SPECIAL_TEXT)) return "";
    *n = t->piece_len[id];
    return t->piece_arena + t->piece_off[id];
}

size_t tokenizer_token_bytes(const tokenizer *t, int id, int render_special, char *buf, size_t cap) {
    size_t n;
    const char *p = piece(t, id, render_special, &n);
    if (n && cap) memcpy(buf, p, n < cap ? n : cap);
    return n;
}

char *tokenizer_decode(const tokenizer *t, const int *ids, int n, int render_special) {
    size_t total = 0, len;
    for (int i = 0; i < n; i++) {
        piece(t, ids[i], render_special, &len);
        total += len;
    }
    char *s = malloc(total + 1);
    if (!s) return NULL;
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        const char *p = piece(t, ids[i], render_special, &len);
        memcpy(s + k, p, len);
        k += len;
    }
    s[k] = 0;
    return s;
}

void detok_init(detok_stream *s, int render_special) {
    memset(s, 0, sizeof *s);
    s->render_special = render_special;
}

/* appends n bytes if they fit (whole characters only, so nothing is ever cut in half) */
static void put(char *out, size_t cap, size_t *w, const void *p, size_t n) {
    if (*w + n > cap) return;
    memcpy(out + *w, p, n);
    *w += n;
}

static const char REPLACEMENT_UTF8[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

size_t detok_push(const tokenizer *t, detok_stream *s, int id, char *out, size_t cap) {
    size_t plen, w = 0, i = 0;
    const unsigned char *p = (const unsigned char *)piece(t, id, s->render_special, &plen);
    /* first complete the character left over from earlier tokens, a byte at a time */
    while (s->n_pending > 0) {
        int r = utf8_check_char(s->pending, (size_t)s->n_pending);
        if (r == 0) {
            if (i >= plen) return w;
            s->pending[s->n_pending++] = p[i++];
            continue;
        }
        size_t drop = r > 0 ? (size_t)r : (size_t)-r;
        if (r > 0)
            put(out, cap, &w, s->pending, drop);
        else
            put(out, cap, &w, REPLACEMENT_UTF8, 3);
        memmove(s->pending, s->pending + drop, (size_t)s->n_pending - drop);
        s->n_pending -= (int)drop;
    }
    /* then the rest of the piece; an incomplete tail waits in pending */
    while (i < plen) {
        int r = utf8_check_char(p + i, plen - i);
        if (r > 0) {
            put(out, cap, &w, p + i, (size_t)r);
            i += (size_t)r;
        } else if (r == 0) {
            memcpy(s->pending, p + i, plen - i); /* at most 3 bytes */
            s->n_pending = (int)(plen - i);
            break;
        } else {
            put(out, cap, &w, REPLACEMENT_UTF8, 3);
            i += (size_t)-r;
        }
    }
    return w;
}

size_t detok_flush(detok_stream *s, char *out, size_t cap) {
    size_t w = 0;
    if (s->n_pending > 0) put(out, cap, &w, REPLACEMENT_UTF8, 3); /* a truncated character */
    s->n_pending = 0;
    return w;
}
