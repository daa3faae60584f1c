/* cmd_bench.c - `chatfs bench`: prompt-processing and decode speed of a model on this
 * machine, as one JSON line on stdout.
 *
 *   chatfs bench -m MODEL [-t N] [--pp 512] [--tg 64] [--batch B] [--reps R]
 *
 * Measured like llama-bench / llref --bench so the numbers compare: pp = one sequence
 * fed pp random tokens from an empty state (logits of the last token only); tg = tg
 * decode steps from an empty state (with --depth D: after a prompt of D tokens, not
 * timed, as llama-bench -d), one token per step with its logits. With
 * --batch B the decode steps advance B sequences at once (one pass over the weights
 * per step) and tg_tps counts the tokens of all of them. Each figure is the median of
 * the repetitions. The machine's memory bandwidth is measured too (a sequential read
 * of the model's own weights by the same threads, before and after the runs), which gives
 * the decode roofline: bandwidth / bytes one decode step moves - the weights it reads
 * (of a mixture of experts only the chosen experts, model_usage_of) and the recurrent
 * state it reads and writes back.
 *
 * With --batch B the single-sequence decode runs too, alternating with the batched one,
 * and the line says how much faster B sequences are than one and how much faster the bytes
 * allow: a step of B tokens moves the dense weights once, the experts B tokens choose
 * (expected distinct experts of random routing: n_expert (1 - (1 - n_used/n_expert)^B)
 * per layer) and B states, so B sequences can be at most B bytes(1) / bytes(B) times one.
 *
 * With --draft N (the default for a model with an MTP head, e.g. `chatfs synth --mtp`;
 * --draft 0 skips it) it also measures speculative decoding (bench_speculative below):
 * against one plain decode step (the model loaded without its head), the step that
 * verifies k+1 tokens and one draft row of the head, k = 0..N, timed alternately from the
 * same state; from them the speed-up at a given acceptance; and a real speculative greedy
 * decode of tg tokens with its measured acceptance and passes per token. --draft-vocab V
 * drafts over the first V token ids only (mtp_set_draft_vocab).
 *
 * With --grammar-file GBNF or --json-schema SCHEMA it also measures constrained decoding
 * (bench_grammar below): greedy decode of tg tokens with every step's logits masked by the
 * grammar, against the same decode unmasked, alternating; the mask's time per step and
 * the grammar's compile time (schema to grammar included). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "engine/base/threadpool.h"
#include "engine/grammar/grammar.h"
#include "engine/kernels/kernels.h"
#include "engine/model/mtp.h"
#include "engine/model/state.h"
#include "engine/runtime/chat.h"
#include "engine/runtime/sampler.h"
#include "engine/runtime/speculative.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* value of a "Key:   123 kB" line of /proc/self/status, in MB; -1 if absent */
static double proc_status_mb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    double mb = -1;
    size_t k = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, k) && line[k] == ':') {
            mb = strtod(line + k + 1, NULL) / 1024.0;
            break;
        }
    fclose(f);
    return mb;
}

/* ---------------------------------------------------------------- bandwidth */

typedef struct {
    const float *buf;
    size_t n;
    float sink[64];
} bw_job;

static void bw_read(void *arg, int ith, int nth) {
    bw_job *j = arg;
    long b, e;
    pool_split((long)(j->n / 64), ith, nth, 1, &b, &e);
    j->sink[ith % 64] = kernels_sum_floats(j->buf + (size_t)b * 64, (size_t)(e - b) * 64);
}

