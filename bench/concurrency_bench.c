/* concurrency_bench.c - many conversations at once through the engine API (issue
 * "Concurrency"; run by bench/concurrency.sh):
 *
 *  1. aggregate decode tokens/s with 1, 2, 4, 6 and 8 conversations generating at once
 *     (greedy, end-of-generation ignored so every reply has the same length). Measured
 *     over the steady window in which all of them decode together: from the moment the
 *     last one has its first token to the moment the first one ends. REPS rounds over
 *     all the counts (interleaved, so that a change in the machine's load touches every
 *     count alike); the median of each count is reported.
 *  2. single flight: 6 requests sharing a system prompt, sent at once, with and without
 *     single flight: prompt tokens computed, and the longest time to a first token.
 *  3. decode beside a long prefill: one conversation decodes while another's prompt of
 *     LONG tokens is computed; the decoding one's gaps between tokens while the other's
 *     prefill stands in its first quarter and in its last (the scheduler cuts slices deep
 *     in a long prompt thinner, so the gaps should not grow with the depth).
 *
 * usage: concurrency_bench MODEL.gguf [THREADS [DECODE_TOKENS [SYSTEM_TOKENS [COUNTS [REPS [LONG]]]]]]
 *   defaults: 2 threads, 32 tokens, a 500-token system prompt, counts "1,2,4,6,8", 3 reps,
 *   LONG 8192 (0: skip).
 * One JSON line per measurement on stdout. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "engine/runtime/chat.h"
#include "store/ckpt_store.h"

#define MAX_CONV 16
#define MAX_TOKENS 1024

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static const char *words[] = {"river", "mountain", "silver", "engine", "quiet", "harbor", "lantern", "meadow",
                              "copper", "violet", "thunder", "garden", "paper", "window", "falcon", "marble"};

static char *prose(int n_words, unsigned seed) {
    char *s = malloc((size_t)n_words * 12 + 16);
    size_t k = 0;
    for (int i = 0; i < n_words; i++) {
        seed = seed * 1103515245u + 12345u;
        k += (size_t)sprintf(s + k, "%s%s", i ? (i % 13 == 0 ? ". " : " ") : "", words[(seed >> 16) % 16]);
    }
    strcpy(s + k, ".");
    return s;
}

/* one request: when each of its tokens came, how it ended */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
#define MAX_SLICES 4096
typedef struct {
    double t_token[MAX_TOKENS + 1];
    int n_tokens;
    double t_prefill[MAX_SLICES]; /* when its prefill reached prefill_at[] tokens */
    int prefill_at[MAX_SLICES], n_prefill;
    gen_report rep;
    int done;
    int gate; /* holds the worker in its first report until the gate opens */
} job;
static int gate_open, gate_held;

