/* cmd_info.c - `chatfs info MODEL.gguf [--json] [--template NAME] [-ctk T] [-ctv T]`: what a
 * model file is. The context lines are for the cache types given (the engine's default
 * otherwise), and list the largest context that fits now for each type the heads allow.
 * The template line says which chat template chatfs renders conversations with (the
 * model's own Jinja text, or the built-in ChatML when the file has none, or a built-in
 * forced with --template), which built-in family it resembles, and whether it renders:
 * it is compiled and tried on a short conversation, without and with a system prompt.
 * Then whether the model can think (chat_model_can_think) and the sampling the file
 * recommends (general.sampling.*), which new conversations start from. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/runtime/chat.h"
#include "engine/model/state.h"
#include "engine/vision/projector.h"

typedef struct {
    const char *source;   /* "model", "builtin" (the file has none), "forced" */
    const char *name;     /* the built-in's name, or the family the model's text resembles (may be NULL) */
    size_t bytes;         /* of Jinja text */
    int renders, with_system, thinking;
    char error[512];      /* why it does not compile or render */
    char system_error[512];
} template_report;

/* What the model's template is and whether it renders a plain conversation, and one with
 * a system prompt (some templates refuse those: chatfs conversations may have one). */
static void check_template(const model *m, int forced, template_report *r) {
    memset(r, 0, sizeof *r);
    gguf_str s = {NULL, 0};
    int has_own = gguf_get_str(m->gguf, "tokenizer.chat_template", &s) == 1 && s.len > 0;
    r->source = forced ? "forced" : m->tmpl && template_name(m->tmpl) ? "builtin" : "model";
    if (m->tmpl && template_name(m->tmpl)) r->name = template_name(m->tmpl);
    else if (has_own) r->name = template_resembles(s.s, (size_t)s.len);
    if (m->tmpl) template_text(m->tmpl, &r->bytes);
    else r->bytes = (size_t)s.len;
    if (!m->tmpl) {
        snprintf(r->error, sizeof r->error, "does not compile: %s", m->tmpl_error);
        return;
    }
    const chat_msg conv[] = {{"system", "You are a helpful assistant.", NULL},
                             {"user", "Hello!", NULL},
                             {"assistant", "Hi! How can I help?", NULL},
                             {"user", "What is 2 + 2?", NULL}};
    char *out = template_render(m->tmpl, conv + 1, 3, 1, 1, NULL, r->error, sizeof r->error);
    r->renders = out != NULL;
    free(out);
    out = template_render(m->tmpl, conv, 4, 1, 1, NULL, r->system_error, sizeof r->system_error);
    r->with_system = out != NULL;
    free(out);
    r->thinking = template_uses(m->tmpl, "enable_thinking");
}

/* The largest context that fits now with each cache type the model's heads allow (both K
 * and V of that type), into out as "f32 1792, f16 3584, ..." and as an object into js
 * (when not NULL); the model's types are left as they were. */
static void largest_by_type(model *m, char *out, size_t n, cJSON *js) {
    static const kv_type all[] = {KV_F32, KV_F16, KV_BF16, KV_Q8_0, KV_Q4_0};
    const kv_type k = m->kv_k, v = m->kv_v;
    char err[256];
    size_t len = 0;
    out[0] = 0;
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        if (model_set_kv_types(m, all[i], all[i], err, sizeof err) != 0) continue;
        const int fits = engine_largest_context(m);
        if (js) cJSON_AddNumberToObject(js, kv_type_name(all[i]), fits);
        if (len < n) len += (size_t)snprintf(out + len, n - len, "%s%s %d", len ? ", " : "", kv_type_name(all[i]), fits);
    }
    model_set_kv_types(m, k, v, err, sizeof err);
}