/* GB/s of a sequential read of n bytes at buf by the pool's threads, best of 10 */
static double read_gbs(const void *buf, size_t bytes) {
    bw_job j = {.buf = buf, .n = bytes / sizeof(float)};
    double best = 0;
    for (int r = 0; r < 10; r++) {
        double t0 = now_s();
        pool_run(bw_read, &j);
        double gbs = (double)bytes / (now_s() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    return best;
}

/* What the roofline's bandwidth reads, where the model is large enough to leave the
 * caches: its own weights, the very pages decode reads, so only the access pattern
 * differs. NULL for a smaller model. */
static const void *weights_to_read(const model *m, size_t *bytes) {
    const gguf_file *g = m->gguf;
    const size_t weights = g->size > g->data_offset ? (size_t)(g->size - g->data_offset) : 0;
    *bytes = weights & ~(size_t)255;
    return weights >= ((size_t)256 << 20) ? g->map + g->data_offset : NULL;
}

/* GB/s of a fresh 1 GiB buffer read (for a model that fits the caches) */
static double buffer_gbs(void) {
    const size_t bytes = (size_t)1 << 30, n = bytes / sizeof(float);
    float *buf = aligned_alloc(64, bytes);
    if (!buf) return 0;
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 255);
    double gbs = read_gbs(buf, bytes);
    free(buf);
    return gbs;
}

/* bytes one decode step of B sequences moves: the weights it reads (model_usage_of: the
 * chosen experts, one embedding row per token unless they are the output head) and each
 * sequence's recurrent state, read and written back */
static double step_bytes(const model *m, int B, double *weights, double *state) {
    model_usage u;
    model_usage_of(m, B, &u);
    *weights = (double)u.bytes_active;
    *state = 2.0 * (double)m->rec_floats * sizeof(float) * B;
    return *weights + *state;
}

/* ---------------------------------------------------------------- runs */

static int *random_tokens(int n, int n_vocab, uint64_t seed) {
    int *t = malloc(sizeof *t * (size_t)(n > 0 ? n : 1));
    for (int i = 0; t && i < n; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        t[i] = (int)((seed >> 33) % (uint64_t)n_vocab);
    }
    return t;
}

/* tokens/s of one prefill of n tokens */
static double run_pp(const model *m, seq_state *s, const int *toks, int n, float *logits, arena *a) {
    state_reset(s);
    double t0 = now_s();
    if (model_prefill(m, s, toks, n, 512, logits, a) != 0) return -1;
    return n / (now_s() - t0);
}

/* tokens/s of n decode steps of B sequences, each after a prompt of depth tokens (s[0]
 * already holds that prompt when first_holds_depth: run_pp just fed it) */
static double run_tg(const model *m, seq_state **s, int B, const int *toks, int n, int depth, int first_holds_depth,
                     float *logits, arena *a) {
    batch_seq *b = calloc((size_t)B, sizeof *b);
    if (!b) return -1;
    for (int k = 0; k < B; k++) {
        if (k == 0 && first_holds_depth && depth > 0 && s[0]->n_past == depth) continue;
        state_reset(s[k]);
        if (depth > 0 && model_prefill(m, s[k], toks, depth, 512, logits, a) != 0) {
            free(b);
            return -1;
        }
    }
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < B; k++)
            b[k] = (batch_seq){.state = s[k],
                               .tokens = &toks[depth + (i + 7 * k) % n],
                               .n_tokens = 1,
                               .logits = 1,
                               .out = logits + (size_t)k * m->n_vocab};
        if (model_forward(m, b, B, a) != 0) {
            free(b);
            return -1;
        }
    }
    double dt = now_s() - t0;
    free(b);
    return (double)n * B / dt;
}

/* ---------------------------------------------------------------- constrained decoding */

/* n greedy decode steps after a prompt of np tokens (not timed): each step's token the
 * argmax of its logits, under gm's grammar only among the tokens it allows (NULL: all).
 * A sentence the grammar ends (its end-of-generation token chosen, or nothing else
 * allowed) starts over at the grammar's start, as the next reply would. Returns tokens/s
 * and adds the time the mask and the matcher took to *mask_s. */
