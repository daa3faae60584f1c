/* test_tokenizer.c - the tokenizer against llama.cpp's token ids and behaviour.
 *
 *  1. oracle: every tests/fixtures/<model>.gguf with a <model>.json / .long.json result
 *     encodes the result's prompt to exactly llama.cpp's prompt_tokens
 *  2. UTF-8 round trips (emoji, CJK, combining marks, newlines, tabs) and invalid input
 *  3. the streaming detokenizer never cuts a character and adds up to the full decode
 *  4. special tokens: ChatML markers with and without parse_special, EOG, rendering,
 *     USER_DEFINED tokens matched always, longest special first
 *  5. pre-tokenizer word boundaries for LLAMA3 / QWEN2 / QWEN35 / GPT2 / DEFAULT
 *  6. SentencePiece on a vocabulary built here: merge order by score, the '▁' prefix,
 *     <0xXX> byte fallback
 *  7. broken tokenizer metadata is an error line, not a crash
 *  8. speed: a 248k-token vocabulary with 247k merges loads fast, long prompts encode fast */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"
#include "tests/check.h"
#include "tests/gguf_build.h"

#define FIXTURES "tests/fixtures"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) {
        p[n] = 0;
        if (len) *len = (size_t)n;
    }
    return p;
}

/* ------------------------------------------------------------------ tiny JSON reading */

/* the string value of "key" (JSON escapes decoded), malloc'd; NULL if absent */
static char *json_string(const char *json, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": \"", key);
    const char *p = strstr(json, pat);
    if (!p) return NULL;
    p += strlen(pat);
    char *out = malloc(strlen(p) + 1);
    size_t k = 0;
    while (*p && *p != '"') {
        if (*p != '\\') {
            out[k++] = *p++;
            continue;
        }
        p++;
        char c = *p++;
        switch (c) {
        case 'n': out[k++] = '\n'; break;
        case 't': out[k++] = '\t'; break;
        case 'r': out[k++] = '\r'; break;
        case 'b': out[k++] = '\b'; break;
        case 'f': out[k++] = '\f'; break;
        case 'u': {
            unsigned cp = (unsigned)strtoul((char[]){p[0], p[1], p[2], p[3], 0}, NULL, 16);
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && p[0] == '\\' && p[1] == 'u') {
                unsigned lo = (unsigned)strtoul((char[]){p[2], p[3], p[4], p[5], 0}, NULL, 16);
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                p += 6;
            }
            k += utf8_encode(cp, (unsigned char *)out + k);
            break;
        }
        default: out[k++] = c; break;
        }
    }
    out[k] = 0;
    return out;
}

/* the integers of "key": [a, b, ...]; count in *n, malloc'd */
static int *json_ints(const char *json, const char *key, int *n) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": [", key);
    const char *p = strstr(json, pat);
    *n = 0;
    if (!p) return NULL;
    p += strlen(pat);
    int cap = 64, *v = malloc((size_t)cap * sizeof *v);
    while (*p && *p != ']') {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p) {
            p++;
            continue;
        }
        if (*n == cap) v = realloc(v, (size_t)(cap *= 2) * sizeof *v);
        v[(*n)++] = (int)x;
        p = end;
    }
    return v;
}

/* ------------------------------------------------------------------ helpers */

static tokenizer *load_file(const char *path, gguf_file **gf) {
    char err[256];
    *gf = gguf_open(path, err, sizeof err);
    if (!*gf) {
        fprintf(stderr, "%s: %s\n", path, err);
        return NULL;
    }
    tokenizer *t = tokenizer_load(*gf, err, sizeof err);
    if (!t) fprintf(stderr, "%s: %s\n", path, err);
    return t;
}

static int encode(const tokenizer *t, const char *s, int add_special, int parse_special, int **ids) {
    return tokenizer_encode(t, s, strlen(s), add_special, parse_special, ids);
}

static int ids_equal(const int *a, int na, const int *b, int nb) {
    return na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof *a) == 0);
}

static void print_ids(const char *what, const int *ids, int n) {
    fprintf(stderr, "  %s (%d):", what, n);
    for (int i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

/* UTF-8 of the GPT-2 character standing for byte b */
static void gpt2_char(int b, char *out) {
    int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    unsigned cp = (unsigned)b;
    if (!printable) {
        int n = 0;
        for (int c = 0; c < b; c++)
            if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF))) n++;
        cp = 256u + (unsigned)n;
    }
    size_t k = utf8_encode(cp, (unsigned char *)out);
    out[k] = 0;
}

/* A byte-level BPE vocabulary: 256 byte tokens, then extra tokens (type NORMAL unless
 * types says otherwise), with the given merges and pre-tokenizer. */
typedef struct {
    const char *pre;               /* NULL: no tokenizer.ggml.pre */
    const char *const *extra;      /* extra token texts (already GPT-2 encoded) */
    const int32_t *extra_types;    /* NULL: all NORMAL */
    int n_extra;
    const char *const *merges;
    int n_merges;
    int add_bos;                   /* -1: key absent */
} bpe_spec;

static tokenizer *build_bpe(const bpe_spec *sp, char *err, size_t errlen, gguf_build *b) {
    int n = 256 + sp->n_extra;
    char **texts = malloc((size_t)n * sizeof *texts);
    int32_t *types = malloc((size_t)n * sizeof *types);
    for (int i = 0; i < 256; i++) {
        texts[i] = malloc(4);
        gpt2_char(i, texts[i]);
        types[i] = TOK_NORMAL;
    }
    for (int i = 0; i < sp->n_extra; i++) {
        texts[256 + i] = strdup(sp->extra[i]);
        types[256 + i] = sp->extra_types ? sp->extra_types[i] : TOK_NORMAL;
    }
    gb_init(b);
    gb_str(b, "tokenizer.ggml.model", "gpt2");
    if (sp->pre) gb_str(b, "tokenizer.ggml.pre", sp->pre);
    gb_arr_str(b, "tokenizer.ggml.tokens", (const char *const *)texts, (size_t)n);
    gb_arr_i32(b, "tokenizer.ggml.token_type", types, (size_t)n);
    gb_arr_str(b, "tokenizer.ggml.merges", sp->merges, (size_t)sp->n_merges);
    if (sp->add_bos >= 0) gb_bool(b, "tokenizer.ggml.add_bos_token", sp->add_bos);
    gb_finish(b);
    for (int i = 0; i < n; i++) free(texts[i]);
    free(texts);
    free(types);
    gguf_file *f = gguf_open_buffer(b->p, b->n, "built.gguf", err, errlen);
    if (!f) return NULL;
    tokenizer *t = tokenizer_load(f, err, errlen);
    gguf_close(f); /* the tokenizer keeps its own copies */
    return t;
}

static tokenizer *simple_bpe(const char *pre) {
    char err[256];
    gguf_build b;
    bpe_spec sp = {pre, NULL, NULL, 0, NULL, 0, -1};
    tokenizer *t = build_bpe(&sp, err, sizeof err, &b);
    gb_free(&b);
    if (!t) fprintf(stderr, "build_bpe(%s): %s\n", pre ? pre : "(none)", err);
    return t;
}

/* ------------------------------------------------------------------ 1. oracle */

