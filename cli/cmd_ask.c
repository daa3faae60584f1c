/* cmd_ask.c - `chatfs ask`: one user turn of a conversation, for scripts and checks of
 * the checkpoint store.
 *
 *   chatfs ask [-m MODEL] [--db DB] [--system TEXT|@FILE] [--conversation NAME]
 *              [-n MAX_TOKENS] [--temp T] [--seed S] [--thinking on|off] [--json]
 *              [--grammar-file GBNF | --json-schema SCHEMA.json] [--image FILE]... [--mmproj FILE]
 *              [-c N] [--stats] [--no-checkpoints] [-t THREADS] [--interval N]
 *              [--ram-budget BYTES] [--disk-budget BYTES] [--draft N] [--draft-vocab V]
 *              TEXT|@FILE|-
 *   chatfs ask --engine URL [--model NAME] [--api-key-file FILE] [--db DB] ... TEXT|@FILE|-
 *
 * One conversation store: conversation NAME is the one a mount of the database shows as
 * NAME/ (store/conversations.h). Without a mount holding the database, ask opens it,
 * stores the message as the mount would (with an empty reply marked incomplete, in one
 * transaction), generates with its own engine and stores the reply. When a mount holds
 * it (store/db.h: the lock's note names the mount point), ask goes through that mount's
 * files (ask_mount.c): its model answers, and what the mount shows is what ask made.
 * Without a name the conversation is this one turn and is not kept.
 *
 * The message is taken as the mount takes a write to `message`: UTF-8 without NUL (else
 * the mount's reason and exit 1), one final newline off, and a blank one is refused.
 * Greedy unless --temp, so runs are reproducible; -n (256), --temp, --seed and
 * --thinking apply to this turn only (through a mount, ask writes them to the
 * conversation's settings.json for the send and puts the old settings back). Exit 0 when
 * the model ended its turn, 2 when -n cut the reply, 3 when the context did, 1 on an
 * error; --json prints the answer, reasoning, finish and token counts as one object.
 * --grammar-file and --json-schema constrain the answer as settings.json's grammar and
 * response_format do (through a mount: they are this turn's settings).
 * --image FILE (up to 16) puts images in the message, before its text, as files copied
 * into NAME/attachments/ do (named as the file, or TTT-K-NAME when the conversation has
 * one of that name); the projector is --mmproj's or the one mmproj*.gguf beside the
 * model, loaded only when the conversation has images.
 * --stats prints one JSON line on stderr. A database that SQLite cannot read is moved
 * aside (DB.corrupt-<time>) and a new one started. With --engine the reply comes from an
 * OpenAI-compatible server (fs/backend.h). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/ask.h"
#include "cli/cli.h"
#include "engine/runtime/chat.h"
#include "engine/runtime/speculative.h"
#include "fs/backend.h"
#include "fs/chatfs.h"
#include "fs/settings.h"
#include "store/ckpt_store.h"
#include "store/conversations.h"
#include "store/db.h"

#define MOUNT_NOTE "chatfs mount on "
#define MAX_IMAGES 16

typedef struct {
    chat_msg *m;
    int n, cap;
    char *settings; /* the conversation's settings.json, NULL when new */
    int last_complete;
    int *turn_msg, n_turns;  /* the message each stored turn became */
    convs_attachment *att;   /* the conversation's images (copies), in seq order */
    int n_att;
    int64_t next_seq;
    chat_image *images;      /* every message's images, message by message */
} conv_load;

static int push_msg(conv_load *l, const char *role, const char *content, size_t len, const char *reasoning,
                    size_t rlen) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        chat_msg *g = realloc(l->m, sizeof *g * (size_t)cap);
        if (!g) return -1;
        l->m = g;
        l->cap = cap;
    }
    chat_msg *m = &l->m[l->n];
    *m = (chat_msg){0};
    m->role = strdup(role);
    m->content = strndup(content ? content : "", len);
    m->reasoning_content = reasoning && rlen ? strndup(reasoning, rlen) : NULL;
    l->n++;
    return m->role && m->content && (!reasoning || !rlen || m->reasoning_content) ? 0 : -1;
}

static void free_msgs(conv_load *l) {
    for (int i = 0; i < l->n; i++) {
        free((char *)l->m[i].role);
        free((char *)l->m[i].content);
        free((char *)l->m[i].reasoning_content);
    }
    free(l->m);
    free(l->settings);
    free(l->turn_msg);
    for (int i = 0; i < l->n_att; i++) {
        free((char *)l->att[i].name);
        free((char *)l->att[i].hash);
        free((void *)l->att[i].bytes);
    }
    free(l->att);
    free(l->images);
}

