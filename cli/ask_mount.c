/* ask_mount.c - `chatfs ask` through the mount that holds the database (see ask.h):
 * the mount is the one process that writes it, so ask uses its files as a script would
 * (fs/README.md): the mount's model answers, with the conversation's settings and
 * checkpoints, and the turn is the mount's like any other. */
#define _DEFAULT_SOURCE
#define _XOPEN_SOURCE 700
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/ask.h"
#include "cli/cli.h"
#include "engine/runtime/chat.h"

typedef struct {
    char dir[4200];
    const char *name;
} where;

static void path_of(const where *w, const char *file, char *out, size_t n) {
    snprintf(out, n, "%s/%s", w->dir, file);
}

/* the whole file; malloc'd (NUL-terminated), or NULL with errno */
static char *slurp(const where *w, const char *file, size_t *len) {
    char p[4400];
    path_of(w, file, p, sizeof p);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    size_t n = 0, cap = 4096;
    char *b = malloc(cap);
    for (ssize_t k; b;) {
        if (n + 1 >= cap) {
            char *g = realloc(b, cap *= 2);
            if (!g) free(b);
            b = g;
            if (!b) break;
        }
        k = read(fd, b + n, cap - n - 1);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            int e = errno;
            free(b);
            close(fd);
            errno = e;
            return NULL;
        }
        if (k == 0) break;
        n += (size_t)k;
    }
    close(fd);
    if (!b) {
        errno = ENOMEM;
        return NULL;
    }
    b[n] = 0;
    if (len) *len = n;
    return b;
}

/* the reason the mount gives in NAME/error, without its newline ("" when none) */
static void reason(const where *w, char *out, size_t n) {
    char *e = slurp(w, "error", NULL);
    snprintf(out, n, "%s", e ? e : "");
    out[strcspn(out, "\n")] = 0;
    free(e);
}

static void failed(const where *w, const char *file, int e) {
    char why[700];
    reason(w, why, sizeof why);
    cli_error("ask: %s/%s: %s%s%s", w->name, file, strerror(e), why[0] ? ": " : "", why);
}

/* writes data as one file (open, write, close: the close sends a message); 0 or errno */
static int put(const where *w, const char *file, const char *data, size_t len) {
    char p[4400];
    path_of(w, file, p, sizeof p);
    int fd = open(p, O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd < 0) return errno;
    for (size_t off = 0; off < len;) {
        ssize_t k = write(fd, data + off, len - off);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            int e = errno;
            close(fd);
            return e;
        }
        off += (size_t)k;
    }
    return close(fd) == 0 ? 0 : errno;
}

/* an image as `cp FILE NAME/attachments/` puts it: a new file (N-NAME when NAME is
 * taken); the mount checks it at the close. 0, or -1 after saying why */
static int put_image(const where *w, const ask_image *im) {
    char file[300], p[4600];
    for (int k = 1; k < 100; k++) {
        if (k == 1) snprintf(file, sizeof file, "attachments/%s", im->name);
        else snprintf(file, sizeof file, "attachments/%d-%s", k, im->name);
        path_of(w, file, p, sizeof p);
        int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno == EEXIST) continue;
        int e = fd < 0 ? errno : 0;
        for (size_t off = 0; !e && off < im->len;) {
            ssize_t n = write(fd, (const char *)im->bytes + off, im->len - off);
            if (n < 0 && errno != EINTR) e = errno;
            if (n > 0) off += (size_t)n;
        }
        if (fd >= 0 && close(fd) != 0 && !e) e = errno;
        if (!e) return 0;
        failed(w, file, e);
        return -1;
    }
    cli_error("ask: %s/attachments: no free name for %s", w->name, im->name);
    return -1;
}

/* this turn's settings over the conversation's: malloc'd JSON, NULL when it cannot be read */
static char *turn_settings(const char *saved, const ask_req *q) {
    cJSON *o = cJSON_Parse(saved);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(o, "temperature");
    cJSON_AddNumberToObject(o, "temperature", q->temp);
    cJSON_DeleteItemFromObjectCaseSensitive(o, "max_tokens");
    cJSON_AddNumberToObject(o, "max_tokens", (double)q->max_tokens);
    cJSON_DeleteItemFromObjectCaseSensitive(o, "seed");
    if (q->seed_given) { /* JSON numbers are doubles: a seed beyond 2^53 goes as its text */
        char num[32];
        snprintf(num, sizeof num, "%llu", q->seed);
        cJSON_AddRawToObject(o, "seed", num);
    } else cJSON_AddNullToObject(o, "seed");
    if (q->thinking >= 0) {
        cJSON_DeleteItemFromObjectCaseSensitive(o, "thinking");
        cJSON_AddBoolToObject(o, "thinking", q->thinking);
    }
    if (q->no_ckpt) {
        cJSON_DeleteItemFromObjectCaseSensitive(o, "checkpoints");
        cJSON_AddFalseToObject(o, "checkpoints");
    }
    if (q->interval) {
        cJSON_DeleteItemFromObjectCaseSensitive(o, "checkpoint_interval");
        cJSON_AddNumberToObject(o, "checkpoint_interval", (double)q->interval);
    }
    if (ask_format_settings(o, q) != 0) {
        cJSON_Delete(o);
        return NULL;
    }
    char *js = cJSON_Print(o);
    cJSON_Delete(o);
    return js;
}

