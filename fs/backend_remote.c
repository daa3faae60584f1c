/* backend_remote.c - the filesystem's engine table over an OpenAI-compatible server
 * (see backend.h): each request is one streamed POST to URL/chat/completions.
 *
 * One worker thread drives every transfer through libcurl's multi interface: up to
 * max_batch requests in flight, the rest queued (status `queued`). The callbacks run on
 * that thread, from libcurl's write callback; nothing here ever runs on the caller's
 * thread but queueing, so a slow or silent server holds no FUSE thread. cancel marks
 * the request and wakes the worker (curl_multi_wakeup), which drops the transfer: the
 * connection closes, and the server stops generating.
 *
 * The API key is read once from its file and lives only in the Authorization header
 * and in memory; every text that leaves this file (errors, stats) shows the URL
 * without user or password, and any error text the server sends back has the key
 * blanked out in case it echoes it. https uses libcurl's default CA bundle (the
 * system's certificates); CURL_CA_BUNDLE in the environment names another, as for the
 * curl tool. */
#include <curl/curl.h>
#include <errno.h>
#include <cjson/cJSON.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/backend.h"
#include "fs/remote_api.h"
#include "engine/vision/image.h"

#define ERRBODY_MAX 65536       /* kept of a non-2xx answer: its error message */
#define CONNECT_TIMEOUT_MS 10000
#define MODELS_TIMEOUT_MS 30000

typedef struct rjob {
    struct rjob *next; /* in the queue */
    uint64_t id;
    int cancelled;     /* under mu */
    int constrained;   /* sent a grammar or a response_format */
    char *body;        /* the request */
    /* the worker's alone from here */
    CURL *easy;
    remote_stream st;
    long http;                 /* the answer's status, once its headers came */
    char *errbody;             /* the body of a non-2xx answer */
    size_t errbody_len;
    char curl_err[CURL_ERROR_SIZE];
} rjob;

typedef struct {
    fs_backend base;
    char *url;         /* the API's base, without a trailing / */
    char *shown_url;   /* the same without user and password: for messages and stats */
    char *model;
    char *key;         /* NULL: none */
    struct curl_slist *headers;
    int dialect, n_ctx, max_batch;
    CURLM *multi;
    pthread_t thread;
    pthread_mutex_t mu;
    rjob *head, *tail;  /* waiting for a slot */
    rjob **active;      /* in flight (max_batch of them) */
    int n_active;
    uint64_t next_id;
    int stop;
    /* counters for stats.json */
    uint64_t n_requests, n_replies, n_failed, n_cancelled, n_prompt, n_cached, n_completion;
} remote;

/* Blanks every occurrence of the API key in s (in case a server quotes it back). */
static void redact(const remote *r, char *s) {
    if (!r->key || !r->key[0]) return;
    size_t k = strlen(r->key);
    for (char *p = strstr(s, r->key); p; p = strstr(p + 3, r->key)) {
        memset(p, '*', 3);
        memmove(p + 3, p + k, strlen(p + k) + 1);
    }
}

static void free_job(rjob *j) {
    if (!j) return;
    remote_stream_free(&j->st);
    free(j->body);
    free(j->errbody);
    free(j);
}

/* ---- one transfer ---- */

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud) {
    rjob *j = ud;
    size_t n = size * nmemb;
    if (!j->http) curl_easy_getinfo(j->easy, CURLINFO_RESPONSE_CODE, &j->http);
    if (j->http < 200 || j->http >= 300) { /* an error answer: keep its start for the message */
        size_t take = j->errbody_len + n > ERRBODY_MAX ? ERRBODY_MAX - j->errbody_len : n;
        char *b = take ? realloc(j->errbody, j->errbody_len + take + 1) : j->errbody;
        if (b) {
            memcpy(b + j->errbody_len, ptr, take);
            j->errbody_len += take;
            b[j->errbody_len] = 0;
            j->errbody = b;
        }
        return n;
    }
    return remote_stream_feed(&j->st, ptr, n) == 0 ? n : 0; /* 0 aborts the transfer */
}

