/* test_concurrency.c - many conversations at once (issue "Concurrency"): every batched
 * reply is exactly the reply the same conversation gets alone with checkpoints off.
 *
 *  - the burst: six conversations with one ~300-token "translate this" system prompt and
 *    user texts of different lengths, sent at once, five bursts in a row (each the next
 *    turn of the six). The first burst computes the shared prefix once (single flight:
 *    the counters say exactly how much was shared); later turns start from the
 *    post-generation checkpoint of the turn before;
 *  - a seeded random mix of systems, message lengths, reply lengths, duplicates,
 *    requests without checkpoints and arrival times, in a small batch (queueing) with
 *    short prefill slices;
 *  - in one burst, the single-flight leader cancelled mid-prefill, another request
 *    cancelled mid-reply, one failing mid-reply and one refused at submit: the others
 *    are unchanged;
 *  - engine_close with requests running and queued: each gets its on_done;
 *  - a long prompt arriving while another request generates: that one gets a token per
 *    prefill chunk.
 * On a Gated DeltaNet + attention model (qwen35), a pure Mamba-2 model, so that both
 * kinds of state are batched, and a mixture-of-experts model (qwen35moe), whose batched
 * rows choose different experts. "At once" is made exact by a gate: a request whose
 * progress callback holds the worker until the burst is queued.
 *
 * CHATFS_TEST_QUICK=1 (make tsan, where every kernel runs instrumented): qwen35 only,
 * two bursts, half the mix. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "engine/runtime/chat.h"
#include "engine/runtime/prefix_cache.h"
#include "tests/check.h"
#include "tests/engine_db.h"

/* The injected fault: a request whose session is "fail-after-N" breaks its row once it
 * has N tokens, as a failing model would. */
static int break_row(void *ud, const char *session, int generated) {
    int n;
    return session && sscanf(session, "fail-after-%d", &n) == 1 && generated >= n;
}
static const engine_faults faults = {break_row, NULL};

/* The engines' checkpoints, in RAM as a mount without a database keeps them: a store
 * for each engine opened, closed at the end of main. */
static test_store ram_stores[64];
static int n_ram_stores;
static ckpt_port ram_store(void) {
    REQUIRE(n_ram_stores < 64, "too many RAM stores");
    return test_store_open(&ram_stores[n_ram_stores++], NULL);
}

static const char *const models[] = {"tests/fixtures/qwen35-tiny-f32.gguf", "tests/fixtures/mamba2-tiny-f32.gguf",
                                     "tests/fixtures/qwen35moe-tiny-f32.gguf"};
#define N_MODELS (int)(sizeof models / sizeof models[0])

#define MAX_MSGS 16
#define N_CONV 6

static int quick; /* CHATFS_TEST_QUICK=1 */

/* ---------------------------------------------------------------- texts */

static const char *words[] = {"river", "mountain", "silver", "engine", "quiet", "harbor", "lantern", "meadow",
                              "copper", "violet", "thunder", "garden", "paper", "window", "falcon", "marble",
                              "orchard", "signal", "ember", "canyon", "willow", "anchor", "velvet", "glacier"};
static const char *starts[] = {"Bonjour", "Yesterday", "Quick", "Seven", "Under", "Please", "Every", "Zebra"};

/* deterministic prose: a distinct first word (so prompts part right after the
 * system prompt), then n_words words */
static char *prose(int first, int n_words, unsigned seed) {
    char *s = malloc((size_t)n_words * 12 + 32);
    size_t k = (size_t)sprintf(s, "%s", starts[first % 8]);
    for (int i = 0; i < n_words; i++) {
        seed = seed * 1103515245u + 12345u;
        k += (size_t)sprintf(s + k, "%s%s", i % 11 == 10 ? ". " : " ", words[(seed >> 16) % 24]);
    }
    strcpy(s + k, ".");
    return s;
}

/* a "translate this" system prompt of at least `tokens` tokens */
static char *system_prompt(chat_engine *e, int tokens, unsigned seed) {
    for (int n = 20;; n += 10) {
        char *body = prose(0, n, seed);
        char *s = malloc(strlen(body) + 200);
        sprintf(s, "You are a translator. Translate this text into French, keep the tone, and answer with the "
                   "translation only. Context: %s", body);
        free(body);
        chat_msg m = {"system", s, NULL};
        if (engine_count_tokens(e, &m, 1, NULL) >= tokens) return s;
        free(s);
    }
}

