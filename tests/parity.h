/* parity.h - the engine against llama.cpp's reference results (oracle.h), and the
 * engine's own prefix property, shared by the parity tests of every architecture.
 *
 * parity_oracle: prompt tokens identical; last-position logits within tol for the short
 * prompt (the full .last.f32) and the 604-token long prompt (the summary in .long.json:
 * first 8, max, min); optionally the greedy continuations (and the long argmax) identical.
 * parity_prefix: the long prompt fed in one chunk, split at K in {1, 63, 64, 65, 300},
 * or continued from a copy of the state taken at K (after the original moved on) gives
 * logits within 1e-4 of each other; optionally token by token and each K alone too.
 * parity_batch: three sequences at different positions in one forward pass give what
 * each gives alone. */
#ifndef CHATFS_TESTS_PARITY_H
#define CHATFS_TESTS_PARITY_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels/kernels.h"
#include "engine/arch/arch.h"
#include "engine/model/state.h"
#include "tests/check.h"
#include "tests/oracle.h"

static inline int *parity_encode(const model *m, const char *text, int *n) {
    int *ids = NULL;
    *n = tokenizer_encode(m->tok, text, strlen(text), 1, 1, &ids);
    return ids;
}

static inline model *parity_load(const char *name) {
    char path[256], err[256];
    snprintf(path, sizeof path, FIXTURES "%s.gguf", name);
    model *m = model_load(path, err, sizeof err);
    REQUIRE(m, "%s", err);
    return m;
}

/* greedy continuation of n tokens after a prefill whose last logits are in lg */
static inline void parity_greedy(const model *m, seq_state *s, float *lg, int n, int *out, arena *a) {
    for (int i = 0; i < n; i++) {
        int best = 0;
        for (int k = 1; k < m->n_vocab; k++)
            if (lg[k] > lg[best]) best = k;
        out[i] = best;
        batch_seq b = {.state = s, .tokens = &out[i], .n_tokens = 1, .logits = 1, .out = lg};
        if (i + 1 < n) model_forward(m, &b, 1, a);
    }
}

static inline void parity_oracle(const char *name, float tol, int check_greedy_short, int check_greedy_long) {
    char path[256];
    model *m = parity_load(name);
    arena a = {0};
    float *lg = malloc(sizeof(float) * (size_t)m->n_vocab);
    for (int pass = 0; pass < 2; pass++) {
        snprintf(path, sizeof path, FIXTURES "%s%s.json", name, pass ? ".long" : "");
        cJSON *ref = read_json(path);
        REQUIRE(ref, "cannot read %s", path);
        int n_ref, n_gen_ref, n;
        int *ref_tokens = json_ints(ref, "prompt_tokens", &n_ref);
        int *ref_gen = json_ints(ref, "gen_tokens", &n_gen_ref);
        char *text = pass ? read_file(FIXTURES "long.txt", NULL) : strdup("Hello world! The quick brown fox");
        int *ids = parity_encode(m, text, &n);
        CHECK(n == n_ref && !memcmp(ids, ref_tokens, sizeof(int) * (size_t)n), "%s%s: prompt tokens differ", name,
              pass ? " (long)" : "");
        seq_state *s = state_new(m, 0);
        CHECK(model_prefill(m, s, ids, n, 0, lg, &a) == 0, "prefill failed");
        if (!pass) {
            snprintf(path, sizeof path, FIXTURES "%s.last.f32", name);
            size_t len;
            float *ref_lg = (float *)read_file(path, &len);
            REQUIRE(ref_lg && len == sizeof(float) * (size_t)m->n_vocab, "bad %s", path);
            float d = max_abs_diff(lg, ref_lg, m->n_vocab);
            printf("  %-24s short prompt: max |logit diff| %.3g (tolerance %g)\n", name, d, tol);
            CHECK(d <= tol, "%s: logits differ by %g", name, d);
            free(ref_lg);
        } else { /* the long results carry a summary of the logits: first 8, argmax, max, min */
            const cJSON *ll = cJSON_GetObjectItem(ref, "logits_last");
            float d = 0;
            for (int i = 0; i < 8; i++) {
                float r = (float)cJSON_GetArrayItem(cJSON_GetObjectItem(ll, "first8"), i)->valuedouble;
                d = fmaxf(d, fabsf(lg[i] - r));
            }
            int am = 0;
            float mx = lg[0], mn = lg[0];
            for (int i = 1; i < m->n_vocab; i++) {
                if (lg[i] > lg[am]) am = i;
                mx = fmaxf(mx, lg[i]), mn = fminf(mn, lg[i]);
            }
            d = fmaxf(d, fabsf(mx - (float)cJSON_GetObjectItem(ll, "max")->valuedouble));
            d = fmaxf(d, fabsf(mn - (float)cJSON_GetObjectItem(ll, "min")->valuedouble));
            printf("  %-24s long prompt (%d tokens): max |logit diff| %.3g\n", name, n, d);
            CHECK(d <= tol, "%s long: logits differ by %g", name, d);
            if (check_greedy_long)
                CHECK(am == cJSON_GetObjectItem(ll, "argmax")->valueint, "%s long: argmax %d differs", name, am);
        }
        if (pass ? check_greedy_long : check_greedy_short) {
            int gen[64];
            REQUIRE(n_gen_ref <= 64, "too many reference tokens");
            parity_greedy(m, s, lg, n_gen_ref, gen, &a);
            CHECK(!memcmp(gen, ref_gen, sizeof(int) * (size_t)n_gen_ref), "%s%s: greedy tokens differ", name,
                  pass ? " (long)" : "");
        }
        state_free(s);
        free(ids);
        free(text);
        free(ref_tokens);
        free(ref_gen);
        cJSON_Delete(ref);
    }
    free(lg);
    arena_free(&a);
    model_free(m);
}

