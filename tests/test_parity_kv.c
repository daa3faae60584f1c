/* test_parity_kv.c - attention caches in every type llama.cpp offers (-ctk/-ctv), against
 * llama.cpp with the same cache type (tests/fixtures/kv/, made by its make.sh).
 *
 * For each fixture architecture with attention and each type its heads allow: the last
 * logits of the short and the 604-token prompt within the type's tolerance of llama.cpp's,
 * on every kernel path (tolerances below). F16 and BF16 are compared with llama.cpp without flash attention
 * (the same roundings: the query and the attention weights rounded to the cache type);
 * Q8_0 and Q4_0 with flash attention, the only way llama.cpp keeps a quantized V cache.
 * The references move from llama.cpp's F32 results by far more than the tolerances, so
 * an engine that ignored the type would fail. Then, at F16: the prefix property (a prompt
 * in pieces, and states copied at the splits, give the one-chunk logits); the cache's size
 * per token; the fingerprint, which tells the types apart (and is unchanged at F32); and
 * the refusals: heads that are not whole blocks of a quantized type, an unknown name. */
#include <math.h>

#include "engine/base/threadpool.h"
#include "engine/runtime/chat.h"
#include "engine/runtime/prefix_cache.h"
#include "tests/parity.h"

typedef struct {
    const char *model;
    const char *types[4]; /* the ones its head dimension allows */
} kv_case;