/* an image for the conversation: a copy of what the store gave, or of a file given */
static int push_image(conv_load *l, const convs_attachment *a) {
    convs_attachment *g = realloc(l->att, sizeof *g * (size_t)(l->n_att + 1));
    if (!g) return -1;
    l->att = g;
    convs_attachment *c = &l->att[l->n_att];
    *c = *a;
    c->name = strdup(a->name);
    c->hash = strdup(a->hash);
    void *bytes = malloc(a->len ? a->len : 1);
    if (bytes) memcpy(bytes, a->bytes, a->len);
    c->bytes = bytes;
    l->n_att++;
    if (a->seq >= l->next_seq) l->next_seq = a->seq + 1;
    return c->name && c->hash && bytes ? 0 : -1;
}

static int load_attachment(void *ud, int64_t conv, const convs_attachment *a) {
    (void)conv;
    return push_image(ud, a);
}

/* Each user message gets the images of its turn, the new one (turn `new_turn`) those
 * that wait (a mount's attachments/ not sent yet) and then the files given, as the mount
 * sends them: before its text, in the order they were added. */
static int give_images(conv_load *l, int new_turn) {
    if (!l->n_att) return 0;
    if (!(l->images = malloc(sizeof *l->images * (size_t)l->n_att))) return -1;
    int used = 0;
    for (int t = 1; t <= new_turn; t++) {
        int mi = t <= l->n_turns ? l->turn_msg[t - 1] : l->n - 1;
        int first = used;
        for (int k = 0; k < l->n_att; k++)
            if (l->att[k].turn == t || (t == new_turn && l->att[k].turn == 0))
                l->images[used++] = (chat_image){l->att[k].bytes, l->att[k].len};
        if (used > first && mi >= 0 && !strcmp(l->m[mi].role, "user")) {
            l->m[mi].images = l->images + first;
            l->m[mi].n_images = used - first;
        }
    }
    return 0;
}

static int load_conv(void *ud, int64_t id, const char *name, const char *system, const char *settings,
                     int64_t mtime_ns) {
    (void)id, (void)name, (void)mtime_ns;
    conv_load *l = ud;
    l->settings = strdup(settings ? settings : "{}");
    if (!l->settings) return -1;
    return system && *system ? push_msg(l, "system", system, strlen(system), NULL, 0) : 0;
}

static int load_turn(void *ud, int64_t conv, int idx, const convs_turn *t) {
    (void)conv, (void)idx;
    conv_load *l = ud;
    int *g = realloc(l->turn_msg, sizeof *g * (size_t)(l->n_turns + 1));
    if (!g) return -1;
    l->turn_msg = g;
    l->turn_msg[l->n_turns++] = l->n;
    l->last_complete = t->complete;
    return push_msg(l, t->user ? "user" : "assistant", t->text, t->len, t->reasoning, t->reasoning_len);
}

typedef struct {
    char *buf;
    size_t n, cap;
} text_buf;

