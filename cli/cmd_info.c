/* cmd_info.c - `chatfs info MODEL.gguf [--json] [--template NAME]`: what a model file is.
 * The template line names the family chatfs renders chats with, and says when the
 * model's template was not recognised (ChatML is used then) or was forced. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/runtime/chat.h"
#include "engine/model/state.h"

int cmd_info(int argc, char **argv) {
    const char *path = NULL, *force = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--template") && i + 1 < argc) force = argv[++i];
        else if (!path && argv[i][0] != '-') path = argv[i];
        else { cli_error("info: unexpected argument '%s'", argv[i]); return 1; }
    }
    if (!path) {
        cli_error("info needs a MODEL.gguf");
        return 1;
    }
    model *m = cli_load_model(path);
    if (!m) return 1;
    if (force && !cli_force_template(m, force)) {
        model_free(m);
        return 1;
    }

    char pattern[1100];
    model_pattern(m, pattern, sizeof pattern);
    uint32_t types[32];
    uint64_t counts[32];
    int nt = model_tensor_types(m, types, counts, 32);
    const char *tmpl = template_family_name(m->tmpl.family);
    size_t kv_token = state_kv_floats_per_token(m) * sizeof(float), rec = m->rec_floats * sizeof(float);

    if (json) {
        cJSON *o = cJSON_CreateObject(), *tt = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "file", path);
        cJSON_AddStringToObject(o, "architecture", m->arch);
        cJSON_AddStringToObject(o, "name", m->name);
        cJSON_AddNumberToObject(o, "parameters", (double)m->n_params);
        cJSON_AddNumberToObject(o, "layers", m->n_layer);
        cJSON_AddStringToObject(o, "pattern", pattern);
        cJSON_AddNumberToObject(o, "embedding", m->n_embd);
        cJSON_AddNumberToObject(o, "vocab", m->n_vocab);
        cJSON_AddNumberToObject(o, "context", m->n_ctx_train);
        cJSON_AddNumberToObject(o, "default_context", engine_default_context(m));
        for (int i = 0; i < nt; i++) cJSON_AddNumberToObject(tt, ggml_type_name(types[i]), (double)counts[i]);
        cJSON_AddItemToObject(o, "tensor_types", tt);
        cJSON_AddStringToObject(o, "tokenizer", tokenizer_model(m->tok));
        cJSON_AddStringToObject(o, "pre_tokenizer", tokenizer_pre(m->tok));
        cJSON_AddStringToObject(o, "template", tmpl);
        cJSON_AddBoolToObject(o, "template_detected", m->tmpl.known && !force);
        cJSON_AddBoolToObject(o, "template_forced", force != NULL);
        cJSON_AddBoolToObject(o, "tied_embeddings", m->tied);
        cJSON_AddNumberToObject(o, "recurrent_state_bytes", (double)rec);
        cJSON_AddNumberToObject(o, "kv_bytes_per_token", (double)kv_token);
        cJSON_AddBoolToObject(o, "mtp_head", m->mtp != NULL);
        char *s = cJSON_PrintUnformatted(o);
        puts(s);
        cJSON_free(s);
        cJSON_Delete(o);
    } else {
        printf("file:          %s\n", path);
        printf("architecture:  %s%s%s\n", m->arch, m->name[0] ? "  name: " : "", m->name);
        printf("parameters:    %llu (%.2f M)\n", (unsigned long long)m->n_params, m->n_params / 1e6);
        printf("layers:        %d  pattern: %s\n", m->n_layer, pattern);
        printf("embedding:     %d  vocab: %d  context: %d  tied output: %s\n", m->n_embd, m->n_vocab,
               m->n_ctx_train, m->tied ? "yes" : "no");
        printf("tensor types: ");
        for (int i = 0; i < nt; i++) printf(" %s x%llu", ggml_type_name(types[i]), (unsigned long long)counts[i]);
        printf("\ntokenizer:     %s (pre-tokenizer %s), %d tokens\n", tokenizer_model(m->tok), tokenizer_pre(m->tok),
               m->n_vocab);
        printf("context:       %d trained; a conversation gets %d by default here (-c to change)\n", m->n_ctx_train,
               engine_default_context(m));
        printf("template:      %s%s\n", tmpl,
               force ? " (forced)" : m->tmpl.known ? "" : " (fallback: template not recognised)");
        printf("state:         %zu bytes recurrent per sequence, %zu bytes KV per token\n", rec, kv_token);
        printf("MTP head:      %s\n", m->mtp ? "yes (speculative decoding drafts with it: --draft)" : "no");
    }
    model_free(m);
    return 0;
}
