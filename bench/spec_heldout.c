/* spec_heldout.c - speculative decoding on real replies: the default model's held-out
 * conversations (tools/train/heldout.jsonl) through the engine API, greedy, thinking on,
 * with drafts of 0 (plain), 1, 2 and 3 tokens a step (docs/performance.md, "Speculative
 * decoding"; bench/speculative.sh times the same on Qwen3.5-0.8B's shape).
 *
 * Every conversation runs once in each mode, the modes one after the other in an order
 * that rotates with the conversation (a change in the machine's load touches every mode
 * alike). Checkpoints are off, so each run computes its prompt. Per mode: the tokens, the
 * drafts and how many were accepted, the decode passes after the first token, the decode
 * time (first token to the end, summed over the replies) and its speed-up over plain
 * decoding, and how many replies (answer, reasoning, token counts) equal plain decoding's.
 *
 * usage: spec_heldout [MODEL.gguf [HELDOUT.jsonl [N_ITEMS [THREADS [MAX_TOKENS]]]]]
 *   defaults: models/chatfs-default.gguf, tools/train/heldout.jsonl, all items, 2 threads,
 *   256 tokens. One JSON line per mode on stdout. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/runtime/chat.h"

#define MODES 4 /* drafts per step: 0 (plain), 1, 2, 3 */
#define MAX_MSGS 16

typedef struct {
    char answer[4096], reasoning[4096];
    size_t n_answer, n_reasoning;
    gen_report report;
    int done, failed;
    pthread_mutex_t lock;
    pthread_cond_t cv;
} reply;

static void on_text(void *ud, const char *t, size_t n) {
    reply *r = ud;
    if (r->n_answer + n < sizeof r->answer) memcpy(r->answer + r->n_answer, t, n), r->n_answer += n;
}
static void on_reasoning(void *ud, const char *t, size_t n) {
    reply *r = ud;
    if (r->n_reasoning + n < sizeof r->reasoning) memcpy(r->reasoning + r->n_reasoning, t, n), r->n_reasoning += n;
}

static void on_done(void *ud, const gen_report *g, const char *error) {
    reply *r = ud;
    pthread_mutex_lock(&r->lock);
    r->report = *g;
    r->failed = error != NULL;
    if (error) fprintf(stderr, "spec_heldout: %s\n", error);
    r->done = 1;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->lock);
}

/* One request, waited for. 0, or -1. */
static int run(chat_engine *e, const chat_msg *m, int n, const gen_settings *s, reply *r) {
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->cv, NULL);
    const gen_callbacks cb = {.on_text = on_text, .on_reasoning = on_reasoning, .on_done = on_done, .ud = r};
    char err[256];
    int rc = -1;
    if (engine_submit(e, m, n, s, &cb, err, sizeof err)) {
        pthread_mutex_lock(&r->lock);
        while (!r->done) pthread_cond_wait(&r->cv, &r->lock);
        pthread_mutex_unlock(&r->lock);
        rc = r->failed ? -1 : 0;
    } else {
        fprintf(stderr, "spec_heldout: %s\n", err);
    }
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->lock);
    return rc;
}

typedef struct {
    long replies, tokens, reasoning_tokens, drafted, accepted, passes, same;
    double decode_ms;
} totals;

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *s = malloc(cap);
    for (size_t k; s && (k = fread(s + n, 1, cap - n - 1, f)) > 0;) {
        n += k;
        if (n + 1 == cap) {
            char *t = realloc(s, cap *= 2);
            if (!t) free(s);
            s = t;
        }
    }
    fclose(f);
    if (s) s[n] = 0;
    return s;
}