static void buf_add(text_buf *b, const char *t, size_t n) {
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

typedef struct {
    text_buf answer, reasoning;
    int print;
} run_out;

/* the text as the mount shows and stores it: a model's stray bytes as U+FFFD (a
 * callback's text is whole characters where it is UTF-8) */
static void on_text(void *ud, const char *t, size_t n) {
    run_out *o = ud;
    size_t k;
    char *r = fs_reply_text(t, n, &k);
    if (!r) return;
    if (o->print) {
        fwrite(r, 1, k, stdout);
        fflush(stdout);
    }
    buf_add(&o->answer, r, k);
    free(r);
}

static void on_reasoning(void *ud, const char *t, size_t n) {
    size_t k;
    char *r = fs_reply_text(t, n, &k);
    if (r) buf_add(&((run_out *)ud)->reasoning, r, k);
    free(r);
}

/* all of stdin, or of FILE for @FILE, or the argument itself; NULL after saying why */
static char *read_text(const char *arg, size_t *len) {
    if (arg[0] != '@' && strcmp(arg, "-")) {
        *len = strlen(arg);
        return strdup(arg);
    }
    FILE *f = !strcmp(arg, "-") ? stdin : fopen(arg + 1, "rb");
    if (!f) {
        cli_error("%s: %s", arg + 1, strerror(errno));
        return NULL;
    }
    text_buf b = {0};
    char chunk[65536];
    for (size_t k; (k = fread(chunk, 1, sizeof chunk, f)) > 0;) buf_add(&b, chunk, k);
    int bad = ferror(f);
    if (f != stdin) fclose(f);
    if (bad) {
        cli_error("%s: %s", f == stdin ? "stdin" : arg + 1, strerror(errno));
        free(b.buf);
        return NULL;
    }
    *len = b.n;
    return b.buf ? b.buf : strdup("");
}

int ask_exit_status(int finish) { return finish == FINISH_LENGTH ? 2 : finish == FINISH_CONTEXT ? 3 : 0; }

const char *ask_finish_name(int finish) {
    switch (finish) {
    case FINISH_EOG: return "end_of_turn";
    case FINISH_LENGTH: return "max_tokens";
    case FINISH_STOP: return "stop_string";
    case FINISH_CONTEXT: return "context_full";
    case FINISH_CANCELLED: return "stopped";
    case FINISH_ERROR: return "error";
    default: return "unknown";
    }
}

static void add_count(cJSON *o, const char *key, int v) {
    if (v >= 0) cJSON_AddNumberToObject(o, key, v);
    else cJSON_AddNullToObject(o, key);
}

void ask_print_json(const ask_req *req, const ask_result *res) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "answer", res->answer ? res->answer : "");
    cJSON_AddStringToObject(o, "reasoning", res->reasoning ? res->reasoning : "");
    cJSON_AddStringToObject(o, "finish_reason", ask_finish_name(res->finish));
    add_count(o, "prompt_tokens", res->prompt_tokens);
    add_count(o, "reused_tokens", res->reused_tokens);
    add_count(o, "generated_tokens", res->generated_tokens);
    add_count(o, "reasoning_tokens", res->reasoning_tokens);
    if (req->conv) cJSON_AddStringToObject(o, "conversation", req->conv);
    else cJSON_AddNullToObject(o, "conversation");
    char *js = cJSON_PrintUnformatted(o);
    printf("%s\n", js ? js : "{}");
    fflush(stdout);
    free(js);
    cJSON_Delete(o);
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

typedef struct {
    const char *model_path, *engine_url, *remote_model, *key_file;
    const char *mmproj; /* --mmproj, or the one beside the model: loaded when a message has images */
    const char *ctk, *ctv; /* -ctk/-ctv; NULL: the engine's default */
    long threads, ctx, draft, draft_vocab;
    size_t ram_budget, disk_budget;
} engine_opts;

/* The turn on this process's engine, the conversation read from and stored in the
 * database directly; shared: another chatfs ask holds the database (checkpoints stay
 * in RAM). Returns the exit status. */
