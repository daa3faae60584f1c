/* mount.c - mounting and daemonising (see mount.h). */
#include "fs/mount.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/fuse_ops.h"
#include "fs/store.h"
#include "store/db.h"

/* The parent of a daemon waits for one message on this pipe: "" when mounted, else
 * the reason, so that `chatfs mount` fails in the terminal when the model or the
 * mountpoint is wrong. (fuse_daemonize cannot do this: it reports before we mount, and
 * the engine's threads must start after the fork.) */
static int ready_fd = -1;

static void report(const char *msg) {
    if (ready_fd < 0) {
        if (*msg) fprintf(stderr, "chatfs: %s\n", msg);
        return;
    }
    if (write(ready_fd, msg, strlen(msg) + 1) < 0) { /* the parent is gone: nothing to tell */
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
        char msg[1024];
        size_t n = 0;
        ssize_t k;
        while (n < sizeof msg - 1 && (k = read(p[0], msg + n, sizeof msg - 1 - n)) > 0) {
            n += (size_t)k;
            if (memchr(msg, 0, n)) break;
        }
        msg[n] = 0;
        if (n == 0) fprintf(stderr, "chatfs: the daemon exited before mounting\n");
        else if (msg[0]) fprintf(stderr, "chatfs: %s\n", msg);
        _exit(n > 0 && !msg[0] ? 0 : 1);
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

int chatfs_mount(const mount_opts *o) {
    struct stat st;
    if (stat(o->mountpoint, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "chatfs: %s: %s\n", o->mountpoint, errno ? strerror(errno) : "not a directory");
        return 1;
    }
    char *mnt = realpath(o->mountpoint, NULL);
    int foreground = o->foreground || o->debug;
    if (!foreground && daemonise() != 0) return 1;

    char err[1024], dbpath[1024];
    int rc = 1;
    fs_store *store = NULL;
    fs_backend *be = NULL;
    chatfs *fs = NULL;
    fsfuse *F = NULL;
    struct fuse_session *se = NULL;
    const char *db = o->db ? o->db : db_default_path(dbpath, sizeof dbpath);
    if (!(store = store_open(db, err, sizeof err))) goto fail;
    if (o->fake) be = backend_fake_open(o->fake, err, sizeof err);
    else {
        engine_config cfg = {0};
        cfg.model_path = o->model;
        cfg.db_path = db;
        cfg.threads = o->threads;
        cfg.prefill_chunk = o->prefill_chunk;
        cfg.max_batch = o->max_batch;
        cfg.ram_budget = o->ram_budget;
        cfg.disk_budget = o->disk_budget;
        cfg.draft = o->draft;
        cfg.draft_vocab = o->draft_vocab;
        be = backend_engine_open(&cfg, err, sizeof err);
    }
    if (!be) goto fail;
    if (!(fs = chatfs_new(be, store, err, sizeof err))) goto fail;
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
    if (fuse_set_signal_handlers(se) != 0) {
        snprintf(err, sizeof err, "cannot set signal handlers");
        goto fail;
    }
    if (fuse_session_mount(se, mnt) != 0) {
        snprintf(err, sizeof err, "cannot mount on %s (is it a directory, and not mounted already?)", mnt);
        fuse_remove_signal_handlers(se);
        goto fail;
    }
    report("");
    if (!foreground) {
        detach_stdio();
        if (chdir("/") != 0) { /* keeps no directory busy; failure is harmless */
        }
    }
    struct fuse_loop_config cfg = {.clone_fd = 0, .max_idle_threads = 10};
    int lrc = fuse_session_loop_mt(se, &cfg);
    /* unmounted or signalled: stop what generates (the replies so far are kept), answer
     * whoever still waits, then close */
    chatfs_stop(fs);
    fsfuse_drain(F);
    fuse_session_unmount(se);
    fuse_remove_signal_handlers(se);
    rc = lrc < 0 ? 1 : 0;
    goto out;
fail:
    report(err);
out:
    if (se) fuse_session_destroy(se);
    if (be) be->close(be);
    fsfuse_free(F);
    chatfs_free(fs);
    store_close(store);
    free(mnt);
    return rc;
}