static void on_progress(void *ud, const gen_report *r) {
    job *j = ud;
    double t = now_ms();
    pthread_mutex_lock(&mu);
    while (j->n_tokens < r->generated_tokens && j->n_tokens < MAX_TOKENS) j->t_token[j->n_tokens++] = t;
    if (r->phase == GEN_PREFILL && j->n_prefill < MAX_SLICES &&
        r->prefill_done > (j->n_prefill ? j->prefill_at[j->n_prefill - 1] : 0)) {
        j->t_prefill[j->n_prefill] = t;
        j->prefill_at[j->n_prefill++] = r->prefill_done;
    }
    if (j->gate) { /* everything queued meanwhile starts together */
        j->gate = 0;
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
    j->done = 1;
    if (error) fprintf(stderr, "concurrency_bench: %s\n", error);
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void submit(chat_engine *e, const chat_msg *m, int n, const gen_settings *s, job *j) {
    gen_callbacks cb = {.on_progress = on_progress, .on_done = on_done, .ud = j};
    char err[256];
    if (!engine_submit(e, m, n, s, &cb, err, sizeof err)) {
        fprintf(stderr, "concurrency_bench: %s\n", err);
        exit(1);
    }
}

static void wait_jobs(job *jobs, int n) {
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n; i++)
        while (!jobs[i].done) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
}

/* a one-token request that holds the worker until gate_release */
static job gate_job;
static void gate_hold(chat_engine *e) {
    chat_msg m = {"user", "gate", NULL};
    gen_settings s;
    gen_settings_defaults(&s);
    s.max_tokens = 1;
    s.checkpoints = 0;
    memset(&gate_job, 0, sizeof gate_job);
    gate_job.gate = 1;
    pthread_mutex_lock(&mu);
    gate_open = gate_held = 0;
    pthread_mutex_unlock(&mu);
    submit(e, &m, 1, &s, &gate_job);
    pthread_mutex_lock(&mu);
    while (!gate_held) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
}
static void gate_release(void) {
    pthread_mutex_lock(&mu);
    gate_open = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    wait_jobs(&gate_job, 1);
}

/* the engine's checkpoints, in RAM as a mount without a database keeps them; one engine
 * at a time */
static ckpt_store *ram_store;

static chat_engine *open_engine(const char *model, int threads, int no_single_flight) {
    char cerr[256] = "";
    if (!(ram_store = cs_new(NULL, NULL, cerr, sizeof cerr))) {
        fprintf(stderr, "concurrency_bench: %s\n", cerr);
        exit(1);
    }
    engine_config cfg = {.model_path = model, .checkpoints = cs_port(ram_store), .threads = threads, .max_batch = 8,
                         .no_single_flight = no_single_flight};
    char err[256];
    chat_engine *e = engine_open(&cfg, err, sizeof err);
    if (!e) {
        fprintf(stderr, "concurrency_bench: %s\n", err);
        exit(1);
    }
    return e;
}

static double stat_of(chat_engine *e, const char *key) {
    char *s = engine_stats_json(e);
    cJSON *j = cJSON_Parse(s);
    double v = cJSON_GetNumberValue(cJSON_GetObjectItem(j, key));
    cJSON_Delete(j);
    free(s);
    return v;
}

/* n conversations decoding together; returns the aggregate decode tokens/s */
static double decode(chat_engine *e, int n, int tokens, int quiet) {
    job *jobs = calloc((size_t)n, sizeof *jobs);
    chat_msg m[MAX_CONV];
    char text[MAX_CONV][128];
    gen_settings s;
    gen_settings_defaults(&s);
    s.max_tokens = tokens;
    s.ignore_eog = 1;
    s.checkpoints = 0; /* decode only: no checkpoint work after the replies */
    gate_hold(e);
    double steps0 = stat_of(e, "steps");
    for (int i = 0; i < n; i++) {
        snprintf(text[i], sizeof text[i], "Conversation %d: tell me a story about the %s and the %s.", i + 1,
                 words[i % 16], words[(i * 5 + 3) % 16]);
        m[i] = (chat_msg){"user", text[i], NULL};
        submit(e, &m[i], 1, &s, &jobs[i]);
    }
    gate_release();
    wait_jobs(jobs, n);
    /* the steady window: all n decoding */
    double t0 = 0, t1 = 1e300;
    for (int i = 0; i < n; i++) {
        if (jobs[i].t_token[0] > t0) t0 = jobs[i].t_token[0];
        if (jobs[i].t_token[jobs[i].n_tokens - 1] < t1) t1 = jobs[i].t_token[jobs[i].n_tokens - 1];
    }
    int in_window = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < jobs[i].n_tokens; k++) in_window += jobs[i].t_token[k] > t0 && jobs[i].t_token[k] <= t1;
    double tps = t1 > t0 ? in_window / ((t1 - t0) / 1e3) : 0;
    double per_conv = 0;
    for (int i = 0; i < n; i++) per_conv += jobs[i].rep.decode_tokens_per_s;
    if (!quiet) {
        printf("{\"bench\":\"decode_run\",\"conversations\":%d,\"tokens_each\":%d,\"aggregate_tokens_per_s\":%.2f,"
               "\"window_tokens\":%d,\"window_ms\":%.0f,\"mean_per_conversation_tokens_per_s\":%.2f,"
               "\"steps\":%.0f}\n",
               n, tokens, tps, in_window, t1 - t0, per_conv / n, stat_of(e, "steps") - steps0);
        fflush(stdout);
    }
    free(jobs);
    return tps;
}

