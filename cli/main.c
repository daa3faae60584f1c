/* main.c - the chatfs command: dispatches to the subcommands of cli.h. */
#include <errno.h>
#include <stdarg.h>
#include <dirent.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <time.h>

#include "cli/cli.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "engine/layers/kv_type.h"
#include "engine/runtime/speculative.h"

#ifndef CHATFS_VERSION
#define CHATFS_VERSION "0.1"
#endif

/* what `chatfs COMMAND --help` prints */
static const char usage_mount[] =
    "usage: chatfs mount MOUNTPOINT [-m MODEL.gguf] [--db PATH] [-c N] [-ctk T] [-ctv T] [-t THREADS] [--batch N]\n"
    "                    [--chunk N]\n"
    "                    [--ram-budget B] [--disk-budget B] [--draft N] [--draft-vocab V] [-f] [-v]\n"
    "                    [--mmproj FILE] [--log FILE] [-o FUSE_OPTIONS]\n"
    "       chatfs mount MOUNTPOINT --engine URL [--model NAME] [--api-key-file FILE] [--db PATH] [--batch N] ...\n"
    "  Conversations with the model as files under MOUNTPOINT (see fs/README.md); daemonises\n"
    "  unless -f. fusermount3 -u MOUNTPOINT unmounts.\n"
    "  -m MODEL.gguf     the model (default: models/chatfs-default.gguf, the bundled one)\n"
    "  --db PATH         conversations and checkpoints (default: $XDG_DATA_HOME/chatfs/chatfs.db)\n"
    "  -c, --ctx-size N  most tokens a conversation holds (default: the model's, capped by the\n"
    "                    memory available; chatfs info MODEL says it)\n"
    "  -ctk, --cache-type-k T, -ctv, --cache-type-v T\n"
    "                    the KV cache's K / V types: f32, f16, bf16, q8_0, q4_0 (default f16, as\n"
    "                    llama.cpp; also run, ask, info)\n"
    "  -t THREADS        compute threads (default: every core)\n"
    "  --batch N         most replies generated together (default 8)\n"
    "  --chunk N         most prompt tokens per scheduler step (default 512)\n"
    "  --ram-budget B, --disk-budget B\n"
    "                    checkpoint bytes in RAM / in the database, K M G T suffixes, 0: none\n"
    "                    (default 1G / 8G)\n"
    "  --draft N         speculative decoding: the model's MTP head drafts up to N tokens a step\n"
    "                    (default 1 for a model with the head; 0 turns it off)\n"
    "  --draft-vocab V   the head drafts among the first V token ids only (cheaper drafts)\n"
    "  --mmproj FILE     a vision projector for images in NAME/attachments/ (default: the one\n"
    "                    mmproj*.gguf beside the model; speculative decoding is then off)\n"
    "  -f                stay in the foreground and log one line per reply on stderr\n"
    "  -v                log every change too (messages, edits, imports, errors)\n"
    "  --log FILE        append the log to FILE (a daemon too; without it only -f logs, on stderr)\n"
    "  -o OPTS           FUSE options (e.g. allow_other, ro)\n"
    "  --engine URL      generate on an OpenAI-compatible server instead of a local model\n"
    "                    (URL/chat/completions; e.g. http://127.0.0.1:8080/v1); --batch is then\n"
    "                    the most requests in flight (see docs/remote.md)\n"
    "  --model NAME      the server's model (default: the first URL/models lists)\n"
    "  --api-key-file F  a file holding the server's API key (sent as a Bearer token only)\n";
static const char usage_info[] =
    "usage: chatfs info MODEL.gguf [--json] [--template NAME] [-ctk T] [-ctv T]\n"
    "  Architecture, parameters, tensor types, layer pattern, tokenizer, chat template (the\n"
    "  model's own Jinja, which built-in family it resembles, whether it renders), state sizes\n"
    "  and the context a conversation gets by default, and the largest that fits with each\n"
    "  KV cache type.\n";
