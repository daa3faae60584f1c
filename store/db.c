/* db.c - opening the database once per process, its lock, versioned migrations, and who
 * writes it (see db.h). */
#include "store/db.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct store_db {
    sqlite3 *sql;
    pthread_mutex_t mu; /* recursive: one module's statements at a time on the connection */
    char path[1024];
};

/* mkdir -p of the directory part of path */
static int make_parents(const char *path) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return 0;
    *slash = 0;
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(dir, 0700) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) return -1;
    return 0;
}

#define FINISHING ", finishing after its unmount"

/* "PID\nWHAT\n" */
static void write_note(int f, const char *what) {
    char who[1200];
    int n = snprintf(who, sizeof who, "%ld\n%s\n", (long)getpid(), what);
    if (n >= (int)sizeof who) n = (int)sizeof who - 1;
    if (ftruncate(f, 0) != 0 || pwrite(f, who, (size_t)n, 0) != n) { /* the lock holds without its note */
    }
}

int db_claim(const char *path, const char *what, int wait, int *fd, char *owner, size_t ownerlen) {
    char lock[1100];
    snprintf(lock, sizeof lock, "%s.lock", path);
    if (make_parents(path) != 0) {
        snprintf(owner, ownerlen, "%s: cannot create its directory: %s", path, strerror(errno));
        return -1;
    }
    int f = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (f < 0) {
        snprintf(owner, ownerlen, "%s: %s", lock, strerror(errno));
        return -1;
    }
    char note[1200] = "";
    for (int waited_ms = 0;; waited_ms += 20) {
        if (flock(f, LOCK_EX | LOCK_NB) == 0) {
            write_note(f, what);
            *fd = f;
            return 0;
        }
        if (errno != EWOULDBLOCK) {
            snprintf(owner, ownerlen, "%s: %s", lock, strerror(errno));
            close(f);
            return -1;
        }
        /* held: the holder writes its note right after taking the lock */
        for (int tries = 0; tries < 50; tries++) {
            ssize_t k = pread(f, note, sizeof note - 1, 0);
            note[k > 0 ? k : 0] = 0;
            if (k > 0 && strchr(note, '\n') != strrchr(note, '\n')) break;
            usleep(10000);
        }
        /* A holder that is finishing lets go soon: wait for it rather than refuse. Any
         * holder gets two seconds: a mount whose mount point was just unmounted takes a
         * moment to notice and say it is finishing. */
        if (!wait || waited_ms >= (strstr(note, FINISHING) ? DB_CLAIM_WAIT_S * 1000 : 2000)) break;
        usleep(20000);
    }
    close(f);
    long pid = atol(note);
    char *nl = strchr(note, '\n'), *what_held = nl ? nl + 1 : NULL;
    if (what_held) what_held[strcspn(what_held, "\n")] = 0;
    if (pid > 0 && what_held && *what_held)
        snprintf(owner, ownerlen, "%s (pid %ld)", what_held, pid);
    else
        snprintf(owner, ownerlen, "another process (see %s)", lock);
    return 1;
}

int db_holder(const char *path, long *pid, char *what, size_t whatlen) {
    char lock[1100], note[1200];
    snprintf(lock, sizeof lock, "%s.lock", path);
    int f = open(lock, O_RDONLY | O_CLOEXEC);
    if (f < 0) return -1;
    ssize_t k = pread(f, note, sizeof note - 1, 0);
    close(f);
    note[k > 0 ? k : 0] = 0;
    char *nl = strchr(note, '\n');
    if (!nl || !strchr(nl + 1, '\n')) return -1;
    nl[1 + strcspn(nl + 1, "\n")] = 0;
    *pid = atol(note);
    snprintf(what, whatlen, "%s", nl + 1);
    return 0;
}

void db_claim_finishing(int fd) {
    if (fd < 0) return;
    char note[1200];
    ssize_t k = pread(fd, note, sizeof note - 1, 0);
    note[k > 0 ? k : 0] = 0;
    char *nl = strchr(note, '\n'), what[1100];
    if (!nl) return;
    snprintf(what, sizeof what, "%.*s" FINISHING, (int)strcspn(nl + 1, "\n"), nl + 1);
    write_note(fd, what);
}

void db_unclaim(int fd) {
    if (fd >= 0) close(fd);
}

