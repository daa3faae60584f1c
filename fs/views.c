/* views.c - what each file reads as: a node's content (README, settings, reply,
 * system, transcript.md, messages.json, status, error, turns, scratch files) rendered
 * into a buffer, and stats.json.
 *
 * Separate because reading changes nothing: these functions only look at the state, so
 * the formats can change without touching the rules for writing. chatfs.c renders for
 * reads, for sizes (a file's size is its rendered length) and for the text a writer
 * starts from. */
#include "fs/chatfs_impl.h"
#include "fs/data_url.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/settings.h"

void cfs_sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void cfs_sb_str(sbuf *b, const char *s) { cfs_sb_add(b, s, strlen(s)); }

void cfs_sb_fmt(sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    cfs_sb_add(b, tmp, n < (int)sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void add_turn_text(sbuf *b, const char *t, size_t n) {
    cfs_sb_add(b, t, n);
    if (n) cfs_sb_add(b, "\n", 1);
}

/* the reasoning set apart from the answer: a Markdown quote under a "thinking" line; a
 * reasoning still growing (growing: no answer yet) ends where it has got to */
static void add_reasoning_quote(sbuf *b, const char *t, size_t n, int growing) {
    if (!growing)
        while (n && (t[n - 1] == '\n' || t[n - 1] == ' ')) n--; /* servers end it with a line break */
    cfs_sb_str(b, "> *thinking*\n>\n> ");
    for (size_t i = 0; i < n; i++) {
        cfs_sb_add(b, t + i, 1);
        if (t[i] == '\n') cfs_sb_str(b, i + 1 < n && t[i + 1] == '\n' ? ">" : "> ");
    }
    if (!growing) cfs_sb_str(b, "\n\n");
}

/* JSON as people write it and jq prints it: two spaces a level, one member a line */
void cfs_sb_json(sbuf *b, const cJSON *v, int depth) {
    const int container = cJSON_IsArray(v) || cJSON_IsObject(v);
    if (!container || !v->child) {
        char *t = container ? NULL : cJSON_PrintUnformatted(v);
        cfs_sb_str(b, container ? (cJSON_IsArray(v) ? "[]" : "{}") : t ? t : "null");
        cJSON_free(t);
        return;
    }
    cfs_sb_str(b, cJSON_IsArray(v) ? "[\n" : "{\n");
    for (const cJSON *e = v->child; e; e = e->next) {
        cfs_sb_fmt(b, "%*s", 2 * (depth + 1), "");
        if (cJSON_IsObject(v)) {
            cJSON *key = cJSON_CreateStringReference(e->string);
            char *k = key ? cJSON_PrintUnformatted(key) : NULL;
            cfs_sb_str(b, k ? k : "\"\"");
            cfs_sb_str(b, ": ");
            cJSON_free(k);
            cJSON_Delete(key);
        }
        cfs_sb_json(b, e, depth + 1);
        cfs_sb_str(b, e->next ? ",\n" : "\n");
    }
    cfs_sb_fmt(b, "%*s%s", 2 * depth, "", cJSON_IsArray(v) ? "]" : "}");
}

static void render_transcript(const conv *c, sbuf *b) {
    if (c->system[0]) {
        cfs_sb_str(b, "## system\n\n");
        add_turn_text(b, c->system, strlen(c->system));
        cfs_sb_str(b, "\n");
    }
    for (int i = 0; i < c->n_turns; i++) {
        const turn *t = &c->turns[i];
        int running = c->gen && c->gen->turn == i;
        size_t len;
        const char *text = cfs_turn_text(c, i, &len);
        if (t->tool) cfs_sb_fmt(b, "## tool (%s)\n\n", t->call_id ? t->call_id : "?");
        else cfs_sb_str(b, t->user ? "## user\n\n" : "## assistant\n\n");
        if (t->user) cfs_attach_lines(c, i + 1, b); /* the images it carried, before its text */
        size_t rlen;
        const char *reasoning = cfs_turn_reasoning(c, i, &rlen);
        if (rlen) add_reasoning_quote(b, reasoning, rlen, running && !len);
        if (running) {
            cfs_sb_add(b, text, len); /* grows at the end while it generates */
            continue;
        }
        add_turn_text(b, text, len);
        if (t->calls) { /* one line a call: its id, the function, the arguments as the model gave them */
            cJSON *calls = cJSON_Parse(t->calls);
            const cJSON *call;
            cJSON_ArrayForEach(call, calls) {
                const cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
                const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(call, "id"));
                const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fn, "name"));
                const char *args = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fn, "arguments"));
                cfs_sb_fmt(b, "> call %s: %s %s\n", id ? id : "?",
                           name ? name : "?", args ? args : "{}");
            }
            cJSON_Delete(calls);
        }
        if (!t->complete) cfs_sb_str(b, "\n*(incomplete: the daemon stopped while it generated)*\n");
        cfs_sb_str(b, "\n");
    }
}

