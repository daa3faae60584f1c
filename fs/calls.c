/* calls.c - the calls/ directory: every call the model made in a conversation, by its id,
 * and the results a program writes back.
 *
 *   calls/ID/name             the function (read-only)
 *   calls/ID/arguments.json   its arguments, a JSON object (read-only)
 *   calls/ID/result           what the program answers: writing it adds a tool turn
 *
 * A call's id is call_T_K, the K-th call of assistant turn T (turns/00T-assistant.md): the
 * calls live in their turn (turn.calls, OpenAI's tool_calls array), a result in the tool
 * turn that answers the id (turns/NNN-tool.md), so the database holds both and a remount
 * shows them again. When every call of the last reply has its result, the model goes on by
 * itself; a result for a call that is answered already, or of a reply the conversation has
 * gone past, is refused (the history is edited in turns/).
 *
 * Separate because it is the one place that turns the calls JSON of a turn into nodes. */
#include "fs/chatfs_impl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the calls array of turn i, parsed (NULL: it made none) */
static cJSON *turn_calls(const conv *c, int i) {
    return !c->turns[i].user && !c->turns[i].tool && c->turns[i].calls ? cJSON_Parse(c->turns[i].calls) : NULL;
}

int cfs_call_count(const conv *c) {
    int n = 0;
    for (int i = 0; i < c->n_turns; i++) {
        cJSON *calls = turn_calls(c, i);
        n += cJSON_GetArraySize(calls);
        cJSON_Delete(calls);
    }
    return n;
}

void cfs_call_free(cfs_call *call) {
    free(call->id), free(call->name), free(call->arguments);
    memset(call, 0, sizeof *call);
}

/* the k-th call of the conversation (0-based, in turn order); 0, or -ENOENT */
int cfs_call_get(const conv *c, int k, cfs_call *out) {
    memset(out, 0, sizeof *out);
    for (int i = 0; i < c->n_turns && k >= 0; i++) {
        cJSON *calls = turn_calls(c, i);
        int n = cJSON_GetArraySize(calls);
        if (k < n) {
            const cJSON *call = cJSON_GetArrayItem(calls, k);
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
            const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(call, "id"));
            const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fn, "name"));
            const char *args = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fn, "arguments"));
            out->turn = i;
            out->id = strdup(id ? id : "");
            out->name = strdup(name ? name : "");
            out->arguments = strdup(args ? args : "{}");
            cJSON_Delete(calls);
            if (!out->id || !out->name || !out->arguments) {
                cfs_call_free(out);
                return -ENOMEM;
            }
            out->result = cfs_call_result(c, i, out->id);
            return 0;
        }
        k -= n;
        cJSON_Delete(calls);
    }
    return -ENOENT;
}

int cfs_call_find(const conv *c, const char *id) {
    int k = 0;
    for (int i = 0; i < c->n_turns; i++) {
        cJSON *calls = turn_calls(c, i);
        const cJSON *call;
        cJSON_ArrayForEach(call, calls) {
            const char *cid = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(call, "id"));
            if (cid && !strcmp(cid, id)) {
                cJSON_Delete(calls);
                return k;
            }
            k++;
        }
        cJSON_Delete(calls);
    }
    return -1;
}

void cfs_render_call(const conv *c, const node *nd, sbuf *b) {
    cfs_call call;
    if (cfs_call_get(c, nd->turn, &call)) return;
    if (nd->kind == K_CALL_NAME) {
        cfs_sb_str(b, call.name);
        cfs_sb_str(b, "\n");
    } else if (nd->kind == K_CALL_ARGS) { /* pretty, as people read and jq prints it */
        cJSON *args = cJSON_Parse(call.arguments);
        if (args) cfs_sb_json(b, args, 0);
        else cfs_sb_str(b, call.arguments);
        cfs_sb_str(b, "\n");
        cJSON_Delete(args);
    } else if (nd->kind == K_CALL_RESULT && call.result >= 0) {
        size_t len;
        const char *text = cfs_turn_text(c, call.result, &len);
        cfs_sb_add(b, text, len);
    }
    cfs_call_free(&call);
}

/* Whether a result may be written for call k now: 0, or -errno with the reason in `error`. */
int cfs_check_result(conv *c, int k) {
    cfs_call call;
    int rc = cfs_call_get(c, k, &call);
    if (rc) return rc;
    int n_calls, missing, waiting = cfs_calls_waiting(c, &n_calls, &missing);
    if (cfs_busy(c)) {
        cfs_set_error(c, "calls/%s/result: a reply is being generated: wait for it or write 'stop' to ctl", call.id);
        rc = -EBUSY;
    } else if (call.result >= 0) {
        char name[64];
        cfs_turn_name(c, call.result, name, sizeof name);
        cfs_set_error(c, "calls/%s/result: the call has its result (turns/%s, which can be edited)", call.id, name);
        rc = -EACCES;
    } else if (waiting != call.turn) {
        cfs_set_error(c, "calls/%s/result: the conversation has gone on past this call", call.id);
        rc = -EACCES;
    }
    cfs_call_free(&call);
    return rc;
}

int cfs_commit_result(chatfs *fs, conv *c, int k, const char *text, size_t len) {
    cfs_call call;
    if (!cfs_call_get(c, k, &call)) { /* the result it has, again (a copy, rsync run twice): nothing to do */
        size_t have = 0;
        const char *was = call.result >= 0 ? cfs_turn_text(c, call.result, &have) : NULL;
        int same = was && have == len && !memcmp(was, text, len);
        cfs_call_free(&call);
        if (same) return 0;
    }
    int rc = cfs_check_result(c, k);
    if (rc) return rc;
    if ((rc = cfs_call_get(c, k, &call))) return rc;
    int at = c->n_turns;
    if (!(rc = cfs_turn_push(c, 0, text, len, 1, cfs_now_ns()))) {
        c->turns[at].tool = 1;
        c->turns[at].call_id = call.id;
        call.id = NULL;
        rc = cfs_save_turns(fs, c, at, 0, "the result");
    }
    cfs_call_free(&call);
    if (rc) return rc;
    c->mtime = c->mtime_hist = cfs_now_ns();
    cfs_log(fs, 2, "%s: a result for call %d", c->name, k + 1);
    int n_calls, missing;
    if (cfs_calls_waiting(c, &n_calls, &missing) >= 0) return 0; /* more to come */
    /* every call has its result: the model goes on */
    rc = cfs_start_gen(fs, c, 0);
    return rc == -EFBIG || rc == -EINVAL ? 0 : rc; /* refused: the status and error say why */
}
