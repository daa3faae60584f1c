/* test_speculative.c - speculative decoding with the MTP head (issue "Speculative
 * decoding", acceptance), on each of llama.cpp's MTP fixtures - qwen35-tiny-mtp-f32 (a
 * dense FFN in the head's block) and qwen35moe-tiny-mtp-f32 (8 experts, top 2, and a gated
 * shared expert, as the trunk's blocks):
 *   - llama.cpp's speculative run (drafts of up to 3): every step's position, last token,
 *     drafts, the model's tokens over the verify rows and the accepted count, the totals,
 *     and the tokens (= plain greedy), for the short and the long prompt;
 *   - for every split point of the short sequence (and every 25th of the long one) and N in
 *     1..4: speculative greedy gives plain greedy's tokens, and after every step the state
 *     (length, recurrent blob, every KV slot's rows, the head's included) is plain
 *     decoding's, bit for bit;
 *   - drafts over the first 300 token ids only: -inf logits past them, plain greedy's tokens;
 *   - a checkpoint (through the checkpoint store) taken between steps and restored into a
 *     fresh state goes on with the same drafts, acceptances and tokens as the uninterrupted
 *     run;
 *   - six sequences drafting in the same passes and verified in one model pass (beside a
 *     plain decode row and a prefill slice) give each its tokens and states alone;
 *   - sampling: the speculative-sampling rule leaves the distribution unchanged, on a toy
 *     model of 4 tokens (exact sequence probabilities against 200,000 draws) and on the
 *     MTP model itself (its first two tokens at temperature 1.5, top-k 6, against the
 *     exact distribution). */
#include "engine/base/threadpool.h"
#include "engine/model/mtp.h"
#include "engine/runtime/prefix_cache.h"
#include "engine/runtime/speculative.h"
#include "engine/base/hash.h"
#include "tests/engine_db.h"
#include "tests/parity.h"

/* The MTP model under test (main runs every one) and its fixture files. */
static const char *NAME;
static const char *fixture(const char *suffix) {
    static char path[256];
    snprintf(path, sizeof path, FIXTURES "%s%s", NAME, suffix);
    return path;
}

/* ---------------------------------------------------------------- one sequence */

typedef struct {
    int tokens[512];
    int n;
    int steps, drafted, accepted;
    int step_pos[256], step_last[256], step_drafts[256][SPEC_MAX_DRAFT], step_n[256], step_acc[256];
} run_log;

/* states equal bit for bit: length, recurrent blob, the KV rows of every slot below it */
static int same_state(const seq_state *a, const seq_state *b) {
    if (a->n_past != b->n_past || memcmp(a->rec, b->rec, sizeof(float) * a->m->rec_floats)) return 0;
    for (int i = 0; i < a->m->n_kv_slots; i++) {
        const size_t rows = (size_t)a->n_past;
        if (memcmp(a->k[i], b->k[i], rows * state_k_row_bytes(a->m, i)) ||
            memcmp(a->v[i], b->v[i], rows * state_v_row_bytes(a->m, i)))
            return 0;
    }
    return 1;
}

/* Greedy, one token at a time: plain decoding of st (whose last logits are lg) until
 * st->n_past == upto, checking the tokens it feeds against want[]. */
static int plain_until(const model *m, seq_state *st, float *lg, const int *want, int upto, arena *a) {
    for (int i = 0; st->n_past < upto; i++) {
        if (sampler_argmax(lg, m->n_vocab) != want[i]) return 0;
        batch_seq b = {.state = st, .tokens = &want[i], .n_tokens = 1, .logits = 1, .out = lg};
        if (model_forward(m, &b, 1, a) != 0) return 0;
    }
    return 1;
}

/* Speculative greedy decoding of `gen` tokens from st (prefilled; first = the token its
 * logits give), logging each step; with `plain` (prefilled alike), after every step the
 * plain state is brought to the same length and must be the same state. */