/* 6 requests with one system prompt at once: prompt tokens computed, time to all first tokens */
static void single_flight(const char *model, int threads, int sys_tokens, int off) {
    chat_engine *e = open_engine(model, threads, off);
    char *system = NULL;
    int have = 0;
    for (int w = 8; have < sys_tokens; w += 8) {
        free(system);
        system = prose(w, 11);
        chat_msg probe = {"system", system, NULL};
        have = engine_count_tokens(e, &probe, 1, NULL);
        if (have < 0) break;
    }
    static const char *users[6] = {"Translate: the river is quiet tonight.",
                                   "Translate: seven falcons over the harbor.",
                                   "Translate: please open the window, it is warm.",
                                   "Translate: the copper lantern is on the table.",
                                   "Translate: thunder in the mountains at dawn.",
                                   "Translate: a violet garden behind the marble wall."};
    job jobs[6] = {0};
    chat_msg m[6][2];
    gen_settings s;
    gen_settings_defaults(&s);
    s.max_tokens = 1;
    gate_hold(e);
    for (int i = 0; i < 6; i++) {
        m[i][0] = (chat_msg){"system", system, NULL};
        m[i][1] = (chat_msg){"user", users[i], NULL};
        submit(e, m[i], 2, &s, &jobs[i]);
    }
    gate_release();
    wait_jobs(jobs, 6);
    double last_first = 0;
    int prompt = 0, computed = 0, shared = 0;
    for (int i = 0; i < 6; i++) {
        if (jobs[i].rep.ttft_ms > last_first) last_first = jobs[i].rep.ttft_ms;
        prompt += jobs[i].rep.prompt_tokens;
        computed += jobs[i].rep.computed_tokens;
        shared += jobs[i].rep.shared_tokens;
    }
    printf("{\"bench\":\"single_flight\",\"single_flight\":%s,\"requests\":6,\"system_tokens\":%d,"
           "\"prompt_tokens\":%d,\"computed_tokens\":%d,\"shared_tokens\":%d,\"max_ttft_ms\":%.0f}\n",
           off ? "false" : "true", have, prompt, computed, shared, last_first);
    fflush(stdout);
    free(system);
    engine_close(e);
    cs_close(ram_store);
}

static int cmp_double(const void *a, const void *b);

/* where b's prefill stood at time t (tokens done) */
static int prefill_at(const job *b, double t) {
    int at = 0;
    for (int i = 0; i < b->n_prefill && b->t_prefill[i] <= t; i++) at = b->prefill_at[i];
    return at;
}

/* 3: the decoding conversation's token gaps while the long prompt's prefill is in its
 * first and in its last quarter: median and largest of each */
