/* views.c - what each file reads as: a node's content (README, settings, reply,
 * system, transcript.md, messages.json, status, error, turns, scratch files) rendered
 * into a buffer, and stats.json.
 *
 * Separate because reading changes nothing: these functions only look at the state, so
 * the formats can change without touching the rules for writing. chatfs.c renders for
 * reads, for sizes (a file's size is its rendered length) and for the text a writer
 * starts from. */
#include "fs/chatfs_impl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/settings.h"

static void sb_add(sbuf *b, const char *s, size_t n) {
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

static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static void sb_fmt(sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    sb_add(b, tmp, n < (int)sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void add_turn_text(sbuf *b, const char *t, size_t n) {
    sb_add(b, t, n);
    if (n) sb_add(b, "\n", 1);
}

/* the reasoning set apart from the answer: a Markdown quote under a "thinking" line; a
 * reasoning still growing (growing: no answer yet) ends where it has got to */
static void add_reasoning_quote(sbuf *b, const char *t, size_t n, int growing) {
    if (!growing)
        while (n && (t[n - 1] == '\n' || t[n - 1] == ' ')) n--; /* servers end it with a line break */
    sb_str(b, "> *thinking*\n>\n> ");
    for (size_t i = 0; i < n; i++) {
        sb_add(b, t + i, 1);
        if (t[i] == '\n') sb_str(b, i + 1 < n && t[i + 1] == '\n' ? ">" : "> ");
    }
    if (!growing) sb_str(b, "\n\n");
}

static void render_transcript(const conv *c, sbuf *b) {
    if (c->system[0]) {
        sb_str(b, "## system\n\n");
        add_turn_text(b, c->system, strlen(c->system));
        sb_str(b, "\n");
    }
    for (int i = 0; i < c->n_turns; i++) {
        const turn *t = &c->turns[i];
        int running = c->gen && c->gen->turn == i;
        size_t len;
        const char *text = cfs_turn_text(c, i, &len);
        sb_str(b, t->user ? "## user\n\n" : "## assistant\n\n");
        size_t rlen;
        const char *reasoning = cfs_turn_reasoning(c, i, &rlen);
        if (rlen) add_reasoning_quote(b, reasoning, rlen, running && !len);
        if (running) {
            sb_add(b, text, len); /* grows at the end while it generates */
            continue;
        }
        add_turn_text(b, text, len);
        if (!t->complete) sb_str(b, "\n*(incomplete: the daemon stopped while it generated)*\n");
        sb_str(b, "\n");
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
    sb_str(b, t);
    cJSON_free(t);
}

/* reasoning (rlen > 0) goes in "reasoning_content", the OpenAI-compatible field llama.cpp
 * and vLLM use */
static void add_message_json(sbuf *b, const char *role, const char *content, size_t len, const char *reasoning,
                             size_t rlen, int *first) {
    sb_fmt(b, "%s{\"role\": \"%s\", \"content\": ", *first ? "\n  " : ",\n  ", role);
    add_json_string(b, content, len);
    if (rlen) {
        sb_str(b, ", \"reasoning_content\": ");
        add_json_string(b, reasoning, rlen);
    }
    sb_str(b, "}");
    *first = 0;
}

static void render_messages(const conv *c, sbuf *b) {
    int first = 1;
    sb_str(b, "[");
    if (c->system[0]) add_message_json(b, "system", c->system, strlen(c->system), NULL, 0, &first);
    for (int i = 0; i < c->n_turns; i++) {
        size_t len, rlen;
        const char *text = cfs_turn_text(c, i, &len), *reasoning = cfs_turn_reasoning(c, i, &rlen);
        add_message_json(b, c->turns[i].user ? "user" : "assistant", text, len, reasoning, rlen, &first);
    }
    sb_str(b, first ? "]\n" : "\n]\n");
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
    if (r->drafted_tokens > 0) sb_fmt(b, " drafted %d accepted %d", r->drafted_tokens, r->accepted_tokens);
}

/* Every line about a reply ends with " turn N", N its turn's number (turns/00N-assistant.md),
 * so that a script can tell the reply it reads answers its message; a message that was
 * not sent has no reply to name. */
static void render_status(const conv *c, sbuf *b) {
    const gen_report *r = &c->rep;
    int about_reply = 1;
    if (c->refused && c->state != ST_BUSY) {
        sb_fmt(b, "error: the message was not sent: %s", c->refused);
        about_reply = 0;
    } else if (c->unsaved && c->state != ST_BUSY) /* shown, but not stored: not "done" */
        sb_fmt(b, "error: %s", c->error ? c->error : "the last reply is not stored yet");
    else if (c->state == ST_FAILED) sb_fmt(b, "error: %s", c->fail ? c->fail : "failed");
    else if (c->state == ST_BUSY && r->phase == GEN_QUEUED) sb_str(b, "queued");
    else if (c->state == ST_BUSY && r->phase == GEN_PREFILL && r->prompt_tokens < 0)
        sb_str(b, "prefill on the server"); /* a remote engine that does not say how far it is */
    else if (c->state == ST_BUSY && r->phase == GEN_PREFILL)
        sb_fmt(b, "prefill %d/%d (%d%%) reused %d", r->prefill_done, r->prompt_tokens,
               r->prompt_tokens ? (int)(100.0 * r->prefill_done / r->prompt_tokens) : 0, r->reused_tokens);
    else if (c->state == ST_BUSY && r->phase == GEN_THINKING) {
        sb_fmt(b, "thinking %d tokens %.1f tok/s", r->reasoning_tokens, r->decode_tokens_per_s);
        speculation_note(r, b);
    } else if (c->state == ST_BUSY) {
        sb_fmt(b, "generating %d tokens %.1f tok/s", r->generated_tokens, r->decode_tokens_per_s);
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
            sb_fmt(b, "done %d tokens%s %.1f tok/s%s", r->generated_tokens, thought, r->decode_tokens_per_s,
                   finish_note(c->finish, r->grammar_incomplete));
        else
            sb_fmt(b, "done %d tokens%s %.1f tok/s reused %d/%d%s", r->generated_tokens, thought,
                   r->decode_tokens_per_s, r->reused_tokens, r->prompt_tokens, finish_note(c->finish, r->grammar_incomplete));
        speculation_note(r, b);
    }
    else if (c->n_turns && !c->turns[c->n_turns - 1].complete)
        sb_str(b, "error: the last reply is incomplete (the daemon stopped while it generated)");
    else if (c->n_turns && c->turns[c->n_turns - 1].complete == TURN_STOPPED) /* before this mount */
        sb_str(b, "stopped: the reply was stopped and kept as far as it got");
    else {
        sb_str(b, "idle");
        about_reply = 0;
    }
    if (about_reply && c->rep_turn > 0) sb_fmt(b, " turn %d", c->rep_turn);
    sb_str(b, "\n");
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
        sb_str(b, readme_text);
        sb_fmt(b, "\nThis mount: %s.\n", fs->model);
        sb_str(b, fs->can_think > 0    ? "The model can think: its reasoning goes to NAME/thinking, its answer to NAME/reply.\n"
                  : fs->can_think == 0 ? "The model has no thinking mode: NAME/thinking stays empty and the thinking "
                                         "settings change nothing.\n"
                                       : "Whether the model thinks is the server's template's to decide: reasoning the "
                                         "server sends apart goes to NAME/thinking.\n");
        break;
    case K_GSETTINGS: {
        char *t = settings_render(&fs->defaults);
        if (t) sb_str(b, t);
        free(t);
        break;
    }
    case K_MESSAGE:
    case K_CTL: break;
    case K_REPLY: sb_add(b, c->reply ? c->reply->buf : "", c->reply ? c->reply->len : 0); break;
    case K_THINKING: sb_add(b, c->thinking ? c->thinking->buf : "", c->thinking ? c->thinking->len : 0); break;
    case K_SYSTEM: add_turn_text(b, c->system, strlen(c->system)); break;
    case K_SETTINGS: {
        char *t = settings_render(&c->st);
        if (t) sb_str(b, t);
        free(t);
        break;
    }
    case K_TRANSCRIPT: render_transcript(c, b); break;
    case K_MESSAGES: render_messages(c, b); break;
    case K_STATUS: render_status(c, b); break;
    case K_ERROR:
        if (c->error) {
            sb_str(b, c->error);
            sb_str(b, "\n");
        }
        break;
    case K_TURN: {
        size_t len;
        const char *text = cfs_turn_text(c, nd->turn, &len);
        if (c->gen && c->gen->turn == nd->turn) sb_add(b, text, len);
        else add_turn_text(b, text, len);
        break;
    }
    case K_THINK: {
        size_t len;
        const char *text = cfs_turn_reasoning(c, nd->turn, &len);
        if (c->gen && c->gen->turn == nd->turn && !c->gen->ts->done) sb_add(b, text, len); /* still growing */
        else add_turn_text(b, text, len);
        break;
    }
    case K_SCRATCH: sb_add(b, nd->sc->data ? nd->sc->data : "", nd->sc->len); break;
    case K_STATS: break; /* rendered outside the lock: see cfs_stats_text */
    default: return -EISDIR;
    }
    return b->oom ? -ENOMEM : 0;
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
    char *t = cJSON_Print(o);
    cJSON_Delete(o);
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
