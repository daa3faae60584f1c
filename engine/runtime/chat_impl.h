/* chat_impl.h - what the engine API (chat.c, sample.c, reply.c) and its scheduler
 * (scheduler.c) share: the request, the engine, and the few functions one calls in the other. Nothing
 * outside engine/ includes this; callers use chat.h.
 *
 * Threads: the caller's threads render and queue requests (engine_submit) and flag
 * them (engine_cancel); the worker does everything else. Fields marked "lock" are
 * read or written under e->lock by both; the rest of a request belongs to the worker
 * once it is queued. */
#ifndef CHATFS_CHAT_IMPL_H
#define CHATFS_CHAT_IMPL_H

#include <pthread.h>

#include "engine/base/strbuf.h"
#include "engine/grammar/grammar.h"
#include "engine/runtime/chat.h"
#include "engine/runtime/prefix_cache.h"
#include "engine/runtime/prompt_images.h"
#include "engine/vision/projector.h"
#include "engine/runtime/sampler.h"
#include "engine/runtime/speculative.h"
#include "engine/model/state.h"

#define DEFAULT_CHUNK 512
#define DEFAULT_BATCH 8
/* the spare state engine_open prepares: a few thousand tokens, a long system prompt */
#define SPARE_PREPARED_TOKENS 4096
/* most tokens one decode row feeds (a forced end of the reasoning: "\n</think>\n\n") */
#define FEED_MAX 16

/* Where a reply stands with respect to a reasoning block (chat.c, take_token). */
enum think_state {
    THINK_MAY_OPEN = 0, /* nothing generated yet: an opening marker would start a reasoning block */
    THINK_IN,           /* inside the reasoning: the text goes to on_reasoning */
    THINK_OVER          /* the answer: no reasoning block (any more) */
};

typedef struct request {
    uint64_t id;
    struct request *next;     /* lock: in the queue, in submission order */
    int cancelled;            /* lock: engine_cancel was called */
    gen_settings s;
    char *strings;            /* one block holding the copied stop strings and session (the
                                 template is resolved at submit: tmpl) */
    gen_callbacks cb;
    int *prompt;              /* tokens: the state consumed prompt[0..n_past) while it prefills */
    int n_prompt;
    seq_state *state;         /* NULL until the worker admits the request */
    float *logits;            /* n_vocab: the logits after the last token fed */
    sampler smp;
    detok_stream ds;
    int feed[FEED_MAX];       /* what the next decode row feeds the model: the token sampled last,
                                 or the tokens that close the reasoning when its budget is spent */
    int n_feed;
    int drawn;                /* the token a step's sampling pass drew from logits */
    spec_seq *spec;           /* speculative decoding (NULL: one token a step) */
    grammar *gr;              /* gen_settings.grammar compiled (NULL: none)... */
    grammar_matcher *gm;      /* ...where the answer stands in it... */
    float *masked;            /* ...and the logits with what it does not allow at -inf (n_vocab) */
    grammar_matcher *spec_gm[SPEC_MAX_DRAFT]; /* speculating under the grammar: where the answer
                                 stands after a step's drafts d1..d(j+1) (made on first use)... */
    enum think_state spec_think[SPEC_MAX_DRAFT + 1]; /* ...and the reasoning after d1..dj */
    struct chat_engine *engine; /* for the speculation's constraint callbacks */
    const char *fail;         /* why accept_token ended the request with FINISH_ERROR */
    int step_tokens[SPEC_MAX_DRAFT + 1]; /* a speculative step's tokens (spec_accept)... */
    int n_step;               /* ...and their count */
    int max_stop;             /* longest stop string */
    char *held;               /* text held back because it may start a stop string */
    size_t n_held;
    gen_report r;
    double t_submit, t_prefill, t_first, t_done;

    /* checkpoints (prefix_cache.h) */
    pc_render tmpl;           /* the template the prompt was rendered with (a reference), its
                                 switches, and the prompt's text (owned) and tokens (prompt's,
                                 until a next-turn job replaces prompt) */
    chat_msg *msgs;           /* a copy of the conversation, for CK_NEXT_TURN */
    int n_msgs;
    uint64_t *h;              /* token chain of the prompt (n_prompt + 1) */
    pc_mark *marks;           /* where prefill stops to checkpoint */
    int n_marks, next_mark;
    int *gen;                 /* generated tokens fed to the model */
    int n_gen, cap_gen;
    strbuf reply;             /* the answer streamed to the caller (for CK_NEXT_TURN, the call reader) */

    /* reasoning (issue 25): the markers are the engine's (think_open, think_close) */
    enum think_state think;
    int think_tokens;         /* tokens generated inside the reasoning, its markers not counted (the budget) */
    int *close_ids;           /* the end of the reasoning as the template writes it ("\n</think>\n\n"),
                                 fed when the budget is spent; NULL without a budget */
    int n_close_ids;
    strbuf reasoning;         /* the reasoning streamed to the caller (for CK_NEXT_TURN) */
    char ws[64];              /* whitespace at the end of the reasoning so far, held back: the newline
                                 before the closing marker is the marker's */
    size_t n_ws;
    int strip_reasoning;      /* 1 until the reasoning's first visible character (leading newlines dropped) */
    int strip_answer;         /* 1 until the answer's first visible character after a reasoning block */
    ckpt_hit hit;             /* the checkpoint restored (pinned while the request runs) */

    /* tool calls (gen_settings.tools): the answer read as content and calls */
    struct tc_tools *tools;   /* the offered functions compiled; NULL: the answer is all content */
    struct tc_stream tcs;     /* the answer so far (reply) read by the template's family */
    size_t content_shown;     /* bytes of tcs.reply.content given to on_text... */
    int calls_shown;          /* ...and calls given to on_tool_call */
    int calls_end;            /* 1: the first call ended the reply (parallel_tool_calls 0) */
    int call_ends_reasoning;  /* 1: a call ends a reasoning block (qwen-xml, tc_reasoning_end) */
    strbuf rpend;             /* reasoning text not streamed yet: it may begin a call */

    /* images (prompt_images.h): the messages' images in order, with their files copied, and
     * where their rows stand in prompt */
    prompt_image *images;
    int n_images;
    image_span *spans;
    int n_spans;
    float **embd;             /* per image: its rows (nx * ny of n_embd floats), once encoded */
    char image_error[300];    /* why an image failed to decode (r->fail points here) */

    /* scheduler */
    struct request *leader;   /* single flight: the request whose state this one will copy... */
    int flight_pos;           /* ...once it stands at this position */
    int post;                 /* no caller any more: the CK_NEXT_TURN job */
} request;