/* one message per line: readable, and diff/grep-friendly */
/* a JSON string literal of text[0..len) into b */
static void add_json_string(sbuf *b, const char *text, size_t len) {
    char *z = cfs_memdup0(text, len); /* a growing reply has no NUL at its end */
    cJSON *str = z ? cJSON_CreateString(z) : NULL;
    free(z);
    char *t = str ? cJSON_PrintUnformatted(str) : NULL;
    cJSON_Delete(str);
    if (!t) {
        b->oom = 1;
        return;
    }
    cfs_sb_str(b, t);
    cJSON_free(t);
}

/* reasoning (rlen > 0) goes in "reasoning_content", the OpenAI-compatible field llama.cpp
 * and vLLM use */
static void add_message_json(sbuf *b, const char *role, const char *content, size_t len, const char *reasoning,
                             size_t rlen, const turn *t, const chat_image *images, int n_images, int *first) {
    cfs_sb_fmt(b, "%s{\"role\": \"%s\", ", *first ? "\n  " : ",\n  ", role);
    if (t && t->tool) { /* OpenAI's tool message: the call it answers first */
        cfs_sb_str(b, "\"tool_call_id\": ");
        add_json_string(b, t->call_id ? t->call_id : "", t->call_id ? strlen(t->call_id) : 0);
        cfs_sb_str(b, ", ");
    }
    cfs_sb_str(b, "\"content\": ");
    if (n_images > 0) { /* OpenAI's content parts: the turn's images as data: URLs, then its text */
        cfs_sb_str(b, "[");
        for (int k = 0; k < n_images; k++) {
            char *url = data_url_encode(images[k].bytes, images[k].len);
            if (!url) b->oom = 1;
            cfs_sb_str(b, "{\"type\": \"image_url\", \"image_url\": {\"url\": \""); /* base64: no escapes */
            cfs_sb_str(b, url ? url : "");
            cfs_sb_str(b, "\"}}, ");
            free(url);
        }
        cfs_sb_str(b, "{\"type\": \"text\", \"text\": ");
        add_json_string(b, content, len);
        cfs_sb_str(b, "}]");
    } else
        add_json_string(b, content, len);
    if (rlen) {
        cfs_sb_str(b, ", \"reasoning_content\": ");
        add_json_string(b, reasoning, rlen);
    }
    if (t && t->calls) { /* stored in OpenAI's shape: id, type, function.name, function.arguments as a string */
        cfs_sb_str(b, ", \"tool_calls\": ");
        cfs_sb_str(b, t->calls);
    }
    cfs_sb_str(b, "}");
    *first = 0;
}

static void render_messages(const conv *c, sbuf *b) {
    int first = 1;
    cfs_sb_str(b, "[");
    if (c->system[0]) add_message_json(b, "system", c->system, strlen(c->system), NULL, 0, NULL, NULL, 0, &first);
    chat_image *images = c->n_att ? malloc(sizeof *images * (size_t)c->n_att) : NULL;
    for (int i = 0; i < c->n_turns; i++) {
        size_t len, rlen;
        const char *text = cfs_turn_text(c, i, &len), *reasoning = cfs_turn_reasoning(c, i, &rlen);
        const int n_images = images && c->turns[i].user ? cfs_attach_images(c, i + 1, images) : 0;
        add_message_json(b, cfs_turn_role(&c->turns[i]), text, len, reasoning, rlen, &c->turns[i], images, n_images,
                         &first);
    }
    if (c->n_att && !images) b->oom = 1;
    free(images);
    cfs_sb_str(b, first ? "]\n" : "\n]\n");
}

