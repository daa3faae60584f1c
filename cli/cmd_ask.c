/* cmd_ask.c - `chatfs ask`: one user turn of a stored conversation, for scripts and
 * checks of the checkpoint store.
 *
 *   chatfs ask -m MODEL [--db DB] [--system TEXT|@FILE] [--conversation NAME]
 *              [-n MAX_TOKENS] [--stats] [--no-checkpoints] [-t THREADS]
 *              [--interval N] [--ram-budget BYTES] [--disk-budget BYTES] [--draft N]
 *              [--draft-vocab V] TEXT|@FILE
 *
 * Appends TEXT as a user turn to conversation NAME (created if new; without a name
 * the conversation is this one turn and is not stored), prints the reply on stdout
 * and stores the turn in the table ask_turns of the same database. Greedy, so runs
 * are reproducible. --stats prints one JSON line on stderr. A database that SQLite
 * cannot read is moved aside (DB.corrupt-<time>) and a new one started. */
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

/* Opens the database with the tables of ask; one that cannot be read is moved aside. */
static sqlite3 *open_db(const char *path) {
    for (int attempt = 0; attempt < 2; attempt++) {
        char err[512] = "";
        sqlite3 *db = db_open(path, err, sizeof err);
        if (db && cs_migrate(db, err, sizeof err) == 0) {
            /* a cheap probe of the file: every table's root must be readable */
            sqlite3_stmt *st = NULL;
            int ok = sqlite3_prepare_v2(db, "SELECT count(*) FROM ask_turns", -1, &st, NULL) == SQLITE_OK &&
                     sqlite3_step(st) == SQLITE_ROW;
            sqlite3_finalize(st);
            if (ok) {
                sqlite3_busy_timeout(db, 60000);
                return db;
            }
            snprintf(err, sizeof err, "%s", sqlite3_errmsg(db));
        }
        if (db && strstr(err, "newer than")) {
            cli_error("%s: %s", path, err);
            db_close(db);
            return NULL;
        }
        db_close(db);
        if (attempt == 1 || access(path, F_OK) != 0) {
            cli_error("%s", err);
            return NULL;
        }
        char aside[1100];
        snprintf(aside, sizeof aside, "%s.corrupt-%ld", path, (long)time(NULL));
        cli_error("%s is unreadable (%s); moved it to %s and starting a new database", path, err, aside);
        if (rename(path, aside) != 0) {
            cli_error("cannot move %s: %s", path, strerror(errno));
            return NULL;
        }
        char side[1100];
        snprintf(side, sizeof side, "%s-wal", path);
        unlink(side);
        snprintf(side, sizeof side, "%s-shm", path);
        unlink(side);
    }
    return NULL;
}

static int load_turns(sqlite3 *db, const char *conv, msg_list *l) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT role, content FROM ask_turns WHERE conversation=? ORDER BY idx", -1, &st,
                           NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_text(st, 1, conv, -1, SQLITE_STATIC);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *role = (const char *)sqlite3_column_text(st, 0), *c = (const char *)sqlite3_column_text(st, 1);
        if (!role || !c || (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant"))) continue;
        if (push_msg(l, role, c) != 0) break;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : -1;
}

static int store_turns(sqlite3 *db, const char *conv, const msg_list *l, int from) {
    char err[256];
    if (db_exec(db, "BEGIN IMMEDIATE", err, sizeof err) != 0) return -1;
    sqlite3_stmt *st;
    int ok = sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO ask_turns(conversation, idx, role, content) VALUES(?,?,?,?)",
                                -1, &st, NULL) == SQLITE_OK;
    for (int i = from; ok && i < l->n; i++) {
        sqlite3_reset(st);
        sqlite3_bind_text(st, 1, conv, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 2, i);
        sqlite3_bind_text(st, 3, l->m[i].role, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, l->m[i].content, -1, SQLITE_STATIC);
        ok = sqlite3_step(st) == SQLITE_DONE;
    }
    if (ok) sqlite3_finalize(st);
    if (!ok || db_exec(db, "COMMIT", err, sizeof err) != 0) {
        db_exec(db, "ROLLBACK", NULL, 0);
        return -1;
    }
    return 0;
}

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
    long max_tokens = 256, threads = 0, interval = 0, draft = -1, draft_vocab = 0;
    int stats = 0, no_ckpt = 0;
    size_t ram_budget = 0, disk_budget = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-m")) model_path = v, i++;
        else if (!strcmp(a, "--db")) db_arg = v, i++;
        else if (!strcmp(a, "--system")) system_arg = v, i++;
        else if (!strcmp(a, "--conversation")) conv = v, i++;
        else if (!strcmp(a, "-n")) { if (!cli_int(a, v, 1, 1 << 20, &max_tokens)) return 1; i++; }
        else if (!strcmp(a, "-t")) { if (!cli_int(a, v, 0, 256, &threads)) return 1; i++; }
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
    if (!model_path || !text_arg) {
        cli_error("ask needs -m MODEL and TEXT");
        return 1;
    }
    char db_path[1024];
    if (db_arg) snprintf(db_path, sizeof db_path, "%s", db_arg);
    else db_default_path(db_path, sizeof db_path);

    int rc = 1;
    char *text = cli_text_arg(text_arg), *system = system_arg ? cli_text_arg(system_arg) : NULL;
    msg_list l = {0};
    sqlite3 *db = NULL;
    chat_engine *e = NULL;
    text_buf reply = {0};
    if (!text || (system_arg && !system)) goto out;
    db = open_db(db_path);
    if (!db) goto out;
    if (conv && load_turns(db, conv, &l) != 0) {
        cli_error("cannot read conversation %s: %s", conv, sqlite3_errmsg(db));
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

    char err[512];
    engine_config cfg = {.model_path = model_path, .db_path = db_path, .threads = (int)threads,
                         .ram_budget = ram_budget, .disk_budget = disk_budget,
                         .draft = draft < 0 ? 0 : draft == 0 ? -1 : (int)draft, .draft_vocab = (int)draft_vocab};
    e = engine_open(&cfg, err, sizeof err);
    if (!e) {
        cli_error("%s", err);
        goto out;
    }
    gen_settings s;
    gen_settings_defaults(&s);
    s.max_tokens = (int)max_tokens;
    s.checkpoints = !no_ckpt;
    s.session = conv;
    if (interval) s.checkpoint_interval = (int)interval;
    gen_report r;
    if (engine_run(e, l.m, l.n, &s, on_text, &reply, &r, err, sizeof err) != 0) {
        cli_error("%s", err);
        goto out;
    }
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
        cJSON_AddNumberToObject(o, "draft", engine_draft(e));
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
    if (conv && store_turns(db, conv, &l, stored) != 0) {
        cli_error("cannot store the turn: %s", sqlite3_errmsg(db));
        goto out;
    }
    rc = 0;
out:
    engine_close(e);
    db_close(db);
    free_msgs(&l);
    free(reply.buf);
    free(text);
    free(system);
    return rc;
}