struct chat_engine {
    model *m;
    char *model_path;            /* the file, for stats */
    int eog[64], n_eog;          /* the end-of-generation tokens (ignore_eog masks them) */
    int think_open, think_close; /* the vocabulary's reasoning markers (single tokens, e.g. <think> and
                                    </think>); -1 when it has no such pair */
    int can_think;               /* engine_can_think */
    grammar_vocab *gvocab;       /* the vocabulary's byte trie for grammar masks: made (under tmpl_lock)
                                    by the first request with a grammar */
    gen_settings defaults;       /* engine_settings_defaults: with the file's general.sampling.* */
    uint64_t renders;            /* atomic: conversations rendered and tokenized (submit, count) */
    engine_config cfg;
    int n_ctx, chunk, max_batch;
    /* what a prompt token costs in multiply-adds: the weights it reads, and per position
     * before it the attention layers' scores and weighted sums. A step's prefill slices
     * cost at most what `chunk` tokens from position 0 cost (scheduler.c plan_rows), so a
     * prompt deep in a long context is cut thinner and the others' next token waits no
     * longer than at the start. */
    double cost_token, cost_position;
    int draft;                   /* drafts per speculative step by default; 0: the engine does not
                                    speculate (the model's MTP head is off) */
    spec_seq **spec_spare;       /* worker: speculation buffers of ended requests, for the next ones
                                    (a few recurrent states each: fresh pages cost faults) */
    int n_spec_spare;
    pthread_t worker;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    request *queue, *queue_tail; /* lock: waiting for a slot, in submission order */
    request **act;               /* lock: admitted (max_batch), in admission order; the worker
                                    changes the array under the lock and reads it without */
    int n_act;
    int stopping;                /* lock */
    uint64_t next_id;            /* lock */
    /* worker-only */
    arena arena;
    batch_seq *rows;             /* one step's model rows (max_batch) */
    request **row_of;            /* whose each row is */
    int *row_ok;
    float **capture;             /* per row: a recurrent blob for a checkpoint inside a
                                    prefill slice (allocated on first use) */
    uint64_t rr_last;            /* round robin: the last request that got a prefill slice */
    double last_flush;           /* when checkpoints were last written to the database */
    int unflushed;               /* requests ended since then */
    prefix_cache *pc;            /* checkpoints (its own lock) */
    projector *proj;             /* the vision projector (engine_config.mmproj_path); NULL: none */
    uint64_t proj_fp;            /* its fingerprint, mixed into each image's key */
    int **row_pos;               /* per row of a step: an image slice's rotary positions (3 ints a row,
                                    3 * chunk, allocated on first use) */
    struct {                     /* worker: the last images encoded (by key), so that an image sent
                                    again - a follow-up, another conversation - is not encoded again */
        uint64_t key;
        float *rows;
        size_t n_floats;
        uint64_t used;
    } encoded[8];
    uint64_t encoded_clock;
    /* chat templates compiled for requests (built-ins by name, settings' Jinja texts), the
     * last few, so that a conversation's template is compiled once; the model's own is
     * m->tmpl */
    pthread_mutex_t tmpl_lock;
    struct {
        char *key;                /* "\1name" for a built-in, else the Jinja text */
        chat_template *t;
        uint64_t used;
    } tmpl_cache[8];
    uint64_t tmpl_clock;
    struct {                     /* lock */
        uint64_t requests, completed, cancelled, failed;
        uint64_t prompt_tokens, computed_tokens, generated_tokens;
        uint64_t steps, decode_rows, prefill_rows, retried_steps, max_active;
        uint64_t flight_requests, flight_tokens; /* single flight: followers, tokens not computed */
        uint64_t post_jobs, post_tokens;         /* next-turn jobs and the tokens they computed */
        uint64_t spec_steps, drafted, accepted;  /* speculative decoding: verify rows, drafts, accepted */
        uint64_t images, images_encoded;         /* images in prompts, and those run through the projector */
    } stats;
};

