/* commit.c - what a finished write (or a rename onto a file) does: send a message, set
 * the system prompt or the settings, import messages.json, rewrite a turn, run a ctl
 * command (messages.json's import is import.c's); and the checks fs_write makes early, so
 * that errors come back at write(2).
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
    /* the attachments added since the last message go with this one */
    if ((rc = cfs_attach_bind(fs, c, c->n_turns))) {
        cfs_turns_truncate(c, c->n_turns - 1);
        return rc;
    }
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
    turn *t = &c->turns[k];
    if (t->user) { /* the lines naming its images are the file's, not the message's */
        size_t skip = cfs_attach_lines_end(text, len);
        text += skip, len -= skip;
    }
    len = cfs_strip_newline(text, len);
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

int cfs_count_conversation(chatfs *fs, conv *c) {
    if (!fs->be->count_tokens) return -2;
    if (!c->n_turns && !c->system[0]) return 0; /* nothing to render (templates may refuse it) */
    int tokens = 0;
    char err[256];
    return ask_backend(fs, c, NULL, NULL, 0, 1, &tokens, err, sizeof err) ? -1 : tokens;
}

int cfs_is_derived(int kind) {
    return kind == K_README || kind == K_STATS || kind == K_REPLY || kind == K_TRANSCRIPT || kind == K_STATUS ||
           kind == K_ERROR || kind == K_THINKING || kind == K_CALL_NAME || kind == K_CALL_ARGS || kind == K_USAGE;
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
    case K_MESSAGES: rc = cfs_import(fs, c, data, len); break;
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
    if (nd->kind == K_ATTACH) return cfs_attach_commit(fs, c, nd->turn, data, len); /* bytes, not text */
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
