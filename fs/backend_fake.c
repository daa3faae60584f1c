/* backend_fake.c - a deterministic stand-in for the engine (see backend.h).
 *
 * One worker thread runs requests in order, like the engine's scheduler: it reports
 * the prefill, then emits one word per `delay` milliseconds through on_text. Waits are
 * on a condition variable, so cancel and close take effect at once. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fs/backend.h"

typedef struct job {
    struct job *next;
    uint64_t id;
    gen_callbacks cb;
    char *last_user; /* the last user message */
    int prompt_tokens, tokens, delay_ms, fail_after, max_tokens;
    int think; /* reasoning words before the reply */
    int cancelled;
} job;

typedef struct {
    fs_backend base;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    job *head, *tail;
    job *running;
    uint64_t next_id;
    int stop;
    int delay_ms, tokens, ctx, prefill_ms;
    int think;          /* reasoning words per reply; -1: the fake has no thinking mode */
    int temp_pct, top_k; /* the sampling it recommends (temperature in hundredths); -1: none */
    char **sessions; /* the sessions requests named, until forgotten */
    int n_sessions;
    /* counters for stats.json */
    uint64_t n_requests, n_tokens, n_cancelled, n_failed, n_forgotten;
} fake;

/* index of session in f->sessions, or -1; with f->mu held */
static int find_session(const fake *f, const char *session) {
    for (int i = 0; session && i < f->n_sessions; i++)
        if (!strcmp(f->sessions[i], session)) return i;
    return -1;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Waits up to ms or until the job is cancelled / the backend stops; with f->mu held. */
static int fake_wait(fake *f, job *j, int ms) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    long long ns = until.tv_nsec + (long long)ms * 1000000;
    until.tv_sec += ns / 1000000000;
    until.tv_nsec = ns % 1000000000;
    while (!j->cancelled && !f->stop)
        if (pthread_cond_timedwait(&f->cv, &f->mu, &until) == ETIMEDOUT) break;
    return j->cancelled || f->stop;
}

static int count(const chat_msg *msgs, int n) {
    int t = 0;
    for (int i = 0; i < n; i++) t += (int)((strlen(msgs[i].content) + 3) / 4) + 4;
    return t;
}

static void run_job(fake *f, job *j) {
    gen_report r = {0};
    r.phase = GEN_PREFILL;
    r.prompt_tokens = j->prompt_tokens;
    r.source = "none";
    snprintf(r.miss_reason, sizeof r.miss_reason, "none stored");
    double t0 = now_ms();
    pthread_mutex_unlock(&f->mu);
    j->cb.on_progress(j->cb.ud, &r);
    pthread_mutex_lock(&f->mu);
    int stopped = f->prefill_ms > 0 && fake_wait(f, j, f->prefill_ms);
    r.prefill_done = r.computed_tokens = j->prompt_tokens;
    const char *error = NULL;
    char word[64];
    /* the reasoning first: its words count as generated tokens, and max_tokens too */
    r.phase = GEN_THINKING;
    for (int i = 0; i < j->think && !stopped; i++) {
        if (fake_wait(f, j, j->delay_ms)) {
            stopped = 1;
            break;
        }
        if (j->max_tokens > 0 && r.generated_tokens >= j->max_tokens) break;
        if (i == 0) snprintf(word, sizeof word, "Thinking about: %.40s.", j->last_user);
        else snprintf(word, sizeof word, " t%d", i);
        f->n_tokens++;
        r.generated_tokens++;
        r.reasoning_tokens++;
        if (i == 0) r.ttft_ms = now_ms() - t0;
        double secs = (now_ms() - t0) / 1e3;
        r.decode_tokens_per_s = secs > 0 ? r.generated_tokens / secs : 0;
        pthread_mutex_unlock(&f->mu);
        if (j->cb.on_reasoning) j->cb.on_reasoning(j->cb.ud, word, strlen(word));
        j->cb.on_progress(j->cb.ud, &r);
        pthread_mutex_lock(&f->mu);
    }
    int thought = r.reasoning_tokens;
    r.phase = GEN_GENERATING;
    int n = j->tokens;
    if (j->max_tokens > 0 && j->max_tokens - thought < n) n = j->max_tokens > thought ? j->max_tokens - thought : 0;
    for (int i = 0; i < n && !stopped; i++) {
        if (fake_wait(f, j, j->delay_ms)) {
            stopped = 1;
            break;
        }
        if (j->fail_after >= 0 && i >= j->fail_after) {
            error = "fake engine failure";
            break;
        }
        if (j->prompt_tokens + thought + i >= f->ctx) {
            r.finish = FINISH_CONTEXT;
            break;
        }
        if (i == 0) snprintf(word, sizeof word, "Reply to: %.40s.", j->last_user);
        else snprintf(word, sizeof word, " w%d", i);
        f->n_tokens++;
        r.generated_tokens = thought + i + 1;
        if (i == 0 && !thought) r.ttft_ms = now_ms() - t0;
        double secs = (now_ms() - t0) / 1e3;
        r.decode_tokens_per_s = secs > 0 ? r.generated_tokens / secs : 0;
        pthread_mutex_unlock(&f->mu);
        j->cb.on_text(j->cb.ud, word, strlen(word));
        j->cb.on_progress(j->cb.ud, &r);
        pthread_mutex_lock(&f->mu);
    }
    if (error) {
        r.phase = GEN_FAILED;
        r.finish = FINISH_ERROR;
        f->n_failed++;
    } else {
        r.phase = GEN_DONE;
        if (stopped) r.finish = FINISH_CANCELLED, f->n_cancelled++;
        else if (!r.finish) r.finish = n < j->tokens ? FINISH_LENGTH : FINISH_EOG;
    }
    pthread_mutex_unlock(&f->mu);
    j->cb.on_done(j->cb.ud, &r, error);
    pthread_mutex_lock(&f->mu);
}

