/* sampler.c - see sampler.h. */
#include "engine/runtime/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/layers/ops.h"

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
    s->e = malloc((size_t)n_vocab * sizeof *s->e);
    s->tmp = NULL; /* made when a sort needs it */
    if (s->cand && s->e) return 0;
    sampler_free(s);
    return -1;
}

void sampler_free(sampler *s) {
    free(s->cand);
    free(s->e);
    free(s->tmp);
    s->cand = NULL;
    s->e = NULL;
    s->tmp = NULL;
}

static double uniform(sampler *s) { return (double)(next_u64(s->rng) >> 11) * (1.0 / 9007199254740992.0); }

/* The largest of n > 0 values (NaNs never win; -inf when there is nothing else), in 16
 * independent lanes so that the compiler vectorises the loop. */
static float max_value(const float *x, int n) {
    enum { L = 16 };
    float m[L], best = -INFINITY;
    for (int k = 0; k < L; k++) m[k] = -INFINITY;
    int i = 0;
    for (; i + L <= n; i += L)
        for (int k = 0; k < L; k++) m[k] = x[i + k] > m[k] ? x[i + k] : m[k];
    for (int k = 0; k < L; k++) best = m[k] > best ? m[k] : best;
    for (; i < n; i++) best = x[i] > best ? x[i] : best;
    return best;
}

/* The first index of the largest value, as the plain loop "if (x[i] > x[best]) best = i"
 * finds it (NaNs never win; x[0] a NaN wins). It runs once per token and sequence over
 * the whole vocabulary (1 MB for 248k entries) on the scheduler's thread while the pool
 * waits, so it is two passes the compiler vectorises: the maximum, then the first block of
 * 16 that holds it. The plain loop took 1.2 ms here, a tenth of a six-sequence step for
 * six; these passes take 0.06 ms. */