static CURL *new_easy(remote *r, const char *path, char *errbuf) {
    CURL *e = curl_easy_init();
    if (!e) return NULL;
    char url[4096];
    snprintf(url, sizeof url, "%s%s", r->url, path);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)CONNECT_TIMEOUT_MS);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_USERAGENT, "chatfs");
    const char *ca = getenv("CURL_CA_BUNDLE");
    if (ca && *ca) curl_easy_setopt(e, CURLOPT_CAINFO, ca);
    errbuf[0] = 0;
    return e;
}

/* Starts j's transfer; with r->mu held. 0, or -1 with the reason in j->st.fail. */
static int start_job(remote *r, rjob *j) {
    j->easy = new_easy(r, "/chat/completions", j->curl_err);
    if (!j->easy) {
        snprintf(j->st.fail, sizeof j->st.fail, "cannot start an HTTP request (out of memory)");
        return -1;
    }
    curl_easy_setopt(j->easy, CURLOPT_POSTFIELDS, j->body);
    curl_easy_setopt(j->easy, CURLOPT_POSTFIELDSIZE, (long)strlen(j->body));
    curl_easy_setopt(j->easy, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(j->easy, CURLOPT_WRITEDATA, j);
    curl_easy_setopt(j->easy, CURLOPT_PRIVATE, j);
    if (curl_multi_add_handle(r->multi, j->easy) != CURLM_OK) {
        curl_easy_cleanup(j->easy);
        j->easy = NULL;
        snprintf(j->st.fail, sizeof j->st.fail, "cannot start an HTTP request");
        return -1;
    }
    r->active[r->n_active++] = j;
    return 0;
}

/* Why j's finished transfer failed, into err; "" when it did not. */
static void transfer_error(remote *r, rjob *j, CURLcode rc, char *err, size_t errlen) {
    err[0] = 0;
    const char *detail = j->curl_err[0] ? j->curl_err : curl_easy_strerror(rc);
    int got = j->st.rep.generated_tokens;
    if (j->http && (j->http < 200 || j->http >= 300)) {
        char msg[400];
        remote_error_message(j->errbody, j->errbody_len, msg, sizeof msg);
        snprintf(err, errlen, "the server answered HTTP %ld: %s", j->http, msg[0] ? msg : "(no message)");
    } else if (j->st.fail[0]) {
        snprintf(err, errlen, "%s", j->st.fail);
    } else if (rc != CURLE_OK && !j->http) {
        snprintf(err, errlen, "cannot reach the server at %s: %s", r->shown_url, detail);
    } else if (rc != CURLE_OK) {
        snprintf(err, errlen, "the connection to the server broke after %d tokens: %s", got, detail);
    } else if (!j->st.ended && j->st.finish == FINISH_NONE) {
        snprintf(err, errlen, "the server closed the connection after %d tokens without ending the reply", got);
    }
    redact(r, err);
}

/* Ends j: on_done exactly once. Without r->mu. */
static void finish_job(remote *r, rjob *j, int cancelled, const char *error) {
    gen_report *rep = &j->st.rep;
    if (error && !cancelled) {
        rep->phase = GEN_FAILED;
        rep->finish = FINISH_ERROR;
    } else {
        rep->phase = GEN_DONE;
        rep->finish = cancelled ? FINISH_CANCELLED : j->st.finish ? j->st.finish : FINISH_EOG;
        /* the server followed the format until it was cut: a reply that stopped otherwise than
         * by its end cannot be a whole sentence of it */
        rep->grammar_incomplete = j->constrained && (rep->finish == FINISH_LENGTH || rep->finish == FINISH_CONTEXT);
        error = NULL;
    }
    pthread_mutex_lock(&r->mu);
    if (cancelled) r->n_cancelled++;
    else if (error) r->n_failed++;
    else r->n_replies++;
    if (rep->prompt_tokens > 0) r->n_prompt += (uint64_t)rep->prompt_tokens;
    r->n_cached += (uint64_t)rep->reused_tokens;
    r->n_completion += (uint64_t)rep->generated_tokens;
    pthread_mutex_unlock(&r->mu);
    j->st.cb.on_done(j->st.cb.ud, rep, error);
    free_job(j);
}

/* Removes j from the active list and from the multi handle; with r->mu held. */
static void drop_active(remote *r, rjob *j) {
    for (int i = 0; i < r->n_active; i++)
        if (r->active[i] == j) {
            r->active[i] = r->active[--r->n_active];
            break;
        }
    curl_multi_remove_handle(r->multi, j->easy);
    curl_easy_cleanup(j->easy);
    j->easy = NULL;
}

/* ---- the worker ---- */

static void *worker(void *arg) {
    remote *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        /* cancelled requests, queued or in flight, end now */
        rjob *ended = NULL; /* a list through next */
        for (rjob **pp = &r->head; *pp;) {
            rjob *j = *pp;
            if (!j->cancelled && !r->stop) {
                pp = &j->next;
                continue;
            }
            *pp = j->next;
            j->next = ended;
            ended = j;
        }
        r->tail = NULL; /* the queue's last, which the scan may have taken out */
        for (rjob *q = r->head; q; q = q->next) r->tail = q;
        for (int i = r->n_active - 1; i >= 0; i--) {
            rjob *j = r->active[i];
            if (!j->cancelled && !r->stop) continue;
            drop_active(r, j);
            j->next = ended;
            ended = j;
        }
        /* start what the batch has room for */
        rjob *refused = NULL;
        while (r->head && r->n_active < r->max_batch) {
            rjob *j = r->head;
            r->head = j->next;
            if (!r->head) r->tail = NULL;
            if (start_job(r, j) != 0) {
                j->next = refused;
                refused = j;
            }
        }
        int quit = r->stop && !r->head && !r->n_active;
        pthread_mutex_unlock(&r->mu);
        while (ended) {
            rjob *j = ended;
            ended = j->next;
            finish_job(r, j, 1, NULL);
        }
        while (refused) {
            rjob *j = refused;
            refused = j->next;
            finish_job(r, j, 0, j->st.fail);
        }
        if (quit) return NULL;

        /* new transfers report that they are on their way */
        pthread_mutex_lock(&r->mu);
        int n = r->n_active;
        rjob *fresh[n > 0 ? n : 1];
        int n_fresh = 0;
        for (int i = 0; i < n; i++)
            if (r->active[i]->st.rep.phase == GEN_QUEUED) fresh[n_fresh++] = r->active[i];
        pthread_mutex_unlock(&r->mu);
        for (int i = 0; i < n_fresh; i++) remote_stream_sent(&fresh[i]->st);

        int running = 0;
        curl_multi_perform(r->multi, &running); /* the write callbacks, and so on_text, run here */
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(r->multi, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            rjob *j = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&j);
            CURLcode rc = msg->data.result;
            if (!j->http) curl_easy_getinfo(j->easy, CURLINFO_RESPONSE_CODE, &j->http);
            pthread_mutex_lock(&r->mu);
            drop_active(r, j); /* invalidates msg */
            int cancelled = j->cancelled || r->stop;
            pthread_mutex_unlock(&r->mu);
            char err[700];
            transfer_error(r, j, rc, err, sizeof err);
            finish_job(r, j, cancelled, err[0] ? err : NULL);
        }
        curl_multi_poll(r->multi, NULL, 0, 1000, NULL); /* curl_multi_wakeup ends the wait */
        pthread_mutex_lock(&r->mu);
    }
}