static void check_oracle_result(const tokenizer *t, const char *model, const char *json_path) {
    char *json = read_file(json_path, NULL);
    if (!json) return; /* no result of this kind for this model */
    char *prompt = json_string(json, "prompt_text");
    int n_want = 0, *want = json_ints(json, "prompt_tokens", &n_want);
    CHECK(prompt && want && n_want > 0, "%s: no prompt_text/prompt_tokens", json_path);
    if (prompt && want) {
        int *got;
        int n = encode(t, prompt, 1, 1, &got);
        int same = ids_equal(got, n, want, n_want);
        CHECK(same, "%s: tokens differ from llama.cpp for %s", model, json_path);
        if (!same) {
            print_ids("want", want, n_want);
            print_ids("got ", got, n);
        }
        /* and the tokens decode back to the prompt */
        char *back = tokenizer_decode(t, got, n, 1);
        CHECK(back && strcmp(back, prompt) == 0, "%s: decode of the prompt tokens differs", model);
        free(back);
        free(got);
    }
    free(prompt);
    free(want);
    free(json);
}

static void test_oracle(void) {
    DIR *d = opendir(FIXTURES);
    REQUIRE(d != NULL, "cannot open %s (run from the repository root)", FIXTURES);
    int models = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t L = strlen(e->d_name);
        if (L < 6 || strcmp(e->d_name + L - 5, ".gguf") != 0) continue;
        char base[256], path[512], json[512], json_long[512];
        snprintf(base, sizeof base, "%.*s", (int)(L - 5), e->d_name);
        snprintf(path, sizeof path, FIXTURES "/%s", e->d_name);
        snprintf(json, sizeof json, FIXTURES "/%s.json", base);
        snprintf(json_long, sizeof json_long, FIXTURES "/%s.long.json", base);
        FILE *probe = fopen(json, "rb");
        if (!probe) continue;
        fclose(probe);
        gguf_file *gf;
        tokenizer *t = load_file(path, &gf);
        CHECK(t != NULL, "%s: tokenizer does not load", path);
        if (t) {
            models++;
            check_oracle_result(t, base, json);
            check_oracle_result(t, base, json_long);
            tokenizer_free(t);
        }
        gguf_close(gf);
    }
    closedir(d);
    CHECK(models >= 2, "expected the qwen35 and llama tiny models in %s, found %d with results", FIXTURES, models);
}

/* ------------------------------------------------------------------ 2. round trips */

static const char *const roundtrip_texts[] = {
    "Hello \xf0\x9f\x91\x8b world \xf0\x9f\x8c\x8d\xf0\x9f\x8e\x89!",                    /* emoji */
    "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3\x83\x88\xe3\x80\x81"
    "\xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97\xe7\xac\xa6\xe3\x80\x82",                      /* CJK */
    "cafe\xcc\x81 na\xc3\xafve a\xcc\x88\xcc\x81 \xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5\x8d\xe0\xa4\xa4\xe0\xa5\x87", /* marks */
    "line one\nline two\r\n\ttabbed\t\tand  spaced   \n\n\nend  ",                        /* whitespace */
    "\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 family, \xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7",
    "I'm sure they'll say it's 2024-11-22: 3.14159 \xc2\xb1 0.001% (\xe2\x82\xac" "12,50)",
    "",
};

/* a deterministic pseudo-random valid UTF-8 string */
static char *random_utf8(unsigned seed, size_t n_cps) {
    static const uint32_t pool[] = {'a', 'Z', ' ', '\n', '\t', '7', '\'', '.', 0xE9, 0x301, 0x4E2D, 0x3042, 0x1F600,
                                    0x1F3FD, 0x200D, 0x0915, 0x094D, 0xA0, 0x3000, 0x10FFFD, 0xFFFD, 0x2028};
    char *s = malloc(n_cps * 4 + 1);
    size_t k = 0;
    for (size_t i = 0; i < n_cps; i++) {
        seed = seed * 1103515245u + 12345u;
        uint32_t cp = pool[(seed >> 16) % (sizeof pool / sizeof pool[0])];
        k += utf8_encode(cp, (unsigned char *)s + k);
    }
    s[k] = 0;
    return s;
}

static void roundtrip(const tokenizer *t, const char *name, const char *text) {
    int *ids;
    int n = encode(t, text, 0, 0, &ids);
    CHECK(n >= 0, "%s: encode failed", name);
    if (n < 0) return;
    char *back = tokenizer_decode(t, ids, n, 0);
    CHECK(back && strcmp(back, text) == 0, "%s: round trip of \"%s\" gave \"%s\"", name, text, back ? back : "(null)");
    free(back);
    free(ids);
}

static void test_roundtrip(void) {
    const char *models[] = {FIXTURES "/qwen35-tiny-f32.gguf", FIXTURES "/llama-tiny-f32.gguf"};
    for (int m = 0; m < 2; m++) {
        gguf_file *gf;
        tokenizer *t = load_file(models[m], &gf);
        CHECK(t != NULL, "%s does not load", models[m]);
        if (!t) {
            gguf_close(gf);
            continue;
        }
        for (size_t i = 0; i < sizeof roundtrip_texts / sizeof roundtrip_texts[0]; i++)
            roundtrip(t, models[m], roundtrip_texts[i]);
        for (unsigned seed = 1; seed <= 20; seed++) {
            char *s = random_utf8(seed, 300);
            roundtrip(t, models[m], s);
            free(s);
        }
        /* invalid UTF-8 is read as U+FFFD per bad byte, as llama.cpp does (a truncated
         * three-byte sequence is two replacement characters) */
        int *ids;
        int n = encode(t, "a\xff" "b\xe2\x82", 0, 0, &ids);
        char *back = tokenizer_decode(t, ids, n, 0);
        CHECK(back && strcmp(back, "a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd") == 0,
              "each invalid byte should become U+FFFD, got %s",
              back ? back : "(null)");
        free(back);
        free(ids);
        tokenizer_free(t);
        gguf_close(gf);
    }
}

/* utf8_repair: the reply text every caller stores (each stray byte and NUL one U+FFFD) */
static void test_utf8_repair(void) {
    static const struct {
        const char *in;
        size_t n;
        const char *want;
    } cases[] = {
        {"plain \xc3\xa9", 8, "plain \xc3\xa9"},
        {"a\xff" "b", 3, "a\xef\xbf\xbd" "b"},
        {"b\xe2\x82", 3, "b\xef\xbf\xbd\xef\xbf\xbd"},       /* cut short at the end */
        {"\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* a surrogate */
        {"x\0y", 3, "x\xef\xbf\xbdy"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t n = 0;
        char *got = utf8_repair(cases[i].in, cases[i].n, &n);
        CHECK(got && n == strlen(cases[i].want) && !memcmp(got, cases[i].want, n), "utf8_repair case %zu: got %s",
              i, got ? got : "(null)");
        CHECK(utf8_is_text(got, n), "utf8_repair case %zu: the result is not text", i);
        CHECK(utf8_is_text(cases[i].in, cases[i].n) == (i == 0), "utf8_is_text case %zu", i);
        free(got);
    }
}

/* ------------------------------------------------------------------ 3. streaming */

/* every chunk must be whole, valid UTF-8 characters */
static int whole_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        int r = utf8_check_char((const unsigned char *)s + i, n - i);
        if (r <= 0) return 0;
        i += (size_t)r;
    }
    return 1;
}

