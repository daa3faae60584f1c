/* cache_bench.c - the checkpoint workload of the "Checkpoints" issue, timed through
 * the engine API (run by bench/cache.sh):
 *
 *   a ~2,700-token system prompt, then 5 different user messages: cold TTFT, warm
 *   TTFT (RAM), hit rates; the second turn of one conversation; a 5-message
 *   conversation with its 2nd user message edited; a restart (TTFT from the
 *   database); and a 10-turn conversation's bytes on disk against one KV copy.
 *
 * usage: cache_bench MODEL.gguf DB_DIR [SYSTEM_TOKENS [restore]]
 *   SYSTEM_TOKENS: default 2700; 8 new tokens per request, greedy. "restore" only
 *   times restoring the first request's prompt from the database a full run left. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "engine/runtime/chat.h"
#include "engine/model/state.h"
#include "store/ckpt_store.h"
#include "store/db.h"

static const char *words[] = {"river", "mountain", "silver", "engine", "quiet", "harbor", "lantern", "meadow",
                              "copper", "violet", "thunder", "garden", "paper", "window", "falcon", "marble",
                              "orchard", "signal", "ember", "canyon", "willow", "anchor", "velvet", "glacier"};

/* deterministic prose of about n_words words */
static char *prose(int n_words, unsigned seed) {
    char *s = malloc((size_t)n_words * 12 + 16);
    size_t k = 0;
    for (int i = 0; i < n_words; i++) {
        seed = seed * 1103515245u + 12345u;
        const char *w = words[(seed >> 16) % (sizeof words / sizeof words[0])];
        k += (size_t)sprintf(s + k, "%s%s", i ? (i % 13 == 0 ? ". " : " ") : "", w);
    }
    strcpy(s + k, ".");
    return s;
}

typedef struct {
    chat_msg m[64];
    char *own[64];
    int n;
} conv;

static void add(conv *c, const char *role, const char *text) {
    c->own[c->n] = strdup(text);
    c->m[c->n].role = role;
    c->m[c->n].content = c->own[c->n];
    c->m[c->n].reasoning_content = NULL;
    c->m[c->n].tool_calls = c->m[c->n].tool_call_id = NULL;
    c->n++;
}

static void conv_free(conv *c) {
    for (int i = 0; i < c->n; i++) free(c->own[i]);
    c->n = 0;
}

typedef struct {
    char *buf;
    size_t n;
} text;

static void on_text(void *ud, const char *t, size_t n) {
    text *x = ud;
    x->buf = realloc(x->buf, x->n + n + 1);
    memcpy(x->buf + x->n, t, n);
    x->n += n;
    x->buf[x->n] = 0;
}

static double stat_of(chat_engine *e, const char *tier, const char *key);

/* Waits until the engine has finished the previous request's work after its reply
 * (the post-generation checkpoint, the database write): a person reads a reply before
 * sending the next message, so that work is not counted in the next TTFT. */
static void wait_idle(chat_engine *e) {
    while (stat_of(e, NULL, "queued") > 0 || stat_of(e, NULL, "active") > 0 || stat_of(e, "disk", "pending") > 0)
        usleep(20 * 1000);
}

/* runs the conversation; appends the reply; prints one line */
static gen_report ask(chat_engine *e, conv *c, const char *label) {
    wait_idle(e);
    gen_settings s;
    gen_settings_defaults(&s);
    s.max_tokens = 8;
    gen_report r;
    char err[256];
    text t = {0};
    if (engine_run(e, c->m, c->n, &s, on_text, &t, &r, err, sizeof err) != 0) {
        fprintf(stderr, "cache_bench: %s\n", err);
        exit(1);
    }
    add(c, "assistant", t.buf ? t.buf : "");
    free(t.buf);
    printf("%-34s prompt %5d  reused %5d  computed %5d in %d passes  %-4s  TTFT %8.1f ms%s%s\n", label,
           r.prompt_tokens, r.reused_tokens, r.computed_tokens, r.prefill_passes, r.source, r.ttft_ms,
           r.miss_reason[0] ? "  miss: " : "", r.miss_reason);
    fflush(stdout);
    return r;
}

/* one engine at a time, on its database as a mount opens it (store/db.h) */
static store_db *open_db;
static ckpt_store *open_cs;

