/* commit.c - what a finished write (or a rename onto a file) does: send a message, set
 * the system prompt or the settings, import messages.json, rewrite a turn, run a ctl
 * command; and the checks fs_write makes early, so that errors come back at write(2).
 *
 * Separate because these are the filesystem's rules (fs/README.md: sending, turns,
 * imports, settings), independent of how names and handles reach them: chatfs.c decides
 * when a commit happens (flush, release, rename, truncate), this file what it does. */
#include "fs/chatfs_impl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/settings.h"

static int blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strchr(" \t\r\n", s[i])) return 0;
    return 1;
}

static int send_message(chatfs *fs, conv *c, const char *text, size_t len) {
    if (cfs_busy(c)) {
        cfs_set_error(c, "a reply is being generated: wait for it or write 'stop' to ctl");
        return -EBUSY;
    }
    len = cfs_strip_newline(text, len);
    if (blank(text, len)) return 0; /* nothing to say: nothing sent */
    int n_calls, missing, waiting = cfs_calls_waiting(c, &n_calls, &missing), rc;
    if (waiting >= 0) { /* the user goes on without some results: the model is told they never came */
        int from = c->n_turns;
        if ((rc = cfs_answer_missing_calls(c, waiting, CFS_NO_RESULT)) ||
            (rc = cfs_save_turns(fs, c, from, 0, "the answers to the calls without a result")))
            return rc;
    }
    rc = cfs_turn_push(c, 1, text, len, 1, cfs_now_ns());
    if (rc) return rc;
    c->mtime = cfs_now_ns();
    fs->n_sent++;
    cfs_log(fs, 2, "%s: a message of %zu bytes", c->name, len);
    return cfs_start_gen(fs, c, 1);
}

/* a user message to answer once a last reply is dropped */
static int can_regenerate(const conv *c) {
    int n = c->n_turns;
    if (n && !c->turns[n - 1].user && !c->turns[n - 1].tool) n--;
    return n > 0 && (c->turns[n - 1].user || c->turns[n - 1].tool);
}

static int regenerate(chatfs *fs, conv *c) {
    if (cfs_busy(c)) return -EBUSY;
    if (!can_regenerate(c)) {
        cfs_set_error(c, "nothing to regenerate: the conversation has no user message");
        return -EINVAL;
    }
    const turn *last = &c->turns[c->n_turns - 1];
    if (!last->user && !last->tool) cfs_turns_truncate(c, c->n_turns - 1);
    c->mtime = cfs_now_ns();
    fs->n_regenerated++;
    cfs_log(fs, 2, "%s: regenerate", c->name);
    return cfs_start_gen(fs, c, 0);
}

static int set_turn_text(turn *t, const char *text, size_t len) {
    char *p = cfs_memdup0(text, len);
    if (!p) return -ENOMEM;
    free(t->text);
    t->text = p;
    t->len = len;
    t->complete = 1;
    t->mtime = cfs_now_ns();
    return 0;
}

/* 0, or -ENOSPC / -EIO with c back to what the database holds */
static int save_one_turn(chatfs *fs, conv *c, int k) {
    char err[256];
    int rc = fs->st ? convs_update_turn(fs->st, c->id, k + 1, c->turns[k].text, c->turns[k].len, 1, err, sizeof err) : 0;
    if (rc) {
        cfs_store_failed(c, rc, "the turn", err);
        cfs_reload(fs, c);
    }
    return rc;
}

/* A turn file written: edited through the existing turn, filled as a new one, or
 * written by a copy tool that created it over the existing one (how). */
static int rewrite_turn(chatfs *fs, conv *c, int k, const char *text, size_t len, int how) {
    if (k >= c->n_turns) return -ENOENT;
    if (cfs_busy(c)) return -EBUSY;
    len = cfs_strip_newline(text, len);
    turn *t = &c->turns[k];
    int same = t->len == len && !memcmp(t->text, text, len);
    if (how != COMMIT_NEW_TURN && same) return 0; /* unchanged: nothing happens */
    if (how == COMMIT_COPY) { /* a copy never rewrites the history (tar over a conversation) */
        char name[64];
        cfs_turn_name(c, k, name, sizeof name);
        cfs_set_error(c, "turns/%s: a copy differs from this turn, which stays; copy into a new conversation instead",
                      name);
        return -EPERM;
    }
    int rc = set_turn_text(t, text, len);
    if (rc) return rc;
    char name[64];
    cfs_turn_name(c, k, name, sizeof name);
    cfs_log(fs, 2, "%s: turns/%s %s", c->name, name, how == COMMIT_NEW_TURN ? "added" : "edited");
    if (how == COMMIT_NEW_TURN || !t->user) { /* a new turn being filled, or the model's words edited: no generation */
        if ((rc = save_one_turn(fs, c, k))) return rc;
        cfs_reset_reply(c);
        return 0;
    }
    cfs_turns_truncate(c, k + 1);
    if ((rc = cfs_save_turns(fs, c, k, 0, "the edited turn"))) return rc;
    c->mtime = cfs_now_ns();
    fs->n_regenerated++;
    return cfs_start_gen(fs, c, 0);
}

