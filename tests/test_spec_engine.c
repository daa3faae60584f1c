/* test_spec_engine.c - speculative decoding through the engine API (chat.h) and its
 * scheduler, on llama.cpp's MTP fixture (issue "Speculative decoding"):
 *   - the default: an engine on a model with the head speculates (SPEC_DEFAULT_DRAFT); replies are
 *     those of plain decoding (settings.speculative 0, and an engine with draft -1), and the
 *     report counts drafts, accepted tokens and passes (fewer passes than tokens);
 *   - six conversations speculating in the same steps (drafts of 1..4, one plain, with
 *     stop strings and a length limit among them) each get the reply they get alone;
 *   - a two-turn conversation with checkpoints: the second turn restores the first turn's
 *     checkpoint and goes on speculating to the plain reply, with the drafts of the same
 *     turn computed from nothing; the stored checkpoints are the plain run's (the same
 *     reuse);
 *   - sampling is reproducible with a seed; a row that breaks the pass (an injected fault)
 *     fails its request alone; a reply that fills the context ends where plain decoding's
 *     does;
 *   - draft settings out of range are refused, and an engine asked to speculate on a model
 *     without the head does not open;
 *   - under a grammar (a JSON schema's, GBNF), thinking on and off: greedy speculative
 *     replies are the plain constrained ones and drafts are accepted; sampled ones parse. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "engine/runtime/chat.h"
#include "engine/runtime/speculative.h"
#include "tests/check.h"
#include "tests/engine_db.h"
#include "tests/reply.h"

#define MODEL "tests/fixtures/qwen35-tiny-mtp-f32.gguf"
#define DEFAULT_MODEL "models/chatfs-default.gguf" /* Qwen3.5's template, thinking, a trained MTP head */

typedef struct {
    char text[65536];
    size_t n;
} sink;

static void collect(void *ud, const char *t, size_t n) {
    sink *s = ud;
    if (s->n + n < sizeof s->text) memcpy(s->text + s->n, t, n), s->n += n;
}

/* the RAM stores of engines opened without a database, closed at the end of main */
static test_store ram_stores[16];
static int n_ram_stores;

/* The injected fault: a request whose session is "fail-after-N" breaks its row once it
 * has N tokens, as a failing model would. */
static int break_row(void *ud, const char *session, int generated) {
    int n;
    return session && sscanf(session, "fail-after-%d", &n) == 1 && generated >= n;
}
static const engine_faults faults = {break_row, NULL};

/* checkpoints: a store on a database (tests/engine_db.h), or {0} for one in RAM */
static chat_engine *open_engine_ctx(int draft, ckpt_port checkpoints, int n_ctx) {
    if (!checkpoints.ops) {
        REQUIRE(n_ram_stores < 16, "too many RAM stores");
        checkpoints = test_store_open(&ram_stores[n_ram_stores++], NULL);
    }
    engine_config cfg = {.model_path = MODEL, .checkpoints = checkpoints, .faults = &faults, .threads = 2,
                         .draft = draft, .n_ctx = n_ctx};
    char err[256];
    chat_engine *e = engine_open(&cfg, err, sizeof err);
    REQUIRE(e, "engine_open: %s", err);
    return e;
}
static chat_engine *open_engine(int draft, ckpt_port checkpoints) { return open_engine_ctx(draft, checkpoints, 0); }
#define RAM ((ckpt_port){0})

static gen_settings greedy(int max_tokens, int speculative) {
    gen_settings s;
    gen_settings_defaults(&s);
    s.max_tokens = max_tokens;
    s.speculative = speculative;
    s.ignore_eog = 1;
    return s;
}

static void ask(chat_engine *e, const chat_msg *msgs, int n, const gen_settings *s, sink *out, gen_report *r) {
    char err[256];
    memset(out, 0, sizeof *out);
    CHECK(engine_run(e, msgs, n, s, collect, out, r, err, sizeof err) == 0, "engine_run: %s", err);
}

/* ---------------------------------------------------------------- the default */

