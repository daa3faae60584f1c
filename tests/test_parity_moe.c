/* test_parity_moe.c - the mixture-of-experts hybrids against llama.cpp, and the engine's
 * prefix property on each (issue "MoE hybrids", acceptance).
 *
 * For the fixtures of qwen35moe (F32 and Q8_0), qwen3next, nemotron_h_moe (plain and
 * latent), granitehybrid with MoE FFN and lfm2moe: prompt tokens identical, last-position
 * logits within 1e-4 (F32) or 0.1 (Q8_0), greedy tokens identical, for the short prompt
 * (16 tokens) and the 604-token long prompt (32 tokens) - on every kernel path this CPU
 * has, and with one thread. Then the long prompt token by token, split at K in {1, 63, 64,
 * 65, 300}, continued from the state copied at K, gives the one-chunk logits within 1e-4
 * (each K alone too on the default path); three sequences batched in one pass give what
 * each gives alone.
 *
 * The experts' rows are grouped by expert whatever the batch, which must change no bit:
 * an MoE layer over 37 rows gives exactly what it gives each row alone, and every kernel
 * set (llama.cpp's order) gives exactly the scalar set's logits. */
#include "engine/base/threadpool.h"
#include "tests/parity.h"

static const struct {
    const char *name;
    float tol;
} fixtures[] = {
    {"qwen35moe-tiny-f32", 1e-4f},         {"qwen35moe-tiny-q8_0", 0.1f},
    {"qwen3next-tiny-f32", 1e-4f},         {"nemotron_h_moe-tiny-f32", 1e-4f},
    {"nemotron_h_moe-tiny-latent-f32", 1e-4f}, {"granitehybrid-tiny-moe-f32", 1e-4f},
    {"lfm2moe-tiny-f32", 1e-4f},
};
#define N_FIXTURES (int)(sizeof fixtures / sizeof fixtures[0])

/* every MoE layer of the model over R rows at once, and over each row alone: the same bits */
static void rows_alone(const char *name) {
    model *m = parity_load(name);
    const int E = m->n_embd, R = 37;
    arena a = {0};
    float *x = malloc(sizeof(float) * R * E), *all = malloc(sizeof(float) * R * E), *one = malloc(sizeof(float) * E);
    uint64_t s = 99;
    for (int i = 0; i < R * E; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((double)(s >> 40) / (double)(1ULL << 24) * 2.0 - 1.0);
    }
    int layers = 0, differ = 0;
    for (int li = 0; li < m->n_layer; li++) {
        const moe_layer *l = &m->blocks[li].moe;
        if (!l->n_expert) continue;
        layers++;
        moe_forward(l, R, E, x, all, &a);
        for (int r = 0; r < R; r++) {
            moe_forward(l, 1, E, x + (size_t)r * E, one, &a);
            differ += memcmp(one, all + (size_t)r * E, sizeof(float) * E) != 0;
        }
    }
    CHECK(layers > 0, "%s: no MoE layer", name);
    CHECK(differ == 0, "%s on %s: %d of %d rows differ from the same row alone", name, kernels_name(), differ,
          layers * R);
    free(x);
    free(all);
    free(one);
    arena_free(&a);
    model_free(m);
}

/* the logits of the long prompt's first 200 tokens (prompt and 32 decode steps) */
static float *long_logits(const model *m) {
    char *text = read_file(FIXTURES "long.txt", NULL);
    int n, *ids = parity_encode(m, text, &n);
    REQUIRE(n > 232, "long prompt too short");
    arena a = {0};
    float *lg = malloc(sizeof(float) * m->n_vocab * 33);
    seq_state *st = state_new(m, 0);
    model_prefill(m, st, ids, 200, 0, lg, &a);
    for (int i = 0; i < 32; i++) {
        batch_seq b = {.state = st, .tokens = ids + 200 + i, .n_tokens = 1, .logits = 1,
                       .out = lg + (size_t)(i + 1) * m->n_vocab};
        model_forward(m, &b, 1, &a);
    }
    state_free(st);
    arena_free(&a);
    free(ids);
    free(text);
    return lg;
}

/* every kernel set that sums in llama.cpp's order gives the scalar set's logits, bit for bit */
static void same_bits_everywhere(const char *name) {
    model *m = parity_load(name);
    REQUIRE(kernels_select("scalar"), "no scalar set");
    float *ref = long_logits(m);
    int sets = 0;
    for (const char *const *isa = kernels_available(); *isa; isa++) {
        if (!strcmp(*isa, "scalar")) continue;
        REQUIRE(kernels_select(*isa), "cannot select %s", *isa);
        if (kernels_blockint(GGML_Q8_0)) continue; /* the opt-in block-integer order */
        float *lg = long_logits(m);
        CHECK(!memcmp(lg, ref, sizeof(float) * m->n_vocab * 33), "%s: %s differs from the scalar set", name, *isa);
        free(lg);
        sets++;
    }
    printf("  %-30s %d kernel sets give the scalar set's logits bit for bit\n", name, sets);
    kernels_select("auto");
    free(ref);
    model_free(m);
}

int main(void) {
    pool_set_threads(2);
    for (const char *const *isa = kernels_available(); *isa; isa++) {
        REQUIRE(kernels_select(*isa), "cannot select %s", *isa);
        if (kernels_blockint(GGML_Q8_0)) continue; /* opt-in, not llama.cpp's rounding */
        const int first = isa == kernels_available();
        printf("  on %s:\n", *isa);
        for (int i = 0; i < N_FIXTURES; i++) {
            parity_oracle(fixtures[i].name, fixtures[i].tol, 1, 1);
            parity_prefix(fixtures[i].name, 1, first);
            rows_alone(fixtures[i].name);
        }
    }
    kernels_select("auto");
    printf("  with 1 thread:\n");
    pool_set_threads(1);
    for (int i = 0; i < N_FIXTURES; i++) parity_oracle(fixtures[i].name, fixtures[i].tol, 1, 1);
    pool_set_threads(2);
    for (int i = 0; i < N_FIXTURES; i++) parity_batch(fixtures[i].name);
    same_bits_everywhere("qwen35moe-tiny-f32");
    same_bits_everywhere("qwen35moe-tiny-q8_0");
    pool_shutdown();
    return check_report("test_parity_moe");
}
