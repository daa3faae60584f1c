/* chatfs_impl.h - what the parts of the filesystem's logic share: the filesystem, its
 * conversations, turns, reply streams, generations, scratch files and nodes, and the few
 * functions one part calls in another. Nothing outside fs/ includes this; callers use
 * chatfs.h.
 *
 *   chatfs.c      lifetime, the operations on names (lookup, mkdir, rename, readdir ...)
 *   files.c       the operations on open files (open, read, write, flush, setattr ...)
 *   names.c       what names and inodes point at, attributes
 *   scratch.c     editors' scratch files
 *   conv.c        a conversation in memory: turns, reply streams, the error file; helpers
 *   generation.c  a reply being generated: the engine's callbacks, starting, stopping
 *   views.c       what each file reads as
 *   commit.c      what a finished write (or a rename onto a file) does
 *
 * Locking: fs->mu guards every structure here. The engine is called without it (its
 * callbacks take it); the database has its own lock and is only taken after fs->mu.
 *
 * The shared functions are prefixed cfs_ (chatfs internal) so that libchatfs.a's global
 * names stay specific; what one file uses alone stays static there. */
#ifndef CHATFS_FS_CHATFS_IMPL_H
#define CHATFS_FS_CHATFS_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "fs/chatfs.h"
#include "fs/settings.h"

#define MAX_BUFFER (64u << 20)    /* most bytes one write handle or scratch file holds */
#define SCRATCH_CAP (64u << 20)   /* most bytes all scratch files together hold */

enum kind {
    K_NONE, K_ROOT, K_README, K_GSETTINGS, K_STATS, K_CONV, K_MESSAGE, K_REPLY, K_SYSTEM, K_SETTINGS,
    K_TRANSCRIPT, K_MESSAGES, K_STATUS, K_ERROR, K_CTL, K_TURNS, K_TURN, K_THINKING, K_THINK, K_USAGE, K_SCRATCH,
    K_CALLS, K_CALL, K_CALL_NAME, K_CALL_ARGS, K_CALL_RESULT, K_TOOLS, K_GTOOLS, K_ATTACHMENTS, K_ATTACH
};
/* K_ATTACHMENTS: a conversation's attachments/, K_ATTACH: an image in it (attachments.c);
 * node.turn is its index in conv.att */
/* K_USAGE: a conversation's usage.json (tokens, context left, its checkpoints), rendered
 * outside fs->mu as stats.json is: cfs_usage_text */
/* K_TOOLS, K_GTOOLS: a conversation's tools.json and the root's (the tools setting) */
/* K_CALLS: calls/, K_CALL: calls/ID/, and its name, arguments.json and result (calls.c);
 * node.turn is the call's index in the conversation */
/* K_THINKING: the conversation's `thinking` file (the reasoning of the current or last
 * reply, streamed like `reply`); K_THINK: turns/NNN-assistant.thinking.md, an assistant
 * turn's reasoning */

/* turn.complete, as the database keeps it: 0 while a reply grows (left so when the
 * daemon died), TURN_STOPPED for a reply stopped and kept as far as it got */
enum { TURN_INCOMPLETE = 0, TURN_COMPLETE = 1, TURN_STOPPED = 2 };

typedef struct {
    int user;             /* 1: the user's; 0: the model's or (tool) a tool's result */
    char *text;
    size_t len;
    int complete; /* TURN_* */
    int64_t mtime;
    char *reasoning;      /* an assistant turn's reasoning ("" when none; NULL only for user turns) */
    size_t reasoning_len;
    int tool;             /* 1: a tool's result, the answer to call_id */
    char *calls;          /* an assistant turn's calls: OpenAI's tool_calls array (JSON text), NULL: none */
    char *call_id;        /* a tool turn's call */
} turn;

/* One assistant reply as it is produced; reply handles keep the one they opened. */
typedef struct {
    int refs;
    char *buf;
    size_t len, cap;
    int done, failed;
} stream;

enum state { ST_IDLE, ST_BUSY, ST_DONE, ST_FAILED };

/* An image put in a conversation (attachments.c) */
typedef struct {
    char *name;
    char *data;       /* the file's bytes, as written */
    size_t len;
    char hash[33];    /* the content hash the database stores them under */
    int64_t seq;      /* its order, and its inode (SUB_ATTACH0 + seq) */
    int turn;         /* the user turn (1-based) it went with; 0: it waits for the next message */
    int64_t mtime;
    int writing;      /* created, its bytes not taken yet (the writer has not closed it) */
} attachment;

