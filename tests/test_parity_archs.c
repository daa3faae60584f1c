/* test_parity_archs.c - every architecture besides Qwen3.5 against llama.cpp, and the
 * engine's prefix property on each (issue "Architectures", acceptance).
 *
 * For the F32 fixtures of nemotron_h, mamba2, mamba, granitehybrid, lfm2, qwen3, qwen2
 * and llama: prompt tokens identical, last-position logits within 1e-4 and greedy tokens
 * identical, for the short prompt (16 tokens) and the 604-token long prompt (32 tokens),
 * on every kernel path this CPU has. Then the long prompt split at K in {1, 63, 64, 65,
 * 300}, with and without the state copied at K, gives the one-chunk logits within 1e-4 -
 * on every kernel path too (token by token and each K alone too, on the default path). Several sequences at
 * different positions batched in one forward pass give what each gives alone. Finally the
 * pure-attention families can cut their state back (state_trim) and continue as if
 * split there; the recurrent ones refuse. Qwen2's q, k and v biases each matter (dropped
 * on purpose, the logits leave llama.cpp's), and a bias on the logits is added. */
#include "engine/base/threadpool.h"
#include "tests/parity.h"

static const char *const fixtures[] = {"nemotron_h-tiny-f32", "mamba2-tiny-f32", "mamba-tiny-f32",
                                       "granitehybrid-tiny-f32", "lfm2-tiny-f32", "qwen3-tiny-f32",
                                       "qwen2-tiny-f32",         "llama-tiny-f32"};
#define N_FIXTURES (int)(sizeof fixtures / sizeof fixtures[0])

/* prefill the long prompt, trim back to K, continue: same logits as one chunk */
static void trim_property(const char *name, int expect_trimmable) {
    model *m = parity_load(name);
    CHECK(m->trimmable == expect_trimmable, "%s: trimmable is %d", name, m->trimmable);
    char *text = read_file(FIXTURES "long.txt", NULL);
    int n, *ids = parity_encode(m, text, &n);
    arena a = {0};
    float *one = malloc(sizeof(float) * m->n_vocab), *lg = malloc(sizeof(float) * m->n_vocab);
    seq_state *s = state_new(m, 0);
    model_prefill(m, s, ids, n, 0, one, &a);
    const int K = 300;
    if (expect_trimmable) {
        CHECK(state_trim(s, K) == 0 && s->n_past == K, "%s: trim to %d failed", name, K);
        model_prefill(m, s, ids + K, n - K, 0, lg, &a);
        float d = max_abs_diff(one, lg, m->n_vocab);
        CHECK(d <= 1e-4f, "%s: trimmed to %d then continued differs by %g", name, K, d);
    } else {
        CHECK(state_trim(s, K) == -1 && s->n_past == n, "%s: a recurrent state was trimmed", name);
    }
    state_free(s);
    free(one);
    free(lg);
    free(ids);
    free(text);
    arena_free(&a);
    model_free(m);
}

/* Qwen2's biases, broken on purpose: without the q, the k or the v bias the short
 * prompt's logits leave llama.cpp's (the fixture's biases are large enough to show each);
 * a bias on the logits (output.bias, which llama.cpp adds when a file has one) is added
 * to every logit as it is. */
static void qwen2_biases(void) {
    model *m = parity_load("qwen2-tiny-f32");
    const int V = m->n_vocab;
    size_t len;
    float *ref = (float *)read_file(FIXTURES "qwen2-tiny-f32.last.f32", &len);
    REQUIRE(ref && len == sizeof(float) * (size_t)V, "bad qwen2-tiny-f32.last.f32");
    int n, *ids = parity_encode(m, "Hello world! The quick brown fox", &n);
    arena a = {0};
    float *lg = malloc(sizeof(float) * V), *base = malloc(sizeof(float) * V), *bias = malloc(sizeof(float) * V);
    static const char *const names[3] = {"q", "k", "v"};
    for (int which = 0; which < 3; which++) {
        const float *kept[64];
        REQUIRE(m->n_layer <= 64, "too many layers");
        for (int i = 0; i < m->n_layer; i++) {
            attn_layer *at = &m->blocks[i].attn;
            const float **b = which == 0 ? &at->bq : which == 1 ? &at->bk : &at->bv;
            CHECK(*b != NULL, "layer %d has no %s bias", i, names[which]);
            kept[i] = *b, *b = NULL;
        }
        seq_state *s = state_new(m, 0);
        model_prefill(m, s, ids, n, 0, lg, &a);
        const float d = max_abs_diff(lg, ref, V);
        printf("  qwen2-tiny-f32           without the %s bias: max |logit diff| %.3g\n", names[which], d);
        CHECK(d > 1e-2f, "dropping the %s bias changes the logits by only %g", names[which], d);
        state_free(s);
        for (int i = 0; i < m->n_layer; i++) {
            attn_layer *at = &m->blocks[i].attn;
            *(which == 0 ? &at->bq : which == 1 ? &at->bk : &at->bv) = kept[i];
        }
    }
    seq_state *s = state_new(m, 0);
    model_prefill(m, s, ids, n, 0, base, &a);
    for (int i = 0; i < V; i++) bias[i] = (float)((i * 37) % 101 - 50) / 16.0f;
    m->output_bias = bias;
    state_reset(s);
    model_prefill(m, s, ids, n, 0, lg, &a);
    int exact = 1;
    for (int i = 0; i < V; i++) exact &= lg[i] == base[i] + bias[i];
    CHECK(exact, "output.bias is not added to the logits");
    state_free(s);
    m->output_bias = NULL;
    free(lg);
    free(base);
    free(bias);
    free(ids);
    free(ref);
    arena_free(&a);
    model_free(m);
}

int main(void) {
    pool_set_threads(2);
    const char *const *isa = kernels_available();
    for (int k = 0; isa[k]; k++) {
        REQUIRE(kernels_select(isa[k]), "cannot select %s", isa[k]);
        printf("  kernels: %s\n", isa[k]);
        for (int i = 0; i < N_FIXTURES; i++) parity_oracle(fixtures[i], 1e-4f, 1, 1);
        for (int i = 0; i < N_FIXTURES; i++) parity_prefix(fixtures[i], k == 0, k == 0);
    }
    kernels_select("auto");
    for (int i = 0; i < N_FIXTURES; i++) parity_batch(fixtures[i]);
    qwen2_biases();
    parity_batch("qwen35-tiny-f32"); /* the batching in model.c is shared by every family */
    for (int i = 0; i < N_FIXTURES; i++)
        trim_property(fixtures[i], !strncmp(fixtures[i], "qwen3-", 6) || !strncmp(fixtures[i], "qwen2-", 6) ||
                                       !strncmp(fixtures[i], "llama-", 6));
    pool_shutdown();
    return check_report("test_parity_archs");
}
