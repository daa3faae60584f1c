#define _GNU_SOURCE /* memmem */
/* test_mtp.c - Qwen3.5's MTP head against llama.cpp (issue "Speculative decoding",
 * acceptance: parity on the oracle's MTP model).
 *
 * The fixtures qwen35-tiny-mtp-f32 (dense) and qwen35moe-tiny-mtp-f32 (the head's block
 * has the trunk's experts and gated shared expert) carry llama.cpp's own MTP context's
 * results for the short prompt plus its 16 greedy tokens (S, 25 rows) and for the long
 * prompt plus 32; for each:
 *   - the trunk's hidden rows h_p (the head's input at p + 1): ours, kept by the head's
 *     catch-up in the sequence state, within 1e-5 of .mtp_hin.f32;
 *   - teacher-forced head at every position p: (S[p], h_{p-1}, zeros at p = 0) with the
 *     head's cache over 0..p: logits within 1e-4 of .mtp.f32 and the head's own hidden row
 *     within 1e-5 of .mtp_hout.f32 - once from llama.cpp's h rows in a fresh state, once
 *     the way speculation runs it (our trunk's rows, the cache our catch-up filled); the
 *     argmax at each of the long run's 635 positions as llama.cpp's;
 *   - the cache row a draft row writes is the catch-up's, bit for bit;
 *   - every draft chain of llama.cpp's speculative run (start at pos from id_last and the
 *     trunk's row before it, then each row takes the head's own hidden row): logits within
 *     1e-4 of .spec.f32 and the drafted tokens its drafts;
 *   - the trunk's logits do not change when the head is on, and a model without the head
 *     refuses mtp_enable; a damaged head fails the load naming its tensor. */
#include <unistd.h>

#include "engine/base/threadpool.h"
#include "engine/model/mtp.h"
#include "engine/runtime/sampler.h"
#include "tests/parity.h"

/* The MTP model under test (main runs every one) and its fixture files. */
static const char *NAME;
static const char *fixture(const char *suffix) {
    static char path[256];
    snprintf(path, sizeof path, FIXTURES "%s%s", NAME, suffix);
    return path;
}

static float *read_rows(const char *suffix, int rows, int width) {
    const char *path = fixture(suffix);
    size_t len;
    float *x = (float *)read_file(path, &len);
    REQUIRE(x && len == sizeof(float) * (size_t)rows * (size_t)width, "bad %s (%zu bytes)", path, x ? len : 0);
    return x;
}

/* the trunk's hidden row after each token of S[0..R): fed one at a time, read from the state */
static float *trunk_rows(const model *m, const int *S, int R, arena *a) {
    const int E = m->n_embd;
    float *h = malloc(sizeof(float) * (size_t)R * E), *lg = malloc(sizeof(float) * m->n_vocab);
    seq_state *s = state_new(m, 0);
    REQUIRE(h && lg && s, "out of memory");
    for (int p = 0; p < R; p++) {
        batch_seq b = {.state = s, .tokens = &S[p], .n_tokens = 1, .logits = 1, .out = lg};
        REQUIRE(model_forward(m, &b, 1, a) == 0, "trunk pass at %d failed", p);
        memcpy(h + (size_t)p * E, s->rec + m->mtp_h_off, sizeof(float) * (size_t)E);
    }
    state_free(s);
    free(lg);
    return h;
}

/* Teacher-forced head at every p < R of S into logits (R x V) and hout (R x E), the hidden
 * inputs from h (R x E: row p is the input at p + 1). own: in the state our trunk's
 * catch-up filled (S in one pass); else in a fresh state, row by row. */
