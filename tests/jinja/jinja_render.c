/* jinja_render.c - renders chat templates with engine/jinja, for the parity test against
 * python-jinja2 (tests/jinja/parity.py) and for the rendering benchmark.
 *
 *   jinja_render [--now EPOCH] TEMPLATE CONTEXT.json     the output on stdout; exit 1 on a
 *                                                        template error (message on stderr)
 *   jinja_render --batch MANIFEST.json [--now EPOCH]     MANIFEST: [{"template": path,
 *       "context": path, "out": path}, ...]; writes each output to out, or "KIND: message"
 *       to out.err (KIND: compile, error, raised, limit)
 *   jinja_render --bench TEMPLATE [TURNS] [ROUNDS]       the boundary search's cost: a
 *       TURNS-turn conversation (default 50) rendered twice - with its last message and
 *       with a dummy one - ROUNDS times (default 200); prints the median per pair in ms */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/jinja/jinja.h"

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *bigger = realloc(buf, cap * 2 + 1);
            if (!bigger) { free(buf); buf = NULL; break; }
            buf = bigger;
            cap *= 2;
        }
    }
    fclose(f);
    if (!buf) return NULL;
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

static int write_file(const char *path, const char *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(data, 1, len, f) == len;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static const char *kind_name(int kind) {
    return kind == JINJA_RAISED ? "raised" : kind == JINJA_LIMIT ? "limit" : "error";
}

static cJSON *read_json(const char *path) {
    char *text = read_file(path, NULL);
    if (!text) return NULL;
    cJSON *j = cJSON_Parse(text);
    free(text);
    return j;
}

static int render_one(const char *tpath, const char *cpath, const jinja_options *o) {
    size_t len;
    char *text = read_file(tpath, &len), *err = NULL;
    if (!text) { fprintf(stderr, "jinja_render: %s: %s\n", tpath, strerror(errno)); return 1; }
    cJSON *ctx = read_json(cpath);
    if (!ctx) { fprintf(stderr, "jinja_render: %s: not JSON\n", cpath); return 1; }
    jinja_template *t = jinja_compile(text, len, &err);
    free(text);
    if (!t) {
        fprintf(stderr, "compile: %s\n", err);
        free(err);
        cJSON_Delete(ctx);
        return 1;
    }
    char *out;
    size_t out_len;
    int rc = jinja_render(t, ctx, o, &out, &out_len, &err);
    if (rc == JINJA_OK) fwrite(out, 1, out_len, stdout);
    else fprintf(stderr, "%s: %s\n", kind_name(rc), err);
    free(out);
    free(err);
    jinja_free(t);
    cJSON_Delete(ctx);
    return rc == JINJA_OK ? 0 : 1;
}

static int batch(const char *manifest, const jinja_options *o) {
    cJSON *list = read_json(manifest);
    if (!cJSON_IsArray(list)) { fprintf(stderr, "jinja_render: %s: not a JSON array\n", manifest); return 1; }
    char *cached_path = NULL, *compile_err = NULL;
    jinja_template *t = NULL;
    int failed = 0;
    const cJSON *job;
    cJSON_ArrayForEach(job, list) {
        const char *tpath = cJSON_GetStringValue(cJSON_GetObjectItem(job, "template"));
        const char *cpath = cJSON_GetStringValue(cJSON_GetObjectItem(job, "context"));
        const char *opath = cJSON_GetStringValue(cJSON_GetObjectItem(job, "out"));
        if (!tpath || !cpath || !opath) { failed = 1; continue; }
        if (!cached_path || strcmp(cached_path, tpath) != 0) {  /* compile each template once */
            jinja_free(t);
            free(compile_err);
            free(cached_path);
            t = NULL;
            compile_err = NULL;
            cached_path = strdup(tpath);
            size_t len;
            char *text = read_file(tpath, &len);
            if (text) t = jinja_compile(text, len, &compile_err);
            else compile_err = strdup("cannot read the template");
            free(text);
        }
        char errpath[4096];
        snprintf(errpath, sizeof errpath, "%s.err", opath);
        char line[8192];
        if (!t) {
            snprintf(line, sizeof line, "compile: %s", compile_err);
            write_file(errpath, line, strlen(line));
            continue;
        }
        cJSON *ctx = read_json(cpath);
        char *out = NULL, *err = NULL;
        size_t out_len = 0;
        int rc = jinja_render(t, ctx, o, &out, &out_len, &err);
        if (rc == JINJA_OK) failed |= write_file(opath, out, out_len) != 0;
        else {
            snprintf(line, sizeof line, "%s: %s", kind_name(rc), err);
            write_file(errpath, line, strlen(line));
        }
        free(out);
        free(err);
        cJSON_Delete(ctx);
    }
    jinja_free(t);
    free(compile_err);
    free(cached_path);
    cJSON_Delete(list);
    return failed;
}

/* ---- benchmark ---- */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* a conversation of turns user/assistant exchanges with replies of a few hundred bytes,
 * reasoning on every third one, and a last user message */
static cJSON *bench_context(int turns, const char *last) {
    static const char *topic[] = {"the tides", "prime numbers", "sourdough", "TCP congestion control", "Kant"};
    cJSON *ctx = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(ctx, "messages");
    char buf[2048];
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "system");
    cJSON_AddStringToObject(m, "content", "You are a helpful assistant. Answer briefly and precisely.");
    cJSON_AddItemToArray(msgs, m);
    for (int i = 0; i < turns; i++) {
        m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "user");
        snprintf(buf, sizeof buf, "Question %d: tell me something about %s, and why it matters.", i, topic[i % 5]);
        cJSON_AddStringToObject(m, "content", buf);
        cJSON_AddItemToArray(msgs, m);
        m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "assistant");
        int n = 0;
        for (int k = 0; k < 6; k++)
            n += snprintf(buf + n, sizeof buf - (size_t)n, "Point %d about %s: it follows from simple rules, yet the details matter. ",
                          k, topic[i % 5]);
        cJSON_AddStringToObject(m, "content", buf);
        if (i % 3 == 0) cJSON_AddStringToObject(m, "reasoning_content", "The user asks a factual question; list the key points.");
        cJSON_AddItemToArray(msgs, m);
    }
    m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(m, "content", last);
    cJSON_AddItemToArray(msgs, m);
    cJSON_AddBoolToObject(ctx, "add_generation_prompt", 1);
    cJSON_AddStringToObject(ctx, "bos_token", "<|endoftext|>");
    cJSON_AddStringToObject(ctx, "eos_token", "<|im_end|>");
    return ctx;
}