struct gen;
typedef struct conv {
    struct chatfs *fs;
    int64_t id;
    char *name;
    int refs, deleted;
    char *system;
    conv_settings st;
    turn *turns;
    int n_turns, cap_turns;
    int64_t mtime, mtime_system, mtime_settings, mtime_message, mtime_hist;
    struct gen *gen;  /* the running generation, NULL when idle */
    int state;        /* enum state */
    gen_report rep;   /* the last progress report */
    enum gen_finish finish; /* of the last reply */
    char *error;      /* the error file; NULL when fine */
    char *fail;       /* why the last reply failed (status) */
    char *refused;    /* why the last message was not sent (cfs_refuse_message); NULL: it was */
    int rep_turn;     /* 1 + the index of the assistant turn the reply and status are about; 0: none */
    int pending;      /* 1 + the index of the first turn the database has not taken because another
                         process held it (SQLITE_BUSY): the saver stores turns[pending-1..]; 0: none */
    int unsaved;      /* 1 + the index of a reply turn the database refused (a full disk), which
                         the saver writes again every second until it fits; 0: none */
    attachment *att;  /* attachments/, in the order they were added */
    int n_att;
    int64_t next_att_seq;
    stream *reply;    /* the current or last reply */
    stream *thinking; /* its reasoning: ends when the answer starts (or the reply ends) */
    uint32_t fresh_tid;   /* cp or mv made it: that thread sees its files as it creates them */
    int fresh_turns;      /* ... and it has made turns/ */
    uint32_t maker_tid;   /* the thread that made it, which does not see turns/ until it makes it,
                             reads something here or sends (copyin.c) */
    int64_t young_until;  /* the copy window (copyin.c), CLOCK_MONOTONIC; 0: over */
    struct {
        uint64_t hash;    /* what a file read as when last looked at (names.c: content_mtime) */
        int64_t mtime;
    } seen[K_SCRATCH];
} conv;

typedef struct gen {
    chatfs *fs;
    conv *c;
    stream *s;
    stream *ts;   /* the reasoning, ended at the first text of the answer */
    int turn;     /* index of the assistant turn it writes */
    int refs;     /* the submitter and the engine */
    int detached; /* stopped or deleted: callbacks only finish the bookkeeping */
    uint64_t id;
    int cancel_pending; /* stopped before submit returned the id */
    int64_t last_save;
    struct cJSON *calls; /* the calls the reply made so far: OpenAI's tool_calls array; NULL: none */
} gen;

typedef struct scratch {
    struct scratch *next;
    uint64_t ino, parent;
    char *name;
    int symlink;
    char *data;
    size_t len, cap;
    uint32_t mode;
    int64_t mtime;
    int refs, linked;
    int pending;  /* a turn that came before its turn (copyin.c) */
} scratch;

struct chatfs {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* n_running changes */
    fs_backend *be;
    convs_store *st;
    conv **convs;
    int n_convs, cap_convs;
    scratch *scratch;
    uint64_t next_scratch;
    conv_settings defaults;
    conv_settings builtin; /* the root's defaults: the built-in values with the sampling the backend recommends */
    int64_t t_start, mtime_root, mtime_settings;
    uint64_t stats_hash; /* stats.json's last content (FNV-1a), and when it last changed */
    int64_t mtime_stats;
    void (*notify)(void *);
    void *notify_ud;
    int n_running;
    int wake_pending; /* a reply ended inside an operation: wake readers after unlocking */
    void *undo;       /* unlinks a copy tool may take back (copyin.c) */
    /* the saver thread (generation.c): replies' turns due for the database */
    struct save_req *saves;
    struct save_req *retries; /* saves the database refused (a full disk): tried again every second */
    pthread_cond_t save_cv;
    pthread_t saver;
    int saver_running, saver_stop, saving;
    char model[640];  /* "FILE (ARCH), context N tokens per conversation": README, the mount's line */
    int can_think;    /* the backend's can_think: 1, 0, or -1 unknown (README) */
    FILE *log;        /* chatfs_set_log: where -f writes a line per reply (level 1) and per change (2) */
    int log_level;
    /* counters for stats.json */
    uint64_t n_sent, n_replies, n_failed, n_stopped, n_imports, n_regenerated;
};