/* turns/NNN-assistant.thinking.md written: the turn's reasoning, edited in place (nothing
 * generates); a copy tool's create fills a turn that has none and never changes one
 * that has some. */
static int rewrite_thinking(chatfs *fs, conv *c, int k, const char *text, size_t len, int how) {
    if (k >= c->n_turns || c->turns[k].user) return -ENOENT;
    if (cfs_busy(c) && c->gen->turn == k) return -EBUSY;
    len = cfs_strip_newline(text, len);
    turn *t = &c->turns[k];
    char name[64];
    cfs_thinking_name(k, name, sizeof name);
    if (t->reasoning_len == len && !memcmp(t->reasoning, text, len)) return 0; /* unchanged */
    if (how == COMMIT_COPY && t->reasoning_len) {
        cfs_set_error(c, "turns/%s: a copy differs from this turn's reasoning, which stays; copy into a new "
                      "conversation instead", name);
        return -EPERM;
    }
    int rc = cfs_set_reasoning(t, text, len);
    if (rc) return rc;
    t->mtime = cfs_now_ns();
    c->mtime = c->mtime_hist = cfs_now_ns();
    cfs_log(fs, 2, "%s: turns/%s %s", c->name, name, how == COMMIT_EDIT ? "edited" : "added");
    char err[256];
    if (fs->st && (rc = convs_update_reasoning(fs->st, c->id, k + 1, t->reasoning, t->reasoning_len, err, sizeof err))) {
        cfs_store_failed(c, rc, "the reasoning", err);
        cfs_reload(fs, c);
        return rc;
    }
    if (!cfs_busy(c)) cfs_reset_reply(c);
    return 0;
}

void cfs_import_free(import *im) {
    free(im->system);
    for (int i = 0; i < im->n; i++) cfs_turn_free(&im->turns[i]);
    free(im->turns);
    memset(im, 0, sizeof *im);
}

static void append_merged(char **dst, size_t *dlen, const char *s) {
    size_t n = strlen(s), sep = *dlen ? 2 : 0;
    char *p = realloc(*dst, *dlen + sep + n + 1);
    if (!p) return;
    if (sep) memcpy(p + *dlen, "\n\n", 2);
    memcpy(p + *dlen + sep, s, n + 1);
    *dst = p;
    *dlen += sep + n;
}

/* messages.json -> system prompt and turns, normalised the way templates need them:
 * developer -> system, system messages first and merged, consecutive roles merged.
 * 1: done; 0: not complete JSON yet; -1: invalid (reason in err). */
/* A message's tool keys as the conversation keeps them: an assistant's tool_calls (each
 * {"id", "type": "function", "function": {"name", "arguments"}}, the arguments a JSON
 * object's text as OpenAI sends them, an object being turned into its text) in *calls,
 * compact; a tool message's tool_call_id (required) in *call_id. 0, or -1 with err. */
static int import_tool_keys(const cJSON *m, const char *role, int i, char **calls, char **call_id, char *err,
                            size_t errlen) {
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(m, "tool_call_id");
    if (id && (strcmp(role, "tool") || !cJSON_IsString(id))) {
        snprintf(err, errlen, "messages.json: message %d: tool_call_id must be a string, on a tool message", i);
        return -1;
    }
    if (!strcmp(role, "tool") && !id) {
        snprintf(err, errlen, "messages.json: message %d: a tool message needs the tool_call_id it answers", i);
        return -1;
    }
    if (id && id->valuestring[0] && !(*call_id = strdup(id->valuestring))) return -1; /* "": it answers no known call */
    if (!tc || cJSON_IsNull(tc) || (cJSON_IsArray(tc) && !cJSON_GetArraySize(tc))) return 0;
    if (strcmp(role, "assistant") || !cJSON_IsArray(tc)) {
        snprintf(err, errlen, "messages.json: message %d: tool_calls must be an array, on an assistant message", i);
        return -1;
    }
    cJSON *out = cJSON_CreateArray();
    int k = 0;
    const cJSON *call;
    cJSON_ArrayForEach(call, tc) {
        k++;
        const cJSON *cid = cJSON_GetObjectItemCaseSensitive(call, "id");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        cJSON *parsed = cJSON_IsString(args) ? cJSON_Parse(args->valuestring) : NULL;
        if (!cJSON_IsString(cid) || !cid->valuestring[0] || !cJSON_IsString(name) ||
            !(cJSON_IsObject(args) || cJSON_IsObject(parsed))) {
            snprintf(err, errlen, "messages.json: message %d: tool call %d needs an id, function.name and "
                     "function.arguments (a JSON object, or its text)", i, k);
            cJSON_Delete(parsed), cJSON_Delete(out);
            return -1;
        }
        char *args_text = cJSON_PrintUnformatted(parsed ? parsed : args);
        cJSON_Delete(parsed);
        cJSON *o = cJSON_CreateObject(), *f = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", cid->valuestring);
        cJSON_AddStringToObject(o, "type", "function");
        cJSON_AddStringToObject(f, "name", name->valuestring);
        cJSON_AddStringToObject(f, "arguments", args_text ? args_text : "{}");
        cJSON_AddItemToObject(o, "function", f);
        cJSON_AddItemToArray(out, o);
        cJSON_free(args_text);
    }
    *calls = cJSON_PrintUnformatted(out);
    cJSON_Delete(out);
    return *calls ? 0 : -1;
}

