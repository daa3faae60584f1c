/* db.h - the one SQLite database chatfs keeps (checkpoints, conversations).
 *
 * Opening sets WAL, a busy timeout and file mode 0600. Each module of chatfs owns its
 * tables and brings its schema as a numbered list of migrations; db_migrate applies
 * the ones a database has not seen yet, each in its own transaction, and records the
 * module's version in the schema_versions table. A database written by a newer chatfs
 * (a version above what this build knows) is refused rather than misread. */
#ifndef CHATFS_DB_H
#define CHATFS_DB_H

#include <sqlite3.h>
#include <stddef.h>

/* Opens (creating if needed, with parent directories) the database at path.
 * NULL on failure with one line in err. */
sqlite3 *db_open(const char *path, char *err, size_t errlen);
void db_close(sqlite3 *db);

/* Brings module to version n_steps by running steps[version..n_steps-1] (SQL
 * scripts). Returns 0, or -1 with a message in err. */
int db_migrate(sqlite3 *db, const char *module, const char *const *steps, int n_steps, char *err, size_t errlen);
int db_module_version(sqlite3 *db, const char *module);

/* The default path: $XDG_DATA_HOME/chatfs/chatfs.db, else ~/.local/share/chatfs/chatfs.db.
 * Writes into buf; returns buf. */
char *db_default_path(char *buf, size_t n);

/* One process writes a database at a time. That process holds an exclusive flock on
 * PATH.lock, a small file next to the database naming it ("PID\nWHAT\n", WHAT for
 * example "chatfs mount on /home/u/chat"), taken before SQLite opens the database.
 * flock, not fcntl: its lock belongs to the open file, so nothing else the process
 * opens or closes can drop it, and the kernel drops it when the process dies.
 * Returns 0 when taken (*fd holds it until db_unlock or exit); 1 when another process
 * holds it, with who in owner ("chatfs mount on /home/u/chat (pid 123)"); -1 with the
 * reason in owner. Creates the database's directory if needed. */
int db_lock(const char *path, const char *what, int *fd, char *owner, size_t ownerlen);
void db_unlock(int fd);

/* Runs a statement list outside any result handling (BEGIN, COMMIT, ...). 0 or -1. */
int db_exec(sqlite3 *db, const char *sql, char *err, size_t errlen);

#endif
