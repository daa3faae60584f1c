/* sampler.h - picks the next token from logits.
 *
 * temperature 0 is greedy (the lowest id wins a tie). Otherwise the filters run in
 * llama.cpp's default order on the raw logits - top-k, top-p, min-p - then the
 * survivors are scaled by 1/temperature and one is drawn with the seeded generator.
 * The same seed and logits always give the same token. */
#ifndef CHATFS_SAMPLER_H
#define CHATFS_SAMPLER_H

#include <stdint.h>

typedef struct {
    float temperature; /* 0 = greedy */
    int top_k;         /* 0 = off */
    float top_p;       /* 1 = off */
    float min_p;       /* 0 = off */
    uint64_t seed;
} sampler_params;

typedef struct {
    sampler_params p;
    uint64_t rng[4];   /* xoshiro256** */
    int n_vocab;
    struct sampler_cand *cand; /* scratch: n_vocab candidates */
    float *e;                  /* scratch: n_vocab values of exp(logit - max) */
    struct sampler_cand *tmp;  /* scratch for sorting many candidates (made on first use) */
} sampler;

void sampler_defaults(sampler_params *p);
int sampler_init(sampler *s, const sampler_params *p, int n_vocab);
void sampler_free(sampler *s);
int sampler_sample(sampler *s, const float *logits);
/* The distribution sampler_sample draws from for these logits, as n_vocab probabilities
 * (zero outside what the filters keep; one-hot at the argmax when greedy). Speculative
 * sampling compares the model's and the draft's (runtime/speculative.h). */
void sampler_probs(sampler *s, const float *logits, float *p);
/* A uniform draw in [0, 1) from the sampler's generator. */
double sampler_uniform(sampler *s);
/* An index drawn with probability w[i] / sum(w) (negative and NaN weights count as 0);
 * -1 when no weight is positive. */
int sampler_draw(sampler *s, const float *w, int n);
/* index of the largest value, lowest index on ties */
int sampler_argmax(const float *x, int n);

#endif
