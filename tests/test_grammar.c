/* test_grammar.c - GBNF grammars (engine/grammar/grammar.h): llama.cpp's parser and
 * integration cases as data (tests/grammar/), bad grammars refused with their reasons, the
 * token mask against a token-by-token check, and constrained generation on tiny models
 * (every reply accepted, while unconstrained replies are not). Last, the mask time per
 * step on the default model's vocabulary. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/grammar/grammar.h"
#include "engine/runtime/chat.h"
#include "tests/check.h"
#include "tests/grammar_data.h"

#define TINY "tests/fixtures/qwen35-tiny-f32.gguf"
#define DEFAULT_MODEL "models/chatfs-default.gguf"

/* The matcher fed byte by byte must agree with the whole text at once. */
static int accepts_bytewise(const grammar *g, const char *s, size_t n) {
    grammar_matcher *m = grammar_matcher_new(g);
    int ok = 1;
    for (size_t i = 0; i < n && ok; i++) ok = grammar_matcher_accept(m, s + i, 1) == 0;
    ok = ok && grammar_matcher_can_end(m);
    grammar_matcher_free(m);
    return ok;
}

/* tests/grammar/integration.txt: llama.cpp's test_grammar cases */
static void integration_cases(void) {
    size_t n;
    char *text = slurp("tests/grammar/integration.txt", &n);
    REQUIRE(text, "tests/grammar/integration.txt is missing");
    int cases = 0, strings = 0;
    char *p = strstr(text, "\n== ");
    while (p) {
        char *desc = p + 4, *desc_end = strchr(desc, '\n');
        char *gram = desc_end + 1, *pass = strstr(gram, "\n-- pass\n"), *fail = strstr(gram, "\n-- fail\n");
        REQUIRE(pass && fail, "case without -- pass / -- fail");
        char *next = strstr(fail + 1, "\n== ");
        char *end = next ? next : text + n;
        *desc_end = 0;
        char err[256] = "";
        grammar *g = grammar_compile(gram, (size_t)(pass - gram), err, sizeof err);
        CHECK(g, "%s: %s", desc, err);
        cases++;
        for (int want = 1; g && want >= 0; want--) {
            char *line = (want ? pass + 9 : fail + 9), *stop = want ? fail : end;
            while (line < stop) {
                char *eol = memchr(line, '\n', (size_t)(stop - line));
                if (!eol) eol = stop;
                char buf[4096];
                size_t k = unescape(line, (size_t)(eol - line), buf);
                int got = grammar_accepts(g, buf, k);
                CHECK(got == want, "%s: \"%.*s\" %s", desc, (int)k, buf, want ? "rejected" : "accepted");
                CHECK(accepts_bytewise(g, buf, k) == want, "%s: \"%.*s\" bytewise differs", desc, (int)k, buf);
                strings++;
                line = eol + 1;
            }
        }
        grammar_free(g);
        p = next;
    }
    CHECK(cases >= 12 && strings >= 100, "%d cases, %d strings", cases, strings);
    free(text);
}

/* tests/grammar/parser.txt: grammars llama.cpp's parser takes and refuses */
static void parser_cases(void) {
    size_t n;
    char *text = slurp("tests/grammar/parser.txt", &n);
    REQUIRE(text, "tests/grammar/parser.txt is missing");
    int ok = 0, bad = 0;
    for (char *p = strstr(text, "\n== "); p;) {
        int want = !strncmp(p + 4, "ok\n", 3);
        char *gram = strchr(p + 4, '\n') + 1, *next = strstr(gram - 1, "\n== ");
        size_t len = next ? (size_t)(next - gram) : strlen(gram);
        char err[256] = "";
        grammar *g = grammar_compile(gram, len, err, sizeof err);
        CHECK((g != NULL) == want, "%.*s: %s", (int)len, gram, g ? "compiled" : err);
        if (!want) CHECK(!strncmp(err, "grammar: ", 9), "message \"%s\"", err);
        want ? ok++ : bad++;
        grammar_free(g);
        p = next;
    }
    CHECK(ok >= 16 && bad >= 12, "%d ok, %d bad", ok, bad);
    free(text);
}

