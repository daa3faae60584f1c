/* test_checkpoints.c - checkpoints through the engine (issue "Checkpoints", acceptance).
 *
 *  - restore at K: for every fixture model that loads, random prompts and random
 *    split points: restoring the checkpoint at K and prefilling the rest gives
 *    logits within 1e-4 of computing from scratch - from RAM, after a round trip
 *    through the database, and in a new process that reopens the database;
 *  - reuse through engine_run: 5 user messages after one long system prompt, ten
 *    turns, an edit of message 3 of 6, a fork - each reuses what a checkpoint covers
 *    before the first changed token (asserted against an independent account of the
 *    checkpoints placed), and answers exactly as with checkpoints off (the 5 messages and
 *    the ten turns on a mixture-of-experts model too);
 *  - placement (a) to (e), one by one;
 *  - a corrupted blob in the database: the next request notices and answers right;
 *  - bytes of a 10-turn conversation against one KV copy;
 *  - an attention-only model (qwen2): KV pages and no recurrent blob in the database,
 *    and the longest shared prefix reused, cut back inside a message (edit, fork). */
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <glob.h>

#include <cjson/cJSON.h>

#include "engine/arch/arch.h"
#include "engine/runtime/chat.h"
#include "engine/kernels/kernels.h"
#include "engine/runtime/prefix_cache.h"
#include "engine/model/state.h"
#include "engine/base/threadpool.h"
#include "store/db.h"
#include "engine/base/hash.h"
#include "tests/check.h"
#include "tests/engine_db.h"
#include "tests/oracle.h"

extern char **environ;
#define MODEL FIXTURES "qwen35-tiny-f32.gguf"
static const char *self;
static char dir[512]; /* the test binary's directory: databases go there (one per build) */

static const char *tmp_path(const char *name) {
    static char buf[4][600];
    static int k;
    char *b = buf[k++ % 4];
    snprintf(b, sizeof buf[0], "%s/%s", dir, name);
    return b;
}

static void rm_db(const char *path) {
    char p[512];
    unlink(path);
    snprintf(p, sizeof p, "%s-wal", path);
    unlink(p);
    snprintf(p, sizeof p, "%s-shm", path);
    unlink(p);
}

/* ------------------------------------------------------------------ restore at K */

#define N_SPLITS 4
#define PROMPT_LEN 300
#define PREFILL_CHUNK 512 /* the engines' prefill chunk (rig_open) */

static void random_prompt(const model *m, unsigned seed, int *t, int n, int *splits) {
    uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
    for (int i = 0; i < n; i++) {
        x = mix64(x + i);
        t[i] = (int)(x % (uint64_t)m->n_vocab);
    }
    for (int i = 0; i < N_SPLITS; i++) {
        x = mix64(x + 1000 + i);
        splits[i] = 1 + (int)(x % (uint64_t)(n - 2)); /* 1..n-2: at least one token left */
    }
    splits[0] = 64; /* a page boundary too */
}

/* restores each split of prompt t from cs into a fresh state, prefills the rest and
 * compares with ref; returns the worst difference; checks the source */
static float check_splits(const model *m, prefix_cache *cs, const int *t, int n, const int *splits, const float *ref,
                          const char *want_source, arena *a) {
    float worst = 0, *lg = malloc(sizeof(float) * (size_t)m->n_vocab);
    uint64_t *h = malloc(sizeof *h * (size_t)(n + 1));
    token_chain_all(pc_seed(cs), t, n, h);
    for (int i = 0; i < N_SPLITS; i++) {
        const int K = splits[i];
        seq_state *s = state_new(m, 0);
        cs_hit hit;
        int k = pc_restore(cs, s, t, h, K + 1, NULL, &hit); /* prompt t[0..K+1): the checkpoint at K fits */
        CHECK(k == K, "%s: restore at %d gave %d (%s)", m->name, K, k, hit.miss_reason);
        CHECK(!strcmp(hit.source, want_source) || (!strcmp(want_source, "disk") && k == K),
              "source %s, expected %s", hit.source, want_source);
        pc_release(cs, &hit);
        model_prefill(m, s, t + k, n - k, 0, lg, a);
        float d = max_abs_diff(ref, lg, m->n_vocab);
        CHECK(d <= 1e-4f, "%s: split %d (%s): logits differ by %g", m->name, K, want_source, d);
        if (!(d <= worst)) worst = d;
        state_free(s);
    }
    free(h);
    free(lg);
    return worst;
}

static float *scratch_logits(const model *m, const int *t, int n, arena *a) {
    float *ref = malloc(sizeof(float) * (size_t)m->n_vocab);
    seq_state *s = state_new(m, 0);
    model_prefill(m, s, t, n, 0, ref, a);
    state_free(s);
    return ref;
}

/* the child process: reopen the database and check every split from it */
static int child(const char *path, const char *db_path, unsigned seed) {
    char err[256];
    model *m = model_load(path, err, sizeof err);
    if (!m) {
        fprintf(stderr, "child: %s\n", err);
        return 1;
    }
    test_store st;
    prefix_cache *cs = pc_open(m, test_store_open(&st, db_path), err, sizeof err);
    if (!cs) return 1;
    int t[PROMPT_LEN], splits[N_SPLITS];
    random_prompt(m, seed, t, PROMPT_LEN, splits);
    arena a = {0};
    float *ref = scratch_logits(m, t, PROMPT_LEN, &a);
    float w = check_splits(m, cs, t, PROMPT_LEN, splits, ref, "disk", &a);
    printf("  %-24s new process, from the database: worst |logit diff| %.3g\n", m->name, w);
    free(ref);
    arena_free(&a);
    pc_close(cs);
    test_store_close(&st);
    model_free(m);
    return check_failures ? 1 : 0;
}