static void stream_check(const tokenizer *t, const char *name, const int *ids, int n, const char *want) {
    detok_stream s;
    detok_init(&s, 0);
    char chunk[4096], all[8192];
    size_t total = 0;
    int ok_chunks = 1, split_seen = 0;
    for (int i = 0; i < n; i++) {
        size_t k = detok_push(t, &s, ids[i], chunk, sizeof chunk);
        if (!whole_utf8(chunk, k)) ok_chunks = 0;
        if (s.n_pending > 0) split_seen = 1;
        memcpy(all + total, chunk, k);
        total += k;
    }
    size_t k = detok_flush(&s, chunk, sizeof chunk);
    memcpy(all + total, chunk, k);
    total += k;
    all[total] = 0;
    char *full = tokenizer_decode(t, ids, n, 0);
    CHECK(ok_chunks, "%s: a streamed chunk ended inside a character", name);
    CHECK(split_seen, "%s: the sequence should split characters across tokens", name);
    CHECK(full && strcmp(all, full) == 0, "%s: streamed text differs from the full decode", name);
    if (want) CHECK(strcmp(all, want) == 0, "%s: streamed text is not the original", name);
    free(full);
}

static void test_streaming(const tokenizer *spm) {
    const char *text = "\xf0\x9f\x91\x8b\xe4\xb8\xad\xe6\x96\x87 \xc3\xa9t\xc3\xa9 \xf0\x9f\x8c\x8d\xf0\x9f\x8e\x89";
    gguf_file *gf;
    tokenizer *t = load_file(FIXTURES "/qwen35-tiny-f32.gguf", &gf);
    REQUIRE(t != NULL, "qwen35 tiny does not load");
    int *ids;
    int n = encode(t, text, 0, 0, &ids);
    CHECK(n > 10, "byte-level tokens expected for emoji/CJK with the tiny vocab, got %d", n);
    stream_check(t, "bpe bytes", ids, n, text);
    free(ids);

    /* invalid sequences come out as U+FFFD, a truncated tail at flush as one U+FFFD */
    detok_stream s;
    detok_init(&s, 0);
    char out[256];
    int e2 = 0xE2, x82 = 0x82; /* byte tokens of the tiny vocab are in byte order? find by text */
    char ch[4];
    gpt2_char(e2, ch);
    int id_e2 = tokenizer_find(t, ch);
    gpt2_char(x82, ch);
    int id_82 = tokenizer_find(t, ch);
    int id_a = tokenizer_find(t, "A");
    CHECK(id_e2 >= 0 && id_82 >= 0 && id_a >= 0, "byte tokens not found");
    size_t k = detok_push(t, &s, id_e2, out, sizeof out);
    k += detok_push(t, &s, id_82, out + k, sizeof out - k);
    CHECK(k == 0 && s.n_pending == 2, "an incomplete character must wait (k=%zu pending=%d)", k, s.n_pending);
    k = detok_push(t, &s, id_a, out, sizeof out);
    CHECK(k == 4 && memcmp(out, "\xef\xbf\xbd" "A", 4) == 0, "a broken sequence must give U+FFFD then A");
    detok_push(t, &s, id_e2, out, sizeof out);
    k = detok_flush(&s, out, sizeof out);
    CHECK(k == 3 && memcmp(out, "\xef\xbf\xbd", 3) == 0 && s.n_pending == 0, "flush of a truncated tail");
    /* special tokens: hidden unless render_special */
    detok_init(&s, 0);
    CHECK(detok_push(t, &s, 511, out, sizeof out) == 0, "<|im_end|> must be hidden");
    detok_init(&s, 1);
    k = detok_push(t, &s, 511, out, sizeof out);
    CHECK(k == 10 && memcmp(out, "<|im_end|>", 10) == 0, "<|im_end|> rendered");
    tokenizer_free(t);
    gguf_close(gf);

    /* SentencePiece with <0xXX> byte fallback: every multi-byte character is split */
    if (spm) {
        const char *stext = "h\xc3\xa9llo \xf0\x9f\x91\x8b w\xe4\xb8\xad";
        n = encode(spm, stext, 0, 0, &ids);
        CHECK(n > 8, "spm byte fallback expected");
        stream_check(spm, "spm <0xXX>", ids, n, " h\xc3\xa9llo \xf0\x9f\x91\x8b w\xe4\xb8\xad");
        free(ids);
    }
}

/* ------------------------------------------------------------------ 4. special tokens */

static void test_specials(void) {
    gguf_file *gf;
    tokenizer *t = load_file(FIXTURES "/qwen35-tiny-f32.gguf", &gf);
    REQUIRE(t != NULL, "qwen35 tiny does not load");
    CHECK(tokenizer_find(t, "<|im_start|>") == 510 && tokenizer_find(t, "<|im_end|>") == 511, "ChatML ids");
    CHECK(tokenizer_token_type(t, 510) == TOK_CONTROL, "<|im_start|> is CONTROL");
    CHECK(tokenizer_is_eog(t, 511) && tokenizer_is_eog(t, 509) && !tokenizer_is_eog(t, 510) &&
              !tokenizer_is_eog(t, 390),
          "EOG set: <|im_end|> and <|endoftext|>, not <|im_start|>");
    CHECK(tokenizer_eos(t) == 511 && tokenizer_bos(t) == 509 && !tokenizer_add_bos(t), "bos/eos/add_bos from GGUF");
    CHECK(strcmp(tokenizer_model(t), "gpt2") == 0 && strcmp(tokenizer_pre(t), "qwen35") == 0, "model / pre names");

    const char *text = "<|im_start|>user\nhi<|im_end|>";
    int *ids, *mid;
    int n = encode(t, text, 1, 1, &ids);
    int nm = encode(t, "user\nhi", 0, 0, &mid);
    CHECK(n == nm + 2 && ids[0] == 510 && ids[n - 1] == 511 && ids_equal(ids + 1, n - 2, mid, nm),
          "parse_special must give 510 ... 511");
    char *r0 = tokenizer_decode(t, ids, n, 0), *r1 = tokenizer_decode(t, ids, n, 1);
    CHECK(strcmp(r0, "user\nhi") == 0 && strcmp(r1, text) == 0, "render_special off/on");
    free(r0);
    free(r1);
    free(ids);
    free(mid);

    n = encode(t, text, 1, 0, &ids);
    int has_special = 0;
    for (int i = 0; i < n; i++) has_special |= ids[i] >= 509;
    CHECK(!has_special && n > 10, "without parse_special the markers are plain bytes");
    char *back = tokenizer_decode(t, ids, n, 0);
    CHECK(strcmp(back, text) == 0, "plain-byte markers decode back to the text");
    free(back);
    free(ids);
    tokenizer_free(t);
    gguf_close(gf);

    /* a vocabulary with a USER_DEFINED <think>, a CONTROL <|c|>, and overlapping specials */
    const char *extra[] = {"<think>", "<|c|>", "xy", "yzw"};
    const int32_t types[] = {TOK_USER_DEFINED, TOK_CONTROL, TOK_CONTROL, TOK_CONTROL};
    bpe_spec sp = {"qwen2", extra, types, 4, NULL, 0, -1};
    char err[256];
    gguf_build b;
    t = build_bpe(&sp, err, sizeof err, &b);
    gb_free(&b);
    REQUIRE(t != NULL, "special vocab: %s", err);
    int think = tokenizer_find(t, "<think>"), ctl = tokenizer_find(t, "<|c|>");
    CHECK(think == 256 && ctl == 257, "special ids");
    n = encode(t, "a<think>b<|c|>", 0, 0, &ids);
    int saw_think = 0, saw_ctl = 0;
    for (int i = 0; i < n; i++) saw_think |= ids[i] == think, saw_ctl |= ids[i] == ctl;
    CHECK(saw_think && !saw_ctl, "USER_DEFINED is matched without parse_special, CONTROL is not");
    free(ids);
    n = encode(t, "a<think>b<|c|>", 0, 1, &ids);
    CHECK(n == 4 && ids[1] == think && ids[3] == ctl, "both with parse_special");
    char *u = tokenizer_decode(t, ids, n, 0);
    CHECK(strcmp(u, "a<think>b") == 0, "USER_DEFINED renders even without render_special, CONTROL does not");
    free(u);
    free(ids);
    /* "yzw" is longer than "xy", so in "xyzw" it is taken first and "x" stays text */
    n = encode(t, "xyzw", 0, 1, &ids);
    CHECK(n == 2 && ids[0] == 'x' && ids[1] == tokenizer_find(t, "yzw"), "longest special first (got %d ids)", n);
    free(ids);
    /* every occurrence, including adjacent ones */
    n = encode(t, "<|c|><|c|>q<|c|>", 0, 1, &ids);
    CHECK(n == 4 && ids[0] == ctl && ids[1] == ctl && ids[3] == ctl, "repeated specials");
    free(ids);
    tokenizer_free(t);
}