char *db_default_path(char *buf, size_t n) {
    const char *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
    if (xdg && *xdg)
        snprintf(buf, n, "%s/chatfs/chatfs.db", xdg);
    else
        snprintf(buf, n, "%s/.local/share/chatfs/chatfs.db", home && *home ? home : ".");
    return buf;
}

sqlite3 *db_sql(store_db *db) { return db->sql; }
const char *db_path(const store_db *db) { return db->path; }
void db_enter(store_db *db) { pthread_mutex_lock(&db->mu); }

void db_busy_timeout(store_db *db, int ms) {
    db_enter(db);
    sqlite3_busy_timeout(db->sql, ms);
    db_leave(db);
}
void db_leave(store_db *db) { pthread_mutex_unlock(&db->mu); }

int db_exec(store_db *db, const char *sql, char *err, size_t errlen) {
    char *msg = NULL;
    if (sqlite3_exec(db->sql, sql, NULL, NULL, &msg) != SQLITE_OK) {
        if (err) snprintf(err, errlen, "%s", msg ? msg : sqlite3_errmsg(db->sql));
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

/* SQLITE_FULL is the disk (or the file size limit); SQLite reports a write that the
 * kernel refused for lack of space as SQLITE_FULL, and some paths (the shared-memory
 * file) as an I/O error whose errno says so. SQLITE_BUSY (and LOCKED) is another
 * connection holding the database past the busy timeout: a later try may succeed. */
int db_errno(store_db *db) {
    int code = sqlite3_extended_errcode(db->sql);
    if ((code & 0xff) == SQLITE_BUSY || (code & 0xff) == SQLITE_LOCKED) return EAGAIN;
    if ((code & 0xff) == SQLITE_FULL || ((code & 0xff) == SQLITE_IOERR && sqlite3_system_errno(db->sql) == ENOSPC))
        return ENOSPC;
    return EIO;
}

int db_begin(store_db *db, char *err, size_t errlen) {
    db_enter(db);
    if (db_exec(db, "BEGIN IMMEDIATE", err, errlen) == 0) return 0;
    int e = db_errno(db);
    db_leave(db);
    return -e;
}

int db_end(store_db *db, int ok, char *err, size_t errlen) {
    int rc = 0;
    if (!ok || db_exec(db, "COMMIT", err, errlen) != 0) {
        if (ok == 0 && err && errlen) snprintf(err, errlen, "%s", sqlite3_errmsg(db->sql));
        rc = -db_errno(db); /* before the rollback, which resets the connection's error */
        db_exec(db, "ROLLBACK", NULL, 0);
    }
    db_leave(db);
    return rc;
}

store_db *db_open(const char *path, char *err, size_t errlen) {
    if (make_parents(path) != 0) {
        snprintf(err, errlen, "%s: cannot create its directory: %s", path, strerror(errno));
        return NULL;
    }
    store_db *db = calloc(1, sizeof *db);
    if (!db) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    snprintf(db->path, sizeof db->path, "%s", path);
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&db->mu, &ma);
    pthread_mutexattr_destroy(&ma);
    /* Only SQLite opens the file (db.h): its mode is set with chmod after SQLite made it,
     * not through an open() of our own. */
    struct stat st;
    int created = stat(path, &st) != 0;
    if (sqlite3_open_v2(path, &db->sql, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL) !=
        SQLITE_OK) {
        snprintf(err, errlen, "%s: %s", path, db->sql ? sqlite3_errmsg(db->sql) : "cannot open");
        db_close(db);
        return NULL;
    }
    /* SQLite creates the file with the umask's mode; conversations are private. Its WAL
     * and shm files take the database file's mode. */
    if (created && chmod(path, 0600) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        db_close(db);
        return NULL;
    }
    sqlite3_busy_timeout(db->sql, 5000);
    char e[256];
    if (db_exec(db,
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;"
                "CREATE TABLE IF NOT EXISTS schema_versions(module TEXT PRIMARY KEY, version INTEGER NOT NULL);",
                e, sizeof e) != 0) {
        snprintf(err, errlen, "%s: %s", path, e);
        db_close(db);
        return NULL;
    }
    return db;
}

/* every table of the file readable: a cheap probe of each one's first page */
static int readable(store_db *db, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL, *q = NULL;
    int ok = sqlite3_prepare_v2(db->sql, "SELECT name FROM sqlite_master WHERE type='table'", -1, &st, NULL) == SQLITE_OK;
    int rc = SQLITE_DONE, qrc;
    while (ok && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        char sql[300];
        snprintf(sql, sizeof sql, "SELECT 1 FROM \"%.200s\" LIMIT 1", (const char *)sqlite3_column_text(st, 0));
        ok = sqlite3_prepare_v2(db->sql, sql, -1, &q, NULL) == SQLITE_OK &&
             ((qrc = sqlite3_step(q)) == SQLITE_ROW || qrc == SQLITE_DONE);
        sqlite3_finalize(q);
    }
    if (ok && rc != SQLITE_DONE) ok = 0;
    if (!ok) snprintf(err, errlen, "%s", sqlite3_errmsg(db->sql));
    sqlite3_finalize(st);
    return ok;
}

store_db *db_open_or_renew(const char *path, int may_move, char *note, size_t notelen, char *err, size_t errlen) {
    if (note && notelen) note[0] = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        char e[512] = "";
        store_db *db = db_open(path, e, sizeof e);
        if (db && readable(db, e, sizeof e)) return db;
        db_close(db);
        struct stat st;
        if (attempt == 1 || !may_move || stat(path, &st) != 0) {
            snprintf(err, errlen, "%s", e);
            return NULL;
        }
        char aside[1100];
        snprintf(aside, sizeof aside, "%s.corrupt-%ld", path, (long)time(NULL));
        if (rename(path, aside) != 0) {
            snprintf(err, errlen, "%s is unreadable (%s) and cannot be moved aside: %s", path, e, strerror(errno));
            return NULL;
        }
        static const char *const side[] = {"-wal", "-shm"};
        for (int i = 0; i < 2; i++) {
            char p[1100];
            snprintf(p, sizeof p, "%s%s", path, side[i]);
            unlink(p);
        }
        if (note) snprintf(note, notelen, "%s is unreadable (%s); moved it to %s and starting a new database", path, e,
                           aside);
    }
    return NULL;
}

