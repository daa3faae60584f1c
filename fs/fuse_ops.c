/* fuse_ops.c - one table of low-level FUSE operations, each a translation of a request
 * into a call of chatfs.h and of its answer back.
 *
 * The only state kept here is what cannot leave FUSE: reads of a reply that wait for
 * the next token (parked: the fuse_req_t is kept and answered from whichever thread
 * brings the text, so no worker thread is held), and poll handles. F->mu guards both
 * lists and is taken before chatfs's own lock, never after. A parked request is
 * answered exactly once: by a wake-up, by its interrupt, or by fsfuse_drain, whichever
 * removes it from the list under F->mu first. */
#include "fs/fuse_ops.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

typedef struct parked {
    struct parked *next;
    fuse_req_t req;
    fs_handle *h;
    off_t off;
    size_t size;
} parked;

typedef struct pollwait {
    struct pollwait *next;
    fs_handle *h;
    struct fuse_pollhandle *ph;
} pollwait;

struct fsfuse {
    chatfs *fs;
    struct fuse_session *se;
    pthread_mutex_t mu;
    parked *parked;
    pollwait *polls;
    int open_files; /* opened and not yet released (atomic) */
};

typedef struct {
    fs_dirent *e;
    int n;
} dirhandle;

#define FS(req) (((fsfuse *)fuse_req_userdata(req))->fs)
#define FH(fi) ((fs_handle *)(uintptr_t)(fi)->fh)
#define TID(req) ((uint32_t)fuse_req_ctx(req)->pid)

static void to_stat(const fs_attr *a, struct stat *st) {
    memset(st, 0, sizeof *st);
    st->st_ino = a->ino;
    st->st_mode = a->mode;
    st->st_nlink = a->nlink;
    st->st_size = (off_t)a->size;
    st->st_blocks = (blkcnt_t)((a->size + 511) / 512);
    st->st_blksize = 4096;
    st->st_uid = getuid();
    st->st_gid = getgid();
    st->st_mtim.tv_sec = st->st_ctim.tv_sec = st->st_atim.tv_sec = a->mtime_ns / 1000000000;
    st->st_mtim.tv_nsec = st->st_ctim.tv_nsec = st->st_atim.tv_nsec = a->mtime_ns % 1000000000;
}

/* Entries and attributes are never cached: sizes grow while replies stream and names
 * come and go with conversations. */
static void reply_entry(fuse_req_t req, int rc, const fs_attr *a) {
    if (rc) {
        fuse_reply_err(req, -rc);
        return;
    }
    struct fuse_entry_param e = {0};
    e.ino = a->ino;
    to_stat(a, &e.attr);
    fuse_reply_entry(req, &e);
}

static void reply_attr(fuse_req_t req, int rc, const fs_attr *a) {
    if (rc) {
        fuse_reply_err(req, -rc);
        return;
    }
    struct stat st;
    to_stat(a, &st);
    fuse_reply_attr(req, &st, 0);
}

/* ---- parked reads, polls, interrupts ---- */

/* Tries a parked read again; 1 when it was answered. F->mu held. */
static int retry(fsfuse *F, parked *p) {
    char *buf = malloc(p->size ? p->size : 1);
    if (!buf) {
        fuse_reply_err(p->req, ENOMEM);
        return 1;
    }
    ssize_t n = fs_read(F->fs, p->h, p->off, p->size, buf);
    if (n == -EAGAIN) {
        free(buf);
        return 0;
    }
    if (n < 0) fuse_reply_err(p->req, (int)-n);
    else fuse_reply_buf(p->req, buf, (size_t)n);
    free(buf);
    return 1;
}

/* chatfs: text arrived or a reply ended */
static void wake(void *ud) {
    fsfuse *F = ud;
    pthread_mutex_lock(&F->mu);
    for (parked **pp = &F->parked; *pp;) {
        parked *p = *pp;
        if (retry(F, p)) {
            *pp = p->next;
            free(p);
        } else pp = &p->next;
    }
    for (pollwait **pp = &F->polls; *pp;) {
        pollwait *w = *pp;
        if (fs_poll_ready(F->fs, w->h)) {
            fuse_lowlevel_notify_poll(w->ph);
            fuse_pollhandle_destroy(w->ph);
            *pp = w->next;
            free(w);
        } else pp = &w->next;
    }
    pthread_mutex_unlock(&F->mu);
}