int cfs_parse_import(const char *text, size_t len, import *im, char *err, size_t errlen) {
    memset(im, 0, sizeof *im);
    size_t bom = cfs_skip_bom(text, len);
    text += bom, len -= bom;
    if (cfs_json_has_nul(text, len)) { /* cJSON would end the string there */
        snprintf(err, errlen, "messages.json: a \\u0000 (NUL) in a string (text only)");
        return -1;
    }
    const char *end = NULL;
    cJSON *a = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!a) {
        size_t at = end ? (size_t)(end - text) : 0;
        snprintf(err, errlen, "messages.json: not valid JSON (at byte %zu)", at);
        for (size_t i = at + 1; i < len; i++)
            if (!strchr(" \t\r\n", text[i])) return -1;
        return 0;
    }
    int rc = 1;
    if (!cJSON_IsArray(a)) {
        snprintf(err, errlen, "messages.json must be a JSON array of {\"role\", \"content\"} objects");
        rc = -1;
    }
    for (size_t i = (size_t)(end - text); i < len && rc > 0; i++)
        if (!strchr(" \t\r\n", text[i])) {
            snprintf(err, errlen, "messages.json: text after the JSON array");
            rc = -1;
        }
    size_t sys_len = 0;
    int n = cJSON_GetArraySize(a), i = 0;
    im->turns = calloc(n + 1, sizeof *im->turns);
    size_t *lens = calloc(n + 1, sizeof *lens);
    for (cJSON *m = rc > 0 ? a->child : NULL; m && rc > 0; m = m->next, i++) {
        cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role)) {
            snprintf(err, errlen, "messages.json: message %d has no \"role\" string", i + 1);
            rc = -1;
            break;
        }
        /* a key chatfs does not keep would be lost without a word (tool_calls, name, ...):
         * refused, naming it, until the files can hold it */
        const char *unknown = NULL;
        for (cJSON *k = m->child; k && !unknown; k = k->next)
            if (strcmp(k->string, "role") && strcmp(k->string, "content") && strcmp(k->string, "reasoning_content") &&
                strcmp(k->string, "tool_calls") && strcmp(k->string, "tool_call_id"))
                unknown = k->string;
        for (cJSON *p = cJSON_IsArray(content) ? content->child : NULL; p && !unknown; p = p->next)
            for (cJSON *k = cJSON_IsObject(p) ? p->child : NULL; k && !unknown; k = k->next)
                if (strcmp(k->string, "type") && strcmp(k->string, "text")) unknown = k->string;
        if (unknown) {
            snprintf(err, errlen, "messages.json: message %d has \"%.40s\", which a conversation cannot keep (it "
                     "holds role, content, reasoning_content, tool_calls and tool_call_id): the import would drop it",
                     i + 1, unknown);
            rc = -1;
            break;
        }
        /* content: a string, or an array of {"type": "text", "text": ...} parts */
        char *body = NULL;
        size_t blen = 0;
        if (cJSON_IsString(content)) body = strdup(content->valuestring), blen = strlen(body);
        else if ((!content || cJSON_IsNull(content)) && cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(m, "tool_calls")))
            body = strdup(""); /* an assistant message that only calls: OpenAI's content null */
        else if (cJSON_IsArray(content)) {
            body = strdup("");
            for (cJSON *p = content->child; p; p = p->next) {
                cJSON *ty = cJSON_GetObjectItemCaseSensitive(p, "type"), *tx = cJSON_GetObjectItemCaseSensitive(p, "text");
                if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "text") || !cJSON_IsString(tx)) {
                    snprintf(err, errlen, "messages.json: message %d has a content part that is not text", i + 1);
                    rc = -1;
                    break;
                }
                char *q = realloc(body, blen + strlen(tx->valuestring) + 1);
                if (q) body = q, strcpy(body + blen, tx->valuestring), blen += strlen(tx->valuestring);
            }
        } else {
            snprintf(err, errlen, "messages.json: message %d has no \"content\" string", i + 1);
            rc = -1;
        }
        if (rc < 0 || !body) {
            free(body);
            break;
        }
        size_t norm_len; /* CRLF in a message is a line end, as in the files */
        char *norm = cfs_normalise(body, blen, &norm_len);
        free(body);
        if (!(body = norm)) break;
        blen = norm_len;
        /* an assistant message's reasoning: a string, or null / absent for none */
        cJSON *rc_json = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
        char *reasoning = NULL;
        size_t rlen = 0;
        if (rc_json && !cJSON_IsNull(rc_json)) {
            if (!cJSON_IsString(rc_json) || strcmp(role->valuestring, "assistant")) {
                snprintf(err, errlen, "messages.json: message %d: reasoning_content must be a string (or null), on an "
                         "assistant message", i + 1);
                free(body);
                rc = -1;
                break;
            }
            reasoning = cfs_normalise(rc_json->valuestring, strlen(rc_json->valuestring), &rlen);
            if (!reasoning) {
                free(body);
                break;
            }
        }
        const char *r = role->valuestring;
        char *calls = NULL, *call_id = NULL; /* OpenAI's tool_calls (on an assistant message), tool_call_id (tool) */
        if (import_tool_keys(m, r, i + 1, &calls, &call_id, err, errlen)) {
            free(reasoning), free(body);
            rc = -1;
            break;
        }
        if (!strcmp(r, "tool")) {
            im->turns[im->n] = (turn){0, strdup(body), blen, 1, cfs_now_ns(), strdup(""), 0, 1, NULL, call_id};
            lens[im->n++] = blen;
            call_id = NULL;
        } else if (!strcmp(r, "system") || !strcmp(r, "developer")) {
            append_merged(&im->system, &sys_len, body);
            im->has_system = 1;
        }
        else if (!strcmp(r, "user") || !strcmp(r, "assistant")) {
            int user = r[0] == 'u';
            if (im->n && im->turns[im->n - 1].user == user && !im->turns[im->n - 1].tool && !im->turns[im->n - 1].calls &&
                !calls) {
                turn *t = &im->turns[im->n - 1];
                append_merged(&t->text, &lens[im->n - 1], body);
                t->len = lens[im->n - 1];
                if (reasoning && rlen) append_merged(&t->reasoning, &t->reasoning_len, reasoning);
            } else {
                im->turns[im->n] = (turn){user, strdup(body), blen, 1, cfs_now_ns(), NULL, 0};
                if (!user) {
                    im->turns[im->n].reasoning = reasoning ? reasoning : strdup("");
                    im->turns[im->n].reasoning_len = reasoning ? rlen : 0;
                    reasoning = NULL;
                    im->turns[im->n].calls = calls;
                    calls = NULL;
                }
                lens[im->n++] = blen;
            }
        } else {
            snprintf(err, errlen,
                     "messages.json: message %d has role '%.40s' (system, developer, user, assistant or tool)", i + 1, r);
            rc = -1;
        }
        free(calls), free(call_id);
        free(reasoning);
        free(body);
    }
    free(lens);
    cJSON_Delete(a);
    if (rc > 0 && !im->system) im->system = strdup("");
    if (rc < 0) cfs_import_free(im);
    return rc;
}