/* ---------------------------------------------------------------- conversations */

typedef struct {
    chat_msg m[MAX_MSGS];
    int n;
} conv;

static void conv_add(conv *c, const char *role, const char *text) {
    c->m[c->n].role = role;
    c->m[c->n].content = strdup(text);
    c->m[c->n].reasoning_content = NULL;
    c->m[c->n].tool_calls = c->m[c->n].tool_call_id = NULL;
    c->n++;
}

static void conv_free(conv *c) {
    for (int i = 0; i < c->n; i++) free((char *)c->m[i].content);
    c->n = 0;
}

/* the prompt tokens, as the engine renders them */
static int prompt_of(const model *m, const conv *c, int **ids) {
    char err[256];
    size_t len;
    char *text = template_render(m->tmpl, c->m, c->n, 1, 1, &len, err, sizeof err);
    int n = text ? tokenizer_encode(m->tok, text, len, 1, 1, ids) : -1;
    free(text);
    return n;
}

/* ---------------------------------------------------------------- requests */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

typedef struct {
    chat_engine *e;
    uint64_t id;             /* mu */
    int cancel_pending;      /* mu: the callback wanted a cancel before the id was known */
    char text[16384];
    size_t n;
    gen_report rep;
    char error[256];
    int done;                /* mu */
    int saw_queued;          /* a progress report while waiting (GEN_QUEUED) */
    int cancel_in_prefill;   /* cancel at the first report of the prefill */
    int cancel_after;        /* cancel once this many tokens are out */
    int is_gate;             /* holds the worker in its first report until the gate opens */
} job;

static int gate_open, gate_held;

static void cancel_job(job *j) { /* with mu held */
    if (j->id) engine_cancel(j->e, j->id);
    else j->cancel_pending = 1;
}

static void on_text(void *ud, const char *t, size_t n) {
    job *j = ud;
    if (j->n + n < sizeof j->text) memcpy(j->text + j->n, t, n), j->n += n;
}

static void on_progress(void *ud, const gen_report *r) {
    job *j = ud;
    pthread_mutex_lock(&mu);
    if (r->phase == GEN_QUEUED) j->saw_queued = 1;
    if (j->cancel_in_prefill && r->phase == GEN_PREFILL) {
        j->cancel_in_prefill = 0;
        cancel_job(j);
    }
    if (j->cancel_after && r->generated_tokens >= j->cancel_after) {
        j->cancel_after = 0;
        cancel_job(j);
    }
    if (j->is_gate) {
        j->is_gate = 0;
        gate_held = 1;
        pthread_cond_broadcast(&cv);
        while (!gate_open) pthread_cond_wait(&cv, &mu);
    }
    pthread_mutex_unlock(&mu);
}

static void on_done(void *ud, const gen_report *r, const char *error) {
    job *j = ud;
    pthread_mutex_lock(&mu);
    j->rep = *r;
    if (error) snprintf(j->error, sizeof j->error, "%s", error);
    j->done = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

/* Queues c as j; 0 when refused (the reason in j->error). */
static uint64_t submit(chat_engine *e, const conv *c, const gen_settings *s, job *j) {
    j->e = e;
    gen_callbacks cb = {.on_text = on_text, .on_progress = on_progress, .on_done = on_done, .ud = j};
    char err[256] = "";
    uint64_t id = engine_submit(e, c->m, c->n, s, &cb, err, sizeof err);
    pthread_mutex_lock(&mu);
    j->id = id;
    if (!id) snprintf(j->error, sizeof j->error, "%s", err);
    if (id && j->cancel_pending) engine_cancel(e, id);
    pthread_mutex_unlock(&mu);
    return id;
}

static void wait_jobs(job *jobs, int n) {
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n; i++)
        while (jobs[i].id && !jobs[i].done) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
}

/* A request that holds the worker (in its first progress report) until gate_release:
 * everything queued meanwhile is admitted together, in submission order. */
