/* main.c - the chatfs command: dispatches to the subcommands of cli.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static const char usage[] =
    "usage: chatfs COMMAND [options]\n"
    "\n"
    "  info MODEL.gguf [--json]          architecture, parameters, tensor types, layers, tokenizer, template\n"
    "  run -m MODEL.gguf -p TEXT [-n N] [--temp T] [--seed S] [--chat] [--stop] [--ids]\n"
    "      [--dump-logits FILE] [-t THREADS]   generate a continuation (greedy by default)\n"
    "  mount MOUNTPOINT [-m MODEL.gguf] [--db PATH] [-t THREADS] [-f] [-o FUSE_OPTIONS]\n"
    "                                    conversations as files (fusermount3 -u MOUNTPOINT unmounts)\n";

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
    } cmds[] = {{"info", cmd_info}, {"run", cmd_run}, {"mount", cmd_mount}};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(argv[1], cmds[i].name)) return cmds[i].fn(argc - 1, argv + 1);
    cli_error("unknown command '%s' (chatfs --help lists the commands)", argv[1]);
    return 1;
}