static const char usage_render[] =
    "usage: chatfs render [-m MODEL.gguf] [--template NAME | --template-file FILE] [--thinking true|false]\n"
    "                     [--no-generation-prompt] [--ids] MESSAGES.json\n"
    "  Prints the prompt chatfs gives the model for a conversation, exactly (no newline added):\n"
    "  the messages rendered with the model's chat template and the generation prompt, as a\n"
    "  message sent to a mount is rendered. MESSAGES.json is a JSON array of {\"role\", \"content\",\n"
    "  \"reasoning_content\"} messages (roles system, user, assistant) or an object with\n"
    "  \"messages\"; - reads it from stdin. -m defaults to the bundled model; any GGUF with a\n"
    "  tokenizer works, whatever its architecture.\n"
    "  --template-file F  render the Jinja text in F instead (settings.json's chat_template)\n"
    "  --template NAME    a built-in template: chatml, qwen3, qwen35, llama3, granite, lfm2, nemotron\n"
    "  --thinking BOOL    the template's enable_thinking (default true, as llama.cpp)\n"
    "  --no-generation-prompt  the conversation as history, without the assistant's opening\n"
    "  --ids              print the token ids (one line) instead of the text\n"
    "  A template that does not compile or refuses the conversation exits 1 with its message.\n";
static const char usage_run[] =
    "usage: chatfs run [-m MODEL.gguf] -p TEXT|@FILE [-n N] [-c N] [-ctk T] [-ctv T] [--temp T] [--seed S] [--chat]\n"
    "                  [--template NAME] [--stop] [--ids] [--dump-logits FILE] [--draft N]\n"
    "                  [--draft-vocab V] [--stats] [--grammar-file FILE | --json-schema FILE] [-t THREADS]\n"
    "  Prefills TEXT and generates N tokens (default 16); greedy unless --temp. -m defaults to\n"
    "  the bundled model. --chat wraps TEXT as a user message in the chat template; --stop ends\n"
    "  at an end-of-generation token; --ids prints token ids; --dump-logits writes the last\n"
    "  prompt position's logits as float32. --draft N decodes speculatively with the model's MTP\n"
    "  head (default 1 for a model with the head; 0: off), --draft-vocab V drafting among the\n"
    "  first V token ids; --stats prints tokens, passes, drafted and accepted as one JSON line.\n"
    "  --grammar-file FILE: the output follows the GBNF grammar in FILE (llama.cpp's syntax) and\n"
    "  ends at the end-of-generation token where the grammar may end (no drafts). --json-schema\n"
    "  FILE: the output is JSON valid under the schema in FILE (its grammar, as llama.cpp makes it).\n";
static const char usage_ask[] =
    "usage: chatfs ask [-m MODEL.gguf] [--db DB] [--system TEXT|@FILE] [--conversation NAME]\n"
    "                  [-n MAX_TOKENS] [--temp T] [--seed S] [--thinking on|off] [--json] [--stats]\n"
    "                  [-c N] [-ctk T] [-ctv T] [--no-checkpoints] [--interval N] [--ram-budget B] [--disk-budget B]\n"
    "                  [--draft N] [--draft-vocab V] [--grammar-file FILE | --json-schema FILE]\n"
    "                  [--image FILE]... [--mmproj FILE] [-t THREADS] TEXT|@FILE|-\n"
    "  One user turn of conversation NAME, the one a mount of the database shows as NAME/ (made\n"
    "  if new; without --conversation a turn of its own, not kept); prints the answer. TEXT is\n"
    "  the message, @FILE a file's, - standard input's; taken as a write to NAME/message is:\n"
    "  one final newline off, an empty or blank message or text that is not UTF-8 refused.\n"
    "  When a mount holds the database, ask goes through its files (its model, checkpoints and\n"
    "  the conversation's settings answer; -m, -c, -t, budgets and --draft do not apply); else\n"
    "  it opens the database itself and reuses the checkpoints of earlier runs. Greedy unless\n"
    "  --temp T; -n (default 256), --temp, --seed and --thinking are this turn's only.\n"
    "  --json prints {answer, reasoning, finish_reason, prompt_tokens, reused_tokens,\n"
    "  generated_tokens, reasoning_tokens, conversation}; --stats one JSON line on stderr.\n"
    "  Exit status: 0 the model ended its turn, 2 -n cut the reply (finish_reason max_tokens),\n"
    "  3 the context did (context_full), 1 an error (the reason on stderr).\n"
    "  --grammar-file FILE: the answer follows the GBNF grammar in FILE (llama.cpp's syntax; the\n"
    "  reasoning stays free); --json-schema FILE: the answer is JSON valid under the schema. Both\n"
    "  are this turn's settings.json grammar / response_format (a server is sent them).\n"
    "  --image FILE (up to 16): the message carries the image before its text, as a file copied\n"
    "  into NAME/attachments/ (the projector: --mmproj FILE or the one mmproj*.gguf beside the\n"
    "  model; a server takes the images with its own).\n"
    "  --engine URL [--model NAME] [--api-key-file FILE]: the same on an OpenAI-compatible server.\n";