/* ------------------------------------------------------------------ 4b. encoding like a known text */

static unsigned like_seed = 2024;
static unsigned like_rand(unsigned n) {
    like_seed = like_seed * 1103515245u + 12345u;
    return (like_seed >> 8) % n;
}

/* a text of random pieces: chat markers, words, Unicode, a byte that is not UTF-8,
 * parts of specials and specials that overlap ("xy", "yzw" in the special vocabulary) */
static size_t like_text(char *buf, size_t cap) {
    static const char *const pieces[] = {
        "<|im_start|>", "<|im_end|>", "\n", "user", "assistant", " hello", " world", "  ", "\n\n", "<think>", "</think>",
        "x", "xy", "yzw", "xyzw", "<|c|>", "<|im_", "start|>", "h\xc3\xa9llo", " \xe6\x97\xa5\xe6\x9c\xac", "\xff", "42", ". ",
        "<|endoftext|>", "\t", "Point 3 about Kant: it follows from simple rules."};
    size_t n = 0;
    for (int k = 0, parts = 1 + (int)like_rand(40); k < parts; k++) {
        const char *p = pieces[like_rand(sizeof pieces / sizeof *pieces)];
        size_t len = strlen(p);
        if (n + len >= cap) break;
        memcpy(buf + n, p, len);
        n += len;
    }
    return n;
}

/* tokenizer_encode_like gives exactly tokenizer_encode's tokens: for texts that share a
 * beginning with the known one (a changed ending, a change in the middle, an insertion,
 * a special cut in two), for texts that share nothing, with every flag combination, on
 * the fixture vocabularies, one with overlapping specials, and SentencePiece (which
 * encodes from scratch) */
static void test_encode_like(const tokenizer *spm) {
    gguf_file *g1, *g2;
    tokenizer *qwen35 = load_file(FIXTURES "/qwen35-tiny-f32.gguf", &g1);
    tokenizer *trained = load_file("models/chatfs-default.gguf", &g2);
    const char *extra[] = {"<think>", "<|c|>", "xy", "yzw", "<|im_start|>", "<|im_end|>"};
    const int32_t types[] = {TOK_USER_DEFINED, TOK_CONTROL, TOK_CONTROL, TOK_CONTROL, TOK_CONTROL, TOK_CONTROL};
    bpe_spec sp = {"qwen2", extra, types, 6, NULL, 0, 1};
    char err[256];
    gguf_build b;
    tokenizer *overlap = build_bpe(&sp, err, sizeof err, &b);
    gb_free(&b);
    REQUIRE(qwen35 && trained && overlap, "vocabularies for encode_like");
    const tokenizer *toks[] = {qwen35, trained, overlap, spm};
    int cases = 0, same = 0;
    char known[2048], text[4096];
    for (int round = 0; round < 1500; round++) {
        const tokenizer *t = toks[round % 4];
        int add_special = like_rand(2), parse_special = like_rand(4) != 0;
        size_t kn = like_text(known, sizeof known), n = 0;
        switch (like_rand(5)) {
        case 0: /* the same text */
            memcpy(text, known, kn), n = kn;
            break;
        case 1: /* a new ending after a cut anywhere */
        case 2: {
            size_t cut = like_rand((unsigned)kn + 1);
            memcpy(text, known, cut);
            n = cut + like_text(text + cut, sizeof text - cut);
            break;
        }
        case 3: { /* one byte changed in the middle */
            memcpy(text, known, kn), n = kn;
            if (n) text[like_rand((unsigned)n)] = "a<|\n "[like_rand(5)];
            break;
        }
        default: /* nothing shared */
            n = like_text(text, sizeof text);
        }
        int *want, *known_ids, *got;
        int nw = tokenizer_encode(t, text, n, add_special, parse_special, &want);
        int nk = tokenizer_encode(t, known, kn, add_special, parse_special, &known_ids);
        int ng = tokenizer_encode_like(t, text, n, add_special, parse_special, known, kn, known_ids, nk, &got);
        cases++;
        int ok = nw >= 0 && ng == nw && ids_equal(got, ng, want, nw);
        same += ok;
        if (!ok && cases - same <= 3) {
            fprintf(stderr, "  encode_like differs (tokenizer %d, add_special %d, parse_special %d)\n", round % 4,
                    add_special, parse_special);
            print_ids("want", want, nw);
            print_ids("got", got, ng);
            fprintf(stderr, "  known [");
            for (size_t i = 0; i < kn; i++) fprintf(stderr, (unsigned char)known[i] < 32 || (unsigned char)known[i] > 126 ? "\\x%02x" : "%c", (unsigned char)known[i]);
            fprintf(stderr, "]\n  text  [");
            for (size_t i = 0; i < n; i++) fprintf(stderr, (unsigned char)text[i] < 32 || (unsigned char)text[i] > 126 ? "\\x%02x" : "%c", (unsigned char)text[i]);
            fprintf(stderr, "]\n");
            for (int i = 0; i < nw; i++) fprintf(stderr, "%d%s", want[i], i + 1 < nw ? " " : "\n");
            for (int i = 0; i < ng; i++) fprintf(stderr, "%d%s", got[i], i + 1 < ng ? " " : "\n");
        }
        free(want), free(known_ids), free(got);
    }
    CHECK(same == cases, "encode_like: %d of %d encodings as tokenizer_encode's", same, cases);
    int *ids;
    int n = tokenizer_encode_like(qwen35, "<|im_start|>user\nhi", 19, 0, 1, NULL, 0, NULL, 0, &ids), *plain;
    int np = tokenizer_encode(qwen35, "<|im_start|>user\nhi", 19, 0, 1, &plain);
    CHECK(n > 2 && ids[0] == 510 && ids_equal(ids, n, plain, np), "no known text: a plain encode (%d ids)", n);
    free(ids), free(plain);
    /* the shared fragments' tokens are taken as given, not encoded again: known ids that
     * spell the first fragment byte by byte come back so, the changed fragment is encoded */
    const char *k2 = "<|im_start|>user\nhello world<|im_end|>\n<|im_start|>user\nold", *t2 = "<|im_start|>user\nhello world<|im_end|>\n<|im_start|>user\nnew question";
    int *kids, nk = tokenizer_encode(trained, k2, strlen(k2), 1, 1, &kids), bytes[64], nb = 0;
    bytes[nb++] = kids[0]; /* <|im_start|> */
    for (const char *c = "user\nhello world"; *c; c++) {
        char one[2] = {*c, 0};
        int *id1;
        REQUIRE(tokenizer_encode(trained, one, 1, 0, 0, &id1) == 1, "a byte token");
        bytes[nb++] = *id1;
        free(id1);
    }
    int first_run = 1;
    while (first_run < nk && kids[first_run] != 1566) first_run++; /* up to <|im_end|> */
    CHECK(first_run < nk && first_run < nb, "the trained vocabulary merges 'user\\nhello world' (%d tokens)", first_run - 1);
    memcpy(bytes + nb, kids + first_run, sizeof *kids * (size_t)(nk - first_run));
    int *got2, *plain2, ng2 = tokenizer_encode_like(trained, t2, strlen(t2), 1, 1, k2, strlen(k2), bytes, nb + nk - first_run, &got2);
    int np2 = tokenizer_encode(trained, t2, strlen(t2), 1, 1, &plain2);
    int tail = np2 - (first_run), got_tail = ng2 - nb;
    CHECK(ng2 > nb && ids_equal(got2, nb, bytes, nb) && got_tail == tail && ids_equal(got2 + nb, got_tail, plain2 + first_run, tail),
          "known tokens reused as given, the rest encoded");
    free(kids), free(got2), free(plain2);
    tokenizer_free(qwen35), tokenizer_free(trained), tokenizer_free(overlap);
    gguf_close(g1), gguf_close(g2);
}