int cfs_import_conflict(conv *c, const import *im) {
    for (int i = 0; i < im->n && i < c->n_turns; i++) {
        const turn *a = &c->turns[i], *b = &im->turns[i];
        /* reasoning the import leaves out changes nothing; reasoning that differs is a change */
        int same_reasoning = a->user || !a->reasoning_len || !b->reasoning_len ||
                             (a->reasoning_len == b->reasoning_len && !memcmp(a->reasoning, b->reasoning, a->reasoning_len));
        /* calls a turn lacks the import may bring (a copy's turn files came first), as reasoning */
        int same_calls = a->tool == b->tool && (!a->calls || (b->calls && !strcmp(a->calls, b->calls))) &&
                         (!a->call_id || (b->call_id && !strcmp(a->call_id, b->call_id)));
        if (a->user == b->user && a->len == b->len && !memcmp(a->text, b->text, a->len) && same_reasoning && same_calls)
            continue;
        char name[64];
        if (a->user == b->user && a->len == b->len && !memcmp(a->text, b->text, a->len)) cfs_thinking_name(i, name, sizeof name);
        else cfs_turn_name(c, i, name, sizeof name);
        cfs_set_error(c, "messages.json: the import differs from turns/%s; an import only adds turns after the ones "
                      "the conversation has (edit a turn's file to change it, remove turns/ to replace the history)",
                      name);
        return i;
    }
    return -1;
}

/* messages.json written: the turns it has beyond the conversation's are added, and its
 * system prompt (if it has one) replaces the conversation's. It never drops or changes
 * a turn: a copy of an older backup brings nothing new. */