static const char usage_bench[] =
    "usage: chatfs bench -m MODEL.gguf [-t N] [--pp 512] [--tg 64] [--depth D] [--batch B] [--reps R]\n"
    "                    [-ctk T] [-ctv T] [--draft N] [--draft-vocab V] [--grammar-file FILE | --json-schema FILE]\n"
    "  Prompt and decode speed, memory bandwidth and RSS as one JSON line; with --draft N for a\n"
    "  model with an MTP head, one more for speculative decoding (the costs of a verify of\n"
    "  k + 1 tokens and of a draft row, k = 0..N, and a real speculative decode). With a grammar\n"
    "  or schema, one more: decode under it against free decode, alternating, the mask's time\n"
    "  per step and the grammar's compile time.\n";
static const char usage_synth[] =
    "usage: chatfs synth --shape SHAPE --type TYPE --out FILE [--seed S] [-t N] [-q] [--mtp]\n"
    "  A random-weight GGUF of a real model's shape (e.g. --shape qwen3.5-0.8b --type q4_k_m).\n"
    "  --mtp adds Qwen3.5's multi-token-prediction block (for speculative decoding).\n"
    "       chatfs synth --mmproj SHAPE --type TYPE --out FILE [--n-embd N] [--seed S]\n"
    "  A random-weight vision projector (mmproj) of Qwen3.5's layout (SHAPE tiny or\n"
    "  qwen3.5-35b-a3b); --n-embd is the text model's embedding width.\n";

static const char usage[] =
    "usage: chatfs COMMAND [options]       (chatfs COMMAND --help for its options)\n"
    "\n"
    "  mount MOUNTPOINT   conversations as files (fusermount3 -u MOUNTPOINT unmounts)\n"
    "  ask TEXT           one turn of a stored conversation, for scripts\n"
    "  run -p TEXT        generate a continuation (greedy by default)\n"
    "  info MODEL.gguf    what a model file is\n"
    "  render MSGS.json   the prompt a conversation renders to, by the model's chat template\n"
    "  bench -m MODEL     prompt/decode speed as one JSON line\n"
    "  synth              a random-weight GGUF of a real model's shape\n"
    "\n"
    "  --version          the version\n"
    "  --template NAME renders with a built-in chat template instead of the model's own:\n"
    "  chatml, qwen3, qwen35, llama3, granite, lfm2, nemotron.\n"
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
    char err[256];
    chat_template *t = template_new_builtin(name, m->tok, err, sizeof err);
    if (!t) {
        cli_error("%s", err);
        return 0;
    }
    template_unref(m->tmpl);
    m->tmpl = t;
    return 1;
}

