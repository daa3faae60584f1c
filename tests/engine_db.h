/* engine_db.h - a checkpoint store on a database, as a mount makes one for its engine
 * (store/db.h once per process, cs_new, cs_port as engine_config.checkpoints): for the tests. */
#ifndef CHATFS_TESTS_ENGINE_DB_H
#define CHATFS_TESTS_ENGINE_DB_H

#include <string.h>

#include "store/ckpt_store.h"
#include "store/db.h"
#include "tests/check.h"

typedef struct {
    store_db *db;
    ckpt_store *cs;
} test_store;

/* Opens the database at path (NULL: none, RAM only) and a store on it with the default
 * budgets; returns it as the engine's port. */
static inline ckpt_port test_store_open(test_store *t, const char *path) {
    char err[512] = "";
    t->db = NULL;
    if (path) {
        t->db = db_open(path, err, sizeof err);
        REQUIRE(t->db, "%s", err);
    }
    t->cs = cs_new(t->db, NULL, err, sizeof err);
    REQUIRE(t->cs, "%s", err);
    return cs_port(t->cs);
}

/* After the engine or prefix cache that used it is closed. */
static inline void test_store_close(test_store *t) {
    cs_close(t->cs);
    db_close(t->db);
    memset(t, 0, sizeof *t);
}

#endif