/* ------------------------------------------------------------------ 5. pre-tokenizer */

/* checks that t splits text into exactly the words listed (NULL-terminated) */
static void expect_split(const tokenizer *t, const char *pre, const char *text, const char *const *words) {
    size_t *ends;
    int n = tokenizer_pretokenize(t, text, strlen(text), &ends);
    int want = 0;
    while (words[want]) want++;
    int ok = n == want;
    size_t start = 0;
    for (int i = 0; ok && i < n; i++) {
        size_t len = ends[i] - start;
        if (len != strlen(words[i]) || memcmp(text + start, words[i], len) != 0) ok = 0;
        start = ends[i];
    }
    CHECK(ok, "%s split of \"%s\"", pre, text);
    if (!ok) {
        fprintf(stderr, "  got:");
        start = 0;
        for (int i = 0; i < n; i++) {
            fprintf(stderr, " [%.*s]", (int)(ends[i] - start), text + start);
            start = ends[i];
        }
        fprintf(stderr, "\n  want:");
        for (int i = 0; i < want; i++) fprintf(stderr, " [%s]", words[i]);
        fprintf(stderr, "\n");
    }
    free(ends);
}

#define W(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_pretokenizers(void) {
    tokenizer *l3 = simple_bpe("llama-bpe"), *q2 = simple_bpe("qwen2"), *q35 = simple_bpe("qwen35");
    tokenizer *g2 = simple_bpe("gpt-2"), *def = simple_bpe(NULL), *unk = simple_bpe("some-new-name");
    REQUIRE(l3 && q2 && q35 && g2 && def && unk, "pre-tokenizer vocabularies");
    tokenizer *family[] = {l3, q2, q35};
    const char *names[] = {"llama3", "qwen2", "qwen35"};
    for (int i = 0; i < 3; i++) {
        const tokenizer *t = family[i];
        const char *nm = names[i];
        expect_split(t, nm, "Hello world! The quick", W("Hello", " world", "!", " The", " quick"));
        expect_split(t, nm, "I'm sure they'LL go", W("I", "'m", " sure", " they", "'LL", " go"));
        expect_split(t, nm, "don't", W("don", "'t"));
        expect_split(t, nm, "a  b", W("a", " ", " b"));
        expect_split(t, nm, "a\n\nb", W("a", "\n\n", "b"));
        expect_split(t, nm, "x \n  y", W("x", " \n", " ", " y"));
        expect_split(t, nm, "end.  ", W("end", ".", "  "));
        expect_split(t, nm, "hi   ", W("hi", "   "));
        expect_split(t, nm, "   lead", W("  ", " lead"));
        expect_split(t, nm, "(x){y}", W("(x", "){", "y", "}"));
        expect_split(t, nm, "!!!\n\nok", W("!!!\n\n", "ok"));
        expect_split(t, nm, "\tfoo", W("\tfoo"));
        expect_split(t, nm, "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xd0\xbc\xd0\xb8\xd1\x80",
                     W("\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82", " \xd0\xbc\xd0\xb8\xd1\x80"));
        expect_split(t, nm, "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c\xe3\x80\x82",
                     W("\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c", "\xe3\x80\x82"));
        expect_split(t, nm, " \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd ok", W(" \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd", " ok"));
    }
    /* digits: runs of three for llama3, single digits for qwen */
    expect_split(l3, "llama3", "12345 x2024", W("123", "45", " x", "202", "4"));
    expect_split(q2, "qwen2", "12345", W("1", "2", "3", "4", "5"));
    expect_split(q35, "qwen35", "3.14", W("3", ".", "1", "4"));
    /* combining marks: QWEN35 keeps them with their letters, the others cut them off */
    expect_split(q2, "qwen2", "cafe\xcc\x81s", W("cafe", "\xcc\x81s"));
    expect_split(q35, "qwen35", "cafe\xcc\x81s", W("cafe\xcc\x81s"));
    expect_split(q2, "qwen2", "\xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5\x8d\xe0\xa4\xa4\xe0\xa5\x87",
                 W("\xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8", "\xe0\xa5\x8d\xe0\xa4\xa4", "\xe0\xa5\x87"));
    expect_split(q35, "qwen35", "\xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5\x8d\xe0\xa4\xa4\xe0\xa5\x87",
                 W("\xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5\x8d\xe0\xa4\xa4\xe0\xa5\x87"));
    /* GPT-2: case-sensitive contractions, ' ?\p{N}+', no line-break rule */
    expect_split(g2, "gpt2", "DON'T don't", W("DON", "'", "T", " don", "'t"));
    expect_split(g2, "gpt2", "in 2024!!", W("in", " 2024", "!!"));
    expect_split(g2, "gpt2", "a  b\n\nc", W("a", " ", " b", "\n", "\n", "c"));
    expect_split(g2, "gpt2", "x!\n", W("x", "!", "\n"));
    expect_split(unk, "unknown pre (gpt2)", "DON'T", W("DON", "'", "T"));
    /* DEFAULT: punctuation runs, then GPT-2, then numbers, then groups of three digits */
    expect_split(def, "default", "hello, world", W("hello", ",", " world"));
    expect_split(def, "default", "a1234567b", W("a", "123", "456", "7", "b"));
    expect_split(def, "default", "x+=y", W("x", "+=", "y"));
    tokenizer_free(l3);
    tokenizer_free(q2);
    tokenizer_free(q35);
    tokenizer_free(g2);
    tokenizer_free(def);
    tokenizer_free(unk);
}