static void restore_at_k(const char *path, unsigned seed) {
    char err[256];
    model *m = model_load(path, err, sizeof err);
    if (!m) {
        printf("  %-24s skipped: %s\n", path, err);
        return;
    }
    int t[PROMPT_LEN], splits[N_SPLITS];
    random_prompt(m, seed, t, PROMPT_LEN, splits);
    arena a = {0};
    float *ref = scratch_logits(m, t, PROMPT_LEN, &a);
    /* checkpoints at every split, taken while prefilling */
    const char *db_path = tmp_path("ckpt_restore.db");
    rm_db(db_path);
    test_store ts;
    prefix_cache *cs = pc_open(m, test_store_open(&ts, db_path), err, sizeof err);
    REQUIRE(cs, "%s", err);
    uint64_t *h = malloc(sizeof *h * (PROMPT_LEN + 1));
    token_chain_all(pc_seed(cs), t, PROMPT_LEN, h);
    for (int i = 0; i < N_SPLITS; i++) {
        seq_state *s = state_new(m, 0);
        model_prefill(m, s, t, splits[i], 0, NULL, &a);
        CHECK(pc_save(cs, s, t, h, splits[i], NULL, CK_INTERVAL, NULL) >= 0, "save at %d", splits[i]);
        state_free(s);
    }
    float w_ram = check_splits(m, cs, t, PROMPT_LEN, splits, ref, "ram", &a);
    CHECK(pc_flush(cs, NULL, NULL) == 0, "flush");
    pc_close(cs);
    test_store_close(&ts);
    cs = pc_open(m, test_store_open(&ts, db_path), err, sizeof err); /* a fresh store: nothing in RAM */
    float w_db = check_splits(m, cs, t, PROMPT_LEN, splits, ref, "disk", &a);
    pc_close(cs);
    test_store_close(&ts);
    printf("  %-34s restore at K (%d %d %d %d): worst |logit diff| RAM %.3g, database %.3g\n", path, splits[0],
           splits[1], splits[2], splits[3], w_ram, w_db);
    /* and in a new process */
    char seed_s[32];
    snprintf(seed_s, sizeof seed_s, "%u", seed);
    char *args[] = {(char *)self, "--child", (char *)path, (char *)db_path, seed_s, NULL};
    pid_t pid;
    int st = -1;
    fflush(stdout);
    CHECK(posix_spawn(&pid, self, NULL, NULL, args, environ) == 0, "spawn");
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: the new process failed (status %d)", m->name, st);
    /* attention-only models: a longer stored prefix is cut back */
    if (m->trimmable) {
        test_store ram;
        cs = pc_open(m, test_store_open(&ram, NULL), err, sizeof err);
        seq_state *s = state_new(m, 0);
        model_prefill(m, s, t, PROMPT_LEN - 1, 0, NULL, &a);
        pc_save(cs, s, t, h, PROMPT_LEN - 1, NULL, CK_INTERVAL, NULL);
        state_free(s);
        check_splits(m, cs, t, PROMPT_LEN, splits, ref, "ram", &a);
        pc_close(cs);
        test_store_close(&ram);
    }
    rm_db(db_path);
    free(h);
    free(ref);
    arena_free(&a);
    model_free(m);
}

/* ------------------------------------------------------------------ conversations */

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

static void conv_copy(conv *dst, const conv *src, int n) {
    dst->n = 0;
    for (int i = 0; i < n; i++) add(dst, src->m[i].role, src->m[i].content);
}

static void conv_free(conv *c) {
    for (int i = 0; i < c->n; i++) free(c->own[i]);
    c->n = 0;
}

typedef struct {
    char buf[8192];
    size_t n;
} text;

static void on_text(void *ud, const char *t, size_t n) {
    text *x = ud;
    if (x->n + n < sizeof x->buf) memcpy(x->buf + x->n, t, n), x->n += n;
    x->buf[x->n] = 0;
}

/* An independent account of the checkpoints the engine should hold: every position
 * it was told to place, with the tokens before it and its placement, less those its
 * conversation retired (pc_retire) once it moved on. */
typedef struct {
    int *tok[512];
    int pos[512], kind[512];
    int n;
} ledger;

static void ledger_add(ledger *l, const int *t, int pos, int kind) {
    if (l->n == 512 || pos <= 0) return;
    l->tok[l->n] = malloc(sizeof(int) * (size_t)pos);
    memcpy(l->tok[l->n], t, sizeof(int) * (size_t)pos);
    l->pos[l->n] = pos;
    l->kind[l->n++] = kind;
}

/* the conversation moved on to its message at t[start]: the prompt ends and intervals
 * before it, on this prefix, go (the rig is one conversation: one session) */
static int ledger_retire(ledger *l, const int *t, int start) {
    int gone = 0;
    for (int i = 0; i < l->n;) {
        if ((l->kind[i] == CK_PROMPT_END || l->kind[i] == CK_INTERVAL) && l->pos[i] < start &&
            !memcmp(l->tok[i], t, sizeof(int) * (size_t)l->pos[i])) {
            free(l->tok[i]);
            l->n--;
            l->tok[i] = l->tok[l->n], l->pos[i] = l->pos[l->n], l->kind[i] = l->kind[l->n];
            gone++;
        } else {
            i++;
        }
    }
    return gone;
}

