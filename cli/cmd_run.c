/* cmd_run.c - `chatfs run`: prefill a prompt and generate, for tests and checks.
 *
 * Without --stop it does not stop at end-of-generation tokens (as llama.cpp's
 * reference runs do). --ids prints exactly two lines, "prompt: ..." and
 * "generated: ...". --dump-logits writes the last prompt position's logits as
 * n_vocab little-endian float32. --chat wraps the prompt as one user message in the
 * model's chat template; --template NAME renders with a built-in template instead.
 * --draft N decodes speculatively with the model's MTP head, drafting up to N tokens a
 * step (the default for a model with the head, 0 turns it off): the same tokens (greedy),
 * or the same distribution (--temp), as plain decoding. --draft-vocab V drafts over the first V token
 * ids only (model/mtp.h). --stats prints one JSON line on stderr: the tokens generated,
 * the decode passes after the first token (a speculative step is one), the drafted and
 * accepted tokens, and the decode speed. --grammar-file FILE constrains the output to a GBNF
 * grammar (engine/grammar/grammar.h): every token it does not allow is masked before
 * sampling, and the run ends at the end-of-generation token, which comes only where the
 * grammar may end; it decodes one token a step (drafts are not checked against a grammar).
 * --json-schema FILE does the same with the grammar of a JSON schema.
 * --image FILE (up to RUN_MAX_IMAGES) puts images into the prompt through the vision
 * projector --mmproj FILE (else the one mmproj*.gguf beside the model), as llama-mtmd-cli
 * does: in a raw prompt each <__media__> marks an image's place; with --chat the images go
 * before the message's text (run_images.c). --ids then shows an image as [image NxM]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/run_images.h"
#include "engine/runtime/chat.h"
#include "engine/base/threadpool.h"
#include "engine/grammar/grammar.h"
#include "engine/model/mtp.h"
#include "engine/model/state.h"
#include "engine/runtime/sampler.h"
#include "engine/runtime/speculative.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The next token: under a grammar only one it allows (the logits are scratch here), the
 * matcher advanced by it; -1 after printing why when the grammar allows none. */
static int pick(sampler *smp, float *logits, grammar_matcher *gm, const grammar_vocab *gv) {
    if (gm && grammar_mask_logits(gm, gv, logits) <= 0) {
        cli_error("the grammar allows no token here");
        return -1;
    }
    int tok = sampler_sample(smp, logits);
    if (gm && grammar_accept_token(gm, gv, tok) != 0) {
        cli_error("the grammar allows no token here");
        return -1;
    }
    return tok;
}

/* Speculation under a grammar: row 0 masked where the reply stands (gm), row j + 1 by a
 * scratch matcher after the step's drafts d1..d(j+1) (speculative.h, spec_constraint). */
typedef struct {
    grammar_matcher *row[SPEC_MAX_DRAFT + 1];
    const grammar_vocab *gv;
} run_constraint;

static int run_mask(void *ud, int row, float *logits) {
    run_constraint *c = ud;
    return grammar_mask_logits(c->row[row], c->gv, logits);
}

static int run_next(void *ud, int row, int tok) {
    run_constraint *c = ud;
    if (row >= SPEC_MAX_DRAFT || !c->row[row + 1] || grammar_matcher_assign(c->row[row + 1], c->row[row]) != 0)
        return -1;
    return grammar_accept_token(c->row[row + 1], c->gv, tok);
}

static int write_floats(const char *path, const float *x, int n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(x, sizeof *x, (size_t)n, f) != (size_t)n || fclose(f) != 0) {
        cli_error("cannot write %s", path);
        return 0;
    }
    return 1;
}

static void print_ids(const char *label, const int *ids, int n) {
    printf("%s:", label);
    for (int i = 0; i < n; i++) printf(" %d", ids[i]);
    putchar('\n');
}

