/* ask.h - what the two ways of `chatfs ask` share: the request (cmd_ask.c parses it) and
 * the result, printed the same way whether the reply came from this process's engine
 * on a database no mount holds (cmd_ask.c) or through the files of the mount that holds
 * it (ask_mount.c). */
#ifndef CHATFS_CLI_ASK_H
#define CHATFS_CLI_ASK_H

#include <stddef.h>

typedef struct {
    const char *conv;     /* --conversation NAME; NULL: one turn, not kept */
    const char *system;   /* --system's text; NULL: the conversation's stays */
    const char *text;     /* the message as given (the mount normalises what it is sent) */
    size_t len;
    long max_tokens;      /* -n (256) */
    double temp;          /* --temp (0: greedy) */
    int seed_given;
    unsigned long long seed;
    int thinking;         /* --thinking on 1, off 0; -1: the conversation's setting */
    int no_ckpt;
    long interval;        /* --interval; 0: the default */
    int stats, json;
    const char *grammar;  /* --grammar-file's text: the answer follows the GBNF grammar */
    const char *schema;   /* --json-schema's text: the answer is JSON valid under the schema */
    const struct ask_image *images; /* --image FILE, each: the message carries them before its text */
    int n_images;
} ask_req;

typedef struct ask_image {
    const char *name;     /* the file's name without its folder: the attachment's */
    const void *bytes;
    size_t len;
} ask_image;

struct cJSON;
/* The request's format as settings.json has it, put into the object o: "grammar", or
 * "response_format": {"type": "json_schema", ...} with the schema. 0, or -1 after printing
 * why when the schema is not JSON. The mount (or settings_parse) validates the rest. */
int ask_format_settings(struct cJSON *o, const ask_req *q);

typedef struct {
    char *answer, *reasoning; /* malloc'd, NUL-terminated */
    size_t answer_len, reasoning_len;
    int finish;               /* enum gen_finish */
    int prompt_tokens, reused_tokens, generated_tokens, reasoning_tokens; /* -1: unknown */
} ask_result;

/* Through the mount on mnt: mkdir NAME if new, system, the images into attachments/,
 * settings.json for this turn (put back after the send), message, then thinking, reply
 * and status. The answer is printed as it streams unless req->json. 0, or -1 after
 * printing the reason (the mount's errno and its `error` file). */
int ask_through_mount(const char *mnt, const ask_req *req, ask_result *res);

/* The exit status for a reply that ended so: 0, or 2 (cut by -n) or 3 (the context is
 * full); what --json and --stats call the finish. */
int ask_exit_status(int finish);
const char *ask_finish_name(int finish);
/* prints res as --json's object on stdout */
void ask_print_json(const ask_req *req, const ask_result *res);

#endif