/* Ctrl-C (or kill) on a reader: answer EINTR at once; the generation goes on. Runs on
 * a libfuse thread; data is the long-lived fsfuse, never the parked entry, which may
 * already be answered and freed. */
static void on_interrupt(fuse_req_t req, void *data) {
    fsfuse *F = data;
    pthread_mutex_lock(&F->mu);
    for (parked **pp = &F->parked; *pp; pp = &(*pp)->next)
        if ((*pp)->req == req) {
            parked *p = *pp;
            *pp = p->next;
            fuse_reply_err(req, EINTR);
            free(p);
            break;
        }
    pthread_mutex_unlock(&F->mu);
}

static void park(fsfuse *F, fuse_req_t req, fs_handle *h, off_t off, size_t size) {
    parked *p = calloc(1, sizeof *p);
    if (!p) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    *p = (parked){NULL, req, h, off, size};
    /* registered first: if the interrupt already came, on_interrupt runs now, finds
     * nothing parked, and fuse_req_interrupted below says so */
    fuse_req_interrupt_func(req, on_interrupt, F);
    pthread_mutex_lock(&F->mu);
    if (fuse_req_interrupted(req)) {
        fuse_reply_err(req, EINTR);
        free(p);
    } else if (retry(F, p)) { /* text came between the first try and the lock */
        free(p);
    } else {
        p->next = F->parked;
        F->parked = p;
    }
    pthread_mutex_unlock(&F->mu);
}

/* ---- operations ---- */

static void op_init(void *ud, struct fuse_conn_info *conn) {
    (void)ud;
    if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC; /* O_TRUNC inside OPEN */
    conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
    fs_attr a;
    reply_entry(req, fs_lookup(FS(req), TID(req), parent, name, &a), &a);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)fi;
    fs_attr a;
    reply_attr(req, fs_getattr(FS(req), ino, &a), &a);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *st, int to_set, struct fuse_file_info *fi) {
    fs_setattr_in in = {0};
    if (to_set & FUSE_SET_ATTR_SIZE) in.valid |= FS_SET_SIZE, in.size = (uint64_t)st->st_size;
    if (to_set & FUSE_SET_ATTR_MODE) in.valid |= FS_SET_MODE, in.mode = st->st_mode;
    if (to_set & FUSE_SET_ATTR_MTIME) {
        in.valid |= FS_SET_MTIME;
        if (to_set & FUSE_SET_ATTR_MTIME_NOW) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            in.mtime_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
        } else in.mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
    }
    fs_attr a;
    reply_attr(req, fs_setattr(FS(req), TID(req), ino, fi ? FH(fi) : NULL, &in, &a), &a);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino) {
    char *t = NULL;
    int rc = fs_readlink(FS(req), ino, &t);
    if (rc) fuse_reply_err(req, -rc);
    else fuse_reply_readlink(req, t);
    free(t);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode) {
    (void)mode;
    fs_attr a;
    reply_entry(req, fs_mkdir(FS(req), TID(req), parent, name, &a), &a);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name) {
    fuse_reply_err(req, -fs_unlink(FS(req), TID(req), parent, name));
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name) {
    fuse_reply_err(req, -fs_rmdir(FS(req), TID(req), parent, name));
}

static void op_symlink(fuse_req_t req, const char *target, fuse_ino_t parent, const char *name) {
    fs_attr a;
    reply_entry(req, fs_symlink(FS(req), TID(req), target, parent, name, &a), &a);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent, const char *newname,
                      unsigned flags) {
    fuse_reply_err(req, -fs_rename(FS(req), TID(req), parent, name, newparent, newname, flags));
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname) {
    (void)ino, (void)newparent, (void)newname;
    fuse_reply_err(req, EPERM);
}

