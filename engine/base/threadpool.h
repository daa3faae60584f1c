/* threadpool.h - one persistent pool of worker threads for the whole process.
 *
 * A job is n chunks fn(ctx, i, n), i = 0..n-1: each runs exactly once, on whichever
 * thread claims it first - the calling thread takes part, and a worker that is not
 * running at the time (the machine is shared) simply claims nothing, so the caller never
 * waits for a thread that has not started. Workers spin briefly between jobs (a decode
 * step issues hundreds of small jobs) and sleep when the engine is idle. A pool_run
 * issued from inside a job runs inline on the calling thread. Per-chunk scratch indexed
 * by i is safe: no two threads run the same i. */
#ifndef CHATFS_THREADPOOL_H
#define CHATFS_THREADPOOL_H

typedef void (*pool_fn)(void *ctx, int ith, int nth);

/* Sets the number of threads (including the caller); 0 = number of CPUs. May be
 * called again to resize when no job is running. */
void pool_set_threads(int n);
int pool_threads(void);
/* Runs fn(ctx, i, n) for i = 0..n-1 in parallel and waits for all; n = pool_threads(). */
void pool_run(pool_fn fn, void *ctx);
/* The same with n chunks (more chunks than threads balance uneven or interrupted work). */
void pool_run_n(pool_fn fn, void *ctx, int n);
/* fn over `rows` independent rows (fn splits them with pool_split): on the pool from two
 * rows (a prompt, or a batch of sequences: six rows of norms, gates and rotations took 2.5
 * ms of a step on one thread against 1.8 ms of job time), else on the caller (one
 * sequence's decode step, where a job would cost more than the row). */
#define POOL_MIN_ROWS 2
static inline void pool_run_rows(pool_fn fn, void *ctx, long rows) {
    if (rows >= POOL_MIN_ROWS)
        pool_run(fn, ctx);
    else
        fn(ctx, 0, 1);
}
/* Stops the workers (tests call it at exit so leak checkers stay quiet). */
void pool_shutdown(void);

/* The [begin, end) share of ith among nth for n items, in chunks of `align`. */
static inline void pool_split(long n, int ith, int nth, long align, long *begin, long *end) {
    long chunks = (n + align - 1) / align;
    long per = chunks / nth, extra = chunks % nth;
    long c0 = ith * per + (ith < extra ? ith : extra);
    long c1 = c0 + per + (ith < extra ? 1 : 0);
    *begin = c0 * align < n ? c0 * align : n;
    *end = c1 * align < n ? c1 * align : n;
}

/* The share of chunk i of n when chunks are claimed in order by whichever thread is free:
 * sizes fall linearly (chunk i is about (2(n - i) - 1) / n^2 of the items), so the big ones
 * go first and the last are small - a thread that finishes early waits at most for a
 * small chunk of the other's. */
static inline void pool_split_guided(long n, int i, int chunks, long align, long *begin, long *end) {
    const long units = (n + align - 1) / align, c = chunks;
    const long r0 = c - i, r1 = c - i - 1;
    const long u0 = units - units * r0 * r0 / (c * c), u1 = units - units * r1 * r1 / (c * c);
    *begin = u0 * align < n ? u0 * align : n;
    *end = u1 * align < n ? u1 * align : n;
}

#endif
