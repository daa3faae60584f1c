/* tokenizer.c - text <-> token ids the way llama.cpp computes them (docs/engine-math.md §8;
 * llama.cpp src/llama-vocab.cpp).
 *
 * Layout of this file:
 *   1. accessors
 *   2. special-token partitioning and tokenizer_encode
 *   3. decoding and the streaming detokenizer
 *
 * Loading is vocab.c. The word encoders are files of their own, each one algorithm read
 * against llama.cpp's: pretokenize.c (pre-tokenizers), bpe.c (byte-level BPE) and spm.c
 * (SentencePiece); strtab.c holds the containers. They share the struct through
 * tokenizer_impl.h, which also tells how merges are stored. */
#include "engine/tokenizer/tokenizer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer/tokenizer_impl.h"
#include "engine/tokenizer/unicode.h"

int tokenizer_n_vocab(const tokenizer *t) { return t->n_vocab; }
const char *tokenizer_model(const tokenizer *t) { return t->model_name; }
const char *tokenizer_pre(const tokenizer *t) { return t->pre_name; }
int tokenizer_bos(const tokenizer *t) { return t->bos; }
int tokenizer_eos(const tokenizer *t) { return t->eos; }
int tokenizer_add_bos(const tokenizer *t) { return t->add_bos && t->bos >= 0; }
int tokenizer_add_eos(const tokenizer *t) { return t->add_eos && t->eos >= 0; }
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

static const char *piece(const tokenizer *t, int id, int render_special, size_t *n);

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
    free(ws.heap.v);
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

/* ------------------------------------------------------------------ encoding like a known text */

/* 1 when text[a..x) is an occurrence of a special token the partition counts (with
 * parse_special as there) and no other occurrence overlaps it or spans x. */
static int lone_special(const tokenizer *t, const char *text, size_t len, size_t a, size_t x, size_t max_len,
                        int parse_special) {
    int self = 0;
    for (size_t p = a > max_len ? a - max_len : 0; p < x; p++) {
        int32_t node = 0;
        for (size_t i = p; i < len; i++) {
            const pairslot *ps = pairmap_get(&t->trie, ((uint64_t)(uint32_t)node << 8) | (unsigned char)text[i]);
            if (!ps) break;
            node = ps->a;
            int32_t ord = t->trie_order[node];
            if (ord < 0) continue;
            if (!parse_special && (t->attr[t->special[ord]] & (ATTR_CONTROL | ATTR_UNKNOWN))) continue;
            size_t end = i + 1;
            if (p == a && end == x) self = 1;
            else if (end > a) return 0;
        }
    }
    return self;
}

/* Why this is exact. The partition (specials longest first, each at its leftmost
 * occurrences that overlap nothing taken) decides every occurrence from the occurrences
 * that overlap it. So at a cut x that no occurrence spans, the matches before x are those
 * of text[0..x) alone, and the ones after x those of the rest alone. If the known text
 * has a special token ending at x, and no other occurrence overlaps it or spans x in
 * either text, that occurrence is accepted in both, x ends a fragment in both, and when
 * x lies within the bytes both share, the known tokens up to it are the new text's too;
 * the rest is encoded as a text of its own (a raw fragment after a special: as inside the
 * whole). The known tokens are checked to spell the known text byte for byte, which also
 * turns away bytes that are not UTF-8 (decoded as U+FFFD). */
int tokenizer_encode_like(const tokenizer *t, const char *text, size_t len, int add_special, int parse_special,
                          const char *known, size_t known_len, const int *known_ids, int n_known, int **out) {
    /* SentencePiece's added spaces do not spell the text byte for byte */
    if (!known || t->model != MODEL_BPE || t->n_special == 0)
        return tokenizer_encode(t, text, len, add_special, parse_special, out);
    size_t shared = 0;
    while (shared < len && shared < known_len && text[shared] == known[shared]) shared++;
    size_t max_len = 0;
    for (int k = 0; k < t->n_special; k++)
        if (tok_len(t, t->special[k]) > max_len) max_len = tok_len(t, t->special[k]);

    int bos = add_special && t->add_bos && t->bos >= 0, eos = add_special && t->add_eos && t->eos >= 0;
    int i = bos, cut_ids = 0; /* known_ids[0..cut_ids) are the tokens of text[0..cut) */
    size_t pos = 0, cut = 0;
    if (bos && (n_known < 1 || known_ids[0] != t->bos)) i = n_known; /* not what encode gives: no reuse */
    for (; i < n_known - eos && pos < shared; i++) {
        size_t n = 0;
        const char *p = piece(t, known_ids[i], 1, &n);
        if (n == 0 || n > known_len - pos || memcmp(p, known + pos, n) != 0) break; /* does not spell it */
        pos += n;
        if (pos > shared || !(t->attr[known_ids[i]] & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN))) continue;
        size_t a = pos - n;
        if (lone_special(t, known, known_len, a, pos, max_len, parse_special) &&
            lone_special(t, text, len, a, pos, max_len, parse_special))
            cut = pos, cut_ids = i + 1;
    }
    if (cut == 0) return tokenizer_encode(t, text, len, add_special, parse_special, out);

    int *tail;
    int n_tail = tokenizer_encode(t, text + cut, len - cut, 0, parse_special, &tail);
    if (n_tail < 0) return -1;
    int n = cut_ids + n_tail + eos;
    int *ids = malloc(sizeof *ids * (size_t)n);
    if (ids) {
        memcpy(ids, known_ids, sizeof *ids * (size_t)cut_ids);
        memcpy(ids + cut_ids, tail, sizeof *ids * (size_t)n_tail);
        if (eos) ids[n - 1] = t->eos;
    }
    free(tail);
    *out = ids;
    return ids ? n : -1;
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