static void ledger_free(ledger *l) {
    for (int i = 0; i < l->n; i++) free(l->tok[i]);
    l->n = 0;
}

static int common(const int *a, int na, const int *b, int nb) { return pc_common_prefix(a, na, b, nb); }

/* the longest recorded checkpoint usable for prompt t[0..n); for an attention-only model
 * (trimmable) also any shorter part of one: its KV pages cut back at the first token that
 * differs, at most n - 1 (the last prompt token is computed for its logits) */
static int ledger_best(const ledger *l, const int *t, int n, int trimmable) {
    int best = 0;
    for (int i = 0; i < l->n; i++) {
        int p = l->pos[i];
        if (trimmable) {
            int k = common(l->tok[i], p, t, n);
            if (k > n - 1) k = n - 1;
            if (k > best) best = k;
        }
        if (p > n || (p == n && l->kind[i] != CK_PROMPT_END) || p <= best) continue;
        if (!memcmp(l->tok[i], t, sizeof(int) * (size_t)p)) best = p;
    }
    return best;
}

typedef struct {
    chat_engine *e, *plain; /* with checkpoints, and a reference engine with them off */
    test_store st;          /* e's checkpoints on a database (st.db NULL: in RAM) */
    const model *m;
    ledger led;
    int max_tokens, interval;
    const char *tmpl_name; /* a built-in template, or NULL: the model's own */
    chat_template *tmpl;   /* the template the engine renders with (a reference) */
    int last_prompt_n;
    int *last_prompt;
} rig;

static int *render_with(const model *m, const chat_template *t, const conv *c, int *n) {
    char err[256];
    size_t len;
    char *s = template_render(t, c->m, c->n, 1, 1, &len, err, sizeof err);
    REQUIRE(s != NULL, "render: %s", err);
    int *ids = NULL;
    *n = tokenizer_encode(m->tok, s, len, 1, 1, &ids);
    free(s);
    return ids;
}

/* the template and switches the engine renders with, and the prompt t (n tokens) */
static pc_render as_engine(const rig *g, const int *t, int n) { return (pc_render){.t = g->tmpl, .enable_thinking = 1, .ids = t, .n_ids = n}; }

/* Until the engine has done the work after the last reply (the (c) checkpoint runs as a
 * job after on_done): the ledger models a person who reads a reply before answering.
 * A message sent sooner may wait for that job and reuse even more (single flight,
 * tests/test_concurrency.c). */
static void wait_idle(chat_engine *e) {
    for (;;) {
        char *js = engine_stats_json(e);
        cJSON *o = cJSON_Parse(js);
        int busy = cJSON_GetNumberValue(cJSON_GetObjectItem(o, "active")) > 0 ||
                   cJSON_GetNumberValue(cJSON_GetObjectItem(o, "queued")) > 0;
        cJSON_Delete(o);
        free(js);
        if (!busy) return;
        usleep(1000);
    }
}

/* Runs c on both engines; appends the reply; checks the reply equals the reference
 * and the reuse equals the ledger's best. Returns the report. */
static gen_report turn(rig *g, conv *c, const char *what) {
    gen_settings s;
    gen_settings_defaults(&s);
    s.max_tokens = g->max_tokens;
    s.checkpoint_interval = g->interval;
    s.template_name = g->tmpl_name;
    s.session = "conversation-1"; /* its checkpoints retire as it moves on */
    char err[256];
    template_unref(g->tmpl);
    g->tmpl = g->tmpl_name ? template_new_builtin(g->tmpl_name, g->m->tok, err, sizeof err) : template_ref(g->m->tmpl);
    REQUIRE(g->tmpl != NULL, "template %s: %s", g->tmpl_name, err);
    gen_report r, r0;
    text a = {0}, b = {0};
    int n, *t = render_with(g->m, g->tmpl, c, &n);
    int expect = ledger_best(&g->led, t, n, g->m->trimmable);
    wait_idle(g->e);
    CHECK(engine_run(g->e, c->m, c->n, &s, on_text, &a, &r, err, sizeof err) == 0, "%s: %s", what, err);
    s.checkpoints = 0;
    if (g->plain) {
        CHECK(engine_run(g->plain, c->m, c->n, &s, on_text, &b, &r0, err, sizeof err) == 0, "%s: %s", what, err);
        CHECK(a.n == b.n && !memcmp(a.buf, b.buf, a.n), "%s: the reply differs from a run without checkpoints",
              what);
    }
    CHECK(r.prompt_tokens == n, "%s: prompt %d tokens, rendered %d", what, r.prompt_tokens, n);
    CHECK(r.reused_tokens == expect, "%s: reused %d, the checkpoints placed cover %d (%s)", what, r.reused_tokens,
          expect, r.miss_reason);
    CHECK(r.reused_tokens + r.computed_tokens == r.prompt_tokens, "%s: reused %d + computed %d != %d", what,
          r.reused_tokens, r.computed_tokens, r.prompt_tokens);
    /* what the engine was told to place: marks while prefilling, and (c) after */
    pc_mark *mk;
    pc_render pr = as_engine(g, t, n);
    int nm = pc_plan(g->m, &pr, c->m, c->n, g->interval, &mk);
    for (int i = 0; i < nm; i++)
        if (mk[i].pos > r.reused_tokens) ledger_add(&g->led, t, mk[i].pos, mk[i].kind);
    for (int i = 0; i < nm; i++) /* after the reply, before the next-turn checkpoint */
        if (mk[i].kind == CK_LAST_USER) ledger_retire(&g->led, t, mk[i].pos);
    /* one pass per chunk, unless two marks lie ahead in it: the first is captured inside
     * the pass, the second ends it */
    int passes = 0;
    for (int pos = r.reused_tokens; pos < n; passes++) {
        int end = pos + PREFILL_CHUNK < n ? pos + PREFILL_CHUNK : n, ahead = 0;
        for (int i = 0; i < nm; i++)
            if (mk[i].pos > pos && mk[i].pos < end && ++ahead == 2) end = mk[i].pos;
        pos = end;
    }
    CHECK(r.prefill_passes == passes, "%s: %d prefill passes, expected %d", what, r.prefill_passes, passes);
    free(mk);
    add(c, "assistant", a.buf);
    c->n--; /* the (c) prefix renders [..., assistant(reply), user(x)] */
    int *ct, nc = pc_next_turn_prefix(g->m, &pr, c->m, c->n, a.buf, NULL, NULL, &ct);
    c->n++;
    if (nc > 0) ledger_add(&g->led, ct, nc, CK_NEXT_TURN);
    free(ct);
    free(g->last_prompt);
    g->last_prompt = t;
    g->last_prompt_n = n;
    return r;
}