static void default_on(void) {
    chat_engine *e = open_engine(0, RAM), *plain = open_engine(-1, RAM);
    CHECK(engine_draft(e) == SPEC_DEFAULT_DRAFT && engine_draft(plain) == 0, "drafts %d / %d", engine_draft(e),
          engine_draft(plain));
    chat_msg msg = {"user", "Hello world! The quick brown fox", NULL};
    sink a, b, c;
    gen_report ra, rb, rc;
    gen_settings s = greedy(40, -1), off = greedy(40, 0);
    ask(e, &msg, 1, &s, &a, &ra);
    ask(e, &msg, 1, &off, &b, &rb);
    ask(plain, &msg, 1, &s, &c, &rc);
    CHECK(a.n == b.n && !memcmp(a.text, b.text, a.n), "speculative and speculative 0 replies differ");
    CHECK(a.n == c.n && !memcmp(a.text, c.text, a.n), "speculative and plain-engine replies differ");
    CHECK(ra.generated_tokens == 40 && ra.drafted_tokens > 0 && ra.accepted_tokens > 0 &&
              ra.decode_passes + ra.accepted_tokens == 39,
          "report: %d tokens, %d drafted, %d accepted, %d passes", ra.generated_tokens, ra.drafted_tokens,
          ra.accepted_tokens, ra.decode_passes);
    CHECK(rb.drafted_tokens == 0 && rb.decode_passes == 39 && rc.drafted_tokens == 0, "plain runs drafted");
    printf("  default: %d tokens in %d passes after the first (%d drafted, %d accepted), the plain reply\n",
           ra.generated_tokens, ra.decode_passes, ra.drafted_tokens, ra.accepted_tokens);
    char *js = engine_stats_json(e);
    char want[32];
    snprintf(want, sizeof want, "\"draft\":%d,", SPEC_DEFAULT_DRAFT);
    CHECK(js && strstr(js, want) && !strstr(js, "\"drafted_tokens\":0,"), "stats: %s", js ? js : "-");
    free(js);
    engine_close(e);
    engine_close(plain);
}

/* ---------------------------------------------------------------- six at once */

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int done;
} waiter;

typedef struct {
    sink out;
    gen_report r;
    int failed;
    waiter *w;
} job;

static void job_text(void *ud, const char *t, size_t n) { collect(&((job *)ud)->out, t, n); }
static void job_done(void *ud, const gen_report *r, const char *error) {
    job *j = ud;
    j->r = *r;
    j->failed = error != NULL; /* checked on the main thread (the counters are not shared) */
    pthread_mutex_lock(&j->w->lock);
    j->w->done++;
    pthread_cond_signal(&j->w->cv);
    pthread_mutex_unlock(&j->w->lock);
}

static void six_at_once(void) {
    enum { SIX = 6 };
    static const char *prompts[SIX] = {"Hello world! The quick brown fox", "Once upon a time",
                                       "The capital of France is", "1 2 3 4 5 6 7", "Translate: good morning",
                                       "A long time ago in a galaxy"};
    const int draft[SIX] = {1, 2, 3, 4, 0, -1}, max[SIX] = {48, 40, 33, 48, 20, 45};
    chat_engine *e = open_engine(4, RAM);
    gen_settings s[SIX];
    chat_msg msg[SIX];
    sink alone[SIX];
    for (int i = 0; i < SIX; i++) {
        s[i] = greedy(max[i], draft[i]);
        msg[i] = (chat_msg){"user", prompts[i], NULL};
        gen_report r;
        ask(e, &msg[i], 1, &(gen_settings){.max_tokens = max[i], .speculative = 0, .ignore_eog = 1,
                                           .checkpoints = 1, .checkpoint_interval = 1024},
            &alone[i], &r);
        if (i == 2) { /* a stop string from the middle of the reply ends that one early */
            static char stop[8];
            memcpy(stop, alone[i].text + alone[i].n / 2, 3);
            s[i].stop[0] = stop, s[i].n_stop = 1;
            ask(e, &msg[i], 1, &(gen_settings){.max_tokens = max[i], .speculative = 0, .ignore_eog = 1,
                                               .checkpoints = 1, .checkpoint_interval = 1024, .stop = {stop},
                                               .n_stop = 1},
                &alone[i], &r);
        }
    }
    waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    job jobs[SIX];
    memset(jobs, 0, sizeof jobs);
    char err[256];
    for (int i = 0; i < SIX; i++) {
        jobs[i].w = &w;
        gen_callbacks cb = {.on_text = job_text, .on_done = job_done, .ud = &jobs[i]};
        REQUIRE(engine_submit(e, &msg[i], 1, &s[i], &cb, err, sizeof err), "submit: %s", err);
    }
    pthread_mutex_lock(&w.lock);
    while (w.done < SIX) pthread_cond_wait(&w.cv, &w.lock);
    pthread_mutex_unlock(&w.lock);
    int same = 0, drafted = 0, accepted = 0;
    for (int i = 0; i < SIX; i++) {
        CHECK(!jobs[i].failed, "conversation %d failed", i);
        const int ok = jobs[i].out.n == alone[i].n && !memcmp(jobs[i].out.text, alone[i].text, alone[i].n);
        CHECK(ok, "conversation %d (drafts %d) differs from alone", i, draft[i]);
        same += ok;
        drafted += jobs[i].r.drafted_tokens, accepted += jobs[i].r.accepted_tokens;
    }
    CHECK(jobs[4].r.drafted_tokens == 0 && jobs[5].r.drafted_tokens > 0, "speculative 0 / -1 not respected");
    CHECK(jobs[2].r.finish == FINISH_STOP, "the stop string did not end conversation 2");
    printf("  six conversations at once (drafts 1, 2, 3, 4, none, the engine's 4; a stop string): %d/6 as alone, "
           "%d drafted, %d accepted\n", same, drafted, accepted);
    engine_close(e);
}