void db_close(store_db *db) {
    if (!db) return;
    sqlite3_close(db->sql);
    pthread_mutex_destroy(&db->mu);
    free(db);
}

int db_module_version(store_db *db, const char *module) {
    sqlite3_stmt *st;
    int v = 0;
    db_enter(db);
    if (sqlite3_prepare_v2(db->sql, "SELECT version FROM schema_versions WHERE module=?", -1, &st, NULL) != SQLITE_OK) {
        db_leave(db);
        return -1;
    }
    sqlite3_bind_text(st, 1, module, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    db_leave(db);
    return v;
}

int db_migrate(store_db *db, const char *module, const char *const *steps, int n_steps, char *err, size_t errlen) {
    int v = db_module_version(db, module);
    if (v < 0) {
        snprintf(err, errlen, "cannot read the schema version: %s", sqlite3_errmsg(db->sql));
        return -1;
    }
    if (v > n_steps) {
        snprintf(err, errlen, "the database has %s schema version %d, newer than this chatfs knows (%d)", module, v,
                 n_steps);
        return -1;
    }
    for (; v < n_steps; v++) {
        char e[256] = "";
        int ok = db_begin(db, e, sizeof e) == 0;
        if (!ok) {
            snprintf(err, errlen, "%s schema migration %d failed: %s", module, v + 1, e);
            return -1;
        }
        sqlite3_stmt *st = NULL;
        ok = db_exec(db, steps[v], e, sizeof e) == 0 &&
             sqlite3_prepare_v2(db->sql, "INSERT OR REPLACE INTO schema_versions(module, version) VALUES(?, ?)", -1, &st,
                                NULL) == SQLITE_OK;
        if (ok) {
            sqlite3_bind_text(st, 1, module, -1, SQLITE_STATIC);
            sqlite3_bind_int(st, 2, v + 1);
            ok = sqlite3_step(st) == SQLITE_DONE;
            if (!ok) snprintf(e, sizeof e, "%s", sqlite3_errmsg(db->sql));
        }
        sqlite3_finalize(st);
        if (db_end(db, ok, ok ? e : NULL, ok ? sizeof e : 0) != 0) {
            snprintf(err, errlen, "%s schema migration %d failed: %s", module, v + 1, e);
            return -1;
        }
    }
    return 0;
}