double request_now_ms(void);
/* chat.c: a request's text, progress and end, as its caller sees them */
void request_progress(request *r);
/* Draws r's next token from r->logits (with ignore_eog, never an end-of-generation token;
 * with a grammar, in the answer, only a token the grammar allows). */
int request_sample(chat_engine *e, request *r);
/* A speculative step's tokens from r's verify row into r->step_tokens (spec_accept; with
 * ignore_eog, never an end-of-generation token). Returns their count. */
int request_sample_step(chat_engine *e, request *r);
/* A request that speculates under a grammar: its drafts and verify rows get the mask
 * request_sample would apply after the same tokens (r->spec->c). Nothing without both. */
void request_constrain_speculation(chat_engine *e, request *r);
/* Takes the sampled token: stream its text (reasoning or answer), decide whether to stop,
 * and set r->feed to what the next decode row feeds - the token, or the end of the
 * reasoning instead of it when the thinking budget is spent. Returns a gen_finish value,
 * or FINISH_NONE to go on (FINISH_ERROR: r->fail says why). */
int request_accept_token(chat_engine *e, request *r, int tok);
/* The phase of a request that decodes: GEN_THINKING inside a reasoning block, else
 * GEN_GENERATING. */
int request_decode_phase(const request *r);
/* reply.c: one generated token's text goes where it belongs (the reasoning, the answer,
 * a call); 1 when a stop string ended the answer, 2 when its first call did
 * (parallel_tool_calls 0). request_flush_text: the reply ends, what was held goes out. */
int request_take_token(chat_engine *e, request *r, int tok);
void request_flush_text(request *r);
/* The calls the answer made as the next prompt carries them: OpenAI's tool_calls array
 * (JSON text, malloc'd; ids call_1, call_2, ... in the answer's order), NULL when none. */
char *request_calls_json(const request *r);
/* The end for the caller: the last text, the report, on_done (once). */
void request_finish(chat_engine *e, request *r, int how, const char *error);
void request_free(request *r);
/* request_checkpoints.c (the scheduler calls them): */
/* CK_NEXT_TURN: most tokens recomputed to reach the next turn's boundary; while the engine
 * closes (it waits for the job), an eighth of that */
#define POST_MAX_COMPUTE 4096
/* 1 when r uses the checkpoint store (the engine has one, r asks for it) */
int request_uses_cache(const chat_engine *e, const request *r);
/* CHATFS_DEBUG_CKPT=1: restores, saves and single flight traced on stderr */
int ckpt_debug(void);
/* At the start: the longest checkpoint of r's prompt into its state; 1 when it came with
 * the logits after the whole prompt (nothing left to compute). */
int request_restore_prompt(chat_engine *e, request *r);
/* After a slice: a checkpoint when r's state stands on its next mark (logits_ready: the
 * logits after the whole prompt are in r->logits). */
void request_checkpoint_mark(chat_engine *e, request *r, int logits_ready);
/* After a slice that captured the recurrent state at r's mark inside it: that checkpoint. */
void request_checkpoint_capture(chat_engine *e, request *r, const batch_seq *row);
/* After r's reply: r becomes the job that feeds the end of its turn and saves the
 * next turn's checkpoint (1), or there is nothing to do (0). */
int request_start_post_job(chat_engine *e, request *r);

/* single_flight.c (the scheduler calls them): r follows a request computing its prompt's
 * prefix when that pays (1; it took the state at once when the leader stood there), a
 * leader's followers take their copies after its slice, and go on alone (or follow
 * another) when it ends or stops prefilling */
int request_try_follow(chat_engine *e, request *r);
void request_hand_over(chat_engine *e, request *l);
void request_release_followers(chat_engine *e, request *l);

/* scheduler.c: a request's speculation buffers go back to the engine's spares */
void request_spec_release(chat_engine *e, request *r);

/* request_images.c: the images of a request's messages into r->images (their grids by the
 * engine's projector, their keys by their bytes and the projector): 0, or -1 with err and
 * errno (ENOTSUP no projector, EINVAL an image it does not take, ENOMEM) */
int request_images_collect(const chat_engine *e, const chat_msg *msgs, int n, prompt_image **out, int *n_out,
                           char *err, size_t errlen);
void request_images_free(prompt_image *images, int n);
/* r->spans from r->prompt (again after the prompt changed): 0 or -1 */
int request_images_locate(request *r);
/* The rows of image i of r, encoded now unless the engine has them: 0, or -1 with r->fail */
int request_image_rows(chat_engine *e, request *r, int i);

/* scheduler.c: the worker thread */
void *engine_worker(void *arg);

#endif
