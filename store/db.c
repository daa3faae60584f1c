/* db.c - opening the database and versioned migrations (see db.h). */
#include "store/db.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

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

int db_lock(const char *path, const char *what, int *fd, char *owner, size_t ownerlen) {
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
    if (flock(f, LOCK_EX | LOCK_NB) == 0) {
        char who[1200];
        int n = snprintf(who, sizeof who, "%ld\n%s\n", (long)getpid(), what);
        if (ftruncate(f, 0) != 0 || pwrite(f, who, (size_t)n, 0) != n) { /* the lock holds without its note */
        }
        *fd = f;
        return 0;
    }
    if (errno != EWOULDBLOCK) {
        snprintf(owner, ownerlen, "%s: %s", lock, strerror(errno));
        close(f);
        return -1;
    }
    /* held: the holder writes its note right after taking the lock */
    char note[1200] = "";
    for (int tries = 0; tries < 50; tries++) {
        ssize_t k = pread(f, note, sizeof note - 1, 0);
        note[k > 0 ? k : 0] = 0;
        if (k > 0 && strchr(note, '\n') != strrchr(note, '\n')) break;
        usleep(10000);
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

void db_unlock(int fd) {
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

int db_exec(sqlite3 *db, const char *sql, char *err, size_t errlen) {
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        if (err) snprintf(err, errlen, "%s", msg ? msg : sqlite3_errmsg(db));
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

sqlite3 *db_open(const char *path, char *err, size_t errlen) {
    if (make_parents(path) != 0) {
        snprintf(err, errlen, "%s: cannot create its directory: %s", path, strerror(errno));
        return NULL;
    }
    /* Only SQLite opens the file. POSIX locks belong to the process, and closing any
     * descriptor of a file drops all of them: an open()+close() of the database here,
     * while this process already had a connection, would leave that connection without
     * its locks, and the next connection elsewhere to close would take the database for
     * its last user and delete the WAL under it (SQLite's "How To Corrupt", 2.2). */
    struct stat st;
    int created = stat(path, &st) != 0;
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL) !=
        SQLITE_OK) {
        snprintf(err, errlen, "%s: %s", path, db ? sqlite3_errmsg(db) : "cannot open");
        sqlite3_close(db);
        return NULL;
    }
    /* SQLite creates the file with the umask's mode; conversations are private. Its WAL
     * and shm files take the database file's mode. */
    if (created && chmod(path, 0600) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        sqlite3_close(db);
        return NULL;
    }
    sqlite3_busy_timeout(db, 5000);
    char e[256];
    if (db_exec(db,
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;"
                "CREATE TABLE IF NOT EXISTS schema_versions(module TEXT PRIMARY KEY, version INTEGER NOT NULL);",
                e, sizeof e) != 0) {
        snprintf(err, errlen, "%s: %s", path, e);
        sqlite3_close(db);
        return NULL;
    }
    return db;
}

void db_close(sqlite3 *db) { sqlite3_close(db); }

int db_module_version(sqlite3 *db, const char *module) {
    sqlite3_stmt *st;
    int v = 0;
    if (sqlite3_prepare_v2(db, "SELECT version FROM schema_versions WHERE module=?", -1, &st, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_text(st, 1, module, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return v;
}

int db_migrate(sqlite3 *db, const char *module, const char *const *steps, int n_steps, char *err, size_t errlen) {
    int v = db_module_version(db, module);
    if (v < 0) {
        snprintf(err, errlen, "cannot read the schema version: %s", sqlite3_errmsg(db));
        return -1;
    }
    if (v > n_steps) {
        snprintf(err, errlen, "the database has %s schema version %d, newer than this chatfs knows (%d)", module, v,
                 n_steps);
        return -1;
    }
    for (; v < n_steps; v++) {
        char e[256];
        if (db_exec(db, "BEGIN IMMEDIATE", e, sizeof e) != 0 || db_exec(db, steps[v], e, sizeof e) != 0) {
            db_exec(db, "ROLLBACK", NULL, 0);
            snprintf(err, errlen, "%s schema migration %d failed: %s", module, v + 1, e);
            return -1;
        }
        sqlite3_stmt *st = NULL;
        int ok = sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO schema_versions(module, version) VALUES(?, ?)", -1, &st,
                                    NULL) == SQLITE_OK;
        if (ok) {
            sqlite3_bind_text(st, 1, module, -1, SQLITE_STATIC);
            sqlite3_bind_int(st, 2, v + 1);
            ok = sqlite3_step(st) == SQLITE_DONE;
        }
        sqlite3_finalize(st);
        if (!ok) snprintf(e, sizeof e, "%s", sqlite3_errmsg(db));
        if (!ok || db_exec(db, "COMMIT", e, sizeof e) != 0) {
            db_exec(db, "ROLLBACK", NULL, 0);
            snprintf(err, errlen, "%s schema migration %d failed: %s", module, v + 1, e);
            return -1;
        }
    }
    return 0;
}