char *cli_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        cli_error("%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (size_t k; buf && (k = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
        n += k;
        if (cap - n - 1 == 0) {
            char *b = realloc(buf, cap *= 2);
            if (!b) free(buf);
            buf = b;
        }
    }
    fclose(f);
    if (!buf) {
        cli_error("out of memory reading %s", path);
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

char *cli_text_arg(const char *arg) {
    return arg[0] == '@' ? cli_read_file(arg + 1, NULL) : strdup(arg);
}

grammar *cli_load_grammar(const char *grammar_file, const char *schema_file, double *compile_ms) {
    const char *file = grammar_file ? grammar_file : schema_file;
    char at[1100], err[512];
    snprintf(at, sizeof at, "@%s", file);
    char *text = cli_text_arg(at), *gbnf = NULL;
    if (!text) return NULL;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (schema_file && !(gbnf = json_schema_to_gbnf(text, strlen(text), err, sizeof err))) {
        cli_error("%s: %s", file, err);
        free(text);
        return NULL;
    }
    const char *g = gbnf ? gbnf : text;
    grammar *gr = grammar_compile(g, strlen(g), err, sizeof err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (!gr) cli_error("%s: %s%s", file, schema_file ? "the schema's grammar: " : "", err);
    if (compile_ms) *compile_ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    free(gbnf);
    free(text);
    return gr;
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

int cli_cache_type(const char *opt, const char *v, const char **out) {
    kv_type t;
    if (!v || kv_type_parse(v, &t) != 0) {
        cli_error("%s: unknown cache type '%s': the known ones are %s", opt, v ? v : "", kv_type_list);
        return 0;
    }
    *out = v;
    return 1;
}

int cli_is_cache_type_opt(const char *opt, int *is_k) {
    *is_k = !strcmp(opt, "-ctk") || !strcmp(opt, "--cache-type-k");
    return *is_k || !strcmp(opt, "-ctv") || !strcmp(opt, "--cache-type-v");
}

int cli_size(const char *opt, const char *v, size_t *out) {
    /* digits, then at most one of K, M, G, T (powers of 1024); nothing else: strtoull
     * alone would take "-1" as 18446744073709551615 and " 5" as 5 */
    size_t digits = v ? strspn(v, "0123456789") : 0;
    int shift = 0;
    const char *suffix = v ? v + digits : "";
    if (*suffix) {
        const char *units = "KkMmGgTt", *u = strchr(units, *suffix);
        shift = u && suffix[1] == 0 ? 10 * (int)(1 + (u - units) / 2) : -1;
    }
    errno = 0;
    unsigned long long x = digits ? strtoull(v, NULL, 10) : 0;
    if (!digits || shift < 0 || errno || (shift && x > (~0ull >> shift))) {
        cli_error("%s needs a byte count: digits with an optional K, M, G or T (0: none), not '%s'", opt,
                  v ? v : "");
        return 0;
    }
    *out = (size_t)(x << shift);
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

const char *cli_default_model(char *buf, size_t n) {
    char exe[1024];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k > 0) {
        exe[k] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        snprintf(buf, n, "%s/models/chatfs-default.gguf", exe);
        if (access(buf, R_OK) == 0) return buf;
    }
    snprintf(buf, n, "models/chatfs-default.gguf");
    if (access(buf, R_OK) == 0) return buf;
    cli_error("no model: pass -m MODEL.gguf (models/chatfs-default.gguf is not next to chatfs nor here)");
    return NULL;
}

const char *cli_find_mmproj(const char *model_path, char *buf, size_t n, int *many) {
    char dir_buf[1100];
    snprintf(dir_buf, sizeof dir_buf, "%s", model_path);
    const char *dir = dirname(dir_buf);
    DIR *d = opendir(dir);
    int found = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        const size_t L = strlen(e->d_name);
        if (!strncmp(e->d_name, "mmproj", 6) && L > 5 && !strcmp(e->d_name + L - 5, ".gguf") && found++ == 0)
            snprintf(buf, n, "%s/%s", dir, e->d_name);
    }
    if (d) closedir(d);
    *many = found > 1 ? found : 0;
    return found == 1 ? buf : NULL;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 1 : 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
        printf("chatfs %s\n", CHATFS_VERSION);
        return 0;
    }
    static const struct {
        const char *name;
        int (*fn)(int, char **);
        const char *usage;
    } cmds[] = {{"mount", cmd_mount, usage_mount}, {"info", cmd_info, usage_info},   {"run", cmd_run, usage_run},
                {"ask", cmd_ask, usage_ask},       {"bench", cmd_bench, usage_bench}, {"synth", cmd_synth, usage_synth},
                {"render", cmd_render, usage_render}};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        if (strcmp(argv[1], cmds[i].name)) continue;
        for (int a = 2; a < argc; a++)
            if (!strcmp(argv[a], "-h") || !strcmp(argv[a], "--help")) {
                fputs(cmds[i].usage, stdout);
                return 0;
            }
        return cmds[i].fn(argc - 1, argv + 1);
    }
    cli_error("unknown command '%s' (chatfs --help lists the commands)", argv[1]);
    return 1;
}