static void teacher_forced(const model *m, const int *S, int R, const float *h, int own, float *logits, float *hout,
                           arena *a) {
    const int E = m->n_embd, V = m->n_vocab, slot = m->mtp->blk.attn.kv_slot, kvd = m->kv_dim[slot];
    seq_state *s = state_new(m, 0);
    float *zeros = calloc((size_t)E, sizeof(float)), *lg = malloc(sizeof(float) * V), *kv = NULL;
    REQUIRE(s && zeros && lg, "out of memory");
    if (own) { /* the catch-up's cache rows, to compare with what the draft rows write over them */
        batch_seq b = {.state = s, .tokens = S, .n_tokens = R, .logits = 1, .out = lg};
        REQUIRE(model_forward(m, &b, 1, a) == 0, "trunk pass failed");
        kv = malloc(sizeof(float) * 2 * (size_t)R * kvd);
        REQUIRE(kv, "out of memory");
        memcpy(kv, s->k[slot], sizeof(float) * (size_t)R * kvd);
        memcpy(kv + (size_t)R * kvd, s->v[slot], sizeof(float) * (size_t)R * kvd);
    }
    for (int p = 0; p < R; p++) {
        mtp_row row = {.state = s, .token = S[p], .pos = p, .h = p ? h + (size_t)(p - 1) * E : zeros,
                       .h_out = hout + (size_t)p * E, .logits = logits + (size_t)p * V};
        REQUIRE(mtp_draft(m, &row, 1, a) == 0, "head at %d failed", p);
    }
    if (own) {
        CHECK(!memcmp(kv, s->k[slot], sizeof(float) * (size_t)R * kvd) &&
                  !memcmp(kv + (size_t)R * kvd, s->v[slot], sizeof(float) * (size_t)R * kvd),
              "the head's cache rows of the draft rows differ from the catch-up's");
        free(kv);
    }
    state_free(s);
    free(zeros);
    free(lg);
}

static void short_prompt(const model *m, arena *a) {
    cJSON *ref = read_json(fixture(".json"));
    REQUIRE(ref, "cannot read the reference");
    const cJSON *mt = cJSON_GetObjectItem(ref, "mtp");
    const int R = cJSON_GetObjectItem(mt, "rows")->valueint, E = m->n_embd, V = m->n_vocab;
    int nS, nd;
    int *S = json_ints(mt, "tokens", &nS), *dam = json_ints(mt, "draft_argmax", &nd);
    REQUIRE(nS == R + 1 && nd == R, "unexpected reference layout");
    float *ref_hin = read_rows(".mtp_hin.f32", R, E), *ref_lg = read_rows(".mtp.f32", R, V);
    float *ref_hout = read_rows(".mtp_hout.f32", R, E);
    float *lg = malloc(sizeof(float) * (size_t)R * V), *hout = malloc(sizeof(float) * (size_t)R * E);

    float *h = trunk_rows(m, S, R, a);
    float d = max_abs_diff(h, ref_hin, R * E);
    printf("  trunk hidden rows (the head's input), %d rows: max |diff| %.3g\n", R, d);
    CHECK(d <= 1e-5f, "trunk hidden rows differ by %g", d);

    for (int own = 0; own < 2; own++) {
        teacher_forced(m, S, R, own ? h : ref_hin, own, lg, hout, a);
        const float dl = max_abs_diff(lg, ref_lg, R * V), dh = max_abs_diff(hout, ref_hout, R * E);
        int same = 0;
        for (int p = 0; p < R; p++) same += sampler_argmax(lg + (size_t)p * V, V) == dam[p];
        printf("  teacher-forced head (%s): logits max |diff| %.3g, hidden rows %.3g, argmax %d/%d as llama.cpp\n",
               own ? "our trunk and catch-up" : "llama.cpp's hidden rows", dl, dh, same, R);
        CHECK(dl <= 1e-4f, "teacher-forced logits differ by %g", dl);
        CHECK(dh <= 1e-5f, "teacher-forced hidden rows differ by %g", dh);
        CHECK(same == R, "argmax differs at %d positions", R - same);
    }

    /* every draft chain of the speculative run, from the state the trunk has at its start */
    const cJSON *steps = cJSON_GetObjectItem(cJSON_GetObjectItem(mt, "spec"), "steps");
    const int draft_rows = cJSON_GetObjectItem(cJSON_GetObjectItem(mt, "spec"), "draft_rows")->valueint;
    float *ref_spec = read_rows(".spec.f32", draft_rows, V);
    float *lo = malloc(sizeof(float) * V), *hc = malloc(sizeof(float) * E), *lt = malloc(sizeof(float) * V);
    float worst = 0;
    int rows = 0, tokens_same = 1;
    for (int k = 0; k < cJSON_GetArraySize(steps); k++) {
        const cJSON *st = cJSON_GetArrayItem(steps, k);
        const int pos = cJSON_GetObjectItem(st, "pos")->valueint;
        int tok = cJSON_GetObjectItem(st, "id_last")->valueint, n;
        int *draft = json_ints(st, "draft", &n);
        seq_state *s = state_new(m, 0);
        REQUIRE(s && model_prefill(m, s, S, pos, 0, lt, a) == 0, "prefill to %d failed", pos);
        for (int i = 0; i < n; i++, rows++) {
            REQUIRE(rows < draft_rows, "more draft rows than the reference has");
            mtp_row row = {.state = s, .token = tok, .pos = pos + i, .h = i ? hc : NULL, .h_out = hc, .logits = lo};
            REQUIRE(mtp_draft(m, &row, 1, a) == 0, "draft row failed");
            worst = fmaxf(worst, max_abs_diff(lo, ref_spec + (size_t)rows * V, V));
            tok = sampler_argmax(lo, V);
            tokens_same &= tok == draft[i];
        }
        state_free(s);
        free(draft);
    }
    printf("  draft chains of llama.cpp's speculative run: %d rows, logits max |diff| %.3g, drafts %s\n", rows, worst,
           tokens_same ? "the same" : "DIFFER");
    CHECK(rows == draft_rows, "%d draft rows, the reference has %d", rows, draft_rows);
    CHECK(worst <= 1e-4f, "draft-chain logits differ by %g", worst);
    CHECK(tokens_same, "a drafted token differs");

    free(lo);
    free(hc);
    free(lt);
    free(ref_spec);
    free(h);
    free(lg);
    free(hout);
    free(ref_hin);
    free(ref_lg);
    free(ref_hout);
    free(S);
    free(dam);
    cJSON_Delete(ref);
}

