/* mount.c - mounting and daemonising (see mount.h). */
#include "fs/mount.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#include "fs/fuse_ops.h"
#include "store/ckpt_store.h"
#include "store/conversations.h"
#include "store/db.h"

/* ---- stopping on a signal ----
 * SIGINT (Ctrl-C on -f), SIGTERM and SIGHUP stop the replies being generated first, while
 * the mount still serves: each is kept as far as it got, and a `cat reply` waiting for
 * tokens reads the end of the reply and exits 0 instead of failing with the mount. Once no
 * file is open (or after STOP_GRACE_MS: a `tail -f` never lets go) the loop ends and the
 * mount goes. A second signal ends it at once. The handler only writes to a pipe (and ends
 * the loop as libfuse's own handler does); the work is the stopper thread's. */
#define STOP_GRACE_MS 3000

static int stop_pipe[2] = {-1, -1};
static struct fuse_session *stop_session;
static volatile sig_atomic_t stop_signals;

static void on_stop_signal(int sig) {
    (void)sig;
    if (stop_signals++ > 0) {
        fuse_session_exit(stop_session);
        return;
    }
    const int saved = errno;
    if (write(stop_pipe[1], "s", 1) < 0) { /* the pipe is full: a stop is already pending */
    }
    errno = saved;
}

typedef struct {
    chatfs *fs;
    fsfuse *F;
    struct fuse_session *se;
    pthread_t loop; /* the thread in fuse_session_loop_mt, woken by a signal once it is to end */
} stopper;

static void *stopper_main(void *arg) {
    stopper *st = arg;
    char b;
    while (read(stop_pipe[0], &b, 1) < 0 && errno == EINTR) {
    }
    if (b != 's') return NULL; /* the loop ended by itself (fusermount3 -u) */
    chatfs_stop(st->fs);
    for (int ms = 0; ms < STOP_GRACE_MS && fsfuse_open_files(st->F) > 0 && stop_signals < 2; ms += 20)
        usleep(20 * 1000);
    stop_signals = 2; /* from here a signal ends the loop, as this one does */
    fuse_session_exit(st->se);
    pthread_kill(st->loop, SIGHUP); /* its wait returns EINTR, and it sees the session exited */
    return NULL;
}

static int set_stop_handlers(struct fuse_session *se) {
    if (pipe(stop_pipe) != 0) return -1;
    for (int i = 0; i < 2; i++)
        if (fcntl(stop_pipe[i], F_SETFD, FD_CLOEXEC) != 0) return -1;
    /* only the handler's write must never block; the stopper reads blocking */
    if (fcntl(stop_pipe[1], F_SETFL, O_NONBLOCK) != 0) return -1;
    stop_session = se;
    struct sigaction sa = {0};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    struct sigaction ign = {0};
    ign.sa_handler = SIG_IGN; /* a reader gone mid-reply must not kill the mount */
    sigemptyset(&ign.sa_mask);
    if (sigaction(SIGINT, &sa, NULL) || sigaction(SIGTERM, &sa, NULL) || sigaction(SIGHUP, &sa, NULL) ||
        sigaction(SIGPIPE, &ign, NULL))
        return -1;
    return 0;
}

static void remove_stop_handlers(void) {
    struct sigaction dfl = {0};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGINT, &dfl, NULL);
    sigaction(SIGTERM, &dfl, NULL);
    sigaction(SIGHUP, &dfl, NULL);
    for (int i = 0; i < 2; i++)
        if (stop_pipe[i] >= 0) close(stop_pipe[i]), stop_pipe[i] = -1;
}

/* The parent of a daemon waits for one message on this pipe: "\1" and what was mounted
 * when mounted, else the reason, so that `chatfs mount` fails in the terminal when the
 * model or the mountpoint is wrong. (fuse_daemonize cannot do this: it reports before
 * we mount, and the engine's threads must start after the fork.) */
static int ready_fd = -1;

static void report(int ok, const char *msg) {
    if (ready_fd < 0) {
        if (*msg) fprintf(stderr, "chatfs: %s\n", msg);
        return;
    }
    char buf[4096];
    snprintf(buf, sizeof buf, "%s%s", ok ? "\1" : "", msg);
    if (write(ready_fd, buf, strlen(buf) + 1) < 0) { /* the parent is gone: nothing to tell */
    }
    close(ready_fd);
    ready_fd = -1;
}

