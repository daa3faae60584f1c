/* reply.c - a request's reply as its caller sees it: the detokenizer's bytes made text,
 * the reasoning kept apart from the answer (its markers, the whitespace the templates
 * strip, a call that ends it), stop strings held back until they cannot begin, and the
 * answer read for tool calls when tools are offered: on_text gets the content, on_tool_call
 * each call once complete. The scheduler hands over one token at a time
 * (request_take_token) and the end (request_flush_text). */
#define _GNU_SOURCE /* memmem */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/runtime/chat_impl.h"
#include "engine/tokenizer/unicode.h"

/* ---------------------------------------------------------------- text out */

/* What the call reader has settled of the answer so far goes out: new content to on_text,
 * new calls to on_tool_call (final: the answer is complete). */
static void tool_stream(request *r, bool final) {
    if (tc_stream_feed(&r->tcs, r->reply.s ? r->reply.s : "", r->reply.n, final) != 0) return; /* out of memory */
    const struct tc_reply *rep = &r->tcs.reply;
    if (rep->content_len > r->content_shown) {
        if (r->cb.on_text) r->cb.on_text(r->cb.ud, rep->content + r->content_shown, rep->content_len - r->content_shown);
        r->content_shown = rep->content_len;
    }
    for (; r->calls_shown < rep->n_calls; r->calls_shown++)
        if (r->cb.on_tool_call) r->cb.on_tool_call(r->cb.ud, &rep->calls[r->calls_shown]);
    r->r.tool_calls = rep->n_calls;
    if (!r->s.parallel_tool_calls && rep->n_calls > 0) r->calls_end = 1;
}

char *request_calls_json(const request *r) {
    if (!r->tools || !r->tcs.reply.n_calls) return NULL;
    cJSON *calls = cJSON_CreateArray();
    for (int i = 0; calls && i < r->tcs.reply.n_calls; i++) {
        const struct tc_call *c = &r->tcs.reply.calls[i];
        char id[24];
        snprintf(id, sizeof id, "call_%d", c->index + 1);
        cJSON *call = cJSON_CreateObject(), *fn = cJSON_CreateObject();
        cJSON_AddItemToArray(calls, call);
        cJSON_AddStringToObject(call, "id", id);
        cJSON_AddStringToObject(call, "type", "function");
        cJSON_AddItemToObject(call, "function", fn);
        cJSON_AddStringToObject(fn, "name", c->name);
        cJSON_AddStringToObject(fn, "arguments", c->arguments);
    }
    char *text = calls ? cJSON_PrintUnformatted(calls) : NULL;
    cJSON_Delete(calls);
    return text;
}

/* The answer's text: kept whole (the post-generation checkpoint renders it, the call
 * reader reads it), and streamed - through the call reader when tools are offered. */
static void emit(request *r, const char *text, size_t len) {
    if (!len) return;
    strbuf_add(&r->reply, text, len);
    if (r->tools) tool_stream(r, false);
    else if (r->cb.on_text) r->cb.on_text(r->cb.ud, text, len);
}

/* length of the longest prefix of s[0..n) that ends on a UTF-8 character boundary */
static size_t utf8_boundary(const char *s, size_t n) {
    size_t k = n;
    while (k > 0 && ((unsigned char)s[k - 1] & 0xC0) == 0x80) k--; /* continuation bytes */
    if (k == 0) return 0;
    unsigned char lead = (unsigned char)s[k - 1];
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return n - (k - 1) >= need ? n : k - 1;
}

/* Passes new text through the stop-string filter. Returns 1 when a stop string was
 * found (the text before it has been emitted). */
static int push_text(request *r, const char *text, size_t len) {
    if (r->s.n_stop == 0) {
        emit(r, text, len);
        return 0;
    }
    memcpy(r->held + r->n_held, text, len);
    r->n_held += len;
    for (int i = 0; i < r->s.n_stop; i++) {
        const char *hit = memmem(r->held, r->n_held, r->s.stop[i], strlen(r->s.stop[i]));
        if (hit) {
            emit(r, r->held, (size_t)(hit - r->held));
            r->n_held = 0;
            return 1;
        }
    }
    /* keep the last max_stop-1 bytes: they may be the start of a stop string */
    if (r->n_held >= (size_t)r->max_stop) {
        size_t out = utf8_boundary(r->held, r->n_held - (size_t)(r->max_stop - 1));
        emit(r, r->held, out);
        memmove(r->held, r->held + out, r->n_held - out);
        r->n_held -= out;
    }
    return 0;
}

/* ---------------------------------------------------------------- reasoning out */

static int is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

static void emit_reasoning(request *r, const char *text, size_t len) {
    if (!len) return;
    strbuf_add(&r->reasoning, text, len); /* kept for the post-generation checkpoint */
    if (r->cb.on_reasoning) r->cb.on_reasoning(r->cb.ud, text, len);
}

/* Reasoning text, trimmed as the templates trim reasoning_content (Qwen3.5's
 * reasoning_content.strip('\n'), llama.cpp's parser trims whitespace): whitespace at its
 * start is dropped, whitespace at the end of what came so far is held back until visible
 * text follows it - the newline before "</think>" belongs to the marker. */