static void rig_open(rig *g, const char *model_path, const char *db, int with_plain) {
    memset(g, 0, sizeof *g);
    engine_config cfg = {.model_path = model_path,
                         .threads = 2,
                         .n_ctx = 4096,
                         .checkpoints = test_store_open(&g->st, db),
                         .prefill_chunk = PREFILL_CHUNK};
    char err[256];
    g->e = engine_open(&cfg, err, sizeof err);
    REQUIRE(g->e, "%s", err);
    if (with_plain) {
        cfg.checkpoints = (ckpt_port){0};
        g->plain = engine_open(&cfg, err, sizeof err);
        REQUIRE(g->plain, "%s", err);
    }
    g->m = engine_model(g->e);
    g->max_tokens = 6;
    g->interval = 1024;
}

static void rig_close(rig *g) {
    engine_close(g->e);
    engine_close(g->plain);
    if (g->st.cs) test_store_close(&g->st);
    ledger_free(&g->led);
    free(g->last_prompt);
    template_unref(g->tmpl);
}

static char *long_system(int words) {
    static const char *w[] = {"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india"};
    char *s = malloc((size_t)words * 10 + 64);
    size_t k = (size_t)sprintf(s, "You are a careful assistant. Context:");
    for (int i = 0; i < words; i++) k += (size_t)sprintf(s + k, " %s", w[(i * 7 + i / 9) % 9]);
    return s;
}

static void five_messages(const char *model_path, const char *db) {
    rig g;
    rig_open(&g, model_path, db, 1);
    char *sys = long_system(130);
    static const char *msgs[5] = {"What is two plus two?", "Name a color.", "Tell me a joke.",
                                  "Why is the sky blue?", "List three fruits."};
    int *first = NULL, nfirst = 0;
    for (int i = 0; i < 5; i++) {
        conv c = {0};
        add(&c, "system", sys);
        add(&c, "user", msgs[i]);
        gen_report r = turn(&g, &c, "five messages");
        if (i == 0) {
            CHECK(r.prompt_tokens >= 500, "the system prompt is only %d tokens", r.prompt_tokens);
            first = malloc(sizeof(int) * (size_t)g.last_prompt_n);
            memcpy(first, g.last_prompt, sizeof(int) * (size_t)g.last_prompt_n);
            nfirst = g.last_prompt_n;
        } else {
            int shared = common(first, nfirst, g.last_prompt, g.last_prompt_n);
            CHECK(r.reused_tokens >= shared * 98 / 100 && r.reused_tokens <= shared,
                  "message %d: reused %d of a shared prefix of %d", i + 1, r.reused_tokens, shared);
            CHECK(!strcmp(r.source, "ram") || (db && !strcmp(r.source, "disk")), "source %s", r.source);
            if (i == 1) printf("  5 messages after a %d-token system prompt: request 2 reused %d of %d shared\n",
                               nfirst, r.reused_tokens, shared);
        }
        conv_free(&c);
    }
    free(first);
    free(sys);
    rig_close(&g);
}

static const char *user_text(int i) {
    static const char *u[] = {"Hello, who are you?", "Where do rivers go?", "What is a prime number?",
                              "Describe a cat.", "How far is the moon?", "What is music?", "Count to five.",
                              "Why do we sleep?", "What is rain?", "Say goodbye."};
    return u[i % 10];
}