/* ---- the table ---- */

static uint64_t rem_submit(fs_backend *b, const chat_msg *msgs, int n, const gen_settings *s, const gen_callbacks *cb,
                           char *err, size_t errlen) {
    remote *r = (remote *)b;
    for (int i = 0; i < n; i++)
        if (strcmp(msgs[i].role, "system") && strcmp(msgs[i].role, "user") && strcmp(msgs[i].role, "assistant")) {
            snprintf(err, errlen, "unknown role '%s'", msgs[i].role);
            return 0;
        }
    if (s && s->grammar && !s->response_format && r->dialect != DIALECT_LLAMACPP) {
        /* only llama-server reads GBNF: another server would answer unconstrained */
        snprintf(err, errlen, "the server takes no GBNF grammar (llama-server does): use response_format");
        errno = EINVAL;
        return 0;
    }
    rjob *j = calloc(1, sizeof *j);
    if (!j || !(j->body = remote_request_json(r->model, msgs, n, s, r->dialect))) {
        free(j);
        snprintf(err, errlen, "out of memory");
        return 0;
    }
    j->constrained = s && (s->grammar || s->response_format);
    remote_stream_init(&j->st, cb, remote_now_ms());
    pthread_mutex_lock(&r->mu);
    if (r->stop) {
        pthread_mutex_unlock(&r->mu);
        free_job(j);
        snprintf(err, errlen, "the remote engine is closing");
        return 0;
    }
    j->id = ++r->next_id;
    r->n_requests++;
    if (r->tail) r->tail->next = j;
    else r->head = j;
    r->tail = j;
    uint64_t id = j->id;
    pthread_mutex_unlock(&r->mu);
    curl_multi_wakeup(r->multi);
    return id;
}

