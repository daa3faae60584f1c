/* cmd_render.c - `chatfs render`: the prompt a conversation renders to, exactly.
 *
 *   chatfs render [-m MODEL.gguf] [--template NAME | --template-file FILE]
 *                 [--thinking true|false] [--no-generation-prompt] [--ids] MESSAGES.json
 *
 * What llama-server's /apply-template is for users debugging their prompts: the
 * messages rendered by the model's chat template with the generation prompt, through the
 * same function the engine renders a sent message with (template_render), so the bytes
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

/* The messages of MESSAGES.json: pointers into j (valid while j lives). n messages in
 * *n; NULL after an error naming what is wrong. A conversation in chatfs has no more than
 * role, content and reasoning_content, so any other key is refused rather than ignored. */
static chat_msg *parse_messages(const cJSON *j, int *n) {
    const cJSON *list = j;
    if (cJSON_IsObject(j)) {
        for (const cJSON *k = j->child; k; k = k->next)
            if (strcmp(k->string, "messages")) {
                cli_error("render: '%s' in the messages file: only \"messages\" is rendered (chatfs conversations "
                          "have no tools or other variables)", k->string);
                return NULL;
            }
        list = cJSON_GetObjectItemCaseSensitive(j, "messages");
    }
    if (!cJSON_IsArray(list)) {
        cli_error("render: the messages file must be a JSON array of messages or an object with \"messages\"");
        return NULL;
    }
    *n = cJSON_GetArraySize(list);
    chat_msg *m = calloc((size_t)*n + 1, sizeof *m);
    if (!m) {
        cli_error("out of memory");
        return NULL;
    }
    int i = 0;
    for (const cJSON *it = list->child; it; it = it->next, i++) {
        if (!cJSON_IsObject(it)) {
            cli_error("render: message %d is not a JSON object", i + 1);
            free(m);
            return NULL;
        }
        for (const cJSON *k = it->child; k; k = k->next) {
            const char **field = !strcmp(k->string, "role")                ? &m[i].role
                                 : !strcmp(k->string, "content")           ? &m[i].content
                                 : !strcmp(k->string, "reasoning_content") ? &m[i].reasoning_content
                                                                           : NULL;
            if (!field || !(cJSON_IsString(k) || (cJSON_IsNull(k) && field != &m[i].role))) {
                cli_error(field ? "render: message %d: \"%s\" must be a string"
                                : "render: message %d: \"%s\" is not part of a chatfs conversation (role, content, "
                                  "reasoning_content)",
                          i + 1, k->string);
                free(m);
                return NULL;
            }
            *field = cJSON_GetStringValue(k);
        }
        if (!m[i].role) {
            cli_error("render: message %d has no role", i + 1);
            free(m);
            return NULL;
        }
    }
    return m;
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

    int rc = 1, n = 0;
    size_t len = 0, tlen = 0;
    char *json = slurp(messages_path, &len), *ttext = NULL, *out = NULL;
    cJSON *j = NULL;
    chat_msg *m = NULL;
    gguf_file *f = NULL;
    tokenizer *tok = NULL;
    chat_template *t = NULL;
    if (!json) goto done;
    if (!(j = cJSON_ParseWithLength(json, len))) {
        cli_error("render: %s is not JSON", messages_path);
        goto done;
    }
    if (!(m = parse_messages(j, &n))) goto done;
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
    if (!(out = template_render(t, m, n, generation_prompt, thinking, &len, err, sizeof err))) {
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
    free(m);
    cJSON_Delete(j);
    free(ttext);
    free(json);
    return rc;
}
