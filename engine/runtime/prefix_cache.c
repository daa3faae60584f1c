/* prefix_cache.c - fingerprints, state <-> checkpoint blobs, placement (see prefix_cache.h). */
#include "engine/runtime/prefix_cache.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels/kernels.h"
#include "engine/base/threadpool.h"
#include "engine/base/hash.h"

/* Bump when the layout of seq_state (KV rows, recurrent blob) changes meaning. */
#define STATE_LAYOUT_VERSION 1
#define SAMPLE_BYTES 4096

/* every metadata key and value, every tensor's name, type and shape, and a sample of its bytes */
static void hash_gguf(hash64_state *h, const gguf_file *f) {
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        hash64_update(h, kv->key.s, kv->key.len);
        hash64_update(h, &kv->type, sizeof kv->type);
        hash64_update(h, kv->data, kv->size);
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        hash64_update(h, t->name, strlen(t->name) + 1);
        hash64_update(h, &t->type, sizeof t->type);
        hash64_update(h, t->ne, sizeof t->ne);
        hash64_update(h, &t->nbytes, sizeof t->nbytes);
        const unsigned char *d = t->data;
        uint64_t nb = t->nbytes;
        if (nb <= 3 * SAMPLE_BYTES) {
            hash64_update(h, d, nb);
        } else {
            hash64_update(h, d, SAMPLE_BYTES);
            hash64_update(h, d + nb / 2, SAMPLE_BYTES);
            hash64_update(h, d + nb - SAMPLE_BYTES, SAMPLE_BYTES);
        }
    }
}

uint64_t gguf_fingerprint(const gguf_file *f) {
    hash64_state h;
    hash64_init(&h, 0x6d6d70726f6a6670ULL);
    hash_gguf(&h, f);
    return hash64_final(&h);
}

void model_fingerprint(const model *m, uint8_t out[FINGERPRINT_BYTES]) {
    hash64_state h;
    hash64_init(&h, 0x66696e6765727072ULL);
    const gguf_file *f = m->gguf;
    uint32_t layout = STATE_LAYOUT_VERSION;
    hash64_update(&h, &layout, sizeof layout);
    hash64_update(&h, m->arch, strlen(m->arch) + 1);
    hash_gguf(&h, f);
    /* The arithmetic: a set that sums some weight type in the block-integer order
     * (kernels.h) gives other last bits, and a state computed one way must not continue
     * the other (llama.cpp's order adds nothing, so earlier fingerprints stay valid). */
    int blockint = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) blockint |= kernels_blockint(f->tensors[i].type);
    if (blockint) hash64_update(&h, "arith:blockint", 14);
    /* the sequence-state shape this build derives from the file */
    int shape[4] = {m->n_kv_slots, m->n_rec_slots, (int)m->rec_floats, m->trimmable};
    hash64_update(&h, shape, sizeof shape);
    hash64_update(&h, m->kv_dim, sizeof(int) * (size_t)m->n_kv_slots);
    /* the caches' row formats (F32 adds nothing, so earlier fingerprints stay valid) */
    if (m->kv_k != KV_F32 || m->kv_v != KV_F32) {
        char kv[32];
        snprintf(kv, sizeof kv, "kv:%s/%s", kv_type_name(m->kv_k), kv_type_name(m->kv_v));
        hash64_update(&h, kv, strlen(kv));
    }
    uint64_t a = hash64_final(&h);
    hash64_update(&h, &a, sizeof a); /* a second, dependent word for 128 bits */
    uint64_t b = hash64_final(&h);
    memcpy(out, &a, 8);
    memcpy(out + 8, &b, 8);
}

struct prefix_cache {
    ckpt_port port;     /* ops NULL: no store, every checkpoint call finds and keeps nothing */
    uint64_t seed;      /* h[0]: the store's, or the fingerprint's own without one */
    pthread_mutex_t mu; /* a store need not be thread-safe: the worker and the callers'
                           threads (forget, stats) take turns */
};

prefix_cache *pc_open(const model *m, ckpt_port port, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    prefix_cache *pc = calloc(1, sizeof *pc);
    if (!pc) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pc->port = port;
    uint8_t fp[FINGERPRINT_BYTES];
    model_fingerprint(m, fp);
    char name[200];
    snprintf(name, sizeof name, "%s/%s", m->arch, m->name);
    ckpt_model cm = {
        .fingerprint = fp,
        .fp_len = sizeof fp,
        .name = name,
        .row_bytes = state_kv_bytes_per_token(m),
        .rec_bytes = m->rec_floats * sizeof(float),
        .logits_bytes = (size_t)m->n_vocab * sizeof(float),
        .trimmable = m->trimmable,
    };
    if (port.ops && port.ops->attach(port.store, &cm, err, errlen) != 0) {
        free(pc);
        return NULL;
    }
    pc->seed = port.ops ? port.ops->seed(port.store) : hash64(fp, sizeof fp, 0);
    pthread_mutex_init(&pc->mu, NULL);
    return pc;
}

