/* test_sampler.c - the sampler (issue "Engine core", item 7): greedy with the lowest id
 * winning a tie; top-k, top-p and min-p keep exactly the tokens they should, computed on
 * the raw distribution (temperature comes last, as in llama.cpp's default chain);
 * temperature sharpens or flattens what is drawn; the same seed gives the same tokens. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/runtime/sampler.h"
#include "tests/check.h"

enum { V = 8, DRAWS = 20000 };

/* logits whose softmax is 0.5, 0.3, 0.15, 0.05 on ids 5, 2, 7, 0; the rest far below */
static void four(float *lg) {
    for (int i = 0; i < V; i++) lg[i] = -60.0f;
    lg[5] = logf(0.5f), lg[2] = logf(0.3f), lg[7] = logf(0.15f), lg[0] = logf(0.05f);
}

/* draws DRAWS tokens; counts[id] gets how often each came */
static void draw(const sampler_params *p, const float *lg, int *counts) {
    sampler s;
    REQUIRE(sampler_init(&s, p, V) == 0, "sampler_init");
    memset(counts, 0, sizeof(int) * V);
    int bad = 0;
    for (int i = 0; i < DRAWS; i++) {
        const int t = sampler_sample(&s, lg);
        if (t >= 0 && t < V) counts[t]++;
        else bad++;
    }
    CHECK(bad == 0, "%d tokens out of range", bad);
    sampler_free(&s);
}

/* exactly the ids in keep (terminated by -1) were drawn, each of them at least once */
static void expect_support(const int *counts, const int *keep, const char *what) {
    int want[V] = {0};
    for (int i = 0; keep[i] >= 0; i++) want[keep[i]] = 1;
    for (int i = 0; i < V; i++)
        CHECK(want[i] ? counts[i] > 0 : counts[i] == 0, "%s: token %d drawn %d times", what, i, counts[i]);
}

static sampler_params params(float temp, int top_k, float top_p, float min_p, uint64_t seed) {
    sampler_params p;
    sampler_defaults(&p);
    p.temperature = temp, p.top_k = top_k, p.top_p = top_p, p.min_p = min_p, p.seed = seed;
    return p;
}


/* A vocabulary of 20,000 (the sampler keeps its own ways for big ones: a draw without any
 * filter in id order, and without top-k a sort of only the head that top-p and min-p can
 * keep): a bulk far below and six tokens on top, 777 > 4242 > 13320 > 19999 > 10 > 11.
 * The expected probabilities come from the filters' definition on the fully sorted
 * vocabulary (double precision); the draws must keep to that support and follow them. */
enum { BIG = 20000, BIG_DRAWS = 3000 };
static float big_lg[BIG];
static int big_order[BIG];

static int by_big_logit(const void *a, const void *b) {
    const int x = *(const int *)a, y = *(const int *)b;
    if (big_lg[x] != big_lg[y]) return big_lg[x] < big_lg[y] ? 1 : -1;
    return x - y;
}

static void big_case(float temp, int top_k, float top_p, float min_p, const char *what) {
    static double want[BIG];
    double z = 0, cum = 0;
    for (int i = 0; i < BIG; i++) big_order[i] = i, want[i] = 0;
    qsort(big_order, BIG, sizeof *big_order, by_big_logit);
    const double top = big_lg[big_order[0]];
    int n = top_k > 0 && top_k < BIG ? top_k : BIG;
    for (int i = 0; i < n; i++) z += exp(big_lg[big_order[i]] - top);
    for (int i = 0; i < n && top_p < 1; i++)
        if ((cum += exp(big_lg[big_order[i]] - top) / z) >= top_p) {
            n = i + 1;
            break;
        }
    int k = 1;
    while (k < n && exp(big_lg[big_order[k]] - top) >= min_p) k++;
    double zt = 0;
    for (int i = 0; i < k; i++) zt += exp((big_lg[big_order[i]] - top) / temp);
    for (int i = 0; i < k; i++) want[big_order[i]] = exp((big_lg[big_order[i]] - top) / temp) / zt;

    sampler_params p;
    sampler_defaults(&p);
    p.temperature = temp, p.top_k = top_k, p.top_p = top_p, p.min_p = min_p, p.seed = 99;
    sampler s;
    REQUIRE(sampler_init(&s, &p, BIG) == 0, "sampler_init");
    static int counts[BIG];
    memset(counts, 0, sizeof counts);
    int outside = 0;
    for (int i = 0; i < BIG_DRAWS; i++) {
        const int t = sampler_sample(&s, big_lg);
        if (t < 0 || t >= BIG || want[t] == 0) outside++;
        else counts[t]++;
    }
    sampler_free(&s);
    CHECK(outside == 0, "%s: %d of %d draws outside the %d tokens the filters keep", what, outside, BIG_DRAWS, k);
    for (int i = 0; i < BIG; i++)
        if (want[i] > 0.01)
            CHECK(fabs((double)counts[i] / BIG_DRAWS - want[i]) < 0.035, "%s: token %d drawn %.3f, want %.3f", what,
                  i, (double)counts[i] / BIG_DRAWS, want[i]);
}