static void rem_cancel(fs_backend *b, uint64_t id) {
    remote *r = (remote *)b;
    pthread_mutex_lock(&r->mu);
    for (rjob *j = r->head; j; j = j->next)
        if (j->id == id) j->cancelled = 1;
    for (int i = 0; i < r->n_active; i++)
        if (r->active[i]->id == id) r->active[i]->cancelled = 1;
    pthread_mutex_unlock(&r->mu);
    curl_multi_wakeup(r->multi);
}

/* The server renders and counts: unknown here (see backend.h). */
static int rem_context(fs_backend *b) {
    (void)b;
    return INT_MAX;
}
static void rem_forget(fs_backend *b, const char *session) { (void)b, (void)session; }

static char *rem_stats(fs_backend *b) {
    remote *r = (remote *)b;
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "url", r->shown_url);
    cJSON_AddStringToObject(o, "model", r->model);
    cJSON_AddStringToObject(o, "server", r->dialect == DIALECT_LLAMACPP ? "llama.cpp" : "openai-compatible");
    if (r->n_ctx > 0) cJSON_AddNumberToObject(o, "server_context", r->n_ctx);
    cJSON_AddNumberToObject(o, "max_in_flight", r->max_batch);
    pthread_mutex_lock(&r->mu);
    int queued = 0;
    for (rjob *j = r->head; j; j = j->next) queued++;
    cJSON_AddNumberToObject(o, "in_flight", r->n_active);
    cJSON_AddNumberToObject(o, "queued", queued);
    cJSON_AddNumberToObject(o, "requests", (double)r->n_requests);
    cJSON_AddNumberToObject(o, "replies", (double)r->n_replies);
    cJSON_AddNumberToObject(o, "failed", (double)r->n_failed);
    cJSON_AddNumberToObject(o, "cancelled", (double)r->n_cancelled);
    cJSON_AddNumberToObject(o, "prompt_tokens", (double)r->n_prompt);
    cJSON_AddNumberToObject(o, "cached_tokens", (double)r->n_cached);
    cJSON_AddNumberToObject(o, "completion_tokens", (double)r->n_completion);
    pthread_mutex_unlock(&r->mu);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static void free_remote(remote *r) {
    if (r->multi) curl_multi_cleanup(r->multi);
    curl_slist_free_all(r->headers);
    if (r->key) memset(r->key, 0, strlen(r->key));
    free(r->key);
    free(r->url);
    free(r->shown_url);
    free(r->model);
    free(r->active);
    free(r);
}

static void rem_close(fs_backend *b) {
    remote *r = (remote *)b;
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    pthread_mutex_unlock(&r->mu);
    curl_multi_wakeup(r->multi);
    pthread_join(r->thread, NULL); /* the worker ends every request, cancelled */
    pthread_mutex_destroy(&r->mu);
    free_remote(r);
}

/* ---- opening ---- */