int sampler_argmax(const float *x, int n) {
    enum { L = 16 };
    if (n <= 0 || x[0] != x[0]) return 0;
    const float best = max_value(x, n);
    int i = 0;
    for (; i + L <= n; i += L) {
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
 * a 250k-token vocabulary on every step. Soon the heap's least is above nearly every
 * logit, so blocks of 16 with none above it are passed over whole (a later candidate
 * that only ties the least has a larger id, so it ranks below): one vector compare per
 * block instead of a branch per candidate. */
static int top_k_select(struct sampler_cand *h, const float *logits, int n, int k) {
    enum { L = 16 };
    for (int i = 0; i < k; i++) h[i] = (struct sampler_cand){i, logits[i], 0};
    for (int i = k / 2 - 1; i >= 0; i--) sift_down(h, k, i);
    for (int i = k; i < n;) {
        if (i + L <= n) {
            const float least = h[0].logit;
            int above = 0; /* (a NaN is never above, nor taken below) */
            for (int j = 0; j < L; j++) above |= logits[i + j] > least;
            if (!above) {
                i += L;
                continue;
            }
        }
        for (const int end = i + L < n ? i + L : n; i < end; i++) {
            struct sampler_cand c = {i, logits[i], 0};
            if (below(&h[0], &c)) {
                h[0] = c;
                sift_down(h, k, 0);
            }
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

/* The order of by_logit_desc (largest logit first, ties by id) for candidates gathered in
 * id order: stable radix passes over the logit's bits, 8 at a time, for many of them
 * (tens of thousands survive min-p on a flat distribution; qsort took milliseconds). */
static uint32_t descending_key(float logit) {
    uint32_t u;
    memcpy(&u, &logit, sizeof u);
    if (logit == 0.0f) u = 0; /* -0 and +0 tie, as they compare */
    u = u & 0x80000000u ? ~u : u | 0x80000000u; /* ascending as unsigned */
    return ~u;
}

static void sort_gathered(sampler *s, struct sampler_cand *c, int n) {
    if (n < 512 || (!s->tmp && !(s->tmp = malloc((size_t)s->n_vocab * sizeof *s->tmp)))) {
        qsort(c, (size_t)n, sizeof *c, by_logit_desc);
        return;
    }
    struct sampler_cand *from = c, *to = s->tmp;
    for (int shift = 0; shift < 32; shift += 8) { /* an even number of passes: ends in c */
        int at[257] = {0};
        for (int i = 0; i < n; i++) at[(descending_key(from[i].logit) >> shift & 0xff) + 1]++;
        for (int d = 0; d < 256; d++) at[d + 1] += at[d];
        for (int i = 0; i < n; i++) to[at[descending_key(from[i].logit) >> shift & 0xff]++] = from[i];
        struct sampler_cand *t = from;
        from = to;
        to = t;
    }
}

/* Without top-k, top-p and min-p keep a head of the whole vocabulary's distribution, so
 * only the candidates that can survive them are sorted (sorting all 248k took 83 ms a
 * token). e = exp(l - max) of every token in one vector pass; its sum is the softmax's.
 * Top-p keeps a prefix of the sorted tokens, which lies inside the tokens whose e has one
 * of the largest binary exponents that together hold top_p of the mass (one pass tallies
 * the mass by exponent; the next exponent that has tokens is kept too, a margin for the
 * rounded shares top-p adds up); min-p keeps e >= min_p (the top token's e is 1). The
 * candidates come out sorted, .p their share of the whole vocabulary's mass, as softmax()
 * would give it over all of them. Returns how many; 0 when the logits hold a NaN or an
 * infinity. */
static int head_of_vocabulary(sampler *s, const float *logits) {
    const sampler_params *p = &s->p;
    const int n = s->n_vocab;
    float *e = s->e;
    const double z = vec_softmax_exp(e, logits, max_value(logits, n), n);
    if (!(z >= 1.0) || !isfinite(z)) return 0;
    float bound = 0;
    if (p->top_p < 1.0f) {
        enum { EXPONENTS = 64 };
        double mass[EXPONENTS + 1] = {0}; /* [b]: e in [2^-b, 2^(1-b)); the last: smaller */
        for (int i = 0; i < n; i++) {
            uint32_t bits;
            memcpy(&bits, &e[i], sizeof bits);
            const int b = 127 - (int)(bits >> 23 & 0xff);
            mass[b < 0 ? 0 : b > EXPONENTS ? EXPONENTS : b] += e[i];
        }
        double cum = 0;
        int b = 0;
        while (b < EXPONENTS && (cum += mass[b]) < (double)p->top_p * z) b++;
        do b++;
        while (b < EXPONENTS && mass[b] == 0);
        bound = b < EXPONENTS ? ldexpf(1.0f, -b) : 0;
    }
    if (p->min_p > 0.0f && p->min_p * 0.999f > bound) bound = p->min_p * 0.999f;
    struct sampler_cand *c = s->cand;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (e[i] >= bound) c[k++] = (struct sampler_cand){i, logits[i], e[i]};
    sort_gathered(s, c, k);
    for (int i = 0; i < k; i++) c[i].p = (float)(c[i].p / z);
    return k;
}

/* What sampler_sample draws from: */
enum {
    DIST_ARGMAX, /* greedy, or no distribution at all (a NaN or an infinity): the argmax */
    DIST_ALL,    /* no filter: s->e holds exp(l/T - max) of every token, *z their sum */
    DIST_CANDS   /* *n > 0 candidates in s->cand, sorted, .p their probabilities */
};

static int distribution(sampler *s, const float *logits, int *n_out, double *z_out) {
    const sampler_params *p = &s->p;
    if (p->temperature <= 0.0f) return DIST_ARGMAX;
    struct sampler_cand *c = s->cand;
    int n;
    if (p->top_k > 0 && p->top_k < s->n_vocab) {
        n = top_k_select(c, logits, s->n_vocab, p->top_k);
        qsort(c, (size_t)n, sizeof *c, by_logit_desc);
        softmax(c, n, 1.0f);
    } else if (p->top_p >= 1.0f && p->min_p <= 0.0f) {
        /* softmax(l / T) over the whole vocabulary, in id order (nothing needs sorting) */
        float *e = s->e;
        const float inv_temp = 1.0f / p->temperature;
        for (int i = 0; i < s->n_vocab; i++) e[i] = logits[i] * inv_temp;
        const double z = vec_softmax_exp(e, e, max_value(e, s->n_vocab), s->n_vocab);
        if (!(z >= 1.0) || !isfinite(z)) return DIST_ARGMAX;
        *z_out = z;
        return DIST_ALL;
    } else if (!(n = head_of_vocabulary(s, logits)))
        return DIST_ARGMAX;
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
    *n_out = n;
    return DIST_CANDS;
}

int sampler_sample(sampler *s, const float *logits) {
    int n = 0;
    double z = 0;
    switch (distribution(s, logits, &n, &z)) {
    case DIST_ARGMAX:
        return sampler_argmax(logits, s->n_vocab);
    case DIST_ALL: { /* one draw in id order */
        const float *e = s->e;
        const double u = uniform(s) * z;
        double cum = 0;
        int last = 0;
        for (int i = 0; i < s->n_vocab; i++) {
            if (e[i] > 0) last = i;
            cum += e[i];
            if (u < cum) return i;
        }
        return last; /* u above the rounded total: the last token that can be drawn */
    }
    default: {
        const struct sampler_cand *c = s->cand;
        double u = uniform(s), cum = 0;
        for (int i = 0; i < n; i++) {
            cum += c[i].p;
            if (u < cum) return c[i].id;
        }
        return c[n - 1].id;
    }
    }
}

void sampler_probs(sampler *s, const float *logits, float *out) {
    int n = 0;
    double z = 0;
    memset(out, 0, sizeof *out * (size_t)s->n_vocab);
    switch (distribution(s, logits, &n, &z)) {
    case DIST_ARGMAX:
        out[sampler_argmax(logits, s->n_vocab)] = 1.0f;
        break;
    case DIST_ALL:
        for (int i = 0; i < s->n_vocab; i++) out[i] = (float)(s->e[i] / z);
        break;
    default:
        for (int i = 0; i < n; i++) out[s->cand[i].id] = s->cand[i].p;
    }
}

double sampler_uniform(sampler *s) { return uniform(s); }

int sampler_draw(sampler *s, const float *w, int n) {
    double total = 0;
    int last = -1;
    for (int i = 0; i < n; i++)
        if (w[i] > 0) {
            total += w[i];
            last = i;
        }
    if (last < 0) return -1;
    const double u = uniform(s) * total;
    double cum = 0;
    for (int i = 0; i < n; i++) {
        if (!(w[i] > 0)) continue;
        cum += w[i];
        if (u < cum) return i;
    }
    return last;
}
