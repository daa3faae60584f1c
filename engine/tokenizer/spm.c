/* spm.c - SentencePiece ("llama" tokenizers): spaces become '▁', then the pair of
 * neighbouring symbols that is a token with the best score merges first, and what is
 * left over goes out as <0xXX> byte tokens, as llama.cpp does it.
 *
 * A file of its own because it shares nothing with byte-level BPE but the symbol list:
 * no pre-tokenizer, no merge table, the vocabulary's scores decide. */
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer/tokenizer_impl.h"
#include "engine/tokenizer/unicode.h"

static void spm_try(const tokenizer *t, const char *s, const symbol *sym, int32_t l, int32_t r, bigram_heap *h,
                    int *oom) {
    if (l < 0 || r < 0) return;
    int id = find_token(t, s + sym[l].start, sym[l].len + sym[r].len); /* the pair must be a token (any type) */
    if (id < 0) return;
    bigram g = {-(double)t->score[id], l, r, sym[l].len, sym[r].len, id}; /* best score first */
    bigram_push(h, g, oom);
}

/* SentencePiece BPE of one raw fragment (spaces already escaped to '▁'). */
static int spm_fragment(const tokenizer *t, const char *s, size_t n, ivec *out) {
    if (n == 0) return 1;
    symbol *sym = malloc(n * sizeof *sym);
    bigram_heap h = {0};
    int oom = 0;
    if (!sym) return 0;
    int32_t count = 0;
    for (size_t off = 0; off < n;) {
        size_t len = (size_t)utf8_len_from_lead((unsigned char)s[off]);
        if (len > n - off) len = n - off;
        symbol x = {(uint32_t)off, (uint32_t)len, -1, count - 1, off + len < n ? count + 1 : -1};
        sym[count++] = x;
        off += len;
    }
    for (int32_t i = 1; i < count; i++) spm_try(t, s, sym, i - 1, i, &h, &oom);
    while (h.n > 0 && !oom) {
        bigram g = bigram_pop(&h);
        symbol *L = &sym[g.left], *R = &sym[g.right];
        if (L->len == 0 || R->len == 0 || L->len + R->len != g.llen + g.rlen) continue; /* stale */
        L->len += R->len;
        R->len = 0;
        L->next = R->next;
        if (R->next >= 0) sym[R->next].prev = g.left;
        spm_try(t, s, sym, L->prev, g.left, &h, &oom);
        spm_try(t, s, sym, g.left, L->next, &h, &oom);
    }
    /* every merged symbol is a token; what is left over goes out as byte tokens */
    for (int32_t i = 0; i >= 0 && !oom; i = sym[i].next) {
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
    int ok = !oom;
    free(h.v);
    free(sym);
    return ok;
}

int spm_encode(const tokenizer *t, const char *text, size_t len, int prefix_space, ivec *out) {
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