static void big_vocabulary(void) {
    uint64_t r = 5;
    for (int i = 0; i < BIG; i++) {
        r = r * 6364136223846793005ULL + 1;
        big_lg[i] = -14.0f + 6.0f * (float)(r >> 40) / 16777216.0f; /* the bulk: [-14, -8) */
    }
    big_lg[777] = 4.0f, big_lg[4242] = 3.6f, big_lg[13320] = 3.2f, big_lg[19999] = 3.0f;
    big_lg[10] = 1.2f, big_lg[11] = 0.8f;
    big_case(1.0f, 0, 1.0f, 0.0f, "big, no filter"); /* every token; the bulk holds 0.8 % */
    big_case(0.7f, 0, 1.0f, 0.0f, "big, no filter, temperature 0.7");
    big_case(1.0f, 0, 0.9f, 0.0f, "big, top-p 0.9");    /* 777, 4242, 13320, 19999 */
    big_case(1.0f, 0, 1.0f, 0.05f, "big, min-p 0.05");  /* and 10 (e^-2.8), not 11 (e^-3.2) */
    big_case(0.8f, 0, 0.999f, 0.0f, "big, top-p 0.999"); /* well into the bulk */
    big_case(1.0f, 0, 0.95f, 0.05f, "big, top-p 0.95 and min-p 0.05");
    big_case(1.0f, 3, 1.0f, 0.0f, "big, top-k 3");     /* the top-k heap passes over blocks */
    big_case(1.0f, 6, 1.0f, 0.0f, "big, top-k 6");     /* down to 11 */
    big_case(0.7f, 40, 0.95f, 0.05f, "big, the filesystem's defaults"); /* 13320 starts a block */
}

