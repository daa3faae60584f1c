/* store.h - conversations in the shared database (module "conversations" of db.h).
 *
 * Tables: conversation (id, name, system prompt, settings JSON), conversation_turn
 * (conversation, index, role, content, complete, finish) and conversation_global (the
 * root settings.json). Every change is one transaction. An assistant turn is inserted
 * empty and incomplete when its message is sent and rewritten while it generates, so a
 * daemon killed mid-reply leaves the message and the reply so far. The store has its
 * own connection and lock; callers may use it from any thread. */
#ifndef CHATFS_FS_STORE_H
#define CHATFS_FS_STORE_H

#include <stddef.h>
#include <stdint.h>

typedef struct fs_store fs_store;

typedef struct {
    int user;          /* 1 user, 0 assistant */
    const char *text;
    size_t len;
    int complete;
    int64_t mtime_ns;
} store_turn;

/* What store_load reports, one conversation at a time. */
typedef struct {
    void *ud;
    /* returns 0, or -1 to stop loading */
    int (*conversation)(void *ud, int64_t id, const char *name, const char *system, const char *settings,
                        int64_t mtime_ns);
    int (*turn)(void *ud, int64_t conv, int idx, const store_turn *t);
} store_loader;

fs_store *store_open(const char *path, char *err, size_t errlen);
void store_close(fs_store *s);
int store_load(fs_store *s, const store_loader *l, char *err, size_t errlen);

/* Each returns 0, or -1 with the reason in err. */
int store_get_global(fs_store *s, const char *key, char **value); /* *value NULL when unset */
int store_set_global(fs_store *s, const char *key, const char *value, char *err, size_t errlen);
int64_t store_create(fs_store *s, const char *name, const char *system, const char *settings, int64_t mtime_ns,
                     char *err, size_t errlen); /* the new id, or -1 */
int store_rename(fs_store *s, int64_t id, const char *name, char *err, size_t errlen);
int store_delete(fs_store *s, int64_t id, char *err, size_t errlen);
int store_set_system(fs_store *s, int64_t id, const char *system, int64_t mtime_ns, char *err, size_t errlen);
int store_set_settings(fs_store *s, int64_t id, const char *settings, char *err, size_t errlen);
/* Replaces the turns from index `from` (1-based) on with turns[0..n-1]; with system
 * non-NULL, also the system prompt (an import). One transaction. */
int store_replace_turns(fs_store *s, int64_t id, int from, const store_turn *turns, int n, const char *system,
                        char *err, size_t errlen);
/* Rewrites one turn's content and completeness (a reply as it grows). */
int store_update_turn(fs_store *s, int64_t id, int idx, const char *text, size_t len, int complete, char *err,
                      size_t errlen);

#endif
