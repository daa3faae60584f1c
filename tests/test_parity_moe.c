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
 * set (llama.cpp's order) gives exactly the scalar set's logits. The layouts no fixture
 * has - gate and up experts fused in one ffn_gate_up_exps (the converter's option), and
 * Qwen3-Next's older ssm_in - are made here from the fixtures and must give their logits
 * bit for bit. */
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/threadpool.h"
#include "engine/gguf/gguf.h"
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

/* ---- the other layouts a file may use, made from a fixture: same logits, bit for bit */

typedef struct {
    char name[128];
    uint32_t n_dims;
    int64_t ne[3];
    const float *data; /* F32 */
    float *owned;      /* data made here */
} out_tensor;

static int write_failed;
static void put(FILE *f, const void *p, size_t n) {
    if (fwrite(p, 1, n, f) != n) write_failed = 1;
}
static void pad_to(FILE *f, uint64_t *at, uint64_t align) {
    static const char zeros[64];
    while (*at % align) {
        const uint64_t k = align - *at % align < sizeof zeros ? align - *at % align : sizeof zeros;
        put(f, zeros, (size_t)k);
        *at += k;
    }
}

/* g's metadata as it is, and the tensors out[] (F32) instead of g's */
static void write_tensors(const gguf_file *g, const out_tensor *out, int n, const char *path) {
    uint64_t kv_end = 24;
    for (uint64_t i = 0; i < g->n_kv; i++) kv_end += 8 + g->kv[i].key.len + 4 + g->kv[i].size;
    FILE *f = fopen(path, "wb");
    REQUIRE(f, "cannot write %s", path);
    const uint64_t n_tensors = (uint64_t)n;
    put(f, g->map, 8);
    put(f, &n_tensors, 8);
    put(f, g->map + 16, (size_t)(kv_end - 16));
    uint64_t at = kv_end, off = 0;
    for (int i = 0; i < n; i++) {
        const uint64_t len = strlen(out[i].name), type = GGML_F32;
        const uint32_t t32 = (uint32_t)type;
        put(f, &len, 8);
        put(f, out[i].name, (size_t)len);
        put(f, &out[i].n_dims, 4);
        for (uint32_t d = 0; d < out[i].n_dims; d++) put(f, &out[i].ne[d], 8);
        put(f, &t32, 4);
        put(f, &off, 8);
        at += 8 + len + 4 + 8 * (uint64_t)out[i].n_dims + 4 + 8;
        const uint64_t bytes = 4 * (uint64_t)(out[i].ne[0] * out[i].ne[1] * out[i].ne[2]);
        off = (off + bytes + g->alignment - 1) / g->alignment * g->alignment;
    }
    pad_to(f, &at, g->alignment);
    for (int i = 0; i < n; i++) {
        const uint64_t bytes = 4 * (uint64_t)(out[i].ne[0] * out[i].ne[1] * out[i].ne[2]);
        put(f, out[i].data, (size_t)bytes);
        at += bytes;
        if (i + 1 < n) pad_to(f, &at, g->alignment);
    }
    REQUIRE(fclose(f) == 0 && !write_failed, "cannot write %s", path);
}

static const gguf_tensor *tensor_of(const gguf_file *g, const char *fmt, int layer) {
    char name[128];
    snprintf(name, sizeof name, fmt, layer);
    return gguf_find_tensor(g, name);
}

/* Qwen3-Next's older layout: attn_qkv and attn_gate as one ssm_in, [q, k, v (r heads),
 * z (r heads)] per key head (Hk 2, dk 16, r 2, dv 16 in the fixture) */
static float *fuse_qkvz(const gguf_tensor *qkv, const gguf_tensor *z, int Hk, int dk, int r, int dv) {
    const int E = (int)qkv->ne[0], key_dim = Hk * dk, per = 2 * dk + 2 * r * dv;
    float *w = malloc(sizeof(float) * (size_t)E * Hk * per);
    const float *Q = qkv->data, *Z = z->data;
    for (int j = 0; j < Hk; j++) {
        float *o = w + (size_t)j * per * E;
        memcpy(o, Q + (size_t)j * dk * E, sizeof(float) * dk * E);                      /* q */
        memcpy(o + (size_t)dk * E, Q + (size_t)(key_dim + j * dk) * E, sizeof(float) * dk * E); /* k */
        memcpy(o + (size_t)2 * dk * E, Q + (size_t)(2 * key_dim + j * r * dv) * E, sizeof(float) * r * dv * E);
        memcpy(o + (size_t)(2 * dk + r * dv) * E, Z + (size_t)j * r * dv * E, sizeof(float) * r * dv * E);
    }
    return w;
}

/* gate and up experts as one ffn_gate_up_exps: each expert's gate rows, then its up rows */
static float *fuse_gate_up(const gguf_tensor *gate, const gguf_tensor *up) {
    const size_t per = (size_t)gate->ne[0] * gate->ne[1], X = (size_t)gate->ne[2];
    float *w = malloc(sizeof(float) * per * 2 * X);
    for (size_t e = 0; e < X; e++) {
        memcpy(w + 2 * e * per, (const float *)gate->data + e * per, sizeof(float) * per);
        memcpy(w + (2 * e + 1) * per, (const float *)up->data + e * per, sizeof(float) * per);
    }
    return w;
}

/* the fixture rewritten in the other layout gives its logits bit for bit */
static void other_layout(const char *name, int fuse_experts, int legacy_qkvz) {
    char path[256], tmp[256], err[256];
    snprintf(path, sizeof path, FIXTURES "%s.gguf", name);
    gguf_file *g = gguf_open(path, err, sizeof err);
    REQUIRE(g, "%s", err);
    out_tensor *out = calloc(g->n_tensors, sizeof *out);
    int n = 0, fused = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        int layer;
        char rest[96];
        REQUIRE(t->type == GGML_F32, "%s is not F32", t->name);
        out_tensor o = {.n_dims = t->n_dims, .ne = {t->ne[0], t->ne[1], t->ne[2]}, .data = t->data};
        snprintf(o.name, sizeof o.name, "%s", t->name);
        if (sscanf(t->name, "blk.%d.%95s", &layer, rest) == 2) {
            if (fuse_experts && !strcmp(rest, "ffn_gate_exps.weight")) continue;
            if (fuse_experts && !strcmp(rest, "ffn_up_exps.weight")) {
                const gguf_tensor *gate = tensor_of(g, "blk.%d.ffn_gate_exps.weight", layer);
                o.owned = fuse_gate_up(gate, t);
                o.data = o.owned;
                o.ne[1] = 2 * t->ne[1];
                snprintf(o.name, sizeof o.name, "blk.%d.ffn_gate_up_exps.weight", layer);
                fused++;
            }
            if (legacy_qkvz && !strcmp(rest, "attn_gate.weight")) continue;
            if (legacy_qkvz && !strcmp(rest, "attn_qkv.weight")) {
                const gguf_tensor *z = tensor_of(g, "blk.%d.attn_gate.weight", layer);
                o.owned = fuse_qkvz(t, z, 2, 16, 2, 16);
                o.data = o.owned;
                o.ne[1] = t->ne[1] + z->ne[1];
                snprintf(o.name, sizeof o.name, "blk.%d.ssm_in.weight", layer);
                fused++;
            }
        }
        out[n++] = o;
    }
    mkdir("tests/tmp", 0755);
    snprintf(tmp, sizeof tmp, "tests/tmp/test_parity_moe.%d.gguf", (int)getpid());
    write_tensors(g, out, n, tmp);
    model *a = parity_load(name);
    model *b = model_load(tmp, err, sizeof err);
    REQUIRE(b, "%s", err);
    float *la = long_logits(a), *lb = long_logits(b);
    const char *what = fuse_experts && legacy_qkvz ? "ffn_gate_up_exps and ssm_in" : fuse_experts ? "ffn_gate_up_exps" : "ssm_in";
    const int same = fused > 0 && !memcmp(la, lb, sizeof(float) * a->n_vocab * 33);
    CHECK(same, "%s with %s: %d tensors rewritten, logits differ", name, what, fused);
    if (same) printf("  %-30s with %s (%d tensors made): the same logits bit for bit\n", name, what, fused);
    free(la);
    free(lb);
    model_free(a);
    model_free(b);
    remove(tmp);
    for (int i = 0; i < n; i++) free(out[i].owned);
    free(out);
    gguf_close(g);
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
    other_layout("qwen35moe-tiny-f32", 1, 0);
    other_layout("qwen3next-tiny-f32", 1, 1);
    pool_shutdown();
    return check_report("test_parity_moe");
}