static job gate;
static void gate_hold(chat_engine *e) {
    conv c = {0};
    conv_add(&c, "user", "gate");
    gen_settings s;
    gen_settings_defaults(&s);
    s.max_tokens = 1;
    s.checkpoints = 0;
    memset(&gate, 0, sizeof gate);
    gate.is_gate = 1;
    pthread_mutex_lock(&mu);
    gate_open = gate_held = 0;
    pthread_mutex_unlock(&mu);
    REQUIRE(submit(e, &c, &s, &gate), "gate: %s", gate.error);
    pthread_mutex_lock(&mu);
    while (!gate_held) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    conv_free(&c);
}
static void gate_release(void) {
    pthread_mutex_lock(&mu);
    gate_open = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    wait_jobs(&gate, 1);
}

/* engine counters */
static double stat_of(chat_engine *e, const char *key) {
    char *s = engine_stats_json(e);
    cJSON *j = cJSON_Parse(s);
    double v = cJSON_GetNumberValue(cJSON_GetObjectItem(j, key));
    cJSON_Delete(j);
    free(s);
    return v;
}

/* until the next-turn jobs of finished requests are done too */
static void wait_idle(chat_engine *e) {
    while (stat_of(e, "active") > 0 || stat_of(e, "queued") > 0) usleep(2000);
}

/* ---------------------------------------------------------------- the reference */

typedef struct {
    char text[16384];
    size_t n;
} sink;

static void collect(void *ud, const char *t, size_t n) {
    sink *s = ud;
    if (s->n + n < sizeof s->text) memcpy(s->text + s->n, t, n), s->n += n;
}

/* The reply c gets alone, without checkpoints, on an engine that runs nothing else. */
static void reference(chat_engine *ref, const conv *c, const gen_settings *s, sink *out, gen_report *rep) {
    gen_settings alone = *s;
    alone.checkpoints = 0;
    alone.session = NULL; /* no injected fault */
    char err[256];
    out->n = 0;
    CHECK(engine_run(ref, c->m, c->n, &alone, collect, out, rep, err, sizeof err) == 0, "reference: %s", err);
}

static int same_as_alone(chat_engine *ref, const conv *c, const gen_settings *s, const job *j, const char *what) {
    sink alone;
    gen_report r;
    reference(ref, c, s, &alone, &r);
    int same = j->n == alone.n && !memcmp(j->text, alone.text, alone.n) &&
               j->rep.generated_tokens == r.generated_tokens;
    CHECK(same, "%s: the reply differs from the one alone (%zu vs %zu bytes, %d vs %d tokens)", what, j->n, alone.n,
          j->rep.generated_tokens, r.generated_tokens);
    return same;
}

/* the reply so far is the start of the one alone (cancelled or failed requests) */
static void prefix_of_alone(chat_engine *ref, const conv *c, const gen_settings *s, const job *j, const char *what) {
    sink alone;
    gen_report r;
    reference(ref, c, s, &alone, &r);
    CHECK(j->n <= alone.n && !memcmp(j->text, alone.text, j->n), "%s: partial reply is not the start of alone's",
          what);
}

/* ---------------------------------------------------------------- the burst */