static int do_import(chatfs *fs, conv *c, const char *text, size_t len) {
    if (cfs_busy(c)) return -EBUSY;
    if (c->pending) { /* an import may bring a system prompt, which cannot wait with the turns */
        cfs_set_error(c, "the database is busy (another process holds it): messages.json was not imported, turn %d "
                      "and those after it are not stored yet; try again when it lets go", c->pending);
        return -EAGAIN;
    }
    import im;
    char err[256];
    int rc = cfs_parse_import(text, len, &im, err, sizeof err);
    if (rc <= 0) {
        cfs_set_error(c, "%s", err);
        return -EINVAL;
    }
    if (cfs_import_conflict(c, &im) >= 0) {
        cfs_import_free(&im);
        return -EPERM;
    }
    int from = c->n_turns, with_system = im.has_system && strcmp(im.system, c->system);
    for (int i = 0; i < from && i < im.n; i++) { /* the calls (and the ids they answer) the turns lacked */
        turn *t = &c->turns[i];
        if ((!t->calls && im.turns[i].calls) || (!t->call_id && im.turns[i].call_id)) {
            if (!t->calls) t->calls = im.turns[i].calls, im.turns[i].calls = NULL;
            if (!t->call_id) t->call_id = im.turns[i].call_id, im.turns[i].call_id = NULL;
            if (i < from) from = i; /* saved from here */
        }
    }
    const int first_new = c->n_turns;
    for (int i = first_new; i < im.n; i++) {
        if (cfs_turn_push(c, im.turns[i].user, im.turns[i].text, im.turns[i].len, 1, im.turns[i].mtime)) break;
        turn *t = &c->turns[c->n_turns - 1];
        if (!im.turns[i].user && im.turns[i].reasoning_len)
            cfs_set_reasoning(t, im.turns[i].reasoning, im.turns[i].reasoning_len);
        t->tool = im.turns[i].tool;
        t->calls = im.turns[i].calls, im.turns[i].calls = NULL;
        t->call_id = im.turns[i].call_id, im.turns[i].call_id = NULL;
    }
    if (with_system) {
        free(c->system);
        c->system = im.system;
        im.system = NULL;
        c->mtime_system = cfs_now_ns();
    }
    cfs_import_free(&im);
    if (c->n_turns == from && !with_system) return 0; /* nothing new */
    c->mtime = cfs_now_ns();
    int rc_save = cfs_save_turns(fs, c, from, with_system, "the import");
    if (rc_save) return rc_save;
    c->state = ST_IDLE;
    cfs_reset_reply(c);
    cfs_adopt_pending(fs, c);
    fs->n_imports++;
    cfs_log(fs, 2, "%s: messages.json imported: %d turns added%s", c->name, c->n_turns - first_new,
            with_system ? ", a new system prompt" : "");
    return 0;
}

static int set_system(chatfs *fs, conv *c, const char *text, size_t len) {
    len = cfs_strip_newline(text, len);
    if (strlen(c->system) == len && !memcmp(c->system, text, len)) return 0;
    int rc = cfs_check_system(fs, c, text, len);
    if (rc) return rc;
    char *p = cfs_memdup0(text, len);
    if (!p) return -ENOMEM;
    int64_t mtime = cfs_now_ns();
    char err[256];
    rc = fs->st ? convs_set_system(fs->st, c->id, p, mtime, err, sizeof err) : 0;
    if (rc) { /* the old prompt stays */
        free(p);
        return cfs_store_failed(c, rc, "the system prompt", err);
    }
    free(c->system);
    c->system = p;
    c->mtime_system = mtime;
    cfs_log(fs, 2, "%s: system prompt of %zu bytes", c->name, len);
    return 0;
}

/* Settings parsed for c (NULL: the root's) take effect once the database has them. */
static int take_settings(chatfs *fs, conv *c, conv_settings *stp, const char *what) {
    conv_settings st = *stp;
    char err[400];
    int rc;
    conv_settings *dst = c ? &c->st : &fs->defaults;
    if (settings_equal(dst, &st)) {
        settings_free(&st);
        return 0;
    }
    char *json = settings_render(&st);
    if (!json) {
        settings_free(&st);
        return -ENOMEM;
    }
    /* stored first: settings the database refused do not take effect */
    rc = !fs->st ? 0 : c ? convs_set_settings(fs->st, c->id, json, err, sizeof err)
                         : convs_set_global(fs->st, "settings", json, err, sizeof err);
    if (rc) {
        settings_free(&st);
        free(json);
        if (c) return cfs_store_failed(c, rc, what, err);
        cfs_log(fs, 1, "(root): %s %s was not stored (%s)", rc == -ENOSPC ? "the disk is full:" : "the database failed:",
                what, err);
        return rc;
    }
    settings_free(dst);
    *dst = st;
    cfs_log(fs, 2, "%s: %s %s", c ? c->name : "(root)", what, json);
    if (c) c->mtime_settings = cfs_now_ns();
    else fs->mtime_settings = cfs_now_ns();
    free(json);
    return 0;
}