static void spec_run(const model *m, seq_state *st, spec_seq *sp, sampler *smp, int first, int gen, run_log *log,
                     seq_state *plain, float *plain_lg, arena *a) {
    log->n = 0;
    log->tokens[log->n++] = first;
    while (log->n < gen) {
        sp->tokens[0] = log->tokens[log->n - 1];
        const int want = gen - log->n - 1;
        REQUIRE(spec_draft(&sp, &st, &smp, &want, 1, a) == 0, "draft failed");
        batch_seq b = spec_verify_row(sp, st);
        REQUIRE(model_forward(m, &b, 1, a) == 0, "verify failed");
        int out[SPEC_MAX_DRAFT + 1];
        const int k = spec_accept(sp, smp, out);
        const int s = log->steps++;
        log->step_pos[s] = sp->pos0, log->step_last[s] = sp->tokens[0], log->step_n[s] = sp->n_draft;
        log->step_acc[s] = k - 1;
        memcpy(log->step_drafts[s], sp->tokens + 1, sizeof(int) * (size_t)sp->n_draft);
        log->drafted += sp->n_draft, log->accepted += k - 1;
        spec_keep(sp, st, k);
        for (int i = 0; i < k; i++) log->tokens[log->n++] = out[i];
        if (plain) {
            CHECK(plain_until(m, plain, plain_lg, log->tokens + (plain->n_past - (st->n_past - log->n + 1)),
                              st->n_past, a),
                  "plain greedy differs from the speculative tokens before position %d", st->n_past);
            CHECK(same_state(st, plain), "the state after a step to %d differs from plain decoding's", st->n_past);
        }
    }
}

/* ---------------------------------------------------------------- llama.cpp's run */

static void oracle_trace(const model *m, const char *suffix, arena *a) {
    char path[256];
    snprintf(path, sizeof path, FIXTURES "%s%s.json", NAME, suffix);
    cJSON *ref = read_json(path);
    REQUIRE(ref, "cannot read %s", path);
    const cJSON *mt = cJSON_GetObjectItem(ref, "mtp"), *spec = cJSON_GetObjectItem(mt, "spec");
    int n_prompt, n_gen, nt;
    int *prompt = json_ints(ref, "prompt_tokens", &n_prompt), *greedy = json_ints(ref, "gen_tokens", &n_gen);
    int *tokens = json_ints(spec, "tokens", &nt);
    const int N = cJSON_GetObjectItem(spec, "draft_max")->valueint;
    seq_state *st = state_new(m, 0);
    float *lg = malloc(sizeof(float) * m->n_vocab);
    spec_seq sp;
    sampler smp;
    sampler_params p;
    sampler_defaults(&p);
    p.temperature = 0;
    REQUIRE(st && lg && spec_init(&sp, m, N) == 0 && sampler_init(&smp, &p, m->n_vocab) == 0, "setup failed");
    REQUIRE(model_prefill(m, st, prompt, n_prompt, 0, lg, a) == 0, "prefill failed");
    run_log *log = calloc(1, sizeof *log);
    spec_run(m, st, &sp, &smp, sampler_argmax(lg, m->n_vocab), n_gen, log, NULL, NULL, a);

    const cJSON *steps = cJSON_GetObjectItem(spec, "steps");
    int same_steps = log->steps == cJSON_GetArraySize(steps);
    for (int s = 0; same_steps && s < log->steps; s++) {
        const cJSON *o = cJSON_GetArrayItem(steps, s);
        int nd, nT;
        int *draft = json_ints(o, "draft", &nd), *target = json_ints(o, "target", &nT);
        same_steps = log->step_pos[s] == cJSON_GetObjectItem(o, "pos")->valueint &&
                     log->step_last[s] == cJSON_GetObjectItem(o, "id_last")->valueint && log->step_n[s] == nd &&
                     !memcmp(log->step_drafts[s], draft, sizeof(int) * (size_t)nd) &&
                     log->step_acc[s] == cJSON_GetObjectItem(o, "accepted")->valueint;
        /* the model's tokens over the verify rows, as far as the step took them */
        for (int i = 0; same_steps && i <= log->step_acc[s]; i++)
            same_steps = target[i] == log->tokens[log->step_pos[s] - n_prompt + 1 + i];
        if (!same_steps) fprintf(stderr, "  step %d (pos %d) differs from llama.cpp's\n", s, log->step_pos[s]);
        free(draft);
        free(target);
    }
    printf("  llama.cpp's speculative run%s (N = %d): %d steps, %d drafted, %d accepted (llama.cpp %d, %d, %d); "
           "steps %s, tokens %s\n",
           suffix, N, log->steps, log->drafted, log->accepted, cJSON_GetObjectItem(spec, "n_steps")->valueint,
           cJSON_GetObjectItem(spec, "n_drafted")->valueint, cJSON_GetObjectItem(spec, "n_accepted")->valueint,
           same_steps ? "the same" : "DIFFER",
           log->n == nt && !memcmp(log->tokens, tokens, sizeof(int) * (size_t)nt) ? "the same" : "DIFFER");
    CHECK(same_steps, "the steps differ from llama.cpp's");
    CHECK(log->drafted == cJSON_GetObjectItem(spec, "n_drafted")->valueint &&
              log->accepted == cJSON_GetObjectItem(spec, "n_accepted")->valueint,
          "drafted/accepted %d/%d", log->drafted, log->accepted);
    CHECK(log->n == n_gen && !memcmp(log->tokens, greedy, sizeof(int) * (size_t)n_gen),
          "the speculative tokens are not plain greedy's");
    free(log);
    spec_free(&sp);
    sampler_free(&smp);
    state_free(st);
    free(lg);
    free(prompt);
    free(greedy);
    free(tokens);
    cJSON_Delete(ref);
}