static int daemonise(void) {
    int p[2];
    if (pipe(p) != 0) {
        perror("chatfs: pipe");
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("chatfs: fork");
        return -1;
    }
    if (pid > 0) { /* the parent: wait for the child's word */
        close(p[1]);
        char msg[4096];
        size_t n = 0;
        ssize_t k;
        while (n < sizeof msg - 1 && (k = read(p[0], msg + n, sizeof msg - 1 - n)) > 0) {
            n += (size_t)k;
            if (memchr(msg, 0, n)) break;
        }
        msg[n] = 0;
        int ok = n > 0 && msg[0] == 1;
        if (n == 0) fprintf(stderr, "chatfs: the daemon exited before mounting\n");
        else if (msg[ok]) fprintf(stderr, "chatfs: %s\n", msg + ok);
        _exit(ok ? 0 : 1);
    }
    close(p[0]);
    ready_fd = p[1];
    setsid();
    return 0;
}

static void detach_stdio(void) {
    int fd = open("/dev/null", O_RDWR);
    if (fd < 0) return;
    dup2(fd, 0);
    dup2(fd, 1);
    dup2(fd, 2);
    if (fd > 2) close(fd);
}

/* The files of a database this mount created, when the mount failed. */
static void remove_db_files(const char *db) {
    static const char *const suffix[] = {"", "-wal", "-shm", "-journal", ".lock"};
    char p[1100];
    for (size_t i = 0; i < sizeof suffix / sizeof *suffix; i++) {
        snprintf(p, sizeof p, "%s%s", db, suffix[i]);
        unlink(p);
    }
}

/* The type of the filesystem mounted at path (the topmost), from /proc/self/mountinfo;
 * "" when path is no mount point. */
static void mount_type(const char *path, char *type, size_t n) {
    type[0] = 0;
    FILE *f = fopen("/proc/self/mountinfo", "r");
    if (!f) return;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        /* id parent major:minor root MOUNTPOINT options ... - TYPE source options */
        char point[2048], *dash = strstr(line, " - ");
        if (!dash || sscanf(line, "%*s %*s %*s %*s %2047s", point) != 1) continue;
        char *o = point; /* \040 and friends: octal escapes */
        for (char *i = point; *i; i++)
            if (i[0] == '\\' && i[1] >= '0' && i[1] <= '3' && i[2] && i[3]) {
                *o++ = (char)((i[1] - '0') * 64 + (i[2] - '0') * 8 + (i[3] - '0'));
                i += 3;
            } else *o++ = *i;
        *o = 0;
        char t[64];
        if (strcmp(point, path) || sscanf(dash + 3, "%63s", t) != 1) continue;
        size_t k = strlen(t) < n ? strlen(t) : n - 1;
        memcpy(type, t, k);
        type[k] = 0;
    }
    fclose(f);
}

/* fusermount3 -u path; 0 when it unmounted */
static int fusermount_u(const char *path) {
    pid_t pid;
    char *argv[] = {"fusermount3", "-u", (char *)path, NULL};
    int status;
    if (posix_spawnp(&pid, "fusermount3", NULL, NULL, argv, environ) != 0) return -1;
    return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* The mountpoint as an absolute path, checked: a directory, not a chatfs mount already;
 * the mount of a chatfs that was killed is cleaned up (as users of sshfs expect). NULL
 * after printing the reason. */
static char *check_mountpoint(const char *arg) {
    char *path = realpath(arg, NULL);
    if (!path) { /* a dead mount cannot be resolved: its directory and name */
        char dir[4096], *slash;
        snprintf(dir, sizeof dir, "%s", arg);
        while ((slash = strrchr(dir, '/')) && slash[1] == 0 && slash != dir) *slash = 0; /* mnt/ */
        slash = strrchr(dir, '/');
        const char *base = slash ? slash + 1 : dir;
        char *parent = realpath(slash ? (slash == dir ? "/" : (*slash = 0, dir)) : ".", NULL);
        if (parent && (path = malloc(strlen(parent) + strlen(base) + 2)))
            sprintf(path, "%s%s%s", parent, strcmp(parent, "/") ? "/" : "", base);
        free(parent);
        if (!path) {
            fprintf(stderr, "chatfs: %s: %s\n", arg, strerror(errno));
            return NULL;
        }
    }
    char type[64];
    mount_type(path, type, sizeof type);
    struct stat st;
    int rc = stat(path, &st), e = errno;
    if (rc != 0 && e == ENOTCONN) {
        if (!strcmp(type, "fuse.chatfs") && fusermount_u(path) == 0) {
            fprintf(stderr, "chatfs: %s: unmounted the mount of a chatfs that is gone (killed?)\n", path);
            mount_type(path, type, sizeof type);
            rc = stat(path, &st), e = errno;
        } else {
            fprintf(stderr, "chatfs: %s: the filesystem mounted here is gone (%s): unmount it with fusermount3 -u %s\n",
                    path, strerror(e), path);
            free(path);
            return NULL;
        }
    }
    if (rc != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "chatfs: %s: %s\n", path, rc ? strerror(e) : "not a directory");
        free(path);
        return NULL;
    }
    if (!strcmp(type, "fuse.chatfs")) {
        fprintf(stderr, "chatfs: %s is a chatfs mount already (fusermount3 -u %s unmounts it)\n", path, path);
        free(path);
        return NULL;
    }
    return path;
}

