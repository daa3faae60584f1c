/* ckpt_stats.c - what the checkpoint store holds and has done: the counters, their JSON
 * for stats.json, and one session's share (usage.json). Separate from ckpt_store.c,
 * which changes the index: everything here only counts. */
#include <cjson/cJSON.h>
#include <string.h>

#include "store/ckpt_impl.h"

/* a page's bytes in one tier once per session: the walk up a chain stops at a page
 * already counted (mark: the session's walk number in the page) */
static uint64_t chain_bytes(ckpt_store *s, cs_page *p, int disk, uint64_t mark) {
    uint64_t bytes = 0;
    for (; p && p->usage_mark != mark; p = p->parent) {
        p->usage_mark = mark;
        if (disk ? p->on_disk == 1 : p->kv != NULL) bytes += cs_page_bytes(s, p);
    }
    return bytes;
}

void cs_session_usage(ckpt_store *s, const char *session, cs_usage *out) {
    memset(out, 0, sizeof *out);
    for (int disk = 0; disk < 2; disk++) { /* a tier at a time: a walk's marks must stand */
        uint64_t mark = ++s->usage_walk;  /* never 0, a new page's */
        for (int i = 0; i < s->n_e; i++) {
            const cs_entry *e = s->e[i];
            if (!cs_placed_by(e, session) || !(disk ? e->on_disk : e->in_ram)) continue;
            if (e->n > out->longest) out->longest = e->n;
            uint64_t bytes = cs_entry_own_bytes(s, e) + chain_bytes(s, e->last, disk, mark);
            if (disk) out->states_disk++, out->bytes_disk += bytes;
            else out->states_ram++, out->bytes_ram += bytes;
        }
    }
}

void cs_note_request(ckpt_store *s, int prompt_tokens, int reused, int computed) {
    s->st.tokens_prompt += (uint64_t)prompt_tokens;
    s->st.tokens_reused += (uint64_t)reused;
    s->st.tokens_computed += (uint64_t)computed;
}

void cs_count_miss(ckpt_store *s, const char *reason) {
    s->st.misses++;
    if (reason && !strcmp(reason, "disabled")) s->st.miss_disabled++;
}

void cs_get_stats(const ckpt_store *s, cs_stats *out) {
    *out = s->st;
    out->entries_ram = out->entries_disk = out->pages_ram = out->pages_disk = out->entries_pending = 0;
    out->kv_bytes_disk = out->rec_bytes_disk = 0;
    for (int i = 0; i < s->n_e; i++) {
        out->entries_ram += s->e[i]->in_ram;
        out->entries_disk += s->e[i]->on_disk;
        out->entries_pending += s->db && s->e[i]->in_ram && s->e[i]->dirty;
        if (s->e[i]->on_disk) out->rec_bytes_disk += cs_entry_own_bytes(s, s->e[i]);
    }
    for (int i = 0; i < (1 << CS_HBITS); i++)
        for (cs_page *p = s->table[i]; p; p = p->hnext) {
            out->pages_ram += p->kv != NULL;
            out->pages_disk += p->on_disk == 1;
            if (p->on_disk == 1) out->kv_bytes_disk += cs_page_bytes(s, p);
        }
    out->bytes_ram = s->ram_bytes;
    out->bytes_disk = s->disk_bytes;
}

char *cs_stats_json(const ckpt_store *s) {
    cs_stats st;
    cs_get_stats(s, &st);
    cJSON *o = cJSON_CreateObject(), *miss = cJSON_CreateObject(), *ram = cJSON_CreateObject(),
          *disk = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "hits", (double)st.hits);
    cJSON_AddNumberToObject(o, "hits_ram", (double)st.hits_ram);
    cJSON_AddNumberToObject(o, "hits_disk", (double)st.hits_disk);
    cJSON_AddNumberToObject(o, "misses", (double)st.misses);
    /* of the lookups, those that restored something; of the prompt tokens, those restored */
    cJSON_AddNumberToObject(o, "hit_rate", st.hits + st.misses ? (double)st.hits / (double)(st.hits + st.misses) : 0);
    cJSON_AddNumberToObject(miss, "none_stored", (double)st.miss_none);
    cJSON_AddNumberToObject(miss, "diverged", (double)st.miss_diverged);
    cJSON_AddNumberToObject(miss, "evicted", (double)st.miss_evicted);
    cJSON_AddNumberToObject(miss, "fingerprint_mismatch", (double)st.miss_fingerprint);
    cJSON_AddNumberToObject(miss, "corrupt", (double)st.miss_corrupt);
    cJSON_AddNumberToObject(miss, "disabled", (double)st.miss_disabled);
    cJSON_AddItemToObject(o, "misses_by_reason", miss);
    cJSON_AddNumberToObject(o, "tokens_prompt", (double)st.tokens_prompt);
    cJSON_AddNumberToObject(o, "tokens_reused", (double)st.tokens_reused);
    cJSON_AddNumberToObject(o, "tokens_computed", (double)st.tokens_computed);
    cJSON_AddNumberToObject(o, "token_reuse_rate",
                            st.tokens_prompt ? (double)st.tokens_reused / (double)st.tokens_prompt : 0);
    cJSON_AddNumberToObject(ram, "entries", (double)st.entries_ram);
    cJSON_AddNumberToObject(ram, "pages", (double)st.pages_ram);
    cJSON_AddNumberToObject(ram, "bytes", (double)st.bytes_ram);
    cJSON_AddNumberToObject(ram, "budget", (double)s->ram_budget);
    cJSON_AddNumberToObject(ram, "evictions", (double)st.evictions_ram);
    cJSON_AddItemToObject(o, "ram", ram);
    cJSON_AddNumberToObject(disk, "entries", (double)st.entries_disk);
    cJSON_AddNumberToObject(disk, "pending", (double)st.entries_pending);
    cJSON_AddNumberToObject(disk, "pages", (double)st.pages_disk);
    cJSON_AddNumberToObject(disk, "bytes", (double)st.bytes_disk);
    cJSON_AddNumberToObject(disk, "kv_bytes", (double)st.kv_bytes_disk);
    cJSON_AddNumberToObject(disk, "state_bytes", (double)st.rec_bytes_disk);
    cJSON_AddNumberToObject(disk, "budget", (double)s->disk_budget);
    cJSON_AddNumberToObject(disk, "evictions", (double)st.evictions_disk);
    cJSON_AddBoolToObject(disk, "enabled", s->db != NULL);
    cJSON_AddItemToObject(o, "disk", disk);
    cJSON_AddNumberToObject(o, "saves", (double)st.saves);
    cJSON_AddNumberToObject(o, "corrupt_dropped", (double)st.corrupt_dropped);
    cJSON_AddNumberToObject(o, "retired", (double)st.retired);
    cJSON_AddNumberToObject(o, "write_errors", (double)st.write_errors);
    char *txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return txt;
}