static double run_greedy(const model *m, seq_state *s, const int *prompt, int np, int n, const grammar *gr,
                         const grammar_vocab *gv, float *logits, arena *a, double *mask_s) {
    state_reset(s);
    if (model_prefill(m, s, prompt, np, 512, logits, a) != 0) return -1;
    grammar_matcher *gm = gr ? grammar_matcher_new(gr) : NULL;
    if (gr && !gm) return -1;
    double t0 = now_s(), in_mask = 0;
    int tok = 0, rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (gm) {
            double t1 = now_s();
            if (grammar_mask_logits(gm, gv, logits) <= 0) rc = -1;
            tok = sampler_argmax(logits, m->n_vocab);
            if (rc == 0 && (tokenizer_is_eog(m->tok, tok) || grammar_accept_token(gm, gv, tok) != 0 ||
                            grammar_matcher_must_end(gm))) {
                grammar_matcher_free(gm); /* the sentence is whole: the next reply's starts */
                if (!(gm = grammar_matcher_new(gr))) rc = -1;
            }
            in_mask += now_s() - t1;
        } else
            tok = sampler_argmax(logits, m->n_vocab);
        batch_seq b = {.state = s, .tokens = &tok, .n_tokens = 1, .logits = 1, .out = logits};
        if (rc == 0 && model_forward(m, &b, 1, a) != 0) rc = -1;
    }
    double dt = now_s() - t0;
    grammar_matcher_free(gm);
    *mask_s += in_mask;
    return rc == 0 ? n / dt : -1;
}

/* Prints one JSON line: free and constrained greedy decode of tg tokens (median of reps,
 * alternating), their ratio, the mask's ms per step and the compile time. */
static int bench_grammar(const char *path, const model *m, const grammar *gr, double compile_ms, const int *toks,
                         int tg, int reps, arena *a) {
    const int np = 16;
    int rc = -1;
    double t_vocab = now_s();
    grammar_vocab *gv = grammar_vocab_from_tokenizer(m->tok);
    t_vocab = now_s() - t_vocab;
    seq_state *s = state_new(m, np + tg + 16);
    float *logits = malloc(sizeof(float) * (size_t)m->n_vocab);
    double *t_free = calloc((size_t)reps, sizeof(double)), *t_gram = calloc((size_t)reps, sizeof(double));
    double mask_s = 0, unused = 0;
    if (!gv || !s || !logits || !t_free || !t_gram) goto out;
    for (int r = 0; r < reps; r++) {
        if ((t_free[r] = run_greedy(m, s, toks, np, tg, NULL, gv, logits, a, &unused)) < 0 ||
            (t_gram[r] = run_greedy(m, s, toks, np, tg, gr, gv, logits, a, &mask_s)) < 0)
            goto out;
    }
    const double free_tps = median(t_free, reps), gram_tps = median(t_gram, reps);
    const char *base = strrchr(path, '/');
    printf("{\"model\":\"%s\",\"grammar_tg\":%d,\"free_tps\":%.2f,\"constrained_tps\":%.2f,\"ratio\":%.3f,"
           "\"mask_ms_per_step\":%.3f,\"compile_ms\":%.2f,\"vocab_trie_ms\":%.1f,\"grammar_rules\":%d,\"reps\":%d}\n",
           base ? base + 1 : path, tg, free_tps, gram_tps, free_tps > 0 ? gram_tps / free_tps : 0,
           1e3 * mask_s / ((double)tg * reps), compile_ms, 1e3 * t_vocab, grammar_n_rules(gr), reps);
    fflush(stdout);
    rc = 0;
out:
    if (rc) cli_error("bench: the constrained decode failed (out of memory, or the grammar allows no token)");
    grammar_vocab_free(gv);
    state_free(s);
    free(logits);
    free(t_free);
    free(t_gram);
    return rc;
}

/* ---------------------------------------------------------------- speculative decoding */

/* llama.cpp's published acceptance of Qwen3.5's MTP drafts, for the modelled speed-up */
#define PUBLISHED_ACCEPTANCE 0.79

