/* ask_history.c - the conversations of `chatfs ask` (see ask_history.h). */
#include "store/ask_history.h"

#include <stdio.h>
#include <string.h>

/* Databases written before this module existed have the table already (it came with
 * the checkpoints' first schema): IF NOT EXISTS keeps them. */
static const char *const migrations[] = {
    "CREATE TABLE IF NOT EXISTS ask_turns(conversation TEXT NOT NULL, idx INTEGER NOT NULL, role TEXT NOT NULL,"
    " content TEXT NOT NULL, PRIMARY KEY(conversation, idx));",
};

int ask_history_open(store_db *db, char *err, size_t errlen) {
    return db_migrate(db, "ask", migrations, (int)(sizeof migrations / sizeof *migrations), err, errlen);
}

int ask_history_load(store_db *db, const char *conversation,
                     int (*add)(void *ud, const char *role, const char *content), void *ud, char *err, size_t errlen) {
    db_enter(db);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db_sql(db), "SELECT role, content FROM ask_turns WHERE conversation=? ORDER BY idx", -1,
                                &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(st, 1, conversation, -1, SQLITE_STATIC);
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            const char *role = (const char *)sqlite3_column_text(st, 0), *c = (const char *)sqlite3_column_text(st, 1);
            if (!role || !c || (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant"))) continue;
            if (add(ud, role, c) != 0) break;
        }
    }
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) snprintf(err, errlen, "%s", sqlite3_errmsg(db_sql(db)));
    sqlite3_finalize(st);
    db_leave(db);
    return rc == SQLITE_DONE ? 0 : -1;
}

int ask_history_store(store_db *db, const char *conversation, const char *const *roles, const char *const *contents,
                      int from, int n, char *err, size_t errlen) {
    if (db_begin(db, err, errlen) != 0) return -1;
    sqlite3_stmt *st = NULL;
    int ok = sqlite3_prepare_v2(db_sql(db),
                                "INSERT OR REPLACE INTO ask_turns(conversation, idx, role, content) VALUES(?,?,?,?)", -1,
                                &st, NULL) == SQLITE_OK;
    for (int i = from; ok && i < n; i++) {
        sqlite3_reset(st);
        sqlite3_bind_text(st, 1, conversation, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 2, i);
        sqlite3_bind_text(st, 3, roles[i], -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, contents[i], -1, SQLITE_STATIC);
        ok = sqlite3_step(st) == SQLITE_DONE;
    }
    if (!ok) snprintf(err, errlen, "%s", sqlite3_errmsg(db_sql(db)));
    sqlite3_finalize(st);
    return db_end(db, ok, err, errlen);
}