/* BPE details: merge ranks, ignore_merges, a merged text that is not a token */
static void test_bpe_merges(void) {
    /* tokens "ab", "abc", "bc"; merges "a b" (0), "b c" (1), "ab c" (2) */
    const char *extra[] = {"ab", "bc", "abc"};
    const char *merges[] = {"a b", "b c", "ab c"};
    bpe_spec sp = {"qwen2", extra, NULL, 3, merges, 3, -1};
    char err[256];
    gguf_build b;
    tokenizer *t = build_bpe(&sp, err, sizeof err, &b);
    gb_free(&b);
    REQUIRE(t != NULL, "bpe vocab: %s", err);
    int *ids;
    int n = encode(t, "abc", 0, 0, &ids);
    CHECK(n == 1 && ids[0] == tokenizer_find(t, "abc"), "a b -> ab, ab c -> abc");
    free(ids);
    n = encode(t, "bcab", 0, 0, &ids); /* "a b" ranks before "b c": both merge, no crossing */
    CHECK(n == 2 && ids[0] == tokenizer_find(t, "bc") && ids[1] == tokenizer_find(t, "ab"), "rank order");
    free(ids);
    tokenizer_free(t);

    /* merges whose result is not a token fall back to one-byte tokens of the encoded text */
    const char *merges2[] = {"q r"};
    bpe_spec sp2 = {"qwen2", NULL, NULL, 0, merges2, 1, -1};
    t = build_bpe(&sp2, err, sizeof err, &b);
    gb_free(&b);
    REQUIRE(t != NULL, "bpe vocab 2: %s", err);
    n = encode(t, "qr", 0, 0, &ids);
    CHECK(n == 2 && ids[0] == 'q' && ids[1] == 'r', "an unknown merged symbol becomes its bytes");
    free(ids);
    tokenizer_free(t);

    /* ignore_merges (llama3): a word that is a token is taken whole even without merges */
    const char *extra3[] = {"\xc4\xa0hello"}; /* "Ġhello" */
    bpe_spec sp3 = {"llama3", extra3, NULL, 1, NULL, 0, 0};
    t = build_bpe(&sp3, err, sizeof err, &b);
    gb_free(&b);
    REQUIRE(t != NULL, "bpe vocab 3: %s", err);
    n = encode(t, " hello", 0, 0, &ids);
    CHECK(n == 1 && ids[0] == 256, "ignore_merges takes the whole word");
    free(ids);
    CHECK(!tokenizer_add_bos(t), "add_bos_token=false overrides the llama3 default");
    tokenizer_free(t);
}

/* ------------------------------------------------------------------ 6. SentencePiece */

#define SPM_N_BASE 259 /* <unk> <s> </s> and 256 byte tokens */

static tokenizer *build_spm(const char *const *pieces, const float *scores, int n, int add_space_prefix,
                            char *err, size_t errlen) {
    int total = SPM_N_BASE + n;
    char **texts = malloc((size_t)total * sizeof *texts);
    float *sc = malloc((size_t)total * sizeof *sc);
    int32_t *ty = malloc((size_t)total * sizeof *ty);
    texts[0] = strdup("<unk>"), ty[0] = TOK_UNKNOWN, sc[0] = 0;
    texts[1] = strdup("<s>"), ty[1] = TOK_CONTROL, sc[1] = 0;
    texts[2] = strdup("</s>"), ty[2] = TOK_CONTROL, sc[2] = 0;
    for (int i = 0; i < 256; i++) {
        texts[3 + i] = malloc(8);
        snprintf(texts[3 + i], 8, "<0x%02X>", i);
        ty[3 + i] = TOK_BYTE;
        sc[3 + i] = 0;
    }
    for (int i = 0; i < n; i++) {
        texts[SPM_N_BASE + i] = strdup(pieces[i]);
        ty[SPM_N_BASE + i] = TOK_NORMAL;
        sc[SPM_N_BASE + i] = scores[i];
    }
    gguf_build b;
    gb_init(&b);
    gb_str(&b, "tokenizer.ggml.model", "llama");
    gb_arr_str(&b, "tokenizer.ggml.tokens", (const char *const *)texts, (size_t)total);
    gb_arr_f32(&b, "tokenizer.ggml.scores", sc, (size_t)total);
    gb_arr_i32(&b, "tokenizer.ggml.token_type", ty, (size_t)total);
    gb_u32(&b, "tokenizer.ggml.bos_token_id", 1);
    gb_u32(&b, "tokenizer.ggml.eos_token_id", 2);
    gb_u32(&b, "tokenizer.ggml.unknown_token_id", 0);
    if (add_space_prefix >= 0) gb_bool(&b, "tokenizer.ggml.add_space_prefix", add_space_prefix);
    gb_finish(&b);
    for (int i = 0; i < total; i++) free(texts[i]);
    free(texts);
    free(sc);
    free(ty);
    gguf_file *f = gguf_open_buffer(b.p, b.n, "spm.gguf", err, errlen);
    tokenizer *t = f ? tokenizer_load(f, err, errlen) : NULL;
    gguf_close(f);
    gb_free(&b);
    return t;
}

#define SP "\xe2\x96\x81" /* '▁' */

static tokenizer *spm_main(void) {
    /* merges run by score: he/ll/or/ld first, then hell/orld, hello/world, ▁hello/▁world */
    static const char *const pieces[] = {SP, "h", "e", "l", "o", "w", "r", "d", "he", "ll", "hell", "hello",
                                         SP "hello", SP "h", "or", "ld", "orld", "world", SP "world",
                                         "a", "b", "c", "ab", "bc", "x", "y", "z", "xy", "yz", "t"};
    static const float scores[] = {-1, -2, -2, -2, -2, -2, -2, -2, -1, -1, -2, -3, -4, -9, -1, -1, -2, -3, -4,
                                   -2, -2, -2, -5, -4, -2, -2, -2, -3, -3, -2};
    _Static_assert(sizeof pieces / sizeof pieces[0] == sizeof scores / sizeof scores[0], "one score per piece");
    char err[256];
    tokenizer *t = build_spm(pieces, scores, (int)(sizeof pieces / sizeof pieces[0]), -1, err, sizeof err);
    if (!t) fprintf(stderr, "spm vocab: %s\n", err);
    return t;
}

