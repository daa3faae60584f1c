/* bpe.c - byte-level BPE ("gpt2" tokenizers): GPT-2's byte <-> unicode map, and the
 * merges of one pre-tokenized word, lowest rank first, as llama.cpp does them. Merges
 * are integer lookups on string ids (sids, see tokenizer_impl.h).
 *
 * A file of its own because it is one algorithm read side by side with llama.cpp's;
 * the words come from pretokenize.c and the merge table from the loader (tokenizer.c).
 * The byte map is here because it is what makes the BPE byte-level; the loader reads
 * it too, for the byte tables and the decoded pieces. */
#include <pthread.h>
#include <stdlib.h>

#include "engine/tokenizer/tokenizer_impl.h"
#include "engine/tokenizer/unicode.h"

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

unsigned char gpt2_enc[256][2]; /* UTF-8 of each byte's GPT-2 character */
unsigned char gpt2_enc_len[256];
int16_t gpt2_dec[324];          /* cp -> byte for cp < 324, -1 otherwise */

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

void gpt2_tables_init(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, gpt2_tables_fill);
}

static void try_merge(const tokenizer *t, workspace *ws, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const symbol *L = &ws->sym[l], *R = &ws->sym[r];
    if (L->sid < 0 || R->sid < 0) return;
    const pairslot *m = pairmap_get(&t->merges, pair_key(L->sid, R->sid));
    if (!m) return;
    bigram g = {m->a, l, r, L->len, R->len, m->b}; /* lowest rank first */
    bigram_push(&ws->heap, g, &ws->oom);
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
    ws->heap.n = 0;
    for (size_t i = 1; i < n; i++) try_merge(t, ws, (int32_t)i - 1, (int32_t)i);
    while (ws->heap.n > 0 && !ws->oom) {
        bigram g = bigram_pop(&ws->heap);
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

int bpe_fragment(const tokenizer *t, workspace *ws, const char *text, size_t len, ivec *out) {
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