/* conversation (c) or root (c NULL) settings */
int cfs_set_settings(chatfs *fs, conv *c, const char *text, size_t len, int final) {
    conv_settings st;
    char err[400];
    size_t bom = cfs_skip_bom(text, len);
    text += bom, len -= bom;
    const conv_settings *base = c ? &fs->defaults : &fs->builtin;
    int rc = blank(text, len) ? settings_parse("{}", 2, base, &st, err, sizeof err)
                              : settings_parse(text, len, base, &st, err, sizeof err);
    /* Incomplete JSON may still be growing, but a write that ends a line and leaves it
     * incomplete is what `echo '{"top_k": 5' > settings.json` does, and the shell only
     * looks at the write: every tool that writes JSON (editors, json.dump, jq, cat)
     * writes a settings file in one go */
    if (rc == 0 && !final && len && text[len - 1] == '\n') {
        snprintf(err, sizeof err, "settings.json: incomplete JSON (a '}' or ']' missing?)");
        rc = -1;
    }
    if (rc < 0 || (rc == 0 && final)) {
        if (c) cfs_set_error(c, "%s", err);
        return -EINVAL;
    }
    if (rc == 0 || !final) {
        if (rc > 0) settings_free(&st);
        return 0; /* a check at write time */
    }
    conv_settings *dst = c ? &c->st : &fs->defaults;
    cJSON *written = cJSON_ParseWithLength(text, len);
    if (!cJSON_HasObjectItem(written, "tools")) { /* tools.json's: a settings.json without them keeps them */
        free(st.tools);
        st.tools = dst->tools ? strdup(dst->tools) : NULL;
    }
    cJSON_Delete(written);
    return take_settings(fs, c, &st, "settings.json");
}

/* tools.json: the tools setting alone, the others as they are. final=0 checks a text that
 * is complete JSON already; one that is not may still be growing (tar writes 512 bytes at a
 * time, and a tools array has a newline on every line), so only the close refuses it. */
int cfs_set_tools(chatfs *fs, conv *c, const char *text, size_t len, int final) {
    size_t bom = cfs_skip_bom(text, len);
    text += bom, len -= bom;
    conv_settings *dst = c ? &c->st : &fs->defaults;
    if (!final && !blank(text, len)) {
        cJSON *whole = cJSON_ParseWithLength(text, len);
        cJSON_Delete(whole);
        if (!whole) return 0;
    }
    char err[400], *json = malloc(len + 16);
    if (!json) return -ENOMEM;
    if (blank(text, len)) snprintf(json, len + 16, "{\"tools\": null}");
    else snprintf(json, len + 16, "{\"tools\": %.*s\n}", (int)len, text);
    conv_settings st;
    int rc = settings_parse(json, strlen(json), dst, &st, err, sizeof err);
    free(json);
    if (rc == 0) { /* at the close: it never completed */
        snprintf(err, sizeof err, "incomplete JSON (a ']' or '}' missing?)");
        rc = -1;
    }
    if (rc < 0) {
        if (c) cfs_set_error(c, "tools.json: %s", err);
        return -EINVAL;
    }
    if (rc == 0 || !final) {
        if (rc > 0) settings_free(&st);
        return 0;
    }
    return take_settings(fs, c, &st, "tools.json");
}


/* ctl: whitespace-separated verbs. final=0 checks (a last word may still be growing). */
int cfs_run_ctl(chatfs *fs, conv *c, const char *text, size_t len, int final) {
    char *copy = cfs_memdup0(text, len), *save = NULL;
    if (!copy) return -ENOMEM;
    int rc = 0, stopped = 0, trailing_space = len && strchr(" \t\r\n", text[len - 1]);
    /* a good command says the last failure is over - cleared before the verbs run, not
     * after: a regenerate's reply may already have failed (and said why) by the time
     * the write returns */
    if (final) cfs_clear_error(c);
    for (char *w = strtok_r(copy, " \t\r\n", &save); w && !rc; w = strtok_r(NULL, " \t\r\n", &save)) {
        int last = !final && !trailing_space && w + strlen(w) == copy + len;
        if (last && (!strncmp("stop", w, strlen(w)) || !strncmp("regenerate", w, strlen(w)))) break;
        if (!strcmp(w, "stop")) {
            if (final) cfs_log(fs, 2, "%s: stop", c->name), cfs_stop_gen(fs, c);
            stopped = 1;
        } else if (!strcmp(w, "regenerate")) {
            if (!final && cfs_busy(c) && !stopped) { /* "stop regenerate" is fine: it stops first */
                cfs_set_error(c, "a reply is being generated: write 'stop' first");
                rc = -EBUSY;
            } else if (!final && !can_regenerate(c)) {
                cfs_set_error(c, "nothing to regenerate: the conversation has no user message");
                rc = -EINVAL;
            } else if (final) rc = regenerate(fs, c);
        } else {
            cfs_set_error(c, "ctl: unknown command '%.40s' (stop, regenerate)", w);
            rc = -EINVAL;
        }
    }
    free(copy);
    return rc;
}

/* c's conversation as the backend would get it, with system in place of c's system
 * prompt (NULL: c's) and a last user message (NULL: none): rendered when render (0, or
 * -1 with the template's reason in err) and, when count, its tokens in *tokens. fs->mu
 * held; released while the backend works. 0, -1 (refused), or -ENOMEM. */
