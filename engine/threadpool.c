/* threadpool.c - see threadpool.h.
 *
 * A job is published by bumping `generation`; workers wait for a new generation,
 * run their share, then count themselves done. Waiting is a short spin on the
 * atomic (cheap when jobs follow each other within microseconds, as in a forward
 * pass) and then a condition variable (so an idle engine uses no CPU). */
#include "engine/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_THREADS 64
#define SPIN_ITERS 20000 /* ~tens of microseconds with a pause per iteration */

static struct {
    pthread_mutex_t lock;     /* guards sleeping/waking and (re)configuration */
    pthread_cond_t wake;
    pthread_mutex_t run_lock; /* one job at a time, whichever thread submits it */
    pthread_t threads[MAX_THREADS];
    int n_threads;            /* including the caller */
    atomic_uint generation;
    atomic_int pending;       /* workers still running the current job */
    atomic_int stop;
    unsigned start_generation; /* generation when the workers were created */
    pool_fn fn;
    void *ctx;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER,
          .run_lock = PTHREAD_MUTEX_INITIALIZER, .n_threads = 0};

static _Thread_local int in_job;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker(void *arg) {
    int ith = (int)(long)arg;
    /* not atomic_load(&generation): a job published before this thread got here
     * would be missed, and its caller would wait forever */
    unsigned seen = pool.start_generation;
    for (;;) {
        int spins = 0;
        while (atomic_load_explicit(&pool.generation, memory_order_acquire) == seen && !atomic_load(&pool.stop)) {
            if (++spins < SPIN_ITERS) {
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&pool.lock);
            while (atomic_load(&pool.generation) == seen && !atomic_load(&pool.stop))
                pthread_cond_wait(&pool.wake, &pool.lock);
            pthread_mutex_unlock(&pool.lock);
        }
        if (atomic_load(&pool.stop)) return NULL;
        seen = atomic_load(&pool.generation);
        in_job = 1;
        pool.fn(pool.ctx, ith, pool.n_threads);
        in_job = 0;
        atomic_fetch_sub_explicit(&pool.pending, 1, memory_order_release);
    }
}

static void stop_workers(void) {
    pthread_mutex_lock(&pool.lock);
    atomic_store(&pool.stop, 1);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    for (int i = 1; i < pool.n_threads; i++) pthread_join(pool.threads[i], NULL);
    atomic_store(&pool.stop, 0);
    pool.n_threads = 0;
}

void pool_set_threads(int n) {
    if (n <= 0) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    if (n > MAX_THREADS) n = MAX_THREADS;
    pthread_mutex_lock(&pool.run_lock);
    if (n != pool.n_threads) {
        if (pool.n_threads) stop_workers();
        pool.n_threads = n;
        pool.start_generation = atomic_load(&pool.generation);
        for (int i = 1; i < n; i++)
            if (pthread_create(&pool.threads[i], NULL, worker, (void *)(long)i) != 0) {
                pool.n_threads = i; /* run with what we could start */
                break;
            }
    }
    pthread_mutex_unlock(&pool.run_lock);
}

int pool_threads(void) { return pool.n_threads ? pool.n_threads : 1; }

void pool_shutdown(void) {
    pthread_mutex_lock(&pool.run_lock);
    if (pool.n_threads) stop_workers();
    pthread_mutex_unlock(&pool.run_lock);
}

void pool_run(pool_fn fn, void *ctx) {
    if (in_job) { /* nested: run inline */
        fn(ctx, 0, 1);
        return;
    }
    if (!pool.n_threads) pool_set_threads(0);
    pthread_mutex_lock(&pool.run_lock);
    int n = pool.n_threads;
    if (n == 1) {
        in_job = 1;
        fn(ctx, 0, 1);
        in_job = 0;
        pthread_mutex_unlock(&pool.run_lock);
        return;
    }
    pool.fn = fn;
    pool.ctx = ctx;
    atomic_store(&pool.pending, n - 1);
    pthread_mutex_lock(&pool.lock);
    atomic_fetch_add_explicit(&pool.generation, 1, memory_order_release);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    in_job = 1;
    fn(ctx, 0, n);
    in_job = 0;
    while (atomic_load_explicit(&pool.pending, memory_order_acquire) > 0) cpu_relax();
    pthread_mutex_unlock(&pool.run_lock);
}
