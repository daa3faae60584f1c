/* ckpt_store.c - the checkpoint index, its two tiers, lookup and eviction (see
 * ckpt_store.h). The SQL lives in ckpt_sql.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/ckpt_impl.h"
#include "engine/base/hash.h"

/* ------------------------------------------------------------------ index */

static unsigned hslot(uint64_t key) { return (unsigned)(mix64(key) >> (64 - CS_HBITS)); }

cs_page *cs_page_find(const ckpt_store *s, uint64_t key) {
    for (cs_page *p = s->table[hslot(key)]; p; p = p->hnext)
        if (p->key == key) return p;
    return NULL;
}

size_t cs_page_bytes(const ckpt_store *s, const cs_page *p) { return (size_t)p->n * s->m.row_bytes; }

size_t cs_entry_own_bytes(const ckpt_store *s, const cs_entry *e) {
    return s->m.rec_bytes + (e->has_logits ? s->m.logits_bytes : 0);
}

/* Adds a page under its parent (found by parent_key; NULL parent when parent_key is
 * the seed). The caller has checked that the parent exists and ends at pos0. */
cs_page *cs_page_add(ckpt_store *s, uint64_t key, uint64_t parent_key, int pos0, int n, const int *tokens) {
    cs_page *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->tokens = malloc(sizeof(int) * (size_t)n);
    if (!p->tokens) {
        free(p);
        return NULL;
    }
    memcpy(p->tokens, tokens, sizeof(int) * (size_t)n);
    p->key = key;
    p->parent_key = parent_key;
    p->pos0 = pos0;
    p->n = n;
    p->parent = parent_key == s->seed && pos0 == 0 ? NULL : cs_page_find(s, parent_key);
    cs_page **list = p->parent ? &p->parent->child : &s->roots;
    p->sibling = *list;
    *list = p;
    unsigned h = hslot(key);
    p->hnext = s->table[h];
    s->table[h] = p;
    return p;
}

/* Frees a page nobody references any more, and then its parent if that one is
 * unreferenced too. */
void cs_page_maybe_free(ckpt_store *s, cs_page *p) {
    while (p && p->ram_refs == 0 && p->disk_refs == 0 && !p->child) {
        cs_page *parent = p->parent;
        cs_page **list = parent ? &parent->child : &s->roots;
        while (*list && *list != p) list = &(*list)->sibling;
        if (*list) *list = p->sibling;
        cs_page **hp = &s->table[hslot(p->key)];
        while (*hp && *hp != p) hp = &(*hp)->hnext;
        if (*hp) *hp = p->hnext;
        if (p->kv) s->ram_bytes -= cs_page_bytes(s, p);
        free(p->kv);
        free(p->tokens);
        free(p);
        p = parent;
    }
}

cs_entry *cs_entry_add(ckpt_store *s, uint64_t hash, int n, cs_page *last, int kind, const char *session) {
    if (s->n_e == s->cap_e) {
        int cap = s->cap_e ? 2 * s->cap_e : 64;
        cs_entry **e = realloc(s->e, sizeof *e * (size_t)cap);
        if (!e) return NULL;
        s->e = e;
        s->cap_e = cap;
    }
    cs_entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->hash = hash;
    e->n = n;
    e->last = last;
    e->kind = kind;
    e->session = session ? strdup(session) : NULL;
    e->last_used = ++s->clock;
    s->e[s->n_e++] = e;
    return e;
}

void cs_entry_free(ckpt_store *s, cs_entry *e) {
    for (int i = 0; i < s->n_e; i++)
        if (s->e[i] == e) {
            s->e[i] = s->e[--s->n_e];
            break;
        }
    free(e->rec);
    free(e->logits);
    free(e->session);
    free(e);
}

uint64_t cs_page_checksum(const ckpt_store *s, const cs_page *p, const void *kv) {
    hash64_state h;
    hash64_init(&h, p->key);
    hash64_update(&h, p->tokens, sizeof(int) * (size_t)p->n);
    if (kv) hash64_update(&h, kv, cs_page_bytes(s, p));
    return hash64_final(&h);
}