static void ten_turns(const char *model_path, const char *db, const char *tmpl) {
    rig g;
    rig_open(&g, model_path, db, 1);
    g.tmpl_name = tmpl;
    conv c = {0};
    add(&c, "system", "You are terse.");
    for (int i = 0; i < 10; i++) {
        add(&c, "user", user_text(i));
        int *prev = g.last_prompt ? malloc(sizeof(int) * (size_t)g.last_prompt_n) : NULL, nprev = g.last_prompt_n;
        if (prev) memcpy(prev, g.last_prompt, sizeof(int) * (size_t)nprev);
        gen_report r = turn(&g, &c, "ten turns");
        if (prev) {
            int shared = common(prev, nprev, g.last_prompt, g.last_prompt_n);
            CHECK(r.reused_tokens >= shared, "turn %d: reused %d, shared with the previous prompt %d", i + 1,
                  r.reused_tokens, shared);
            if (i == 9) printf("  10 turns: turn 10 reused %d of %d prompt tokens\n", r.reused_tokens, r.prompt_tokens);
        }
        free(prev);
    }
    /* edit message 3 of 6 (user turns): ask again from there with other words */
    conv e = {0};
    conv_copy(&e, &c, 1 + 2 * 2); /* system, u1, a1, u2, a2 */
    add(&e, "user", "Qu'est-ce que la pluie ?");
    int *orig = malloc(sizeof(int) * 8192), no;
    {
        conv o = {0};
        conv_copy(&o, &c, 1 + 2 * 2 + 1);
        int *t = render_with(g.m, g.tmpl, &o, &no);
        memcpy(orig, t, sizeof(int) * (size_t)no);
        free(t);
        conv_free(&o);
    }
    gen_report r = turn(&g, &e, "edit of message 3");
    int shared = common(orig, no, g.last_prompt, g.last_prompt_n);
    CHECK(r.reused_tokens <= shared && r.reused_tokens >= shared - 2, "edit: reused %d, unchanged prefix %d",
          r.reused_tokens, shared);
    printf("  edit of message 3 of 6: reused %d (first changed token at %d) of %d\n", r.reused_tokens, shared,
           r.prompt_tokens);
    /* a fork: after turn 3, two different 4th messages */
    conv f1 = {0}, f2 = {0};
    conv_copy(&f1, &c, 1 + 3 * 2);
    conv_copy(&f2, &c, 1 + 3 * 2);
    add(&f1, "user", "Branch one: what is snow?");
    add(&f2, "user", "Zweig zwei: was ist Hagel?");
    turn(&g, &f1, "fork 1");
    int *t1 = malloc(sizeof(int) * (size_t)g.last_prompt_n), n1 = g.last_prompt_n;
    memcpy(t1, g.last_prompt, sizeof(int) * (size_t)n1);
    r = turn(&g, &f2, "fork 2");
    shared = common(t1, n1, g.last_prompt, g.last_prompt_n);
    CHECK(r.reused_tokens <= shared && r.reused_tokens >= shared - 2, "fork: reused %d, shared %d",
          r.reused_tokens, shared);
    printf("  fork after turn 3: reused %d (shared %d) of %d\n", r.reused_tokens, shared, r.prompt_tokens);
    free(t1);
    free(orig);
    conv_free(&f1);
    conv_free(&f2);
    conv_free(&e);
    conv_free(&c);
    rig_close(&g);
}

/* ------------------------------------------------------------------ placement */

static int decoded_ends_with(const model *m, const int *t, int n, const char *suffix) {
    char *s = tokenizer_decode(m->tok, t, n, 1);
    size_t ls = strlen(s), lx = strlen(suffix);
    int ok = ls >= lx && !strcmp(s + ls - lx, suffix);
    free(s);
    return ok;
}

static void placement(void) {
    rig g;
    rig_open(&g, MODEL, NULL, 0);
    g.tmpl_name = "qwen35"; /* drops reasoning from history: see (c) */
    char *sys = long_system(80);
    const model *m = g.m;
    /* (a) the start of the last user message; (e) the end of the system prompt */
    conv c = {0};
    add(&c, "system", sys);
    add(&c, "user", "First question here.");
    add(&c, "assistant", "An answer.");
    add(&c, "user", "Second question here.");
    turn(&g, &c, "(a) first");
    int n_pa, *pa = render_with(m, g.tmpl, &c, &n_pa);
    for (int i = 0; i < 2; i++) free(c.own[--c.n]); /* drop the reply and the last question */
    add(&c, "user", "A different second question.");
    gen_report r = turn(&g, &c, "(a) second");
    CHECK(decoded_ends_with(m, g.last_prompt, r.reused_tokens, "<|im_start|>user\n"),
          "(a): the reused prefix does not end where the user message begins");
    CHECK(r.reused_tokens == common(pa, n_pa, g.last_prompt, g.last_prompt_n), "(a): reused %d",
          r.reused_tokens);
    free(pa);
    conv_free(&c);
    /* (e): another conversation with the same system prompt */
    add(&c, "system", sys);
    add(&c, "user", "Zebra facts?");
    r = turn(&g, &c, "(e)");
    CHECK(r.reused_tokens > 0 && decoded_ends_with(m, g.last_prompt, r.reused_tokens, "<|im_start|>user\n"),
          "(e): reused %d", r.reused_tokens);
    int sys_end = r.reused_tokens;
    /* (b) the same request again: nothing to compute */
    c.n--;
    free(c.own[c.n]);
    r = turn(&g, &c, "(b)");
    CHECK(r.reused_tokens == r.prompt_tokens && r.computed_tokens == 0, "(b): reused %d of %d", r.reused_tokens,
          r.prompt_tokens);
    /* (c) the next turn starts where the previous turn's render ends. The Qwen3.5
     * template ends the prompt with "<think>\n" and drops it from history, so what the
     * sequence consumed is not a prefix of the next render: (c) must recompute */
    int np = g.last_prompt_n, *prev = malloc(sizeof(int) * (size_t)np);
    memcpy(prev, g.last_prompt, sizeof(int) * (size_t)np);
    add(&c, "user", "More zebra facts?");
    r = turn(&g, &c, "(c)");
    CHECK(common(prev, np, g.last_prompt, g.last_prompt_n) < np, "(c): the template kept the prompt as a prefix");
    CHECK(r.reused_tokens > np - 4, "(c): reused %d, previous prompt %d", r.reused_tokens, np);
    free(prev);
    CHECK(r.reused_tokens > sys_end && decoded_ends_with(m, g.last_prompt, r.reused_tokens, "<|im_start|>user\n"),
          "(c): reused %d", r.reused_tokens);
    conv_free(&c);
    /* (d) every N tokens: a long document edited near its end */
    g.interval = 64;
    char *doc = long_system(150), *doc2 = strdup(doc);
    doc2[strlen(doc2) - 20] = 'Z';
    add(&c, "user", doc);
    turn(&g, &c, "(d) first");
    int n1, *t1 = render_with(m, g.tmpl, &c, &n1);
    conv_free(&c);
    add(&c, "user", doc2);
    r = turn(&g, &c, "(d) edited");
    int shared = common(t1, n1, g.last_prompt, g.last_prompt_n);
    CHECK(r.reused_tokens == shared / 64 * 64 && r.reused_tokens > 0, "(d): reused %d, unchanged %d",
          r.reused_tokens, shared);
    printf("  placement: (a)(b)(c)(e) at message boundaries; (d) edited %d-token document reused %d\n", n1,
           r.reused_tokens);
    free(t1);
    free(doc);
    free(doc2);
    conv_free(&c);
    free(sys);
    rig_close(&g);
}