/* ---------------------------------------------------------------- properties */

/* From S[0..K), speculative greedy with drafts of N gives plain greedy's tokens and, after
 * every step, plain decoding's state. Returns the accepted drafts. */
static int split_case(const model *m, const int *S, int K, int N, int gen, arena *a) {
    seq_state *st = state_new(m, 0), *plain = state_new(m, 0);
    float *lg = malloc(sizeof(float) * m->n_vocab), *plg = malloc(sizeof(float) * m->n_vocab);
    spec_seq sp;
    sampler smp;
    sampler_params p;
    sampler_defaults(&p);
    p.temperature = 0;
    REQUIRE(st && plain && lg && plg && spec_init(&sp, m, N) == 0 && sampler_init(&smp, &p, m->n_vocab) == 0,
            "setup failed");
    REQUIRE(model_prefill(m, st, S, K, 0, lg, a) == 0 && model_prefill(m, plain, S, K, 0, plg, a) == 0,
            "prefill failed");
    run_log *log = calloc(1, sizeof *log);
    spec_run(m, st, &sp, &smp, sampler_argmax(lg, m->n_vocab), gen, log, plain, plg, a);
    const int acc = log->accepted;
    free(log);
    spec_free(&sp);
    sampler_free(&smp);
    state_free(st);
    state_free(plain);
    free(lg);
    free(plg);
    return acc;
}

static void splits(const model *m, const char *suffix, int every, int gen, arena *a) {
    char path[256];
    snprintf(path, sizeof path, FIXTURES "%s%s.json", NAME, suffix);
    cJSON *ref = read_json(path);
    REQUIRE(ref, "cannot read %s", path);
    int nS;
    int *S = json_ints(cJSON_GetObjectItem(ref, "mtp"), "tokens", &nS);
    const int before = check_failures;
    int cases = 0, accepted = 0;
    for (int N = 1; N <= 4; N++)
        for (int K = 1; K < nS; K += every, cases++) accepted += split_case(m, S, K, N, gen, a);
    printf("  speculative == plain greedy%s, state == plain state after every step: %d cases (split points every "
           "%d tokens, N = 1..4, %d tokens each; %d drafts accepted) %s\n",
           suffix, cases, every, gen, accepted, check_failures == before ? "ok" : "FAILED");
    CHECK(accepted > 0, "no draft was ever accepted");
    free(S);
    cJSON_Delete(ref);
}

/* The long run's tokens (llama.cpp's prompt + greedy), n of them; the caller frees them */
static int *long_tokens(int *n) {
    cJSON *ref = read_json(fixture(".long.json"));
    REQUIRE(ref, "cannot read the long reference");
    int *S = json_ints(cJSON_GetObjectItem(ref, "mtp"), "tokens", n);
    cJSON_Delete(ref);
    return S;
}

/* Drafting over the first 300 token ids only (mtp_set_draft_vocab): every draft is one of
 * them, and the tokens are still plain greedy's. */