void pc_close(prefix_cache *pc) {
    if (!pc) return;
    pc_flush(pc, NULL, NULL); /* what is only in RAM */
    pthread_mutex_destroy(&pc->mu);
    free(pc);
}

uint64_t pc_seed(prefix_cache *pc) { return pc->seed; } /* set once, at open */

/* Each call below takes the lock around one call of the port, or does nothing without a
 * store (a restore finds nothing, a save keeps nothing). */

int pc_persistent(prefix_cache *pc) {
    int p = 0;
    if (pc->port.ops) {
        pthread_mutex_lock(&pc->mu);
        p = pc->port.ops->persistent(pc->port.store);
        pthread_mutex_unlock(&pc->mu);
    }
    return p;
}

void pc_release(prefix_cache *pc, ckpt_hit *hit) {
    if (pc->port.ops) {
        pthread_mutex_lock(&pc->mu);
        pc->port.ops->release(pc->port.store, hit);
        pthread_mutex_unlock(&pc->mu);
    }
    hit->entry = NULL;
}

int pc_has(prefix_cache *pc, const uint64_t *h, int n) {
    int has = 0;
    if (pc->port.ops) {
        pthread_mutex_lock(&pc->mu);
        has = pc->port.ops->has(pc->port.store, h, n);
        pthread_mutex_unlock(&pc->mu);
    }
    return has;
}

void pc_count_miss(prefix_cache *pc, const char *reason) {
    if (pc->port.ops) {
        pthread_mutex_lock(&pc->mu);
        pc->port.ops->count_miss(pc->port.store, reason);
        pthread_mutex_unlock(&pc->mu);
    }
}

void pc_note_request(prefix_cache *pc, int prompt_tokens, int reused, int computed) {
    if (pc->port.ops) {
        pthread_mutex_lock(&pc->mu);
        pc->port.ops->note_request(pc->port.store, prompt_tokens, reused, computed);
        pthread_mutex_unlock(&pc->mu);
    }
}

int pc_flush(prefix_cache *pc, int (*stop)(void *ud), void *ud) {
    int rc = 0;
    if (pc->port.ops) {
        pthread_mutex_lock(&pc->mu);
        rc = pc->port.ops->flush(pc->port.store, stop, ud);
        pthread_mutex_unlock(&pc->mu);
    }
    return rc;
}

void pc_forget_session(prefix_cache *pc, const char *session) {
    if (pc->port.ops) {
        pthread_mutex_lock(&pc->mu);
        pc->port.ops->forget_session(pc->port.store, session);
        pthread_mutex_unlock(&pc->mu);
    }
}

int pc_session_usage(prefix_cache *pc, const char *session, ckpt_usage *out) {
    memset(out, 0, sizeof *out);
    if (!pc->port.ops || !pc->port.ops->session_usage) return -1;
    pthread_mutex_lock(&pc->mu);
    pc->port.ops->session_usage(pc->port.store, session, out);
    pthread_mutex_unlock(&pc->mu);
    return 0;
}

void pc_retire(prefix_cache *pc, const uint64_t *h, int n, const char *session) {
    if (!pc->port.ops || !session) return;
    static const char kinds[] = {CK_PROMPT_END, CK_INTERVAL, 0};
    pthread_mutex_lock(&pc->mu);
    pc->port.ops->retire(pc->port.store, h, n, session, kinds);
    pthread_mutex_unlock(&pc->mu);
}

char *pc_stats_json(prefix_cache *pc) {
    char *js = NULL;
    if (pc->port.ops) {
        pthread_mutex_lock(&pc->mu);
        js = pc->port.ops->stats_json(pc->port.store);
        pthread_mutex_unlock(&pc->mu);
    }
    return js;
}

/* ------------------------------------------------------------------ state <-> rows */

/* A page row is token t's K then V for every attention layer, in slot order. */
static void get_rows(void *ud, int pos0, int rows, void *dst) {
    const seq_state *s = ud;
    uint8_t *o = dst;
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < s->m->n_kv_slots; i++) {
            const size_t kb = state_k_row_bytes(s->m, i), vb = state_v_row_bytes(s->m, i);
            memcpy(o, s->k[i] + (size_t)(pos0 + r) * kb, kb);
            memcpy(o + kb, s->v[i] + (size_t)(pos0 + r) * vb, vb);
            o += kb + vb;
        }
}

typedef struct {
    seq_state *s;
    int pos0, rows;
    const uint8_t *src;
} put_job;