static const char *finish_note(int finish, int grammar_incomplete) {
    switch (finish) {
    case FINISH_CANCELLED: return " (stopped)";
    case FINISH_LENGTH: return grammar_incomplete ? " (max_tokens: incomplete for its format)" : " (max_tokens)";
    case FINISH_CONTEXT: return grammar_incomplete ? " (context full: incomplete for its format)" : " (context full)";
    case FINISH_STOP: return grammar_incomplete ? " (stop string: incomplete for its format)" : " (stop string)";
    default: return "";
    }
}

/* with speculative decoding: how many tokens the MTP head drafted and the model accepted */
static void speculation_note(const gen_report *r, sbuf *b) {
    if (r->drafted_tokens > 0) cfs_sb_fmt(b, " drafted %d accepted %d", r->drafted_tokens, r->accepted_tokens);
}

/* Every line about a reply ends with " turn N", N its turn's number (turns/00N-assistant.md),
 * so that a script can tell the reply it reads answers its message; a message that was
 * not sent has no reply to name. */
static void render_status(const conv *c, sbuf *b) {
    const gen_report *r = &c->rep;
    int about_reply = 1, n_calls = 0, missing = 0;
    const int waiting = c->state != ST_BUSY && !c->refused ? cfs_calls_waiting(c, &n_calls, &missing) : -1;
    if (waiting >= 0) { /* the reply ended in calls: the program's turn (calls/ID/result) */
        cfs_sb_fmt(b, "tool_calls %d: waiting for results turn %d\n", n_calls, waiting + 1);
        return;
    }
    if (c->refused && c->state != ST_BUSY) {
        cfs_sb_fmt(b, "error: the message was not sent: %s", c->refused);
        about_reply = 0;
    } else if (c->unsaved && c->state != ST_BUSY) /* shown, but not stored: not "done" */
        cfs_sb_fmt(b, "error: %s", c->error ? c->error : "the last reply is not stored yet");
    else if (c->state == ST_FAILED) cfs_sb_fmt(b, "error: %s", c->fail ? c->fail : "failed");
    else if (c->state == ST_BUSY && r->phase == GEN_QUEUED) cfs_sb_str(b, "queued");
    else if (c->state == ST_BUSY && r->phase == GEN_PREFILL && r->prompt_tokens < 0)
        cfs_sb_str(b, "prefill on the server"); /* a remote engine that does not say how far it is */
    else if (c->state == ST_BUSY && r->phase == GEN_PREFILL)
        cfs_sb_fmt(b, "prefill %d/%d (%d%%) reused %d", r->prefill_done, r->prompt_tokens,
               r->prompt_tokens ? (int)(100.0 * r->prefill_done / r->prompt_tokens) : 0, r->reused_tokens);
    else if (c->state == ST_BUSY && r->phase == GEN_THINKING && !(c->thinking && c->thinking->done)) {
        /* thinking until `thinking` ends (the answer's first text), whatever the engine's
         * last report, which may come later, still says */
        cfs_sb_fmt(b, "thinking %d tokens %.1f tok/s", r->reasoning_tokens, r->decode_tokens_per_s);
        speculation_note(r, b);
    } else if (c->state == ST_BUSY) {
        cfs_sb_fmt(b, "generating %d tokens %.1f tok/s", r->generated_tokens, r->decode_tokens_per_s);
        speculation_note(r, b);
    } else if (c->state == ST_DONE) {
        char thought[64] = ""; /* both counts: all the tokens, and of them the reasoning's */
        size_t rlen = 0;
        if (c->rep_turn > 0 && c->rep_turn <= c->n_turns) cfs_turn_reasoning(c, c->rep_turn - 1, &rlen);
        /* a model that opened and closed its reasoning at once (a thinking_budget of 0, or
         * nothing to think about) spent tokens on the markers alone: the thinking file is
         * empty, and the count says why */
        if (r->reasoning_tokens > 0)
            snprintf(thought, sizeof thought, rlen ? " (%d thinking)" : " (%d thinking: only the markers)",
                     r->reasoning_tokens);
        if (r->prompt_tokens < 0) /* a server that sent no usage */
            cfs_sb_fmt(b, "done %d tokens%s %.1f tok/s%s", r->generated_tokens, thought, r->decode_tokens_per_s,
                   finish_note(c->finish, r->grammar_incomplete));
        else
            cfs_sb_fmt(b, "done %d tokens%s %.1f tok/s reused %d/%d%s", r->generated_tokens, thought,
                   r->decode_tokens_per_s, r->reused_tokens, r->prompt_tokens, finish_note(c->finish, r->grammar_incomplete));
        speculation_note(r, b);
    }
    else if (c->n_turns && !c->turns[c->n_turns - 1].complete)
        cfs_sb_str(b, "error: the last reply is incomplete (the daemon stopped while it generated)");
    else if (c->n_turns && c->turns[c->n_turns - 1].complete == TURN_STOPPED) /* before this mount */
        cfs_sb_str(b, "stopped: the reply was stopped and kept as far as it got");
    else {
        cfs_sb_str(b, "idle");
        about_reply = 0;
    }
    if (about_reply && c->rep_turn > 0) cfs_sb_fmt(b, " turn %d", c->rep_turn);
    cfs_sb_str(b, "\n");
}