static void beside_prefill(const char *model, int threads, int long_tokens) {
    chat_engine *e = open_engine(model, threads, 0);
    char *text = NULL;
    int have = 0;
    for (int w = long_tokens / 2; have < long_tokens; w += w / 8 + 8) {
        free(text);
        text = prose(w, 23);
        chat_msg probe = {"user", text, NULL};
        if ((have = engine_count_tokens(e, &probe, 1, NULL)) < 0) break;
    }
    static job a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    gen_settings s;
    gen_settings_defaults(&s);
    s.ignore_eog = 1;
    s.checkpoints = 0;
    s.max_tokens = MAX_TOKENS;
    chat_msg ma = {"user", "Tell me a long story about the harbor.", NULL}, mb = {"user", text, NULL};
    submit(e, &ma, 1, &s, &a);
    pthread_mutex_lock(&mu); /* a decodes before the long prompt arrives */
    while (a.n_tokens < 4 && !a.done) {
        pthread_mutex_unlock(&mu);
        usleep(1000);
        pthread_mutex_lock(&mu);
    }
    pthread_mutex_unlock(&mu);
    gen_settings sb = s;
    sb.max_tokens = 1;
    submit(e, &mb, 1, &sb, &b);
    wait_jobs(&b, 1);
    double gaps[2][MAX_TOKENS];
    int n[2] = {0, 0};
    const int total = b.rep.prompt_tokens;
    pthread_mutex_lock(&mu);
    for (int k = 1; k < a.n_tokens; k++) {
        if (a.t_token[k] > b.t_prefill[b.n_prefill ? b.n_prefill - 1 : 0]) break; /* b's prefill is over */
        const int at = prefill_at(&b, a.t_token[k - 1]);
        if (b.n_prefill == 0 || a.t_token[k - 1] < b.t_prefill[0]) continue; /* before b's first slice */
        const int q = at < total / 4 ? 0 : at >= 3 * total / 4 ? 1 : -1;
        if (q >= 0) gaps[q][n[q]++] = a.t_token[k] - a.t_token[k - 1];
    }
    pthread_mutex_unlock(&mu);
    engine_close(e);
    cs_close(ram_store);
    for (int q = 0; q < 2; q++) qsort(gaps[q], (size_t)n[q], sizeof(double), cmp_double);
    printf("{\"bench\":\"decode_beside_prefill\",\"prompt_tokens\":%d,\"prefill_slices\":%d,"
           "\"first_quarter\":{\"gaps\":%d,\"median_ms\":%.0f,\"max_ms\":%.0f},"
           "\"last_quarter\":{\"gaps\":%d,\"median_ms\":%.0f,\"max_ms\":%.0f}}\n",
           total, b.n_prefill, n[0], n[0] ? gaps[0][n[0] / 2] : 0, n[0] ? gaps[0][n[0] - 1] : 0, n[1],
           n[1] ? gaps[1][n[1] / 2] : 0, n[1] ? gaps[1][n[1] - 1] : 0);
    fflush(stdout);
    free(text);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr,
                "usage: concurrency_bench MODEL.gguf [THREADS [DECODE_TOKENS [SYSTEM_TOKENS [COUNTS [REPS]]]]]\n");
        return 2;
    }
    const char *model = argv[1];
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    int tokens = argc > 3 ? atoi(argv[3]) : 32;
    int sys_tokens = argc > 4 ? atoi(argv[4]) : 500;
    const char *counts = argc > 5 ? argv[5] : "1,2,4,6,8";
    int reps = argc > 6 ? atoi(argv[6]) : 3;
    int long_tokens = argc > 7 ? atoi(argv[7]) : 8192;
    if (tokens < 4 || tokens > MAX_TOKENS) tokens = 32;
    if (reps < 1 || reps > 20) reps = 3;
    int ns[16], k = 0;
    for (const char *p = counts; p && *p && k < 16;) {
        int n = atoi(p);
        if (n >= 1 && n <= MAX_CONV) ns[k++] = n;
        p = strchr(p, ',');
        if (p) p++;
    }
    double tps[16][20];
    chat_engine *e = open_engine(model, threads, 0);
    decode(e, 1, 4, 1); /* warm-up: pages the weights in */
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < k; i++) tps[i][r] = decode(e, ns[i], tokens, 0);
    engine_close(e);
    cs_close(ram_store);
    double one = 0, six = 0;
    for (int i = 0; i < k; i++) {
        qsort(tps[i], (size_t)reps, sizeof(double), cmp_double);
        double med = tps[i][reps / 2];
        printf("{\"bench\":\"decode\",\"conversations\":%d,\"tokens_each\":%d,\"reps\":%d,"
               "\"aggregate_tokens_per_s\":%.2f,\"min\":%.2f,\"max\":%.2f}\n",
               ns[i], tokens, reps, med, tps[i][0], tps[i][reps - 1]);
        if (ns[i] == 1) one = med;
        if (ns[i] == 6) six = med;
    }
    if (one > 0 && six > 0) printf("{\"bench\":\"decode_speedup\",\"six_over_one\":%.2f,\"target\":4}\n", six / one);
    fflush(stdout);
    if (sys_tokens > 0) {
        single_flight(model, threads, sys_tokens, 0);
        single_flight(model, threads, sys_tokens, 1);
    }
    if (long_tokens > 0) beside_prefill(model, threads, long_tokens);
    return 0;
}