static void reasoning_text(request *r, const char *text, size_t len) {
    if (r->strip_reasoning) {
        while (len && is_space(*text)) text++, len--;
        if (!len) return;
        r->strip_reasoning = 0;
    }
    size_t body = len;
    while (body && is_space(text[body - 1])) body--;
    if (body) { /* visible text: what was held is part of the reasoning after all */
        emit_reasoning(r, r->ws, r->n_ws);
        r->n_ws = 0;
        emit_reasoning(r, text, body);
    }
    for (size_t i = body; i < len; i++) {
        if (r->n_ws == sizeof r->ws) { /* a long run of whitespace: the oldest of it is text */
            emit_reasoning(r, r->ws, r->n_ws / 2);
            memmove(r->ws, r->ws + r->n_ws / 2, r->n_ws - r->n_ws / 2);
            r->n_ws -= r->n_ws / 2;
        }
        r->ws[r->n_ws++] = text[i];
    }
}

/* The detokenizer's bytes as the reply's text: UTF-8, a model's stray bytes (a random
 * model's byte tokens, a character cut by the token limit) as U+FFFD. Done here, before
 * stop strings and the reasoning split look at it, so that everything downstream - the
 * callbacks, the stop-string match, the text kept for the next turn's rendering (the
 * post-generation checkpoint's key) - sees the text every caller shows and stores.
 * *k is updated; *fixed is what to free (NULL when the bytes were text already). */
static const char *as_text(const char *buf, size_t *k, char **fixed) {
    *fixed = NULL;
    if (utf8_is_text(buf, *k)) return buf;
    size_t n = 0;
    if (!(*fixed = utf8_repair(buf, *k, &n))) return buf;
    *k = n;
    return *fixed;
}

/* The reasoning ends (its closing marker, or the end of the reply): the detokenizer's
 * last bytes are the reasoning's, the whitespace held back is dropped. */
static void end_reasoning(request *r) {
    reasoning_text(r, r->rpend.s, r->rpend.n); /* held back only because it might have begun a call */
    r->rpend.n = 0;
    char buf[64], *fixed;
    size_t k = detok_flush(&r->ds, buf, sizeof buf);
    reasoning_text(r, as_text(buf, &k, &fixed), k);
    free(fixed);
    r->n_ws = 0;
}

/* Reasoning text where a call ends the reasoning (qwen-xml: llama.cpp ends the block at
 * <tool_call> as at </think>): the text is held until it cannot begin a call, and a call
 * switches to the answer, which starts with it. Returns push_text's result for the
 * answer's part (1: a stop string), else 0. */
static int reasoning_or_call(request *r, const char *text, size_t len) {
    strbuf_add(&r->rpend, text, len);
    if (r->rpend.failed) { /* out of memory: the text stays reasoning */
        reasoning_text(r, text, len);
        return 0;
    }
    strbuf *p = &r->rpend;
    size_t safe = 0, end = tc_reasoning_end(r->tcs.family, p->s, p->n, &safe);
    if (end == p->n) {
        reasoning_text(r, p->s, safe);
        memmove(p->s, p->s + safe, p->n - safe + 1); /* its NUL too */
        p->n -= safe;
        return 0;
    }
    reasoning_text(r, p->s, end);
    r->n_ws = 0; /* the whitespace before the call ends the reasoning, as before </think> */
    r->think = THINK_OVER;
    r->r.phase = GEN_GENERATING;
    size_t n = p->n - end;
    p->n = 0;
    return push_text(r, p->s + end, n);
}

int request_decode_phase(const request *r) { return r->think == THINK_IN ? GEN_THINKING : GEN_GENERATING; }

/* One generated token's text goes where it belongs. The reasoning markers are not text:
 * an opening one at the very start of the reply starts a reasoning block (the model opens
 * it itself), a closing one inside the block ends it; anything else in a block is
 * reasoning. After a block the answer's leading whitespace is dropped (the template
 * writes "\n</think>\n\n" before the answer and strips what follows it). Returns 1 when
 * a stop string ended the answer, 2 when its first call did (parallel_tool_calls 0). */
int request_take_token(chat_engine *e, request *r, int tok) {
    if (r->think == THINK_MAY_OPEN && tok == e->think_open && tok >= 0) {
        r->think = THINK_IN;
        r->strip_reasoning = 1;
        r->r.reasoning_tokens++;
        r->r.phase = GEN_THINKING;
        return 0;
    }
    if (r->think == THINK_IN && tok == e->think_close) {
        end_reasoning(r);
        r->think = THINK_OVER;
        r->strip_answer = 1;
        r->r.reasoning_tokens++;
        r->r.phase = GEN_GENERATING;
        return 0;
    }
    char buf[512], *fixed;
    size_t k = detok_push(e->m->tok, &r->ds, tok, buf, sizeof buf);
    const char *text = as_text(buf, &k, &fixed);
    if (r->think == THINK_IN) {
        r->r.reasoning_tokens++;
        r->think_tokens++;
        int stopped = 0;
        if (r->call_ends_reasoning) stopped = reasoning_or_call(r, text, k);
        else reasoning_text(r, text, k);
        free(fixed);
        return stopped ? 1 : r->calls_end ? 2 : 0;
    }
    r->think = THINK_OVER;
    if (r->strip_answer) {
        while (k && is_space(*text)) text++, k--;
        if (k) r->strip_answer = 0;
    }
    int stopped = push_text(r, text, k);
    free(fixed);
    return stopped ? 1 : r->calls_end ? 2 : 0;
}

void request_flush_text(request *r) {
    if (r->think == THINK_IN) {
        end_reasoning(r);
    } else {
        char buf[64], *fixed;
        size_t k = detok_flush(&r->ds, buf, sizeof buf);
        const char *text = as_text(buf, &k, &fixed);
        if (k) push_text(r, text, k);
        free(fixed);
    }
    emit(r, r->held, r->n_held);
    r->n_held = 0;
    if (r->tools) tool_stream(r, true);
}