/* ------------------------------------------------------------------ bytes, corruption */

static double stat_of(chat_engine *e, const char *tier, const char *key) {
    char *js = engine_stats_json(e);
    cJSON *o = cJSON_Parse(js);
    const cJSON *t = tier ? cJSON_GetObjectItem(o, tier) : o;
    double v = t ? cJSON_GetNumberValue(cJSON_GetObjectItem(t, key)) : -1;
    cJSON_Delete(o);
    free(js);
    return v;
}

static void storage_bytes(void) {
    const char *db = tmp_path("ckpt_bytes.db");
    rm_db(db);
    rig g;
    rig_open(&g, MODEL, db, 0);
    g.max_tokens = 12;
    conv c = {0};
    add(&c, "system", "You are terse.");
    gen_report r = {0};
    for (int i = 0; i < 10; i++) {
        add(&c, "user", user_text(i));
        r = turn(&g, &c, "bytes");
    }
    const model *m = g.m;
    size_t row = state_kv_bytes_per_token(m), rec = m->rec_floats * sizeof(float);
    rig_close(&g);
    test_store ts;
    engine_config cfg = {.model_path = MODEL, .threads = 2, .checkpoints = test_store_open(&ts, db)};
    char err[256];
    chat_engine *e = engine_open(&cfg, err, sizeof err);
    REQUIRE(e, "%s", err);
    double kv = stat_of(e, "disk", "kv_bytes"), st = stat_of(e, "disk", "state_bytes"),
           n = stat_of(e, "disk", "entries");
    double one = (double)(r.prompt_tokens + r.generated_tokens) * (double)row;
    printf("  10 turns (%d tokens): KV pages %.0f bytes = %.3fx one KV copy; %d checkpoints' states %.0f bytes "
           "(%zu each + logits)\n",
           r.prompt_tokens + r.generated_tokens, kv, kv / one, (int)n, st, rec);
    CHECK(kv <= 1.2 * one, "KV stored %.0f bytes, more than 1.2x one copy (%.0f)", kv, one);
    /* one state per turn (where its message begins), the system prompt's end, and the
     * latest turn's prompt end and next-turn start */
    CHECK(n <= 13, "10 turns keep %.0f states, more than 13", n);
    conv_free(&c);
    engine_close(e);
    test_store_close(&ts);
    rm_db(db);
}