static int ask_backend(chatfs *fs, conv *c, const char *system, const char *user, int render, int count, int *tokens,
                       char *err, size_t errlen) {
    int n;
    chat_msg *m = cfs_build_msgs(c, c->n_turns, &n);
    char **copies = calloc(4 * n + 2, sizeof *copies);
    if (!m || !copies) {
        free(m), free(copies);
        return -ENOMEM;
    }
    /* copies: n0 contents, n0 reasonings, a system, n0 calls, n0 call ids */
    int has_system = c->system[0] != 0, oom = 0, n0 = n;
    for (int i = 0; i < n; i++) {
        if (!(m[i].content = copies[i] = strdup(m[i].content))) oom = 1;
        if (m[i].reasoning_content && !(m[i].reasoning_content = copies[n + i] = strdup(m[i].reasoning_content))) oom = 1;
        if (m[i].tool_calls && !(m[i].tool_calls = copies[2 * n + 2 + i] = strdup(m[i].tool_calls))) oom = 1;
        if (m[i].tool_call_id && !(m[i].tool_call_id = copies[3 * n + 2 + i] = strdup(m[i].tool_call_id))) oom = 1;
    }
    if (system && has_system) { /* the first message is the system prompt: replaced */
        free(copies[0]);
        m[0].content = copies[0] = strdup(system);
        oom |= !copies[0];
    } else if (system && system[0]) { /* a new first message */
        memmove(m + 1, m, n * sizeof *m);
        m[0] = (chat_msg){"system", copies[2 * n0 + 1] = strdup(system), NULL};
        oom |= !copies[2 * n0 + 1];
        n++;
    }
    char *u = user ? strdup(user) : NULL;
    if (user) m[n++] = (chat_msg){"user", u, NULL};
    if (oom || (user && !u)) {
        for (int i = 0; i < 4 * n0 + 2; i++) free(copies[i]);
        free(copies), free(m), free(u);
        return -ENOMEM;
    }
    conv_settings st; /* the template and its switches, as a send will render */
    settings_copy(&st, &c->st);
    gen_settings gs;
    settings_to_gen(&st, &gs);
    pthread_mutex_unlock(&fs->mu);
    int renders = render && fs->be->check_render ? fs->be->check_render(fs->be, m, n, &gs, err, errlen) : 0;
    *tokens = count && renders == 0 ? fs->be->count_tokens(fs->be, m, n, &gs) : 0;
    pthread_mutex_lock(&fs->mu);
    for (int i = 0; i < 4 * n0 + 2; i++) free(copies[i]);
    free(copies), free(m), free(u);
    settings_free(&st);
    return renders < 0 ? -1 : 0;
}

/* the bytes of c's history; a token covers at least one byte, and the template adds a
 * few per message: a conversation below the context by that much fits without a count */
static int may_not_fit(chatfs *fs, conv *c, size_t system_len, size_t extra) {
    if (!fs->be->count_tokens) return 0; /* the backend cannot count: refused when sent */
    size_t bytes = system_len + extra;
    for (int i = 0; i < c->n_turns; i++) bytes += c->turns[i].len;
    return bytes + 16 * (size_t)(c->n_turns + 3) >= (size_t)fs->be->context(fs->be);
}

/* A message being written, checked at each write so that errors come back where shells
 * look (they ignore close): the chat template renders it with c's history (a template's
 * raise_exception refuses it: -EINVAL, well under a millisecond to render), and it fits
 * in the context (-EFBIG). Only a conversation whose bytes come near the context is
 * counted (tokenized by the backend); the rest pass by their length. A backend that
 * cannot check a rendering or count (a remote server) refuses when the message is sent.
 * fs->mu held; released while the backend works. 0, -EINVAL or -EFBIG, the reason in c's
 * error file. */
int cfs_check_message(chatfs *fs, conv *c, const char *text, size_t len) {
    size_t tlen = cfs_strip_newline(text, len);
    if (blank(text, tlen)) return 0; /* nothing to send (yet) */
    int count = may_not_fit(fs, c, strlen(c->system), tlen);
    if (!count && !fs->be->check_render) return 0;
    char *t = cfs_memdup0(text, tlen), err[512] = "";
    if (!t) return -ENOMEM;
    int tokens = 0, rc = ask_backend(fs, c, NULL, t, 1, count, &tokens, err, sizeof err);
    free(t);
    if (rc == -ENOMEM) return rc;
    if (rc < 0) {
        cfs_set_error(c, "%s", err[0] ? err : "the chat template refuses the message");
        return -EINVAL;
    }
    int ctx = fs->be->context(fs->be);
    if (tokens >= ctx) {
        cfs_set_error(c, "the message makes the conversation %d tokens long, more than the context of %d", tokens, ctx);
        return -EFBIG;
    }
    return 0; /* (tokens -2: the backend cannot count; the message is refused when sent) */
}