int main(void) {
    float lg[V];
    int counts[V];

    /* greedy: the largest logit, the lowest id on a tie, whatever the filters */
    const float tie[V] = {0, 3, 1, 3, -2, 3, 0, 2};
    sampler_params p = params(0, 40, 0.95f, 0.05f, 1);
    draw(&p, tie, counts);
    CHECK(counts[1] == DRAWS, "greedy picks the lowest of the tied ids (1), %d of %d", counts[1], DRAWS);
    CHECK(sampler_argmax(tie, V) == 1, "argmax of a tie");

    /* argmax runs in vector passes over blocks of 16: against the plain loop on lengths
     * around the blocks, few distinct values (ties across and within blocks), NaNs,
     * infinities and signed zeros */
    {
        enum { N = 300 };
        float x[N];
        uint64_t r = 7;
        int bad = 0;
        for (int trial = 0; trial < 4000; trial++) {
            const int n = 1 + (int)((r = r * 6364136223846793005ULL + 1) >> 33) % N;
            for (int i = 0; i < n; i++) {
                const int v = (int)((r = r * 6364136223846793005ULL + 1) >> 33) % 40;
                x[i] = v == 0   ? NAN
                       : v == 1 ? -INFINITY
                       : v == 2 ? -0.0f
                       : v == 3 ? (trial % 5 ? 5.0f : INFINITY)
                                : (float)(v % 9) - 4;
            }
            int want = 0;
            for (int i = 1; i < n; i++)
                if (x[i] > x[want]) want = i;
            if (sampler_argmax(x, n) != want) bad++;
        }
        CHECK(bad == 0, "argmax differs from the plain loop in %d of 4000 vectors", bad);
    }

    /* no filters, temperature 1: the softmax itself */
    four(lg);
    p = params(1, 0, 1, 0, 42);
    draw(&p, lg, counts);
    const float want[V] = {0.05f, 0, 0.3f, 0, 0, 0.5f, 0, 0.15f};
    for (int i = 0; i < V; i++)
        CHECK(fabsf((float)counts[i] / DRAWS - want[i]) < 0.015f, "temperature 1: token %d drawn %.3f, want %.2f", i,
              (double)counts[i] / DRAWS, (double)want[i]);
    expect_support(counts, (const int[]){0, 2, 5, 7, -1}, "no filters");

    /* top-k */
    p = params(1, 1, 1, 0, 3);
    draw(&p, lg, counts);
    expect_support(counts, (const int[]){5, -1}, "top-k 1");
    p = params(1, 3, 1, 0, 3);
    draw(&p, lg, counts);
    expect_support(counts, (const int[]){2, 5, 7, -1}, "top-k 3");

    /* top-p: the smallest set reaching p (0.5 < 0.7 <= 0.8) */
    p = params(1, 0, 0.7f, 0, 4);
    draw(&p, lg, counts);
    expect_support(counts, (const int[]){2, 5, -1}, "top-p 0.7");
    CHECK(fabsf((float)counts[5] / DRAWS - 0.625f) < 0.015f, "top-p 0.7 renormalises: 0.5 / 0.8, got %.3f",
          (double)counts[5] / DRAWS);
    /* ... on the raw distribution: at temperature 5 the same two tokens (scaled first,
     * 0.7 would need three) */
    p = params(5, 0, 0.7f, 0, 4);
    draw(&p, lg, counts);
    expect_support(counts, (const int[]){2, 5, -1}, "top-p 0.7 before temperature 5");

    /* min-p: p >= min_p * p_max (0.2 * 0.5 = 0.1 keeps 0.15, drops 0.05) */
    p = params(1, 0, 1, 0.2f, 5);
    draw(&p, lg, counts);
    expect_support(counts, (const int[]){2, 5, 7, -1}, "min-p 0.2");
    p = params(1, 0, 1, 0.7f, 5);
    draw(&p, lg, counts);
    expect_support(counts, (const int[]){5, -1}, "min-p 0.7");

    /* the filters together, in llama.cpp's order: top-k 3 -> {5, 2, 7}; top-p 0.95 of
     * those three renormalised (0.53, 0.32, 0.16) keeps them all; min-p 0.4 -> {5, 2} */
    p = params(1, 3, 0.95f, 0.4f, 6);
    draw(&p, lg, counts);
    expect_support(counts, (const int[]){2, 5, -1}, "top-k, top-p, min-p");

    /* temperature: low sharpens towards the best token, high flattens */
    p = params(0.1f, 0, 1, 0, 7);
    draw(&p, lg, counts);
    CHECK(counts[5] > DRAWS * 99 / 100, "temperature 0.1: the best token %d of %d", counts[5], DRAWS);
    p = params(5, 0, 1, 0, 7);
    draw(&p, lg, counts);
    CHECK(counts[0] > DRAWS / 8 && counts[5] < DRAWS * 2 / 5, "temperature 5 flattens: %d, %d", counts[0], counts[5]);

    /* the same seed, the same tokens; another seed, other tokens */
    int a[64], b[64], c[64];
    sampler sa, sb, sc;
    p = params(1, 0, 1, 0, 1234);
    sampler_init(&sa, &p, V);
    sampler_init(&sb, &p, V);
    p.seed = 1235;
    sampler_init(&sc, &p, V);
    for (int i = 0; i < 64; i++) {
        a[i] = sampler_sample(&sa, lg);
        b[i] = sampler_sample(&sb, lg);
        c[i] = sampler_sample(&sc, lg);
    }
    CHECK(!memcmp(a, b, sizeof a), "the same seed gave different tokens");
    CHECK(memcmp(a, c, sizeof a), "seeds 1234 and 1235 gave the same 64 tokens");
    sampler_free(&sa);
    sampler_free(&sb);
    sampler_free(&sc);
    big_vocabulary();
    return check_report("test_sampler");
}
