/* conversations.c - the filesystem's conversations in SQLite (see conversations.h). */
#include "store/conversations.h"

#include <errno.h>
#include <stdarg.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


struct convs_store {
    store_db *db;
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
    /* 2: an assistant turn's reasoning (issue 25) */
    "ALTER TABLE conversation_turn ADD COLUMN reasoning TEXT NOT NULL DEFAULT '';",
    /* 3: one store for `chatfs ask` and the mount (issue 37): the conversations `ask`
     * kept in ask_turns(conversation, idx, role, content; the system prompt a row of its
     * own) become conversations of this module, under their names where the mount has
     * none by that name and as NAME (ask N) where it has one (or where the name cannot be
     * a directory: '/' becomes '_'), so that no history is lost and none is mixed into
     * another. Databases without ask_turns get nothing moved. */
    "CREATE TABLE IF NOT EXISTS ask_turns(conversation TEXT NOT NULL, idx INTEGER NOT NULL, role TEXT NOT NULL,"
    " content TEXT NOT NULL, PRIMARY KEY(conversation, idx));"
    "CREATE TEMP TABLE ask_move(n INTEGER PRIMARY KEY, old TEXT NOT NULL UNIQUE, name TEXT);"
    "INSERT INTO ask_move(old) SELECT DISTINCT conversation FROM ask_turns ORDER BY conversation;"
    "UPDATE ask_move SET name = replace(old, '/', '_');"
    "UPDATE ask_move SET name = name || ' (ask ' || n || ')' WHERE name IN ('', '.', '..')"
    " OR name IN (SELECT name FROM conversation) OR n > (SELECT min(m.n) FROM ask_move m WHERE m.name = ask_move.name);"
    "INSERT INTO conversation(name, system, settings, mtime_ns)"
    " SELECT m.name, coalesce((SELECT t.content FROM ask_turns t WHERE t.conversation = m.old AND t.role = 'system'"
    " ORDER BY t.idx LIMIT 1), ''), '{}', CAST(strftime('%s', 'now') AS INTEGER) * 1000000000 FROM ask_move m ORDER BY m.n;"
    "INSERT INTO conversation_turn(conversation, idx, role, content, complete, mtime_ns)"
    " SELECT c.id, row_number() OVER (PARTITION BY t.conversation ORDER BY t.idx), t.role, t.content, 1, c.mtime_ns"
    " FROM ask_turns t JOIN ask_move m ON m.old = t.conversation JOIN conversation c ON c.name = m.name"
    " WHERE t.role IN ('user', 'assistant');"
    "DROP TABLE ask_move;"
    "DROP TABLE ask_turns;"
    /* an older `chatfs ask` (module ask, version 1) would make ask_turns again and keep
     * its turns apart: version 2 of that module, beyond what it knows, makes it refuse */
    "INSERT OR REPLACE INTO schema_versions(module, version) VALUES('ask', 2);",
    /* 4: tool calls (issue 39): a turn may be a tool's result (role 'tool', the call it
     * answers in tool_call_id), and an assistant turn may make calls (tool_calls: OpenAI's
     * array as JSON text). The role's CHECK cannot be altered in place: the table is made
     * again with its rows. */
    "CREATE TABLE conversation_turn_v4("
    "  conversation INTEGER NOT NULL REFERENCES conversation(id) ON DELETE CASCADE,"
    "  idx INTEGER NOT NULL,"
    "  role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool')),"
    "  content TEXT NOT NULL,"
    "  complete INTEGER NOT NULL DEFAULT 1,"
    "  mtime_ns INTEGER NOT NULL DEFAULT 0,"
    "  reasoning TEXT NOT NULL DEFAULT '',"
    "  tool_calls TEXT NOT NULL DEFAULT '',"
    "  tool_call_id TEXT NOT NULL DEFAULT '',"
    "  PRIMARY KEY (conversation, idx));"
    "INSERT INTO conversation_turn_v4(conversation, idx, role, content, complete, mtime_ns, reasoning)"
    " SELECT conversation, idx, role, content, complete, mtime_ns, reasoning FROM conversation_turn;"
    "DROP TABLE conversation_turn;"
    "ALTER TABLE conversation_turn_v4 RENAME TO conversation_turn;",
    /* version 5: images put in a conversation (attachments/), each file stored once by its
     * content hash however many conversations hold it; turn: the user turn that carried it
     * (1-based), 0 while it waits for the next message */
    "CREATE TABLE image(hash TEXT PRIMARY KEY, bytes BLOB NOT NULL);"
    "CREATE TABLE conversation_attachment("
    "  conversation INTEGER NOT NULL REFERENCES conversation(id) ON DELETE CASCADE,"
    "  seq INTEGER NOT NULL,"
    "  name TEXT NOT NULL,"
    "  hash TEXT NOT NULL REFERENCES image(hash),"
    "  turn INTEGER NOT NULL DEFAULT 0,"
    "  mtime_ns INTEGER NOT NULL DEFAULT 0,"
    "  PRIMARY KEY (conversation, seq), UNIQUE (conversation, name));",
};