/* An mmproj file: what the projector computes and which images it takes. */
static int info_projector(const char *path, int json) {
    char err[512];
    gguf_file *f = gguf_open(path, err, sizeof err);
    projector *p = f ? projector_load(f, err, sizeof err) : NULL;
    if (!p) {
        cli_error("%s", err);
        return 1;
    }
    gguf_str name = {0};
    char name_buf[128] = "";
    if (gguf_get_str(p->file, "general.name", &name) == 1) gguf_str_copy(name, name_buf, sizeof name_buf);
    const int side = p->patch * p->merge;
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "file", path);
        cJSON_AddStringToObject(o, "projector", p->kind);
        cJSON_AddStringToObject(o, "name", name_buf);
        cJSON_AddNumberToObject(o, "blocks", p->n_layer);
        cJSON_AddNumberToObject(o, "width", p->n_embd);
        cJSON_AddNumberToObject(o, "heads", p->n_head);
        cJSON_AddNumberToObject(o, "feed_forward", p->n_ff);
        cJSON_AddNumberToObject(o, "patch", p->patch);
        cJSON_AddNumberToObject(o, "position_grid", p->grid);
        cJSON_AddNumberToObject(o, "merge", p->merge);
        cJSON_AddNumberToObject(o, "embedding", p->n_embd_out);
        cJSON_AddNumberToObject(o, "image_min_pixels", (double)p->min_pixels);
        cJSON_AddNumberToObject(o, "image_max_pixels", (double)p->max_pixels);
        char *s = cJSON_PrintUnformatted(o);
        printf("%s\n", s);
        free(s);
        cJSON_Delete(o);
    } else {
        printf("file:          %s\n", path);
        printf("projector:     %s (vision)  name: %s\n", p->kind, name_buf);
        printf("encoder:       %d blocks, width %d, %d heads of %d, MLP %d, patches of %d pixels, "
               "a %d x %d position grid\n", p->n_layer, p->n_embd, p->n_head, p->head_dim, p->n_ff, p->patch,
               p->grid, p->grid);
        printf("merger:        %d x %d patches into one embedding of width %d (the text model's)\n", p->merge,
               p->merge, p->n_embd_out);
        printf("images:        resized to multiples of %d pixels, %ld to %ld embeddings each\n", side,
               p->min_pixels / ((long)side * side), p->max_pixels / ((long)side * side));
    }
    projector_free(p);
    return 0;
}