/* logits after the whole long prompt (its first n_max tokens when n_max > 0), computed
 * in different ways; returns the worst difference. One pass feeds the prompt in pieces
 * split at every K, cloning the state at each K (as a checkpoint would); then each clone
 * is continued from its K after the original has moved on (so a clone must not alias the
 * original or another clone). With each_split, every K also alone: [0, K) in one chunk
 * (chunks of exactly 63, 64, 65 tokens from the start), then [K, n) in one chunk; and the
 * state at K copied over a sequence that holds more (state_copy into a used state),
 * continued after the original has finished. Also: the whole prompt in one pass that
 * captures the recurrent state at K (batch_seq.capture) gives exactly the recurrent blob
 * of the clone at K. */
static inline float parity_prefix_model(const model *m, const char *name, int n_max, int token_by_token,
                                        int each_split) {
    char *text = read_file(FIXTURES "long.txt", NULL);
    int n, *ids = parity_encode(m, text, &n);
    if (n_max > 0 && n > n_max) n = n_max;
    arena a = {0};
    const int V = m->n_vocab;
    float *one = malloc(sizeof(float) * V), *lg = malloc(sizeof(float) * V);
    float d, worst = 0;

    enum { N_SPLITS = 5 };
    static const int splits[N_SPLITS] = {1, 63, 64, 65, 300};
    REQUIRE(n > splits[N_SPLITS - 1], "%s: a prompt of %d tokens is too short", name, n);
    seq_state *s = state_new(m, 0);
    model_prefill(m, s, ids, n, n, one, &a); /* one chunk */
    if (token_by_token) {
        state_reset(s);
        model_prefill(m, s, ids, n, 1, lg, &a);
        d = max_abs_diff(one, lg, V);
        CHECK(d <= 1e-4f, "%s: token by token differs by %g", name, d);
        worst = d;
    }

    seq_state *copy[N_SPLITS];
    state_reset(s);
    for (int i = 0, done = 0; i < N_SPLITS; i++) {
        model_prefill(m, s, ids + done, splits[i] - done, 0, NULL, &a);
        done = splits[i];
        copy[i] = state_clone(s);
        REQUIRE(copy[i], "state_clone failed");
    }
    model_prefill(m, s, ids + splits[N_SPLITS - 1], n - splits[N_SPLITS - 1], 0, lg, &a);
    d = max_abs_diff(one, lg, V);
    CHECK(d <= 1e-4f, "%s: split at 1, 63, 64, 65 and 300 differs by %g", name, d);
    worst = fmaxf(worst, d);
    float *captured = malloc(sizeof(float) * (m->rec_floats + 1));
    for (int i = 0; i < N_SPLITS; i++) {
        seq_state *whole = state_new(m, 0);
        REQUIRE(whole && captured, "out of memory");
        batch_seq b = {.state = whole, .tokens = ids, .n_tokens = n, .capture = splits[i], .n_capture = 1,
                       .capture_rec = &captured};
        CHECK(model_forward(m, &b, 1, &a) == 0, "%s: pass with a capture at %d failed", name, splits[i]);
        d = max_abs_diff(captured, copy[i]->rec, (int)m->rec_floats);
        CHECK(d == 0, "%s: the recurrent state captured at %d in one pass differs by %g", name, splits[i], d);
        state_free(whole);
    }
    free(captured);
    for (int i = 0; i < N_SPLITS; i++) {
        const int K = splits[i];
        model_prefill(m, copy[i], ids + K, n - K, 0, lg, &a);
        d = max_abs_diff(one, lg, V);
        CHECK(d <= 1e-4f, "%s: copy at %d then continue differs by %g", name, K, d);
        worst = fmaxf(worst, d);
        state_free(copy[i]);
    }
    if (each_split) {
        seq_state *other = state_new(m, 0);
        REQUIRE(other, "state_new failed");
        CHECK(model_prefill(m, other, ids, n, 0, NULL, &a) == 0, "%s: prefill failed", name);
        for (int i = 0; i < N_SPLITS; i++) {
            const int K = splits[i];
            state_reset(s);
            CHECK(model_prefill(m, s, ids, K, K, NULL, &a) == 0, "%s: prefill of %d failed", name, K);
            CHECK(other->n_past == n && state_copy(other, s) == 0 && other->n_past == K,
                  "%s: state_copy at %d failed", name, K);
            CHECK(model_prefill(m, s, ids + K, n - K, n - K, lg, &a) == 0, "%s: prefill after %d failed", name, K);
            d = max_abs_diff(one, lg, V);
            CHECK(d <= 1e-4f, "%s: split at %d alone differs by %g", name, K, d);
            worst = fmaxf(worst, d);
            CHECK(model_prefill(m, other, ids + K, n - K, n - K, lg, &a) == 0, "%s: prefill of the copy failed",
                  name);
            d = max_abs_diff(one, lg, V);
            CHECK(d <= 1e-4f, "%s: state copied at %d over a longer one differs by %g", name, K, d);
            worst = fmaxf(worst, d);
        }
        state_free(other);
    }
    printf("  %-24s prefix property on %s: worst |logit diff| %.3g over %d tokens%s\n", name, kernels_name(),
           worst, n, each_split ? ", each K alone too" : "");
    state_free(s);
    free(one);
    free(lg);
    free(ids);
    free(text);
    arena_free(&a);
    return worst;
}

