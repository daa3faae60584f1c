/* test_sampler.c - the sampler (issue "Engine core", item 7): greedy with the lowest id
 * winning a tie; top-k, top-p and min-p keep exactly the tokens they should, computed on
 * the raw distribution (temperature comes last, as in llama.cpp's default chain);
 * temperature sharpens or flattens what is drawn; the same seed gives the same tokens. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/sampler.h"
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

int main(void) {
    float lg[V];
    int counts[V];

    /* greedy: the largest logit, the lowest id on a tie, whatever the filters */
    const float tie[V] = {0, 3, 1, 3, -2, 3, 0, 2};
    sampler_params p = params(0, 40, 0.95f, 0.05f, 1);
    draw(&p, tie, counts);
    CHECK(counts[1] == DRAWS, "greedy picks the lowest of the tied ids (1), %d of %d", counts[1], DRAWS);
    CHECK(argmax(tie, V) == 1, "argmax of a tie");

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
                x[i] = v == 0 ? NAN : v == 1 ? -INFINITY : v == 2 ? -0.0f : v == 3 ? (trial % 5 ? 5.0f : INFINITY) : (float)(v % 9) - 4;
            }
            int want = 0;
            for (int i = 1; i < n; i++)
                if (x[i] > x[want]) want = i;
            if (argmax(x, n) != want) bad++;
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
    return check_report("test_sampler");
}
