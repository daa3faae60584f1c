/* cmd_ask.c - `chatfs ask`: one user turn of a stored conversation, for scripts and
 * checks of the checkpoint store.
 *
 *   chatfs ask [-m MODEL] [--db DB] [--system TEXT|@FILE] [--conversation NAME]
 *              [-n MAX_TOKENS] [-c N] [--stats] [--no-checkpoints] [-t THREADS]
 *              [--interval N] [--ram-budget BYTES] [--disk-budget BYTES] [--draft N]
 *              [--draft-vocab V] TEXT|@FILE
 *   chatfs ask --engine URL [--model NAME] [--api-key-file FILE] [--db DB] ... TEXT|@FILE
 *
 * Appends TEXT as a user turn to conversation NAME (created if new; without a name
 * the conversation is this one turn and is not stored), prints the reply on stdout
 * and stores the turn in the same database (store/ask_history.h). Greedy, so runs are
 * reproducible. --stats prints one JSON line on stderr. A database that SQLite cannot
 * read is moved aside (DB.corrupt-<time>) and a new one started. With --engine the reply
 * comes from an OpenAI-compatible server (fs/backend.h) and the database keeps only the turns. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/runtime/speculative.h"
#include "engine/runtime/chat.h"
#include "fs/backend.h"
#include "store/ask_history.h"
#include "store/ckpt_store.h"
#include "store/db.h"

typedef struct {
    chat_msg *m;
    int n, cap;
} msg_list;

static int push_msg(msg_list *l, const char *role, const char *content) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        chat_msg *g = realloc(l->m, sizeof *g * (size_t)cap);
        if (!g) return -1;
        l->m = g;
        l->cap = cap;
    }
    l->m[l->n].role = strdup(role);
    l->m[l->n].content = strdup(content);
    l->m[l->n].reasoning_content = NULL;
    if (!l->m[l->n].role || !l->m[l->n].content) return -1;
    l->n++;
    return 0;
}

static void free_msgs(msg_list *l) {
    for (int i = 0; i < l->n; i++) {
        free((char *)l->m[i].role);
        free((char *)l->m[i].content);
    }
    free(l->m);
}

static int add_msg(void *ud, const char *role, const char *content) { return push_msg(ud, role, content); }

typedef struct {
    char *buf;
    size_t n, cap;
} text_buf;

static void on_text(void *ud, const char *t, size_t n) {
    text_buf *b = ud;
    fwrite(t, 1, n, stdout);
    fflush(stdout);
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *g = realloc(b->buf, cap);
        if (!g) return;
        b->buf = g;
        b->cap = cap;
    }
    memcpy(b->buf + b->n, t, n);
    b->n += n;
    b->buf[b->n] = 0;
}

int cmd_ask(int argc, char **argv) {
    const char *model_path = NULL, *db_arg = NULL, *system_arg = NULL, *conv = NULL, *text_arg = NULL;
    const char *engine_url = NULL, *remote_model = NULL, *key_file = NULL;
    long max_tokens = 256, threads = 0, interval = 0, ctx = 0, draft = -1, draft_vocab = 0;
    int stats = 0, no_ckpt = 0;
    size_t ram_budget = CS_DEFAULT_RAM_BUDGET, disk_budget = CS_DEFAULT_DISK_BUDGET;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-m")) model_path = v, i++;
        else if (!strcmp(a, "--db")) db_arg = v, i++;
        else if (!strcmp(a, "--system")) system_arg = v, i++;
        else if (!strcmp(a, "--conversation")) conv = v, i++;
        else if (!strcmp(a, "--engine")) engine_url = v, i++;
        else if (!strcmp(a, "--model")) remote_model = v, i++;
        else if (!strcmp(a, "--api-key-file")) key_file = v, i++;
        else if (!strcmp(a, "-n")) { if (!cli_int(a, v, 1, 1 << 20, &max_tokens)) return 1; i++; }
        else if (!strcmp(a, "-t")) { if (!cli_int(a, v, 0, 256, &threads)) return 1; i++; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { if (!cli_int(a, v, 16, 1 << 24, &ctx)) return 1; i++; }
        else if (!strcmp(a, "--interval")) { if (!cli_int(a, v, 1, 1 << 24, &interval)) return 1; i++; }
        else if (!strcmp(a, "--ram-budget")) { if (!cli_size(a, v, &ram_budget)) return 1; i++; }
        else if (!strcmp(a, "--disk-budget")) { if (!cli_size(a, v, &disk_budget)) return 1; i++; }
        else if (!strcmp(a, "--draft")) { if (!cli_int(a, v, 0, SPEC_MAX_DRAFT, &draft)) return 1; i++; }
        else if (!strcmp(a, "--draft-vocab")) { if (!cli_int(a, v, 0, 1 << 30, &draft_vocab)) return 1; i++; }
        else if (!strcmp(a, "--stats")) stats = 1;
        else if (!strcmp(a, "--no-checkpoints")) no_ckpt = 1;
        else if (a[0] == '-' && a[1]) { cli_error("ask: unknown option '%s'", a); return 1; }
        else if (!text_arg) text_arg = a;
        else { cli_error("ask: more than one TEXT"); return 1; }
        if (i >= argc) { cli_error("%s needs a value", a); return 1; }
    }
    if (!text_arg) {
        cli_error("ask needs TEXT (chatfs ask --help)");
        return 1;
    }
    if (engine_url && model_path) {
        cli_error("ask: --engine URL replaces -m MODEL: give one of them");
        return 1;
    }
    if (engine_url && (draft >= 0 || draft_vocab > 0)) {
        cli_error("ask: --draft and --draft-vocab are the local engine's (a server decodes as it is configured)");
        return 1;
    }
    char model_buf[1100];
    if (!model_path && !engine_url && !(model_path = cli_default_model(model_buf, sizeof model_buf))) return 1;
    char db_path[1024];
    if (db_arg) snprintf(db_path, sizeof db_path, "%s", db_arg);
    else db_default_path(db_path, sizeof db_path);

    int rc = 1;
    char *text = cli_text_arg(text_arg), *system = system_arg ? cli_text_arg(system_arg) : NULL;
    msg_list l = {0};
    store_db *db = NULL;
    ckpt_store *checkpoints = NULL;
    chat_engine *e = NULL;
    fs_backend *be = NULL;
    text_buf reply = {0};
    int lock_fd = -1;
    if (!text || (system_arg && !system)) goto out;
    /* One process writes a database (store/db.h). When a mount holds this one, ask
     * still runs: its checkpoints stay in RAM and it adds only its own turns (table
     * ask_turns, which the mount never touches) through SQLite's locking. */
    char owner[1200];
    int lk = db_claim(db_path, "chatfs ask", 0, &lock_fd, owner, sizeof owner);
    if (lk < 0) {
        cli_error("%s", owner);
        goto out;
    }
    int shared = lk > 0;
    if (shared)
        cli_error("%s is in use by %s: this run keeps its checkpoints in RAM and adds only its turns to the database",
                  db_path, owner);
    char err[512], note[1200];
    db = db_open_or_renew(db_path, !shared, note, sizeof note, err, sizeof err);
    if (note[0]) cli_error("%s", note);
    if (!db || ask_history_open(db, err, sizeof err) != 0) {
        cli_error("%s: %s", db_path, err);
        goto out;
    }
    if (conv && ask_history_load(db, conv, add_msg, &l, err, sizeof err) != 0) {
        cli_error("cannot read conversation %s: %s", conv, err);
        goto out;
    }
    int stored = l.n; /* turns already in the database */
    if (system) {
        if (l.n > 0 && !strcmp(l.m[0].role, "system")) {
            if (strcmp(l.m[0].content, system)) { /* a new system prompt replaces the old one */
                free((char *)l.m[0].content);
                l.m[0].content = strdup(system);
                stored = 0;
            }
        } else if (l.n == 0) {
            push_msg(&l, "system", system);
        } else {
            cli_error("conversation %s has no system prompt to replace", conv);
            goto out;
        }
    }
    if (push_msg(&l, "user", text) != 0) goto out;

    gen_settings s;
    gen_settings_defaults(&s);
    s.max_tokens = (int)max_tokens;
    s.checkpoints = !no_ckpt;
    s.session = conv;
    if (interval) s.checkpoint_interval = (int)interval;
    gen_report r;
    if (engine_url) {
        remote_config rc = {engine_url, remote_model, key_file, 1};
        if (!(be = backend_remote_open(&rc, err, sizeof err)) ||
            backend_run(be, l.m, l.n, &s, on_text, &reply, &r, err, sizeof err) != 0) {
            if (reply.n) putchar('\n'); /* the partial reply stays on stdout */
            cli_error("%s", err);
            goto out;
        }
        be->close(be);
        be = NULL;
        r.source = "server";
        goto replied;
    }
    cs_config budgets = {ram_budget, disk_budget, 0};
    if (!(checkpoints = cs_new(shared ? NULL : db, &budgets, err, sizeof err))) {
        cli_error("%s", err);
        goto out;
    }
    if (err[0]) cli_error("%s", err);
    engine_config cfg = {.model_path = model_path, .checkpoints = checkpoints, .threads = (int)threads,
                         .n_ctx = (int)ctx, .draft = draft < 0 ? 0 : draft == 0 ? -1 : (int)draft,
                         .draft_vocab = (int)draft_vocab};
    e = engine_open(&cfg, err, sizeof err);
    if (!e) {
        cli_error("%s", err);
        goto out;
    }
    if (engine_run(e, l.m, l.n, &s, on_text, &reply, &r, err, sizeof err) != 0) {
        cli_error("%s", err);
        goto out;
    }