static void put_rows_share(void *arg, int ith, int nth) {
    const put_job *j = arg;
    const seq_state *s = j->s;
    const size_t row_bytes = state_kv_bytes_per_token(s->m);
    long r0, r1;
    pool_split(j->rows, ith, nth, 1, &r0, &r1);
    const uint8_t *p = j->src + (size_t)r0 * row_bytes;
    for (long r = r0; r < r1; r++)
        for (int i = 0; i < s->m->n_kv_slots; i++) {
            const size_t kb = state_k_row_bytes(s->m, i), vb = state_v_row_bytes(s->m, i);
            memcpy(s->k[i] + (size_t)(j->pos0 + r) * kb, p, kb);
            memcpy(s->v[i] + (size_t)(j->pos0 + r) * vb, p + kb, vb);
            p += kb + vb;
        }
}

/* A restore copies tens of MB of KV rows: split over the pool, the copy is about one
 * third shorter than on one thread (two threads draw more of the memory bandwidth). */
static int put_rows(void *ud, int pos0, int rows, const void *src) {
    seq_state *s = ud;
    if (state_reserve(s, pos0 + rows) != 0) return -1;
    put_job j = {s, pos0, rows, src};
    pool_run_rows(put_rows_share, &j, rows);
    return 0;
}

int pc_restore(prefix_cache *pc, seq_state *s, const int *t, const uint64_t *h, int n, float *logits, ckpt_hit *hit) {
    state_reset(s);
    if (n > s->n_ctx) n = s->n_ctx;
    /* room for the whole prompt at once: growing page by page would copy the cache at
     * every doubling (a failure here is caught by put_rows) */
    state_reserve(s, n);
    int k = 0;
    *hit = (ckpt_hit){.source = "none"};
    snprintf(hit->miss_reason, sizeof hit->miss_reason, "no checkpoint store");
    if (pc->port.ops) {
        pthread_mutex_lock(&pc->mu);
        k = pc->port.ops->restore(pc->port.store, t, h, n, put_rows, s, s->rec, logits, hit);
        pthread_mutex_unlock(&pc->mu);
    }
    if (k > 0) {
        s->n_past = k;
    } else {
        state_reset(s); /* a failed attempt may have written part of the recurrent blob */
    }
    return k;
}

int pc_save(prefix_cache *pc, seq_state *s, const int *t, const uint64_t *h, int n, const float *logits, ckpt_place kind,
            const char *session) {
    if (s->n_past != n) return -1;
    int rc = 0;
    if (pc->port.ops) {
        pthread_mutex_lock(&pc->mu);
        rc = pc->port.ops->save(pc->port.store, t, h, n, get_rows, s, s->rec, logits, kind, session);
        pthread_mutex_unlock(&pc->mu);
    }
    return rc;
}

int pc_save_rec(prefix_cache *pc, seq_state *s, const float *rec, const int *t, const uint64_t *h, int n, ckpt_place kind,
                const char *session) {
    if (n <= 0 || s->n_past < n) return -1;
    int rc = 0;
    if (pc->port.ops) {
        pthread_mutex_lock(&pc->mu);
        rc = pc->port.ops->save(pc->port.store, t, h, n, get_rows, s, rec, NULL, kind, session);
        pthread_mutex_unlock(&pc->mu);
    }
    return rc;
}

/* ------------------------------------------------------------------ placement */

int pc_common_prefix(const int *a, int na, const int *b, int nb) {
    int k = 0, n = na < nb ? na : nb;
    while (k < n && a[k] == b[k]) k++;
    return k;
}

/* Renders and tokenizes (with BOS as the engine does), reusing the tokens of the prompt
 * r rendered to where the text begins the same. -1 on failure (a template that refuses
 * this conversation: no mark from it). */
static int render_ids(const model *m, const pc_render *r, const chat_msg *msgs, int n, int **out) {
    char err[256];
    size_t len;
    char *text = template_render_tools(r->t, msgs, n, r->tools, 1, r->enable_thinking, &len, err, sizeof err);
    if (!text) return -1;
    int k = r->n_images ? prompt_tokenize(m->tok, text, len, r->images, r->n_images, out, NULL)
                        : tokenizer_encode_like(m->tok, text, len, 1, 1, r->text, r->len, r->ids, r->n_ids, out);
    if (k < 0) k = -1;
    free(text);
    return k;
}

/* Common token prefix of msgs rendered with the last message's content replaced by
 * two different one-character texts (and of both with ref, when given). */
