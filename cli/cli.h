/* cli.h - the subcommands of the chatfs command line and their shared helpers. */
#ifndef CHATFS_CLI_H
#define CHATFS_CLI_H

#include "engine/arch/arch.h"

int cmd_info(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_mount(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_ask(int argc, char **argv);
int cmd_render(int argc, char **argv);

/* Loads a model or prints "chatfs: <reason>" and returns NULL. */
model *cli_load_model(const char *path);
/* Renders with the built-in chat template NAME (--template) instead of the model's own,
 * or prints an error listing the built-ins and returns 0. */
int cli_force_template(model *m, const char *name);
/* --draft N for a loaded model (speculative.h spec_configure): *draft < 0 is the default;
 * *draft gets the drafts per step (0: off). Prints the error and returns 0 when it cannot be. */
int cli_speculation(model *m, long *draft);
/* The vision projector beside a model, as LM Studio and ollama lay files out: the one
 * mmproj*.gguf in its folder (into buf), NULL when there is none or (*many: how many)
 * more than one. */
const char *cli_find_mmproj(const char *model_path, char *buf, size_t n, int *many);
/* Reads TEXT, or the contents of FILE for "@FILE"; malloc'd, NULL after printing an error. */
char *cli_text_arg(const char *arg);
/* A whole file, NUL-terminated, its size in *len (may be NULL); NULL after printing why. */
char *cli_read_file(const char *path, size_t *len);
/* --grammar-file GBNF or --json-schema SCHEMA (one of them non-NULL): the grammar
 * compiled (a schema converted first, engine/grammar/json_schema.h), and in *compile_ms
 * (may be NULL) the time that took. NULL after printing the reason. */
struct grammar *cli_load_grammar(const char *grammar_file, const char *schema_file, double *compile_ms);
/* Parses an integer/float option value or prints an error naming the option. */
int cli_int(const char *opt, const char *val, long lo, long hi, long *out);
int cli_float(const char *opt, const char *val, double *out);
/* A byte count: digits with an optional K, M, G or T suffix (powers of 1024). */
int cli_size(const char *opt, const char *val, size_t *out);
/* An attention cache type (-ctk/-ctv: f32, f16, bf16, q8_0, q4_0): val, or an error that
 * lists the known ones. */
int cli_cache_type(const char *opt, const char *val, const char **out);
/* -ctk/--cache-type-k or -ctv/--cache-type-v (the K side when *is_k) */
int cli_is_cache_type_opt(const char *opt, int *is_k);
/* models/chatfs-default.gguf next to the executable or in the current directory (in
 * buf); NULL after printing an error when neither is there. */
const char *cli_default_model(char *buf, size_t n);
/* Prints to stderr as "chatfs: ..." */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