static const char readme_text[] =
    "chatfs - conversations with a local language model as files\n"
    "\n"
    "  mkdir NAME                      a new conversation (mv renames it, rm -r deletes it)\n"
    "  echo 'Hello' > NAME/message     send a message (when the writer closes the file)\n"
    "  cat NAME/reply                  the reply, streamed while it is generated\n"
    "  cat NAME/thinking               the reply's reasoning (a thinking model's), streamed the same way\n"
    "  cat NAME/status                 idle | queued | prefill ... | thinking ... | generating ... | done ...\n"
    "  tail -f NAME/transcript.md      the whole conversation as it grows\n"
    "  echo stop > NAME/ctl            stop the reply; 'regenerate' makes a new one\n"
    "  NAME/turns/NNN-user.md          the history: rewrite a user turn to regenerate from there;\n"
    "                                  rm the last assistant turn + 'regenerate' to re-roll it\n"
    "  NAME/turns/NNN-assistant.thinking.md  that answer's reasoning (read-write; there when it has one)\n"
    "  NAME/system, NAME/settings.json the system prompt and generation settings (read-write);\n"
    "                                  \"thinking\": false asks for no reasoning, \"thinking_budget\": N caps it\n"
    "  NAME/messages.json              the history in the OpenAI format; write it to import\n"
    "  NAME/error                      why the last thing failed (empty when fine)\n"
    "  NAME/usage.json                 tokens, context left, its checkpoints, the last prompt's reuse\n"
    "  cp -r NAME COPY                 fork a conversation (it reuses NAME's checkpoints)\n"
    "  settings.json                   defaults for new conversations\n"
    "  stats.json                      engine and checkpoint counters\n"
    "\n"
    "  cp -a / tar -xf / rsync -a       copy a conversation in (under a new name); onto the one it\n"
    "                                   came from, nothing of its history is cut\n"
    "\n"
    "Errors: writing a message while one is generating gives EBUSY, a message longer than\n"
    "the context EFBIG, a bad settings.json or messages.json, a message the chat template\n"
    "refuses (at the close) or text that is not UTF-8 (or has a NUL) EINVAL, an import that\n"
    "would change a turn EPERM, a file no editor makes EPERM, a change the database cannot\n"
    "store because the disk is full ENOSPC (nothing changes); the reason is in error.\n";