replied:
    putchar('\n');
    fflush(stdout);
    if (stats) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "prompt_tokens", r.prompt_tokens);
        cJSON_AddNumberToObject(o, "reused_tokens", r.reused_tokens);
        cJSON_AddNumberToObject(o, "computed_tokens", r.computed_tokens);
        cJSON_AddStringToObject(o, "source", r.source ? r.source : "none");
        if (r.miss_reason[0]) cJSON_AddStringToObject(o, "miss_reason", r.miss_reason);
        else cJSON_AddNullToObject(o, "miss_reason");
        cJSON_AddNumberToObject(o, "ttft_ms", r.ttft_ms);
        cJSON_AddNumberToObject(o, "decode_tokens_per_s", r.decode_tokens_per_s);
        cJSON_AddNumberToObject(o, "generated_tokens", r.generated_tokens);
        cJSON_AddNumberToObject(o, "draft", e ? engine_draft(e) : 0);
        cJSON_AddNumberToObject(o, "drafted_tokens", r.drafted_tokens);
        cJSON_AddNumberToObject(o, "accepted_tokens", r.accepted_tokens);
        cJSON_AddNumberToObject(o, "decode_passes", r.decode_passes);
        char *js = cJSON_PrintUnformatted(o);
        fprintf(stderr, "%s\n", js ? js : "{}");
        free(js);
        cJSON_Delete(o);
    }
    engine_close(e); /* the post-generation checkpoint and the database write happen here */
    e = NULL;
    if (push_msg(&l, "assistant", reply.buf ? reply.buf : "") != 0) goto out;
    if (conv) {
        const char **roles = malloc(sizeof *roles * (size_t)l.n), **contents = malloc(sizeof *contents * (size_t)l.n);
        int ok = roles && contents;
        for (int i = 0; ok && i < l.n; i++) roles[i] = l.m[i].role, contents[i] = l.m[i].content;
        ok = ok && ask_history_store(db, conv, roles, contents, stored, l.n, err, sizeof err) == 0;
        free(roles);
        free(contents);
        if (!ok) {
            cli_error("cannot store the turn: %s", err);
            goto out;
        }
    }
    rc = 0;
out:
    if (be) be->close(be);
    engine_close(e);
    cs_close(checkpoints);
    db_close(db);
    db_unclaim(lock_fd);
    free_msgs(&l);
    free(reply.buf);
    free(text);
    free(system);
    return rc;
}