static void corrupt_blob(void) {
    const char *db = tmp_path("ckpt_corrupt.db");
    rm_db(db);
    rig g;
    rig_open(&g, MODEL, db, 1);
    conv c = {0};
    add(&c, "system", "You are terse.");
    for (int i = 0; i < 3; i++) {
        add(&c, "user", user_text(i));
        turn(&g, &c, "before corruption");
    }
    engine_close(g.e);
    test_store_close(&g.st);
    /* flip a byte in the middle of every KV page and recurrent blob after position 40 */
    char err[256];
    store_db *d = db_open(db, err, sizeof err);
    REQUIRE(d, "%s", err);
    sqlite3 *h = db_sql(d);
    CHECK(sqlite3_exec(h,
                       "UPDATE ckpt_pages SET kv = substr(kv, 1, 99) || x'00' || substr(kv, 101) WHERE pos0 > 40;"
                       "UPDATE ckpt_entries SET rec = substr(rec, 1, 7) || x'7f' || substr(rec, 9) WHERE n_tokens > 60;",
                       NULL, NULL, NULL) == SQLITE_OK,
        "%s", sqlite3_errmsg(h));
    db_close(d);
    engine_config cfg = {.model_path = MODEL, .threads = 2, .n_ctx = 4096, .checkpoints = test_store_open(&g.st, db)};
    g.e = engine_open(&cfg, err, sizeof err);
    REQUIRE(g.e, "%s", err);
    ledger_free(&g.led); /* the ledger no longer knows what survives: check answers and counters */
    add(&c, "user", user_text(3));
    gen_settings s;
    gen_settings_defaults(&s);
    s.max_tokens = g.max_tokens;
    gen_report r;
    text a = {0}, b = {0};
    CHECK(engine_run(g.e, c.m, c.n, &s, on_text, &a, &r, err, sizeof err) == 0, "%s", err);
    s.checkpoints = 0;
    CHECK(engine_run(g.plain, c.m, c.n, &s, on_text, &b, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(a.n == b.n && !memcmp(a.buf, b.buf, a.n), "after corruption the reply differs");
    CHECK(stat_of(g.e, NULL, "corrupt_dropped") >= 1, "the corrupt blobs were not counted");
    printf("  corrupted blobs: %.0f dropped; reused %d of %d; reply as without checkpoints\n",
           stat_of(g.e, NULL, "corrupt_dropped"), r.reused_tokens, r.prompt_tokens);
    conv_free(&c);
    rig_close(&g);
    rm_db(db);
}

/* ------------------------------------------------------------------ attention only */

#define ATTN_MODEL FIXTURES "qwen2-tiny-f32.gguf"
#define MOE_MODEL FIXTURES "qwen35moe-tiny-f32.gguf" /* a mixture-of-experts hybrid */

static int *copy_tokens(const int *t, int n) {
    int *c = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    memcpy(c, t, sizeof(int) * (size_t)n);
    return c;
}

/* Qwen2 (Qwen1.5/2/2.5) has attention in every layer, so a checkpoint needs no recurrent
 * state: the database holds KV pages and entries without a blob. And a prompt reuses all
 * that it shares with any stored prompt - the pages are cut back at the first changed
 * token, inside a message - not only what ends at a placed checkpoint: an edit near the
 * end of the last message, and a fork whose two messages start alike, reuse everything
 * before the change, from RAM and from the database in a new engine, and answer as
 * without checkpoints. */
static void attention_only(void) {
    const char *db = tmp_path("ckpt_attn.db");
    rm_db(db);
    rig g;
    rig_open(&g, ATTN_MODEL, db, 1);
    const model *m = g.m;
    CHECK(m->trimmable && m->n_rec_slots == 0 && m->rec_floats == 0,
          "qwen2: trimmable %d, %d recurrent layers, %zu floats of recurrent state", m->trimmable, m->n_rec_slots,
          m->rec_floats);
    conv c = {0};
    add(&c, "system", "You are terse.");
    add(&c, "user", "Tell me about the rivers of Europe, from the Danube to the Rhine.");
    turn(&g, &c, "attention only, first");
    int n1 = g.last_prompt_n, *t1 = copy_tokens(g.last_prompt, n1);

    /* the last message edited near its end */
    for (int i = 0; i < 2; i++) free(c.own[--c.n]); /* the reply and the question */
    add(&c, "user", "Tell me about the rivers of Europe, from the Danube to the Volga.");
    int n2, *t2 = render_with(m, g.tmpl, &c, &n2);
    const int at_checkpoints = ledger_best(&g.led, t2, n2, 0), shared = common(t1, n1, t2, n2);
    gen_report r = turn(&g, &c, "attention only, edit");
    CHECK(r.reused_tokens == shared && shared < n2, "edit: reused %d, unchanged prefix %d of %d", r.reused_tokens,
          shared, n2);
    CHECK(r.reused_tokens > at_checkpoints, "edit: reused %d, no more than a checkpoint covers (%d)", r.reused_tokens,
          at_checkpoints);
    printf("  qwen2, edit of the last message: reused %d of %d (first changed token at %d; checkpoints alone %d)\n",
           r.reused_tokens, n2, shared, at_checkpoints);

    /* a fork: two next messages that start alike */
    conv f = {0};
    conv_copy(&f, &c, c.n);
    add(&c, "user", "And what about the lakes of Finland?");
    add(&f, "user", "And what about the lakes of Italy?");
    turn(&g, &c, "attention only, fork 1");
    int n3 = g.last_prompt_n, *t3 = copy_tokens(g.last_prompt, n3);
    int n4, *t4 = render_with(m, g.tmpl, &f, &n4);
    const int fork_checkpoints = ledger_best(&g.led, t4, n4, 0), fork_shared = common(t3, n3, t4, n4);
    r = turn(&g, &f, "attention only, fork 2");
    CHECK(r.reused_tokens == fork_shared && r.reused_tokens > fork_checkpoints,
          "fork: reused %d, shared %d, checkpoints alone %d", r.reused_tokens, fork_shared, fork_checkpoints);
    printf("  qwen2, fork: reused %d of %d (shared %d; checkpoints alone %d)\n", r.reused_tokens, n4, fork_shared,
           fork_checkpoints);
    rig_close(&g);

    /* what the database holds: KV pages, entries without a recurrent blob */
    char err[256];
    store_db *sdb = db_open(db, err, sizeof err);
    REQUIRE(sdb, "%s", err);
    sqlite3 *h = db_sql(sdb);
    sqlite3_stmt *st;
    REQUIRE(sqlite3_prepare_v2(h,
                               "SELECT (SELECT COUNT(*) FROM ckpt_entries), (SELECT TOTAL(LENGTH(rec)) FROM ckpt_entries),"
                               " (SELECT COUNT(*) FROM ckpt_pages), (SELECT TOTAL(LENGTH(kv)) FROM ckpt_pages),"
                               " (SELECT MAX(rec_bytes) FROM ckpt_models)",
                               -1, &st, NULL) == SQLITE_OK &&
                sqlite3_step(st) == SQLITE_ROW,
            "%s", sqlite3_errmsg(h));
    const int entries = sqlite3_column_int(st, 0), pages = sqlite3_column_int(st, 2);
    const double rec_bytes = sqlite3_column_double(st, 1), kv_bytes = sqlite3_column_double(st, 3);
    const int model_rec = sqlite3_column_int(st, 4);
    sqlite3_finalize(st);
    db_close(sdb);
    CHECK(entries > 0 && pages > 0 && kv_bytes > 0, "%d checkpoints, %d pages, %.0f KV bytes stored", entries, pages,
          kv_bytes);
    CHECK(rec_bytes == 0 && model_rec == 0, "recurrent bytes stored: %.0f (model row says %d per checkpoint)",
          rec_bytes, model_rec);
    printf("  qwen2 database: %d checkpoints, %d KV pages (%.0f bytes), recurrent blobs %.0f bytes\n", entries, pages,
           kv_bytes, rec_bytes);

    /* a new engine on the database: another edit reuses its unchanged prefix from disk */
    test_store ts;
    engine_config cfg = {.model_path = ATTN_MODEL, .threads = 2, .n_ctx = 4096, .checkpoints = test_store_open(&ts, db)};
    chat_engine *e = engine_open(&cfg, err, sizeof err);
    REQUIRE(e, "%s", err);
    conv d = {0};
    add(&d, "system", "You are terse.");
    add(&d, "user", "Tell me about the rivers of Europe, from the Danube to the Elbe.");
    int n5, *t5 = render_with(engine_model(e), engine_model(e)->tmpl, &d, &n5);
    int want = common(t1, n1, t5, n5);
    if (common(t2, n2, t5, n5) > want) want = common(t2, n2, t5, n5);
    gen_settings s;
    gen_settings_defaults(&s);
    s.max_tokens = 4;
    text a = {0};
    CHECK(engine_run(e, d.m, d.n, &s, on_text, &a, &r, err, sizeof err) == 0, "%s", err);
    CHECK(r.reused_tokens == want && !strcmp(r.source, "disk"), "new engine: reused %d from %s, unchanged prefix %d",
          r.reused_tokens, r.source, want);
    engine_close(e);
    test_store_close(&ts);
    free(t1);
    free(t2);
    free(t3);
    free(t4);
    free(t5);
    conv_free(&c);
    conv_free(&f);
    conv_free(&d);
    rm_db(db);
}

/* The fingerprint names the arithmetic: every kernel set in llama.cpp's order gives one
 * fingerprint, the opt-in AMX set (block-integer order for Q8_0) another for a model
 * with Q8_0 weights, and the same for a model without them. */
static void arith_fingerprint(void) {
    const char *names[2] = {"qwen35-tiny-q8_0", "qwen35-tiny-f32"};
    for (int k = 0; k < 2; k++) {
        char path[256], err[256];
        snprintf(path, sizeof path, FIXTURES "%s.gguf", names[k]);
        model *m = model_load(path, err, sizeof err);
        REQUIRE(m, "%s", err);
        uint8_t ref[FINGERPRINT_BYTES], fp[FINGERPRINT_BYTES];
        kernels_select("scalar");
        model_fingerprint(m, ref);
        for (const char *const *isa = kernels_available(); *isa; isa++) {
            kernels_select(*isa);
            model_fingerprint(m, fp);
            const int same = !memcmp(fp, ref, sizeof fp), blockint = kernels_blockint(GGML_Q8_0) && k == 0;
            CHECK(same == !blockint, "%s on %s: fingerprint %s", names[k], *isa,
                  blockint ? "equals llama.cpp order's" : "differs from the scalar set's");
        }
        kernels_select("auto");
        model_free(m);
    }
}

int main(int argc, char **argv) {
    self = argv[0];
    snprintf(dir, sizeof dir, "%s", self);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    pool_set_threads(2);
    if (argc == 5 && !strcmp(argv[1], "--child")) return child(argv[2], argv[3], (unsigned)atoi(argv[4]));
    glob_t gl;
    if (glob(FIXTURES "*.gguf", 0, NULL, &gl) == 0) {
        for (size_t i = 0; i < gl.gl_pathc; i++) restore_at_k(gl.gl_pathv[i], 17 + (unsigned)i);
        globfree(&gl);
    }
    arith_fingerprint();
    placement();
    five_messages(MODEL, NULL);
    const char *db = tmp_path("ckpt_turns.db");
    rm_db(db);
    ten_turns(MODEL, db, "qwen35");
    rm_db(db);
    ten_turns(MODEL, NULL, NULL);
    /* the same conversations on a mixture-of-experts model */
    printf("  on qwen35moe-tiny-f32:\n");
    five_messages(MOE_MODEL, NULL);
    ten_turns(MOE_MODEL, NULL, NULL);
    storage_bytes();
    corrupt_blob();
    attention_only();
    ten_turns(ATTN_MODEL, NULL, NULL); /* checked against the ledger's account for trimmable models */
    return check_report("test_checkpoints");
}