int cmd_info(int argc, char **argv) {
    const char *path = NULL, *force = NULL, *ctk = NULL, *ctv = NULL;
    int json = 0, is_k;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--template") && i + 1 < argc) force = argv[++i];
        else if (cli_is_cache_type_opt(argv[i], &is_k)) {
            if (!cli_cache_type(argv[i], i + 1 < argc ? argv[i + 1] : NULL, is_k ? &ctk : &ctv)) return 1;
            i++;
        }
        else if (!path && argv[i][0] != '-') path = argv[i];
        else { cli_error("info: unexpected argument '%s'", argv[i]); return 1; }
    }
    if (!path) {
        cli_error("info needs a MODEL.gguf");
        return 1;
    }
    {   /* a vision projector (mmproj) is described as one */
        char err[512];
        gguf_file *f = gguf_open(path, err, sizeof err);
        const int is_projector = f && gguf_find(f, "clip.projector_type") != NULL;
        gguf_close(f);
        if (is_projector) return info_projector(path, json);
    }
    model *m = cli_load_model(path);
    if (!m) return 1;
    char kv_err[256];
    if (engine_set_cache_types(m, ctk, ctv, kv_err, sizeof kv_err) != 0) {
        cli_error("%s", kv_err);
        model_free(m);
        return 1;
    }
    char by_type[200];
    if (force && !cli_force_template(m, force)) {
        model_free(m);
        return 1;
    }

    char pattern[1100];
    model_pattern(m, pattern, sizeof pattern);
    uint32_t types[32];
    uint64_t counts[32];
    int nt = model_tensor_types(m, types, counts, 32);
    template_report tr;
    check_template(m, force != NULL, &tr);
    size_t kv_token = state_kv_bytes_per_token(m), rec = m->rec_floats * sizeof(float);
    const int can_think = chat_model_can_think(m);
    gen_settings sampling;
    const int n_sampling = chat_model_sampling(m, &sampling);
    model_usage u;
    model_usage_of(m, 1, &u);

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
        cJSON_AddNumberToObject(o, "largest_context", engine_largest_context(m)); /* fits in memory now */
        cJSON_AddStringToObject(o, "cache_type_k", kv_type_name(m->kv_k));
        cJSON_AddStringToObject(o, "cache_type_v", kv_type_name(m->kv_v));
        cJSON *bt = cJSON_AddObjectToObject(o, "largest_context_by_cache_type");
        largest_by_type(m, by_type, sizeof by_type, bt);
        for (int i = 0; i < nt; i++) cJSON_AddNumberToObject(tt, ggml_type_name(types[i]), (double)counts[i]);
        cJSON_AddItemToObject(o, "tensor_types", tt);
        cJSON_AddStringToObject(o, "tokenizer", tokenizer_model(m->tok));
        cJSON_AddStringToObject(o, "pre_tokenizer", tokenizer_pre(m->tok));
        cJSON_AddStringToObject(o, "template_source", tr.source);
        if (tr.name) cJSON_AddStringToObject(o, "template", tr.name);
        else cJSON_AddNullToObject(o, "template");
        cJSON_AddNumberToObject(o, "template_bytes", (double)tr.bytes);
        cJSON_AddBoolToObject(o, "template_renders", tr.renders);
        if (!tr.renders) cJSON_AddStringToObject(o, "template_error", tr.error);
        cJSON_AddBoolToObject(o, "template_system_prompt", tr.with_system);
        cJSON_AddBoolToObject(o, "template_enable_thinking", tr.thinking);
        cJSON_AddBoolToObject(o, "thinking", can_think);
        if (n_sampling) {
            cJSON *sp = cJSON_AddObjectToObject(o, "sampling");
            cJSON_AddNumberToObject(sp, "temp", sampling.temperature);
            cJSON_AddNumberToObject(sp, "top_k", sampling.top_k);
            cJSON_AddNumberToObject(sp, "top_p", sampling.top_p);
            cJSON_AddNumberToObject(sp, "min_p", sampling.min_p);
        } else {
            cJSON_AddNullToObject(o, "sampling");
        }
        cJSON_AddBoolToObject(o, "tied_embeddings", m->tied);
        cJSON_AddNumberToObject(o, "recurrent_state_bytes", (double)rec);
        cJSON_AddNumberToObject(o, "kv_bytes_per_token", (double)kv_token);
        cJSON_AddBoolToObject(o, "mtp_head", m->mtp != NULL);
        if (u.moe_layers) {
            cJSON *x = cJSON_AddObjectToObject(o, "experts");
            cJSON_AddNumberToObject(x, "count", u.n_expert);
            cJSON_AddNumberToObject(x, "used", u.n_used);
            cJSON_AddNumberToObject(x, "shared", u.n_shared);
            cJSON_AddNumberToObject(x, "blocks", u.moe_layers);
        }
        cJSON_AddNumberToObject(o, "active_parameters", (double)u.params_active);
        cJSON_AddNumberToObject(o, "weight_bytes", (double)u.bytes);
        cJSON_AddNumberToObject(o, "weight_bytes_per_token", (double)u.bytes_active);
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
        printf("context:       %d trained; a conversation gets %d by default here (-c to change), at most %d "
               "fits in the memory available now (KV cache %s/%s, -ctk/-ctv to change)\n",
               m->n_ctx_train, engine_default_context(m), engine_largest_context(m), kv_type_name(m->kv_k),
               kv_type_name(m->kv_v));
        largest_by_type(m, by_type, sizeof by_type, NULL);
        printf("cache types:   the largest context that fits now with K and V of each: %s\n", by_type);
        if (!strcmp(tr.source, "model"))
            printf("template:      the model's own (%zu bytes of Jinja%s%s)", tr.bytes, tr.name ? ", like " : "",
                   tr.name ? tr.name : "");
        else
            printf("template:      the built-in %s (%s)", tr.name,
                   !strcmp(tr.source, "forced") ? "--template" : "the file has none; as llama.cpp");
        if (!tr.renders) printf(": %s%s\n", tr.bytes && m->tmpl ? "does not render: " : "", tr.error);
        else if (!tr.with_system) printf(": renders, but not with a system prompt: %s\n", tr.system_error);
        else printf(": renders%s\n", tr.thinking ? " (reads enable_thinking)" : "");
        printf("thinking:      %s\n", can_think ? "yes" : "no");
        if (n_sampling)
            printf("sampling:      the file recommends temp %g, top_k %d, top_p %g, min_p %g\n", sampling.temperature,
                   sampling.top_k, sampling.top_p, sampling.min_p);
        printf("state:         %zu bytes recurrent per sequence, %zu bytes KV per token\n", rec, kv_token);
        printf("MTP head:      %s\n", m->mtp ? "yes (speculative decoding drafts with it: --draft)" : "no");
        if (u.moe_layers)
            printf("experts:       %d in each of %d blocks, %d used per token, %d shared\n", u.n_expert, u.moe_layers,
                   u.n_used, u.n_shared);
        printf("per token:     %llu active parameters (%.2f M); reads %llu of %llu bytes of weights (%.1f of %.1f MB)\n",
               (unsigned long long)u.params_active, u.params_active / 1e6, (unsigned long long)u.bytes_active,
               (unsigned long long)u.bytes, u.bytes_active / 1e6, u.bytes / 1e6);
    }
    model_free(m);
    return 0;
}
