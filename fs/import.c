/* import.c - messages.json written: OpenAI's messages as turns (roles merged, system
 * prompts to the front, reasoning_content, tool_calls and tool messages kept), refused
 * with the message and key it cannot keep, and added after the turns the conversation
 * has, never changing one (fs/README.md: Imports).
 *
 * Separate because it is a format of its own to read, defensively, and one rule (an
 * import only adds) to keep. */
#include "fs/chatfs_impl.h"
#include "fs/data_url.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* an image_url part of message number `at` (role: its role): a data: URL's bytes into
 * im->images; 0, or -1 with the reason in err */
static int import_image(import *im, const char *role, const cJSON *part, int at, char *err, size_t errlen) {
    const cJSON *iu = cJSON_GetObjectItemCaseSensitive(part, "image_url");
    const cJSON *url = cJSON_IsObject(iu) ? cJSON_GetObjectItemCaseSensitive(iu, "url") : iu;
    char why[160];
    void *bytes;
    size_t len;
    if (strcmp(role, "user")) {
        snprintf(err, errlen, "messages.json: message %d: only a user message carries images", at);
        return -1;
    }
    if (!cJSON_IsString(url)) {
        snprintf(err, errlen, "messages.json: message %d: an image_url part without a \"url\" string", at);
        return -1;
    }
    if (data_url_decode(url->valuestring, &bytes, &len, why, sizeof why)) {
        snprintf(err, errlen, "messages.json: message %d: %s", at, why);
        return -1;
    }
    void *grown = realloc(im->images, sizeof *im->images * (size_t)(im->n_images + 1));
    if (!grown) {
        free(bytes);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    im->images = grown;
    im->images[im->n_images].bytes = bytes;
    im->images[im->n_images].len = len;
    im->images[im->n_images++].turn = -1;
    return 0;
}

void cfs_import_free(import *im) {
    free(im->system);
    for (int i = 0; i < im->n; i++) cfs_turn_free(&im->turns[i]);
    free(im->turns);
    for (int i = 0; i < im->n_images; i++) free(im->images[i].bytes);
    free(im->images);
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
                if (strcmp(k->string, "type") && strcmp(k->string, "text") && strcmp(k->string, "image_url"))
                    unknown = k->string;
        if (unknown) {
            snprintf(err, errlen, "messages.json: message %d has \"%.40s\", which a conversation cannot keep (it "
                     "holds role, content, reasoning_content, tool_calls and tool_call_id): the import would drop it",
                     i + 1, unknown);
            rc = -1;
            break;
        }
        /* content: a string, or an array of {"type": "text", "text": ...} parts (a user message's
         * {"type": "image_url", "image_url": {"url": "data:..."}} parts too: its images) */
        char *body = NULL;
        size_t blen = 0;
        const int first_image = im->n_images;
        if (cJSON_IsString(content)) body = strdup(content->valuestring), blen = strlen(body);
        else if ((!content || cJSON_IsNull(content)) && cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(m, "tool_calls")))
            body = strdup(""); /* an assistant message that only calls: OpenAI's content null */
        else if (cJSON_IsArray(content)) {
            body = strdup("");
            for (cJSON *p = content->child; p; p = p->next) {
                cJSON *ty = cJSON_GetObjectItemCaseSensitive(p, "type"), *tx = cJSON_GetObjectItemCaseSensitive(p, "text");
                if (cJSON_IsString(ty) && !strcmp(ty->valuestring, "image_url")) {
                    if (import_image(im, role->valuestring, p, i + 1, err, errlen)) {
                        rc = -1;
                        break;
                    }
                    continue;
                }
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
            for (int k = first_image; k < im->n_images; k++) im->images[k].turn = im->n; /* this turn, or... */
            if (im->n && im->turns[im->n - 1].user == user && !im->turns[im->n - 1].tool && !im->turns[im->n - 1].calls &&
                !calls) {
                for (int k = first_image; k < im->n_images; k++) im->images[k].turn = im->n - 1; /* ...the one it joins */
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
int cfs_import(chatfs *fs, conv *c, const char *text, size_t len) {
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
    /* the new turns' images: each one the engine takes, or nothing is imported */
    for (int k = 0; k < im.n_images; k++) {
        if (im.images[k].turn < c->n_turns) continue; /* a turn the conversation has keeps its own */
        char why[300];
        int bad = cfs_attach_check(fs, im.images[k].bytes, im.images[k].len, why, sizeof why);
        if (bad) {
            cfs_set_error(c, "messages.json: the image of turn %d: %s; nothing was imported", im.images[k].turn + 1, why);
            cfs_import_free(&im);
            return bad == -ENOTSUP ? -EINVAL : bad;
        }
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
    const int new_turns = c->n_turns;
    if (with_system) {
        free(c->system);
        c->system = im.system;
        im.system = NULL;
        c->mtime_system = cfs_now_ns();
    }
    if (c->n_turns == from && !with_system) {
        cfs_import_free(&im);
        return 0; /* nothing new */
    }
    c->mtime = cfs_now_ns();
    int rc_save = cfs_save_turns(fs, c, from, with_system, "the import");
    for (int k = 0; !rc_save && k < im.n_images; k++)
        if (im.images[k].turn >= first_new && im.images[k].turn < new_turns)
            rc_save = cfs_attach_import(fs, c, im.images[k].turn + 1, im.images[k].bytes, im.images[k].len);
    cfs_import_free(&im);
    if (rc_save) return rc_save;
    c->state = ST_IDLE;
    cfs_reset_reply(c);
    cfs_adopt_pending(fs, c);
    fs->n_imports++;
    cfs_log(fs, 2, "%s: messages.json imported: %d turns added%s", c->name, c->n_turns - first_new,
            with_system ? ", a new system prompt" : "");
    return 0;
}