/* ---------------------------------------------------------------- checkpoints */

static void two_turns(void) {
    char dir[] = "/tmp/chatfs-spec-XXXXXX", db[2][96];
    REQUIRE(mkdtemp(dir), "mkdtemp");
    const char *second_text = "And then what happened?";
    sink out[2][2];
    gen_report rep[2][2];
    for (int k = 0; k < 2; k++) { /* k = 0: plain, 1: speculative; each its own database */
        snprintf(db[k], sizeof db[k], "%s/%d.db", dir, k);
        test_store st;
        chat_engine *e = open_engine(k ? 3 : -1, test_store_open(&st, db[k]));
        gen_settings s = greedy(30, -1);
        s.session = "c";
        chat_msg msgs[3] = {
            {"user", "Hello world! The quick brown fox", NULL}, {"assistant", "", NULL}, {"user", second_text, NULL}};
        ask(e, msgs, 1, &s, &out[k][0], &rep[k][0]);
        engine_close(e); /* the post-generation checkpoint and the database write */
        test_store_close(&st);
        /* a fresh engine and store: the checkpoint comes from the database */
        e = open_engine(k ? 3 : -1, test_store_open(&st, db[k]));
        msgs[1].content = out[k][0].text;
        ask(e, msgs, 3, &s, &out[k][1], &rep[k][1]);
        engine_close(e);
        test_store_close(&st);
    }
    for (int t = 0; t < 2; t++)
        CHECK(out[0][t].n == out[1][t].n && !memcmp(out[0][t].text, out[1][t].text, out[0][t].n),
              "turn %d: the speculative reply differs from the plain one", t + 1);
    CHECK(rep[1][1].reused_tokens > 0 && rep[1][1].reused_tokens == rep[0][1].reused_tokens &&
              !strcmp(rep[1][1].source, "disk"),
          "second turn reused %d (plain %d) from %s", rep[1][1].reused_tokens, rep[0][1].reused_tokens,
          rep[1][1].source);
    CHECK(rep[1][1].accepted_tokens > 0, "the restored turn accepted no draft");
    /* the same second turn computed from nothing: the same drafts, so the restored state
     * carried the head's cache and kept row as they were */
    {
        chat_engine *e = open_engine(3, RAM);
        gen_settings s = greedy(30, -1);
        s.checkpoints = 0;
        chat_msg msgs[3] = {{"user", "Hello world! The quick brown fox", NULL}, {"assistant", out[1][0].text, NULL},
                            {"user", second_text, NULL}};
        sink o;
        gen_report r;
        ask(e, msgs, 3, &s, &o, &r);
        CHECK(r.reused_tokens == 0 && o.n == out[1][1].n && !memcmp(o.text, out[1][1].text, o.n) &&
                  r.drafted_tokens == rep[1][1].drafted_tokens && r.accepted_tokens == rep[1][1].accepted_tokens,
              "restored: %d drafted, %d accepted; from nothing: %d, %d", rep[1][1].drafted_tokens,
              rep[1][1].accepted_tokens, r.drafted_tokens, r.accepted_tokens);
        engine_close(e);
    }
    printf("  two turns with checkpoints: the second restores %d of %d prompt tokens from disk and speculates "
           "(%d drafted, %d accepted) to the plain reply\n",
           rep[1][1].reused_tokens, rep[1][1].prompt_tokens, rep[1][1].drafted_tokens, rep[1][1].accepted_tokens);
    for (int k = 0; k < 2; k++) unlink(db[k]);
    rmdir(dir);
}