static void *worker(void *arg) {
    fake *f = arg;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        while (!f->head && !f->stop) pthread_cond_wait(&f->cv, &f->mu);
        job *j = f->head;
        if (!j) break; /* stop with an empty queue */
        f->head = j->next;
        if (!f->head) f->tail = NULL;
        f->running = j;
        if (f->stop) j->cancelled = 1;
        run_job(f, j);
        f->running = NULL;
        free(j->last_user);
        free(j);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

/* "#key=N" inside text, or dflt */
static int override(const char *text, const char *key, int dflt) {
    const char *p = strstr(text, key);
    return p ? atoi(p + strlen(key)) : dflt;
}

/* the fake's "template": it renders every conversation but one whose last user message
 * says #refuse, as a chat template's raise_exception would refuse it */
static int fake_render(const chat_msg *msgs, int n, char *err, size_t errlen) {
    const char *last = "";
    for (int i = 0; i < n; i++) {
        if (strcmp(msgs[i].role, "system") && strcmp(msgs[i].role, "user") && strcmp(msgs[i].role, "assistant")) {
            snprintf(err, errlen, "unknown role '%s'", msgs[i].role);
            return -1;
        }
        if (!strcmp(msgs[i].role, "user")) last = msgs[i].content;
    }
    if (strstr(last, "#refuse")) {
        snprintf(err, errlen, "fake template: the message says #refuse");
        return -1;
    }
    return 0;
}

static int fake_check_render(fs_backend *b, const chat_msg *msgs, int n, const gen_settings *s, char *err,
                             size_t errlen) {
    (void)b, (void)s;
    if (fake_render(msgs, n, err, errlen) == 0) return 0;
    errno = EINVAL;
    return -1;
}

static uint64_t fake_submit(fs_backend *b, const chat_msg *msgs, int n, const gen_settings *s,
                            const gen_callbacks *cb, char *err, size_t errlen) {
    fake *f = (fake *)b;
    const char *last = "";
    if (fake_render(msgs, n, err, errlen)) {
        errno = EINVAL;
        return 0;
    }
    for (int i = 0; i < n; i++)
        if (!strcmp(msgs[i].role, "user")) last = msgs[i].content;
    int pt = count(msgs, n);
    if (pt >= f->ctx) {
        snprintf(err, errlen, "the prompt has %d tokens, more than the context of %d", pt, f->ctx);
        errno = EFBIG;
        return 0;
    }
    job *j = calloc(1, sizeof *j);
    if (!j || !(j->last_user = strdup(last))) {
        free(j);
        snprintf(err, errlen, "out of memory");
        errno = ENOMEM;
        return 0;
    }
    j->cb = *cb;
    j->prompt_tokens = pt;
    j->tokens = override(last, "#tokens=", f->tokens);
    j->delay_ms = override(last, "#delay=", f->delay_ms);
    j->fail_after = override(last, "#fail=", -1);
    j->max_tokens = s ? s->max_tokens : 0;
    j->think = override(last, "#think=", f->think > 0 ? f->think : 0);
    if (s && !s->enable_thinking) j->think = 0;
    if (s && s->thinking_budget >= 0 && j->think > s->thinking_budget) j->think = s->thinking_budget;
    pthread_mutex_lock(&f->mu);
    j->id = ++f->next_id;
    f->n_requests++;
    if (s && s->session && find_session(f, s->session) < 0) {
        char **p = realloc(f->sessions, (f->n_sessions + 1) * sizeof *p);
        if (p) f->sessions = p;
        if (p && (p[f->n_sessions] = strdup(s->session))) f->n_sessions++;
    }
    if (f->tail) f->tail->next = j;
    else f->head = j;
    f->tail = j;
    uint64_t id = j->id;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    return id;
}

static void fake_cancel(fs_backend *b, uint64_t id) {
    fake *f = (fake *)b;
    pthread_mutex_lock(&f->mu);
    if (f->running && f->running->id == id) f->running->cancelled = 1;
    for (job *j = f->head; j; j = j->next)
        if (j->id == id) j->cancelled = 1; /* runs at once and finishes cancelled */
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

static int fake_count(fs_backend *b, const chat_msg *msgs, int n, const gen_settings *s) {
    (void)b, (void)s;
    return count(msgs, n);
}

static int fake_context(fs_backend *b) { return ((fake *)b)->ctx; }

/* counts the sessions forgotten that requests had named (rm -r of a conversation) */
static void fake_forget(fs_backend *b, const char *session) {
    fake *f = (fake *)b;
    pthread_mutex_lock(&f->mu);
    int i = find_session(f, session);
    if (i >= 0) {
        free(f->sessions[i]);
        f->sessions[i] = f->sessions[--f->n_sessions];
        f->n_forgotten++;
    }
    pthread_mutex_unlock(&f->mu);
}

static char *fake_stats(fs_backend *b) {
    fake *f = (fake *)b;
    char *s = malloc(256);
    if (!s) return NULL;
    pthread_mutex_lock(&f->mu);
    snprintf(s, 256,
             "{\"requests\": %llu, \"tokens\": %llu, \"cancelled\": %llu, \"failed\": %llu, "
             "\"forgotten_sessions\": %llu}",
             (unsigned long long)f->n_requests, (unsigned long long)f->n_tokens,
             (unsigned long long)f->n_cancelled, (unsigned long long)f->n_failed,
             (unsigned long long)f->n_forgotten);
    pthread_mutex_unlock(&f->mu);
    return s;
}

static void fake_defaults(fs_backend *b, gen_settings *s) {
    fake *f = (fake *)b;
    gen_settings_defaults(s);
    if (f->temp_pct >= 0) s->temperature = f->temp_pct / 100.0f;
    if (f->top_k >= 0) s->top_k = f->top_k;
}

static int fake_can_think(fs_backend *b) { return ((fake *)b)->think >= 0; }

static void fake_close(fs_backend *b) {
    fake *f = (fake *)b;
    pthread_mutex_lock(&f->mu);
    f->stop = 1;
    for (job *j = f->head; j; j = j->next) j->cancelled = 1;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->thread, NULL); /* the worker drains the queue, each on_done cancelled */
    for (int i = 0; i < f->n_sessions; i++) free(f->sessions[i]);
    free(f->sessions);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    free(f);
}

fs_backend *backend_fake_open(const char *spec, char *err, size_t errlen) {
    fake *f = calloc(1, sizeof *f);
    if (!f) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    f->delay_ms = 20;
    f->tokens = 12;
    f->ctx = 4096;
    f->think = f->temp_pct = f->top_k = -1;
    int counts = 1, renders = 1;
    char *copy = strdup(spec ? spec : ""), *save = NULL;
    for (char *kv = strtok_r(copy, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        int v = eq ? atoi(eq + 1) : -1;
        if (eq) *eq = 0;
        if (eq && !strcmp(kv, "temp")) v = (int)(atof(eq + 1) * 100 + 0.5);
        int *dst = !strcmp(kv, "delay") ? &f->delay_ms : !strcmp(kv, "tokens") ? &f->tokens
                 : !strcmp(kv, "ctx") ? &f->ctx : !strcmp(kv, "prefill") ? &f->prefill_ms
                 : !strcmp(kv, "count") ? &counts : !strcmp(kv, "render") ? &renders : !strcmp(kv, "think") ? &f->think
                 : !strcmp(kv, "temp") ? &f->temp_pct : !strcmp(kv, "topk") ? &f->top_k : NULL;
        if (!dst || v < 0) {
            snprintf(err, errlen, "fake engine: bad option '%s' (delay, tokens, ctx, prefill, count, render, think, temp, topk)",
                     kv);
            free(copy);
            free(f);
            return NULL;
        }
        *dst = v;
    }
    free(copy);
    f->base = (fs_backend){.ctx = f,
                           .name = "fake",
                           .submit = fake_submit,
                           .cancel = fake_cancel,
                           .count_tokens = counts ? fake_count : NULL,
                           .check_render = renders ? fake_check_render : NULL,
                           .context = fake_context,
                           .forget_session = fake_forget,
                           .stats_json = fake_stats,
                           .close = fake_close,
                           .settings_defaults = fake_defaults,
                           .can_think = fake_can_think};
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    if (pthread_create(&f->thread, NULL, worker, f) != 0) {
        snprintf(err, errlen, "cannot start the fake engine's thread");
        free(f);
        return NULL;
    }
    return &f->base;
}