/* Renders the content of a file node into b. fs->mu held. */
int cfs_render(chatfs *fs, const node *nd, sbuf *b) {
    conv *c = nd->c;
    switch (nd->kind) {
    case K_README:
        cfs_sb_str(b, readme_text);
        cfs_sb_fmt(b, "\nThis mount: %s.\n", fs->model);
        cfs_sb_str(b, fs->can_think > 0    ? "The model can think: its reasoning goes to NAME/thinking, its answer to NAME/reply.\n"
                  : fs->can_think == 0 ? "The model has no thinking mode: NAME/thinking stays empty and the thinking "
                                         "settings change nothing.\n"
                                       : "Whether the model thinks is the server's template's to decide: reasoning the "
                                         "server sends apart goes to NAME/thinking.\n");
        break;
    case K_GSETTINGS: {
        char *t = settings_render(&fs->defaults);
        if (t) cfs_sb_str(b, t);
        free(t);
        break;
    }
    case K_MESSAGE:
    case K_CTL: break;
    case K_ATTACH: cfs_sb_add(b, c->att[nd->turn].data ? c->att[nd->turn].data : "", c->att[nd->turn].len); break;
    case K_REPLY: cfs_sb_add(b, c->reply ? c->reply->buf : "", c->reply ? c->reply->len : 0); break;
    case K_THINKING: cfs_sb_add(b, c->thinking ? c->thinking->buf : "", c->thinking ? c->thinking->len : 0); break;
    case K_SYSTEM: add_turn_text(b, c->system, strlen(c->system)); break;
    case K_SETTINGS: {
        char *t = settings_render(&c->st);
        if (t) cfs_sb_str(b, t);
        free(t);
        break;
    }
    case K_TOOLS:
    case K_GTOOLS: { /* pretty, as it is edited; [] offers none */
        const char *tools = (nd->kind == K_TOOLS ? c->st.tools : fs->defaults.tools);
        cJSON *t = tools ? cJSON_Parse(tools) : NULL;
        if (t) cfs_sb_json(b, t, 0);
        else cfs_sb_str(b, "[]");
        cfs_sb_str(b, "\n");
        cJSON_Delete(t);
        break;
    }
    case K_TRANSCRIPT: render_transcript(c, b); break;
    case K_CALL_NAME:
    case K_CALL_ARGS:
    case K_CALL_RESULT: cfs_render_call(c, nd, b); break;
    case K_MESSAGES: render_messages(c, b); break;
    case K_STATUS: render_status(c, b); break;
    case K_ERROR:
        if (c->error) {
            cfs_sb_str(b, c->error);
            cfs_sb_str(b, "\n");
        }
        break;
    case K_TURN: {
        size_t len;
        const char *text = cfs_turn_text(c, nd->turn, &len);
        if (nd->turn < c->n_turns && c->turns[nd->turn].user) cfs_attach_lines(c, nd->turn + 1, b);
        if (c->gen && c->gen->turn == nd->turn) cfs_sb_add(b, text, len);
        else add_turn_text(b, text, len);
        break;
    }
    case K_THINK: {
        size_t len;
        const char *text = cfs_turn_reasoning(c, nd->turn, &len);
        if (c->gen && c->gen->turn == nd->turn && !c->gen->ts->done) cfs_sb_add(b, text, len); /* still growing */
        else add_turn_text(b, text, len);
        break;
    }
    case K_SCRATCH: cfs_sb_add(b, nd->sc->data ? nd->sc->data : "", nd->sc->len); break;
    case K_STATS:
    case K_USAGE: break; /* rendered outside the lock: see cfs_stats_text, cfs_usage_text */
    default: return -EISDIR;
    }
    return b->oom ? -ENOMEM : 0;
}

int cfs_is_live(int kind) { return kind == K_STATS || kind == K_USAGE; }

/* cJSON's text with a newline, as a file ends; frees t */
static char *json_file(char *t, size_t *len) {
    size_t n = t ? strlen(t) : 0;
    char *out = t ? malloc(n + 2) : NULL;
    if (out) {
        memcpy(out, t, n);
        out[n] = '\n';
        out[n + 1] = 0;
        *len = n + 1;
    }
    cJSON_free(t);
    return out;
}

static void add_tier(cJSON *o, const char *name, int states, uint64_t bytes) {
    cJSON *t = cJSON_AddObjectToObject(o, name);
    cJSON_AddNumberToObject(t, "states", states);
    cJSON_AddNumberToObject(t, "bytes", (double)bytes);
}

/* What a conversation holds: its length in tokens as the next prompt (null when the
 * backend cannot count), the context and what is left of it, its checkpoints in each
 * tier (null when the backend keeps none), and what the last prompt reused (null
 * before the first reply of this mount). */