/* "done 57 tokens (40 thinking) 12.3 tok/s reused 2731/2790 (max_tokens) ..." */
static void parse_done(const char *st, ask_result *r) {
    r->generated_tokens = r->reasoning_tokens = r->prompt_tokens = r->reused_tokens = -1;
    sscanf(st, "done %d tokens", &r->generated_tokens);
    /* "done 57 tokens (40 thinking) ..." or "(2 thinking: only the markers)" */
    const char *p = strstr(st, " tokens (");
    r->reasoning_tokens = p && !strncmp(p + 9 + strspn(p + 9, "0123456789"), " thinking", 9) ? atoi(p + 9) : 0;
    if ((p = strstr(st, " reused "))) sscanf(p, " reused %d/%d", &r->reused_tokens, &r->prompt_tokens);
    r->finish = strstr(st, " (max_tokens)")    ? FINISH_LENGTH
                : strstr(st, " (context full)") ? FINISH_CONTEXT
                : strstr(st, " (stop string)")  ? FINISH_STOP
                : strstr(st, " (stopped)")      ? FINISH_CANCELLED
                                                : FINISH_EOG;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    if (remove(p) != 0 && errno != ENOENT) return -1; /* removing a turn removes the ones after it */
    return 0;
}

int ask_through_mount(const char *mnt, const ask_req *q, ask_result *res) {
    memset(res, 0, sizeof *res);
    res->generated_tokens = res->reasoning_tokens = res->prompt_tokens = res->reused_tokens = -1;
    where w;
    char tmp[64], p[4400];
    snprintf(p, sizeof p, "%s/README", mnt);
    struct stat sb;
    if (stat(p, &sb) != 0) {
        cli_error("ask: the database is held by the chatfs mount on %s, which cannot be reached (%s)", mnt,
                  strerror(errno));
        return -1;
    }
    /* a turn without a name is a conversation of its own, removed when it is answered */
    snprintf(tmp, sizeof tmp, "ask-%ld-%ld", (long)getpid(), (long)time(NULL));
    w.name = q->conv ? q->conv : tmp;
    snprintf(w.dir, sizeof w.dir, "%s/%s", mnt, w.name);
    if (mkdir(w.dir, 0755) != 0 && (errno != EEXIST || !q->conv)) {
        cli_error("ask: mkdir %s: %s", w.dir, strerror(errno));
        return -1;
    }
    int rc = -1, e;
    char *saved = NULL, *mine = NULL, st[512] = "";
    if (q->system && (e = put(&w, "system", q->system, strlen(q->system)))) {
        failed(&w, "system", e);
        goto out;
    }
    for (int k = 0; k < q->n_images; k++) /* they wait in attachments/ for the message */
        if (put_image(&w, &q->images[k]) != 0) goto out;
    size_t saved_len = 0;
    if (!(saved = slurp(&w, "settings.json", &saved_len)) || !(mine = turn_settings(saved, q))) {
        cli_error("ask: %s/settings.json: %s", w.name, saved ? "not a JSON object" : strerror(errno));
        goto out;
    }
    if ((e = put(&w, "settings.json", mine, strlen(mine)))) {
        failed(&w, "settings.json", e);
        goto out;
    }
    /* the settings are the reply's once the message is sent (its close returns) */
    int sent = put(&w, "message", q->text, q->len);
    char why[700] = "";
    if (sent) reason(&w, why, sizeof why); /* before the next good write clears it */
    if ((e = put(&w, "settings.json", saved, saved_len)))
        cli_error("ask: %s/settings.json: cannot put the conversation's settings back: %s", w.name, strerror(e));
    if (sent) {
        cli_error("ask: %s/message: %s%s%s", w.name, strerror(sent), why[0] ? ": " : "", why);
        goto out;
    }
    if (q->json && !(res->reasoning = slurp(&w, "thinking", &res->reasoning_len))) {
        failed(&w, "thinking", errno);
        goto out;
    }
    path_of(&w, "reply", p, sizeof p);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        failed(&w, "reply", errno);
        goto out;
    }
    size_t n = 0, cap = 0;
    char buf[16384];
    for (ssize_t k;;) {
        k = read(fd, buf, sizeof buf);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            e = errno;
            close(fd);
            if (n && !q->json) putchar('\n'); /* the partial reply stays on stdout */
            failed(&w, "reply", e);
            goto out;
        }
        if (k == 0) break;
        if (!q->json) {
            fwrite(buf, 1, (size_t)k, stdout);
            fflush(stdout);
        }
        if (n + (size_t)k + 1 > cap) {
            char *g = realloc(res->answer, cap = 2 * (n + (size_t)k + 1));
            if (!g) break;
            res->answer = g;
        }
        memcpy(res->answer + n, buf, (size_t)k);
        res->answer[n += (size_t)k] = 0;
    }
    close(fd);
    /* a text file ends with one newline that is not part of the text (fs/README.md) */
    if (n && res->answer[n - 1] == '\n') res->answer[--n] = 0;
    else if (!q->json) putchar('\n');
    res->answer_len = n;
    if (res->reasoning_len && res->reasoning[res->reasoning_len - 1] == '\n')
        res->reasoning[--res->reasoning_len] = 0;
    fflush(stdout);
    /* reply's EOF and status's "done" come from one update; allow the read a moment */
    for (int tries = 0; tries < 500; tries++) {
        char *s = slurp(&w, "status", NULL);
        snprintf(st, sizeof st, "%s", s ? s : "");
        free(s);
        st[strcspn(st, "\n")] = 0;
        if (strncmp(st, "queued", 6) && strncmp(st, "prefill", 7) && strncmp(st, "thinking", 8) &&
            strncmp(st, "generating", 10))
            break;
        usleep(10000);
    }
    if (!strncmp(st, "error", 5)) {
        cli_error("ask: %s/status: %s", w.name, st);
        goto out;
    }
    parse_done(st, res);
    rc = 0;
out:
    if (!q->conv && nftw(w.dir, rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
        cli_error("ask: rm -r %s: %s", w.dir, strerror(errno));
    free(saved);
    free(mine);
    return rc;
}
