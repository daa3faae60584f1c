#define _GNU_SOURCE /* memmem */
/* test_chat.c - the engine API (chat.h): requests run, stream, stop and cancel. */
#include <pthread.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/runtime/chat.h"
#include "engine/runtime/sampler.h"
#include "engine/model/state.h"
#include "tests/check.h"
#include "tests/oracle.h"

#define MODEL "tests/fixtures/qwen35-tiny-f32.gguf"

typedef struct {
    char text[65536];
    size_t n;
    int pieces;
} sink;

static void collect(void *ud, const char *t, size_t n) {
    sink *s = ud;
    if (s->n + n < sizeof s->text) memcpy(s->text + s->n, t, n), s->n += n;
    s->pieces++;
}

/* The engine's greedy reply must be what model_prefill + argmax gives directly. */
static void same_as_direct(chat_engine *e) {
    const model *m = engine_model(e);
    chat_msg msg = {"user", "Hello world! The quick brown fox", NULL};
    gen_settings s;
    gen_settings_defaults(&s);
    s.max_tokens = 12;
    sink out = {0};
    gen_report r;
    char err[256];
    CHECK(engine_run(e, &msg, 1, &s, collect, &out, &r, err, sizeof err) == 0, "%s", err);
    CHECK(r.finish == FINISH_LENGTH || r.finish == FINISH_EOG, "finish %d", r.finish);
    CHECK(r.prompt_tokens > 0 && r.computed_tokens == r.prompt_tokens, "prompt %d computed %d", r.prompt_tokens,
          r.computed_tokens);

    /* direct: render, tokenize, prefill, greedy */
    size_t len;
    char *text = template_render(m->tmpl, &msg, 1, 1, 1, &len, err, sizeof err);
    REQUIRE(text != NULL, "render: %s", err);
    int *ids = NULL, n = tokenizer_encode(m->tok, text, len, 1, 1, &ids);
    CHECK(n == r.prompt_tokens, "prompt tokens %d vs %d", n, r.prompt_tokens);
    seq_state *st = state_new(m, 0);
    arena a = {0};
    float *lg = malloc(sizeof(float) * m->n_vocab);
    model_prefill(m, st, ids, n, 0, lg, &a);
    int gen[12], k = 0;
    for (; k < r.generated_tokens; k++) {
        gen[k] = sampler_argmax(lg, m->n_vocab);
        if (tokenizer_is_eog(m->tok, gen[k])) {
            k++;
            break;
        }
        batch_seq b = {.state = st, .tokens = &gen[k], .n_tokens = 1, .logits = 1, .out = lg};
        model_forward(m, &b, 1, &a);
    }
    /* the same streaming detokenizer the engine uses (EOG tokens give no text) */
    detok_stream ds;
    detok_init(&ds, 0);
    char direct[8192];
    size_t dn = 0;
    for (int i = 0; i < k; i++)
        if (!tokenizer_is_eog(m->tok, gen[i])) dn += detok_push(m->tok, &ds, gen[i], direct + dn, sizeof direct - dn);
    dn += detok_flush(&ds, direct + dn, sizeof direct - dn);
    CHECK(dn == out.n && !memcmp(direct, out.text, out.n), "engine text differs from direct decode");
    free(lg);
    arena_free(&a);
    state_free(st);
    free(ids);
    free(text);
}

static void stop_strings(chat_engine *e) {
    chat_msg msg = {"user", "Hello world! The quick brown fox", NULL};
    gen_settings s;
    gen_settings_defaults(&s);
    s.max_tokens = 40;
    sink full = {0};
    gen_report r;
    char err[256];
    CHECK(engine_run(e, &msg, 1, &s, collect, &full, &r, err, sizeof err) == 0, "%s", err);
    if (full.n < 6) return;
    /* stop at a piece of the text the model is known to produce */
    char stop[8];
    memcpy(stop, full.text + full.n / 2, 3);
    stop[3] = 0;
    const char *first = memmem(full.text, full.n, stop, 3);
    s.stop[0] = stop;
    s.n_stop = 1;
    sink cut = {0};
    CHECK(engine_run(e, &msg, 1, &s, collect, &cut, &r, err, sizeof err) == 0, "%s", err);
    CHECK(r.finish == FINISH_STOP, "finish %d, expected the stop string", r.finish);
    CHECK(cut.n == (size_t)(first - full.text) && !memcmp(cut.text, full.text, cut.n),
          "text before the stop string differs (%zu vs %zu bytes)", cut.n, (size_t)(first - full.text));
}

typedef struct {
    pthread_mutex_t lock;
    int done, finish;
} waiter;

static void on_done(void *ud, const gen_report *r, const char *error) {
    waiter *w = ud;
    pthread_mutex_lock(&w->lock);
    w->done++;
    w->finish = r->finish;
    pthread_mutex_unlock(&w->lock);
    (void)error;
}