convs_store *convs_open(store_db *db, char *err, size_t errlen) {
    if (db_migrate(db, "conversations", migrations, sizeof migrations / sizeof *migrations, err, errlen) != 0)
        return NULL;
    convs_store *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->db = db;
    return s;
}

void convs_close(convs_store *s) { free(s); }

/* Runs one statement with bound arguments described by fmt: i = int64, t = text
 * (NUL-terminated), b = text with length (const char *, size_t), n = NULL. */
static int run(convs_store *s, const char *sql, const char *fmt, ...) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db_sql(s->db), sql, -1, &st, NULL) != SQLITE_OK) return -1;
    va_list ap;
    va_start(ap, fmt);
    for (int i = 1; *fmt; fmt++, i++) {
        if (*fmt == 'i') sqlite3_bind_int64(st, i, va_arg(ap, int64_t));
        else if (*fmt == 't') sqlite3_bind_text(st, i, va_arg(ap, const char *), -1, SQLITE_TRANSIENT);
        else if (*fmt == 'B') { /* bytes: a blob with its length */
            const void *p = va_arg(ap, const void *);
            size_t n = va_arg(ap, size_t);
            sqlite3_bind_blob64(st, i, p ? p : "", (sqlite3_uint64)n, SQLITE_TRANSIENT);
        } else if (*fmt == 'b') {
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

/* Every change is one transaction: begin, run..., end (which reports a failure). Both
 * return 0 or -errno (db.h: -ENOSPC when the disk is full, -EAGAIN when another process
 * holds the database, else -EIO), the reason in err
 * naming the database: "/home/u/chatfs.db: database or disk is full". */
static int failed(convs_store *s, int rc, const char *why, char *err, size_t errlen) {
    if (err && errlen) {
        char e[256];
        snprintf(e, sizeof e, "%s", why);
        snprintf(err, errlen, "%s: %s", db_path(s->db), e);
    }
    return rc;
}

static int begin(convs_store *s, char *err, size_t errlen) {
    char e[256] = "";
    int rc = db_begin(s->db, e, sizeof e);
    return rc ? failed(s, rc, e, err, errlen) : 0;
}

static int end(convs_store *s, int ok, char *err, size_t errlen) {
    char e[256] = "";
    int rc = db_end(s->db, ok, e, sizeof e);
    return rc ? failed(s, rc, e, err, errlen) : 0;
}

/* every conversation (only 0), or the one with id only */
static int load(convs_store *s, int64_t only, const convs_loader *l, char *err, size_t errlen) {
    db_enter(s->db);
    sqlite3_stmt *c = NULL, *t = NULL, *a = NULL;
    int rc = -1;
    if (sqlite3_prepare_v2(db_sql(s->db),
                           "SELECT id, name, system, settings, mtime_ns FROM conversation WHERE ?1=0 OR id=?1 ORDER BY id",
                           -1, &c, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db_sql(s->db),
                           "SELECT conversation, idx, role, content, complete, mtime_ns, reasoning, tool_calls, "
                           "tool_call_id FROM conversation_turn "
                           "WHERE ?1=0 OR conversation=?1 ORDER BY conversation, idx",
                           -1, &t, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db_sql(s->db),
                           "SELECT a.conversation, a.seq, a.name, a.hash, a.turn, a.mtime_ns, i.bytes "
                           "FROM conversation_attachment a JOIN image i ON i.hash = a.hash "
                           "WHERE ?1=0 OR a.conversation=?1 ORDER BY a.conversation, a.seq",
                           -1, &a, NULL) != SQLITE_OK)
        goto out;
    sqlite3_bind_int64(a, 1, only);
    sqlite3_bind_int64(c, 1, only);
    sqlite3_bind_int64(t, 1, only);
    while (sqlite3_step(c) == SQLITE_ROW)
        if (l->conversation(l->ud, sqlite3_column_int64(c, 0), (const char *)sqlite3_column_text(c, 1),
                            (const char *)sqlite3_column_text(c, 2), (const char *)sqlite3_column_text(c, 3),
                            sqlite3_column_int64(c, 4)) != 0)
            goto out;
    while (sqlite3_step(t) == SQLITE_ROW) {
        const char *role = (const char *)sqlite3_column_text(t, 2), *calls = (const char *)sqlite3_column_text(t, 7),
                   *call_id = (const char *)sqlite3_column_text(t, 8);
        convs_turn tu = {!strcmp(role, "user"), (const char *)sqlite3_column_text(t, 3),
                         (size_t)sqlite3_column_bytes(t, 3), sqlite3_column_int(t, 4), sqlite3_column_int64(t, 5),
                         (const char *)sqlite3_column_text(t, 6), (size_t)sqlite3_column_bytes(t, 6),
                         !strcmp(role, "tool"), calls && *calls ? calls : NULL, call_id && *call_id ? call_id : NULL};
        if (l->turn(l->ud, sqlite3_column_int64(t, 0), sqlite3_column_int(t, 1), &tu) != 0) goto out;
    }
    while (l->attachment && sqlite3_step(a) == SQLITE_ROW) {
        const void *bytes = sqlite3_column_blob(a, 6);
        convs_attachment at = {sqlite3_column_int64(a, 1), (const char *)sqlite3_column_text(a, 2),
                               (const char *)sqlite3_column_text(a, 3), bytes ? bytes : "",
                               (size_t)sqlite3_column_bytes(a, 6), sqlite3_column_int(a, 4),
                               sqlite3_column_int64(a, 5)};
        if (l->attachment(l->ud, sqlite3_column_int64(a, 0), &at) != 0) goto out;
    }
    rc = 0;
out:
    if (rc) snprintf(err, errlen, "cannot load the conversations: %s", sqlite3_errmsg(db_sql(s->db)));
    sqlite3_finalize(c);
    sqlite3_finalize(t);
    sqlite3_finalize(a);
    db_leave(s->db);
    return rc;
}

int convs_load(convs_store *s, const convs_loader *l, char *err, size_t errlen) { return load(s, 0, l, err, errlen); }

int convs_load_one(convs_store *s, int64_t id, const convs_loader *l, char *err, size_t errlen) {
    return id > 0 ? load(s, id, l, err, errlen) : -1;
}

int convs_get_global(convs_store *s, const char *key, char **value) {
    *value = NULL;
    db_enter(s->db);
    sqlite3_stmt *st;
    int rc = -1;
    if (sqlite3_prepare_v2(db_sql(s->db), "SELECT value FROM conversation_global WHERE key=?", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
        rc = 0;
        if (sqlite3_step(st) == SQLITE_ROW) *value = strdup((const char *)sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
    }
    db_leave(s->db);
    return rc;
}

int convs_set_global(convs_store *s, const char *key, const char *value, char *err, size_t errlen) {
    int rc = begin(s, err, errlen);
    if (rc) return rc;
    int ok = !run(s, "INSERT OR REPLACE INTO conversation_global(key, value) VALUES(?, ?)", "tt", key, value);
    return end(s, ok, err, errlen);
}

int64_t convs_create(convs_store *s, const char *name, const char *system, const char *settings, int64_t mtime_ns,
                     char *err, size_t errlen) {
    int rc = begin(s, err, errlen);
    if (rc) return rc;
    int ok = !run(s, "INSERT INTO conversation(name, system, settings, mtime_ns) VALUES(?, ?, ?, ?)", "ttti", name,
                  system, settings, mtime_ns);
    int64_t id = ok ? sqlite3_last_insert_rowid(db_sql(s->db)) : -1;
    rc = end(s, ok, err, errlen);
    return rc ? rc : id;
}

int convs_rename(convs_store *s, int64_t id, const char *name, char *err, size_t errlen) {
    int rc = begin(s, err, errlen);
    if (rc) return rc;
    return end(s, !run(s, "UPDATE conversation SET name=? WHERE id=?", "ti", name, id), err, errlen);
}

int convs_delete(convs_store *s, int64_t id, char *err, size_t errlen) {
    int rc = begin(s, err, errlen);
    if (rc) return rc;
    int ok = !run(s, "DELETE FROM conversation_turn WHERE conversation=?", "i", id) &&
             !run(s, "DELETE FROM conversation_attachment WHERE conversation=?", "i", id) &&
             !run(s, "DELETE FROM image WHERE hash NOT IN (SELECT hash FROM conversation_attachment)", "") &&
             !run(s, "DELETE FROM conversation WHERE id=?", "i", id);
    return end(s, ok, err, errlen);
}

int convs_put_attachment(convs_store *s, int64_t id, const convs_attachment *a, char *err, size_t errlen) {
    int rc = begin(s, err, errlen);
    if (rc) return rc;
    int ok = !run(s, "INSERT OR IGNORE INTO image(hash, bytes) VALUES(?, ?)", "tB", a->hash, a->bytes, a->len) &&
             !run(s, "DELETE FROM conversation_attachment WHERE conversation=? AND name=?", "it", id, a->name) &&
             !run(s,
                  "INSERT INTO conversation_attachment(conversation, seq, name, hash, turn, mtime_ns) "
                  "VALUES(?, ?, ?, ?, ?, ?)",
                  "iittii", id, a->seq, a->name, a->hash, (int64_t)a->turn, a->mtime_ns) &&
             !run(s, "DELETE FROM image WHERE hash NOT IN (SELECT hash FROM conversation_attachment)", "");
    return end(s, ok, err, errlen);
}

int convs_drop_attachment(convs_store *s, int64_t id, const char *name, char *err, size_t errlen) {
    int rc = begin(s, err, errlen);
    if (rc) return rc;
    int ok = !run(s, "DELETE FROM conversation_attachment WHERE conversation=? AND name=?", "it", id, name) &&
             !run(s, "DELETE FROM image WHERE hash NOT IN (SELECT hash FROM conversation_attachment)", "");
    return end(s, ok, err, errlen);
}

int convs_set_attachment_turns(convs_store *s, int64_t id, const int64_t *seqs, const int *turns, int n, char *err,
                               size_t errlen) {
    int rc = begin(s, err, errlen);
    if (rc) return rc;
    int ok = 1;
    for (int i = 0; ok && i < n; i++)
        ok = !run(s, "UPDATE conversation_attachment SET turn=? WHERE conversation=? AND seq=?", "iii",
                  (int64_t)turns[i], id, seqs[i]);
    return end(s, ok, err, errlen);
}

int convs_set_system(convs_store *s, int64_t id, const char *system, int64_t mtime_ns, char *err, size_t errlen) {
    int rc = begin(s, err, errlen);
    if (rc) return rc;
    return end(s, !run(s, "UPDATE conversation SET system=?, mtime_ns=? WHERE id=?", "tii", system, mtime_ns, id), err,
               errlen);
}

int convs_set_settings(convs_store *s, int64_t id, const char *settings, char *err, size_t errlen) {
    int rc = begin(s, err, errlen);
    if (rc) return rc;
    return end(s, !run(s, "UPDATE conversation SET settings=? WHERE id=?", "ti", settings, id), err, errlen);
}

int convs_replace_turns(convs_store *s, int64_t id, int from, const convs_turn *turns, int n, const char *system,
                        char *err, size_t errlen) {
    int rc = begin(s, err, errlen);
    if (rc) return rc;
    int ok = !run(s, "DELETE FROM conversation_turn WHERE conversation=? AND idx>=?", "ii", id, (int64_t)from);
    for (int i = 0; ok && i < n; i++)
        ok = !run(s,
                  "INSERT INTO conversation_turn(conversation, idx, role, content, complete, mtime_ns, reasoning, "
                  "tool_calls, tool_call_id) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)",
                  "iitbiibtt", id, (int64_t)(from + i),
                  turns[i].user ? "user" : turns[i].tool ? "tool" : "assistant", turns[i].text, turns[i].len,
                  (int64_t)turns[i].complete, turns[i].mtime_ns, turns[i].reasoning,
                  turns[i].reasoning ? turns[i].reasoning_len : (size_t)0, turns[i].tool_calls ? turns[i].tool_calls : "",
                  turns[i].tool_call_id ? turns[i].tool_call_id : "");
    if (ok && system) ok = !run(s, "UPDATE conversation SET system=? WHERE id=?", "ti", system, id);
    return end(s, ok, err, errlen);
}

int convs_update_turn(convs_store *s, int64_t id, int idx, const char *text, size_t len, int complete, char *err,
                      size_t errlen) {
    int rc = begin(s, err, errlen);
    if (rc) return rc;
    int ok = !run(s, "UPDATE conversation_turn SET content=?, complete=? WHERE conversation=? AND idx=?", "biii", text,
                  len, (int64_t)complete, id, (int64_t)idx);
    return end(s, ok, err, errlen);
}

int convs_update_reply(convs_store *s, int64_t id, int idx, const char *text, size_t len, const char *reasoning,
                       size_t reasoning_len, const char *tool_calls, int complete, char *err, size_t errlen) {
    int rc = begin(s, err, errlen);
    if (rc) return rc;
    int ok = !run(s,
                  "UPDATE conversation_turn SET content=?, reasoning=?, tool_calls=?, complete=? WHERE conversation=? AND "
                  "idx=? AND complete=0",
                  "bbtiii", text, len, reasoning, reasoning ? reasoning_len : (size_t)0, tool_calls ? tool_calls : "",
                  (int64_t)complete, id, (int64_t)idx);
    return end(s, ok, err, errlen);
}

int convs_update_reasoning(convs_store *s, int64_t id, int idx, const char *text, size_t len, char *err,
                           size_t errlen) {
    int rc = begin(s, err, errlen);
    if (rc) return rc;
    int ok = !run(s, "UPDATE conversation_turn SET reasoning=? WHERE conversation=? AND idx=?", "bii", text, len, id,
                  (int64_t)idx);
    return end(s, ok, err, errlen);
}

int64_t convs_find(convs_store *s, const char *name) {
    db_enter(s->db);
    sqlite3_stmt *st;
    int64_t id = -1;
    if (sqlite3_prepare_v2(db_sql(s->db), "SELECT id FROM conversation WHERE name=?", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
        int rc = sqlite3_step(st);
        id = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : rc == SQLITE_DONE ? 0 : -1;
        sqlite3_finalize(st);
    }
    db_leave(s->db);
    return id;
}

static int turn_count(convs_store *s, int64_t id, int *n, int *last_complete) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db_sql(s->db),
                           "SELECT count(*), coalesce((SELECT complete FROM conversation_turn WHERE conversation=?1 "
                           "ORDER BY idx DESC LIMIT 1), 1) FROM conversation_turn WHERE conversation=?1",
                           -1, &st, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_int64(st, 1, id);
    int ok = sqlite3_step(st) == SQLITE_ROW;
    if (ok) *n = sqlite3_column_int(st, 0), *last_complete = sqlite3_column_int(st, 1);
    sqlite3_finalize(st);
    return ok ? 0 : -1;
}

int64_t convs_append_message(convs_store *s, const char *name, const char *settings, const char *system, int expect,
                             const char *text, size_t len, int64_t mtime_ns, char *err, size_t errlen) {
    int rc = begin(s, err, errlen);
    if (rc) return rc;
    int64_t id = convs_find(s, name);
    int ok = id >= 0, n = 0, complete = 1;
    if (ok && id == 0) {
        ok = !run(s, "INSERT INTO conversation(name, system, settings, mtime_ns) VALUES(?, ?, ?, ?)", "ttti", name,
                  system ? system : "", settings, mtime_ns);
        id = ok ? sqlite3_last_insert_rowid(db_sql(s->db)) : -1;
    } else if (ok && system) {
        ok = !run(s, "UPDATE conversation SET system=?, mtime_ns=? WHERE id=?", "tii", system, mtime_ns, id);
    }
    ok = ok && turn_count(s, id, &n, &complete) == 0;
    if (ok && (n != expect || !complete)) {
        db_exec(s->db, "ROLLBACK", NULL, 0);
        db_leave(s->db);
        snprintf(err, errlen, "%s: %s", name,
                 !complete ? "its last reply is incomplete (being generated, or cut short when its writer stopped)"
                           : "it changed while this request was prepared");
        return -EBUSY;
    }
    ok = ok && !run(s,
                    "INSERT INTO conversation_turn(conversation, idx, role, content, complete, mtime_ns, reasoning) "
                    "VALUES(?, ?, 'user', ?, 1, ?, '')",
                    "iibi", id, (int64_t)n + 1, text, len, mtime_ns) &&
         !run(s,
              "INSERT INTO conversation_turn(conversation, idx, role, content, complete, mtime_ns, reasoning) "
              "VALUES(?, ?, 'assistant', '', 0, ?, '')",
              "iii", id, (int64_t)n + 2, mtime_ns);
    rc = end(s, ok, err, errlen);
    return rc ? rc : id;
}