/* ---------------------------------------------------------------- the rest */

static void sampling_and_failure(void) {
    chat_engine *e = open_engine(3, RAM);
    chat_msg msg = {"user", "Once upon a time", NULL};
    gen_settings s = greedy(32, -1);
    s.temperature = 0.9f, s.seed = 11;
    sink a, b;
    gen_report ra, rb;
    ask(e, &msg, 1, &s, &a, &ra);
    ask(e, &msg, 1, &s, &b, &rb);
    CHECK(a.n == b.n && !memcmp(a.text, b.text, a.n) && ra.drafted_tokens > 0, "the same seed gave another reply");

    s = greedy(32, 3);
    s.session = "fail-after-5";
    sink c;
    gen_report rc;
    char err[256];
    memset(&c, 0, sizeof c);
    CHECK(engine_run(e, &msg, 1, &s, collect, &c, &rc, err, sizeof err) != 0 && rc.generated_tokens >= 5,
          "a failing speculative row did not fail its request (%d tokens)", rc.generated_tokens);
    s.session = NULL;
    ask(e, &msg, 1, &s, &c, &rc); /* the engine goes on */
    CHECK(rc.generated_tokens == 32, "after a failure: %d tokens", rc.generated_tokens);

    /* a reply that fills the context: it ends where plain decoding's ends, drafts or not */
    static sink full[2];
    for (int d = 0; d < 2; d++) {
        chat_engine *small = open_engine_ctx(d ? 4 : -1, RAM, 48);
        gen_settings g = greedy(0, -1);
        gen_report ro;
        ask(small, &msg, 1, &g, &full[d], &ro);
        CHECK(ro.finish == FINISH_CONTEXT && ro.prompt_tokens + ro.generated_tokens == 49,
              "context full (drafts %d): finish %d, %d + %d tokens", d ? 4 : 0, ro.finish, ro.prompt_tokens,
              ro.generated_tokens);
        engine_close(small);
    }
    CHECK(full[0].n == full[1].n && !memcmp(full[0].text, full[1].text, full[0].n), "context full: replies differ");

    s.speculative = 9;
    CHECK(engine_submit(e, &msg, 1, &s, NULL, err, sizeof err) == 0, "speculative 9 accepted");
    s.speculative = -2;
    CHECK(engine_submit(e, &msg, 1, &s, NULL, err, sizeof err) == 0, "speculative -2 accepted");
    engine_close(e);

    engine_config cfg = {.model_path = "tests/fixtures/qwen35-tiny-f32.gguf", .threads = 2, .draft = 2};
    chat_engine *no = engine_open(&cfg, err, sizeof err);
    CHECK(!no && strstr(err, "MTP head"), "an engine speculating without a head: %s", no ? "opened" : err);
    engine_close(no);
    cfg.draft = 0; /* the default: no head, no speculation */
    no = engine_open(&cfg, err, sizeof err);
    CHECK(no && engine_draft(no) == 0, "a model without a head: %s", no ? "drafts" : err);
    engine_close(no);
}

/* A speculative reply is the plain one when every visible part and every count agrees,
 * and its reasoning never resumed once the answer had begun. */
static int same_reply(const test_reply *spec, const test_reply *plain) {
    return !strcmp(spec->answer, plain->answer) && !strcmp(spec->reasoning, plain->reasoning) &&
           spec->report.generated_tokens == plain->report.generated_tokens &&
           spec->report.reasoning_tokens == plain->report.reasoning_tokens &&
           spec->report.finish == plain->report.finish && spec->saw_thinking == plain->saw_thinking &&
           !spec->thinking_after_generating;
}

/* ---------------------------------------------------------------- the default model */

/* The default model's head was trained with its trunk, so its drafts are mostly accepted:
 * accepted drafts go through the reasoning split, the thinking budget and the stops token
 * by token, as plain decoding's tokens do. For held-out questions (tools/train/heldout.jsonl)
 * under thinking on, budgets that end the reasoning early (0: at once, 1, 3, 8: inside a
 * step of drafts), a stop string in the answer, a length limit, and thinking off, the
 * answer, the reasoning, both token counts and the finish with drafts of 1, 2 and 3 equal
 * those of plain decoding (greedy). */