static void burst(const char *path, chat_engine *ref) {
    engine_config cfg = {.model_path = path, .checkpoints = ram_store(), .threads = 2, .n_ctx = 4096};
    char err[256], what[128];
    chat_engine *e = engine_open(&cfg, err, sizeof err);
    REQUIRE(e, "%s", err);
    const model *m = engine_model(e);
    char *system = system_prompt(e, 300, 1);
    conv c[N_CONV] = {0};
    gen_settings s[N_CONV];
    int *next[N_CONV] = {0}, n_next[N_CONV] = {0}; /* (c) of the turn before */
    uint64_t shared_total = 0;
    int replies_same = 0;
    for (int i = 0; i < N_CONV; i++) {
        conv_add(&c[i], "system", system);
        gen_settings_defaults(&s[i]);
        s[i].ignore_eog = 1;
        s[i].max_tokens = 16 + 6 * i;
    }
    const int n_bursts = quick ? 2 : 5;
    for (int b = 0; b < n_bursts; b++) {
        job jobs[N_CONV] = {0};
        int *p[N_CONV], n[N_CONV];
        for (int i = 0; i < N_CONV; i++) {
            char *u = prose(i + b, 2 + 9 * ((i * 7 + b * 3) % N_CONV), 100u * b + i);
            conv_add(&c[i], "user", u);
            free(u);
            n[i] = prompt_of(m, &c[i], &p[i]);
        }
        wait_idle(e); /* the (c) checkpoints of the turn before are stored */
        gate_hold(e);
        for (int i = 0; i < N_CONV; i++) CHECK(submit(e, &c[i], &s[i], &jobs[i]), "burst %d: %s", b, jobs[i].error);
        gate_release();
        wait_jobs(jobs, N_CONV);
        for (int i = 0; i < N_CONV; i++) {
            const gen_report *r = &jobs[i].rep;
            snprintf(what, sizeof what, "%s: burst %d conversation %d", m->arch, b + 1, i);
            CHECK(r->finish == FINISH_LENGTH && !jobs[i].error[0], "%s: finish %d %s", what, r->finish,
                  jobs[i].error);
            replies_same += same_as_alone(ref, &c[i], &s[i], &jobs[i], what);
            CHECK(r->computed_tokens + r->reused_tokens == n[i], "%s: computed %d + reused %d != prompt %d", what,
                  r->computed_tokens, r->reused_tokens, n[i]);
            shared_total += (uint64_t)r->shared_tokens;
            if (b == 0) {
                /* the first one computes the system prompt; the other five wait for it
                 * and copy its state where their prompts part */
                int share = i ? pc_common_prefix(p[i], n[i] - 1, p[0], n[0]) : 0;
                CHECK(r->reused_tokens == share && r->shared_tokens == share,
                      "%s: reused %d shared %d, expected %d from single flight", what, r->reused_tokens,
                      r->shared_tokens, share);
                CHECK(i == 0 || jobs[i].saw_queued, "%s: never reported queued while it waited", what);
                CHECK(share >= (i ? 300 : 0), "%s: shares only %d tokens", what, share);
            } else {
                /* the (c) checkpoint of the turn before: the history up to this message */
                int k = pc_common_prefix(p[i], n[i], next[i], n_next[i]);
                CHECK(k == n_next[i] && r->reused_tokens == k && r->shared_tokens == 0,
                      "%s: reused %d (shared %d), expected the turn before's %d (common %d)", what, r->reused_tokens,
                      r->shared_tokens, n_next[i], k);
            }
        }
        for (int i = 0; i < N_CONV; i++) {
            jobs[i].text[jobs[i].n] = 0;
            free(next[i]);
            pc_render as_engine = {.t = m->tmpl, .enable_thinking = 1};
            n_next[i] = pc_next_turn_prefix(m, &as_engine, c[i].m, c[i].n, jobs[i].text, NULL, NULL, &next[i]);
            conv_add(&c[i], "assistant", jobs[i].text);
            free(p[i]);
        }
    }
    wait_idle(e);
    CHECK(stat_of(e, "single_flight_requests") >= N_CONV - 1, "single-flight requests %g",
          stat_of(e, "single_flight_requests"));
    CHECK(stat_of(e, "single_flight_tokens") == (double)shared_total && shared_total >= 300 * (N_CONV - 1),
          "single-flight tokens %g, reports say %llu", stat_of(e, "single_flight_tokens"),
          (unsigned long long)shared_total);
    CHECK(stat_of(e, "max_active") >= N_CONV, "max active %g", stat_of(e, "max_active"));
    CHECK(stat_of(e, "tokens_prompt") ==
              stat_of(e, "tokens_reused") + stat_of(e, "single_flight_tokens") + stat_of(e, "tokens_computed"),
          "prompt tokens %g != from checkpoints %g + single flight %g + computed %g", stat_of(e, "tokens_prompt"),
          stat_of(e, "tokens_reused"), stat_of(e, "single_flight_tokens"), stat_of(e, "tokens_computed"));
    CHECK(stat_of(e, "failed") == 0 && stat_of(e, "cancelled") == 0, "failures");
    printf("  %-8s burst: %d x %d conversations, %d/%d replies as alone; single flight saved %llu prompt tokens, "
           "%g steps\n",
           m->arch, n_bursts, N_CONV, replies_same, n_bursts * N_CONV, (unsigned long long)shared_total,
           stat_of(e, "steps"));
    for (int i = 0; i < N_CONV; i++) {
        conv_free(&c[i]);
        free(next[i]);
    }
    free(system);
    engine_close(e);
}