static void draft_vocab(model *m, arena *a) {
    int nS;
    int *S = long_tokens(&nS);
    REQUIRE(mtp_set_draft_vocab(m, 300) == 300, "mtp_set_draft_vocab");
    const int before = check_failures;
    int accepted = 0, outside = 0;
    for (int K = 50; K < nS; K += 150) accepted += split_case(m, S, K, 3, 32, a);
    /* the head's logits past the subset */
    seq_state *s = state_new(m, 0);
    float *lg = malloc(sizeof(float) * m->n_vocab), *h = malloc(sizeof(float) * m->n_embd);
    REQUIRE(s && lg && h && model_prefill(m, s, S, 40, 0, lg, a) == 0, "prefill failed");
    mtp_row row = {.state = s, .token = S[40], .pos = 40, .h_out = h, .logits = lg};
    REQUIRE(mtp_draft(m, &row, 1, a) == 0, "draft row failed");
    for (int v = 300; v < m->n_vocab; v++) outside += !(lg[v] == -INFINITY);
    CHECK(outside == 0 && sampler_argmax(lg, m->n_vocab) < 300, "%d logits past the draft vocabulary", outside);
    printf("  drafts over the first 300 of %d tokens: speculative == plain greedy %s (%d drafts accepted)\n",
           m->n_vocab, check_failures == before ? "ok" : "FAILED", accepted);
    mtp_set_draft_vocab(m, 0);
    CHECK(m->mtp->draft_vocab == m->n_vocab, "the whole vocabulary back");
    state_free(s);
    free(lg);
    free(h);
    free(S);
}

/* A checkpoint between steps: saved into the checkpoint store, restored into a fresh
 * state, continued - the same drafts, acceptances and tokens as without the break. */
static void checkpoint_midway(model *m, arena *a) {
    int nS;
    int *S = long_tokens(&nS);
    const int K = 200, N = 3, gen = 48;
    char err[256] = "";
    test_store ram;
    prefix_cache *pc = pc_open(m, test_store_open(&ram, NULL), err, sizeof err); /* a store in RAM */
    REQUIRE(pc, "pc_open: %s", err);
    seq_state *st = state_new(m, 0);
    float *lg = malloc(sizeof(float) * m->n_vocab);
    spec_seq sp;
    sampler smp;
    sampler_params p;
    sampler_defaults(&p);
    p.temperature = 0;
    REQUIRE(st && lg && spec_init(&sp, m, N) == 0 && sampler_init(&smp, &p, m->n_vocab) == 0, "setup failed");
    REQUIRE(model_prefill(m, st, S, K, 0, lg, a) == 0, "prefill failed");
    run_log *whole = calloc(1, sizeof *whole), *part = calloc(1, sizeof *part);
    spec_run(m, st, &sp, &smp, sampler_argmax(lg, m->n_vocab), gen, whole, NULL, NULL, a);

    /* again, stopping after `stop` steps at an accepted position to checkpoint there */
    for (int stop = 1; stop < whole->steps; stop += 3) {
        seq_state *s1 = state_new(m, 0), *s2 = state_new(m, 0);
        REQUIRE(s1 && s2 && model_prefill(m, s1, S, K, 0, lg, a) == 0, "prefill failed");
        int at = whole->step_pos[stop]; /* the state's length when step `stop` begins */
        /* the tokens fed up to there: the prompt, then the run's tokens; and the next one,
         * which a later prompt holds after the checkpoint (a restore without logits takes
         * checkpoints shorter than the prompt) */
        int *fed = malloc(sizeof(int) * ((size_t)at + 1));
        memcpy(fed, S, sizeof(int) * K);
        memcpy(fed + K, whole->tokens, sizeof(int) * (size_t)(at + 1 - K));
        REQUIRE(model_prefill(m, s1, fed + K, at - K, 0, lg, a) == 0, "prefill failed");
        uint64_t *h = malloc(sizeof *h * ((size_t)at + 2));
        token_chain_all(pc_seed(pc), fed, at + 1, h);
        CHECK(pc_save(pc, s1, fed, h, at, NULL, CK_INTERVAL, NULL) >= 0, "pc_save failed");
        cs_hit hit;
        const int got = pc_restore(pc, s2, fed, h, at + 1, NULL, &hit);
        pc_release(pc, &hit);
        CHECK(got == at && same_state(s1, s2), "restore at %d gave %d tokens", at, got);
        /* go on from the restored state: the token that step `stop` starts from is the
         * whole run's token at index at - K */
        part->steps = part->drafted = part->accepted = 0;
        spec_seq sp2;
        REQUIRE(spec_init(&sp2, m, N) == 0, "spec_init failed");
        spec_run(m, s2, &sp2, &smp, whole->tokens[at - K], gen - (at - K), part, NULL, NULL, a);
        int same = !memcmp(part->tokens, whole->tokens + (at - K), sizeof(int) * (size_t)part->n);
        for (int s = 0; same && s < part->steps; s++)
            same = part->step_pos[s] == whole->step_pos[stop + s] && part->step_n[s] == whole->step_n[stop + s] &&
                   part->step_acc[s] == whole->step_acc[stop + s] &&
                   !memcmp(part->step_drafts[s], whole->step_drafts[stop + s], sizeof(int) * (size_t)part->step_n[s]);
        CHECK(same, "restored at %d: the run differs from the uninterrupted one", at);
        spec_free(&sp2);
        state_free(s1);
        state_free(s2);
        free(fed);
        free(h);
    }
    printf("  checkpoint between steps, restored, continued: the uninterrupted run's drafts and tokens "
           "(%d steps, %d accepted)\n", whole->steps, whole->accepted);
    free(whole);
    free(part);
    spec_free(&sp);
    sampler_free(&smp);
    state_free(st);
    free(lg);
    free(S);
    pc_close(pc);
    test_store_close(&ram);
}