/* the long prompt + 32 tokens: the head's argmax at every one of its 635 positions */
static void long_prompt(const model *m, arena *a) {
    cJSON *ref = read_json(fixture(".long.json"));
    REQUIRE(ref, "cannot read the long reference");
    const cJSON *mt = cJSON_GetObjectItem(ref, "mtp");
    const int R = cJSON_GetObjectItem(mt, "rows")->valueint, E = m->n_embd, V = m->n_vocab;
    int nS, nd;
    int *S = json_ints(mt, "tokens", &nS), *dam = json_ints(mt, "draft_argmax", &nd);
    REQUIRE(nS == R + 1 && nd == R, "unexpected long reference layout");
    float *h = trunk_rows(m, S, R, a);
    float *lg = malloc(sizeof(float) * (size_t)R * V), *hout = malloc(sizeof(float) * (size_t)R * E);
    teacher_forced(m, S, R, h, 1, lg, hout, a);
    int same = 0;
    for (int p = 0; p < R; p++) same += sampler_argmax(lg + (size_t)p * V, V) == dam[p];
    const cJSON *row0 = cJSON_GetObjectItem(mt, "mtp_logits_row0");
    float d0 = 0;
    for (int i = 0; i < 8; i++)
        d0 = fmaxf(d0, fabsf(lg[i] - (float)cJSON_GetArrayItem(cJSON_GetObjectItem(row0, "first8"), i)->valuedouble));
    printf("  long prompt + 32 tokens: head argmax %d/%d as llama.cpp; row 0's first logits within %.3g\n", same, R,
           d0);
    CHECK(same == R, "long: argmax differs at %d positions", R - same);
    CHECK(d0 <= 1e-4f, "long: row 0 differs by %g", d0);
    free(h);
    free(lg);
    free(hout);
    free(S);
    free(dam);
    cJSON_Delete(ref);
}

/* A damaged head fails the load with its tensor's name; a file without nextn.eh_proj has no
 * head (converted without it) and loads as the trunk alone. ffn_down: the name of the head
 * block's FFN down projection (the dense one, or the experts'). */
