/* cmd_mount.c - `chatfs mount MOUNTPOINT [-m MODEL.gguf] [--db PATH] [-c N] [-t THREADS]
 *                [-ctk TYPE] [-ctv TYPE] [--batch N] [--chunk N] [--ram-budget B] [--disk-budget B] [--draft N]
 *                [--draft-vocab V] [-f] [-v] [-o OPTS]`
 *              or `chatfs mount MOUNTPOINT --engine URL [--model NAME] [--api-key-file FILE] ...` */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/runtime/speculative.h"
#include "fs/mount.h"
#include "store/ckpt_store.h"

int cmd_mount(int argc, char **argv) {
    mount_opts o = {.ram_budget = CS_DEFAULT_RAM_BUDGET, .disk_budget = CS_DEFAULT_DISK_BUDGET};
    long threads = 0, batch = 0, chunk = 0, ctx = 0, draft = -1, draft_vocab = 0;
    int is_k;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-m")) o.model = v, i++;
        else if (!strcmp(a, "--db")) o.db = v, i++;
        else if (!strcmp(a, "--mmproj")) o.mmproj = v, i++;
        else if (!strcmp(a, "-o")) o.fuse_opts = v, i++;
        else if (!strcmp(a, "--fake-engine")) o.fake = v, i++; /* tests: backend.h */
        else if (!strcmp(a, "--engine")) o.engine_url = v, i++;
        else if (!strcmp(a, "--model")) o.remote_model = v, i++;
        else if (!strcmp(a, "--api-key-file")) o.api_key_file = v, i++;
        else if (!strcmp(a, "-t")) {
            if (!cli_int(a, v, 0, 256, &threads)) return 1;
            i++;
        } else if (!strcmp(a, "--batch")) {
            if (!cli_int(a, v, 1, 64, &batch)) return 1;
            i++;
        } else if (!strcmp(a, "--chunk")) {
            if (!cli_int(a, v, 16, 1 << 16, &chunk)) return 1;
            i++;
        } else if (!strcmp(a, "--draft")) {
            if (!cli_int(a, v, 0, SPEC_MAX_DRAFT, &draft)) return 1;
            i++;
        } else if (!strcmp(a, "--draft-vocab")) {
            if (!cli_int(a, v, 0, 1 << 30, &draft_vocab)) return 1;
            i++;
        } else if (!strcmp(a, "--ram-budget")) {
            if (!cli_size(a, v, &o.ram_budget)) return 1;
            i++;
        } else if (!strcmp(a, "--disk-budget")) {
            if (!cli_size(a, v, &o.disk_budget)) return 1;
            i++;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            if (!cli_int(a, v, 16, 1 << 24, &ctx)) return 1;
            i++;
        } else if (cli_is_cache_type_opt(a, &is_k)) {
            if (!cli_cache_type(a, v, is_k ? &o.cache_type_k : &o.cache_type_v)) return 1;
            i++;
        } else if (!strcmp(a, "-f")) o.foreground = 1;
        else if (!strcmp(a, "-v")) o.verbose = 1;
        else if (!strcmp(a, "--log") && v) o.log_path = v, i++;
        else if (!strcmp(a, "-d")) o.debug = 1;
        else if (a[0] == '-' || o.mountpoint) {
            cli_error("mount: unknown option '%s'", a);
            return 1;
        } else o.mountpoint = a;
        if (i >= argc) {
            cli_error("mount: %s needs a value", a);
            return 1;
        }
    }
    if (!o.mountpoint) {
        cli_error("mount needs a MOUNTPOINT");
        return 1;
    }
    if ((o.remote_model || o.api_key_file) && !o.engine_url) {
        cli_error("mount: --model and --api-key-file go with --engine URL (a local model is -m MODEL.gguf)");
        return 1;
    }
    if (o.engine_url && (o.model || o.fake)) {
        cli_error("mount: --engine URL replaces the local model: give it without -m");
        return 1;
    }
    if (o.engine_url && (o.cache_type_k || o.cache_type_v)) {
        cli_error("mount: -ctk and -ctv are the local engine's (a server keeps its cache as it is configured)");
        return 1;
    }
    if (o.engine_url && (draft >= 0 || draft_vocab > 0)) {
        cli_error("mount: --draft and --draft-vocab are the local engine's (a server decodes as it is configured)");
        return 1;
    }
    char buf[1100];
    if (!o.model && !o.fake && !o.engine_url && !(o.model = cli_default_model(buf, sizeof buf))) return 1;
    if (o.mmproj && (o.engine_url || o.fake)) {
        cli_error("mount: --mmproj is the local engine's (a server loads its own projector)");
        return 1;
    }
    char found[1200];
    int many = 0;
    if (!o.mmproj && o.model && (o.mmproj = cli_find_mmproj(o.model, found, sizeof found, &many))) o.mmproj_found = 1;
    if (many) fprintf(stderr, "chatfs: %d mmproj*.gguf files beside the model: no images unless --mmproj FILE says which\n", many);
    o.threads = (int)threads;
    o.n_ctx = (int)ctx;
    o.max_batch = (int)batch;
    o.prefill_chunk = (int)chunk;
    o.draft = draft < 0 ? 0 : draft == 0 ? -1 : (int)draft;
    o.draft_vocab = (int)draft_vocab;
    return chatfs_mount(&o);
}