static void default_model_same(void) {
    engine_config cfg = {.model_path = DEFAULT_MODEL, .threads = 2, .n_ctx = 512, .draft = 3};
    char err[256];
    chat_engine *e = engine_open(&cfg, err, sizeof err);
    REQUIRE(e, "engine_open: %s", err);
    CHECK(engine_draft(e) == 3, "the default model speculates: %d", engine_draft(e));
    static const chat_msg questions[][2] = {
        {{"user", "What is 7 + 26 + 13?", NULL}},
        {{"user", "70 - 33 = ? Let's think step by step.", NULL}},
        {{"system", "Write your answers in CAPS.", NULL}, {"user", "Think step by step: What is 205 + 13?", NULL}},
        {{"user", "Count these words one by one: tiger snow grape wolf banana star", NULL}},
        {{"user", "What is 73 plus 29?", NULL}},
    };
    static const int n_msgs[] = {1, 1, 2, 1, 1};
    static const struct {
        int thinking, budget, max_tokens;
        const char *stop;
    } cases[] = {
        {1, -1, 96, NULL}, {1, 0, 96, NULL}, {1, 1, 96, NULL}, {1, 3, 96, NULL}, {1, 8, 96, NULL},
        {1, -1, 96, " = "}, {1, -1, 11, NULL}, {1, 5, 9, NULL}, {0, -1, 96, NULL}, {0, -1, 96, "+"},
    };
    static test_reply plain, spec;
    long drafted = 0, accepted = 0, tokens = 0, passes = 0, runs = 0, differ = 0;
    for (size_t q = 0; q < sizeof n_msgs / sizeof *n_msgs; q++)
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
            gen_settings s;
            engine_settings_defaults(e, &s);
            s.temperature = 0;
            s.enable_thinking = cases[c].thinking;
            s.thinking_budget = cases[c].budget;
            s.max_tokens = cases[c].max_tokens;
            if (cases[c].stop) s.stop[0] = cases[c].stop, s.n_stop = 1;
            s.speculative = 0;
            REQUIRE(reply_run(e, questions[q], n_msgs[q], &s, &plain) == 0, "%s", plain.error);
            CHECK(plain.report.drafted_tokens == 0, "speculative 0 drafted");
            for (int k = 1; k <= 3; k++) {
                s.speculative = k;
                REQUIRE(reply_run(e, questions[q], n_msgs[q], &s, &spec) == 0, "%s", spec.error);
                const int same = same_reply(&spec, &plain);
                CHECK(same,
                      "question %zu case %zu draft %d: '%s' / '%s' %d tokens (%d thinking) finish %d; plain '%s' / '%s' "
                      "%d (%d) finish %d",
                      q, c, k, spec.reasoning, spec.answer, spec.report.generated_tokens, spec.report.reasoning_tokens,
                      spec.report.finish, plain.reasoning, plain.answer, plain.report.generated_tokens,
                      plain.report.reasoning_tokens, plain.report.finish);
                differ += !same;
                drafted += spec.report.drafted_tokens;
                accepted += spec.report.accepted_tokens;
                tokens += spec.report.generated_tokens;
                passes += spec.report.decode_passes;
                runs++;
            }
        }
    printf("  default model: %ld speculative replies equal plain decoding's (%ld differ; thinking on and off, budgets "
           "0/1/3/5/8, stops, lengths): %ld of %ld drafts accepted, %ld decode passes for %ld tokens\n",
           runs - differ, differ, accepted, drafted, passes, tokens);
    CHECK(drafted > 0 && accepted * 10 > drafted * 6, "the trained head's drafts: %ld of %ld accepted", accepted,
          drafted);
    engine_close(e);
}

/* ---------------------------------------------------------------- under a grammar */

/* The default model under grammars (a JSON schema among them), thinking on and off: greedy
 * speculative replies are the plain constrained ones, token for token, with drafts
 * accepted; at temperature 1 every speculative reply is a sentence of its grammar. */