char *cfs_usage_text(chatfs *fs, int64_t conv_id, size_t *len) {
    pthread_mutex_lock(&fs->mu);
    conv *c = cfs_find_conv_id(fs, conv_id);
    if (!c) {
        pthread_mutex_unlock(&fs->mu);
        return NULL;
    }
    c->refs++; /* the count releases fs->mu */
    int tokens = cfs_count_conversation(fs, c), turns = c->n_turns, replied = c->rep_turn > 0;
    gen_report rep = c->rep;
    int busy = cfs_busy(c);
    cfs_conv_unref(c);
    pthread_mutex_unlock(&fs->mu);

    char session[32];
    cfs_session_name(conv_id, session, sizeof session);
    ckpt_usage u;
    int has_usage = fs->be->session_usage && fs->be->session_usage(fs->be, session, &u) == 0;
    int ctx = fs->be->context(fs->be);

    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "turns", turns);
    if (tokens >= 0) cJSON_AddNumberToObject(o, "tokens", tokens);
    else cJSON_AddNullToObject(o, "tokens");
    if (ctx < INT_MAX) cJSON_AddNumberToObject(o, "context", ctx);
    else cJSON_AddNullToObject(o, "context"); /* a remote server's: unknown */
    if (tokens >= 0 && ctx < INT_MAX) cJSON_AddNumberToObject(o, "context_left", ctx > tokens ? ctx - tokens : 0);
    else cJSON_AddNullToObject(o, "context_left");
    if (has_usage) {
        cJSON *k = cJSON_AddObjectToObject(o, "checkpoints");
        add_tier(k, "ram", u.states_ram, u.bytes_ram);
        add_tier(k, "disk", u.states_disk, u.bytes_disk);
        cJSON_AddNumberToObject(k, "longest_tokens", u.longest);
    } else cJSON_AddNullToObject(o, "checkpoints");
    if (replied && rep.prompt_tokens > 0) {
        cJSON *p = cJSON_AddObjectToObject(o, "last_prompt");
        cJSON_AddNumberToObject(p, "prompt_tokens", rep.prompt_tokens);
        cJSON_AddNumberToObject(p, "reused_tokens", rep.reused_tokens);
        cJSON_AddNumberToObject(p, "computed_tokens", rep.computed_tokens);
        if (rep.miss_reason[0]) cJSON_AddStringToObject(p, "miss_reason", rep.miss_reason);
        cJSON_AddNumberToObject(p, "generated_tokens", rep.generated_tokens);
        cJSON_AddNumberToObject(p, "ttft_ms", rep.ttft_ms);
        cJSON_AddBoolToObject(p, "generating", busy); /* the numbers still grow */
    } else cJSON_AddNullToObject(o, "last_prompt");
    char *out = json_file(cJSON_Print(o), len);
    cJSON_Delete(o);
    return out;
}

char *cfs_stats_text(chatfs *fs, size_t *len) {
    char *engine = fs->be->stats_json(fs->be); /* the engine's lock, not ours */
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "backend", fs->be->name);
    cJSON *e = engine ? cJSON_Parse(engine) : NULL;
    cJSON_AddItemToObject(o, "engine", e ? e : cJSON_CreateObject());
    free(engine);
    cJSON *f = cJSON_AddObjectToObject(o, "filesystem");
    pthread_mutex_lock(&fs->mu);
    int busy_n = 0, scratch_n = 0;
    size_t scratch_bytes = 0;
    for (int i = 0; i < fs->n_convs; i++) busy_n += cfs_busy(fs->convs[i]);
    for (scratch *s = fs->scratch; s; s = s->next) scratch_n++, scratch_bytes += s->len;
    cJSON_AddNumberToObject(f, "conversations", fs->n_convs);
    cJSON_AddNumberToObject(f, "generating", busy_n);
    cJSON_AddNumberToObject(f, "messages_sent", (double)fs->n_sent);
    cJSON_AddNumberToObject(f, "regenerations", (double)fs->n_regenerated);
    cJSON_AddNumberToObject(f, "replies_finished", (double)fs->n_replies);
    cJSON_AddNumberToObject(f, "replies_stopped", (double)fs->n_stopped);
    cJSON_AddNumberToObject(f, "replies_failed", (double)fs->n_failed);
    cJSON_AddNumberToObject(f, "imports", (double)fs->n_imports);
    cJSON_AddNumberToObject(f, "scratch_files", scratch_n);
    cJSON_AddNumberToObject(f, "scratch_bytes", (double)scratch_bytes);
    cJSON_AddNumberToObject(f, "scratch_bytes_max", SCRATCH_CAP);
    pthread_mutex_unlock(&fs->mu);
    char *out = json_file(cJSON_Print(o), len);
    cJSON_Delete(o);
    return out;
}