int cmd_run(int argc, char **argv) {
    const char *model_path = NULL, *prompt_arg = NULL, *dump = NULL, *force = NULL, *grammar_file = NULL;
    const char *schema_file = NULL;
    long n_gen = 16, threads = 0, seed = 0, ctx = 0, draft = -1, draft_vocab = 0;
    double temp = 0;
    int chat = 0, stop = 0, ids = 0, stats = 0, is_k;
    const char *ctk = NULL, *ctv = NULL, *mmproj = NULL;
    char *images[RUN_MAX_IMAGES];
    int n_images = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-m")) model_path = v, i++;
        else if (!strcmp(a, "-p")) prompt_arg = v, i++;
        else if (!strcmp(a, "-n")) { if (!cli_int(a, v, 0, 1 << 20, &n_gen)) return 1; i++; }
        else if (!strcmp(a, "-t")) { if (!cli_int(a, v, 0, 256, &threads)) return 1; i++; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { if (!cli_int(a, v, 16, 1 << 24, &ctx)) return 1; i++; }
        else if (cli_is_cache_type_opt(a, &is_k)) { if (!cli_cache_type(a, v, is_k ? &ctk : &ctv)) return 1; i++; }
        else if (!strcmp(a, "--seed")) { if (!cli_int(a, v, 0, 0x7fffffffL, &seed)) return 1; i++; }
        else if (!strcmp(a, "--temp")) { if (!cli_float(a, v, &temp)) return 1; i++; }
        else if (!strcmp(a, "--draft")) { if (!cli_int(a, v, 0, SPEC_MAX_DRAFT, &draft)) return 1; i++; }
        else if (!strcmp(a, "--draft-vocab")) { if (!cli_int(a, v, 0, 1 << 30, &draft_vocab)) return 1; i++; }
        else if (!strcmp(a, "--dump-logits")) dump = v, i++;
        else if (!strcmp(a, "--grammar-file") && v) grammar_file = v, i++;
        else if (!strcmp(a, "--json-schema") && v) schema_file = v, i++;
        else if (!strcmp(a, "--template") && v) force = v, i++;
        else if (!strcmp(a, "--chat")) chat = 1;
        else if (!strcmp(a, "--mmproj") && v) mmproj = v, i++;
        else if (!strcmp(a, "--image") && v) {
            if (n_images == RUN_MAX_IMAGES) {
                cli_error("run: at most %d images", RUN_MAX_IMAGES);
                return 1;
            }
            images[n_images++] = (char *)v, i++;
        }
        else if (!strcmp(a, "--stop")) stop = 1;
        else if (!strcmp(a, "--ids")) ids = 1;
        else if (!strcmp(a, "--stats")) stats = 1;
        else { cli_error("run: unknown option '%s'", a); return 1; }
    }
    if (!prompt_arg) {
        cli_error("run needs -p TEXT (chatfs run --help)");
        return 1;
    }
    char model_buf[1100];
    if (!model_path && !(model_path = cli_default_model(model_buf, sizeof model_buf))) return 1;
    pool_set_threads((int)threads);
    char *text = cli_text_arg(prompt_arg);
    if (!text) return 1;
    model *m = cli_load_model(model_path);
    char kv_err[256];
    if (m && engine_set_cache_types(m, ctk, ctv, kv_err, sizeof kv_err) != 0) {
        cli_error("%s", kv_err);
        model_free(m);
        m = NULL;
    }
    if (!m || (force && !cli_force_template(m, force))) {
        free(text);
        model_free(m);
        return 1;
    }
    grammar *gr = NULL;
    grammar_vocab *gv = NULL;
    grammar_matcher *gm = NULL;
    projector *proj = NULL;
    if (grammar_file && schema_file) {
        cli_error("run: --grammar-file and --json-schema: give one of them");
        goto early_out;
    }
    if (grammar_file || schema_file) {
        gr = cli_load_grammar(grammar_file, schema_file, NULL);
        if (gr && (!(gv = grammar_vocab_from_tokenizer(m->tok)) || !(gm = grammar_matcher_new(gr)))) cli_error("out of memory");
        if (!gm) goto early_out;
    }
    if (!cli_speculation(m, &draft)) goto early_out;
    mtp_set_draft_vocab(m, (int)draft_vocab);
    if (n_images && (draft > 0 || gm)) {
        cli_error("run: --image decodes plainly: no --draft or grammar with it yet");
        goto early_out;
    }
    if (n_images && !(proj = run_images_projector(mmproj, model_path, m))) goto early_out;
    size_t len = strlen(text);
    if (n_images && !chat) { /* <__media__> marks each image's place, as in llama-mtmd-cli */
        char *marked = run_images_mark(text);
        if (!marked) {
            cli_error("out of memory");
            goto early_out;
        }
        free(text);
        text = marked;
        len = strlen(text);
    }
    if (chat) {
        chat_msg msg = {"user", text, NULL, .n_images = n_images};
        char err[512];
        char *r = m->tmpl ? template_render(m->tmpl, &msg, 1, 1, 1, &len, err, sizeof err) : NULL;
        if (!r) {
            cli_error("%s", m->tmpl ? err : m->tmpl_error);
            goto early_out;
        }
        free(text);
        text = r;
    }
    int *prompt = NULL;
    int n_prompt = n_images ? 1 : tokenizer_encode(m->tok, text, len, 1, 1, &prompt);
    strbuf ids_line = {0};
    int rc = 1;
    seq_state *s = state_new(m, ctx > 0 && ctx < m->n_ctx_train ? (int)ctx : engine_default_context(m));
    float *logits = malloc((size_t)m->n_vocab * sizeof *logits);
    int *gen = malloc(((size_t)n_gen + 1) * sizeof *gen);
    arena a = {0};
    sampler smp = {0};
    spec_seq sp = {0};
    run_constraint rc_gm = {.row = {gm}, .gv = gv};
    sampler_params params;
    sampler_defaults(&params);
    params.temperature = (float)temp;
    params.seed = (uint64_t)seed;
    if (n_prompt <= 0 || !s || !logits || !gen || sampler_init(&smp, &params, m->n_vocab) != 0 ||
        (draft > 0 && spec_init(&sp, m, (int)draft) != 0)) {
        cli_error(n_prompt == 0 ? "the prompt is empty" : "out of memory");
        goto out;
    }
    if (gm && sp.m) {
        for (int i = 1; i <= sp.n_max; i++)
            if (!(rc_gm.row[i] = grammar_matcher_new(gr))) {
                cli_error("out of memory");
                goto out;
            }
        sp.c = (spec_constraint){.mask = run_mask, .next = run_next, .ud = &rc_gm};
    }
    if (n_prompt > s->n_ctx) {
        cli_error("the prompt has %d tokens, more than the context of %d", n_prompt, s->n_ctx);
        goto out;
    }
    if (n_images) {
        if (run_images_prefill(m, s, proj, text, images, n_images, logits, &a, ids ? &ids_line : NULL) != 0) goto out;
    } else if (model_prefill(m, s, prompt, n_prompt, 0, logits, &a) != 0) {
        cli_error("prefill failed");
        goto out;
    }
    if (dump && !write_floats(dump, logits, m->n_vocab)) goto out;

    detok_stream ds;
    detok_init(&ds, 0);
    char buf[1024];
    /* Each round takes the tokens of one step: one sampled token, or a speculative step's
     * accepted drafts and the model's own token. at[i]: the state's length when step[i] was
     * chosen; a stop keeps exactly the rows plain decoding would have fed. */
    int n_out = 0, step[SPEC_MAX_DRAFT + 1], at[SPEC_MAX_DRAFT + 1], n_step = 0, speculated = 0;
    int passes = 0;
    const double t0 = now_s();
    if (n_gen > 0) {
        if ((step[0] = pick(&smp, logits, gm, gv)) < 0) goto out;
        at[0] = s->n_past;
        n_step = 1;
    }
    while (n_step > 0) {
        int keep = n_step, done = 0;
        for (int i = 0; i < n_step && !done; i++) {
            gen[n_out++] = step[i];
            if (!ids) {
                size_t k = detok_push(m->tok, &ds, step[i], buf, sizeof buf);
                fwrite(buf, 1, k, stdout);
                fflush(stdout);
            }
            done = ((stop || gm) && tokenizer_is_eog(m->tok, step[i])) || n_out == n_gen || at[i] >= s->n_ctx;
            keep = i + 1;
        }
        if (speculated) spec_keep(&sp, s, keep); /* the verify rows up to the stop, or all */
        if (done) break;
        const int last = step[n_step - 1];
        speculated = sp.m != NULL;
        if (speculated) {
            sp.tokens[0] = last;
            const int want = (int)n_gen - n_out - 1; /* the model's own token comes on top */
            spec_seq *spp = &sp;
            sampler *smpp = &smp;
            batch_seq b = {0};
            int rc = spec_draft(&spp, &s, &smpp, &want, 1, &a);
            if (rc == 0) b = spec_verify_row(&sp, s);
            if (rc != 0 || model_forward(m, &b, 1, &a) != 0) {
                cli_error("decode failed");
                goto out;
            }
            n_step = spec_accept(&sp, &smp, step);
            passes++;
            for (int i = 0; gm && i < n_step; i++) /* the matcher moves over the step's tokens */
                if (step[i] < 0 || grammar_accept_token(gm, gv, step[i]) != 0) {
                    cli_error(step[i] < 0 ? "out of memory" : "the grammar allows no token here");
                    goto out;
                }
            for (int i = 0; i < n_step; i++) at[i] = sp.pos0 + i + 1;
        } else {
            batch_seq b = {.state = s, .tokens = &last, .n_tokens = 1, .logits = 1, .out = logits};
            if (model_forward(m, &b, 1, &a) != 0) {
                cli_error("decode failed");
                goto out;
            }
            if ((step[0] = pick(&smp, logits, gm, gv)) < 0) goto out;
            at[0] = s->n_past;
            n_step = 1;
            passes++;
        }
    }
    const double dt = now_s() - t0;
    if (ids && n_images) {
        char *line = strbuf_take(&ids_line);
        printf("prompt:%s\n", line ? line : "");
        free(line);
        print_ids("generated", gen, n_out);
    } else if (ids) {
        print_ids("prompt", prompt, n_prompt);
        print_ids("generated", gen, n_out);
    } else {
        size_t k = detok_flush(&ds, buf, sizeof buf);
        fwrite(buf, 1, k, stdout);
        putchar('\n');
    }
    if (stats)
        fprintf(stderr,
                "{\"generated_tokens\":%d,\"decode_passes\":%d,\"draft\":%d,\"drafted_tokens\":%llu,"
                "\"accepted_tokens\":%llu,\"decode_tokens_per_s\":%.2f}\n",
                n_out, passes, (int)draft, (unsigned long long)sp.drafted, (unsigned long long)sp.accepted,
                n_out > 1 && dt > 0 ? (n_out - 1) / dt : 0.0);
    rc = 0;
out:
    for (int i = 1; i <= SPEC_MAX_DRAFT; i++) grammar_matcher_free(rc_gm.row[i]);
    grammar_matcher_free(gm);
    grammar_vocab_free(gv);
    grammar_free(gr);
    spec_free(&sp);
    sampler_free(&smp);
    arena_free(&a);
    free(gen);
    free(logits);
    free(prompt);
    free(text);
    strbuf_free(&ids_line);
    state_free(s);
    projector_free(proj);
    model_free(m);
    return rc;
early_out: /* before the sequence and its buffers exist */
    projector_free(proj);
    grammar_matcher_free(gm);
    grammar_vocab_free(gv);
    grammar_free(gr);
    free(text);
    model_free(m);
    return 1;
}
