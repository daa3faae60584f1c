/* store.c - conversations in SQLite (see store.h). */
#include "fs/store.h"

#include <pthread.h>
#include <stdarg.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/db.h"

struct fs_store {
    sqlite3 *db;
    pthread_mutex_t mu; /* one transaction at a time on this connection */
};

static const char *const migrations[] = {
    "CREATE TABLE conversation("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  name TEXT NOT NULL UNIQUE,"
    "  system TEXT NOT NULL DEFAULT '',"
    "  settings TEXT NOT NULL DEFAULT '{}',"
    "  mtime_ns INTEGER NOT NULL DEFAULT 0);"
    "CREATE TABLE conversation_turn("
    "  conversation INTEGER NOT NULL REFERENCES conversation(id) ON DELETE CASCADE,"
    "  idx INTEGER NOT NULL,"
    "  role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),"
    "  content TEXT NOT NULL,"
    "  complete INTEGER NOT NULL DEFAULT 1,"
    "  mtime_ns INTEGER NOT NULL DEFAULT 0,"
    "  PRIMARY KEY (conversation, idx));"
    "CREATE TABLE conversation_global(key TEXT PRIMARY KEY, value TEXT NOT NULL);",
};

fs_store *store_open(const char *path, char *err, size_t errlen) {
    sqlite3 *db = db_open(path, err, errlen);
    if (!db) return NULL;
    if (db_migrate(db, "conversations", migrations, sizeof migrations / sizeof *migrations, err, errlen) != 0) {
        db_close(db);
        return NULL;
    }
    fs_store *s = calloc(1, sizeof *s);
    if (!s) {
        db_close(db);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->db = db;
    pthread_mutex_init(&s->mu, NULL);
    return s;
}

void store_close(fs_store *s) {
    if (!s) return;
    db_close(s->db);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* Runs one statement with bound arguments described by fmt: i = int64, t = text
 * (NUL-terminated), b = text with length (const char *, size_t), n = NULL. */
static int run(fs_store *s, const char *sql, const char *fmt, ...) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) return -1;
    va_list ap;
    va_start(ap, fmt);
    for (int i = 1; *fmt; fmt++, i++) {
        if (*fmt == 'i') sqlite3_bind_int64(st, i, va_arg(ap, int64_t));
        else if (*fmt == 't') sqlite3_bind_text(st, i, va_arg(ap, const char *), -1, SQLITE_TRANSIENT);
        else if (*fmt == 'b') {
            const char *p = va_arg(ap, const char *);
            size_t n = va_arg(ap, size_t);
            sqlite3_bind_text(st, i, p ? p : "", (int)n, SQLITE_TRANSIENT);
        } else sqlite3_bind_null(st, i);
    }
    va_end(ap);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : -1;
}

static void begin(fs_store *s) {
    pthread_mutex_lock(&s->mu);
    db_exec(s->db, "BEGIN IMMEDIATE", NULL, 0);
}

