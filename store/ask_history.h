/* ask_history.h - the conversations of `chatfs ask` (module "ask" of db.h, schema
 * version 1): table ask_turns(conversation, idx, role, content), one row per message,
 * the system prompt as row 0 when there is one. The mount never touches it, so ask may
 * add its turns while a mount holds the database. */
#ifndef CHATFS_ASK_HISTORY_H
#define CHATFS_ASK_HISTORY_H

#include <stddef.h>

#include "store/db.h"

/* Creates or migrates the table. 0, or -1 with the reason in err. */
int ask_history_open(store_db *db, char *err, size_t errlen);
/* Calls add(ud, role, content) for each stored message of conversation in order (roles
 * other than system, user and assistant are skipped); add returns 0, or -1 to stop.
 * 0, or -1 with the reason in err. */
int ask_history_load(store_db *db, const char *conversation,
                     int (*add)(void *ud, const char *role, const char *content), void *ud, char *err, size_t errlen);
/* Stores messages [from, n) of conversation at those indexes (replacing what is there),
 * in one transaction. 0, or -1 with the reason in err. */
int ask_history_store(store_db *db, const char *conversation, const char *const *roles, const char *const *contents,
                      int from, int n, char *err, size_t errlen);

#endif