static void set_open_flags(struct fuse_file_info *fi, fs_handle *h) {
    fi->fh = (uintptr_t)h;
    fi->direct_io = 1; /* short reads reach the reader as they are; sizes may grow */
    fi->keep_cache = 0;
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev) {
    (void)rdev;
    if (!S_ISREG(mode)) {
        fuse_reply_err(req, EPERM);
        return;
    }
    fs_handle *h = NULL;
    fs_attr a;
    int rc = fs_create(FS(req), TID(req), parent, name, mode, O_WRONLY | O_EXCL, &h, &a);
    if (h) fs_release(FS(req), h);
    reply_entry(req, rc, &a);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    fs_handle *h = NULL;
    int rc = fs_open(FS(req), TID(req), ino, fi->flags, &h);
    if (rc) {
        fuse_reply_err(req, -rc);
        return;
    }
    set_open_flags(fi, h);
    fsfuse *F = fuse_req_userdata(req); /* the reply frees req */
    __atomic_add_fetch(&F->open_files, 1, __ATOMIC_RELAXED);
    if (fuse_reply_open(req, fi) == -ENOENT) { /* the opener is gone */
        fs_release(F->fs, h);
        __atomic_sub_fetch(&F->open_files, 1, __ATOMIC_RELAXED);
    }
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi) {
    fs_handle *h = NULL;
    fs_attr a;
    int rc = fs_create(FS(req), TID(req), parent, name, mode, fi->flags, &h, &a);
    if (rc) {
        if (h) fs_release(FS(req), h);
        fuse_reply_err(req, -rc);
        return;
    }
    set_open_flags(fi, h);
    struct fuse_entry_param e = {0};
    e.ino = a.ino;
    to_stat(&a, &e.attr);
    fsfuse *F = fuse_req_userdata(req); /* the reply frees req */
    __atomic_add_fetch(&F->open_files, 1, __ATOMIC_RELAXED);
    if (fuse_reply_create(req, &e, fi) == -ENOENT) {
        fs_release(F->fs, h);
        __atomic_sub_fetch(&F->open_files, 1, __ATOMIC_RELAXED);
    }
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)ino;
    fs_handle *h = FH(fi);
    char *buf = malloc(size ? size : 1);
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    ssize_t n = fs_read(FS(req), h, off, size, buf);
    if (n >= 0) fuse_reply_buf(req, buf, (size_t)n);
    else if (n != -EAGAIN) fuse_reply_err(req, (int)-n);
    else if (fs_handle_nonblock(h)) fuse_reply_err(req, EAGAIN);
    else park(fuse_req_userdata(req), req, h, off, size);
    free(buf);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi) {
    (void)ino;
    ssize_t n = fs_write(FS(req), FH(fi), off, buf, size);
    if (n < 0) fuse_reply_err(req, (int)-n);
    else fuse_reply_write(req, (size_t)n);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)ino;
    fuse_reply_err(req, -fs_flush(FS(req), FH(fi)));
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)ino;
    fsfuse *F = fuse_req_userdata(req);
    fs_handle *h = FH(fi);
    pthread_mutex_lock(&F->mu);
    for (pollwait **pp = &F->polls; *pp;) {
        pollwait *w = *pp;
        if (w->h == h) {
            fuse_pollhandle_destroy(w->ph);
            *pp = w->next;
            free(w);
        } else pp = &w->next;
    }
    pthread_mutex_unlock(&F->mu);
    fs_release(F->fs, h);
    __atomic_sub_fetch(&F->open_files, 1, __ATOMIC_RELAXED);
    fuse_reply_err(req, 0);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) {
    (void)ino, (void)datasync, (void)fi;
    fuse_reply_err(req, 0); /* commits happen at flush; the database is already durable */
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    dirhandle *d = calloc(1, sizeof *d);
    if (!d) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    int rc = fs_readdir(FS(req), TID(req), ino, &d->e, &d->n);
    if (rc) {
        free(d);
        fuse_reply_err(req, -rc);
        return;
    }
    fi->fh = (uintptr_t)d;
    if (fuse_reply_open(req, fi) == -ENOENT) {
        fs_dirents_free(d->e, d->n);
        free(d);
    }
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)ino;
    dirhandle *d = (dirhandle *)(uintptr_t)fi->fh;
    char *buf = malloc(size);
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    size_t used = 0;
    for (int i = (int)off; i < d->n; i++) {
        struct stat st = {0};
        st.st_ino = d->e[i].ino;
        st.st_mode = d->e[i].mode;
        size_t need = fuse_add_direntry(req, buf + used, size - used, d->e[i].name, &st, i + 1);
        if (need > size - used) break;
        used += need;
    }
    fuse_reply_buf(req, buf, used);
    free(buf);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)ino;
    dirhandle *d = (dirhandle *)(uintptr_t)fi->fh;
    fs_dirents_free(d->e, d->n);
    free(d);
    fuse_reply_err(req, 0);
}