/* ---------------------------------------------------------------- a random mix */

static unsigned rnd(unsigned *st) {
    *st ^= *st << 13, *st ^= *st >> 17, *st ^= *st << 5;
    return *st;
}

#define N_MIX 12
static void random_mix(const char *path, chat_engine *ref, unsigned seed) {
    engine_config cfg = {.model_path = path, .checkpoints = ram_store(), .threads = 2, .n_ctx = 4096, .prefill_chunk = 96, .max_batch = 4};
    char err[256], what[128];
    chat_engine *e = engine_open(&cfg, err, sizeof err);
    REQUIRE(e, "%s", err);
    const model *m = engine_model(e);
    char *sys[2] = {system_prompt(e, 300, 7), system_prompt(e, 120, 8)};
    const int n_mix = quick ? N_MIX / 2 : N_MIX;
    conv c[N_MIX] = {0};
    gen_settings s[N_MIX];
    job *jobs = calloc(N_MIX, sizeof *jobs);
    unsigned st = seed;
    for (int i = 0; i < n_mix; i++) {
        gen_settings_defaults(&s[i]);
        s[i].ignore_eog = 1;
        s[i].max_tokens = 4 + (int)(rnd(&st) % 37);
        s[i].checkpoints = rnd(&st) % 6 != 0;
        if (i > 0 && rnd(&st) % 6 == 0) { /* the same conversation as an earlier one */
            int k = (int)(rnd(&st) % (unsigned)i);
            for (int j = 0; j < c[k].n; j++) conv_add(&c[i], c[k].m[j].role, c[k].m[j].content);
        } else {
            unsigned which = rnd(&st) % 3;
            if (which < 2) conv_add(&c[i], "system", sys[which]);
            char *u = prose((int)(rnd(&st) % 8), 1 + (int)(rnd(&st) % 150), rnd(&st));
            conv_add(&c[i], "user", u);
            free(u);
        }
    }
    for (int i = 0; i < n_mix; i++) {
        usleep(rnd(&st) % 15000);
        CHECK(submit(e, &c[i], &s[i], &jobs[i]), "mix %d: %s", i, jobs[i].error);
    }
    wait_jobs(jobs, n_mix);
    int same = 0, queued = 0;
    for (int i = 0; i < n_mix; i++) {
        snprintf(what, sizeof what, "%s: mix (seed %u) request %d", m->arch, seed, i);
        CHECK(jobs[i].rep.finish == FINISH_LENGTH, "%s: finish %d %s", what, jobs[i].rep.finish, jobs[i].error);
        same += same_as_alone(ref, &c[i], &s[i], &jobs[i], what);
        queued += jobs[i].saw_queued;
    }
    wait_idle(e);
    CHECK(stat_of(e, "max_active") <= 4, "max active %g over max_batch 4", stat_of(e, "max_active"));
    printf("  %-8s random mix (seed %u): %d/%d replies as alone; %d waited for a leader, %g shared tokens, "
           "%g steps\n",
           m->arch, seed, same, n_mix, queued, stat_of(e, "single_flight_tokens"), stat_of(e, "steps"));
    for (int i = 0; i < n_mix; i++) conv_free(&c[i]);
    free(jobs);
    free(sys[0]);
    free(sys[1]);
    engine_close(e);
}

/* ---------------------------------------------------------------- no stall */

/* A long prompt arriving while another request generates is prefilled a chunk per step,
 * and every step also decodes the other request: it gets a token per chunk. */
static job *staller_of; /* the generating request, read in the long one's callback */
static int gen_at_first_slice = -1, gen_at_first_token = -1;

static void on_long_progress(void *ud, const gen_report *r) {
    (void)ud;
    pthread_mutex_lock(&mu);
    if (r->phase == GEN_PREFILL && r->prefill_done > 0 && gen_at_first_slice < 0)
        gen_at_first_slice = staller_of->rep.generated_tokens;
    if (r->phase == GEN_GENERATING && gen_at_first_token < 0) gen_at_first_token = staller_of->rep.generated_tokens;
    pthread_mutex_unlock(&mu);
}

