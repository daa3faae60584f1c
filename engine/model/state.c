/* state.c - the sequence state of state.h. */
#include "engine/model/state.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* One freed state is kept for the next state_new of the same model: a request's state
 * holds a cache of ~100 MB for a few thousand tokens, and fresh pages cost a fault and a
 * clear each (about 20 ms per request on the benchmark model) before a restore can even
 * copy into them. Only a moderate cache is kept, so an idle engine holds little. */
#define SPARE_MAX_CAP 8192
static pthread_mutex_t spare_lock = PTHREAD_MUTEX_INITIALIZER;
static seq_state *spare;

static void state_destroy(seq_state *s) {
    for (int i = 0; s->k && i < s->n_slots; i++) {
        free(s->k[i]);
        free(s->v[i]);
    }
    free(s->k);
    free(s->v);
    free(s->rec);
    free(s);
}

static seq_state *take_spare(const model *m, int n_ctx) {
    pthread_mutex_lock(&spare_lock);
    seq_state *s = spare && spare->m == m && spare->cap <= n_ctx ? spare : NULL;
    if (s) spare = NULL;
    pthread_mutex_unlock(&spare_lock);
    if (s) {
        s->n_ctx = n_ctx;
        state_reset(s);
    }
    return s;
}

seq_state *state_new(const model *m, int n_ctx) {
    n_ctx = n_ctx > 0 ? n_ctx : m->n_ctx_train;
    seq_state *s = take_spare(m, n_ctx);
    if (s) return s;
    s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->m = m;
    s->n_ctx = n_ctx;
    s->n_slots = m->n_kv_slots;
    s->k = calloc((size_t)m->n_kv_slots + 1, sizeof *s->k);
    s->v = calloc((size_t)m->n_kv_slots + 1, sizeof *s->v);
    s->rec = calloc(m->rec_floats + 1, sizeof *s->rec);
    if (!s->k || !s->v || !s->rec) {
        state_destroy(s);
        return NULL;
    }
    return s;
}

void state_free(seq_state *s) {
    if (!s) return;
    if (s->cap <= SPARE_MAX_CAP && s->k && s->v && s->rec) {
        pthread_mutex_lock(&spare_lock);
        seq_state *old = spare;
        spare = s;
        pthread_mutex_unlock(&spare_lock);
        s = old; /* the one it replaces goes */
        if (!s) return;
    }
    state_destroy(s);
}

void state_drop_spare(const model *m) {
    pthread_mutex_lock(&spare_lock);
    seq_state *s = spare && (!m || spare->m == m) ? spare : NULL;
    if (s) spare = NULL;
    pthread_mutex_unlock(&spare_lock);
    if (s) state_destroy(s);
}

void state_prepare_spare(const model *m, int n_ctx, int n) {
    seq_state *s = state_new(m, n_ctx);
    if (!s) return;
    if (state_reserve(s, n < s->n_ctx ? n : s->n_ctx) == 0)
        for (int i = 0; i < m->n_kv_slots; i++) {
            memset(s->k[i], 0, (size_t)s->cap * state_k_row_bytes(m, i));
            memset(s->v[i], 0, (size_t)s->cap * state_v_row_bytes(m, i));
        }
    memset(s->rec, 0, m->rec_floats * sizeof *s->rec);
    state_free(s);
}

int state_reserve(seq_state *s, int n) {
    if (n > s->n_ctx) return -1;
    if (n <= s->cap) return 0;
    int cap = s->cap ? s->cap : 256;
    while (cap < n) cap *= 2;
    if (cap > s->n_ctx) cap = s->n_ctx;
    for (int i = 0; i < s->m->n_kv_slots; i++) {
        uint8_t *k = realloc(s->k[i], (size_t)cap * state_k_row_bytes(s->m, i));
        if (!k) return -1;
        s->k[i] = k;
        uint8_t *v = realloc(s->v[i], (size_t)cap * state_v_row_bytes(s->m, i));
        if (!v) return -1;
        s->v[i] = v;
    }
    s->cap = cap;
    return 0;
}

int state_copy(seq_state *dst, const seq_state *src) {
    if (dst == src) return 0;
    if (dst->m != src->m) return -1;
    dst->n_ctx = src->n_ctx;
    if (state_reserve(dst, src->n_past) != 0) return -1;
    for (int i = 0; i < src->m->n_kv_slots; i++) {
        const size_t rows = (size_t)src->n_past;
        if (rows) {
            memcpy(dst->k[i], src->k[i], rows * state_k_row_bytes(src->m, i));
            memcpy(dst->v[i], src->v[i], rows * state_v_row_bytes(src->m, i));
        }
    }
    memcpy(dst->rec, src->rec, src->m->rec_floats * sizeof(float));
    dst->n_past = src->n_past;
    dst->pos_shift = src->pos_shift;
    return 0;
}

seq_state *state_clone(const seq_state *src) {
    seq_state *s = state_new(src->m, src->n_ctx);
    if (s && state_copy(s, src) != 0) {
        state_free(s);
        return NULL;
    }
    return s;
}

void state_reset(seq_state *s) {
    s->n_past = 0;
    s->pos_shift = 0;
    memset(s->rec, 0, s->m->rec_floats * sizeof(float));
}

int state_trim(seq_state *s, int n) {
    if (n < 0 || n > s->n_past) return -1;
    if (n == s->n_past) return 0;
    if (!s->m->trimmable) return -1;
    s->n_past = n;
    return 0;
}

size_t state_k_row_bytes(const model *m, int slot) { return kv_row_bytes(m->kv_k, m->kv_dim[slot]); }
size_t state_v_row_bytes(const model *m, int slot) { return kv_row_bytes(m->kv_v, m->kv_dim[slot]); }

size_t state_kv_bytes_per_token(const model *m) {
    size_t n = 0;
    for (int i = 0; i < m->n_kv_slots; i++) n += state_k_row_bytes(m, i) + state_v_row_bytes(m, i);
    return n;
}

void state_get_kv(const seq_state *s, int p0, int p1, void *buf) {
    uint8_t *o = buf;
    const size_t rows = (size_t)(p1 - p0);
    for (int i = 0; i < s->m->n_kv_slots; i++) {
        const size_t kb = state_k_row_bytes(s->m, i), vb = state_v_row_bytes(s->m, i);
        memcpy(o, s->k[i] + (size_t)p0 * kb, rows * kb);
        o += rows * kb;
        memcpy(o, s->v[i] + (size_t)p0 * vb, rows * vb);
        o += rows * vb;
    }
}

int state_set_kv(seq_state *s, int p0, int p1, const void *buf) {
    if (state_reserve(s, p1) != 0) return -1;
    const uint8_t *p = buf;
    const size_t rows = (size_t)(p1 - p0);
    for (int i = 0; i < s->m->n_kv_slots; i++) {
        const size_t kb = state_k_row_bytes(s->m, i), vb = state_v_row_bytes(s->m, i);
        memcpy(s->k[i] + (size_t)p0 * kb, p, rows * kb);
        p += rows * kb;
        memcpy(s->v[i] + (size_t)p0 * vb, p, rows * vb);
        p += rows * vb;
    }
    return 0;
}

size_t state_bytes(const seq_state *s) {
    return s->m->rec_floats * sizeof(float) + state_kv_bytes_per_token(s->m) * (size_t)s->n_past;
}