/* A system prompt being written (at each write, and when it is set): with c's history it
 * must leave room in the context for a message, else every message would be refused
 * for a reason the message does not have. Counted only near the context, as messages
 * are; a prefix already too long is refused at once. fs->mu held. 0 or -EFBIG. */
int cfs_check_system(chatfs *fs, conv *c, const char *text, size_t len) {
    size_t slen = cfs_strip_newline(text, len);
    if (!may_not_fit(fs, c, slen, 0)) return 0;
    char *t = cfs_memdup0(text, slen), err[512] = "";
    if (!t) return -ENOMEM;
    int tokens = 0, rc = ask_backend(fs, c, t, NULL, 0, 1, &tokens, err, sizeof err);
    free(t);
    if (rc == -ENOMEM) return rc;
    int ctx = fs->be->context(fs->be);
    if (tokens >= ctx) {
        cfs_set_error(c, "the system prompt makes the conversation %d tokens long%s, more than the context of %d: "
                      "no message would fit; shorten it", tokens, c->n_turns ? " with its turns" : "", ctx);
        return -EFBIG;
    }
    return 0;
}

int cfs_is_derived(int kind) {
    return kind == K_README || kind == K_STATS || kind == K_REPLY || kind == K_TRANSCRIPT || kind == K_STATUS ||
           kind == K_ERROR || kind == K_THINKING || kind == K_CALL_NAME || kind == K_CALL_ARGS;
}

/* what a finished write does to a file node, the text checked and normalised */
static int apply(chatfs *fs, const node *nd, int how, const char *data, size_t len) {
    conv *c = nd->c;
    int rc = 0;
    switch (nd->kind) {
    case K_MESSAGE: rc = send_message(fs, c, data, len); break;
    case K_SYSTEM: rc = set_system(fs, c, data, len); break;
    case K_SETTINGS: rc = cfs_set_settings(fs, c, data, len, 1); break;
    case K_GSETTINGS: return cfs_set_settings(fs, NULL, data, len, 1);
    case K_TOOLS: rc = cfs_set_tools(fs, c, data, len, 1); break;
    case K_GTOOLS: return cfs_set_tools(fs, NULL, data, len, 1);
    case K_MESSAGES: rc = do_import(fs, c, data, len); break;
    case K_CTL: rc = cfs_run_ctl(fs, c, data, len, 1); break;
    case K_TURN: rc = rewrite_turn(fs, c, nd->turn, data, len, how); break;
    case K_THINK: rc = rewrite_thinking(fs, c, nd->turn, data, len, how); break;
    case K_CALL_RESULT:
        while (len && (data[len - 1] == '\n' || data[len - 1] == '\r')) len--; /* echo's newline is not the result's */
        rc = cfs_commit_result(fs, c, nd->turn, data, len);
        break;
    default: return cfs_is_derived(nd->kind) ? -EACCES : -EISDIR;
    }
    /* a good write says the last failure is over (a message or a turn edit clears it when its
     * reply starts, ctl before its verbs run) */
    if (rc == 0 && c && nd->kind != K_MESSAGE && nd->kind != K_TURN && nd->kind != K_CTL && nd->kind != K_TOOLS &&
        nd->kind != K_CALL_RESULT)
        cfs_clear_error(c); /* (tools.json: a copy tool writes it last, after the views it could not write) */
    return rc;
}

/* data written to (or renamed onto) a file node; fs->mu held */
int cfs_commit(chatfs *fs, const node *nd, int how, const char *data, size_t len) {
    conv *c = nd->c;
    if (c && c->deleted) return -ENOENT;
    if (cfs_is_derived(nd->kind) || nd->kind == K_SCRATCH || cfs_is_dir_kind(nd->kind))
        return apply(fs, nd, how, data, len);
    char what[64];
    if (nd->kind == K_TURN && nd->turn < c->n_turns) {
        snprintf(what, sizeof what, "turns/");
        cfs_turn_name(c, nd->turn, what + 6, sizeof what - 6);
    } else if (nd->kind == K_THINK) {
        snprintf(what, sizeof what, "turns/");
        cfs_thinking_name(nd->turn, what + 6, sizeof what - 6);
    } else if (nd->kind == K_CALL_RESULT) {
        snprintf(what, sizeof what, "calls/%d/result", nd->turn + 1);
    } else snprintf(what, sizeof what, "%s", cfs_kind_name(nd->kind));
    int rc = cfs_check_text(c, what, data, len); /* UTF-8 without NUL */
    if (rc || (nd->kind != K_MESSAGE && nd->kind != K_SYSTEM && nd->kind != K_TURN && nd->kind != K_THINK))
        return rc ? rc : apply(fs, nd, how, data, len);
    /* what editors add (a byte-order mark, CRLF) is not part of the text */
    size_t n;
    char *norm = cfs_normalise(data, len, &n);
    if (!norm) return -ENOMEM;
    rc = apply(fs, nd, how, norm, n);
    free(norm);
    return rc;
}