static void test_spm(const tokenizer *t) {
    REQUIRE(t != NULL, "spm vocabulary");
    CHECK(strcmp(tokenizer_model(t), "llama") == 0 && tokenizer_add_bos(t) && tokenizer_bos(t) == 1,
          "SPM defaults: add_bos with <s>");
    int hello = tokenizer_find(t, SP "hello"), world = tokenizer_find(t, SP "world");
    int *ids;
    int n = encode(t, "hello world", 1, 0, &ids);
    CHECK(n == 3 && ids[0] == 1 && ids[1] == hello && ids[2] == world, "<s> ▁hello ▁world");
    char *s = tokenizer_decode(t, ids, n, 0);
    CHECK(strcmp(s, " hello world") == 0, "SPM decode turns ▁ into spaces (got \"%s\")", s);
    free(s);
    free(ids);
    /* merge order by score: "bc" (-4) beats "ab" (-5), so "abc" -> a bc */
    n = encode(t, "abc", 0, 0, &ids);
    CHECK(n == 3 && ids[0] == tokenizer_find(t, SP) && ids[1] == tokenizer_find(t, "a") &&
              ids[2] == tokenizer_find(t, "bc"),
          "abc -> ▁ a bc (%d ids)", n);
    free(ids);
    /* equal scores: the leftmost pair wins: "xyz" -> xy z */
    n = encode(t, "xyz", 0, 0, &ids);
    CHECK(n == 3 && ids[1] == tokenizer_find(t, "xy") && ids[2] == tokenizer_find(t, "z"), "tie -> leftmost");
    free(ids);
    /* byte fallback: é is not a piece -> <0xC3> <0xA9> */
    n = encode(t, "t\xc3\xa9", 0, 0, &ids);
    CHECK(n == 4 && ids[2] == 3 + 0xC3 && ids[3] == 3 + 0xA9, "byte fallback <0xC3><0xA9>");
    s = tokenizer_decode(t, ids, n, 0);
    CHECK(strcmp(s, " t\xc3\xa9") == 0, "byte tokens decode to bytes");
    free(s);
    free(ids);
    /* the space prefix comes back after a special token */
    n = encode(t, "hello</s>hello", 0, 1, &ids);
    CHECK(n == 3 && ids[0] == hello && ids[1] == 2 && ids[2] == hello, "▁ prefix after a special");
    free(ids);
    /* EOS is an end of generation */
    CHECK(tokenizer_is_eog(t, 2) && !tokenizer_is_eog(t, 1), "</s> is EOG");

    /* add_space_prefix = false */
    static const char *const pieces2[] = {"hello", SP "hello", "h", "e", "l", "o", "he", "ll", "hell"};
    static const float scores2[] = {-1, -1, -2, -2, -2, -2, -3, -3, -2};
    char err[256];
    tokenizer *t2 = build_spm(pieces2, scores2, 9, 0, err, sizeof err);
    REQUIRE(t2 != NULL, "spm 2: %s", err);
    n = encode(t2, "hello", 0, 0, &ids);
    CHECK(n == 1 && ids[0] == tokenizer_find(t2, "hello"), "no space prefix");
    free(ids);
    tokenizer_free(t2);
}

/* ------------------------------------------------------------------ 7. broken metadata */

typedef enum {
    BROKEN_NONE,
    BROKEN_NO_TOKENS,
    BROKEN_TYPES_SHORT,
    BROKEN_SCORES_LONG,
    BROKEN_EOS_RANGE,
    BROKEN_NO_MERGES,
    BROKEN_MODEL,
    BROKEN_TOKENS_NOT_STRINGS,
    BROKEN_ADD_BOS_TYPE,
    BROKEN_NO_MODEL,
} broken_kind;

static tokenizer *build_broken(broken_kind kind, char *err, size_t errlen) {
    const char *texts[] = {"a", "b", "", "ab", "a", "<|im_end|>"}; /* an empty and a duplicate text */
    const int32_t types[] = {1, 1, 1, 99, 1, 3};
    const float scores[] = {0, 0, 0, 0, 0, 0, 0};
    const char *merges[] = {"a b", "nospace", "x y", " ", "ab a"};
    gguf_build b;
    gb_init(&b);
    if (kind != BROKEN_NO_MODEL) gb_str(&b, "tokenizer.ggml.model", kind == BROKEN_MODEL ? "bert" : "gpt2");
    gb_str(&b, "tokenizer.ggml.pre", "qwen2");
    if (kind == BROKEN_TOKENS_NOT_STRINGS) gb_arr_i32(&b, "tokenizer.ggml.tokens", types, 6);
    else if (kind != BROKEN_NO_TOKENS) gb_arr_str(&b, "tokenizer.ggml.tokens", texts, 6);
    gb_arr_i32(&b, "tokenizer.ggml.token_type", types, kind == BROKEN_TYPES_SHORT ? 5 : 6);
    gb_arr_f32(&b, "tokenizer.ggml.scores", scores, kind == BROKEN_SCORES_LONG ? 7 : 6);
    if (kind != BROKEN_NO_MERGES) gb_arr_str(&b, "tokenizer.ggml.merges", merges, 5);
    gb_u32(&b, "tokenizer.ggml.eos_token_id", kind == BROKEN_EOS_RANGE ? 6 : 5);
    gb_u32(&b, "tokenizer.ggml.padding_token_id", 1000); /* out of range but harmless: ignored */
    if (kind == BROKEN_ADD_BOS_TYPE) gb_u32(&b, "tokenizer.ggml.add_bos_token", 1);
    gb_finish(&b);
    gguf_file *f = gguf_open_buffer(b.p, b.n, "broken.gguf", err, errlen);
    tokenizer *t = f ? tokenizer_load(f, err, errlen) : NULL;
    gguf_close(f);
    gb_free(&b);
    return t;
}

