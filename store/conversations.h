/* conversations.h - the filesystem's conversations in the database (module
 * "conversations" of db.h, schema version 5 (images: attachments); version 1 had no reasoning column, and
 * opening such a database adds it, '' for every turn, in one transaction; version 3
 * moved the conversations `chatfs ask` kept apart, table ask_turns, into these tables:
 * one store for the mount and `ask`; version 4 added tool turns and calls).
 *
 * Tables: conversation (id, name, system prompt, settings JSON, mtime),
 * conversation_turn (conversation, index, role user/assistant/tool, content, complete,
 * mtime, reasoning: an assistant turn's reasoning, '' when none; tool_calls: an assistant
 * turn's calls as OpenAI's JSON array, '' when none; tool_call_id: the call a tool turn
 * answers) and
 * conversation_global (the root settings.json). Every change is one transaction. An
 * assistant turn is inserted empty and incomplete when its message is sent and rewritten
 * while it generates, so a daemon killed mid-reply leaves the message and the reply so
 * far. Callers may use it from any thread (the database's lock orders them). */
#ifndef CHATFS_CONVERSATIONS_H
#define CHATFS_CONVERSATIONS_H

#include <stddef.h>
#include <stdint.h>

#include "store/db.h"

typedef struct convs_store convs_store;

typedef struct {
    int user;          /* 1 user, 0 assistant or tool */
    const char *text;
    size_t len;
    int complete;
    int64_t mtime_ns;
    const char *reasoning; /* NULL: none (stored as '') */
    size_t reasoning_len;
    int tool;                 /* 1: a tool's result (user 0) */
    const char *tool_calls;   /* an assistant turn's calls (JSON array text); NULL: none */
    const char *tool_call_id; /* a tool turn's call; NULL: none */
} convs_turn;

/* An image put in a conversation (its attachments/ directory). */
typedef struct {
    int64_t seq;        /* its order in the conversation */
    const char *name;
    const char *hash;   /* the content hash it is stored under (hex) */
    const void *bytes;  /* the file as written */
    size_t len;
    int turn;           /* the user turn (1-based) it went with; 0: it waits for the next message */
    int64_t mtime_ns;
} convs_attachment;

/* What convs_load reports, one conversation at a time. */
typedef struct {
    void *ud;
    /* returns 0, or -1 to stop loading */
    int (*conversation)(void *ud, int64_t id, const char *name, const char *system, const char *settings,
                        int64_t mtime_ns);
    int (*turn)(void *ud, int64_t conv, int idx, const convs_turn *t);
    /* after every turn, in seq order; NULL: not loaded */
    int (*attachment)(void *ud, int64_t conv, const convs_attachment *a);
} convs_loader;

/* The tables of db (created or migrated). NULL with the reason in err. */
convs_store *convs_open(store_db *db, char *err, size_t errlen);
void convs_close(convs_store *s);
int convs_load(convs_store *s, const convs_loader *l, char *err, size_t errlen);
/* The same for the conversation id alone: what the database holds of it, to put a
 * conversation in memory back to it after a change the database refused. */
int convs_load_one(convs_store *s, int64_t id, const convs_loader *l, char *err, size_t errlen);

/* Each change returns 0, or -errno with the reason in err and nothing changed (the
 * transaction rolled back): -ENOSPC when the disk is full, -EIO for any other failure
 * (db_end). convs_get_global returns 0 or -1. */
int convs_get_global(convs_store *s, const char *key, char **value); /* *value NULL when unset */
int convs_set_global(convs_store *s, const char *key, const char *value, char *err, size_t errlen);
int64_t convs_create(convs_store *s, const char *name, const char *system, const char *settings, int64_t mtime_ns,
                     char *err, size_t errlen); /* the new id, or -errno */
int convs_rename(convs_store *s, int64_t id, const char *name, char *err, size_t errlen);
int convs_delete(convs_store *s, int64_t id, char *err, size_t errlen);
int convs_set_system(convs_store *s, int64_t id, const char *system, int64_t mtime_ns, char *err, size_t errlen);
int convs_set_settings(convs_store *s, int64_t id, const char *settings, char *err, size_t errlen);
/* Replaces the turns from index `from` (1-based) on with turns[0..n-1]; with system
 * non-NULL, also the system prompt (an import). One transaction. */
int convs_replace_turns(convs_store *s, int64_t id, int from, const convs_turn *turns, int n, const char *system,
                        char *err, size_t errlen);
/* Rewrites a reply's turn while it is still marked incomplete (as it grows, and once at
 * its end), with the calls it made (tool_calls: JSON array text, NULL: none); a row that
 * an edit or a removal has replaced since is left alone. */
int convs_update_reply(convs_store *s, int64_t id, int idx, const char *text, size_t len, const char *reasoning,
                       size_t reasoning_len, const char *tool_calls, int complete, char *err, size_t errlen);
/* Rewrites one turn's content and completeness (an edited turn). */
int convs_update_turn(convs_store *s, int64_t id, int idx, const char *text, size_t len, int complete, char *err,
                      size_t errlen);
/* The id of the conversation called name: 0 when there is none, -1 when it cannot be read. */
int64_t convs_find(convs_store *s, const char *name);
/* A message sent without a mount (`chatfs ask`), as the mount stores one: in one
 * transaction, conversation name is made if new (with settings, the rendered defaults)
 * and given system when that is non-NULL, and the user turn text and an empty
 * incomplete assistant turn are appended after its `expect` turns; the reply is then
 * written with convs_update_reply. The conversation id, or -errno: -EBUSY when it no
 * longer has `expect` turns or its last reply is incomplete (the reason in err). */
int64_t convs_append_message(convs_store *s, const char *name, const char *settings, const char *system, int expect,
                             const char *text, size_t len, int64_t mtime_ns, char *err, size_t errlen);
/* An attachment stored (its bytes once per hash), in place of one of the same name;
 * removed (its bytes too when no conversation holds them any more); the turns some
 * attachments go with (seqs[i] to turns[i], 0: the next message). */
int convs_put_attachment(convs_store *s, int64_t id, const convs_attachment *a, char *err, size_t errlen);
int convs_drop_attachment(convs_store *s, int64_t id, const char *name, char *err, size_t errlen);
int convs_set_attachment_turns(convs_store *s, int64_t id, const int64_t *seqs, const int *turns, int n, char *err,
                               size_t errlen);
/* Rewrites one turn's reasoning (an edited turns/NNN-assistant.thinking.md). */
int convs_update_reasoning(convs_store *s, int64_t id, int idx, const char *text, size_t len, char *err,
                           size_t errlen);

#endif
