/* test_parity_qwen35.c - the engine against llama.cpp on the Qwen3.5 fixtures, and the
 * engine's own prefix property (issue "Engine core", acceptance).
 *
 * For F32, F16 and Q8_0 weights: prompt tokens identical; last-position logits within
 * the tolerance of the weight type (1e-4, 0.05, 0.1) for the short prompt and the
 * 604-token long prompt; greedy tokens identical for F32 (short and long) and F16
 * (short). Then, for every weight type: the long prompt fed in one chunk, token by
 * token, split at K, or split at K with the state copied at K, gives logits within 1e-4
 * of each other - on every kernel path this CPU has. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels.h"
#include "engine/model.h"
#include "engine/state.h"
#include "engine/threadpool.h"
#include "tests/check.h"
#include "tests/oracle.h"

static int *encode(const model *m, const char *text, int *n) {
    int *ids = NULL;
    *n = tokenizer_encode(m->tok, text, strlen(text), 1, 1, &ids);
    return ids;
}

/* greedy continuation of n tokens after a prefill whose last logits are in lg */
static void greedy(const model *m, seq_state *s, float *lg, int n, int *out, arena *a) {
    for (int i = 0; i < n; i++) {
        int best = 0;
        for (int k = 1; k < m->n_vocab; k++)
            if (lg[k] > lg[best]) best = k;
        out[i] = best;
        batch_seq b = {s, &out[i], 1, 1, lg};
        if (i + 1 < n) model_forward(m, &b, 1, a);
    }
}

static void against_oracle(const char *name, float tol, int check_greedy_short, int check_greedy_long) {
    char path[256];
    snprintf(path, sizeof path, FIXTURES "%s.gguf", name);
    char err[256];
    model *m = model_load(path, err, sizeof err);
    REQUIRE(m, "%s", err);
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
        int *ids = encode(m, text, &n);
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
            printf("  %-20s short prompt: max |logit diff| %.3g (tolerance %g)\n", name, d, tol);
            CHECK(d <= tol, "%s: logits differ by %g", name, d);
            free(ref_lg);
        } else { /* the long results carry a summary of the logits: first 8, max, min */
            const cJSON *ll = cJSON_GetObjectItem(ref, "logits_last");
            float d = 0;
            for (int i = 0; i < 8; i++) {
                float r = (float)cJSON_GetArrayItem(cJSON_GetObjectItem(ll, "first8"), i)->valuedouble;
                d = fmaxf(d, fabsf(lg[i] - r));
            }
            float mx = lg[0], mn = lg[0];
            for (int i = 1; i < m->n_vocab; i++) mx = fmaxf(mx, lg[i]), mn = fminf(mn, lg[i]);
            d = fmaxf(d, fabsf(mx - (float)cJSON_GetObjectItem(ll, "max")->valuedouble));
            d = fmaxf(d, fabsf(mn - (float)cJSON_GetObjectItem(ll, "min")->valuedouble));
            printf("  %-20s long prompt (%d tokens): max |logit diff| %.3g\n", name, n, d);
            CHECK(d <= tol, "%s long: logits differ by %g", name, d);
        }
        if (pass ? check_greedy_long : check_greedy_short) {
            int gen[64];
            greedy(m, s, lg, n_gen_ref, gen, &a);
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

/* logits after the whole long prompt, computed in different ways */
static void prefix_property(const char *name) {
    char path[256], err[256];
    snprintf(path, sizeof path, FIXTURES "%s.gguf", name);
    model *m = model_load(path, err, sizeof err);
    REQUIRE(m, "%s", err);
    char *text = read_file(FIXTURES "long.txt", NULL);
    int n, *ids = encode(m, text, &n);
    arena a = {0};
    const int V = m->n_vocab;
    float *one = malloc(sizeof(float) * V), *lg = malloc(sizeof(float) * V);

    seq_state *s = state_new(m, 0);
    model_prefill(m, s, ids, n, n, one, &a); /* one chunk */
    state_reset(s);
    model_prefill(m, s, ids, n, 1, lg, &a); /* token by token */
    float d = max_abs_diff(one, lg, V);
    CHECK(d <= 1e-4f, "%s: token by token differs by %g", name, d);
    float worst = d;

    static const int splits[] = {1, 63, 64, 65, 300};
    for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++) {
        const int K = splits[i];
        state_reset(s);
        model_prefill(m, s, ids, K, 0, NULL, &a);
        seq_state *copy = state_clone(s); /* the state at K, as a checkpoint would hold it */
        model_prefill(m, s, ids + K, n - K, 0, lg, &a);
        d = max_abs_diff(one, lg, V);
        CHECK(d <= 1e-4f, "%s: split at %d differs by %g", name, K, d);
        worst = fmaxf(worst, d);
        /* continue the copy after the original moved on: the copy must not alias it */
        model_prefill(m, copy, ids + K, n - K, 0, lg, &a);
        d = max_abs_diff(one, lg, V);
        CHECK(d <= 1e-4f, "%s: copy at %d then continue differs by %g", name, K, d);
        worst = fmaxf(worst, d);
        state_free(copy);
    }
    printf("  %-20s prefix property on %s: worst |logit diff| %.3g over %d tokens\n", name, kernels_name(), worst,
           n);
    state_free(s);
    free(one);
    free(lg);
    free(ids);
    free(text);
    arena_free(&a);
    model_free(m);
}

int main(void) {
    pool_set_threads(2);
    against_oracle("qwen35-tiny-f32", 1e-4f, 1, 1);
    against_oracle("qwen35-tiny-f16", 0.05f, 1, 0);
    against_oracle("qwen35-tiny-q8_0", 0.1f, 0, 0);
    for (const char *const *isa = kernels_available(); *isa; isa++) {
        REQUIRE(kernels_select(*isa), "cannot select %s", *isa);
        prefix_property("qwen35-tiny-f32");
        prefix_property("qwen35-tiny-f16");
        prefix_property("qwen35-tiny-q8_0");
    }
    pool_shutdown();
    return check_report("test_parity_qwen35");
}