/* The key: the file's first line that is not blank or a # comment, trimmed. */
static char *read_key(const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot read the API key file %s: %m", path);
        return NULL;
    }
    char line[4096];
    char *key = NULL;
    while (!key && fgets(line, sizeof line, f)) {
        char *s = line, *e = line + strlen(line);
        while (*s == ' ' || *s == '\t') s++;
        while (e > s && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t')) e--;
        *e = 0;
        if (*s && *s != '#') key = strdup(s);
    }
    fclose(f);
    if (!key) snprintf(err, errlen, "the API key file %s holds no key", path);
    else
        for (char *p = key; *p; p++)
            if ((unsigned char)*p < 0x21 || *p == 0x7f) {
                snprintf(err, errlen, "the API key in %s has spaces or control characters", path);
                free(key);
                return NULL;
            }
    return key;
}

/* Checks the URL and makes the copy without user and password. */
static int parse_url(remote *r, const char *url, char *err, size_t errlen) {
    CURLU *u = curl_url();
    char *scheme = NULL, *shown = NULL;
    CURLUcode uc = u ? curl_url_set(u, CURLUPART_URL, url, 0) : CURLUE_OUT_OF_MEMORY;
    if (uc == CURLUE_OK) uc = curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
    int ok = uc == CURLUE_OK && scheme && (!strcmp(scheme, "http") || !strcmp(scheme, "https"));
    if (uc != CURLUE_OK) snprintf(err, errlen, "--engine %s is not a URL: %s", url, curl_url_strerror(uc));
    else if (!ok) snprintf(err, errlen, "--engine needs an http:// or https:// URL, not %s://", scheme);
    if (ok) {
        curl_url_set(u, CURLUPART_USER, NULL, 0);
        curl_url_set(u, CURLUPART_PASSWORD, NULL, 0);
        ok = curl_url_get(u, CURLUPART_URL, &shown, 0) == CURLUE_OK && (r->shown_url = strdup(shown));
        if (!ok) snprintf(err, errlen, "out of memory");
    }
    if (ok && (r->url = strdup(url))) {
        size_t n = strlen(r->url);
        while (n > 0 && r->url[n - 1] == '/') r->url[--n] = 0;
        n = strlen(r->shown_url);
        while (n > 0 && r->shown_url[n - 1] == '/') r->shown_url[--n] = 0;
    } else if (ok) {
        snprintf(err, errlen, "out of memory");
        ok = 0;
    }
    curl_free(scheme);
    curl_free(shown);
    curl_url_cleanup(u);
    return ok ? 0 : -1;
}

static size_t collect(char *ptr, size_t size, size_t nmemb, void *ud) {
    char **buf = ud;
    size_t n = size * nmemb, have = *buf ? strlen(*buf) : 0;
    if (have + n > (16u << 20)) return 0; /* a models list is not this long */
    char *b = realloc(*buf, have + n + 1);
    if (!b) return 0;
    memcpy(b + have, ptr, n);
    b[have + n] = 0;
    *buf = b;
    return n;
}

/* GET URL/models: reachable, key accepted, the model there; picks the default. */
static int ask_models(remote *r, const char *want, char *err, size_t errlen) {
    char curl_err[CURL_ERROR_SIZE];
    CURL *e = new_easy(r, "/models", curl_err);
    if (!e) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    char *body = NULL;
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)MODELS_TIMEOUT_MS);
    CURLcode rc = curl_easy_perform(e);
    long http = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &http);
    curl_easy_cleanup(e);
    int ret = -1;
    char **ids = NULL;
    int n = 0;
    if (rc != CURLE_OK) {
        snprintf(err, errlen, "cannot reach the server at %s: %s", r->shown_url, curl_err[0] ? curl_err : curl_easy_strerror(rc));
    } else if (http < 200 || http >= 300) {
        char msg[400];
        remote_error_message(body, body ? strlen(body) : 0, msg, sizeof msg);
        size_t ul = strlen(r->shown_url);
        int v1 = ul >= 3 && !strcmp(r->shown_url + ul - 3, "/v1");
        snprintf(err, errlen, "%s/models answered HTTP %ld: %s%s", r->shown_url, http, msg[0] ? msg : "(no message)",
                 http == 404 && !v1 ? " (does the URL need /v1 at its end?)" : "");
    } else if (remote_parse_models(body ? body : "", body ? strlen(body) : 0, &ids, &n, &r->dialect, &r->n_ctx, err,
                                   errlen) != 0) {
        char tmp[300];
        snprintf(tmp, sizeof tmp, "%s", err);
        snprintf(err, errlen, "%s/models: %s", r->shown_url, tmp);
    } else if (!want && n == 0) {
        snprintf(err, errlen, "the server at %s lists no models; name one with --model", r->shown_url);
    } else {
        int found = !want;
        for (int i = 0; want && i < n; i++) found |= !strcmp(ids[i], want);
        if (!found) {
            char list[512] = "";
            for (int i = 0; i < n && strlen(list) < 400; i++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", ids[i]);
            snprintf(err, errlen, "the server at %s has no model '%s' (it lists: %s)", r->shown_url, want,
                     n ? list : "none");
        } else if ((r->model = strdup(want ? want : ids[0]))) {
            ret = 0;
        } else {
            snprintf(err, errlen, "out of memory");
        }
    }
    remote_models_free(ids, n);
    free(body);
    redact(r, err);
    return ret;
}

