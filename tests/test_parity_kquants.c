/* test_parity_kquants.c - K-quant weights (Q4_K, Q5_K, Q6_K) against llama.cpp.
 *
 * The fixtures qwen35-small-{q4_k,q5_k,q6_k}.gguf were written by `chatfs synth --shape
 * qwen3.5-small` and run through llama.cpp (release 0ad4a86, zen4 CPU backend, weights
 * not repacked, so its ggml_vec_dot_q*_K_q8_K x86 code runs - the order our reference
 * defines as canonical). For each: prompt tokens identical, last-position logits of the
 * short and the 604-token prompt within 1e-4 (they agree to the last bit on x86), greedy
 * continuation identical; and on every kernel path this CPU has, the same logits as the
 * scalar reference bit for bit, prefill in one chunk or token by token. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels/kernels.h"
#include "engine/arch/arch.h"
#include "engine/model/state.h"
#include "engine/base/threadpool.h"
#include "tests/check.h"
#include "tests/oracle.h"

static int *encode(const model *m, const char *text, int *n) {
    int *ids = NULL;
    *n = tokenizer_encode(m->tok, text, strlen(text), 1, 1, &ids);
    return ids;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static void one_type(const char *type) {
    char path[256], err[256];
    snprintf(path, sizeof path, FIXTURES "qwen35-small-%s.gguf", type);
    model *m = model_load(path, err, sizeof err);
    REQUIRE(m, "%s", err);
    const int V = m->n_vocab;
    arena a = {0};
    float *lg = malloc(sizeof(float) * V), *ref_isa = malloc(sizeof(float) * V);
    for (int pass = 0; pass < 2; pass++) {
        snprintf(path, sizeof path, FIXTURES "qwen35-small-%s%s.json", type, pass ? ".long" : "");
        cJSON *ref = read_json(path);
        REQUIRE(ref, "cannot read %s", path);
        int n_ref, n_gen, n;
        int *ref_tokens = json_ints(ref, "prompt_tokens", &n_ref), *ref_gen = json_ints(ref, "gen_tokens", &n_gen);
        char *text = pass ? read_file(FIXTURES "long.txt", NULL) : strdup("Hello world! The quick brown fox");
        int *ids = encode(m, text, &n);
        CHECK(n == n_ref && !memcmp(ids, ref_tokens, sizeof(int) * (size_t)n), "%s: prompt tokens differ", type);
        float d = 0;
        for (const char *const *isa = kernels_available(); *isa; isa++) {
            kernels_select(*isa);
            seq_state *s = state_new(m, 0);
            const int rc = model_prefill(m, s, ids, n, pass ? 1 : 0, lg, &a);
            REQUIRE(rc == 0, "prefill failed"); /* (REQUIRE evaluates its condition twice) */
            if (isa == kernels_available()) {
                memcpy(ref_isa, lg, sizeof(float) * V);
            } else {
                float e = max_abs_diff(lg, ref_isa, V);
                CHECK(e == 0, "%s on %s: logits differ from %s by %g", type, *isa, kernels_available()[0], e);
            }
            if (!strcmp(*isa, "scalar") || isa == kernels_available()) {
                if (!pass) {
                    snprintf(path, sizeof path, FIXTURES "qwen35-small-%s.last.f32", type);
                    size_t len;
                    float *rl = (float *)read_file(path, &len);
                    REQUIRE(rl && len == sizeof(float) * (size_t)V, "bad %s", path);
                    d = max_abs_diff(lg, rl, V);
                    free(rl);
                } else {
                    const cJSON *ll = cJSON_GetObjectItem(ref, "logits_last");
                    d = 0;
                    for (int i = 0; i < 8; i++)
                        d = fmaxf(d, fabsf(lg[i] - (float)cJSON_GetArrayItem(cJSON_GetObjectItem(ll, "first8"), i)->valuedouble));
                    float mx = lg[0], mn = lg[0];
                    for (int i = 1; i < V; i++) mx = fmaxf(mx, lg[i]), mn = fminf(mn, lg[i]);
                    d = fmaxf(d, fabsf(mx - (float)cJSON_GetObjectItem(ll, "max")->valuedouble));
                    d = fmaxf(d, fabsf(mn - (float)cJSON_GetObjectItem(ll, "min")->valuedouble));
                }
                CHECK(d <= 1e-4f, "%s%s on %s: logits differ from llama.cpp by %g", type, pass ? " (long)" : "", *isa, d);
                /* greedy continuation */
                int gen[16], k = 0;
                for (; k < n_gen && k < 16; k++) {
                    gen[k] = argmax(lg, V);
                    batch_seq b = {.state = s, .tokens = &gen[k], .n_tokens = 1, .logits = 1, .out = lg};
                    if (k + 1 < n_gen) model_forward(m, &b, 1, &a);
                }
                CHECK(!memcmp(gen, ref_gen, sizeof(int) * (size_t)k), "%s%s on %s: greedy tokens differ", type,
                      pass ? " (long)" : "", *isa);
            }
            state_free(s);
        }
        kernels_select("auto");
        printf("  qwen35-small-%-5s %s prompt (%d tokens): max |logit diff| vs llama.cpp %.3g, all kernel paths identical\n",
               type, pass ? "long" : "short", n, d);
        free(ids);
        free(text);
        free(ref_tokens);
        free(ref_gen);
        cJSON_Delete(ref);
    }
    free(lg);
    free(ref_isa);
    arena_free(&a);
    model_free(m);
}

int main(void) {
    pool_set_threads(2);
    one_type("q4_k");
    one_type("q5_k");
    one_type("q6_k");
    pool_shutdown();
    return check_report("test_parity_kquants");
}