/* what an inode or a name points at (resolve, child in chatfs.c) */
typedef struct {
    int kind;
    conv *c;
    int turn;
    scratch *sc;
} node;

/* a growing text: the views render into it; oom when an allocation failed */
typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

/* appending to a view's text (views.c); an allocation that fails sets oom */
void cfs_sb_add(sbuf *b, const char *s, size_t n);
void cfs_sb_str(sbuf *b, const char *s);
void cfs_sb_fmt(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
struct cJSON;
void cfs_sb_json(sbuf *b, const struct cJSON *v, int depth); /* pretty: two spaces a level */

/* messages.json parsed: the system prompt and the turns (cfs_parse_import) */
typedef struct {
    char *system;   /* "" when the import has no system message */
    int has_system;
    turn *turns;
    int n;
    struct {        /* the user messages' images (image_url parts with data: URLs) */
        int turn;   /* index in turns */
        char *bytes;
        size_t len;
    } *images;
    int n_images;
} import;

/* ---- inode numbers (names.c) ---- */

#define CONV_SHIFT 24
#define SUB_TURNS 16
#define SUB_TURN0 32
#define SUB_THINK0 (1 << 23) /* turn k's .thinking.md: SUB_THINK0 + k (turns stay below) */
#define SUB_CALLS 17
#define SUB_ATTACHMENTS 18
#define SUB_ATTACH0 ((1 << 22) + (1 << 21)) /* attachment seq's file (calls stay below) */
#define SUB_CALL0 (1 << 22)  /* call k's directory: SUB_CALL0 + 4k, its files + 1..3 (turns stay below) */
#define SCRATCH_BIT (1ull << 62)

/* an open file (files.c) */
struct fs_handle {
    uint64_t ino;
    int kind;
    conv *c;      /* a reference, or NULL */
    int turn;     /* K_TURN: 0-based index */
    int flags;
    int wr, discard, how; /* how: COMMIT_EDIT, COMMIT_NEW_TURN or COMMIT_COPY (commit.c) */
    char *buf;    /* what a writer wrote, committed at flush */
    size_t len, cap;
    int dirty, truncated, written, committed;
    size_t checked; /* buf[0..checked) is known to be whole UTF-8 characters (fs_write) */
    stream *s;    /* K_REPLY, K_THINKING: the stream this handle reads */
    off_t pos;    /* where the last read ended */
    scratch *sc;
    /* the rendering of a view (stats.json, status, transcript.md, ...) this handle's
     * reads have come from, so that several read() calls return one text (files.c
     * read_view) */
    char *view;
    size_t view_len;
};

/* ---- attachments.c: the attachments/ directory ---- */

int cfs_attach_find(const conv *c, const char *name);  /* index, -1: none */
int cfs_attach_by_seq(const conv *c, int64_t seq);
/* a new attachment called name (or the waiting one of that name, to replace): its index
 * in *out; 0 or -errno with the reason in the error file (ENOTSUP the engine takes no
 * images, EACCES it went with a turn already, EINVAL a bad name) */
int cfs_attach_create(chatfs *fs, conv *c, const char *name, int *out);
int cfs_attach_writable(conv *c, int k);               /* 0, or -EACCES: it was sent */
/* the bytes a writer wrote, checked (the engine decodes them) and stored: 0 or -errno
 * (EINVAL not an image the engine takes: the reason in the error file, nothing kept) */
int cfs_attach_commit(chatfs *fs, conv *c, int k, const char *data, size_t len);
void cfs_attach_abandon(conv *c, int64_t seq);          /* created and closed without bytes: gone */
int cfs_attach_unlink(chatfs *fs, conv *c, int k);
int cfs_attach_bind(chatfs *fs, conv *c, int turn);     /* the waiting ones go with user turn `turn` */
void cfs_attach_repair(chatfs *fs, conv *c);            /* those of turns that are gone wait again */
int cfs_attach_images(const conv *c, int turn, chat_image *out); /* pointers into c; returns the count */
/* the lines that name user turn `turn`'s (1-based) images, before its text in its turn
 * file and in transcript.md: "> image attachments/NAME (N bytes)" and a blank line each */
void cfs_attach_lines(const conv *c, int turn, sbuf *b);
/* where a user turn's text begins in what a writer wrote: after such lines (they name
 * the images, they are not words of the message) */
size_t cfs_attach_lines_end(const char *text, size_t len);
int cfs_attach_load(conv *c, const convs_attachment *a);
/* an image an import brings for user turn `turn` (1-based): checked and stored as
 * attachments/TTT-K.EXT, sent already; 0 or -errno (the reason in the error file) */
int cfs_attach_import(chatfs *fs, conv *c, int turn, const char *bytes, size_t len);
/* the same check without storing: 0, or -errno with the reason in err */
int cfs_attach_check(chatfs *fs, const char *bytes, size_t len, char *err, size_t errlen);
void cfs_attach_free_all(conv *c);
void cfs_attach_unlink_memory(conv *c, int k);          /* gone from memory only (a reload) */

/* ---- calls.c: the calls/ directory ---- */

/* one call of the conversation (cfs_call_get): malloc'd texts */
typedef struct {
    int turn;        /* the assistant turn that made it */
    char *id, *name, *arguments; /* arguments: a JSON object's text */
    int result;      /* the tool turn that answers it, -1: none yet */
} cfs_call;
int cfs_call_count(const conv *c);
int cfs_call_get(const conv *c, int k, cfs_call *out); /* 0 or -ENOENT / -ENOMEM */
void cfs_call_free(cfs_call *call);
int cfs_call_find(const conv *c, const char *id);      /* its index, -1: none */
void cfs_render_call(const conv *c, const node *nd, sbuf *b);
/* whether call k's result may be written now (0, or -errno, the reason in `error`), and
 * the write: a tool turn; the model goes on once every call of the reply has its result */
int cfs_check_result(conv *c, int k);
int cfs_commit_result(chatfs *fs, conv *c, int k, const char *text, size_t len);

/* ---- names.c: what names and inodes point at ---- */

typedef struct {
    const char *name;
    int kind, sub;
    uint32_t mode;
} cfs_file_entry;
typedef struct {
    const char *name;
    int kind;
    uint64_t ino;
    uint32_t mode;
} cfs_root_entry;
#define CFS_N_ROOT_FILES 4
#define CFS_N_CONV_FILES 13
extern const cfs_file_entry cfs_conv_files[CFS_N_CONV_FILES]; /* a conversation's files, in inode order */
extern const cfs_root_entry cfs_root_files[CFS_N_ROOT_FILES];

conv *cfs_find_conv_id(chatfs *fs, int64_t id);
conv *cfs_find_conv_name(chatfs *fs, const char *name);
conv *cfs_conv_add(chatfs *fs, int64_t id, const char *name);
void cfs_conv_remove(chatfs *fs, conv *c);
/* a copy tool (cp -r, mv across filesystems) that made a conversation sees its files
 * only as it creates them: see fs/copyin.c */
int cfs_copier(uint32_t tid);
int cfs_fresh_for(const conv *c, uint32_t tid);
uint64_t cfs_conv_ino(const conv *c, int sub);
const char *cfs_kind_name(int kind); /* "reply", "settings.json" ... */
int cfs_resolve(chatfs *fs, uint64_t ino, node *nd);
int cfs_is_dir_kind(int k);
uint64_t cfs_node_ino(const node *nd);
int cfs_attr_of(chatfs *fs, const node *nd, fs_attr *a);
/* What a view's modification time follows: a hash of its text (FNV-1a and the length). */
uint64_t cfs_text_hash(const char *text, size_t len);
/* A conversation's file's time, moved to now when its text (a hash of it) changed since
 * the last look; kept: the time the operations keep. fs->mu held. */
int64_t cfs_content_mtime(conv *c, int kind, int64_t kept, const char *text, size_t len);
/* "001-user.md" -> 0-based index and role; -1 for other names */
int cfs_parse_turn_name(const char *name, int *user);
void cfs_turn_name(const conv *c, int i, char *buf, size_t n);
/* "002-assistant.thinking.md" -> 0-based index; -1 for other names */
int cfs_parse_thinking_name(const char *name);
void cfs_thinking_name(int i, char *buf, size_t n);
/* turn i's reasoning file is listed: an assistant turn with reasoning (so far) */
int cfs_has_thinking(const conv *c, int i);
/* Looks name up in directory node dir; tid decides what a copy tool sees (copyin.c). */
int cfs_child(chatfs *fs, uint32_t tid, const node *dir, const char *name, node *out);
int cfs_valid_conv_name(const char *name);

/* ---- scratch.c: editors' scratch files ---- */

scratch *cfs_find_scratch_ino(chatfs *fs, uint64_t ino);
scratch *cfs_find_scratch(chatfs *fs, uint64_t parent, const char *name);
scratch *cfs_scratch_new(chatfs *fs, uint64_t parent, const char *name, uint32_t mode);
void cfs_scratch_unref(scratch *s);
void cfs_scratch_unlink(chatfs *fs, scratch *s);
int cfs_scratch_set(chatfs *fs, scratch *s, const char *data, size_t len);
/* 1 when name follows an editor's or a tool's scratch pattern (.f.swp, f~, #f#, 4913,
 * .f.XXXXXX, sedXXXXXX, f.tmp ...) */
int cfs_scratch_name_ok(const char *name);
/* -EPERM, with the reason in c's error file (c may be NULL) */
int cfs_scratch_refuse(conv *c, const char *name);
/* 0 when s may hold new_len bytes within SCRATCH_CAP (all scratch files), else -ENOSPC */
int cfs_scratch_room(chatfs *fs, const scratch *s, size_t new_len);
int cfs_has_scratch(chatfs *fs, uint64_t dir);
int cfs_can_hold_scratch(const node *dir);

/* ---- copyin.c: copies brought in by cp -a, tar -xf, rsync -a, shutil.copytree ---- */

int cfs_young(const conv *c);  /* mkdir'ed moments ago, nothing sent yet: a copy may be arriving */
void cfs_young_begin(conv *c); /* mkdir */
void cfs_young_touch(conv *c); /* a file of the copy came: the window goes on */
void cfs_young_end(chatfs *fs, conv *c); /* a message is on its way: the conversation is in use */
/* the thread that made c looked at it (a read, a listing): it sees turns/ from now on */
void cfs_maker_looked(conv *c, uint32_t tid);
/* unlink of a conversation's own file: hidden from that thread until it creates it again */
void cfs_hide(chatfs *fs, uint32_t tid, const conv *c, int sub);
int cfs_hidden(chatfs *fs, uint32_t tid, const conv *c, int sub);
int cfs_unhide(chatfs *fs, uint32_t tid, const conv *c, int sub); /* 1 when it was hidden */
int cfs_root_copy_ok(chatfs *fs, int kind, const char *data, size_t len);
/* unlink of turns[from..]: kept for a moment so that the same thread creating turn
 * `from` again gets them back (1) */
void cfs_keep_removed(chatfs *fs, uint32_t tid, const conv *c, int from);
int cfs_restore_removed(chatfs *fs, uint32_t tid, conv *c, int idx, int user);
/* appends the waiting turns whose turn has come */
void cfs_adopt_pending(chatfs *fs, conv *c);
void cfs_copyin_forget(chatfs *fs, int64_t conv_id); /* the conversation is gone */
void cfs_copyin_free(chatfs *fs);

/* ---- text.c: UTF-8 without NUL; BOM and CRLF normalised ---- */

/* the longest prefix of s[0..n) made of whole UTF-8 characters; *bad when what follows
 * is not UTF-8 (or a NUL) rather than a character cut short */
size_t cfs_utf8_valid_prefix(const char *s, size_t n, int *bad);
/* 0, or -EINVAL with the reason in c's error file (c may be NULL): what names the file */
int cfs_check_text(conv *c, const char *what, const char *s, size_t n);
int cfs_json_has_nul(const char *s, size_t n); /* a \u0000 escape */
size_t cfs_skip_bom(const char *s, size_t n); /* 3 when s starts with a byte-order mark */
/* without a leading byte-order mark and with CRLF as LF; malloc'd, NUL-terminated */
char *cfs_normalise(const char *s, size_t n, size_t *out_len);
/* every byte that is not part of a UTF-8 character (or is a NUL) as U+FFFD; malloc'd */
char *cfs_utf8_repair(const char *s, size_t n, size_t *out_len);

/* ---- chatfs.c ---- */

void cfs_touch_dir(chatfs *fs, const node *dir); /* a name in it came or went */

/* ---- conv.c: helpers, streams, conversations ---- */

int64_t cfs_now_ns(void);  /* CLOCK_REALTIME: modification times */
int64_t cfs_mono_ns(void); /* CLOCK_MONOTONIC: intervals */
/* grows *p (capacity *cap) to hold need bytes; 0 or -ENOMEM / -EFBIG */
int cfs_reserve(char **p, size_t *cap, size_t need);
char *cfs_memdup0(const char *s, size_t n); /* n bytes and a NUL */
/* Texts are stored without the one newline that editors and echo add; files show it. */
size_t cfs_strip_newline(const char *s, size_t n);
void cfs_set_error(conv *c, const char *fmt, ...) __attribute__((format(printf, 2, 3))); /* the error file */
/* a line on the -f log when level <= the log's level: "chatfs: ..." */
void cfs_log(chatfs *fs, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void cfs_clear_error(conv *c);

stream *cfs_stream_new(void); /* one reference */
void cfs_stream_unref(stream *s);
int cfs_stream_add(stream *s, const char *t, size_t n); /* 0 or -1 */
/* the reply file of a finished turn (t may be NULL): its text and a newline */
stream *cfs_stream_of_turn(const turn *t);

void cfs_conv_unref(conv *c);
/* What turn i reads as (without its file's newline): a reply being generated lives in
 * its stream until it ends, the rest in the turn. */
const char *cfs_turn_text(const conv *c, int i, size_t *len);
int cfs_turn_push(conv *c, int user, const char *text, size_t len, int complete, int64_t mtime);
/* a turn's role as turns/ names it (cfs_parse_turn_name) */
enum { ROLE_ASSISTANT = 0, ROLE_USER = 1, ROLE_TOOL = 2 };
int cfs_turn_role_code(const turn *t);
/* cfs_turn_push of a role: a tool turn answers the next call of the reply before it that
 * has no result yet (none when that reply's calls are not known: an import brings them) */
int cfs_turn_push_role(conv *c, int role, const char *text, size_t len, int complete, int64_t mtime);
/* a turn as the database holds it, appended to c (loading); 0 or -1 */
int cfs_turn_load(conv *c, const convs_turn *t);
/* "user", "assistant" or "tool" */
const char *cfs_turn_role(const turn *t);
/* The calls of the last assistant turn that made calls, when some of them have no result
 * yet in the turns after it: their count in *n_calls, those without a result in
 * *missing, the turn's index returned; -1 when no call waits. */
int cfs_calls_waiting(const conv *c, int *n_calls, int *missing);
/* the tool turn after assistant turn k that answers call id, -1: none */
int cfs_call_result(const conv *c, int k, const char *id);
/* Appends a tool turn answering each call of assistant turn k that has no result yet,
 * with text `why` (a new message went on without them). 0 or -ENOMEM. */
int cfs_answer_missing_calls(conv *c, int k, const char *why);
/* what the model sees for a call whose result never came (a new message went on) */
#define CFS_NO_RESULT "error: no result was given for this call"
/* turn i's reasoning, as cfs_turn_text ("" for a user turn) */
const char *cfs_turn_reasoning(const conv *c, int i, size_t *len);
/* replaces turn i's reasoning (an assistant turn); 0 or -ENOMEM */
int cfs_set_reasoning(turn *t, const char *text, size_t len);
void cfs_turn_free(turn *t);
void cfs_turns_truncate(conv *c, int n);
/* The reply and thinking files show the last assistant turn again (after an edit or a
 * load); a refused message's mark (cfs_refuse_message) goes: the history changed. */
void cfs_reset_reply(conv *c);
/* A message that was not sent (refused at its write or when sent): until a reply starts
 * or the history changes, reply and thinking read EIO (never the previous answer as if it
 * answered this message) and status says "error: the message was not sent: why". */
void cfs_refuse_message(conv *c, const char *why);
int cfs_busy(const conv *c); /* a reply is being generated */
/* Persists turns[from..] (0-based) and, with with_system, the system prompt. 0, or
 * -ENOSPC (the disk is full) / -EAGAIN (another process holds the database) / -EIO:
 * then the error file says `what` ("the message") was not stored, and c is put back to
 * what the database holds. With turns pending (c->pending), a busy database adds this
 * change to them instead (0). */
int cfs_save_turns(chatfs *fs, conv *c, int from, int with_system, const char *what);
/* A change the database refused (rc -ENOSPC or -EIO, err its reason): the error file
 * says what was not stored; returns rc. */
int cfs_store_failed(conv *c, int rc, const char *what, const char *err);
/* c in memory becomes what the database holds of it again (turns, reasoning, system
 * prompt); not while it generates. */
void cfs_reload(chatfs *fs, conv *c);

/* ---- generation.c ---- */

void cfs_notify(chatfs *fs); /* wakes parked readers; call without fs->mu */
/* for operations that may end a reply (stop, rm): readers are woken after unlocking */
void cfs_unlock(chatfs *fs);
/* Builds the engine's message list from c (system first); pointers into c. */
chat_msg *cfs_build_msgs(const conv *c, int n_turns, int *n);
/* Starts a reply to c's history, whose last turn is the user's; releases fs->mu around
 * the engine call. drop_user: the user turn goes away again if the engine refuses it. */
int cfs_start_gen(chatfs *fs, conv *c, int drop_user);
/* Stops c's generation (if any); releases fs->mu while the engine is told. */
void cfs_stop_gen(chatfs *fs, conv *c);
/* The saver thread that writes replies to the database (only with a store): started by
 * chatfs_new; drain waits until what is due is written (chatfs_stop); stop writes the
 * rest and ends it (chatfs_free). Called without fs->mu. */
int cfs_saver_start(chatfs *fs);
void cfs_saver_drain(chatfs *fs);
/* c->pending is set: the saver stores c's turns from there when the database lets go
 * (tried every second); the error file says they are not stored yet. fs->mu held. */
void cfs_save_pending(chatfs *fs, conv *c);
/* c's pending turns were stored: the note in the error file goes. fs->mu held. */
void cfs_pending_stored(chatfs *fs, conv *c);
void cfs_saver_stop(chatfs *fs);

/* The session a conversation's requests name (gen_settings.session): its checkpoints
 * and budgets in the engine. */
void cfs_session_name(int64_t conv_id, char *buf, size_t len);

/* ---- views.c ---- */

/* Renders the content of a file node into b. fs->mu held. */
int cfs_render(chatfs *fs, const node *nd, sbuf *b);
/* stats.json, malloc'd: asks the engine, then takes fs->mu itself (call it without) */
char *cfs_stats_text(chatfs *fs, size_t *len);
/* usage.json of the conversation with database id conv_id, malloc'd, the same way (call
 * it without fs->mu); NULL when it is gone or out of memory */
char *cfs_usage_text(chatfs *fs, int64_t conv_id, size_t *len);
/* stats.json and usage.json: their text depends on the backend's lock (cfs_stats_text,
 * cfs_usage_text) */
int cfs_is_live(int kind);

/* ---- commit.c ---- */

/* README, stats.json, reply, transcript.md, status, error: they only show state */
int cfs_is_derived(int kind);
/* how a write reached a file: through an existing file (an edit), a turn created by its
 * writer (filled, nothing generated), or a copy tool's create over an existing file (a
 * turn must stay as it is) */
enum { COMMIT_EDIT = 0, COMMIT_NEW_TURN = 1, COMMIT_COPY = 2 };
/* data written to (or renamed onto) a file node; fs->mu held */
int cfs_commit(chatfs *fs, const node *nd, int how, const char *data, size_t len);
/* the checks fs_write makes at each write (final 0), so errors come back at write(2) */
int cfs_set_settings(chatfs *fs, conv *c, const char *text, size_t len, int final);
int cfs_set_tools(chatfs *fs, conv *c, const char *text, size_t len, int final);
int cfs_run_ctl(chatfs *fs, conv *c, const char *text, size_t len, int final);
/* A message being written: rendered (the template may refuse it: -EINVAL) and, near the
 * context, counted (-EFBIG); the reason in c's error file. */
int cfs_check_message(chatfs *fs, conv *c, const char *text, size_t len);
/* A system prompt being written: with c's history it leaves room for a message in the
 * context, else -EFBIG with the reason in c's error file. */
int cfs_check_system(chatfs *fs, conv *c, const char *text, size_t len);
/* The tokens of c's conversation as its next prompt renders (without a new message):
 * >= 0, -2 when the backend cannot count, -1 when the template refuses it or out of
 * memory. fs->mu held; released while the backend counts. */
int cfs_count_conversation(chatfs *fs, conv *c);
/* ---- import.c: messages.json written ---- */

/* 1: done; 0: not complete JSON yet; -1: invalid (reason in err) */
int cfs_parse_import(const char *text, size_t len, import *im, char *err, size_t errlen);
/* the import's turns beyond c's added (their calls filled in where c's lack them), its
 * system prompt taken: 0, or -errno with the reason in c's error file */
int cfs_import(chatfs *fs, conv *c, const char *text, size_t len);
/* An import only adds turns after the ones c has: -1 when it can, else (with the reason
 * in c's error file) the index of the first turn it would change. */
int cfs_import_conflict(conv *c, const import *im);
void cfs_import_free(import *im);

#endif