/* Six sequences draft in the same passes and are verified in one model pass, beside a
 * plain decode row and a prefill slice: each gets the tokens and the state it gets alone. */
static void six_together(const model *m, arena *a) {
    enum { SIX = 6, GEN = 40 };
    char *text = read_file(FIXTURES "long.txt", NULL);
    int n, *ids = parity_encode(m, text, &n);
    const int start[SIX] = {7, 40, 90, 150, 260, 333}, N[SIX] = {1, 2, 3, 4, 3, 2};
    const int V = m->n_vocab;
    run_log *alone = calloc(SIX, sizeof *alone);
    seq_state *st[SIX], *st_alone[SIX];
    spec_seq sp[SIX], *spp[SIX];
    sampler smp[SIX], *smpp[SIX];
    sampler_params p;
    sampler_defaults(&p);
    p.temperature = 0;
    float *lg = malloc(sizeof(float) * V);
    for (int i = 0; i < SIX; i++) {
        st_alone[i] = state_new(m, 0);
        REQUIRE(st_alone[i] && spec_init(&sp[i], m, N[i]) == 0 && sampler_init(&smp[i], &p, V) == 0, "setup");
        REQUIRE(model_prefill(m, st_alone[i], ids, start[i], 0, lg, a) == 0, "prefill failed");
        spec_run(m, st_alone[i], &sp[i], &smp[i], sampler_argmax(lg, V), GEN, &alone[i], NULL, NULL, a);
        spec_free(&sp[i]);
    }
    /* together; a plain sequence decodes and another prefills in the same passes */
    seq_state *dec = state_new(m, 0), *pre = state_new(m, 0), *dec_alone = state_new(m, 0);
    float *dlg = malloc(sizeof(float) * V), *plg = malloc(sizeof(float) * V);
    REQUIRE(dec && pre && dec_alone && dlg && plg, "out of memory");
    REQUIRE(model_prefill(m, dec, ids, 20, 0, dlg, a) == 0 && model_prefill(m, dec_alone, ids, 20, 0, plg, a) == 0,
            "prefill failed");
    int got[SIX][GEN + SPEC_MAX_DRAFT + 1], n_got[SIX], dtok = sampler_argmax(dlg, V), passes = 0, pre_done = 0;
    for (int i = 0; i < SIX; i++) {
        st[i] = state_new(m, 0);
        REQUIRE(st[i] && spec_init(&sp[i], m, N[i]) == 0 && model_prefill(m, st[i], ids, start[i], 0, lg, a) == 0,
                "setup failed");
        sampler_free(&smp[i]);
        REQUIRE(sampler_init(&smp[i], &p, V) == 0, "sampler_init");
        got[i][0] = sampler_argmax(lg, V);
        n_got[i] = 1;
        spp[i] = &sp[i];
        smpp[i] = &smp[i];
    }
    for (;;) {
        int want[SIX], live[SIX], k = 0;
        spec_seq *dsp[SIX];
        seq_state *dst[SIX];
        sampler *dsm[SIX];
        for (int i = 0; i < SIX; i++)
            if (n_got[i] < GEN) {
                sp[i].tokens[0] = got[i][n_got[i] - 1];
                want[k] = GEN - n_got[i] - 1;
                dsp[k] = spp[i], dst[k] = st[i], dsm[k] = smpp[i];
                live[k++] = i;
            }
        if (k == 0) break;
        REQUIRE(spec_draft(dsp, dst, dsm, want, k, a) == 0, "draft failed");
        batch_seq rows[SIX + 2];
        for (int r = 0; r < k; r++) rows[r] = spec_verify_row(&sp[live[r]], st[live[r]]);
        rows[k] = (batch_seq){.state = dec, .tokens = &dtok, .n_tokens = 1, .logits = 1, .out = dlg};
        const int slice = pre_done + 37 < n ? 37 : 0;
        if (slice) rows[k + 1] = (batch_seq){.state = pre, .tokens = ids + pre_done, .n_tokens = slice};
        REQUIRE(model_forward(m, rows, k + 1 + (slice > 0), a) == 0, "the pass failed");
        pre_done += slice;
        passes++;
        dtok = sampler_argmax(dlg, V);
        for (int r = 0; r < k; r++) {
            const int i = live[r];
            int out[SPEC_MAX_DRAFT + 1];
            const int c = spec_accept(&sp[i], &smp[i], out);
            spec_keep(&sp[i], st[i], c);
            for (int j = 0; j < c; j++) got[i][n_got[i]++] = out[j];
        }
    }
    int same = 1;
    for (int i = 0; i < SIX; i++) {
        same &= n_got[i] == alone[i].n && !memcmp(got[i], alone[i].tokens, sizeof(int) * (size_t)GEN);
        same &= same_state(st[i], st_alone[i]);
    }
    /* the plain row: as alone, one token per pass */
    int dec_tokens[512], ok = 1;
    for (int i = 0; i < passes; i++) {
        dec_tokens[i] = sampler_argmax(plg, V);
        batch_seq b = {.state = dec_alone, .tokens = &dec_tokens[i], .n_tokens = 1, .logits = 1, .out = plg};
        ok &= model_forward(m, &b, 1, a) == 0;
    }
    ok &= same_state(dec, dec_alone);
    printf("  six sequences speculating together (N = 1..4, %d passes, beside a decode row and a prefill): "
           "tokens and states as alone %s\n", passes, same && ok ? "ok" : "DIFFER");
    CHECK(same, "a sequence speculating in a batch differs from alone");
    CHECK(ok, "the plain decode row beside them differs from alone");
    for (int i = 0; i < SIX; i++) {
        spec_free(&sp[i]);
        sampler_free(&smp[i]);
        state_free(st[i]);
        state_free(st_alone[i]);
    }
    state_free(dec);
    state_free(pre);
    state_free(dec_alone);
    free(alone);
    free(dlg);
    free(plg);
    free(lg);
    free(ids);
    free(text);
}