int main(int argc, char **argv) {
    const char *model = argc > 1 ? argv[1] : "models/chatfs-default.gguf";
    const char *heldout = argc > 2 ? argv[2] : "tools/train/heldout.jsonl";
    const int n_items = argc > 3 ? atoi(argv[3]) : 1 << 30;
    const int threads = argc > 4 ? atoi(argv[4]) : 2;
    const int max_tokens = argc > 5 ? atoi(argv[5]) : 256;
    char *text = read_file(heldout);
    if (!text) {
        fprintf(stderr, "spec_heldout: cannot read %s\n", heldout);
        return 1;
    }
    engine_config cfg = {.model_path = model, .threads = threads, .n_ctx = 1024, .draft = MODES - 1};
    char err[256];
    chat_engine *e = engine_open(&cfg, err, sizeof err);
    if (!e) {
        fprintf(stderr, "spec_heldout: %s\n", err);
        return 1;
    }
    totals t[MODES] = {0};
    static reply out[MODES];
    int items = 0;
    for (char *line = text, *next; line && *line && items < n_items; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        cJSON *item = cJSON_Parse(line);
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(item, "messages");
        chat_msg m[MAX_MSGS];
        int n = 0;
        const cJSON *msg;
        cJSON_ArrayForEach(msg, msgs) {
            const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
            const cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
            if (n == MAX_MSGS || !cJSON_IsString(role) || !cJSON_IsString(content)) {
                n = -1;
                break;
            }
            m[n++] = (chat_msg){role->valuestring, content->valuestring, NULL};
        }
        if (n <= 0) {
            cJSON_Delete(item);
            continue;
        }
        for (int j = 0; j < MODES; j++) {
            const int k = (items + j) % MODES; /* the order rotates */
            gen_settings s;
            engine_settings_defaults(e, &s);
            s.temperature = 0;
            s.max_tokens = max_tokens;
            s.checkpoints = 0;
            s.speculative = k;
            if (run(e, m, n, &s, &out[k]) != 0) {
                fprintf(stderr, "spec_heldout: item %d failed\n", items);
                return 1;
            }
        }
        for (int k = 0; k < MODES; k++) {
            const gen_report *r = &out[k].report;
            t[k].replies++;
            t[k].tokens += r->generated_tokens;
            t[k].reasoning_tokens += r->reasoning_tokens;
            t[k].drafted += r->drafted_tokens;
            t[k].accepted += r->accepted_tokens;
            t[k].passes += r->decode_passes;
            if (r->generated_tokens > 1 && r->decode_tokens_per_s > 0)
                t[k].decode_ms += (r->generated_tokens - 1) / r->decode_tokens_per_s * 1e3;
            t[k].same += out[k].n_answer == out[0].n_answer && out[k].n_reasoning == out[0].n_reasoning &&
                         !memcmp(out[k].answer, out[0].answer, out[0].n_answer) &&
                         !memcmp(out[k].reasoning, out[0].reasoning, out[0].n_reasoning) &&
                         r->generated_tokens == out[0].report.generated_tokens &&
                         r->reasoning_tokens == out[0].report.reasoning_tokens;
        }
        cJSON_Delete(item);
        items++;
    }
    for (int k = 0; k < MODES; k++) {
        const totals *x = &t[k];
        const long after_first = x->tokens - x->replies;
        printf("{\"draft\": %d, \"replies\": %ld, \"tokens\": %ld, \"reasoning_tokens\": %ld, \"drafted\": %ld, "
               "\"accepted\": %ld, \"acceptance\": %.3f, \"decode_passes\": %ld, \"tokens_per_pass\": %.3f, "
               "\"decode_ms\": %.0f, \"decode_tok_s\": %.1f, \"speedup\": %.3f, \"same_as_plain\": %ld}\n",
               k, x->replies, x->tokens, x->reasoning_tokens, x->drafted, x->accepted,
               x->drafted ? (double)x->accepted / (double)x->drafted : 0.0, x->passes,
               x->passes ? (double)after_first / (double)x->passes : 0.0, x->decode_ms,
               x->decode_ms > 0 ? after_first / (x->decode_ms / 1e3) : 0.0,
               x->decode_ms > 0 ? t[0].decode_ms / x->decode_ms : 0.0, x->same);
    }
    engine_close(e);
    free(text);
    return 0;
}