uint64_t cs_entry_checksum(const ckpt_store *s, const cs_entry *e, const void *rec, const void *logits) {
    hash64_state h;
    hash64_init(&h, e->hash ^ (uint64_t)e->n);
    if (s->m.rec_bytes) hash64_update(&h, rec, s->m.rec_bytes);
    if (e->has_logits) hash64_update(&h, logits, s->m.logits_bytes);
    return hash64_final(&h);
}

/* ------------------------------------------------------------------ tiers */

/* The entry's RAM copy goes: its blobs are freed and its pages lose a RAM reference
 * (their KV is freed when no RAM entry needs it). */
static void ram_off(ckpt_store *s, cs_entry *e) {
    if (!e->in_ram) return;
    s->ram_bytes -= cs_entry_own_bytes(s, e);
    free(e->rec);
    free(e->logits);
    e->rec = e->logits = NULL;
    e->in_ram = 0;
    e->dirty = 0;
    cs_page *last = e->last;
    for (cs_page *p = last; p; p = p->parent)
        if (--p->ram_refs == 0 && p->kv) {
            s->ram_bytes -= cs_page_bytes(s, p);
            free(p->kv);
            p->kv = NULL;
        }
    (void)last; /* pages are freed by drop_entry once neither tier needs them */
}

static void ram_on(ckpt_store *s, cs_entry *e) {
    e->in_ram = 1;
    s->ram_bytes += cs_entry_own_bytes(s, e);
    for (cs_page *p = e->last; p; p = p->parent) p->ram_refs++;
}

void cs_disk_drop(ckpt_store *s, cs_entry *e) {
    if (!e->on_disk) return;
    if (s->db) cs_sql_delete_entry(s, e);
    s->disk_bytes -= cs_entry_own_bytes(s, e);
    e->on_disk = 0;
    for (cs_page *p = e->last; p; p = p->parent)
        if (--p->disk_refs == 0 && p->on_disk) {
            if (s->db) cs_sql_delete_page(s, p);
            s->disk_bytes -= cs_page_bytes(s, p);
            p->on_disk = 0;
        }
}

static void remember_evicted(ckpt_store *s, const cs_entry *e) {
    int i = s->n_evicted++ % CS_EVICTED_RING;
    s->evicted[i].hash = e->hash;
    s->evicted[i].n = e->n;
}

/* Removes an entry from both tiers and the index. */
static void drop_entry(ckpt_store *s, cs_entry *e) {
    cs_page *last = e->last;
    if (e->on_disk) cs_disk_drop(s, e);
    ram_off(s, e);
    cs_entry_free(s, e);
    cs_page_maybe_free(s, last);
}

/* What keeping the entry is worth per byte it alone holds in a tier: tokens saved
 * (its position: restoring it skips that many tokens of prefill) over the bytes that
 * evicting it would free, discounted by how long ago it was last used. Entries of
 * forgotten sessions go first. */
static double score(const ckpt_store *s, const cs_entry *e, int disk) {
    double bytes = (double)cs_entry_own_bytes(s, e);
    for (const cs_page *p = e->last; p; p = p->parent)
        if ((disk ? p->disk_refs : p->ram_refs) == 1) bytes += (double)cs_page_bytes(s, p);
    double age = (double)(s->clock - e->last_used);
    double v = (double)e->n / (bytes + 1.0) / (1.0 + age / 8.0);
    return e->forgotten ? v * 0.01 : v;
}

static cs_entry *victim(const ckpt_store *s, int disk) {
    cs_entry *best = NULL;
    double best_v = 0;
    for (int i = 0; i < s->n_e; i++) {
        cs_entry *e = s->e[i];
        if (e->pins || !(disk ? e->on_disk : e->in_ram)) continue;
        double v = score(s, e, disk);
        if (!best || v < best_v) best = e, best_v = v;
    }
    return best;
}

static void enforce_ram(ckpt_store *s) {
    while (s->ram_bytes > s->ram_budget) {
        cs_entry *e = victim(s, 0);
        if (!e) break;
        if (e->dirty && s->db) cs_flush(s); /* keep it in the database rather than lose it */
        s->st.evictions_ram++;
        if (e->on_disk) {
            ram_off(s, e);
        } else {
            remember_evicted(s, e);
            drop_entry(s, e);
        }
    }
}

