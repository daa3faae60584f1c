/* cmd_run.c - `chatfs run`: prefill a prompt and generate, for tests and checks.
 *
 * Without --stop it does not stop at end-of-generation tokens (as llama.cpp's
 * reference runs do). --ids prints exactly two lines, "prompt: ..." and
 * "generated: ...". --dump-logits writes the last prompt position's logits as
 * n_vocab little-endian float32. --chat wraps the prompt as one user message in the
 * model's chat template; --template NAME forces the template family. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/runtime/chat.h"
#include "engine/runtime/sampler.h"
#include "engine/model/state.h"
#include "engine/base/threadpool.h"

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
    const char *model_path = NULL, *prompt_arg = NULL, *dump = NULL, *force = NULL;
    long n_gen = 16, threads = 0, seed = 0, ctx = 0;
    double temp = 0;
    int chat = 0, stop = 0, ids = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-m")) model_path = v, i++;
        else if (!strcmp(a, "-p")) prompt_arg = v, i++;
        else if (!strcmp(a, "-n")) { if (!cli_int(a, v, 0, 1 << 20, &n_gen)) return 1; i++; }
        else if (!strcmp(a, "-t")) { if (!cli_int(a, v, 0, 256, &threads)) return 1; i++; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { if (!cli_int(a, v, 16, 1 << 24, &ctx)) return 1; i++; }
        else if (!strcmp(a, "--seed")) { if (!cli_int(a, v, 0, 0x7fffffffL, &seed)) return 1; i++; }
        else if (!strcmp(a, "--temp")) { if (!cli_float(a, v, &temp)) return 1; i++; }
        else if (!strcmp(a, "--dump-logits")) dump = v, i++;
        else if (!strcmp(a, "--template") && v) force = v, i++;
        else if (!strcmp(a, "--chat")) chat = 1;
        else if (!strcmp(a, "--stop")) stop = 1;
        else if (!strcmp(a, "--ids")) ids = 1;
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
    if (!m || (force && !cli_force_template(m, force))) {
        free(text);
        model_free(m);
        return 1;
    }
    if (chat) {
        chat_msg msg = {"user", text};
        char *r = template_render(&m->tmpl, &msg, 1, 1);
        free(text);
        text = r;
    }
    int *prompt = NULL;
    int n_prompt = text ? tokenizer_encode(m->tok, text, strlen(text), 1, 1, &prompt) : -1;
    int rc = 1;
    seq_state *s = state_new(m, ctx > 0 && ctx < m->n_ctx_train ? (int)ctx : engine_default_context(m));
    float *logits = malloc((size_t)m->n_vocab * sizeof *logits);
    int *gen = malloc(((size_t)n_gen + 1) * sizeof *gen);
    arena a = {0};
    sampler smp = {0};
    sampler_params sp;
    sampler_defaults(&sp);
    sp.temperature = (float)temp;
    sp.seed = (uint64_t)seed;
    if (n_prompt <= 0 || !s || !logits || !gen || sampler_init(&smp, &sp, m->n_vocab) != 0) {
        cli_error(n_prompt == 0 ? "the prompt is empty" : "out of memory");
        goto out;
    }
    if (n_prompt > s->n_ctx) {
        cli_error("the prompt has %d tokens, more than the context of %d", n_prompt, s->n_ctx);
        goto out;
    }
    if (model_prefill(m, s, prompt, n_prompt, 0, logits, &a) != 0) {
        cli_error("prefill failed");
        goto out;
    }
    if (dump && !write_floats(dump, logits, m->n_vocab)) goto out;

    detok_stream ds;
    detok_init(&ds, 0);
    char buf[1024];
    int n_out = 0;
    while (n_out < n_gen) {
        int tok = sampler_sample(&smp, logits);
        gen[n_out++] = tok;
        if (!ids) {
            size_t k = detok_push(m->tok, &ds, tok, buf, sizeof buf);
            fwrite(buf, 1, k, stdout);
            fflush(stdout);
        }
        if ((stop && tokenizer_is_eog(m->tok, tok)) || n_out == n_gen || s->n_past >= s->n_ctx) break;
        batch_seq b = {.state = s, .tokens = &tok, .n_tokens = 1, .logits = 1, .out = logits};
        if (model_forward(m, &b, 1, &a) != 0) {
            cli_error("decode failed");
            goto out;
        }
    }
    if (ids) {
        print_ids("prompt", prompt, n_prompt);
        print_ids("generated", gen, n_out);
    } else {
        size_t k = detok_flush(&ds, buf, sizeof buf);
        fwrite(buf, 1, k, stdout);
        putchar('\n');
    }
    rc = 0;
out:
    sampler_free(&smp);
    arena_free(&a);
    free(gen);
    free(logits);
    free(prompt);
    free(text);
    state_free(s);
    model_free(m);
    return rc;
}