int chatfs_mount(const mount_opts *o) {
    char *mnt = check_mountpoint(o->mountpoint);
    if (!mnt) return 1;
    int foreground = o->foreground || o->debug;
    if (!foreground && daemonise() != 0) return 1;

    char err[2600], dbpath[1024];
    int rc = 1;
    store_db *database = NULL;
    convs_store *store = NULL;
    ckpt_store *checkpoints = NULL;
    fs_backend *be = NULL;
    chatfs *fs = NULL;
    fsfuse *F = NULL;
    struct fuse_session *se = NULL;
    int lock_fd = -1, new_db = 0;
    FILE *logf = NULL;
    const char *db = o->db ? o->db : db_default_path(dbpath, sizeof dbpath);
    /* one process writes a database: a second mount (or a running chatfs ask) is named */
    char what[1100], owner[1200];
    snprintf(what, sizeof what, "chatfs mount on %s", mnt);
    int lk = db_claim(db, what, 1, &lock_fd, owner, sizeof owner);
    if (lk != 0) {
        if (lk > 0)
            snprintf(err, sizeof err, "%s is in use by %s: one process at a time writes a database (unmount it, or "
                     "pass another --db)", db, owner);
        else snprintf(err, sizeof err, "%s", owner);
        goto fail;
    }
    struct stat dbst;
    new_db = stat(db, &dbst) != 0;
    /* this process opens the database once and hands it to the conversations and the
     * checkpoints (store/db.h) */
    if (!(database = db_open(db, err, sizeof err)) || !(store = convs_open(database, err, sizeof err))) goto fail;
    if (o->fake) be = backend_fake_open(o->fake, err, sizeof err);
    else if (o->engine_url) {
        remote_config rc = {o->engine_url, o->remote_model, o->api_key_file, o->max_batch};
        be = backend_remote_open(&rc, err, sizeof err);
    } else {
        cs_config budgets = {o->ram_budget, o->disk_budget, 0};
        char warn[512] = "";
        if (!(checkpoints = cs_new(database, &budgets, warn, sizeof warn))) {
            snprintf(err, sizeof err, "%s", warn);
            goto fail;
        }
        if (warn[0]) fprintf(stderr, "chatfs: %s\n", warn);
        engine_config cfg = {0};
        cfg.model_path = o->model;
        cfg.checkpoints = cs_port(checkpoints);
        cfg.threads = o->threads;
        cfg.n_ctx = o->n_ctx;
        cfg.cache_type_k = o->cache_type_k;
        cfg.cache_type_v = o->cache_type_v;
        cfg.prefill_chunk = o->prefill_chunk;
        cfg.max_batch = o->max_batch;
        cfg.draft = o->draft;
        cfg.draft_vocab = o->draft_vocab;
        cfg.mmproj_path = o->mmproj;
        be = backend_engine_open(&cfg, err, sizeof err);
        if (!be && o->mmproj_found) {
            fprintf(stderr, "chatfs: %s beside the model is left out (%s): no images\n", o->mmproj, err);
            cfg.mmproj_path = NULL;
            be = backend_engine_open(&cfg, err, sizeof err);
        }
    }
    if (!be) goto fail;
    /* the engine holds a conversation to the model's trained context (engine_open): a
     * larger -c is cut, and the user hears why */
    if (!o->fake && !o->engine_url && o->n_ctx > 0 && be->context(be) < o->n_ctx)
        fprintf(stderr, "chatfs: -c %d is more than the model's context (it was trained on %d tokens): a "
                "conversation holds at most %d\n", o->n_ctx, be->context(be), be->context(be));
    /* another process holding the database (the sqlite3 shell, a backup) stalls a file
     * operation at most this long; what it keeps from being stored waits in memory and is
     * stored when it lets go (fs/generation.c) */
    db_busy_timeout(database, 200);
    if (!(fs = chatfs_new(be, store, err, sizeof err))) goto fail;
    if (o->log_path) { /* opened before the daemon leaves the directory: a relative path works */
        if (!(logf = fopen(o->log_path, "a"))) {
            snprintf(err, sizeof err, "--log %s: %s", o->log_path, strerror(errno));
            goto fail;
        }
        setvbuf(logf, NULL, _IOLBF, 0);
        chatfs_set_log(fs, logf, o->verbose ? 2 : 1);
    } else if (foreground) chatfs_set_log(fs, stderr, o->verbose ? 2 : 1);
    if (!(F = fsfuse_new(fs))) {
        snprintf(err, sizeof err, "out of memory");
        goto fail;
    }

    char *argv[8];
    int argc = 0;
    argv[argc++] = "chatfs";
    argv[argc++] = "-o";
    argv[argc++] = "fsname=chatfs,subtype=chatfs";
    if (o->fuse_opts) {
        argv[argc++] = "-o";
        argv[argc++] = (char *)o->fuse_opts;
    }
    if (o->debug) argv[argc++] = "-d";
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
    se = fuse_session_new(&args, fsfuse_ops(), sizeof *fsfuse_ops(), F);
    fuse_opt_free_args(&args);
    if (!se) {
        snprintf(err, sizeof err, "bad FUSE options%s%s", o->fuse_opts ? ": " : "", o->fuse_opts ? o->fuse_opts : "");
        goto fail;
    }
    fsfuse_set_session(F, se);
    if (set_stop_handlers(se) != 0) {
        snprintf(err, sizeof err, "cannot set signal handlers: %s", strerror(errno));
        remove_stop_handlers();
        goto fail;
    }
    if (fuse_session_mount(se, mnt) != 0) {
        snprintf(err, sizeof err, "cannot mount on %s (is it a directory, and not mounted already?)", mnt);
        remove_stop_handlers();
        goto fail;
    }
    char what_ran[2600];
    snprintf(what_ran, sizeof what_ran, "mounted on %s: %s; database %s", mnt, chatfs_model(fs), db);
    report(1, what_ran);
    if (!foreground) {
        detach_stdio();
        if (chdir("/") != 0) { /* keeps no directory busy; failure is harmless */
        }
    }
    struct fuse_loop_config cfg = {.clone_fd = 0, .max_idle_threads = 10};
    stopper st = {fs, F, se, pthread_self()};
    pthread_t stopper_thread;
    int have_stopper = pthread_create(&stopper_thread, NULL, stopper_main, &st) == 0;
    int lrc = fuse_session_loop_mt(se, &cfg);
    if (have_stopper) { /* ended by fusermount3 -u: the stopper is still waiting */
        if (write(stop_pipe[1], "q", 1) < 0) { /* full: it holds an 's' and ends after it */
        }
        pthread_join(stopper_thread, NULL);
    }
    db_claim_finishing(lock_fd); /* a new mount on this database now waits for the rest, not refuses */
    /* unmounted or signalled: stop what generates (the replies so far are kept), answer
     * whoever still waits, then close */
    chatfs_stop(fs);
    fsfuse_drain(F);
    fuse_session_unmount(se);
    remove_stop_handlers();
    rc = lrc < 0 ? 1 : 0;
    goto out;
fail:
    report(0, err);
out:
    if (se) fuse_session_destroy(se);
    if (be) be->close(be);
    fsfuse_free(F);
    chatfs_free(fs);
    if (logf) fclose(logf);
    convs_close(store);
    cs_close(checkpoints); /* after the engine, which wrote its checkpoints at close */
    db_close(database);
    if (rc != 0 && new_db) remove_db_files(db); /* a failed mount leaves no new database */
    db_unclaim(lock_fd);
    free(mnt);
    return rc;
}