static void enforce_disk(ckpt_store *s) {
    if (!s->db || s->disk_bytes <= s->disk_budget) return;
    cs_sql_begin(s);
    while (s->db && s->disk_bytes > s->disk_budget) {
        cs_entry *e = victim(s, 1);
        if (!e) break;
        s->st.evictions_disk++;
        if (e->in_ram) {
            cs_disk_drop(s, e);
            e->dirty = 0; /* stays in RAM only; it will not be written again */
        } else {
            remember_evicted(s, e);
            drop_entry(s, e);
        }
    }
    if (s->db) cs_sql_end(s, 1);
}

/* ------------------------------------------------------------------ open/close */

ckpt_store *cs_new(store_db *db, const cs_config *c, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    ckpt_store *s = calloc(1, sizeof *s);
    if (!s) {
        if (err) snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->ram_budget = c ? c->ram_budget : CS_DEFAULT_RAM_BUDGET;
    s->disk_budget = c ? c->disk_budget : CS_DEFAULT_DISK_BUDGET;
    s->P = c && c->page_tokens > 0 ? c->page_tokens : CS_DEFAULT_PAGE_TOKENS;
    s->db = s->disk_budget ? db : NULL; /* a disk budget of 0: none in the database */
    if (s->db && cs_sql_migrate(s, err, errlen) != 0) { /* a newer schema; an unusable one leaves RAM only */
        free(s);
        return NULL;
    }
    return s;
}

int cs_attach(ckpt_store *s, const cs_model *m, char *err, size_t errlen) {
    if (m->fp_len == 0 || m->fp_len > sizeof s->fp || s->m.fp_len) {
        if (err) snprintf(err, errlen, s->m.fp_len ? "the checkpoint store has a model already" : "bad model fingerprint");
        return -1;
    }
    s->m = *m;
    memcpy(s->fp, m->fingerprint, m->fp_len);
    s->m.fingerprint = s->fp;
    snprintf(s->name, sizeof s->name, "%s", m->name ? m->name : "");
    s->m.name = s->name;
    s->seed = hash64(s->fp, m->fp_len, 0x63686174667321ULL);
    if (s->db) cs_sql_open(s, err, errlen); /* unreadable: RAM only, err says why */
    return 0;
}

ckpt_store *cs_open(store_db *db, const cs_model *m, const cs_config *c, char *err, size_t errlen) {
    ckpt_store *s = cs_new(db, c, err, errlen);
    if (s && cs_attach(s, m, err, errlen) != 0) {
        cs_close(s);
        return NULL;
    }
    return s;
}

void cs_close(ckpt_store *s) {
    if (!s) return;
    if (s->db) cs_flush(s);
    for (int i = 0; i < s->n_e; i++) {
        free(s->e[i]->rec);
        free(s->e[i]->logits);
        free(s->e[i]->session);
        free(s->e[i]);
    }
    free(s->e);
    for (int i = 0; i < (1 << CS_HBITS); i++)
        for (cs_page *p = s->table[i], *nx; p; p = nx) {
            nx = p->hnext;
            free(p->kv);
            free(p->tokens);
            free(p);
        }
    free(s);
}

uint64_t cs_seed(const ckpt_store *s) { return s->seed; }
int cs_page_tokens(const ckpt_store *s) { return s->P; }
int cs_persistent(const ckpt_store *s) { return s->db != NULL; }

/* RAM copies of pages that no RAM entry references (left by a failed save or promotion) go. */
static void free_unreferenced_kv(ckpt_store *s) {
    for (int i = 0; i < (1 << CS_HBITS); i++)
        for (cs_page *p = s->table[i]; p; p = p->hnext)
            if (p->kv && p->ram_refs == 0) {
                s->ram_bytes -= cs_page_bytes(s, p);
                free(p->kv);
                p->kv = NULL;
            }
}

/* ------------------------------------------------------------------ lookup */

static cs_entry *entry_at(const ckpt_store *s, uint64_t hash, int n) {
    for (int i = 0; i < s->n_e; i++)
        if (s->e[i]->n == n && s->e[i]->hash == hash) return s->e[i];
    return NULL;
}

int cs_has(const ckpt_store *s, const uint64_t *h, int n) { return entry_at(s, h[n], n) != NULL; }

/* 1 when the entry's tokens are exactly t[0..e->n): hashes can collide, tokens cannot. */
static int tokens_match(const cs_entry *e, const int *t) {
    for (const cs_page *p = e->last; p; p = p->parent) {
        int rows = (p->pos0 + p->n < e->n ? p->pos0 + p->n : e->n) - p->pos0;
        if (memcmp(p->tokens, t + p->pos0, sizeof(int) * (size_t)rows) != 0) return 0;
    }
    return 1;
}

/* How many leading tokens of t[0..n) the page tree holds; *end_page gets the deepest
 * page touched and *rows how much of it matched. */
static int tree_match(const ckpt_store *s, const int *t, int n, cs_page **path, int max_path, int *n_path) {
    int pos = 0;
    *n_path = 0;
    const cs_page *list = s->roots;
    while (pos < n) {
        const cs_page *best = NULL;
        int best_k = 0;
        for (const cs_page *c = list; c; c = c->sibling) {
            int lim = c->n < n - pos ? c->n : n - pos, k = 0;
            while (k < lim && c->tokens[k] == t[pos + k]) k++;
            if (k > best_k) best = c, best_k = k;
        }
        if (!best) break;
        if (path && *n_path < max_path) path[(*n_path)++] = (cs_page *)best;
        pos += best_k;
        if (best_k < best->n) break;
        list = best->child;
    }
    return pos;
}

/* Drops every entry whose chain holds page p (p failed its checksum). */
static void drop_page_users(ckpt_store *s, cs_page *p) {
    cs_sql_begin(s);
    for (int i = 0; i < s->n_e;) {
        cs_entry *e = s->e[i];
        int uses = 0;
        for (cs_page *q = e->last; q && !uses; q = q->parent) uses = q == p;
        if (uses && !e->pins) {
            drop_entry(s, e); /* swaps the last entry into slot i */
            continue;
        }
        i++; /* a pinned user is in use by a running request: it stays */
    }
    if (s->db) cs_sql_end(s, 1);
}

/* Hands one page read from the database to put, and keeps a RAM copy when asked. */
typedef struct {
    ckpt_store *s;
    cs_page *p;
    int rows, keep, put_failed;
    cs_put_rows put;
    void *ud;
} page_use;

static int use_page(void *arg, const void *kv) {
    page_use *u = arg;
    if (u->put(u->ud, u->p->pos0, u->rows, kv) != 0) {
        u->put_failed = 1;
        return -1;
    }
    if (u->keep && !u->p->kv && (u->p->kv = malloc(cs_page_bytes(u->s, u->p) + 1))) {
        memcpy(u->p->kv, kv, cs_page_bytes(u->s, u->p));
        u->s->ram_bytes += cs_page_bytes(u->s, u->p);
    }
    return 0;
}

/* Puts pages' rows [0, upto) of a chain (first page first). A page only in the
 * database is read, verified and put straight from SQLite's buffer; a RAM copy is
 * kept when keep is set. Returns 0, 1 when a page came from the database, -1 with
 * *bad set when a page failed its checks, -2 on other failures. */
static int put_pages(ckpt_store *s, cs_page **chain, int n_chain, int upto, cs_put_rows put, void *ud, int keep,
                     cs_page **bad) {
    int from_disk = 0;
    for (int i = 0; i < n_chain; i++) {
        cs_page *p = chain[i];
        int rows = (p->pos0 + p->n < upto ? p->pos0 + p->n : upto) - p->pos0;
        if (rows <= 0) break;
        if (p->kv) {
            if (put(ud, p->pos0, rows, p->kv) != 0) return -2;
            continue;
        }
        page_use u = {s, p, rows, keep, 0, put, ud};
        if (!s->db || cs_sql_read_page(s, p, use_page, &u) != 0) {
            if (u.put_failed) return -2;
            *bad = p;
            return -1;
        }
        from_disk = 1;
    }
    return from_disk;
}

static int collect_chain(cs_page *last, cs_page ***out) {
    int k = 0;
    for (cs_page *p = last; p; p = p->parent) k++;
    cs_page **c = malloc(sizeof *c * (size_t)(k ? k : 1));
    if (!c) return -1;
    int i = k;
    for (cs_page *p = last; p; p = p->parent) c[--i] = p;
    *out = c;
    return k;
}

/* Restores entry e. 0, or -1 when a blob was corrupt (already dropped), -2 on other
 * failures. */
static int restore_entry(ckpt_store *s, cs_entry *e, cs_put_rows put, void *ud, void *rec, void *logits,
                         int want_logits, int *from_disk) {
    cs_page **chain;
    int k = collect_chain(e->last, &chain);
    if (k < 0) return -2;
    cs_page *bad = NULL;
    int promote = !e->in_ram && cs_entry_own_bytes(s, e) < s->ram_budget / 4;
    int rc = put_pages(s, chain, k, e->n, put, ud, promote, &bad);
    free(chain);
    if (rc == -1 && bad) {
        s->st.corrupt_dropped++;
        e->pins++;
        drop_page_users(s, bad);
        e->pins--;
        drop_entry(s, e);
        return -1;
    }
    if (rc < 0) return -2;
    *from_disk = rc == 1 || !e->in_ram;
    if (e->in_ram) {
        if (s->m.rec_bytes) memcpy(rec, e->rec, s->m.rec_bytes);
        if (want_logits) memcpy(logits, e->logits, s->m.logits_bytes);
    } else {
        void *lg = e->has_logits ? malloc(s->m.logits_bytes) : NULL;
        if (e->has_logits && !lg) return -2;
        if (!s->db || cs_sql_read_entry(s, e, rec, lg) != 0) {
            free(lg);
            s->st.corrupt_dropped++;
            drop_entry(s, e);
            return -1;
        }
        if (want_logits) memcpy(logits, lg, s->m.logits_bytes);
        if (promote) { /* hot again: keep a RAM copy */
            e->rec = s->m.rec_bytes ? malloc(s->m.rec_bytes) : NULL;
            if (!s->m.rec_bytes || e->rec) {
                if (s->m.rec_bytes) memcpy(e->rec, rec, s->m.rec_bytes);
                e->logits = lg;
                lg = NULL;
                int complete = 1;
                for (cs_page *p = e->last; p; p = p->parent) complete &= p->kv != NULL;
                if (complete) ram_on(s, e);
                else {
                    free(e->rec);
                    free(e->logits);
                    e->rec = e->logits = NULL;
                }
            }
        }
        free(lg);
        if (!e->in_ram) free_unreferenced_kv(s);
    }
    return 0;
}

/* Page-only restore for trimmable models: the deepest stored prefix, cut back. */
static int restore_pages(ckpt_store *s, const int *t, int upto, cs_put_rows put, void *ud, int *from_disk,
                         int *corrupt) {
    for (int attempt = 0; attempt < 8; attempt++) { /* a bad page a pinned entry still holds may stay */
        cs_page *path[4096];
        int np, L = tree_match(s, t, upto, path, 4096, &np);
        if (L == 0) return 0;
        int covered = 0;
        for (int i = 0; i < np; i++) covered = path[i]->pos0 + path[i]->n;
        if (covered < L) L = covered;
        cs_page *bad = NULL;
        int rc = put_pages(s, path, np, L, put, ud, 0, &bad);
        if (rc == -1 && bad) {
            *corrupt = 1;
            s->st.corrupt_dropped++;
            drop_page_users(s, bad);
            continue;
        }
        if (rc < 0) return 0;
        *from_disk = rc == 1;
        return L;
    }
    return 0;
}

static void set_miss(ckpt_store *s, cs_hit *hit, const int *t, const uint64_t *h, int n, int corrupt) {
    int stored = 0;
    for (int i = 0; i < s->n_e; i++) stored += 1;
    int evicted = 0;
    int ring = s->n_evicted < CS_EVICTED_RING ? s->n_evicted : CS_EVICTED_RING;
    for (int i = 0; i < ring && !evicted; i++)
        evicted = s->evicted[i].n <= n && s->evicted[i].n > 0 && h[s->evicted[i].n] == s->evicted[i].hash;
    int np, D = tree_match(s, t, n, NULL, 0, &np);
    s->st.misses++;
    if (corrupt) {
        snprintf(hit->miss_reason, sizeof hit->miss_reason, "corrupt");
        s->st.miss_corrupt++;
    } else if (evicted) {
        snprintf(hit->miss_reason, sizeof hit->miss_reason, "evicted");
        s->st.miss_evicted++;
    } else if (!stored && s->fp_mismatch) {
        snprintf(hit->miss_reason, sizeof hit->miss_reason, "fingerprint mismatch");
        s->st.miss_fingerprint++;
    } else if (D > 0) {
        snprintf(hit->miss_reason, sizeof hit->miss_reason, "diverged at position %d", D);
        s->st.miss_diverged++;
    } else {
        snprintf(hit->miss_reason, sizeof hit->miss_reason, "none stored");
        s->st.miss_none++;
    }
}

int cs_restore(ckpt_store *s, const int *t, const uint64_t *h, int n, cs_put_rows put, void *ud, void *rec,
               void *logits, cs_hit *hit) {
    memset(hit, 0, sizeof *hit);
    hit->source = "none";
    cs_db_lost_cleanup(s);
    int corrupt = 0;
    for (int attempt = 0; attempt < 64; attempt++) { /* each failed attempt drops an entry */
        cs_entry *best = NULL;
        for (int i = 0; i < s->n_e; i++) {
            cs_entry *e = s->e[i];
            if (e->n > n || (e->n == n && !(logits && e->has_logits))) continue;
            if (best && e->n <= best->n) continue;
            if (h[e->n] != e->hash || !tokens_match(e, t)) continue;
            best = e;
        }
        /* an attention-only model may cut a longer stored prefix back */
        if (s->m.trimmable && (!best || best->n < n)) {
            int np, L = tree_match(s, t, n - 1, NULL, 0, &np);
            if (L > 0 && (!best || L > best->n)) {
                int from_disk = 0;
                int got = restore_pages(s, t, n - 1, put, ud, &from_disk, &corrupt);
                if (got > 0) {
                    hit->n = got;
                    hit->source = from_disk ? "disk" : "ram";
                    break;
                }
                if (!corrupt) break;
                continue;
            }
        }
        if (!best) break;
        best->pins++;
        int from_disk = 0, want = best->n == n;
        int rc = restore_entry(s, best, put, ud, rec, logits, want, &from_disk);
        if (rc == -1) { /* dropped; try the next one (put starts again at 0) */
            corrupt = 1;
            continue;
        }
        if (rc < 0) {
            best->pins--;
            break;
        }
        best->last_used = ++s->clock;
        best->touched = 1;
        hit->n = best->n;
        hit->has_logits = want;
        hit->entry = best;
        hit->source = from_disk ? "disk" : "ram";
        break;
    }
    free_unreferenced_kv(s); /* copies read for a restore that failed or was not promoted */
    if (hit->n > 0) {
        s->st.hits++;
        if (!strcmp(hit->source, "ram")) s->st.hits_ram++;
        else s->st.hits_disk++;
        enforce_ram(s);
    } else {
        set_miss(s, hit, t, h, n, corrupt);
    }
    return hit->n;
}

void cs_release(ckpt_store *s, cs_hit *hit) {
    cs_entry *e = hit->entry;
    if (e && e->pins > 0) e->pins--;
    hit->entry = NULL;
}

/* ------------------------------------------------------------------ save */

int cs_save(ckpt_store *s, const int *t, const uint64_t *h, int n, cs_get_rows get, void *ud, const void *rec,
            const void *logits, int kind, const char *session) {
    if (n <= 0) return -1;
    cs_db_lost_cleanup(s);
    cs_entry *old = entry_at(s, h[n], n);
    if (old && tokens_match(old, t)) {
        old->last_used = ++s->clock;
        old->touched = 1;
        return 0;
    }
    if (old) return -1; /* a 64-bit collision: never store a second state under one key */
    /* larger than the RAM budget: only when the database takes it (then at once) */
    if (!s->db && cs_entry_own_bytes(s, &(cs_entry){.has_logits = logits != NULL}) > s->ram_budget) return -1;

    /* walk (and extend) the page tree along t[0..n) */
    cs_page *parent = NULL, *last = NULL, *created = NULL;
    int pos = 0;
    while (pos < n) {
        cs_page *found = NULL, *partial = NULL;
        for (cs_page *c = parent ? parent->child : s->roots; c; c = c->sibling) {
            if (c->n <= n - pos) {
                if (!memcmp(c->tokens, t + pos, sizeof(int) * (size_t)c->n)) {
                    found = c;
                    break;
                }
            } else if (c->kv && !memcmp(c->tokens, t + pos, sizeof(int) * (size_t)(n - pos))) {
                partial = c; /* ends past n: usable as the last page, rows before n are the same */
            }
        }
        if (found) {
            if (!found->kv) { /* only in the database: take the rows from the live state */
                found->kv = malloc(cs_page_bytes(s, found) + 1);
                if (!found->kv) goto fail;
                get(ud, found->pos0, found->n, found->kv);
                s->ram_bytes += cs_page_bytes(s, found);
            }
            parent = found;
            pos += found->n;
            continue;
        }
        if (partial) {
            last = partial;
            pos = n;
            break;
        }
        int end = (pos / s->P + 1) * s->P;
        if (end > n) end = n;
        if (cs_page_find(s, h[end])) goto fail; /* collision */
        cs_page *p = cs_page_add(s, h[end], h[pos], pos, end - pos, t + pos);
        if (!p) goto fail;
        created = p;
        p->kv = malloc(cs_page_bytes(s, p) + 1);
        if (!p->kv) goto fail;
        get(ud, pos, end - pos, p->kv);
        s->ram_bytes += cs_page_bytes(s, p);
        p->checksum = cs_page_checksum(s, p, p->kv);
        parent = p;
        pos = end;
    }
    if (!last) last = parent;
    cs_entry *e = cs_entry_add(s, h[n], n, last, kind, session);
    if (!e) goto fail;
    e->has_logits = logits != NULL;
    if (s->m.rec_bytes) e->rec = malloc(s->m.rec_bytes);
    if (logits) e->logits = malloc(s->m.logits_bytes);
    if ((s->m.rec_bytes && !e->rec) || (logits && !e->logits)) {
        cs_entry_free(s, e);
        goto fail;
    }
    if (s->m.rec_bytes) memcpy(e->rec, rec, s->m.rec_bytes);
    if (logits) memcpy(e->logits, logits, s->m.logits_bytes);
    e->dirty = 1;
    ram_on(s, e);
    s->st.saves++;
    e->pins++; /* not evicted by its own arrival */
    enforce_ram(s);
    e->pins--;
    if (s->db && s->ram_bytes > s->ram_budget) enforce_ram(s); /* over the budget by itself: to the database now */
    return 1;
fail:
    /* pages the failed save created, and RAM copies nobody references, go */
    free_unreferenced_kv(s);
    if (created) cs_page_maybe_free(s, created);
    return -1;
}

/* ------------------------------------------------------------------ flush, sessions */

int cs_flush_until(ckpt_store *s, int (*stop)(void *ud), void *ud) {
    if (!s->db) return -1;
    int rc = cs_sql_flush(s, stop, ud);
    s->st.flushes++;
    if (rc < 0) {
        s->st.write_errors++;
        return -1;
    }
    enforce_disk(s);
    cs_db_lost_cleanup(s);
    return rc;
}

int cs_flush(ckpt_store *s) { return cs_flush_until(s, NULL, NULL) < 0 ? -1 : 0; }

void cs_forget_session(ckpt_store *s, const char *session) {
    for (int i = 0; i < s->n_e; i++)
        if (cs_placed_by(s->e[i], session)) s->e[i]->forgotten = 1;
}

void cs_retire(ckpt_store *s, const uint64_t *h, int n, const char *session, const char *kinds) {
    if (!session || !kinds) return;
    cs_db_lost_cleanup(s);
    int in_txn = 0;
    for (int i = 0; i < s->n_e;) {
        cs_entry *e = s->e[i];
        /* on this prefix: the chain hash at its length is the prompt's (a collision only
         * costs a checkpoint, never a wrong restore) */
        if (e->n >= n || e->pins || !cs_placed_by(e, session) || !strchr(kinds, e->kind) || e->hash != h[e->n]) {
            i++;
            continue;
        }
        if (e->on_disk && s->db && !in_txn) in_txn = cs_sql_begin(s) == 0;
        s->st.retired++;
        drop_entry(s, e); /* moves the last entry into slot i */
    }
    if (in_txn && s->db) cs_sql_end(s, 1);
}