static int end(fs_store *s, int ok, char *err, size_t errlen) {
    if (ok && db_exec(s->db, "COMMIT", NULL, 0) == 0) {
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    if (err) snprintf(err, errlen, "database: %s", sqlite3_errmsg(s->db));
    db_exec(s->db, "ROLLBACK", NULL, 0);
    pthread_mutex_unlock(&s->mu);
    return -1;
}

int store_load(fs_store *s, const store_loader *l, char *err, size_t errlen) {
    pthread_mutex_lock(&s->mu);
    sqlite3_stmt *c = NULL, *t = NULL;
    int rc = -1;
    if (sqlite3_prepare_v2(s->db, "SELECT id, name, system, settings, mtime_ns FROM conversation ORDER BY id", -1, &c,
                           NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(s->db,
                           "SELECT conversation, idx, role, content, complete, mtime_ns FROM conversation_turn "
                           "ORDER BY conversation, idx",
                           -1, &t, NULL) != SQLITE_OK)
        goto out;
    while (sqlite3_step(c) == SQLITE_ROW)
        if (l->conversation(l->ud, sqlite3_column_int64(c, 0), (const char *)sqlite3_column_text(c, 1),
                            (const char *)sqlite3_column_text(c, 2), (const char *)sqlite3_column_text(c, 3),
                            sqlite3_column_int64(c, 4)) != 0)
            goto out;
    while (sqlite3_step(t) == SQLITE_ROW) {
        store_turn tu = {!strcmp((const char *)sqlite3_column_text(t, 2), "user"),
                         (const char *)sqlite3_column_text(t, 3), (size_t)sqlite3_column_bytes(t, 3),
                         sqlite3_column_int(t, 4), sqlite3_column_int64(t, 5)};
        if (l->turn(l->ud, sqlite3_column_int64(t, 0), sqlite3_column_int(t, 1), &tu) != 0) goto out;
    }
    rc = 0;
out:
    if (rc) snprintf(err, errlen, "cannot load the conversations: %s", sqlite3_errmsg(s->db));
    sqlite3_finalize(c);
    sqlite3_finalize(t);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int store_get_global(fs_store *s, const char *key, char **value) {
    *value = NULL;
    pthread_mutex_lock(&s->mu);
    sqlite3_stmt *st;
    int rc = -1;
    if (sqlite3_prepare_v2(s->db, "SELECT value FROM conversation_global WHERE key=?", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
        rc = 0;
        if (sqlite3_step(st) == SQLITE_ROW) *value = strdup((const char *)sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int store_set_global(fs_store *s, const char *key, const char *value, char *err, size_t errlen) {
    begin(s);
    int ok = !run(s, "INSERT OR REPLACE INTO conversation_global(key, value) VALUES(?, ?)", "tt", key, value);
    return end(s, ok, err, errlen);
}

int64_t store_create(fs_store *s, const char *name, const char *system, const char *settings, int64_t mtime_ns,
                     char *err, size_t errlen) {
    begin(s);
    int ok = !run(s, "INSERT INTO conversation(name, system, settings, mtime_ns) VALUES(?, ?, ?, ?)", "ttti", name,
                  system, settings, mtime_ns);
    int64_t id = ok ? sqlite3_last_insert_rowid(s->db) : -1;
    return end(s, ok, err, errlen) ? -1 : id;
}

int store_rename(fs_store *s, int64_t id, const char *name, char *err, size_t errlen) {
    begin(s);
    return end(s, !run(s, "UPDATE conversation SET name=? WHERE id=?", "ti", name, id), err, errlen);
}

int store_delete(fs_store *s, int64_t id, char *err, size_t errlen) {
    begin(s);
    int ok = !run(s, "DELETE FROM conversation_turn WHERE conversation=?", "i", id) &&
             !run(s, "DELETE FROM conversation WHERE id=?", "i", id);
    return end(s, ok, err, errlen);
}

int store_set_system(fs_store *s, int64_t id, const char *system, int64_t mtime_ns, char *err, size_t errlen) {
    begin(s);
    return end(s, !run(s, "UPDATE conversation SET system=?, mtime_ns=? WHERE id=?", "tii", system, mtime_ns, id), err,
               errlen);
}

int store_set_settings(fs_store *s, int64_t id, const char *settings, char *err, size_t errlen) {
    begin(s);
    return end(s, !run(s, "UPDATE conversation SET settings=? WHERE id=?", "ti", settings, id), err, errlen);
}

int store_replace_turns(fs_store *s, int64_t id, int from, const store_turn *turns, int n, const char *system,
                        char *err, size_t errlen) {
    begin(s);
    int ok = !run(s, "DELETE FROM conversation_turn WHERE conversation=? AND idx>=?", "ii", id, (int64_t)from);
    for (int i = 0; ok && i < n; i++)
        ok = !run(s,
                  "INSERT INTO conversation_turn(conversation, idx, role, content, complete, mtime_ns) "
                  "VALUES(?, ?, ?, ?, ?, ?)",
                  "iitbii", id, (int64_t)(from + i), turns[i].user ? "user" : "assistant", turns[i].text,
                  turns[i].len, (int64_t)turns[i].complete, turns[i].mtime_ns);
    if (ok && system) ok = !run(s, "UPDATE conversation SET system=? WHERE id=?", "ti", system, id);
    return end(s, ok, err, errlen);
}

int store_update_turn(fs_store *s, int64_t id, int idx, const char *text, size_t len, int complete, char *err,
                      size_t errlen) {
    begin(s);
    int ok = !run(s, "UPDATE conversation_turn SET content=?, complete=? WHERE conversation=? AND idx=?", "biii", text,
                  len, (int64_t)complete, id, (int64_t)idx);
    return end(s, ok, err, errlen);
}