static void on_running_progress(void *ud, const gen_report *r) {
    job *j = ud;
    pthread_mutex_lock(&mu);
    j->rep = *r;
    pthread_mutex_unlock(&mu);
}

static void no_stall(const char *path) {
    const int chunk = 64;
    engine_config cfg = {.model_path = path, .checkpoints = ram_store(), .threads = 2, .n_ctx = 4096, .prefill_chunk = chunk};
    char err[256];
    chat_engine *e = engine_open(&cfg, err, sizeof err);
    REQUIRE(e, "%s", err);
    char *doc = system_prompt(e, 1000, 5);
    chat_msg run_msg = {"user", "Tell me everything.", NULL}, long_msg[2] = {{"system", doc, NULL}, {"user", "Translate it.", NULL}};
    gen_settings s;
    gen_settings_defaults(&s);
    s.ignore_eog = 1;
    s.max_tokens = 2000;
    job running = {0}, longer = {0};
    staller_of = &running;
    gen_callbacks cb = {.on_progress = on_running_progress, .on_done = on_done, .ud = &running};
    uint64_t id = engine_submit(e, &run_msg, 1, &s, &cb, err, sizeof err);
    REQUIRE(id, "%s", err);
    for (;;) { /* generating */
        pthread_mutex_lock(&mu);
        int g = running.rep.generated_tokens;
        pthread_mutex_unlock(&mu);
        if (g > 0) break;
        usleep(1000);
    }
    s.max_tokens = 1;
    s.checkpoints = 0; /* no marks: the slices are cut by the chunk and its work alone */
    gen_callbacks cb2 = {.on_progress = on_long_progress, .on_done = on_done, .ud = &longer};
    uint64_t id2 = engine_submit(e, long_msg, 2, &s, &cb2, err, sizeof err);
    REQUIRE(id2, "%s", err);
    pthread_mutex_lock(&mu);
    longer.id = id2;
    pthread_mutex_unlock(&mu);
    wait_jobs(&longer, 1);
    engine_cancel(e, id);
    pthread_mutex_lock(&mu);
    running.id = id;
    pthread_mutex_unlock(&mu);
    wait_jobs(&running, 1);
    /* slices of at most one chunk, thinner deeper in the prompt (a slice costs at most a
     * chunk at position 0); the first slice's step and the last one's each decode a token too */
    const int slices = longer.rep.prefill_passes;
    CHECK(slices >= (longer.rep.prompt_tokens + chunk - 1) / chunk, "%d slices of %d tokens for %d", slices, chunk,
          longer.rep.prompt_tokens);
    CHECK(gen_at_first_token - gen_at_first_slice == slices - 1,
          "%d-token prompt in %d slices: the running request got %d tokens meanwhile, not one per slice",
          longer.rep.prompt_tokens, slices, gen_at_first_token - gen_at_first_slice);
    printf("  %-8s no stall: a %d-token prompt in %d-token slices, the running reply got a token per slice\n",
           engine_model(e)->arch, longer.rep.prompt_tokens, chunk);
    free(doc);
    engine_close(e);
}

/* ---------------------------------------------------------------- cancel and fail */