/* ---------------------------------------------------------------- sampling */

/* chi-square of counts against probabilities (cells with expectation below 5 merged) */
static double chi_square(const double *expect_p, const long *count, int cells, long total, int *dof) {
    double chi = 0, pool_e = 0, pool_c = 0;
    *dof = -1;
    for (int i = 0; i < cells; i++) {
        const double e = expect_p[i] * (double)total;
        if (e < 5) {
            pool_e += e, pool_c += (double)count[i];
            continue;
        }
        chi += ((double)count[i] - e) * ((double)count[i] - e) / e;
        (*dof)++;
    }
    if (pool_e > 0) {
        chi += (pool_c - pool_e) * (pool_c - pool_e) / (pool_e > 1e-9 ? pool_e : 1e-9);
        (*dof)++;
    }
    return chi;
}

/* a rough upper critical value of chi-square with k degrees of freedom at about 1e-4
 * (Wilson-Hilferty with z = 3.72) */
static double chi_critical(int k) {
    const double z = 3.72, t = 1.0 - 2.0 / (9.0 * k) + z * sqrt(2.0 / (9.0 * k));
    return k * t * t * t;
}

/* The rule alone, on a toy model of 4 tokens: p(next | previous) and a different draft
 * distribution q(next | previous); sequences of 3 tokens after token 0, generated in
 * speculative steps of 2 drafts (then 1, at the end), must follow the product of p. */
