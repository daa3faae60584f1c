/* sampler.c - see sampler.h. */
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>

struct sampler_cand {
    int id;
    float logit;
    float p;
};

void sampler_defaults(sampler_params *p) { *p = (sampler_params){0.0f, 40, 0.95f, 0.05f, 0}; }

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(uint64_t s[4]) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

int sampler_init(sampler *s, const sampler_params *p, int n_vocab) {
    s->p = *p;
    s->n_vocab = n_vocab;
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    return s->cand ? 0 : -1;
}

void sampler_free(sampler *s) {
    free(s->cand);
    s->cand = NULL;
}

/* The first index of the largest value, as the plain loop "if (x[i] > x[best]) best = i"
 * finds it (NaNs never win; x[0] a NaN wins). It runs once per token and sequence over
 * the whole vocabulary (1 MB for 248k entries) on the scheduler's thread while the pool
 * waits, so it is two passes the compiler vectorises: the maximum in 16 independent
 * lanes, then the first block of 16 that holds it. The plain loop took 1.2 ms here, a
 * tenth of a six-sequence step for six; these passes take 0.06 ms. */
int argmax(const float *x, int n) {
    enum { L = 16 };
    if (n <= 0 || x[0] != x[0]) return 0;
    float m[L], best = -INFINITY;
    for (int k = 0; k < L; k++) m[k] = -INFINITY;
    int i = 0;
    for (; i + L <= n; i += L)
        for (int k = 0; k < L; k++) m[k] = x[i + k] > m[k] ? x[i + k] : m[k];
    for (int k = 0; k < L; k++) best = m[k] > best ? m[k] : best;
    for (; i < n; i++) best = x[i] > best ? x[i] : best;
    for (i = 0; i + L <= n; i += L) {
        int hit = 0;
        for (int k = 0; k < L; k++) hit |= x[i + k] == best;
        if (hit) break;
    }
    for (; i < n; i++)
        if (x[i] == best) return i;
    return 0; /* every value a NaN or -inf after x[0] = -inf: x[0] */
}

static int by_logit_desc(const void *a, const void *b) {
    const struct sampler_cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id - y->id;
}

/* "a ranks below b": smaller logit, or equal logit and larger id */
static int below(const struct sampler_cand *a, const struct sampler_cand *b) {
    return a->logit < b->logit || (a->logit == b->logit && a->id > b->id);
}

static void sift_down(struct sampler_cand *h, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && below(&h[l], &h[m])) m = l;
        if (r < n && below(&h[r], &h[m])) m = r;
        if (m == i) return;
        struct sampler_cand t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* the k best candidates (unsorted) with a min-heap: O(n log k), not a full sort of
 * a 250k-token vocabulary on every step */
static int top_k_select(struct sampler_cand *h, const float *logits, int n, int k) {
    for (int i = 0; i < k; i++) h[i] = (struct sampler_cand){i, logits[i], 0};
    for (int i = k / 2 - 1; i >= 0; i--) sift_down(h, k, i);
    for (int i = k; i < n; i++) {
        struct sampler_cand c = {i, logits[i], 0};
        if (below(&h[0], &c)) {
            h[0] = c;
            sift_down(h, k, 0);
        }
    }
    return k;
}

/* softmax over the first n candidates (sorted), into .p */
static void softmax(struct sampler_cand *c, int n, float inv_temp) {
    double sum = 0;
    for (int i = 0; i < n; i++) {
        c[i].p = expf((c[i].logit - c[0].logit) * inv_temp);
        sum += c[i].p;
    }
    for (int i = 0; i < n; i++) c[i].p = (float)(c[i].p / sum);
}

int sampler_sample(sampler *s, const float *logits) {
    const sampler_params *p = &s->p;
    if (p->temperature <= 0.0f) return argmax(logits, s->n_vocab);
    struct sampler_cand *c = s->cand;
    int n = s->n_vocab;
    if (p->top_k > 0 && p->top_k < n) {
        n = top_k_select(c, logits, s->n_vocab, p->top_k);
    } else {
        for (int i = 0; i < n; i++) c[i] = (struct sampler_cand){i, logits[i], 0};
    }
    qsort(c, (size_t)n, sizeof *c, by_logit_desc);
    softmax(c, n, 1.0f);
    if (p->top_p < 1.0f) {
        double cum = 0;
        for (int i = 0; i < n; i++) {
            cum += c[i].p;
            if (cum >= p->top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0.0f) {
        float floor = c[0].p * p->min_p;
        int k = 1;
        while (k < n && c[k].p >= floor) k++;
        n = k;
    }
    softmax(c, n, 1.0f / p->temperature);
    double u = (double)(next_u64(s->rng) >> 11) * (1.0 / 9007199254740992.0), cum = 0;
    for (int i = 0; i < n; i++) {
        cum += c[i].p;
        if (u < cum) return c[i].id;
    }
    return c[n - 1].id;
}