static int done_of(waiter *w) {
    pthread_mutex_lock(&w->lock);
    int d = w->done;
    pthread_mutex_unlock(&w->lock);
    return d;
}

static void cancel_and_close(void) {
    engine_config cfg = {.model_path = MODEL, .threads = 2, .max_batch = 2};
    char err[256];
    chat_engine *e = engine_open(&cfg, err, sizeof err);
    REQUIRE(e, "%s", err);
    chat_msg msg = {"user", "Tell me a long story.", NULL};
    gen_settings s;
    gen_settings_defaults(&s); /* no max_tokens: runs until the context is full */
    s.ignore_eog = 1;          /* a random model may end its turn at once */
    waiter w[3] = {{PTHREAD_MUTEX_INITIALIZER, 0, 0}, {PTHREAD_MUTEX_INITIALIZER, 0, 0},
                   {PTHREAD_MUTEX_INITIALIZER, 0, 0}};
    uint64_t id[3];
    for (int i = 0; i < 3; i++) {
        gen_callbacks cb = {.on_done = on_done, .ud = &w[i]};
        id[i] = engine_submit(e, &msg, 1, &s, &cb, err, sizeof err);
        CHECK(id[i] > 0, "%s", err);
    }
    usleep(20 * 1000); /* the first two are running, the third waits for a slot */
    engine_cancel(e, id[0]);
    for (int t = 0; t < 200 && !done_of(&w[0]); t++) usleep(10 * 1000);
    CHECK(w[0].done == 1 && w[0].finish == FINISH_CANCELLED, "first request not cancelled (%d, %d)", w[0].done,
          w[0].finish);
    engine_close(e); /* cancels the running ones and any still queued */
    CHECK(w[1].done == 1 && w[2].done == 1, "close left requests without on_done (%d %d)", w[1].done, w[2].done);
    CHECK(w[1].finish == FINISH_CANCELLED && w[2].finish == FINISH_CANCELLED, "finish %d %d", w[1].finish,
          w[2].finish);
}

static void bad_requests(chat_engine *e) {
    char err[256] = "";
    chat_msg bad = {"wizard", "hi", NULL};
    CHECK(engine_submit(e, &bad, 1, NULL, NULL, err, sizeof err) == 0 && err[0], "a bad role was accepted");
    chat_msg ok = {"user", "hi", NULL};
    gen_settings s;
    gen_settings_defaults(&s);
    s.template_name = "no-such-template";
    CHECK(engine_submit(e, &ok, 1, &s, NULL, err, sizeof err) == 0 && errno == EINVAL && strstr(err, "no-such-template"),
          "an unknown template was accepted: %s", err);
    /* a conversation's own template: one that does not compile, one that refuses the
     * conversation (its message comes back), one that renders (its prompt is used) */
    s.template_name = NULL;
    s.chat_template = "{% for m in messages %}{{ m.content }";
    CHECK(engine_submit(e, &ok, 1, &s, NULL, err, sizeof err) == 0 && errno == EINVAL &&
              strstr(err, "chat_template does not compile: line 1"),
          "a template that does not compile was accepted: %s", err);
    s.chat_template = "{% if messages[0].role != 'system' %}{{ raise_exception('A system prompt, please.') }}{% endif %}";
    CHECK(engine_submit(e, &ok, 1, &s, NULL, err, sizeof err) == 0 && errno == EINVAL &&
              !strcmp(err, "chat template: A system prompt, please."),
          "the template's refusal: %s", err);
    s.chat_template = "{{ bos_token }}<|im_start|>{{ messages[0].content | upper }}{{ eos_token }}";
    gen_report r;
    s.max_tokens = 1;
    CHECK(engine_run(e, &ok, 1, &s, NULL, NULL, &r, err, sizeof err) == 0, "%s", err);
    int *want;
    const char *rendered = "<|endoftext|><|im_start|>HI<|im_end|>"; /* the tiny model adds no BOS: kept */
    int n_want = tokenizer_encode(engine_model(e)->tok, rendered, strlen(rendered), 1, 1, &want);
    CHECK(r.prompt_tokens == n_want && engine_count_tokens(e, &ok, 1, &s) == n_want,
          "the conversation's template renders its prompt (%d tokens, want %d)", r.prompt_tokens, n_want);
    free(want);
    /* a prompt longer than the context */
    size_t big = (size_t)engine_context(e) * 4 + 16;
    char *text = malloc(big + 1);
    for (size_t i = 0; i < big; i++) text[i] = "ab cd "[i % 6];
    text[big] = 0;
    chat_msg huge = {"user", text, NULL};
    CHECK(engine_count_tokens(e, &huge, 1, NULL) > engine_context(e), "count_tokens too small");
    CHECK(engine_submit(e, &huge, 1, NULL, NULL, err, sizeof err) == 0 && strstr(err, "context"),
          "an over-long prompt was accepted: %s", err);
    free(text);
}

