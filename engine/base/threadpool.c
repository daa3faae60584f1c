/* threadpool.c - see threadpool.h.
 *
 * A job is n chunks. The caller publishes it by storing (generation, n, next chunk = 0)
 * in one atomic word; every thread, the caller included, then claims chunks with a
 * compare-and-swap on that word until none is left, and the caller waits until all
 * claimed chunks are done. Claiming instead of a fixed chunk per thread matters on a
 * shared machine: a worker that is not running when a job is published simply claims
 * nothing, and the caller does its share instead of waiting for it (a decode step issues
 * a hundred small jobs; one descheduled worker per job would cost milliseconds each).
 * A worker that wakes up late with a stale view cannot run anything: its compare-and-swap
 * carries the old generation and fails. The chunk count travels in the same word: read
 * apart from it, a worker holding the exhausted word of a finished job could pair it
 * with the next job's larger count while that job is being published, claim a chunk
 * that does not exist and count it as done in the next job (whose caller would then
 * return before its last chunk finished).
 *
 * Idle workers spin briefly on the generation (jobs follow each other within
 * microseconds in a forward pass), yielding now and then, and then sleep on a condition
 * variable so an idle engine uses no CPU. */
#include "engine/base/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_THREADS 64
#define SPIN_ITERS 20000 /* ~tens of microseconds with a pause per iteration */
#define YIELD_EVERY 256  /* spins between sched_yield() calls while waiting */
#define MAX_CHUNKS 0xFFFF /* chunks of one published job (16 bits of the claim word) */

static struct {
    pthread_mutex_t lock;     /* guards sleeping/waking and (re)configuration */
    pthread_cond_t wake;
    pthread_mutex_t run_lock; /* one job at a time, whichever thread submits it */
    pthread_t threads[MAX_THREADS];
    int n_threads;            /* including the caller */
    atomic_uint generation;   /* bumped per job: what idle workers wait on */
    _Atomic uint64_t claim;   /* generation << 32 | chunks << 16 | next unclaimed chunk */
    atomic_int done;          /* chunks finished in the current job */
    atomic_int sleeping;      /* workers waiting on the condition variable */
    atomic_int stop;
    unsigned start_generation; /* generation when the workers were created */
    _Atomic(pool_fn) fn;      /* the current job (atomic: stale workers may read them) */
    _Atomic(void *) ctx;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER,
          .run_lock = PTHREAD_MUTEX_INITIALIZER, .n_threads = 0};

static _Thread_local int in_job;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* claims and runs chunks of job `gen` until none is left */
static void run_chunks(unsigned gen) {
    uint64_t c = atomic_load_explicit(&pool.claim, memory_order_acquire);
    for (;;) {
        if ((uint32_t)(c >> 32) != gen) return;
        const int n = (int)(c >> 16 & MAX_CHUNKS), i = (int)(c & MAX_CHUNKS);
        if (i >= n) return;
        pool_fn fn = atomic_load_explicit(&pool.fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&pool.ctx, memory_order_relaxed);
        /* success means job `gen` is still the current one (it cannot end while chunk i is
         * unclaimed), so fn/ctx read above (after c was acquired) belong to it */
        if (atomic_compare_exchange_weak_explicit(&pool.claim, &c, c + 1, memory_order_acq_rel,
                                                  memory_order_acquire)) {
            in_job = 1;
            fn(ctx, i, n);
            in_job = 0;
            atomic_fetch_add_explicit(&pool.done, 1, memory_order_release);
            c = atomic_load_explicit(&pool.claim, memory_order_acquire);
        }
    }
}

static void *worker(void *arg) {
    (void)arg;
    /* not atomic_load(&generation): a job published before this thread got here
     * would be missed */
    unsigned seen = pool.start_generation;
    for (;;) {
        int spins = 0;
        while (atomic_load_explicit(&pool.generation, memory_order_acquire) == seen && !atomic_load(&pool.stop)) {
            if (++spins < SPIN_ITERS) {
                if (spins % YIELD_EVERY == 0) sched_yield();
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&pool.lock);
            atomic_fetch_add(&pool.sleeping, 1);
            while (atomic_load(&pool.generation) == seen && !atomic_load(&pool.stop))
                pthread_cond_wait(&pool.wake, &pool.lock);
            atomic_fetch_sub(&pool.sleeping, 1);
            pthread_mutex_unlock(&pool.lock);
        }
        if (atomic_load(&pool.stop)) return NULL;
        seen = atomic_load(&pool.generation);
        run_chunks(seen);
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
            if (pthread_create(&pool.threads[i], NULL, worker, NULL) != 0) {
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

/* more chunks than the claim word holds: rounds of MAX_CHUNKS */
typedef struct {
    pool_fn fn;
    void *ctx;
    int base, n;
} round_job;

static void round_chunk(void *arg, int i, int n) {
    const round_job *r = arg;
    r->fn(r->ctx, r->base + i, r->n);
    (void)n;
}

void pool_run_n(pool_fn fn, void *ctx, int n) {
    if (n <= 0) return;
    if (in_job) { /* nested: run inline */
        for (int i = 0; i < n; i++) fn(ctx, i, n);
        return;
    }
    if (n > MAX_CHUNKS) {
        for (int base = 0; base < n; base += MAX_CHUNKS) {
            round_job r = {fn, ctx, base, n};
            pool_run_n(round_chunk, &r, n - base < MAX_CHUNKS ? n - base : MAX_CHUNKS);
        }
        return;
    }
    if (!pool.n_threads) pool_set_threads(0);
    pthread_mutex_lock(&pool.run_lock);
    if (pool.n_threads == 1 || n == 1) {
        in_job = 1;
        for (int i = 0; i < n; i++) fn(ctx, i, n);
        in_job = 0;
        pthread_mutex_unlock(&pool.run_lock);
        return;
    }
    atomic_store_explicit(&pool.fn, fn, memory_order_relaxed);
    atomic_store_explicit(&pool.ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&pool.done, 0, memory_order_relaxed);
    const unsigned gen = atomic_load(&pool.generation) + 1;
    atomic_store_explicit(&pool.claim, (uint64_t)gen << 32 | (uint64_t)n << 16, memory_order_release);
    atomic_store_explicit(&pool.generation, gen, memory_order_release);
    if (atomic_load(&pool.sleeping)) {
        pthread_mutex_lock(&pool.lock);
        pthread_cond_broadcast(&pool.wake);
        pthread_mutex_unlock(&pool.lock);
    }
    run_chunks(gen);
    /* chunks other threads claimed may still run */
    for (int spins = 1; atomic_load_explicit(&pool.done, memory_order_acquire) < n; spins++) {
        if (spins % YIELD_EVERY == 0) sched_yield();
        cpu_relax();
    }
    pthread_mutex_unlock(&pool.run_lock);
}

void pool_run(pool_fn fn, void *ctx) { pool_run_n(fn, ctx, pool_threads()); }