static chat_engine *open_engine(const char *model, const char *db) {
    char err[512];
    if (!(open_db = db_open(db, err, sizeof err)) || !(open_cs = cs_new(open_db, NULL, err, sizeof err))) {
        fprintf(stderr, "cache_bench: %s\n", err);
        exit(1);
    }
    engine_config cfg = {.model_path = model, .checkpoints = cs_port(open_cs)};
    chat_engine *e = engine_open(&cfg, err, sizeof err);
    if (!e) {
        fprintf(stderr, "cache_bench: %s\n", err);
        exit(1);
    }
    return e;
}

static void close_engine(chat_engine *e) {
    engine_close(e); /* writes its checkpoints */
    cs_close(open_cs);
    db_close(open_db);
}

static double stat_of(chat_engine *e, const char *tier, const char *key) {
    char *js = engine_stats_json(e);
    cJSON *o = cJSON_Parse(js);
    const cJSON *t = tier ? cJSON_GetObjectItem(o, tier) : o;
    double v = t ? cJSON_GetNumberValue(cJSON_GetObjectItem(t, key)) : -1;
    cJSON_Delete(o);
    free(js);
    return v;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: cache_bench MODEL.gguf DB_DIR [SYSTEM_WORDS]\n");
        return 2;
    }
    const char *model_path = argv[1];
    char db[1024], db10[1024];
    snprintf(db, sizeof db, "%s/cache-bench.db", argv[2]);
    snprintf(db10, sizeof db10, "%s/cache-bench-10.db", argv[2]);
    /* "restore": only the restore-cost requests, on the database a full run left */
    int restore_only = argc > 4 && !strcmp(argv[4], "restore");
    for (int i = 0; i < 2 && !restore_only; i++) {
        char p[1100];
        const char *base = i ? db10 : db;
        unlink(base);
        snprintf(p, sizeof p, "%s-wal", base);
        unlink(p);
        snprintf(p, sizeof p, "%s-shm", base);
        unlink(p);
    }
    int sys_tokens = argc > 3 ? atoi(argv[3]) : 2700;
    if (sys_tokens < 100) sys_tokens = 100;
    /* Messages 2-6 are short so that a warm request computes 25-28 tokens (the synthetic
     * model's tokenizer is nearly byte-level: about one token per character, plus the
     * turn's template tokens), as llama.cpp's server computed 24-29 for the same turns:
     * the warm times then compare the same work. */
    const char *users[6] = {"What is the capital of France? Answer in one word.",
                            "Haiku about the sea.",
                            "Is the sea salty?",
                            "Name a big river.",
                            "Two plus two?",
                            "Say hi in French."};

    chat_engine *e = open_engine(model_path, db);
    printf("model %s\n", model_path);
    /* a system prompt of about sys_tokens tokens (as rendered with a user message) */
    int words = sys_tokens * 2 / 3;
    char *system = NULL;
    for (int it = 0; it < 4; it++) {
        free(system);
        system = prose(words, 7);
        chat_msg probe[2] = {{"system", system}, {"user", users[0]}};
        int k = engine_count_tokens(e, probe, 2, NULL);
        if (k <= 0 || abs(k - sys_tokens) < sys_tokens / 100 + 2) break;
        words = (int)((double)words * sys_tokens / k);
    }
    conv c = {0};
    if (restore_only) {
        close_engine(e);
        e = open_engine(model_path, db);
        add(&c, "system", system);
        add(&c, "user", users[0]);
        gen_report d = ask(e, &c, "regenerate after restart (database)");
        c.n--;
        free(c.own[c.n]);
        gen_report r = ask(e, &c, "regenerate again (RAM)");
        printf("  restore only (0 computed): %.1f ms from the database, %.1f ms from RAM (%d tokens)\n", d.ttft_ms,
               r.ttft_ms, d.reused_tokens);
        close_engine(e);
        return 0;
    }
    add(&c, "system", system);
    add(&c, "user", users[0]);
    gen_report cold = ask(e, &c, "cold: system + message 1");
    conv_free(&c);
    double warm_sum = 0;
    int warm_reused = 0, warm_prompt = 0;
    for (int i = 1; i < 5; i++) {
        add(&c, "system", system);
        add(&c, "user", users[i]);
        char label[64];
        snprintf(label, sizeof label, "warm (RAM): message %d", i + 1);
        gen_report r = ask(e, &c, label);
        warm_sum += r.ttft_ms;
        warm_reused += r.reused_tokens;
        warm_prompt += r.prompt_tokens;
        conv_free(&c);
    }
    /* the second turn of conversation 1 */
    add(&c, "system", system);
    add(&c, "user", users[0]);
    ask(e, &c, "(again: conversation 1, turn 1)");
    add(&c, "user", "And what is its population?");
    gen_report turn2 = ask(e, &c, "second turn");
    conv_free(&c);
    /* a 5-message conversation, then its 2nd user message edited */
    add(&c, "system", system);
    char lbl[64];
    for (int i = 0; i < 5; i++) {
        add(&c, "user", users[(i + 2) % 6]);
        snprintf(lbl, sizeof lbl, "5-message conversation: turn %d", i + 1);
        ask(e, &c, lbl);
    }
    conv edit = {0};
    for (int i = 0; i < 3; i++) add(&edit, c.m[i].role, c.m[i].content); /* system, user 1, assistant 1 */
    add(&edit, "user", "Actually, write a limerick about mountains instead.");
    gen_report ed = ask(e, &edit, "edit of the 2nd user message");
    conv_free(&edit);
    conv_free(&c);
    close_engine(e);

    /* restart: a new engine on the same database */
    e = open_engine(model_path, db);
    add(&c, "system", system);
    add(&c, "user", users[5]);
    gen_report restart = ask(e, &c, "after a restart (database)");
    conv_free(&c);
    /* pure restore cost: the first request again, whose prompt-end checkpoint (b) has
     * the logits, so nothing is computed - once from the database, once from RAM */
    add(&c, "system", system);
    add(&c, "user", users[0]);
    gen_report regen_disk = ask(e, &c, "regenerate after restart (database)");
    c.n--;
    free(c.own[c.n]);
    gen_report regen_ram = ask(e, &c, "regenerate again (RAM)");
    conv_free(&c);
    close_engine(e);

    /* 10 turns in a database of their own: bytes against one KV copy */
    e = open_engine(model_path, db10);
    char *sys10 = prose(150, 11);
    add(&c, "system", sys10);
    gen_report last = {0};
    for (int i = 0; i < 10; i++) {
        char *msg = prose(40, 100 + (unsigned)i);
        add(&c, "user", msg);
        free(msg);
        snprintf(lbl, sizeof lbl, "10 turns: turn %d", i + 1);
        last = ask(e, &c, lbl);
    }
    close_engine(e); /* writes everything */
    e = open_engine(model_path, db10);
    const model *m = engine_model(e);
    double kv = stat_of(e, "disk", "kv_bytes"), st = stat_of(e, "disk", "state_bytes"),
           entries = stat_of(e, "disk", "entries");
    int conv_tokens = last.prompt_tokens + last.generated_tokens;
    double one_kv = (double)conv_tokens * (double)state_kv_bytes_per_token(m);
    double rec_one = (double)m->rec_floats * 4;
    close_engine(e);
    conv_free(&c);

    printf("\nsummary\n");
    printf("  cold TTFT                  %8.1f ms  (%d prompt tokens)\n", cold.ttft_ms, cold.prompt_tokens);
    printf("  warm TTFT (RAM), mean of 4 %8.1f ms  reused %d of %d prompt tokens (%.1f%%)\n", warm_sum / 4,
           warm_reused, warm_prompt, 100.0 * warm_reused / warm_prompt);
    printf("  second turn TTFT           %8.1f ms  reused %d of %d\n", turn2.ttft_ms, turn2.reused_tokens,
           turn2.prompt_tokens);
    printf("  edit of 2nd message TTFT   %8.1f ms  reused %d of %d\n", ed.ttft_ms, ed.reused_tokens,
           ed.prompt_tokens);
    printf("  after restart TTFT         %8.1f ms  reused %d of %d from %s (%.2fx warm)\n", restart.ttft_ms,
           restart.reused_tokens, restart.prompt_tokens, restart.source, restart.ttft_ms / (warm_sum / 4));
    printf("  restore only (0 computed)  %8.1f ms from the database, %.1f ms from RAM (%d tokens)\n",
           regen_disk.ttft_ms, regen_ram.ttft_ms, regen_disk.reused_tokens);
    printf("  10 turns: %d tokens; KV pages on disk %.1f MB = %.3fx one KV copy (%.1f MB); "
           "%d checkpoints' states %.1f MB (%.1f MB each)\n",
           conv_tokens, kv / 1e6, kv / one_kv, one_kv / 1e6, (int)entries, st / 1e6, rec_one / 1e6);
    free(system);
    free(sys10);
    return 0;
}