static void toy_rule(void) {
    enum { TV = 4, LEN = 3, DRAWS = 200000 };
    static const double P[TV][TV] = {{0.1, 0.2, 0.3, 0.4}, {0.7, 0.1, 0.1, 0.1}, {0.25, 0.25, 0.25, 0.25},
                                     {0.05, 0.05, 0.1, 0.8}};
    static const double Q[TV][TV] = {{0.4, 0.3, 0.2, 0.1}, {0.1, 0.1, 0.1, 0.7}, {0.6, 0.2, 0.1, 0.1},
                                     {0.25, 0.25, 0.25, 0.25}};
    model toy = {.n_vocab = TV, .n_embd = 1};
    spec_seq sp = {.m = &toy, .n_max = 2};
    float q[2 * TV], logits[3 * TV], p[TV];
    sp.q = q, sp.logits = logits, sp.p = p;
    sampler smp;
    sampler_params prm;
    sampler_defaults(&prm);
    prm.temperature = 1.0f, prm.top_k = 0, prm.top_p = 1.0f, prm.min_p = 0.0f, prm.seed = 7;
    REQUIRE(sampler_init(&smp, &prm, TV) == 0, "sampler_init");
    long count[TV * TV * TV] = {0};
    for (int d = 0; d < DRAWS; d++) {
        int seq[LEN + SPEC_MAX_DRAFT], n = 0, last = 0;
        while (n < LEN) {
            const int k = LEN - n - 1 < 2 ? LEN - n - 1 : 2;
            sp.tokens[0] = last, sp.n_draft = k;
            for (int j = 0; j < k; j++) { /* draft j from q after tokens[j] */
                float w[TV];
                for (int v = 0; v < TV; v++) q[j * TV + v] = w[v] = (float)Q[sp.tokens[j]][v];
                sp.tokens[j + 1] = sampler_draw(&smp, w, TV);
            }
            for (int j = 0; j <= k; j++) /* the model's rows: p after tokens[j] */
                for (int v = 0; v < TV; v++) logits[j * TV + v] = (float)log(P[sp.tokens[j]][v]);
            int out[3];
            const int c = spec_accept(&sp, &smp, out);
            for (int j = 0; j < c; j++) seq[n++] = out[j];
            last = out[c - 1];
        }
        count[(seq[0] * TV + seq[1]) * TV + seq[2]]++;
    }
    double expect[TV * TV * TV];
    for (int a = 0; a < TV; a++)
        for (int b = 0; b < TV; b++)
            for (int c = 0; c < TV; c++) expect[(a * TV + b) * TV + c] = P[0][a] * P[a][b] * P[b][c];
    int dof;
    const double chi = chi_square(expect, count, TV * TV * TV, DRAWS, &dof);
    printf("  speculative sampling on a 4-token toy model: chi-square %.1f with %d degrees of freedom "
           "(bound %.1f), %llu of %llu drafts accepted\n",
           chi, dof, chi_critical(dof), (unsigned long long)sp.accepted, (unsigned long long)sp.drafted);
    CHECK(chi < chi_critical(dof), "the speculative distribution is not the model's (chi-square %.1f)", chi);
    sampler_free(&smp);
}

/* On the MTP model: the first two generated tokens at temperature 1.5 with top-k 6, by
 * speculative steps (N = 2, 3) over many seeds, against the exact distribution (the first
 * token's p, then p after each first token). */