static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) {
    (void)ino, (void)datasync, (void)fi;
    fuse_reply_err(req, 0);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino) {
    (void)ino;
    struct statvfs sv = {0};
    sv.f_bsize = sv.f_frsize = 4096;
    sv.f_blocks = sv.f_bfree = sv.f_bavail = 1 << 20;
    sv.f_files = sv.f_ffree = sv.f_favail = 1 << 20;
    sv.f_namemax = 255;
    fuse_reply_statfs(req, &sv);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size, int flags) {
    (void)ino, (void)name, (void)value, (void)size, (void)flags;
    fuse_reply_err(req, EOPNOTSUPP);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size) {
    (void)ino, (void)name, (void)size;
    fuse_reply_err(req, ENODATA);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
    (void)ino;
    if (size) fuse_reply_buf(req, NULL, 0);
    else fuse_reply_xattr(req, 0);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name) {
    (void)ino, (void)name;
    fuse_reply_err(req, ENODATA);
}

/* Modes are shown for ls; permission is the mount's (private unless allow_other), and
 * saying yes here keeps rm -r from asking about every read-only view. */
static void op_access(fuse_req_t req, fuse_ino_t ino, int mask) {
    (void)ino, (void)mask;
    fuse_reply_err(req, 0);
}

static void op_poll(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, struct fuse_pollhandle *ph) {
    (void)ino;
    fsfuse *F = fuse_req_userdata(req);
    fs_handle *h = FH(fi);
    pthread_mutex_lock(&F->mu);
    int ready = fs_poll_ready(F->fs, h);
    if (ph && !ready) {
        pollwait *w = NULL;
        for (w = F->polls; w && w->h != h; w = w->next) {
        }
        if (w) {
            fuse_pollhandle_destroy(w->ph);
            w->ph = ph;
        } else if ((w = calloc(1, sizeof *w))) {
            *w = (pollwait){F->polls, h, ph};
            F->polls = w;
        } else fuse_pollhandle_destroy(ph);
    } else if (ph) fuse_pollhandle_destroy(ph);
    pthread_mutex_unlock(&F->mu);
    fuse_reply_poll(req, ready ? POLLIN | POLLRDNORM | POLLOUT | POLLWRNORM : 0);
}

static const struct fuse_lowlevel_ops ops = {
    .init = op_init,
    .lookup = op_lookup,
    .getattr = op_getattr,
    .setattr = op_setattr,
    .readlink = op_readlink,
    .mknod = op_mknod,
    .mkdir = op_mkdir,
    .unlink = op_unlink,
    .rmdir = op_rmdir,
    .symlink = op_symlink,
    .rename = op_rename,
    .link = op_link,
    .open = op_open,
    .read = op_read,
    .write = op_write,
    .flush = op_flush,
    .release = op_release,
    .fsync = op_fsync,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .releasedir = op_releasedir,
    .fsyncdir = op_fsyncdir,
    .statfs = op_statfs,
    .setxattr = op_setxattr,
    .getxattr = op_getxattr,
    .listxattr = op_listxattr,
    .removexattr = op_removexattr,
    .access = op_access,
    .create = op_create,
    .poll = op_poll,
};

const struct fuse_lowlevel_ops *fsfuse_ops(void) { return &ops; }

fsfuse *fsfuse_new(chatfs *fs) {
    fsfuse *F = calloc(1, sizeof *F);
    if (!F) return NULL;
    F->fs = fs;
    pthread_mutex_init(&F->mu, NULL);
    chatfs_set_notify(fs, wake, F);
    return F;
}

void fsfuse_set_session(fsfuse *F, struct fuse_session *se) { F->se = se; }

int fsfuse_open_files(fsfuse *F) { return __atomic_load_n(&F->open_files, __ATOMIC_RELAXED); }

void fsfuse_drain(fsfuse *F) {
    pthread_mutex_lock(&F->mu);
    while (F->parked) {
        parked *p = F->parked;
        F->parked = p->next;
        fuse_reply_err(p->req, ENODEV);
        free(p);
    }
    while (F->polls) {
        pollwait *w = F->polls;
        F->polls = w->next;
        fuse_pollhandle_destroy(w->ph);
        free(w);
    }
    pthread_mutex_unlock(&F->mu);
}

void fsfuse_free(fsfuse *F) {
    if (!F) return;
    chatfs_set_notify(F->fs, NULL, NULL);
    pthread_mutex_destroy(&F->mu);
    free(F);
}