static int dummy_boundary(const model *m, const pc_render *r, chat_msg *msgs, int n, const int *ref, int n_ref) {
    static const char *const dummies[2] = {"A", "7"};
    int *ids[2] = {NULL, NULL}, len[2], best = -1;
    chat_msg saved = msgs[n - 1];
    for (int i = 0; i < 2; i++) {
        msgs[n - 1] = (chat_msg){saved.role, dummies[i], NULL};
        len[i] = render_ids(m, r, msgs, n, &ids[i]);
    }
    msgs[n - 1] = saved;
    if (len[0] >= 0 && len[1] >= 0) {
        best = pc_common_prefix(ids[0], len[0], ids[1], len[1]);
        if (ref) {
            int k = pc_common_prefix(ids[0], len[0], ref, n_ref);
            if (k < best) best = k;
        }
    }
    free(ids[0]);
    free(ids[1]);
    return best;
}

static int cmp_mark(const void *a, const void *b) {
    const pc_mark *x = a, *y = b;
    return x->pos != y->pos ? (x->pos > y->pos) - (x->pos < y->pos) : (x->kind > y->kind) - (x->kind < y->kind);
}

int pc_plan(const model *m, const pc_render *r, const chat_msg *msgs, int n_msgs, int interval, pc_mark **out) {
    const int *prompt = r->ids, n_prompt = r->n_ids;
    if (interval <= 0) interval = 1024;
    int cap = n_prompt / interval + 4, n = 0;
    pc_mark *mk = malloc(sizeof *mk * (size_t)cap);
    chat_msg *copy = malloc(sizeof *copy * (size_t)(n_msgs + 1));
    if (!mk || !copy) {
        free(mk);
        free(copy);
        return -1;
    }
    memcpy(copy, msgs, sizeof *copy * (size_t)n_msgs);
    /* CK_SYSTEM_END: the end of the system prompt: where any first user message would begin */
    if (n_msgs > 0 && !strcmp(msgs[0].role, "system")) {
        copy[1] = (chat_msg){"user", "", NULL};
        int k = dummy_boundary(m, r, copy, 2, prompt, n_prompt);
        if (k > 0 && k < n_prompt) mk[n++] = (pc_mark){k, CK_SYSTEM_END};
        memcpy(copy, msgs, sizeof *copy * (size_t)n_msgs);
    }
    /* CK_LAST_USER: where the last user message begins */
    if (n_msgs > 0 && !strcmp(msgs[n_msgs - 1].role, "user")) {
        int k = dummy_boundary(m, r, copy, n_msgs, prompt, n_prompt);
        if (k > 0 && k < n_prompt) mk[n++] = (pc_mark){k, CK_LAST_USER};
    }
    /* CK_INTERVAL: every interval tokens */
    for (int p = interval; p < n_prompt; p += interval) {
        if (n == cap) {
            cap *= 2;
            pc_mark *g = realloc(mk, sizeof *mk * (size_t)cap);
            if (!g) break;
            mk = g;
        }
        mk[n++] = (pc_mark){p, CK_INTERVAL};
    }
    /* CK_PROMPT_END: the end of the prompt */
    if (n == cap) {
        pc_mark *g = realloc(mk, sizeof *mk * (size_t)(cap + 1));
        if (g) mk = g, cap++;
    }
    if (n < cap) mk[n++] = (pc_mark){n_prompt, CK_PROMPT_END};
    free(copy);
    qsort(mk, (size_t)n, sizeof *mk, cmp_mark);
    int k = 0; /* one mark per position: the lowest letter wins ('a' over 'd' ...) */
    for (int i = 0; i < n; i++)
        if (k == 0 || mk[k - 1].pos != mk[i].pos) mk[k++] = mk[i];
    *out = mk;
    return k;
}

int pc_next_turn_prefix(const model *m, const pc_render *r, const chat_msg *msgs, int n_msgs, const char *reply,
                        const char *reasoning, const char *tool_calls, int **out) {
    chat_msg *copy = malloc(sizeof *copy * (size_t)(n_msgs + 2));
    if (!copy) return -1;
    memcpy(copy, msgs, sizeof *copy * (size_t)n_msgs);
    copy[n_msgs] = (chat_msg){"assistant", reply, reasoning && *reasoning ? reasoning : NULL, tool_calls};
    /* the first call's id as the engine names calls (request_calls_json: call_1, call_2, ...) */
    copy[n_msgs + 1] = tool_calls ? (chat_msg){"tool", "", NULL, NULL, "call_1"} : (chat_msg){"user", "", NULL};
    static const char *const dummies[2] = {"A", "7"};
    int *ids[2] = {NULL, NULL}, len[2], k = -1;
    for (int i = 0; i < 2; i++) {
        copy[n_msgs + 1].content = dummies[i];
        len[i] = render_ids(m, r, copy, n_msgs + 2, &ids[i]);
    }
    if (len[0] >= 0 && len[1] >= 0) {
        k = pc_common_prefix(ids[0], len[0], ids[1], len[1]);
        *out = ids[0];
        ids[0] = NULL;
    }
    free(ids[0]);
    free(ids[1]);
    free(copy);
    return k;
}