static int ask_direct(const char *db_path, int shared, const ask_req *q, const engine_opts *eo) {
    int rc = 1;
    char err[600] = "", note[1200];
    conv_load l = {.last_complete = 1};
    store_db *db = NULL;
    convs_store *st = NULL;
    ckpt_store *checkpoints = NULL;
    fs_backend *be = NULL;
    run_out out = {.print = !q->json};
    conv_settings defaults, cs;
    int have_defaults = 0, have_cs = 0;
    int64_t id = 0;
    size_t len;
    char *text = fs_message_text(q->text, q->len, &len, err, sizeof err);
    if (!text) {
        cli_error("ask: %s (%s)", err, strerror(errno));
        return 1;
    }
    db = db_open_or_renew(db_path, !shared, note, sizeof note, err, sizeof err);
    if (note[0]) cli_error("%s", note);
    if (!db || !(st = convs_open(db, err, sizeof err))) {
        cli_error("%s: %s", db_path, err);
        goto out;
    }
    if (q->conv) {
        id = convs_find(st, q->conv);
        convs_loader ld = {&l, load_conv, load_turn, load_attachment};
        if (id < 0 || (id > 0 && convs_load_one(st, id, &ld, err, sizeof err) != 0)) {
            cli_error("cannot read conversation %s: %s", q->conv, id < 0 ? "the database cannot be read" : err);
            goto out;
        }
        if (!l.last_complete) {
            cli_error("ask: %s: its last reply is incomplete (being generated, or cut short when its writer "
                      "stopped): `echo regenerate > %s/ctl` in a mount replaces it",
                      q->conv, q->conv);
            goto out;
        }
    }
    int expect = l.n - (l.n && !strcmp(l.m[0].role, "system")); /* the turns already stored */
    if (q->system) {
        if (l.n && !strcmp(l.m[0].role, "system")) {
            free((char *)l.m[0].content);
            l.m[0].content = strdup(q->system);
        } else if (push_msg(&l, "system", q->system, strlen(q->system), NULL, 0) == 0) {
            chat_msg sys = l.m[l.n - 1]; /* the system prompt goes first */
            memmove(l.m + 1, l.m, sizeof *l.m * (size_t)(l.n - 1));
            l.m[0] = sys;
        }
    }
    if (push_msg(&l, "user", text, len, NULL, 0) != 0) goto out;
    for (int k = 0; k < q->n_images; k++) {
        char hash[33], name[300];
        fs_image_hash(q->images[k].bytes, q->images[k].len, hash);
        /* the file's name, or TTT-K-NAME when the conversation has an attachment of that name */
        for (int tries = 0, taken = 1; taken; tries++) {
            if (tries) snprintf(name, sizeof name, "%03d-%d-%.250s", expect + 1, k + tries, q->images[k].name);
            else snprintf(name, sizeof name, "%s", q->images[k].name);
            taken = 0;
            for (int i = 0; i < l.n_att; i++) taken |= !strcmp(l.att[i].name, name);
        }
        convs_attachment a = {l.next_seq, name, hash, q->images[k].bytes, q->images[k].len, 0, now_ns()};
        if (push_image(&l, &a) != 0) goto out;
    }
    if (give_images(&l, expect + 1) != 0) goto out;
    const char *mmproj = l.n_att ? eo->mmproj : NULL; /* the projector loads only for images */
    if (l.n_att && !mmproj && !eo->engine_url) {
        cli_error("ask: %s: images need the model's projector: --mmproj FILE, or one mmproj*.gguf beside the model "
                  "(%s)", q->n_images ? "--image" : q->conv, strerror(ENOTSUP));
        goto out;
    }

    if (eo->engine_url) {
        remote_config rcfg = {eo->engine_url, eo->remote_model, eo->key_file, 1};
        be = backend_remote_open(&rcfg, err, sizeof err);
    } else {
        cs_config budgets = {eo->ram_budget, eo->disk_budget, 0};
        if (!(checkpoints = cs_new(shared ? NULL : db, &budgets, err, sizeof err))) {
            cli_error("%s", err);
            goto out;
        }
        if (err[0]) cli_error("%s", err);
        engine_config cfg = {.model_path = eo->model_path, .checkpoints = cs_port(checkpoints), .threads = (int)eo->threads,
                             .n_ctx = (int)eo->ctx, .cache_type_k = eo->ctk, .cache_type_v = eo->ctv,
                             .draft = eo->draft < 0 ? 0 : eo->draft == 0 ? -1 : (int)eo->draft,
                             .draft_vocab = (int)eo->draft_vocab, .flush_at_close = 1, .mmproj_path = mmproj};
        be = backend_engine_open(&cfg, err, sizeof err);
    }
    if (!be) {
        cli_error("%s", err);
        goto out;
    }
    for (int k = 0; k < q->n_images; k++) /* checked as the mount checks a file at its close */
        if (!be->check_image || be->check_image(be, q->images[k].bytes, q->images[k].len, err, sizeof err) != 0) {
            cli_error("ask: --image %s: %s (%s)", q->images[k].name, be->check_image ? err : "the engine takes no images",
                      strerror(be->check_image && errno == ENOTSUP ? ENOTSUP : EINVAL));
            goto out;
        }
    /* the settings the mount would use for the conversation (its settings.json over
     * the root's, over the model's recommended sampling), then this turn's options */
    settings_builtin(&defaults);
    have_defaults = 1;
    if (be->settings_defaults) {
        gen_settings rec;
        be->settings_defaults(be, &rec);
        settings_recommend(&defaults, &rec);
    }
    char *g = NULL;
    if (convs_get_global(st, "settings", &g) == 0 && g) {
        conv_settings root;
        if (settings_parse(g, strlen(g), &defaults, &root, err, sizeof err) == 1) {
            settings_free(&defaults);
            defaults = root;
        }
        free(g);
    }
    if (!l.settings || settings_parse(l.settings, strlen(l.settings), &defaults, &cs, err, sizeof err) != 1)
        settings_copy(&cs, &defaults);
    have_cs = 1;
    cs.temperature = q->temp;
    cs.seed = q->seed_given ? (int64_t)(q->seed & INT64_MAX) : -1;
    cs.max_tokens = (int)q->max_tokens;
    if (q->thinking >= 0) cs.thinking = q->thinking;
    if (q->no_ckpt) cs.checkpoints = 0;
    if (q->interval) cs.checkpoint_interval = (int)q->interval;
    if (q->grammar || q->schema) { /* checked and converted as the mount's settings.json is */
        cJSON *fo = cJSON_CreateObject();
        char *fjson = fo && ask_format_settings(fo, q) == 0 ? cJSON_PrintUnformatted(fo) : NULL;
        cJSON_Delete(fo);
        conv_settings with;
        err[0] = 0;
        int ok = fjson && settings_parse(fjson, strlen(fjson), &cs, &with, err, sizeof err) == 1;
        free(fjson);
        if (!ok) {
            if (err[0]) cli_error("ask: %s", err);
            goto out;
        }
        settings_free(&cs);
        cs = with;
    }
    gen_settings s;
    settings_to_gen(&cs, &s);
    if (q->seed_given) s.seed = q->seed;
    char session[64];
    if (q->conv) {
        char *json = settings_render(&defaults);
        id = convs_append_message(st, q->conv, json ? json : "{}", q->system, expect, text, len, now_ns(), err,
                                  sizeof err);
        free(json);
        if (id < 0) {
            cli_error("ask: the message was not stored: %s", err);
            goto out;
        }
        /* the images go with the new turn: the waiting ones and then the files given */
        for (int k = 0; k < l.n_att; k++) {
            convs_attachment *a = &l.att[k];
            if (a->turn) continue;
            a->turn = expect + 1;
            int e = k < l.n_att - q->n_images
                        ? convs_set_attachment_turns(st, id, &a->seq, &a->turn, 1, err, sizeof err)
                        : convs_put_attachment(st, id, a, err, sizeof err);
            if (e) {
                cli_error("ask: the image %s was not stored: %s", a->name, err);
                if (!convs_replace_turns(st, id, expect + 1, NULL, 0, NULL, err, sizeof err) && expect == 0 &&
                    !l.settings)
                    convs_delete(st, id, err, sizeof err); /* nor is the message */
                goto out;
            }
        }
        snprintf(session, sizeof session, "conversation-%lld", (long long)id);
        s.session = session; /* as the mount names it: the checkpoints count against one budget */
    }
    gen_report r;
    memset(&r, 0, sizeof r);
    int ran = backend_run(be, l.m, l.n, &s, on_text, on_reasoning, &out, &r, err, sizeof err);
    int refused = ran != 0 && !out.answer.n && !out.reasoning.n && (errno == EFBIG || errno == EINVAL);
    if (ran != 0) {
        if (out.answer.n && !q->json) putchar('\n'); /* the partial reply stays on stdout */
        cli_error("%s", err);
    }
    if (id > 0) { /* the reply is kept as far as it got; a message refused at once is not */
        char e2[600];
        int k = refused ? convs_replace_turns(st, id, expect + 1, NULL, 0, NULL, e2, sizeof e2)
                        : convs_update_reply(st, id, expect + 2, out.answer.buf ? out.answer.buf : "", out.answer.n,
                                             out.reasoning.buf, out.reasoning.n, NULL, 1, e2, sizeof e2);
        if (!k && refused && expect == 0 && !l.settings) k = convs_delete(st, id, e2, sizeof e2);
        if (k) {
            cli_error("cannot store the reply: %s", e2);
            ran = -1;
        }
    }
    if (ran != 0) goto out;
    if (!q->json) putchar('\n');
    fflush(stdout);
    if (q->stats) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "prompt_tokens", r.prompt_tokens);
        cJSON_AddNumberToObject(o, "reused_tokens", r.reused_tokens);
        cJSON_AddNumberToObject(o, "computed_tokens", r.computed_tokens);
        cJSON_AddStringToObject(o, "source", eo->engine_url ? "server" : r.source ? r.source : "none");
        if (r.miss_reason[0]) cJSON_AddStringToObject(o, "miss_reason", r.miss_reason);
        else cJSON_AddNullToObject(o, "miss_reason");
        cJSON_AddNumberToObject(o, "ttft_ms", r.ttft_ms);
        cJSON_AddNumberToObject(o, "decode_tokens_per_s", r.decode_tokens_per_s);
        cJSON_AddNumberToObject(o, "generated_tokens", r.generated_tokens);
        cJSON_AddNumberToObject(o, "reasoning_tokens", r.reasoning_tokens);
        cJSON_AddStringToObject(o, "finish_reason", ask_finish_name(r.finish));
        cJSON_AddNumberToObject(o, "draft", eo->engine_url ? 0 : engine_draft(be->ctx));
        cJSON_AddNumberToObject(o, "drafted_tokens", r.drafted_tokens);
        cJSON_AddNumberToObject(o, "accepted_tokens", r.accepted_tokens);
        cJSON_AddNumberToObject(o, "decode_passes", r.decode_passes);
        char *js = cJSON_PrintUnformatted(o);
        fprintf(stderr, "%s\n", js ? js : "{}");
        free(js);
        cJSON_Delete(o);
    }
    if (q->json) {
        ask_result res = {out.answer.buf, out.reasoning.buf, out.answer.n, out.reasoning.n, r.finish,
                          r.prompt_tokens, r.reused_tokens, r.generated_tokens, r.reasoning_tokens};
        ask_print_json(q, &res);
    }
    be->close(be); /* the post-generation checkpoint and the database write happen here */
    be = NULL;
    rc = ask_exit_status(r.finish);
