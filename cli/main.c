/* main.c - the chatfs command: dispatches to the subcommands of cli.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/runtime/speculative.h"

static const char usage[] =
    "usage: chatfs COMMAND [options]\n"
    "\n"
    "  mount MOUNTPOINT [-m MODEL.gguf] [--db PATH] [-t THREADS] [--batch N] [--chunk N]\n"
    "        [--ram-budget B] [--disk-budget B] [--draft N] [--draft-vocab V] [-f] [-o FUSE_OPTIONS]\n"
    "      conversations as files (fusermount3 -u MOUNTPOINT unmounts)\n"
    "  info MODEL.gguf [--json] [--template NAME]\n"
    "      architecture, parameters, tensor types, layers, tokenizer, template\n"
    "  run -m MODEL.gguf -p TEXT [-n N] [--temp T] [--seed S] [--chat] [--template NAME] [--stop] [--ids]\n"
    "      [--dump-logits FILE] [--draft N] [--draft-vocab V] [--stats] [-t THREADS]\n"
    "      generate a continuation (greedy by default)\n"
    "  ask -m MODEL.gguf [--db DB] [--system TEXT|@FILE] [--conversation NAME] [-n MAX_TOKENS]\n"
    "      [--stats] [--no-checkpoints] [--interval N] [--ram-budget B] [--disk-budget B] [--draft N]\n"
    "      [--draft-vocab V] TEXT|@FILE\n"
    "      one user turn of a stored conversation, with checkpoints\n"
    "  bench -m MODEL.gguf [-t N] [--pp 512] [--tg 64] [--batch B] [--reps R] [--draft N] [--draft-vocab V]\n"
    "      prompt/decode speed, memory bandwidth, RSS as one JSON line (and one for speculative decoding)\n"
    "  synth --shape SHAPE --type TYPE --out FILE [--seed S] [--mtp]\n"
    "      a random-weight GGUF of a real model's shape (e.g. qwen3.5-0.8b, q4_k)\n"
    "\n"
    "  --template NAME forces a chat template family instead of the one recognised in the\n"
    "  model: chatml, qwen3, qwen35, llama3, granite, lfm2, nemotron.\n"
    "  --draft N decodes speculatively, the model's MTP head drafting up to N tokens a step\n"
    "  (default 1 for a model with the head; 0 turns it off). Greedy output is the same.\n"
    "  --draft-vocab V lets the head draft among the first V token ids only (cheaper drafts).\n";

void cli_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("chatfs: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

model *cli_load_model(const char *path) {
    char err[512];
    model *m = model_load(path, err, sizeof err);
    if (!m) cli_error("%s", err);
    return m;
}

int cli_speculation(model *m, long *draft) {
    char err[256];
    const int n = spec_configure(m, (int)*draft, err, sizeof err);
    if (n < 0) {
        cli_error("%s", err);
        return 0;
    }
    *draft = n;
    return 1;
}

int cli_force_template(model *m, const char *name) {
    if (template_force(&m->tmpl, name)) return 1;
    char list[256] = "";
    for (int f = 0; f < TMPL_COUNT; f++) {
        size_t k = strlen(list);
        snprintf(list + k, sizeof list - k, "%s%s", f ? ", " : "", template_family_name((tmpl_family)f));
    }
    cli_error("unknown template family '%s' (families: %s)", name, list);
    return 0;
}

char *cli_text_arg(const char *arg) {
    if (arg[0] != '@') return strdup(arg);
    FILE *f = fopen(arg + 1, "rb");
    if (!f) {
        cli_error("%s: %s", arg + 1, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (size_t k; buf && (k = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
        n += k;
        if (cap - n - 1 == 0) {
            char *b = realloc(buf, cap *= 2);
            if (!b) {
                free(buf);
                buf = NULL;
            }
            buf = b;
        }
    }
    fclose(f);
    if (!buf) {
        cli_error("out of memory reading %s", arg + 1);
        return NULL;
    }
    buf[n] = 0;
    return buf;
}

int cli_int(const char *opt, const char *val, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = val ? strtol(val, &end, 10) : 0;
    if (!val || errno || *end || end == val || v < lo || v > hi) {
        cli_error("%s needs an integer between %ld and %ld", opt, lo, hi);
        return 0;
    }
    *out = v;
    return 1;
}

int cli_size(const char *opt, const char *v, size_t *out) {
    char *end;
    errno = 0;
    unsigned long long x = v ? strtoull(v, &end, 10) : 0;
    if (!v || errno || end == v) {
        cli_error("%s needs a byte count (K, M, G suffixes allowed)", opt);
        return 0;
    }
    if (*end == 'K' || *end == 'k') x <<= 10, end++;
    else if (*end == 'M' || *end == 'm') x <<= 20, end++;
    else if (*end == 'G' || *end == 'g') x <<= 30, end++;
    if (*end) {
        cli_error("%s needs a byte count (K, M, G suffixes allowed)", opt);
        return 0;
    }
    *out = (size_t)x;
    return 1;
}

int cli_float(const char *opt, const char *val, double *out) {
    char *end;
    double v = val ? strtod(val, &end) : 0;
    if (!val || *end || end == val) {
        cli_error("%s needs a number", opt);
        return 0;
    }
    *out = v;
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 1 : 0;
    }
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {{"mount", cmd_mount}, {"info", cmd_info}, {"run", cmd_run}, {"ask", cmd_ask}, {"bench", cmd_bench}, {"synth", cmd_synth}};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(argv[1], cmds[i].name)) return cmds[i].fn(argc - 1, argv + 1);
    cli_error("unknown command '%s' (chatfs --help lists the commands)", argv[1]);
    return 1;
}