static void test_broken(void) {
    static const struct {
        broken_kind kind;
        const char *msg; /* part of the expected error */
    } cases[] = {
        {BROKEN_NO_TOKENS, "tokenizer.ggml.tokens"},  {BROKEN_TYPES_SHORT, "token_type"},
        {BROKEN_SCORES_LONG, "scores"},               {BROKEN_EOS_RANGE, "eos_token_id"},
        {BROKEN_NO_MERGES, "merges"},                 {BROKEN_MODEL, "bert"},
        {BROKEN_TOKENS_NOT_STRINGS, "not an array of strings"}, {BROKEN_ADD_BOS_TYPE, "add_bos_token"},
        {BROKEN_NO_MODEL, "tokenizer.ggml.model"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[256] = "";
        tokenizer *t = build_broken(cases[i].kind, err, sizeof err);
        CHECK(t == NULL && strstr(err, cases[i].msg) != NULL, "broken case %zu: want an error about '%s', got '%s'",
              i, cases[i].msg, err);
        tokenizer_free(t);
    }
    /* the odd-but-legal version loads, and nothing it does crashes */
    char err[256] = "";
    tokenizer *t = build_broken(BROKEN_NONE, err, sizeof err);
    REQUIRE(t != NULL, "tolerable metadata should load: %s", err);
    CHECK(strcmp(tokenizer_token_text(t, 2), "[EMPTY_2]") == 0, "empty token renamed like llama.cpp");
    CHECK(tokenizer_find(t, "a") == 4, "a duplicate text maps to its last id");
    CHECK(tokenizer_token_type(t, 3) == 0, "unknown token type -> undefined");
    CHECK(tokenizer_is_eog(t, 5) && tokenizer_eos(t) == 5, "eos");
    int *ids;
    int n = encode(t, "abba<|im_end|>\xff\xfe", 1, 1, &ids);
    CHECK(n >= 1, "encode on a strange vocabulary");
    char *s = tokenizer_decode(t, ids, n, 1);
    free(s);
    free(ids);
    int bad[] = {-7, 3, 99999, 5};
    s = tokenizer_decode(t, bad, 4, 1);
    CHECK(s && strcmp(s, "<|im_end|>") == 0, "out-of-range ids decode to nothing (got '%s')", s ? s : "");
    free(s);
    char buf[8];
    CHECK(tokenizer_token_bytes(t, 99999, 1, buf, sizeof buf) == 0 && tokenizer_token_type(t, -1) == 0 &&
              !tokenizer_is_eog(t, 12345),
          "accessors accept bad ids");
    tokenizer_free(t);
    /* random bytes: no crash, any result */
    gguf_file *gf;
    t = load_file(FIXTURES "/llama-tiny-f32.gguf", &gf);
    if (t) {
        unsigned seed = 7;
        char junk[512];
        for (int round = 0; round < 50; round++) {
            for (size_t i = 0; i < sizeof junk; i++) {
                seed = seed * 1103515245u + 12345u;
                junk[i] = (char)(seed >> 16);
            }
            n = tokenizer_encode(t, junk, sizeof junk, 1, round & 1, &ids);
            CHECK(n > 0, "random bytes encode");
            free(ids);
        }
        tokenizer_free(t);
    }
    gguf_close(gf);
}

/* ------------------------------------------------------------------ 8. speed */

typedef struct {
    char **s;
    size_t n, cap;
    uint32_t *slots; /* index + 1, 0 = empty */
    size_t nslots;
} strset;

static uint64_t fnv(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    while (*s) h = (h ^ (unsigned char)*s++) * 0x100000001b3ull;
    return h;
}

static int strset_add(strset *st, char *s) {
    size_t mask = st->nslots - 1;
    for (size_t i = fnv(s) & mask;; i = (i + 1) & mask) {
        if (!st->slots[i]) {
            st->slots[i] = (uint32_t)st->n + 1;
            st->s[st->n++] = s;
            return 1;
        }
        if (strcmp(st->s[st->slots[i] - 1], s) == 0) return 0;
    }
}

static void test_speed(void) {
    /* a Qwen3.5-sized vocabulary: 256 bytes + 247,800 merged tokens + a few specials */
    const size_t n_merged = 247800, n_total = 256 + n_merged + 3;
    strset st = {0};
    st.s = malloc(n_total * sizeof *st.s);
    st.nslots = 1u << 20;
    st.slots = calloc(st.nslots, sizeof *st.slots);
    char **merges = malloc(n_merged * sizeof *merges);
    for (int i = 0; i < 256; i++) {
        char *c = malloc(4);
        gpt2_char(i, c);
        strset_add(&st, c);
    }
    /* merge pairs of existing tokens, preferring recent and letter-ish ones, up to 16 bytes */
    unsigned seed = 12345;
    size_t nm = 0;
    while (nm < n_merged) {
        seed = seed * 1103515245u + 12345u;
        size_t a = (seed >> 8) % st.n;
        seed = seed * 1103515245u + 12345u;
        size_t bidx = (seed >> 8) % 160; /* right side: a space, letters or digits */
        size_t b = bidx < 26 ? (size_t)('a' + bidx) : bidx < 52 ? (size_t)('A' + bidx - 26)
                   : bidx < 62 ? (size_t)('0' + bidx - 52) : bidx < 70 ? (size_t)0x20 : (seed >> 4) % st.n;
        size_t la = strlen(st.s[a]), lb = strlen(st.s[b]);
        if (la + lb > 16) continue;
        char *m = malloc(la + lb + 1);
        memcpy(m, st.s[a], la);
        memcpy(m + la, st.s[b], lb + 1);
        if (!strset_add(&st, m)) {
            free(m);
            continue;
        }
        char *rule = malloc(la + lb + 2);
        memcpy(rule, st.s[a], la);
        rule[la] = ' ';
        memcpy(rule + la + 1, st.s[b], lb + 1);
        merges[nm++] = rule;
    }
    st.s[st.n++] = strdup("<|endoftext|>");
    st.s[st.n++] = strdup("<|im_start|>");
    st.s[st.n++] = strdup("<|im_end|>");
    int32_t *types = malloc(st.n * sizeof *types);
    for (size_t i = 0; i < st.n; i++) types[i] = i + 3 >= st.n ? TOK_CONTROL : TOK_NORMAL;
    gguf_build b;
    gb_init(&b);
    gb_str(&b, "tokenizer.ggml.model", "gpt2");
    gb_str(&b, "tokenizer.ggml.pre", "qwen35");
    gb_arr_str(&b, "tokenizer.ggml.tokens", (const char *const *)st.s, st.n);
    gb_arr_i32(&b, "tokenizer.ggml.token_type", types, st.n);
    gb_arr_str(&b, "tokenizer.ggml.merges", (const char *const *)merges, nm);
    gb_finish(&b);
    for (size_t i = 0; i < st.n; i++) free(st.s[i]);
    for (size_t i = 0; i < nm; i++) free(merges[i]);
    free(st.s);
    free(st.slots);
    free(merges);
    free(types);

    char err[256];
    gguf_file *f = gguf_open_buffer(b.p, b.n, "big.gguf", err, sizeof err);
    REQUIRE(f != NULL, "big vocab gguf: %s", err);
    double t0 = now();
    tokenizer *t = tokenizer_load(f, err, sizeof err);
    double load_s = now() - t0;
    gguf_close(f);
    gb_free(&b);
    REQUIRE(t != NULL, "big vocab: %s", err);
    CHECK(tokenizer_n_vocab(t) == (int)(256 + n_merged + 3), "big vocab size %d", tokenizer_n_vocab(t));

    /* a long prompt: long.txt five times inside ChatML */
    size_t ll;
    char *longtxt = read_file(FIXTURES "/long.txt", &ll);
    REQUIRE(longtxt != NULL, "long.txt");
    size_t cap = ll * 5 + 256, k = 0;
    char *prompt = malloc(cap);
    k += (size_t)sprintf(prompt + k, "<|im_start|>user\n");
    for (int i = 0; i < 5; i++) memcpy(prompt + k, longtxt, ll), k += ll;
    k += (size_t)sprintf(prompt + k, "<|im_end|>\n<|im_start|>assistant\n");
    int *ids, n = 0;
    double best = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        t0 = now();
        n = tokenizer_encode(t, prompt, k, 1, 1, &ids);
        double dt = now() - t0;
        if (dt < best) best = dt;
        char *back = tokenizer_decode(t, ids, n, 1);
        CHECK(back && strlen(back) == k && memcmp(back, prompt, k) == 0, "big vocab round trip");
        free(back);
        free(ids);
    }
    printf("  tokenizer speed: load of %d tokens / %zu merges %.0f ms; encode of %zu bytes -> %d tokens %.2f ms\n",
           tokenizer_n_vocab(t), nm, load_s * 1e3, k, n, best * 1e3);
    /* generous bounds: they must hold under the sanitizers too */
    CHECK(load_s < 2.0, "loading a 248k vocabulary took %.2f s", load_s);
    CHECK(best < 0.1, "encoding %d tokens took %.1f ms", n, best * 1e3);

    /* the tiny vocabulary (byte-level heavy) on the same prompt */
    gguf_file *gf;
    tokenizer *tiny = load_file(FIXTURES "/qwen35-tiny-f32.gguf", &gf);
    if (tiny) {
        t0 = now();
        n = tokenizer_encode(tiny, prompt, k, 1, 1, &ids);
        double dt = now() - t0;
        printf("  tiny vocab: %d tokens in %.2f ms\n", n, dt * 1e3);
        CHECK(n > 2900 && dt < 0.1, "tiny vocab encode of %d tokens took %.1f ms", n, dt * 1e3);
        free(ids);
        tokenizer_free(tiny);
    }
    gguf_close(gf);
    free(prompt);
    free(longtxt);
    tokenizer_free(t);
}

int main(void) {
    test_oracle();
    test_roundtrip();
    tokenizer *spm = spm_main();
    test_streaming(spm);
    test_specials();
    test_encode_like(spm);
    test_pretokenizers();
    test_bpe_merges();
    test_spm(spm);
    tokenizer_free(spm);
    test_broken();
    test_utf8_repair();
    test_speed();
    return check_report("test_tokenizer");
}