/* libcurl's global state: once per process, before any thread uses it */
static void init_curl(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

/* An image goes to the server as an image_url part: decoded here first with the decoder
 * llama-server uses (stb_image), so that a file it would refuse is refused at the close;
 * whether the server takes images at all (llama-server: --mmproj) it says when asked. */
static int rem_check_image(fs_backend *b, const void *bytes, size_t len, char *err, size_t errlen) {
    (void)b;
    return bytes ? image_check(bytes, len, err, errlen) : 0;
}

fs_backend *backend_remote_open(const remote_config *cfg, char *err, size_t errlen) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, init_curl);
    remote *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    r->max_batch = cfg->max_batch > 0 ? cfg->max_batch : 8;
    if (!cfg->url || parse_url(r, cfg->url, err, errlen) != 0) {
        if (!cfg->url) snprintf(err, errlen, "no engine URL");
        free_remote(r);
        return NULL;
    }
    if (cfg->api_key_file && !(r->key = read_key(cfg->api_key_file, err, errlen))) {
        free_remote(r);
        return NULL;
    }
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    if (h) h = curl_slist_append(h, "Accept: text/event-stream, application/json");
    if (h) h = curl_slist_append(h, "Expect:"); /* a long conversation goes at once, not after a 100 Continue */
    if (h && r->key) {
        size_t n = strlen(r->key) + 32;
        char *auth = malloc(n);
        struct curl_slist *h2 = auth ? (snprintf(auth, n, "Authorization: Bearer %s", r->key), curl_slist_append(h, auth))
                                     : NULL;
        if (auth) memset(auth, 0, n);
        free(auth);
        if (!h2) curl_slist_free_all(h);
        h = h2;
    }
    r->headers = h;
    r->active = calloc((size_t)r->max_batch, sizeof *r->active);
    r->multi = curl_multi_init();
    if (!h || !r->active || !r->multi) {
        snprintf(err, errlen, "out of memory");
        free_remote(r);
        return NULL;
    }
    if (ask_models(r, cfg->model, err, errlen) != 0) {
        free_remote(r);
        return NULL;
    }
    r->base = (fs_backend){.ctx = r,
                           .name = "remote",
                           .submit = rem_submit,
                           .cancel = rem_cancel,
                           .count_tokens = NULL, /* the server counts */
                           .check_render = NULL, /* and renders */
                           .context = rem_context,
                           .forget_session = rem_forget,
                           .stats_json = rem_stats,
                           .close = rem_close,
                           .settings_defaults = NULL, /* today's defaults: the server's are not ours to know */
                           .can_think = NULL,         /* the server's template decides */
                           .check_image = rem_check_image};
    pthread_mutex_init(&r->mu, NULL);
    if (pthread_create(&r->thread, NULL, worker, r) != 0) {
        snprintf(err, errlen, "cannot start the remote engine's thread");
        pthread_mutex_destroy(&r->mu);
        free_remote(r);
        return NULL;
    }
    return &r->base;
}
