/* cmd_mount.c - `chatfs mount MOUNTPOINT [-m MODEL.gguf] [--db PATH] [-t THREADS] [--batch N]
 *                [--chunk N] [--ram-budget B] [--disk-budget B] [--draft N] [--draft-vocab V] [-f]
 *                [-o OPTS]` */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/runtime/speculative.h"
#include "fs/mount.h"

/* models/chatfs-default.gguf next to the executable or in the current directory */
static const char *default_model(char *buf, size_t n) {
    char exe[1024];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k > 0) {
        exe[k] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        snprintf(buf, n, "%s/models/chatfs-default.gguf", exe);
        if (access(buf, R_OK) == 0) return buf;
    }
    snprintf(buf, n, "models/chatfs-default.gguf");
    return access(buf, R_OK) == 0 ? buf : NULL;
}

int cmd_mount(int argc, char **argv) {
    mount_opts o = {0};
    long threads = 0, batch = 0, chunk = 0, draft = -1, draft_vocab = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-m")) o.model = v, i++;
        else if (!strcmp(a, "--db")) o.db = v, i++;
        else if (!strcmp(a, "-o")) o.fuse_opts = v, i++;
        else if (!strcmp(a, "--fake-engine")) o.fake = v, i++; /* tests: backend.h */
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
        } else if (!strcmp(a, "-f")) o.foreground = 1;
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
    char buf[1100];
    if (!o.model && !o.fake && !(o.model = default_model(buf, sizeof buf))) {
        cli_error("mount: no model: pass -m MODEL.gguf (for a quick try: -m tests/fixtures/qwen35-tiny-f32.gguf)");
        return 1;
    }
    o.threads = (int)threads;
    o.max_batch = (int)batch;
    o.prefill_chunk = (int)chunk;
    o.draft = draft < 0 ? 0 : draft == 0 ? -1 : (int)draft;
    o.draft_vocab = (int)draft_vocab;
    return chatfs_mount(&o);
}