/* Bad grammars: each refused with its reason (and the place, where there is one). */
static void refusals(void) {
    static const struct {
        const char *g, *msg;
    } bad[] = {
        {"", "the grammar is empty"},
        {"   # only a comment\n", "the grammar is empty"},
        {"root ::= \"abc", "line 1, column 10: unterminated string literal"},
        {"root ::= [a-z", "line 1, column 10: unterminated character class"},
        {"root ::= ( \"a\" | \"b\"\n", "expecting ')'"},
        {"root ::= x\n", "line 1, column 10: undefined rule 'x'"},
        {"root ::= \"a\"\nitem ::= \"b\" other\n", "line 2, column 14: undefined rule 'other'"},
        {"start ::= \"a\"\n", "no rule named 'root'"},
        {"root = \"a\"\n", "line 1, column 6: expecting '::='"},
        {"root ::= \"a\"\nroot ::= \"b\"\n", "line 2, column 1: rule 'root' is defined twice"},
        {"root ::= \"a\" | root \"a\"\n", "rule 'root' is left-recursive"},
        {"root ::= x\nx ::= y? x \"a\"\ny ::= \"b\"\n", "rule 'x' is left-recursive"},
        {"root ::= * \"a\"\n", "line 1, column 10: expecting an item before the repetition"},
        {"root ::= \"a\"{2,1}\n", "bounds out of order"},
        {"root ::= \"a\"{3\n", "expecting '}'"},
        {"root ::= \"\\q\"\n", "line 1, column 11: unknown escape"},
        {"root ::= [z-a]\n", "character range out of order"},
        {"root ::= \"a\" )\n", "line 1, column 14: unexpected ')'"},
        {"root ::= \"\\xZZ\"\n", "expecting 2 hex digits"},
        {"root ::= \"a\"{2001}\n", "a repetition of more than 2000"},
        {"root ::= \"x\" root\n", "the grammar admits no text"},
        {"root ::= a | b\na ::= \"(\" a \")\"\nb ::= [a-z] b\n", "the grammar admits no text"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char err[256] = "";
        grammar *g = grammar_compile(bad[i].g, strlen(bad[i].g), err, sizeof err);
        CHECK(!g && strstr(err, bad[i].msg), "\"%s\": got \"%s\", want \"%s\"", bad[i].g, g ? "(compiled)" : err,
              bad[i].msg);
        grammar_free(g);
    }
    /* and what is fine: comments, newlines inside groups and after |, empty alternatives */
    const char *fine = "# a list\nroot ::= item (\",\" item)* # items\nitem ::= (\n  \"x\" |\n  \"yz\" | ) \n\n";
    char err[256];
    grammar *g = grammar_compile(fine, strlen(fine), err, sizeof err);
    CHECK(g, "%s", err);
    if (g) {
        CHECK(grammar_accepts(g, "x,yz,,x", 7) == 1, "x,yz,,x");
        CHECK(grammar_accepts(g, "", 0) == 1, "the empty item");
        CHECK(grammar_accepts(g, "xy", 2) == 0, "xy");
    }
    grammar_free(g);
}

/* The mask over a small vocabulary (shared prefixes, UTF-8 split across tokens) equals
 * the token-by-token answer: the text so far plus the token's bytes is a prefix the
 * grammar takes (an end-of-generation token: the text so far is a whole sentence). */
static void mask_matches_brute_force(void) {
    static const char *toks[] = {"a", "b", "ab", "abc", "{", "}", "\"", ":", ",", "1", "12", "123", "\xce", "\xb1",
                                 "\xce\xb1", "\xce\xb2\xce", "\xb3!", "x", "\"a", "\":", "", "<eog>", "\xff", " "};
    const int n = (int)(sizeof toks / sizeof *toks);
    size_t lens[sizeof toks / sizeof *toks];
    unsigned char eog[sizeof toks / sizeof *toks] = {0};
    for (int i = 0; i < n; i++) lens[i] = strlen(toks[i]);
    eog[21] = 1;
    grammar_vocab *v = grammar_vocab_new(n, toks, lens, eog);
    REQUIRE(v, "vocabulary");
    static const struct {
        const char *g, *text;
    } cases[] = {
        {"root ::= \"{\" pair (\",\" pair)* \"}\"\npair ::= \"\\\"\" [a-c]+ \"\\\":\" [0-9]+", "{\"ab\":12,\"c\":1}"},
        {"root ::= [α-γ]+ \"!\"?", "\xce\xb1\xce\xb2\xce\xb3!"},
        {"root ::= (\"ab\" | \"a\" [^b]) \" \"* x\nx ::= \"1\"{1,3}", "ax 111"},
        {"root ::= .* \"}\"", "{\xce\xb1:}"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char err[256];
        grammar *g = grammar_compile(cases[c].g, strlen(cases[c].g), err, sizeof err);
        REQUIRE(g, "%s: %s", cases[c].g, err);
        grammar_matcher *m = grammar_matcher_new(g);
        const char *t = cases[c].text;
        for (size_t at = 0; at <= strlen(t); at++) {
            uint32_t bits[1]; /* 24 tokens: one word */
            int count = grammar_mask(m, v, bits);
            int brute = 0;
            for (int i = 0; i < n; i++) {
                char buf[64];
                memcpy(buf, t, at);
                memcpy(buf + at, toks[i], lens[i]);
                grammar_matcher *b = grammar_matcher_new(g);
                int ok = eog[i] ? grammar_matcher_accept(b, buf, at) == 0 && grammar_matcher_can_end(b)
                                : lens[i] > 0 && grammar_matcher_accept(b, buf, at + lens[i]) == 0;
                grammar_matcher_free(b);
                brute += ok;
                CHECK(ok == (int)(bits[i >> 5] >> (i & 31) & 1), "grammar %zu after %zu bytes: token %d \"%s\": brute %d",
                      c, at, i, toks[i], ok);
            }
            CHECK(count == brute, "grammar %zu after %zu bytes: %d allowed, brute %d", c, at, count, brute);
            /* twice: the second from the cache, the same */
            uint32_t again[1];
            CHECK(grammar_mask(m, v, again) == count && !memcmp(again, bits, sizeof bits), "cached mask differs");
            if (at < strlen(t)) REQUIRE(grammar_matcher_accept(m, t + at, 1) == 0, "case %zu byte %zu", c, at);
        }
        CHECK(grammar_matcher_can_end(m), "case %zu: the text is whole", c);
        CHECK(grammar_accept_token(m, v, 21) == 0, "the end where the grammar may end");
        grammar_matcher_free(m);
        grammar_free(g);
    }
    grammar_vocab_free(v);
}

typedef struct {
    char text[8192];
    size_t n;
} sink;

static void collect(void *ud, const char *t, size_t n) {
    sink *s = ud;
    if (s->n + n < sizeof s->text) memcpy(s->text + s->n, t, n), s->n += n;
}

/* Grammars whose sentences are bounded (every one ends within max_tokens: a token is at
 * least a byte), so that each reply must end where the grammar may. */
static const char *gen_grammars[] = {
    "root ::= [a-z]{1,8} (\",\" [a-z]{1,8}){0,3}",
    "root ::= \"{\" pair (\", \" pair){0,2} \"}\"\npair ::= \"\\\"\" [a-z]{1,6} \"\\\": \" ([0-9]{1,4} | \"true\" | \"null\")",
    "root ::= (\"yes\" | \"no\" | \"maybe\") \".\"",
    "root ::= num (\" \" [-+*/] \" \" num){1,3} \" = ?\"\nnum ::= [1-9] [0-9]{0,2}",
    "root ::= [α-ω]{2,6} \"!\"",
};
#define N_GRAMMARS (int)(sizeof gen_grammars / sizeof *gen_grammars)

/* At temperature 1 and several seeds on a tiny model with random weights: every reply
 * under a grammar ends with the end-of-generation token and is a sentence of it; without
 * the grammar the same requests give replies that are not (so the check can fail). */
static void generation(const char *path, int seeds, int thinking_budget) {
    engine_config cfg = {.model_path = path, .threads = 2, .n_ctx = 1024};
    char err[256];
    chat_engine *e = engine_open(&cfg, err, sizeof err);
    REQUIRE(e, "%s", err);
    chat_msg msg = {"user", "Write something.", NULL};
    int free_rejected = 0, runs = 0;
    for (int k = 0; k < N_GRAMMARS; k++) {
        grammar *g = grammar_compile(gen_grammars[k], strlen(gen_grammars[k]), err, sizeof err);
        REQUIRE(g, "%s", err);
        for (int seed = 1; seed <= seeds; seed++) {
            gen_settings s;
            engine_settings_defaults(e, &s);
            s.temperature = 1.0f, s.top_k = 0, s.top_p = 1.0f, s.min_p = 0.0f;
            s.seed = (uint64_t)seed;
            s.max_tokens = 96 + (thinking_budget > 0 ? thinking_budget + 8 : 0);
            s.thinking_budget = thinking_budget;
            s.checkpoints = 0;
            s.grammar = gen_grammars[k];
            sink out = {0};
            gen_report r;
            CHECK(engine_run(e, &msg, 1, &s, collect, &out, &r, err, sizeof err) == 0, "%s", err);
            CHECK(r.finish == FINISH_EOG, "%s grammar %d seed %d: finish %d", path, k, seed, r.finish);
            CHECK(grammar_accepts(g, out.text, out.n) == 1, "%s grammar %d seed %d: \"%.*s\" not accepted", path, k,
                  seed, (int)out.n, out.text);
            runs++;
            s.grammar = NULL;
            s.max_tokens = 24 + (thinking_budget > 0 ? thinking_budget + 8 : 0);
            sink free_out = {0};
            CHECK(engine_run(e, &msg, 1, &s, collect, &free_out, &r, err, sizeof err) == 0, "%s", err);
            free_rejected += grammar_accepts(g, free_out.text, free_out.n) == 0;
        }
        grammar_free(g);
    }
    CHECK(free_rejected > 0, "%s: every unconstrained reply happened to match its grammar", path);
    /* a grammar that does not compile is refused at the submit, with the reason */
    gen_settings s;
    engine_settings_defaults(e, &s);
    s.grammar = "root ::= [0-9]+ tail";
    errno = 0;
    CHECK(engine_submit(e, &msg, 1, &s, NULL, err, sizeof err) == 0 && errno == EINVAL &&
              strstr(err, "undefined rule 'tail'"),
          "bad grammar: errno %d, \"%s\"", errno, err);
    /* ignore_eog under a grammar that must end: nothing may follow "ok", so the request
     * fails with the reason instead of drawing a token outside the grammar */
    s.grammar = "root ::= \"ok\"";
    s.ignore_eog = 1;
    s.max_tokens = 16;
    sink out = {0};
    gen_report r;
    CHECK(engine_run(e, &msg, 1, &s, collect, &out, &r, err, sizeof err) != 0 && r.finish == FINISH_ERROR &&
              strstr(err, "the grammar allows no token here") && out.n == 2 && !memcmp(out.text, "ok", 2),
          "dead end: finish %d, \"%s\", reply \"%.*s\"", r.finish, err, (int)out.n, out.text);
    printf("  %s: %d constrained replies accepted, %d of %d free ones rejected\n", path, runs, free_rejected, runs);
    engine_close(e);
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* The mask time per step on the default model's vocabulary for a JSON-ish grammar: each
 * step a fresh matcher state (no cached mask), along a JSON text token by token. */
static void mask_time(void) {
    engine_config cfg = {.model_path = DEFAULT_MODEL, .threads = 1, .n_ctx = 256};
    char err[256];
    chat_engine *e = engine_open(&cfg, err, sizeof err);
    REQUIRE(e, "%s", err);
    const tokenizer *t = engine_model(e)->tok;
    double t0 = now_us();
    grammar_vocab *v = grammar_vocab_from_tokenizer(t);
    double t_vocab = now_us() - t0;
    REQUIRE(v, "vocabulary");
    const char *json =
        "root ::= ws value ws\n"
        "value ::= object | array | string | number | (\"true\" | \"false\" | \"null\")\n"
        "object ::= \"{\" ws ( string ws \":\" ws value (ws \",\" ws string ws \":\" ws value)* )? ws \"}\"\n"
        "array ::= \"[\" ws ( value (ws \",\" ws value)* )? ws \"]\"\n"
        "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\"\n"
        "number ::= \"-\"? ([0-9] | [1-9] [0-9]{0,15}) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})?\n"
        "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";
    t0 = now_us();
    grammar *g = grammar_compile(json, strlen(json), err, sizeof err);
    double t_compile = now_us() - t0;
    REQUIRE(g, "%s", err);
    const char *doc = "{\"name\": \"chatfs\", \"tags\": [\"fuse\", \"llm\"], \"size\": 1569, \"ok\": true, "
                      "\"nested\": {\"pi\": 3.14, \"list\": [1, 2, 3], \"s\": \"a \\\"quoted\\\" word\"}}";
    int *ids = NULL;
    int n = tokenizer_encode(t, doc, strlen(doc), 0, 0, &ids);
    REQUIRE(n > 0, "encode");
    uint32_t *bits = malloc(((size_t)grammar_vocab_size(v) + 31) / 32 * sizeof *bits);
    grammar_matcher *m = grammar_matcher_new(g);
    double total = 0, worst = 0;
    int allowed = 0;
    for (int i = 0; i < n; i++) {
        grammar_matcher *fresh = grammar_matcher_new(g); /* the same state, an empty cache */
        char buf[8192];
        size_t k = 0;
        for (int j = 0; j < i; j++) k += tokenizer_token_bytes(t, ids[j], 0, buf + k, sizeof buf - k);
        REQUIRE(grammar_matcher_accept(fresh, buf, k) == 0, "prefix of %d tokens", i);
        t0 = now_us();
        int c = grammar_mask(fresh, v, bits);
        double dt = now_us() - t0;
        total += dt, worst = dt > worst ? dt : worst;
        CHECK(c > 0 && (bits[ids[i] >> 5] >> (ids[i] & 31) & 1), "step %d: the document's next token is allowed", i);
        allowed += c;
        grammar_matcher_free(fresh);
        CHECK(grammar_accept_token(m, v, ids[i]) == 0, "token %d", i);
    }
    CHECK(grammar_matcher_can_end(m), "the document is whole");
    printf("  mask on %s's vocabulary (%d tokens), JSON grammar: %.1f us a step on average (worst %.1f), "
           "%d tokens allowed on average over %d steps; compile %.0f us, vocabulary trie %.0f us\n",
           DEFAULT_MODEL, grammar_vocab_size(v), total / n, worst, allowed / n, n, t_compile, t_vocab);
    grammar_matcher_free(m);
    free(bits);
    free(ids);
    grammar_free(g);
    grammar_vocab_free(v);
    engine_close(e);
}

int main(void) {
    integration_cases();
    parser_cases();
    refusals();
    mask_matches_brute_force();
    generation(TINY, 4, -1);
    generation(DEFAULT_MODEL, 2, 16);
    mask_time();
    return check_report("test_grammar");
}