out:
    if (be) be->close(be);
    if (have_cs) settings_free(&cs);
    if (have_defaults) settings_free(&defaults);
    cs_close(checkpoints);
    convs_close(st);
    db_close(db);
    free_msgs(&l);
    free(out.answer.buf);
    free(out.reasoning.buf);
    free(text);
    return rc;
}

static int through_mount(const char *mnt, const ask_req *q) {
    ask_result res = {0};
    if (ask_through_mount(mnt, q, &res) != 0) {
        free(res.answer), free(res.reasoning);
        return 1;
    }
    if (q->json) ask_print_json(q, &res);
    if (q->stats) {
        cJSON *o = cJSON_CreateObject();
        add_count(o, "prompt_tokens", res.prompt_tokens);
        add_count(o, "reused_tokens", res.reused_tokens);
        add_count(o, "computed_tokens",
                  res.prompt_tokens >= 0 && res.reused_tokens >= 0 ? res.prompt_tokens - res.reused_tokens : -1);
        cJSON_AddStringToObject(o, "source", "mount");
        add_count(o, "generated_tokens", res.generated_tokens);
        add_count(o, "reasoning_tokens", res.reasoning_tokens);
        cJSON_AddStringToObject(o, "finish_reason", ask_finish_name(res.finish));
        char *js = cJSON_PrintUnformatted(o);
        fprintf(stderr, "%s\n", js ? js : "{}");
        free(js);
        cJSON_Delete(o);
    }
    free(res.answer), free(res.reasoning);
    return ask_exit_status(res.finish);
}