/* Times (ms, median over reps) of, from the same state at position `at` (prefilled with
 * toks): one plain decode step of the model without its head (ms_plain); the verify step
 * of k+1 tokens with the head's catch-up and k captures (ms_verify[k], k = 0..N: k = 0 is a
 * plain step with the head on); one draft row (ms_draft). Each repetition runs them one
 * after the other, so that the machine's drift hits them alike. Then a speculative greedy
 * decode of tg tokens after a prompt of `at` random tokens: its tokens/s, acceptance and
 * passes. Prints one JSON line. */
static int bench_speculative(const char *path, const model *plain, model *m, int N, const int *toks, int at, int tg,
                             int reps, arena *a) {
    const int V = m->n_vocab;
    int rc = -1;
    seq_state *base = state_new(m, at + tg + N + 16), *s = state_new(m, at + tg + N + 16);
    seq_state *pbase = state_new(plain, at + 16), *ps = state_new(plain, at + 16);
    float *lg = malloc(sizeof(float) * (size_t)V), *h = malloc(sizeof(float) * (size_t)m->n_embd);
    double *t_plain = calloc((size_t)reps, sizeof(double)), *t_draft = calloc((size_t)reps, sizeof(double));
    double *t_verify = calloc((size_t)reps * (size_t)(N + 1), sizeof(double));
    spec_seq sp = {0};
    sampler smp = {0};
    sampler_params prm;
    sampler_defaults(&prm);
    prm.temperature = 0;
    if (!base || !s || !pbase || !ps || !lg || !h || !t_plain || !t_draft || !t_verify || spec_init(&sp, m, N) != 0 ||
        sampler_init(&smp, &prm, V) != 0)
        goto out;
    if (model_prefill(m, base, toks, at, 0, NULL, a) != 0 || model_prefill(plain, pbase, toks, at, 0, NULL, a) != 0)
        goto out;
    for (int i = 0; i < N; i++) sp.tokens[i] = toks[at + i];
    for (int r = -1; r < reps; r++) { /* r = -1: a warm-up */
        double t0;
        if (state_copy(ps, pbase) != 0) goto out;
        batch_seq pb = {.state = ps, .tokens = &toks[at], .n_tokens = 1, .logits = 1, .out = lg};
        t0 = now_s();
        if (model_forward(plain, &pb, 1, a) != 0) goto out;
        if (r >= 0) t_plain[r] = (now_s() - t0) * 1e3;
        for (int k = 0; k <= N; k++) {
            if (state_copy(s, base) != 0) goto out;
            sp.n_draft = k;
            batch_seq vb = spec_verify_row(&sp, s);
            t0 = now_s();
            if (model_forward(m, &vb, 1, a) != 0) goto out;
            if (r >= 0) t_verify[(size_t)k * reps + r] = (now_s() - t0) * 1e3;
        }
        mtp_row row = {.state = base, .token = toks[at], .pos = at, .h = NULL, .h_out = h, .logits = lg};
        t0 = now_s();
        if (mtp_draft(m, &row, 1, a) != 0) goto out;
        if (r >= 0) t_draft[r] = (now_s() - t0) * 1e3;
    }
    const double ms_plain = median(t_plain, reps), ms_draft = median(t_draft, reps);
    double ms_verify[SPEC_MAX_DRAFT + 1];
    for (int k = 0; k <= N; k++) ms_verify[k] = median(t_verify + (size_t)k * reps, reps);

    /* a real speculative decode after the same prompt: greedy, tg tokens */
    state_reset(s);
    if (model_prefill(m, s, toks, at, 0, lg, a) != 0) goto out;
    int n_out = 1, passes = 0, last = sampler_argmax(lg, V);
    const double t0 = now_s();
    while (n_out < tg) {
        sp.tokens[0] = last;
        const int want = tg - n_out - 1;
        spec_seq *spp = &sp;
        sampler *smpp = &smp;
        if (spec_draft(&spp, &s, &smpp, &want, 1, a) != 0) goto out;
        batch_seq vb = spec_verify_row(&sp, s);
        if (model_forward(m, &vb, 1, a) != 0) goto out;
        int step[SPEC_MAX_DRAFT + 1];
        const int c = spec_accept(&sp, &smp, step);
        spec_keep(&sp, s, c);
        n_out += c, passes++, last = step[c - 1];
    }
    const double spec_s = now_s() - t0;

    const char *b = strrchr(path, '/');
    printf("{\"model\":\"%s\",\"threads\":%d,\"draft\":%d,\"draft_vocab\":%d,\"at\":%d,\"plain_ms\":%.3f,"
           "\"draft_row_ms\":%.3f,\"verify_ms\":[",
           b ? b + 1 : path, pool_threads(), N, m->mtp->draft_vocab, at, ms_plain, ms_draft);
    for (int k = 0; k <= N; k++) printf("%s%.3f", k ? "," : "", ms_verify[k]);
    printf("],\"verify_vs_plain\":[");
    for (int k = 0; k <= N; k++) printf("%s%.3f", k ? "," : "", ms_verify[k] / ms_plain);
    /* at a per-draft acceptance p, a step of k drafts gives 1 + p + ... + p^k tokens on
     * average and costs the verify step plus k draft rows */
    printf("],\"speedup_at_%.2f\":[", PUBLISHED_ACCEPTANCE);
    for (int k = 0; k <= N; k++) {
        double tokens = 0, pk = 1;
        for (int i = 0; i <= k; i++, pk *= PUBLISHED_ACCEPTANCE) tokens += pk;
        printf("%s%.3f", k ? "," : "", tokens * ms_plain / (ms_verify[k] + k * ms_draft));
    }
    printf("],\"spec_tg\":%d,\"spec_tps\":%.2f,\"plain_tps\":%.2f,\"drafted\":%llu,\"accepted\":%llu,"
           "\"acceptance\":%.3f,\"passes_per_token\":%.3f,\"reps\":%d}\n",
           tg, (tg - 1) / spec_s, 1e3 / ms_plain, (unsigned long long)sp.drafted, (unsigned long long)sp.accepted,
           sp.drafted ? (double)sp.accepted / (double)sp.drafted : 0.0, (double)passes / (tg - 1), reps);
    rc = 0;
out:
    spec_free(&sp);
    sampler_free(&smp);
    state_free(base);
    state_free(s);
    state_free(pbase);
    state_free(ps);
    free(lg);
    free(h);
    free(t_plain);
    free(t_draft);
    free(t_verify);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    const char *path = NULL, *grammar_file = NULL, *schema_file = NULL, *ctk = NULL, *ctv = NULL;
    long threads = 0, pp = 512, tg = 64, batch = 1, reps = 3, draft = -1, draft_vocab = 0, depth = 0;
    int no_bw = 0, is_k;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-m")) path = v, i++;
        else if (!strcmp(a, "-t")) { if (!cli_int(a, v, 0, 256, &threads)) return 1; i++; }
        else if (!strcmp(a, "--pp")) { if (!cli_int(a, v, 0, 1 << 20, &pp)) return 1; i++; }
        else if (!strcmp(a, "--tg")) { if (!cli_int(a, v, 0, 1 << 20, &tg)) return 1; i++; }
        else if (!strcmp(a, "--depth")) { if (!cli_int(a, v, 0, 1 << 20, &depth)) return 1; i++; }
        else if (!strcmp(a, "--batch")) { if (!cli_int(a, v, 1, 256, &batch)) return 1; i++; }
        else if (!strcmp(a, "--reps")) { if (!cli_int(a, v, 1, 1000, &reps)) return 1; i++; }
        else if (!strcmp(a, "--draft")) { if (!cli_int(a, v, 0, SPEC_MAX_DRAFT, &draft)) return 1; i++; }
        else if (!strcmp(a, "--draft-vocab")) { if (!cli_int(a, v, 0, 1 << 30, &draft_vocab)) return 1; i++; }
        else if (!strcmp(a, "--no-bandwidth")) no_bw = 1;
        else if (!strcmp(a, "--grammar-file") && v) grammar_file = v, i++;
        else if (!strcmp(a, "--json-schema") && v) schema_file = v, i++;
        else if (cli_is_cache_type_opt(a, &is_k)) { if (!cli_cache_type(a, v, is_k ? &ctk : &ctv)) return 1; i++; }
        else { cli_error("bench: unknown option '%s'", a); return 1; }
    }
    if (!path) {
        cli_error("bench needs -m MODEL.gguf");
        return 1;
    }
    if (grammar_file && schema_file) {
        cli_error("bench: --grammar-file and --json-schema: give one of them");
        return 1;
    }
    double compile_ms = 0;
    grammar *gr = grammar_file || schema_file ? cli_load_grammar(grammar_file, schema_file, &compile_ms) : NULL;
    if ((grammar_file || schema_file) && !gr) return 1;
    pool_set_threads((int)threads);
    model *m = cli_load_model(path);
    char kv_err[256];
    if (m && engine_set_cache_types(m, ctk, ctv, kv_err, sizeof kv_err) != 0) {
        cli_error("%s", kv_err);
        model_free(m);
        m = NULL;
    }
    if (!m) {
        grammar_free(gr);
        return 1;
    }
    int rc = 1;
    const int B = (int)batch, n_tok = (int)(pp > tg + depth ? pp : tg + depth) + 32;
    int *toks = random_tokens(n_tok, m->n_vocab, 42);
    float *logits = malloc(sizeof(float) * (size_t)m->n_vocab * (size_t)B);
    seq_state **s = calloc((size_t)B, sizeof *s);
    double *tpp = calloc((size_t)reps, sizeof(double)), *ttg = calloc((size_t)reps, sizeof(double));
    double *ttg1 = calloc((size_t)reps, sizeof(double));
    arena a = {0};
    if (!toks || !logits || !s || !tpp || !ttg || !ttg1) goto oom;
    for (int k = 0; k < B; k++)
        if (!(s[k] = state_new(m, n_tok))) goto oom;

    /* warm-up: touches the weights (page cache -> mapping) and sizes the arena */
    if (run_pp(m, s[0], toks, pp < 32 ? (int)pp : 32, logits, &a) < 0 ||
        run_tg(m, s, B, toks, 2, 0, 0, logits, &a) < 0) {
        cli_error("bench: forward pass failed");
        goto out;
    }
    /* the bandwidth of the weights before and after the runs, the better of the two: this
     * machine's bandwidth drifts, and a roofline from a slow moment would flatter the runs.
     * (The 1 GiB buffer of a small model is made and read once, after the runs, so that it
     * is neither filled twice nor counted in the resident memory.) */
    size_t wread = 0;
    const void *wsrc = no_bw ? NULL : weights_to_read(m, &wread);
    double bw = wsrc ? read_gbs(wsrc, wread) : 0;
    for (int r = 0; r < reps; r++) {
        if (pp > 0 && (tpp[r] = run_pp(m, s[0], toks, (int)pp, logits, &a)) < 0) goto fail;
        /* a decode at the depth of the prompt just timed goes on from it */
        if (tg > 0 && (ttg[r] = run_tg(m, s, B, toks, (int)tg, (int)depth, pp > 0 && pp == depth, logits, &a)) < 0)
            goto fail;
        if (tg > 0 && B > 1 && (ttg1[r] = run_tg(m, s, 1, toks, (int)tg, (int)depth, 0, logits, &a)) < 0) goto fail;
    }
    double pp_tps = pp > 0 ? median(tpp, (int)reps) : 0, tg_tps = tg > 0 ? median(ttg, (int)reps) : 0;
    double tg1_tps = tg > 0 && B > 1 ? median(ttg1, (int)reps) : 0;
    double rss = proc_status_mb("VmRSS"), anon = proc_status_mb("RssAnon");
    if (!no_bw) {
        const double after = wsrc ? read_gbs(wsrc, wread) : buffer_gbs();
        if (after > bw) bw = after;
    }
    double wbytes, sbytes, wB, sB;
    const double bytes1 = step_bytes(m, 1, &wbytes, &sbytes), bytesB = step_bytes(m, B, &wB, &sB);
    const char *base = strrchr(path, '/');
    printf("{\"model\":\"%s\",\"threads\":%d,\"pp\":%ld,\"pp_tps\":%.2f,\"tg\":%ld,\"depth\":%ld,\"tg_tps\":%.2f,\"batch\":%d,"
           "\"bandwidth_gbs\":%.2f,\"roofline_tps\":%.2f,\"rss_mb\":%.0f,\"rss_anon_mb\":%.0f,\"weights_mb\":%.0f,"
           "\"state_mb\":%.1f,",
           base ? base + 1 : path, pool_threads(), pp, pp_tps, tg, depth, tg_tps, B, bw, bw * 1e9 / bytes1, rss, anon,
           wbytes / 1e6, sbytes / 1e6);
    if (B > 1) {
        model_usage u;
        model_usage_of(m, 1, &u);
        const double allowed = B * bytes1 / bytesB, got = tg1_tps > 0 ? tg_tps / tg1_tps : 0;
        if (u.moe_layers)
            printf("\"experts_per_step\":%.1f,", u.n_expert * (1.0 - pow(1.0 - (double)u.n_used / u.n_expert, B)));
        printf("\"tg1_tps\":%.2f,\"step_mb\":%.0f,\"speedup\":%.2f,\"speedup_allowed\":%.2f,\"of_allowed\":%.2f,",
               tg1_tps, bytesB / 1e6, got, allowed, allowed > 0 ? got / allowed : 0);
    }
    printf("\"kv\":\"%s/%s\",\"isa\":\"%s\",\"reps\":%ld}\n", kv_type_name(m->kv_k), kv_type_name(m->kv_v),
           kernels_name(), reps);
    fflush(stdout);
    if (m->mtp && draft != 0) { /* a second copy of the model (the weights are mapped once) with its head */
        model *ms = cli_load_model(path);
        if (!ms || !cli_speculation(ms, &draft)) {
            model_free(ms);
            goto out;
        }
        mtp_set_draft_vocab(ms, (int)draft_vocab);
        const int at = pp > 0 ? (int)pp : 128, n = (int)(tg > 8 ? tg : 8);
        int *st = random_tokens(at + n + SPEC_MAX_DRAFT + 1, m->n_vocab, 43);
        const int brc = st ? bench_speculative(path, m, ms, (int)draft, st, at, n, (int)reps, &a) : -1;
        free(st);
        model_free(ms);
        if (brc != 0) goto fail;
    } else if (draft > 0) {
        cli_error("bench: --draft needs a model with an MTP head (chatfs synth --mtp makes one)");
        goto out;
    }
    if (gr && bench_grammar(path, m, gr, compile_ms, toks, (int)(tg > 8 ? tg : 8), (int)reps, &a) != 0) goto out;
    rc = 0;
    goto out;
fail:
    cli_error("bench: forward pass failed");
    goto out;
oom:
    cli_error("bench: out of memory");
out:
    for (int k = 0; s && k < B; k++) state_free(s[k]);
    free(s);
    free(tpp);
    free(ttg);
    free(ttg1);
    free(logits);
    free(toks);
    arena_free(&a);
    model_free(m);
    grammar_free(gr);
    return rc;
}