static void cancel_and_fail(const char *path, chat_engine *ref) {
    engine_config cfg = {.model_path = path, .checkpoints = ram_store(), .faults = &faults, .threads = 2, .n_ctx = 4096,
                         .prefill_chunk = 64};
    char err[256], what[128];
    chat_engine *e = engine_open(&cfg, err, sizeof err);
    REQUIRE(e, "%s", err);
    const model *m = engine_model(e);
    char *system = system_prompt(e, 300, 3);
    conv c[N_CONV] = {0};
    gen_settings s[N_CONV];
    job jobs[N_CONV] = {0};
    for (int i = 0; i < N_CONV; i++) {
        conv_add(&c[i], "system", system);
        char *u = prose(i, 3 + 11 * i, 50u + i);
        conv_add(&c[i], "user", u);
        free(u);
        gen_settings_defaults(&s[i]);
        s[i].ignore_eog = 1;
        s[i].max_tokens = 30;
    }
    jobs[0].cancel_in_prefill = 1; /* the leader the others wait for */
    jobs[2].cancel_after = 5;
    s[4].session = "fail-after-3"; /* its row breaks the pass after 3 tokens (break_row) */
    gate_hold(e);
    for (int i = 0; i < N_CONV; i++) CHECK(submit(e, &c[i], &s[i], &jobs[i]), "cancel burst: %s", jobs[i].error);
    gen_settings bad = s[1];
    bad.template_name = "no-such-template";
    job refused = {0};
    CHECK(!submit(e, &c[1], &bad, &refused) && strstr(refused.error, "no-such-template"),
          "a bad template was accepted: %s", refused.error);
    gate_release();
    wait_jobs(jobs, N_CONV);
    for (int i = 0; i < N_CONV; i++) {
        snprintf(what, sizeof what, "%s: cancel/fail burst conversation %d", m->arch, i);
        const gen_report *r = &jobs[i].rep;
        if (i == 0 || i == 2) {
            CHECK(r->finish == FINISH_CANCELLED && !jobs[i].error[0], "%s: finish %d", what, r->finish);
            prefix_of_alone(ref, &c[i], &s[i], &jobs[i], what);
        } else if (i == 4) {
            CHECK(r->finish == FINISH_ERROR && strstr(jobs[i].error, "model failed"), "%s: finish %d error '%s'",
                  what, r->finish, jobs[i].error);
            CHECK(r->generated_tokens == 3, "%s: failed after %d tokens", what, r->generated_tokens);
            prefix_of_alone(ref, &c[i], &s[i], &jobs[i], what);
        } else {
            CHECK(r->finish == FINISH_LENGTH && !jobs[i].error[0], "%s: finish %d %s", what, r->finish,
                  jobs[i].error);
            same_as_alone(ref, &c[i], &s[i], &jobs[i], what);
        }
    }
    wait_idle(e);
    CHECK(stat_of(e, "cancelled") == 2 && stat_of(e, "failed") == 1 && stat_of(e, "retried_steps") >= 1,
          "cancelled %g failed %g retried %g", stat_of(e, "cancelled"), stat_of(e, "failed"),
          stat_of(e, "retried_steps"));
    printf("  %-8s cancel (leader mid-prefill, one mid-reply), a failing and a refused request: the other %d "
           "as alone\n",
           m->arch, N_CONV - 3);

    /* engine_close with requests running and queued: on_done for each, states freed */
    engine_config small = cfg;
    small.max_batch = 2;
    small.checkpoints = ram_store(); /* a store serves one engine */
    for (int i = 0; i < N_CONV; i++) conv_free(&c[i]);
    engine_close(e);
    e = engine_open(&small, err, sizeof err);
    REQUIRE(e, "%s", err);
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < N_CONV; i++) {
        conv_add(&c[i], "system", system);
        conv_add(&c[i], "user", "Tell me everything.");
        s[i].max_tokens = 0; /* until the context is full */
        s[i].session = NULL;
        CHECK(submit(e, &c[i], &s[i], &jobs[i]), "close: %s", jobs[i].error);
    }
    while (stat_of(e, "decode_rows") < 4) usleep(1000);
    engine_close(e);
    int done = 0;
    for (int i = 0; i < N_CONV; i++) done += jobs[i].done && jobs[i].rep.finish == FINISH_CANCELLED;
    CHECK(done == N_CONV, "engine_close: %d of %d requests ended as cancelled", done, N_CONV);
    for (int i = 0; i < N_CONV; i++) conv_free(&c[i]);
    free(system);
}

int main(void) {
    quick = getenv("CHATFS_TEST_QUICK") && *getenv("CHATFS_TEST_QUICK") == '1';
    for (int k = 0; k < (quick ? 1 : N_MODELS); k++) {
        engine_config rc = {.model_path = models[k], .checkpoints = ram_store(), .threads = 2, .n_ctx = 4096};
        char err[256];
        chat_engine *ref = engine_open(&rc, err, sizeof err);
        REQUIRE(ref, "%s", err);
        burst(models[k], ref);
        random_mix(models[k], ref, 12345u + (unsigned)k);
        cancel_and_fail(models[k], ref);
        if (k == 0) no_stall(models[k]);
        engine_close(ref);
    }
    for (int i = 0; i < n_ram_stores; i++) test_store_close(&ram_stores[i]);
    return check_report("test_concurrency");
}