static const kv_case cases[] = {
    {"qwen35-tiny-f32", {"f16", "bf16", "q8_0", "q4_0"}},
    {"qwen35moe-tiny-f32", {"f16", "bf16", "q8_0", "q4_0"}},
    {"qwen3next-tiny-f32", {"f16", "bf16", "q8_0", "q4_0"}},
    {"qwen3-tiny-f32", {"f16", "bf16", "q8_0", "q4_0"}},
    {"nemotron_h-tiny-f32", {"f16", "bf16"}},
    {"nemotron_h_moe-tiny-f32", {"f16", "bf16"}},
    {"granitehybrid-tiny-f32", {"f16", "bf16"}},
    {"granitehybrid-tiny-moe-f32", {"f16", "bf16"}},
    {"lfm2-tiny-f32", {"f16", "bf16"}},
    {"lfm2moe-tiny-f32", {"f16", "bf16"}},
    {"qwen2-tiny-f32", {"f16", "bf16"}},
    {"llama-tiny-f32", {"f16", "bf16"}},
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

/* The largest difference from llama.cpp at that type we accept. The roundings are
 * llama.cpp's; the order of the sums is for F16 too (the scores as tinyBLAS sums them, the
 * weighted sum of V as its 16 lanes; worst 3e-4, most below 1e-5). For BF16 llama.cpp's
 * AVX-512 build sums pairs of products in one instruction (vdpbf16ps), which we do not
 * copy (worst 6e-3); for Q8_0 and Q4_0 its flash attention sums with an online softmax
 * (worst 4e-4). Against llama.cpp's own F32 results each type moves 20-1000 times more. */
static float tolerance(const char *type) {
    return !strcmp(type, "f16") ? 5e-4f : !strcmp(type, "bf16") ? 1e-2f : 1e-3f;
}

static float *read_logits(const char *path, int n_vocab) {
    size_t len;
    float *lg = (float *)read_file(path, &len);
    REQUIRE(lg && len == sizeof(float) * (size_t)n_vocab, "bad %s", path);
    return lg;
}

static model *load_with(const char *name, const char *type) {
    model *m = parity_load(name);
    char err[256];
    REQUIRE(engine_set_cache_types(m, type, type, err, sizeof err) == 0, "%s at %s: %s", name, type, err);
    return m;
}

/* worst moves of llama.cpp's own results from F32, per type: each must exceed its tolerance */
static float moved[4];

static void oracle_at(const char *name, const char *type, int ti) {
    model *m = load_with(name, type);
    arena a = {0};
    float *lg = malloc(sizeof(float) * (size_t)m->n_vocab);
    for (int pass = 0; pass < 2; pass++) {
        char *text = pass ? read_file(FIXTURES "long.txt", NULL) : strdup("Hello world! The quick brown fox");
        int n, *ids = parity_encode(m, text, &n);
        seq_state *s = state_new(m, 0);
        REQUIRE(s && model_prefill(m, s, ids, n, 0, lg, &a) == 0, "%s: prefill failed", name);
        char path[256];
        snprintf(path, sizeof path, FIXTURES "kv/%s.%s.%s.f32", name, type, pass ? "long" : "last");
        float *ref = read_logits(path, m->n_vocab);
        const float d = max_abs_diff(lg, ref, m->n_vocab);
        if (!pass) { /* llama.cpp's F32 result of the short prompt */
            snprintf(path, sizeof path, FIXTURES "%s.last.f32", name);
            float *f32 = read_logits(path, m->n_vocab);
            const float mv = max_abs_diff(ref, f32, m->n_vocab);
            if (mv > moved[ti]) moved[ti] = mv;
            free(f32);
        }
        printf("  %-26s %-4s %s prompt: max |logit diff| %.3g (tolerance %g)\n", name, type, pass ? "long " : "short", d,
               tolerance(type));
        CHECK(d <= tolerance(type), "%s at %s, %s prompt: logits differ by %g", name, type, pass ? "long" : "short", d);
        free(ref);
        state_free(s);
        free(ids);
        free(text);
    }
    free(lg);
    arena_free(&a);
    model_free(m);
}

static void sizes_and_fingerprints(void) {
    model *m = parity_load("qwen35-tiny-f32");
    uint8_t f32[FINGERPRINT_BYTES], f16[FINGERPRINT_BYTES], mixed[FINGERPRINT_BYTES], again[FINGERPRINT_BYTES];
    char err[256];
    model_fingerprint(m, f32);
    const size_t row32 = state_kv_bytes_per_token(m);
    REQUIRE(engine_set_cache_types(m, "f16", "f16", err, sizeof err) == 0, "%s", err);
    model_fingerprint(m, f16);
    CHECK(state_kv_bytes_per_token(m) * 2 == row32, "an F16 cache row is %zu bytes, F32 %zu", state_kv_bytes_per_token(m),
          row32);
    REQUIRE(engine_set_cache_types(m, "q8_0", "f16", err, sizeof err) == 0, "%s", err);
    model_fingerprint(m, mixed);
    CHECK(state_kv_bytes_per_token(m) == row32 / 4 + row32 / 8 * 34 / 32, /* F16 V; 32 values in 34 bytes */
          "a Q8_0 K + F16 V row is %zu bytes", state_kv_bytes_per_token(m));
    REQUIRE(engine_set_cache_types(m, "f32", "f32", err, sizeof err) == 0, "%s", err);
    model_fingerprint(m, again);
    CHECK(memcmp(f32, f16, sizeof f32) && memcmp(f16, mixed, sizeof f16) && memcmp(f32, mixed, sizeof f32),
          "fingerprints do not tell the cache types apart");
    CHECK(!memcmp(f32, again, sizeof f32), "the F32 fingerprint changed");
    model_free(m);
}

static void refusals(void) {
    model *m = parity_load("llama-tiny-f32"); /* heads of 16 */
    char err[256] = "";
    CHECK(engine_set_cache_types(m, "q8_0", "f16", err, sizeof err) == -1 && strstr(err, "16"),
          "a q8_0 cache over heads of 16 was taken (%s)", err);
    CHECK(m->kv_k == KV_F32 && m->kv_v == KV_F32, "a refused type was kept");
    CHECK(engine_set_cache_types(m, "f8", NULL, err, sizeof err) == -1 && strstr(err, "f32, f16, bf16, q8_0, q4_0"),
          "an unknown type: %s", err);
    CHECK(engine_set_cache_types(m, NULL, NULL, err, sizeof err) == 0 && m->kv_k == KV_F16 && m->kv_v == KV_F16,
          "the default is not f16");
    model_free(m);
}

int main(void) {
    pool_set_threads(2);
    static const char *const type_names[4] = {"f16", "bf16", "q8_0", "q4_0"};
    const char *const *isa = kernels_available();
    for (int k = 0; isa[k]; k++) {
        REQUIRE(kernels_select(isa[k]), "cannot select %s", isa[k]);
        printf("  kernels: %s\n", isa[k]);
        for (int i = 0; i < N_CASES; i++)
            for (int t = 0; t < 4 && cases[i].types[t]; t++)
                for (int ti = 0; ti < 4; ti++)
                    if (!strcmp(type_names[ti], cases[i].types[t])) oracle_at(cases[i].model, cases[i].types[t], ti);
    }
    kernels_select("auto");
    for (int ti = 0; ti < 4; ti++) {
        printf("  llama.cpp at %s moves from its F32 logits by up to %.3g\n", type_names[ti], moved[ti]);
        CHECK(moved[ti] > 2 * tolerance(type_names[ti]), "the %s references are too close to F32 to tell", type_names[ti]);
    }
    static const char *const prefix_models[] = {"qwen35-tiny-f32", "llama-tiny-f32", "nemotron_h-tiny-f32"};
    for (int i = 0; i < 3; i++) {
        model *m = load_with(prefix_models[i], "f16");
        const float d = parity_prefix_model(m, prefix_models[i], 0, 0, 1);
        printf("  %-26s f16 prompt in pieces: max |logit diff| %.3g\n", prefix_models[i], d);
        CHECK(d <= 1e-4f, "%s at f16: the prompt in pieces differs by %g", prefix_models[i], d);
        model_free(m);
    }
    sizes_and_fingerprints();
    refusals();
    pool_shutdown();
    return check_report("test_parity_kv");
}