static void model_sampling(const model *m, arena *a) {
    enum { RUNS = 6000, TOPK = 6 };
    const int V = m->n_vocab;
    int n, *ids = parity_encode(m, "Hello world! The quick", &n);
    sampler_params prm;
    sampler_defaults(&prm);
    prm.temperature = 1.5f, prm.top_k = TOPK, prm.top_p = 1.0f, prm.min_p = 0.0f;
    sampler smp;
    REQUIRE(sampler_init(&smp, &prm, V) == 0, "sampler_init");
    seq_state *base = state_new(m, 0);
    float *lg0 = malloc(sizeof(float) * V), *lg = malloc(sizeof(float) * V), *p1 = malloc(sizeof(float) * V);
    float *p2 = malloc(sizeof(float) * V);
    REQUIRE(base && lg0 && lg && p1 && p2 && model_prefill(m, base, ids, n, 0, lg0, a) == 0, "setup failed");
    /* exact: cells (first, second) over the first's top-k and each one's top-k */
    int first[TOPK], second[TOPK][TOPK], nf = 0;
    double expect[TOPK * TOPK];
    sampler_probs(&smp, lg0, p1);
    for (int v = 0; v < V; v++)
        if (p1[v] > 0) first[nf++] = v;
    REQUIRE(nf == TOPK, "expected %d candidates, got %d", TOPK, nf);
    for (int i = 0; i < TOPK; i++) {
        seq_state *s = state_clone(base);
        batch_seq b = {.state = s, .tokens = &first[i], .n_tokens = 1, .logits = 1, .out = lg};
        REQUIRE(s && model_forward(m, &b, 1, a) == 0, "forward failed");
        sampler_probs(&smp, lg, p2);
        for (int v = 0, k = 0; v < V; v++)
            if (p2[v] > 0) {
                second[i][k] = v;
                expect[i * TOPK + k++] = (double)p1[first[i]] * p2[v];
            }
        state_free(s);
    }
    for (int N = 2; N <= 3; N++) {
        long count[TOPK * TOPK] = {0}, other = 0;
        spec_seq sp;
        REQUIRE(spec_init(&sp, m, N) == 0, "spec_init");
        for (int r = 0; r < RUNS; r++) {
            prm.seed = (uint64_t)r * 7919 + (uint64_t)N;
            sampler_free(&smp);
            REQUIRE(sampler_init(&smp, &prm, V) == 0, "sampler_init");
            seq_state *s = state_clone(base);
            REQUIRE(s, "state_clone failed");
            int t1 = sampler_sample(&smp, lg0), t2 = -1;
            sp.tokens[0] = t1;
            const int want = N;
            spec_seq *spp = &sp;
            sampler *smpp = &smp;
            REQUIRE(spec_draft(&spp, &s, &smpp, &want, 1, a) == 0, "draft failed");
            batch_seq b = spec_verify_row(&sp, s);
            REQUIRE(model_forward(m, &b, 1, a) == 0, "verify failed");
            int out[SPEC_MAX_DRAFT + 1];
            spec_accept(&sp, &smp, out);
            t2 = out[0];
            state_free(s);
            int cell = -1;
            for (int i = 0; i < TOPK; i++)
                for (int k = 0; k < TOPK; k++)
                    if (first[i] == t1 && second[i][k] == t2) cell = i * TOPK + k;
            if (cell >= 0) count[cell]++;
            else other++;
        }
        int dof;
        const double chi = chi_square(expect, count, TOPK * TOPK, RUNS, &dof);
        printf("  speculative sampling on the MTP model (N = %d, T 1.5, top-k %d): first two tokens over %d seeds, "
               "chi-square %.1f with %d degrees of freedom (bound %.1f); %llu of %llu drafts accepted\n",
               N, TOPK, RUNS, chi, dof, chi_critical(dof), (unsigned long long)sp.accepted,
               (unsigned long long)sp.drafted);
        CHECK(other == 0, "%ld draws outside the distribution's support", other);
        CHECK(chi < chi_critical(dof), "N = %d: the distribution differs (chi-square %.1f)", N, chi);
        CHECK(sp.accepted > 0, "no draft accepted");
        spec_free(&sp);
    }
    sampler_free(&smp);
    state_free(base);
    free(lg0);
    free(lg);
    free(p1);
    free(p2);
    free(ids);
}

/* Every check above on one MTP model. */
static void one_model(const char *name, arena *a) {
    NAME = name;
    printf("%s:\n", NAME);
    model *m = parity_load(NAME);
    char err[256];
    REQUIRE(spec_configure(m, -1, err, sizeof err) == SPEC_DEFAULT_DRAFT, "%s", err);
    oracle_trace(m, "", a);
    oracle_trace(m, ".long", a);
    splits(m, "", 1, 24, a);
    splits(m, ".long", 25, 24, a);
    draft_vocab(m, a);
    checkpoint_midway(m, a);
    six_together(m, a);
    model_sampling(m, a);
    model_free(m);
}

int main(void) {
    pool_set_threads(2);
    arena a = {0};
    one_model("qwen35-tiny-mtp-f32", &a);    /* dense FFN in the head's block */
    one_model("qwen35moe-tiny-mtp-f32", &a); /* experts + gated shared expert */
    toy_rule();
    arena_free(&a);
    pool_shutdown();
    return check_report("test_speculative");
}
