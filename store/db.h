/* db.h - the one SQLite database chatfs keeps: conversations (conversations.h: the
 * mount's and `chatfs ask`'s) and checkpoints (ckpt_store.h).
 *
 * A process opens it once (db_open) and hands the object to the modules: one SQLite
 * connection per process. POSIX locks belong to a process, so a second open()+close()
 * of the file anywhere in it would drop the locks the connection holds and let another
 * process's connection take the database for unused and delete its WAL (SQLite's "How
 * To Corrupt", 2.2); only SQLite opens the file. The modules run their statements one
 * at a time on the connection: every use is between db_enter and db_leave (a recursive
 * lock, so a transaction may read inside itself), and no module calls out of store/
 * while it holds it, except to copy data it hands over.
 *
 * Opening sets WAL, a busy timeout and file mode 0600. Each module owns its tables and
 * brings its schema as a numbered list of migrations; db_migrate applies the ones a
 * database has not seen yet, each in its own transaction, and records the module's
 * version in schema_versions. A database written by a newer chatfs (a version above
 * what this build knows) is refused rather than misread.
 *
 * One process writes a database at a time (db_claim): a mount holds it while it runs,
 * and `chatfs ask` beside a mount goes through the mount's files (the note names the
 * mount point) instead of writing the database. */
#ifndef CHATFS_DB_H
#define CHATFS_DB_H

#include <sqlite3.h>
#include <stddef.h>

typedef struct store_db store_db;

/* Opens (creating if needed, with parent directories) the database at path. NULL on
 * failure with one line in err. */
store_db *db_open(const char *path, char *err, size_t errlen);
/* The same, but a file SQLite cannot read (or whose tables cannot be read) is moved
 * aside to PATH.corrupt-<time> and a new database started; *note then says so. When
 * may_move is 0 (another process uses the file) it only fails. */
store_db *db_open_or_renew(const char *path, int may_move, char *note, size_t notelen, char *err, size_t errlen);
void db_close(store_db *db);
const char *db_path(const store_db *db);

/* The connection, for the modules of store/ only: between db_enter and db_leave. */
sqlite3 *db_sql(store_db *db);
void db_enter(store_db *db);
void db_leave(store_db *db);

/* Brings module to version n_steps by running steps[version..n_steps-1] (SQL
 * scripts). Returns 0, or -1 with a message in err ("newer than" in it when the
 * database is from a newer chatfs). */
int db_migrate(store_db *db, const char *module, const char *const *steps, int n_steps, char *err, size_t errlen);
int db_module_version(store_db *db, const char *module);

/* Runs statements outside any result handling (BEGIN, COMMIT, ...); the caller is
 * between db_enter and db_leave. 0 or -1. */
int db_exec(store_db *db, const char *sql, char *err, size_t errlen);
/* BEGIN IMMEDIATE after db_enter; db_end commits (ok) or rolls back, then db_leave.
 * 0, or -errno with SQLite's message in err (then rolled back): -ENOSPC when the
 * disk is full (a commit, or a statement of the transaction, found no room), -EAGAIN
 * when another connection held the database past the busy timeout, -EIO for anything
 * else. */
int db_begin(store_db *db, char *err, size_t errlen);
int db_end(store_db *db, int ok, char *err, size_t errlen);
/* The errno the connection's last failure stands for: ENOSPC (SQLITE_FULL, or an I/O
 * error whose system errno is ENOSPC), EAGAIN (SQLITE_BUSY, SQLITE_LOCKED: another
 * connection holds the database) or EIO. Between db_enter and db_leave. */
int db_errno(store_db *db);
/* How long a statement waits for another connection's lock before it fails with
 * SQLITE_BUSY (-EAGAIN); db_open sets 5000 ms. */
void db_busy_timeout(store_db *db, int ms);

/* The default path: $XDG_DATA_HOME/chatfs/chatfs.db, else ~/.local/share/chatfs/chatfs.db.
 * Writes into buf; returns buf. */
char *db_default_path(char *buf, size_t n);

/* One process writes a database at a time. That process holds an exclusive flock on
 * PATH.lock, a small file next to the database naming it ("PID\nWHAT\n", WHAT for
 * example "chatfs mount on /home/u/chat"), taken before SQLite opens the database.
 * flock, not fcntl: its lock belongs to the open file, so nothing else the process
 * opens or closes can drop it, and the kernel drops it when the process dies.
 * Returns 0 when taken (*fd holds it until db_unclaim or exit); 1 when another process
 * holds it, with who in owner ("chatfs mount on /home/u/chat (pid 123)"); -1 with the
 * reason in owner. With wait, a holder is given two seconds to let go (one that is
 * finishing, up to DB_CLAIM_WAIT_S). Creates the database's directory if needed. */
int db_claim(const char *path, const char *what, int wait, int *fd, char *owner, size_t ownerlen);
/* What the note of path's lock says: the holder's pid and WHAT ("chatfs mount on
 * /home/u/chat", "chatfs ask"). 0, or -1 when there is no complete note. It says who
 * took the lock last: whether it still holds it is db_claim's answer. */
int db_holder(const char *path, long *pid, char *what, size_t whatlen);
/* The holder is on its way out (a mount after its unmount, writing its last
 * checkpoints): its note says so, and db_claim then waits for it (up to
 * DB_CLAIM_WAIT_S seconds) instead of refusing, so `fusermount3 -u m; chatfs mount m`
 * works. */
void db_claim_finishing(int fd);
#define DB_CLAIM_WAIT_S 60
void db_unclaim(int fd);

#endif