static void damaged(int n_layer, const char *ffn_down) {
    size_t len;
    char *bytes = read_file(fixture(".gguf"), &len), err[256] = "";
    REQUIRE(bytes, "cannot read the fixture");
    /* each case: a tensor's name, the same name damaged */
    char names[3][2][64], expect[2][96];
    snprintf(names[0][0], 64, "blk.%d.nextn.enorm.weight", n_layer);
    snprintf(names[0][1], 64, "blk.%d.nextn.enxrm.weight", n_layer);
    snprintf(names[1][0], 64, "blk.%d.%s.weight", n_layer, ffn_down);
    snprintf(names[1][1], 64, "blk.%d.ffn_dxwn%s.weight", n_layer, ffn_down + strlen("ffn_down"));
    snprintf(names[2][0], 64, "blk.%d.nextn.eh_proj.weight", n_layer);
    snprintf(names[2][1], 64, "blk.%d.nextn.eh_prxj.weight", n_layer);
    for (int c = 0; c < 2; c++) snprintf(expect[c], sizeof expect[c], "'%s' is missing", names[c][0]);
    for (int c = 0; c < 3; c++) {
        char *copy = malloc(len), path[] = "/tmp/chatfs-mtp-XXXXXX";
        REQUIRE(copy, "out of memory");
        memcpy(copy, bytes, len);
        char *at = memmem(copy, len, names[c][0], strlen(names[c][0]));
        REQUIRE(at, "no %s in the fixture", names[c][0]);
        memcpy(at, names[c][1], strlen(names[c][1]));
        const int fd = mkstemp(path);
        REQUIRE(fd >= 0 && write(fd, copy, len) == (ssize_t)len && close(fd) == 0, "cannot write %s", path);
        model *m = model_load(path, err, sizeof err);
        if (c < 2)
            CHECK(!m && strstr(err, expect[c]), "%s renamed: %s", names[c][0], m ? "loaded" : err);
        else
            CHECK(m && !m->mtp && m->n_layer == n_layer, "without nextn.eh_proj: %s", m ? "a head" : err);
        model_free(m);
        unlink(path);
        free(copy);
    }
    printf("  a damaged head fails the load with its tensor's name; none without nextn.eh_proj\n");
    free(bytes);
}

/* Every check above on one MTP model; ffn_down names its head block's down projection. */
static void one_model(const char *name, const char *ffn_down, arena *a) {
    NAME = name;
    printf("%s:\n", NAME);
    pool_set_threads(2);
    model *m = parity_load(NAME);
    REQUIRE(m->mtp, "the head was not loaded");
    const int kv_slots = m->n_kv_slots;
    const size_t rec = m->rec_floats;
    REQUIRE(mtp_enable(m) == 0 && m->mtp_on, "mtp_enable failed");
    CHECK(m->n_kv_slots == kv_slots + 1 && m->rec_floats == rec + (size_t)m->n_embd, "the head's state is not there");
    CHECK(mtp_enable(m) == 0 && m->n_kv_slots == kv_slots + 1, "a second mtp_enable changed the state");

    /* the trunk with the head on: llama.cpp's logits and greedy tokens still */
    {
        int n, *ids = parity_encode(m, "Hello world! The quick brown fox", &n);
        float *lg = malloc(sizeof(float) * m->n_vocab);
        size_t len;
        float *ref = (float *)read_file(fixture(".last.f32"), &len);
        seq_state *s = state_new(m, 0);
        REQUIRE(ids && lg && ref && s && len == sizeof(float) * (size_t)m->n_vocab, "setup failed");
        CHECK(model_prefill(m, s, ids, n, 0, lg, a) == 0, "prefill failed");
        const float d = max_abs_diff(lg, ref, m->n_vocab);
        printf("  trunk with the head on: last logits max |diff| %.3g\n", d);
        CHECK(d <= 1e-4f, "trunk logits differ by %g with the head on", d);
        state_free(s);
        free(ref);
        free(lg);
        free(ids);
    }
    short_prompt(m, a);
    long_prompt(m, a);
    damaged(m->n_layer, ffn_down);
    printf("  with 1 thread:\n");
    pool_set_threads(1);
    short_prompt(m, a);
    model_free(m);
}

int main(void) {
    arena a = {0};
    char err[256];
    model *plain = model_load(FIXTURES "qwen35-tiny-f32.gguf", err, sizeof err);
    REQUIRE(plain, "%s", err);
    CHECK(!plain->mtp && mtp_enable(plain) == -1, "a model without the head enabled one");
    model_free(plain);

    one_model("qwen35-tiny-mtp-f32", "ffn_down", &a);         /* dense FFN in the head's block */
    one_model("qwen35moe-tiny-mtp-f32", "ffn_down_exps", &a); /* experts + gated shared expert */
    arena_free(&a);
    pool_shutdown();
    return check_report("test_mtp");
}