int ask_format_settings(cJSON *o, const ask_req *q) {
    if (q->grammar) {
        cJSON_DeleteItemFromObjectCaseSensitive(o, "grammar");
        cJSON_AddStringToObject(o, "grammar", q->grammar);
    }
    if (!q->schema) return 0;
    cJSON *schema = cJSON_Parse(q->schema);
    if (!schema) {
        cli_error("ask: --json-schema: the file is not JSON (%s)", strerror(EINVAL));
        return -1;
    }
    cJSON *rf = cJSON_CreateObject(), *js = cJSON_CreateObject();
    cJSON_AddStringToObject(rf, "type", "json_schema");
    cJSON_AddItemToObject(rf, "json_schema", js);
    cJSON_AddStringToObject(js, "name", "ask");
    cJSON_AddItemToObject(js, "schema", schema);
    cJSON_AddTrueToObject(js, "strict");
    cJSON_DeleteItemFromObjectCaseSensitive(o, "response_format");
    cJSON_AddItemToObject(o, "response_format", rf);
    return 0;
}

int cmd_ask(int argc, char **argv) {
    const char *db_arg = NULL, *system_arg = NULL, *text_arg = NULL, *grammar_file = NULL, *schema_file = NULL;
    engine_opts eo = {.draft = -1, .ram_budget = CS_DEFAULT_RAM_BUDGET, .disk_budget = CS_DEFAULT_DISK_BUDGET};
    ask_req q = {.max_tokens = 256, .thinking = -1};
    const char *image_args[MAX_IMAGES];
    ask_image images[MAX_IMAGES];
    int is_k, n_image_args = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-m")) eo.model_path = v, i++;
        else if (!strcmp(a, "--db")) db_arg = v, i++;
        else if (!strcmp(a, "--system")) system_arg = v, i++;
        else if (!strcmp(a, "--conversation")) q.conv = v, i++;
        else if (!strcmp(a, "--engine")) eo.engine_url = v, i++;
        else if (!strcmp(a, "--model")) eo.remote_model = v, i++;
        else if (!strcmp(a, "--api-key-file")) eo.key_file = v, i++;
        else if (!strcmp(a, "-n")) { if (!cli_int(a, v, 1, 1 << 20, &q.max_tokens)) return 1; i++; }
        else if (!strcmp(a, "-t")) { if (!cli_int(a, v, 0, 256, &eo.threads)) return 1; i++; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { if (!cli_int(a, v, 16, 1 << 24, &eo.ctx)) return 1; i++; }
        else if (cli_is_cache_type_opt(a, &is_k)) { if (!cli_cache_type(a, v, is_k ? &eo.ctk : &eo.ctv)) return 1; i++; }
        else if (!strcmp(a, "--interval")) { if (!cli_int(a, v, 1, 1 << 24, &q.interval)) return 1; i++; }
        else if (!strcmp(a, "--ram-budget")) { if (!cli_size(a, v, &eo.ram_budget)) return 1; i++; }
        else if (!strcmp(a, "--disk-budget")) { if (!cli_size(a, v, &eo.disk_budget)) return 1; i++; }
        else if (!strcmp(a, "--draft")) { if (!cli_int(a, v, 0, SPEC_MAX_DRAFT, &eo.draft)) return 1; i++; }
        else if (!strcmp(a, "--draft-vocab")) { if (!cli_int(a, v, 0, 1 << 30, &eo.draft_vocab)) return 1; i++; }
        else if (!strcmp(a, "--temp")) {
            char *end = NULL;
            q.temp = v ? strtod(v, &end) : -1;
            if (!v || !*v || *end || !(q.temp >= 0 && q.temp <= 100)) {
                cli_error("--temp needs a number from 0 to 100 (0: greedy)");
                return 1;
            }
            i++;
        } else if (!strcmp(a, "--seed")) {
            char *end = NULL;
            errno = 0;
            q.seed = v && *v >= '0' && *v <= '9' ? strtoull(v, &end, 10) : 0;
            if (!v || !end || *end || errno) {
                cli_error("--seed needs an integer from 0 to 2^64-1");
                return 1;
            }
            q.seed_given = 1;
            i++;
        } else if (!strcmp(a, "--thinking")) {
            q.thinking = !v ? -2 : !strcmp(v, "on") || !strcmp(v, "true") ? 1 : !strcmp(v, "off") || !strcmp(v, "false") ? 0 : -2;
            if (q.thinking == -2) {
                cli_error("--thinking needs on or off");
                return 1;
            }
            i++;
        }
        else if (!strcmp(a, "--stats")) q.stats = 1;
        else if (!strcmp(a, "--json")) q.json = 1;
        else if (!strcmp(a, "--grammar-file")) grammar_file = v, i++;
        else if (!strcmp(a, "--json-schema")) schema_file = v, i++;
        else if (!strcmp(a, "--no-checkpoints")) q.no_ckpt = 1;
        else if (!strcmp(a, "--mmproj")) eo.mmproj = v, i++;
        else if (!strcmp(a, "--image")) {
            if (n_image_args == MAX_IMAGES) {
                cli_error("ask: at most %d --image files in one message", MAX_IMAGES);
                return 1;
            }
            image_args[n_image_args++] = v, i++;
        }
        else if (a[0] == '-' && a[1]) { cli_error("ask: unknown option '%s'", a); return 1; }
        else if (!text_arg) text_arg = a;
        else { cli_error("ask: more than one TEXT"); return 1; }
        if (i >= argc) { cli_error("%s needs a value", a); return 1; }
    }
    if (!text_arg) {
        cli_error("ask needs TEXT (chatfs ask --help)");
        return 1;
    }
    if (eo.engine_url && eo.model_path) {
        cli_error("ask: --engine URL replaces -m MODEL: give one of them");
        return 1;
    }
    if (eo.engine_url && (eo.ctk || eo.ctv)) {
        cli_error("ask: -ctk and -ctv are the local engine's (a server keeps its cache as it is configured)");
        return 1;
    }
    if (eo.engine_url && (eo.draft >= 0 || eo.draft_vocab > 0)) {
        cli_error("ask: --draft and --draft-vocab are the local engine's (a server decodes as it is configured)");
        return 1;
    }
    if (eo.engine_url && eo.mmproj) {
        cli_error("ask: --mmproj is the local engine's (a server loads its own projector)");
        return 1;
    }
    if (grammar_file && schema_file) {
        cli_error("ask: --grammar-file and --json-schema: give one of them (%s)", strerror(EINVAL));
        return 1;
    }
    if (q.conv && !fs_valid_name(q.conv)) {
        cli_error("ask: --conversation '%s': not a conversation's name (1-255 bytes, no '/' or control characters, "
                  "not . or ..) (%s)", q.conv, strerror(EINVAL));
        return 1;
    }
    char model_buf[1100];
    if (!eo.model_path && !eo.engine_url && !(eo.model_path = cli_default_model(model_buf, sizeof model_buf))) return 1;
    char mmproj_buf[1100];
    int many = 0;
    if (!eo.mmproj && eo.model_path) eo.mmproj = cli_find_mmproj(eo.model_path, mmproj_buf, sizeof mmproj_buf, &many);
    char db_path[1024];
    if (db_arg) snprintf(db_path, sizeof db_path, "%s", db_arg);
    else db_default_path(db_path, sizeof db_path);

    int rc = 1, lock_fd = -1;
    size_t len = 0;
    char *text = read_text(text_arg, &len), *system = NULL, *grammar_text = NULL;
    if (!text) goto out;
    if (grammar_file || schema_file) {
        char at[1100];
        snprintf(at, sizeof at, "@%s", grammar_file ? grammar_file : schema_file);
        if (!(grammar_text = cli_text_arg(at))) goto out;
        if (grammar_file) q.grammar = grammar_text;
        else q.schema = grammar_text;
    }
    if (fs_blank(text, len)) {
        cli_error("ask: the message is empty: nothing to send (%s)", strerror(EINVAL));
        goto out;
    }
    if (system_arg && !(system = cli_text_arg(system_arg))) goto out;
    for (; q.n_images < n_image_args; q.n_images++) { /* each file whole, as cp would put it in attachments/ */
        char at[1100];
        const char *path = image_args[q.n_images], *slash = strrchr(path, '/');
        snprintf(at, sizeof at, "@%s", path);
        ask_image *im = &images[q.n_images];
        if (!(im->bytes = read_text(at, &im->len))) goto out;
        im->name = slash ? slash + 1 : path;
        if (!fs_valid_name(im->name)) {
            cli_error("ask: --image %s: not a file's name (%s)", path, strerror(EINVAL));
            free((void *)im->bytes);
            goto out;
        }
    }
    q.images = images;
    if (q.n_images && many && !eo.mmproj)
        cli_error("ask: %d mmproj*.gguf files beside the model: --mmproj FILE says which", many);
    q.text = text, q.len = len, q.system = system;
    /* One process writes a database (store/db.h). A mount that holds it is asked through
     * its files; beside another chatfs ask, this run keeps its checkpoints in RAM and
     * stores its turn through SQLite's locking, checked against what it read. */
    char owner[1200], what[1100];
    int lk = db_claim(db_path, "chatfs ask", 0, &lock_fd, owner, sizeof owner);
    long pid;
    if (lk > 0 && db_holder(db_path, &pid, what, sizeof what) == 0 && strstr(what, ", finishing after"))
        lk = db_claim(db_path, "chatfs ask", 1, &lock_fd, owner, sizeof owner); /* an unmounted mount lets go soon */
    if (lk < 0) {
        cli_error("%s", owner);
        goto out;
    }
    if (lk > 0 && db_holder(db_path, &pid, what, sizeof what) == 0 && !strncmp(what, MOUNT_NOTE, strlen(MOUNT_NOTE))) {
        rc = through_mount(what + strlen(MOUNT_NOTE), &q);
        goto out;
    }
    if (lk > 0)
        cli_error("%s is in use by %s: this run keeps its checkpoints in RAM", db_path, owner);
    rc = ask_direct(db_path, lk > 0, &q, &eo);
out:
    db_unclaim(lock_fd);
    for (int k = 0; k < q.n_images; k++) free((void *)images[k].bytes);
    free(text);
    free(system);
    free(grammar_text);
    return rc;
}
