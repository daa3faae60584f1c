/* pretokenize.c - the pre-tokenizers: how byte-level BPE cuts a raw fragment into
 * words before merging each one, as llama.cpp's hand-written scanners for its regexes
 * (src/unicode.cpp unicode_regex_split_custom_*). tokenizer_pretokenize (tokenizer.h)
 * shows the words to tests.
 *
 * A file of its own because this is Unicode text scanning, not tokens: it sees code
 * points and their categories only (the tokenizer just says which scanner). */
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/tokenizer_impl.h"
#include "engine/tokenizer/unicode.h"

void cptext_free(cptext *c) {
    free(c->cp);
    free(c->fl);
    free(c->off);
    free(c->bytes);
}

int cptext_init(cptext *c, const char *text, size_t len) {
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

int pretokenize(const tokenizer *t, const cptext *c, ivec *ends) {
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