static int bench(const char *tpath, int turns, int rounds) {
    size_t len;
    char *text = read_file(tpath, &len), *err = NULL;
    if (!text) { fprintf(stderr, "jinja_render: %s: %s\n", tpath, strerror(errno)); return 1; }
    double c0 = now_ms();
    jinja_template *t = NULL;
    for (int i = 0; i < 20; i++) {  /* the compile time too, averaged */
        jinja_free(t);
        t = jinja_compile(text, len, &err);
        if (!t) { fprintf(stderr, "compile: %s\n", err); free(err); free(text); return 1; }
    }
    double compile_ms = (now_ms() - c0) / 20;
    free(text);
    cJSON *real = bench_context(turns, "And what is the one thing I should remember from all of this?");
    cJSON *dummy = bench_context(turns, "x");
    double *times = malloc(sizeof(double) * (size_t)rounds);
    size_t out_bytes = 0;
    for (int i = 0; i < rounds; i++) {
        double t0 = now_ms();
        char *a, *b;
        size_t la, lb;
        int rc = jinja_render(t, real, NULL, &a, &la, &err) | jinja_render(t, dummy, NULL, &b, &lb, &err);
        times[i] = now_ms() - t0;
        if (rc) { fprintf(stderr, "render: %s\n", err ? err : "?"); return 1; }
        out_bytes = la;
        free(a);
        free(b);
    }
    qsort(times, (size_t)rounds, sizeof *times, cmp_double);
    printf("%.3f ms per boundary search (2 renders of %d turns, %zu bytes each; median of %d, min %.3f ms; compile %.3f ms)\n",
           times[rounds / 2], turns, out_bytes, rounds, times[0], compile_ms);
    free(times);
    cJSON_Delete(real);
    cJSON_Delete(dummy);
    jinja_free(t);
    return 0;
}

int main(int argc, char **argv) {
    jinja_options o = {0};
    int i = 1;
    for (; i + 1 < argc && strcmp(argv[i], "--now") == 0; i += 2) {
        o.fixed_time = 1;
        o.now = (time_t)strtoll(argv[i + 1], NULL, 10);
    }
    if (i + 1 < argc && strcmp(argv[i], "--batch") == 0) {
        for (int k = i + 2; k + 1 < argc; k += 2)
            if (strcmp(argv[k], "--now") == 0) {
                o.fixed_time = 1;
                o.now = (time_t)strtoll(argv[k + 1], NULL, 10);
            }
        return batch(argv[i + 1], &o);
    }
    if (i + 1 < argc && strcmp(argv[i], "--bench") == 0)
        return bench(argv[i + 1], i + 2 < argc ? atoi(argv[i + 2]) : 50, i + 3 < argc ? atoi(argv[i + 3]) : 200);
    if (argc - i != 2) {
        fprintf(stderr, "usage: jinja_render [--now EPOCH] TEMPLATE CONTEXT.json\n"
                        "       jinja_render --batch MANIFEST.json [--now EPOCH]\n"
                        "       jinja_render --bench TEMPLATE [TURNS] [ROUNDS]\n");
        return 2;
    }
    return render_one(argv[i], argv[i + 1], &o);
}
