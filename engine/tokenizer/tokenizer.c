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

/* A raw fragment of a text (the bytes between two special tokens) and, for the known
 * text, the run of its tokens that came from it. */
typedef struct {
    size_t start, end;
    int first, count;
} fragment;

/* The raw fragments of text in order (malloc'd, count in *n): the spans between the
 * accepted specials. -1 in *n on OOM. */
static fragment *fragments(const accepted *acc, int n_acc, size_t len, int *n) {
    fragment *f = malloc(sizeof *f * ((size_t)n_acc + 1));
    *n = f ? 0 : -1;
    size_t pos = 0;
    for (int k = 0; f && k <= n_acc; k++) {
        size_t end = k < n_acc ? (size_t)acc[k].pos : len;
        if (end > pos) f[(*n)++] = (fragment){pos, end, 0, 0};
        if (k < n_acc) pos = end + (size_t)acc[k].len;
    }
    return f;
}

/* Finds which tokens of ids (the encoding of text, whose specials are acc and raw
 * fragments f, between skip_bos and skip_eos tokens) each fragment produced: the run of
 * tokens that spells its bytes. 0 when the tokens do not spell the text byte for byte
 * (bytes that are not UTF-8 come back as U+FFFD): the caller then encodes from scratch. */
static int locate_fragments(const tokenizer *t, const char *text, const int *ids, int n_ids, int skip_bos,
                            int skip_eos, const accepted *acc, int n_acc, fragment *f, int n_frag) {
    int i = skip_bos ? 1 : 0, k = 0, end_ids = n_ids - (skip_eos ? 1 : 0);
    size_t pos = 0;
    for (int a = 0; a <= n_acc; a++) {
        if (k < n_frag && f[k].start == pos) { /* the raw fragment before this special (or the end) */
            f[k].first = i;
            while (pos < f[k].end) {
                size_t n = 0;
                const char *p = i < end_ids ? piece(t, ids[i++], 1, &n) : "";
                if (n == 0 || n > f[k].end - pos || memcmp(p, text + pos, n) != 0) return 0;
                pos += n;
            }
            f[k].count = i - f[k].first;
            k++;
        }
        if (a == n_acc) break;
        if (pos != (size_t)acc[a].pos || i >= end_ids || ids[i] != acc[a].id) return 0;
        i++;
        pos += (size_t)acc[a].len;
    }
    return k == n_frag && i == end_ids;
}

int tokenizer_encode_like(const tokenizer *t, const char *text, size_t len, int add_special, int parse_special,
                          const char *known, size_t known_len, const int *known_ids, int n_known, int **out) {
    /* SentencePiece spaces and byte fallbacks do not spell the text byte for byte */
    if (!known || t->model != MODEL_BPE) return tokenizer_encode(t, text, len, add_special, parse_special, out);
    size_t shared = 0;
    while (shared < len && shared < known_len && text[shared] == known[shared]) shared++;

    int n_acc = 0, n_kacc = 0, n_frag = 0, n_kfrag = 0;
    accepted *acc = partition(t, text, len, parse_special, &n_acc);
    accepted *kacc = partition(t, known, known_len, parse_special, &n_kacc);
    fragment *f = n_acc >= 0 ? fragments(acc, n_acc, len, &n_frag) : NULL;
    fragment *kf = n_kacc >= 0 ? fragments(kacc, n_kacc, known_len, &n_kfrag) : NULL;
    int bos = add_special && t->add_bos && t->bos >= 0, eos = add_special && t->add_eos && t->eos >= 0;
    if (!f || !kf || !locate_fragments(t, known, known_ids, n_known, bos, eos, kacc, n_kacc, kf, n_kfrag)) {
        free(acc), free(kacc), free(f), free(kf);
        return tokenizer_encode(t, text, len, add_special, parse_special, out);
    }

    ivec v = {0};
    workspace ws = {0};
    *out = NULL;
    if (bos) ivec_push(&v, t->bos);
    int ok = 1, k = 0, kk = 0;
    size_t pos = 0;
    for (int a = 0; ok && a <= n_acc; a++) {
        if (k < n_frag && f[k].start == pos) {
            /* a fragment the known text has too, at the same place, within the bytes both
             * share: its tokens are the same (a raw fragment is encoded on its own) */
            while (kk < n_kfrag && kf[kk].start < f[k].start) kk++;
            if (kk < n_kfrag && kf[kk].start == f[k].start && kf[kk].end == f[k].end && f[k].end <= shared)
                for (int i = 0; i < kf[kk].count; i++) ivec_push(&v, known_ids[kf[kk].first + i]);
            else
                ok = encode_raw(t, &ws, text + f[k].start, f[k].end - f[k].start, 1, &v);
            pos = f[k++].end;
        }
        if (a < n_acc) {
            ivec_push(&v, acc[a].id);
            pos = (size_t)acc[a].pos + (size_t)acc[a].len;
        }
    }
    if (add_special && t->add_eos && t->eos >= 0) ivec_push(&v, t->eos);
    free(acc), free(kacc), free(f), free(kf);
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
