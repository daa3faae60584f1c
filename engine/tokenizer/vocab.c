/* vocab.c - loading a tokenizer from a GGUF file's tokenizer.ggml.* keys, as llama.cpp's
 * llama_vocab::load does: the vocabulary (texts, scores, types), the BPE merges, the
 * special token ids, the end-of-generation set, the piece cache (each token's bytes) and
 * the trie over the special tokens' texts that encoding matches them with. */
#include "engine/tokenizer/tokenizer.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer/tokenizer_impl.h"
#include "engine/tokenizer/unicode.h"

#define MAX_VOCAB (1 << 24)

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

/* pre-tokenizer names (tokenizer.ggml.pre) -> scanner and flags, as llama.cpp's
 * llm_tokenizer_bpe (src/llama-vocab.cpp) chooses its regexes */
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
 * (src/llama-vocab.cpp llama_vocab::impl::load). Token ids named by metadata were read
 * before. */
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