typedef struct {
    pthread_mutex_t lock;
    int at[256], n; /* prefill_done at each report while prefilling */
    int finished;
} slices;

static void on_slice(void *ud, const gen_report *r) {
    slices *s = ud;
    pthread_mutex_lock(&s->lock);
    if (r->phase == GEN_PREFILL && s->n < 256 && r->prefill_done > (s->n ? s->at[s->n - 1] : 0))
        s->at[s->n++] = r->prefill_done;
    pthread_mutex_unlock(&s->lock);
}

static void on_slices_done(void *ud, const gen_report *r, const char *error) {
    slices *s = ud;
    pthread_mutex_lock(&s->lock);
    s->finished = 1 + (error != NULL);
    pthread_mutex_unlock(&s->lock);
    (void)r;
}

/* the multiply-adds of a slice of k prompt tokens after `done`: the weights each token
 * reads, and each token's attention scores and weighted sums over the positions before it */
static double slice_work(const model *m, int done, int k) {
    model_usage u;
    model_usage_of(m, 1, &u);
    double per_position = 0;
    for (int i = 0; i < m->n_layer; i++)
        if (m->blocks[i].mixer == MIX_ATTN) per_position += 2.0 * m->blocks[i].attn.n_head * m->blocks[i].attn.head_dim;
    return k * ((double)u.params_active + per_position * (done + (k + 1) / 2.0));
}

/* A prompt deep in a long context is cut thinner: every step's slice costs at most what
 * prefill_chunk tokens from position 0 cost, so a long prefill holds the other
 * conversations' next token back no longer at 3,000 tokens than at the start. */
static void prefill_slices_by_work(void) {
    engine_config cfg = {.model_path = MODEL, .threads = 2, .prefill_chunk = 512};
    char err[256];
    chat_engine *e = engine_open(&cfg, err, sizeof err);
    REQUIRE(e, "%s", err);
    const model *m = engine_model(e);
    size_t len;
    char *text = read_file("tests/fixtures/long.txt", &len), *big = malloc(6 * len + 1);
    REQUIRE(text && big, "no long.txt");
    for (int i = 0; i < 6; i++) memcpy(big + (size_t)i * len, text, len);
    big[6 * len] = 0;
    chat_msg msg = {"user", big, NULL};
    gen_settings s;
    gen_settings_defaults(&s);
    s.max_tokens = 1;
    slices sl = {.lock = PTHREAD_MUTEX_INITIALIZER};
    gen_callbacks cb = {.on_progress = on_slice, .on_done = on_slices_done, .ud = &sl};
    CHECK(engine_submit(e, &msg, 1, &s, &cb, err, sizeof err) > 0, "%s", err);
    for (int t = 0; t < 3000; t++) {
        pthread_mutex_lock(&sl.lock);
        const int f = sl.finished;
        pthread_mutex_unlock(&sl.lock);
        if (f) break;
        usleep(10 * 1000);
    }
    CHECK(sl.finished == 1, "the long prompt did not finish (%d)", sl.finished);
    const double most = slice_work(m, 0, 512) * (1 + 1e-9);
    int thin = 0, prev = 0;
    for (int i = 0; i < sl.n; i++) {
        const int k = sl.at[i] - prev;
        CHECK(slice_work(m, prev, k) <= most || k == 1, "the slice of %d tokens after %d costs %.3g > %.3g", k, prev,
              slice_work(m, prev, k), most);
        if (i == 0) CHECK(k == 512, "the first slice is %d tokens, not a whole chunk", k);
        if (prev >= 3000 && k < 256) thin++;
        prev = sl.at[i];
    }
    printf("  a %d-token prompt in %d slices: %d, then %d at %d\n", prev, sl.n, sl.n ? sl.at[0] : 0,
           sl.n > 1 ? sl.at[sl.n - 1] - sl.at[sl.n - 2] : 0, sl.n > 1 ? sl.at[sl.n - 2] : 0);
    CHECK(prev > 3000 && thin > 0, "no thin slice past 3,000 tokens (%d tokens in %d slices)", prev, sl.n);
    engine_close(e);
    free(big);
    free(text);
}

int main(void) {
    engine_config cfg = {.model_path = MODEL, .threads = 2, .n_ctx = 512};
    char err[256];
    chat_engine *e = engine_open(&cfg, err, sizeof err);
    REQUIRE(e, "%s", err);
    same_as_direct(e);
    stop_strings(e);
    bad_requests(e);
    engine_close(e);
    cancel_and_close();
    prefill_slices_by_work();
    return check_report("test_chat");
}