static inline float parity_prefix(const char *name, int token_by_token, int each_split) {
    model *m = parity_load(name);
    const float worst = parity_prefix_model(m, name, 0, token_by_token, each_split);
    model_free(m);
    return worst;
}

/* Three sequences in one batch - A continues at 100 with 40 tokens, B starts with 30
 * tokens (logits for every row), C decodes one token at 10 - then one more token each:
 * the same logits as each sequence run alone. */
static inline void parity_batch(const char *name) {
    model *m = parity_load(name);
    char *text = read_file(FIXTURES "long.txt", NULL);
    int n, *ids = parity_encode(m, text, &n);
    REQUIRE(n >= 300, "long prompt too short");
    arena a = {0};
    const int V = m->n_vocab;
    static const int past[3] = {100, 0, 10}, len[3] = {40, 30, 1}, from[3] = {100, 200, 10}, mode[3] = {1, 2, 1};
    seq_state *alone[3], *batched[3];
    float *ref[3], *out[3];
    for (int i = 0; i < 3; i++) {
        ref[i] = malloc(sizeof(float) * V * len[i]);
        out[i] = malloc(sizeof(float) * V * len[i]);
        alone[i] = state_new(m, 0);
        model_prefill(m, alone[i], ids, past[i], 0, NULL, &a);
        batched[i] = state_clone(alone[i]);
        batch_seq b = {.state = alone[i], .tokens = ids + from[i], .n_tokens = len[i], .logits = mode[i],
                       .out = ref[i]};
        CHECK(model_forward(m, &b, 1, &a) == 0, "%s: forward failed", name);
    }
    batch_seq bs[3];
    for (int i = 0; i < 3; i++)
        bs[i] = (batch_seq){.state = batched[i], .tokens = ids + from[i], .n_tokens = len[i], .logits = mode[i],
                            .out = out[i]};
    CHECK(model_forward(m, bs, 3, &a) == 0, "%s: batched forward failed", name);
    float worst = 0;
    for (int i = 0; i < 3; i++) {
        worst = fmaxf(worst, max_abs_diff(ref[i], out[i], V * (mode[i] == 2 ? len[i] : 1)));
        CHECK(batched[i]->n_past == alone[i]->n_past, "%s: sequence %d at %d, not %d", name, i, batched[i]->n_past,
              alone[i]->n_past);
        /* the states moved on alike */
        const int next = ids[from[i] + len[i]];
        batch_seq b1 = {.state = alone[i], .tokens = &next, .n_tokens = 1, .logits = 1, .out = ref[i]};
        batch_seq b2 = {.state = batched[i], .tokens = &next, .n_tokens = 1, .logits = 1, .out = out[i]};
        model_forward(m, &b1, 1, &a);
        model_forward(m, &b2, 1, &a);
        worst = fmaxf(worst, max_abs_diff(ref[i], out[i], V));
        state_free(alone[i]);
        state_free(batched[i]);
        free(ref[i]);
        free(out[i]);
    }
    printf("  %-24s three sequences in one batch: worst |logit diff| %.3g\n", name, worst);
    CHECK(worst <= 1e-4f, "%s: batched sequences differ by %g", name, worst);
    free(ids);
    free(text);
    arena_free(&a);
    model_free(m);
}

#endif