static void grammar_same(void) {
    engine_config cfg = {.model_path = DEFAULT_MODEL, .threads = 2, .n_ctx = 512, .draft = 3};
    char err[256];
    chat_engine *e = engine_open(&cfg, err, sizeof err);
    REQUIRE(e, "engine_open: %s", err);
    static const char schema[] = "{\"type\": \"object\", \"properties\": {\"answer\": {\"type\": \"integer\"}, "
                                 "\"why\": {\"type\": \"string\", \"maxLength\": 40}}, "
                                 "\"required\": [\"answer\", \"why\"]}";
    char *from_schema = json_schema_to_gbnf(schema, strlen(schema), err, sizeof err);
    REQUIRE(from_schema, "schema: %s", err);
    const char *grammars[] = {
        from_schema,
        "root ::= \"The answer is \" [0-9]+ \".\"",
        "root ::= [a-z ]{1,40} \".\"",
    };
    static const chat_msg questions[][1] = {
        {{"user", "What is 7 + 26 + 13?", NULL}},
        {{"user", "Count these words one by one: tiger snow grape wolf banana star", NULL}},
    };
    static const struct {
        int thinking, budget;
    } cases[] = {{1, -1}, {1, 8}, {0, -1}};
    static test_reply plain, spec;
    long drafted = 0, accepted = 0, runs = 0, differ = 0, sampled = 0, sampled_drafted = 0, sampled_accepted = 0;
    for (size_t g = 0; g < sizeof grammars / sizeof *grammars; g++) {
        grammar *gr = grammar_compile(grammars[g], strlen(grammars[g]), err, sizeof err);
        REQUIRE(gr, "grammar %zu: %s", g, err);
        for (size_t q = 0; q < sizeof questions / sizeof *questions; q++)
            for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
                gen_settings s;
                engine_settings_defaults(e, &s);
                s.temperature = 0;
                s.enable_thinking = cases[c].thinking;
                s.thinking_budget = cases[c].budget;
                s.max_tokens = 128;
                s.grammar = grammars[g];
                s.checkpoints = 0;
                s.speculative = 0;
                REQUIRE(reply_run(e, questions[q], 1, &s, &plain) == 0, "%s", plain.error);
                for (int k = 1; k <= 3; k++) {
                    s.speculative = k;
                    REQUIRE(reply_run(e, questions[q], 1, &s, &spec) == 0, "%s", spec.error);
                    const int same = same_reply(&spec, &plain);
                    CHECK(same, "grammar %zu question %zu case %zu draft %d: '%s' (%d tokens, finish %d); plain '%s' "
                          "(%d, %d)", g, q, c, k, spec.answer, spec.report.generated_tokens, spec.report.finish,
                          plain.answer, plain.report.generated_tokens, plain.report.finish);
                    differ += !same;
                    drafted += spec.report.drafted_tokens;
                    accepted += spec.report.accepted_tokens;
                    runs++;
                }
                /* sampling: a different draw, still a sentence of the grammar */
                s.temperature = 1.0f, s.top_k = 0, s.top_p = 1.0f, s.min_p = 0.0f;
                s.speculative = 3;
                s.seed = 7 + (uint64_t)c;
                REQUIRE(reply_run(e, questions[q], 1, &s, &spec) == 0, "%s", spec.error);
                if (spec.report.finish == FINISH_EOG) {
                    CHECK(grammar_accepts(gr, spec.answer, spec.n_answer) == 1,
                          "grammar %zu sampled: '%s' not a sentence of it", g, spec.answer);
                    sampled++;
                }
                sampled_drafted += spec.report.drafted_tokens;
                sampled_accepted += spec.report.accepted_tokens;
            }
        grammar_free(gr);
    }
    printf("  under grammars: %ld speculative replies equal plain constrained decoding's (%ld differ), %ld sampled "
           "replies parse; drafts accepted: %ld of %ld greedy, %ld of %ld sampled\n",
           runs - differ, differ, sampled, accepted, drafted, sampled_accepted, sampled_drafted);
    CHECK(drafted > 0 && accepted * 10 > drafted * 4, "greedy drafts under a grammar: %ld of %ld accepted", accepted,
          drafted);
    CHECK(sampled_accepted > 0, "no sampled draft accepted under a grammar");
    CHECK(sampled >= 12, "only %ld of the sampled replies ended", sampled);
    free(from_schema);
    engine_close(e);
}

int main(void) {
    default_on();
    six_at_once();
    two_turns();
    sampling_and_failure();
    default_model_same();
    grammar_same();
    for (int i = 0; i < n_ram_stores; i++) test_store_close(&ram_stores[i]);
    return check_report("test_spec_engine");
}
