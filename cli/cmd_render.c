/* cmd_render.c - `chatfs render`: the prompt a conversation renders to, exactly.
 *
 *   chatfs render [-m MODEL.gguf] [--template NAME | --template-file FILE]
 *                 [--thinking true|false] [--no-generation-prompt] [--ids] MESSAGES.json
 *
 * MESSAGES.json is an array of messages or a request {"messages": [...], "tools": [...]}.
 *
 * What llama-server's /apply-template is for users debugging their prompts: the
 * messages rendered by the model's chat template with the generation prompt, through the
 * same function the engine renders a sent message with (template_render_tools), so the bytes
 * printed are the bytes the model gets. Only the GGUF's metadata is read (the tokenizer
 * for the BOS/EOS texts and --ids, the template), so any GGUF works, whatever its
 * architecture. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

/* the whole of a file, or of stdin for "-"; malloc'd and NUL-terminated, NULL after an error */
static char *slurp(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        cli_error("%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap + 1);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *bigger = realloc(buf, 2 * cap + 1);
            if (!bigger) free(buf);
            buf = bigger;
            cap *= 2;
        }
    }
    int failed = ferror(f);
    if (f != stdin) fclose(f);
    if (!buf || failed) {
        cli_error("%s: %s", path, buf ? "read error" : "out of memory");
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

/* A request: the messages (pointers into the JSON, valid while it lives) and the texts
 * made from it: each message's calls and the tools, as JSON text (malloc'd). */
typedef struct {
    chat_msg *m;
    int n;
    char **calls; /* n entries, NULL where a message has none */
    char *tools;  /* NULL: none */
} render_request;

static void request_free(render_request *r) {
    for (int i = 0; r->calls && i < r->n; i++) free(r->calls[i]);
    free(r->calls);
    free(r->m);
    free(r->tools);
    memset(r, 0, sizeof *r);
}

/* One message's keys: what a chatfs conversation holds (role, content, reasoning_content,
 * an assistant turn's tool_calls, a tool turn's tool_call_id); any other key is refused
 * rather than ignored. 0, or -1 after an error. */
static int parse_message(const cJSON *it, int i, render_request *r) {
    chat_msg *m = &r->m[i];
    if (!cJSON_IsObject(it)) {
        cli_error("render: message %d is not a JSON object", i + 1);
        return -1;
    }
    for (const cJSON *k = it->child; k; k = k->next) {
        if (!strcmp(k->string, "tool_calls")) {
            if (cJSON_IsNull(k)) continue;
            if (!cJSON_IsArray(k)) {
                cli_error("render: message %d: \"tool_calls\" must be an array", i + 1);
                return -1;
            }
            if (!(r->calls[i] = cJSON_PrintUnformatted(k))) {
                cli_error("out of memory");
                return -1;
            }
            m->tool_calls = r->calls[i];
            continue;
        }
        const char **field = !strcmp(k->string, "role")                ? &m->role
                             : !strcmp(k->string, "content")           ? &m->content
                             : !strcmp(k->string, "reasoning_content") ? &m->reasoning_content
                             : !strcmp(k->string, "tool_call_id")      ? &m->tool_call_id
                                                                       : NULL;
        if (!field || !(cJSON_IsString(k) || (cJSON_IsNull(k) && field != &m->role))) {
            cli_error(field ? "render: message %d: \"%s\" must be a string"
                            : "render: message %d: \"%s\" is not part of a chatfs conversation (role, content, "
                              "reasoning_content, tool_calls, tool_call_id)",
                      i + 1, k->string);
            return -1;
        }
        *field = cJSON_GetStringValue(k);
    }
    if (!m->role) {
        cli_error("render: message %d has no role", i + 1);
        return -1;
    }
    return 0;
}

/* MESSAGES.json: a bare array of messages, or a request object {"messages", "tools"} as
 * an OpenAI client sends it (other request keys are refused: they do not reach the
 * template). 0, or -1 after an error naming what is wrong. */
static int parse_request(const cJSON *j, render_request *r) {
    const cJSON *list = j;
    if (cJSON_IsObject(j)) {
        for (const cJSON *k = j->child; k; k = k->next)
            if (strcmp(k->string, "messages") && strcmp(k->string, "tools")) {
                cli_error("render: '%s' in the messages file: only \"messages\" and \"tools\" are rendered",
                          k->string);
                return -1;
            }
        list = cJSON_GetObjectItemCaseSensitive(j, "messages");
        const cJSON *tools = cJSON_GetObjectItemCaseSensitive(j, "tools");
        if (tools && !cJSON_IsNull(tools)) {
            if (!cJSON_IsArray(tools)) {
                cli_error("render: \"tools\" must be an array of tools");
                return -1;
            }
            if (!(r->tools = cJSON_PrintUnformatted(tools))) {
                cli_error("out of memory");
                return -1;
            }
        }
    }
    if (!cJSON_IsArray(list)) {
        cli_error("render: the messages file must be a JSON array of messages or an object with \"messages\"");
        return -1;
    }
    r->n = cJSON_GetArraySize(list);
    r->m = calloc((size_t)r->n + 1, sizeof *r->m);
    r->calls = calloc((size_t)r->n + 1, sizeof *r->calls);
    if (!r->m || !r->calls) {
        cli_error("out of memory");
        return -1;
    }
    int i = 0;
    for (const cJSON *it = list->child; it; it = it->next, i++)
        if (parse_message(it, i, r)) return -1;
    return 0;
}

static int parse_bool(const char *opt, const char *v, int *out) {
    if (v && (!strcmp(v, "true") || !strcmp(v, "false"))) {
        *out = !strcmp(v, "true");
        return 1;
    }
    cli_error("%s needs true or false", opt);
    return 0;
}

int cmd_render(int argc, char **argv) {
    const char *model_path = NULL, *builtin = NULL, *template_file = NULL, *messages_path = NULL;
    int thinking = 1, ids = 0, generation_prompt = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-m") && v) model_path = v, i++;
        else if (!strcmp(a, "--template") && v) builtin = v, i++;
        else if (!strcmp(a, "--template-file") && v) template_file = v, i++;
        else if (!strcmp(a, "--thinking")) {
            if (!parse_bool(a, v, &thinking)) return 1;
            i++;
        } else if (!strcmp(a, "--ids")) ids = 1;
        else if (!strcmp(a, "--no-generation-prompt")) generation_prompt = 0;
        else if (!messages_path && (a[0] != '-' || !strcmp(a, "-"))) messages_path = a;
        else {
            cli_error("render: unexpected argument '%s' (chatfs render --help)", a);
            return 1;
        }
    }
    if (!messages_path) {
        cli_error("render needs a MESSAGES.json (chatfs render --help)");
        return 1;
    }
    if (builtin && template_file) {
        cli_error("render: --template and --template-file exclude each other");
        return 1;
    }
    char model_buf[1100], err[1024];
    if (!model_path && !(model_path = cli_default_model(model_buf, sizeof model_buf))) return 1;

    int rc = 1;
    size_t len = 0, tlen = 0;
    char *json = slurp(messages_path, &len), *ttext = NULL, *out = NULL;
    cJSON *j = NULL;
    render_request r = {0};
    gguf_file *f = NULL;
    tokenizer *tok = NULL;
    chat_template *t = NULL;
    if (!json) goto done;
    if (!(j = cJSON_ParseWithLength(json, len))) {
        cli_error("render: %s is not JSON", messages_path);
        goto done;
    }
    if (parse_request(j, &r)) goto done;
    if (template_file && !(ttext = slurp(template_file, &tlen))) goto done;
    if (!(f = gguf_open(model_path, err, sizeof err)) || !(tok = tokenizer_load(f, err, sizeof err))) {
        cli_error("%s", err);
        goto done;
    }
    t = ttext     ? template_new(ttext, tlen, tok, err, sizeof err)
        : builtin ? template_new_builtin(builtin, tok, err, sizeof err)
                  : template_from_gguf(f, tok, err, sizeof err);
    if (!t) {
        cli_error("%s%s", builtin ? "" : "the chat template does not compile: ", err);
        goto done;
    }
    if (!(out = template_render_tools(t, r.m, r.n, r.tools, generation_prompt, thinking, &len, err, sizeof err))) {
        cli_error("%s", err);
        goto done;
    }
    if (ids) {
        int *tokens;
        int k = tokenizer_encode(tok, out, len, 1, 1, &tokens);
        if (k < 0) {
            cli_error("out of memory");
            goto done;
        }
        for (int i = 0; i < k; i++) printf("%s%d", i ? " " : "", tokens[i]);
        putchar('\n');
        free(tokens);
    } else
        fwrite(out, 1, len, stdout);
    rc = fflush(stdout) == 0 ? 0 : 1;
done:
    free(out);
    template_unref(t);
    tokenizer_free(tok);
    gguf_close(f);
    request_free(&r);
    cJSON_Delete(j);
    free(ttext);
    free(json);
    return rc;
}
