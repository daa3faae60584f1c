/* test_chatfs.c - the filesystem's logic without FUSE (fs/chatfs.h) on the fake engine:
 * the commit rules as shells and editors exercise them (the syscall sequences that echo,
 * cp, vim, nano, emacs, rsync and tar make, replayed as calls), fresh copies, errnos, imports,
 * turns, persistence across a reopen, a random-operation soak and concurrent readers
 * (also meant for ASan/UBSan and TSan builds). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fs/chatfs.h"
#include "tests/check.h"

static fs_backend *be;
static store_db *database;
static convs_store *st;
static chatfs *fs;
static char dbpath[256];
static uint32_t me;
/* mkdir(1) in a shell: a process of its own (the thread that makes a conversation does
 * not see its turns/ at once, see fs/copyin.c) */
#define SHELL_TID 0x7ffffff0u

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void open_fs(const char *fake) {
    char err[512];
    be = backend_fake_open(fake, err, sizeof err);
    REQUIRE(be, "fake: %s", err);
    database = db_open(dbpath, err, sizeof err);
    REQUIRE(database, "database: %s", err);
    st = convs_open(database, err, sizeof err);
    REQUIRE(st, "store: %s", err);
    fs = chatfs_new(be, st, err, sizeof err);
    REQUIRE(fs, "chatfs: %s", err);
}

static void close_fs(void) {
    chatfs_stop(fs);
    be->close(be);
    chatfs_free(fs);
    convs_close(st);
    db_close(database);
}

/* path lookup: "a/turns/001-user.md" -> ino, or negative errno */
static int64_t ino_of(const char *path) {
    uint64_t ino = FS_ROOT_INO;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *save = NULL, *p = strtok_r(buf, "/", &save); p; p = strtok_r(NULL, "/", &save)) {
        fs_attr a;
        int rc = fs_lookup(fs, me, ino, p, &a);
        if (rc) return rc;
        ino = a.ino;
    }
    return (int64_t)ino;
}

static uint64_t parent_of(const char *path, const char **name) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", path);
    char *slash = strrchr(buf, '/');
    *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    if (!slash) return FS_ROOT_INO;
    *slash = 0;
    return (uint64_t)ino_of(buf);
}

/* Reads a whole file, waiting while a reply streams. Returns malloc'd text or NULL,
 * with the final status (0 or -errno) in *rc. */
static char *cat(const char *path, int *rc) {
    int64_t ino = ino_of(path);
    *rc = (int)ino;
    if (ino < 0) return NULL;
    fs_handle *h;
    *rc = fs_open(fs, me, (uint64_t)ino, O_RDONLY, &h);
    if (*rc) return NULL;
    size_t len = 0;
    char *out = calloc(1, 1);
    char buf[100];
    for (int spins = 0; spins < 5000;) {
        ssize_t n = fs_read(fs, h, (off_t)len, sizeof buf, buf);
        if (n == -EAGAIN) {
            sleep_ms(2);
            spins++;
            continue;
        }
        if (n <= 0) {
            *rc = (int)n;
            break;
        }
        out = realloc(out, len + n + 1);
        memcpy(out + len, buf, n);
        len += n;
        out[len] = 0;
    }
    fs_release(fs, h);
    return out;
}

static int text_is(const char *path, const char *want) {
    int rc;
    char *t = cat(path, &rc);
    int ok = t && !strcmp(t, want);
    if (!ok) fprintf(stderr, "  %s: got %s%s%s, want \"%s\"\n", path, t ? "\"" : "", t ? t : "(error)", t ? "\"" : "", want);
    free(t);
    return ok;
}

static int text_is_prefix(const char *path, const char *want) {
    int rc;
    char *t = cat(path, &rc);
    int ok = t && !strncmp(t, want, strlen(want));
    if (!ok) fprintf(stderr, "  %s: got %s, want it to begin \"%s\"\n", path, t ? t : "(error)", want);
    free(t);
    return ok;
}

/* echo TEXT > path, as bash does it: open(O_TRUNC), empty flush (dup2), write, flush,
 * release. Returns the first error (open, write or flush). */
static int echo_to(const char *path, const char *text) {
    const char *name;
    uint64_t parent = parent_of(path, &name);
    int64_t ino = ino_of(path);
    fs_handle *h = NULL;
    fs_attr a;
    int rc = ino >= 0 ? fs_open(fs, me, (uint64_t)ino, O_WRONLY | O_TRUNC, &h)
                      : fs_create(fs, me, parent, name, 0644, O_WRONLY | O_CREAT | O_TRUNC, &h, &a);
    if (rc) return rc;
    fs_flush(fs, h);
    ssize_t n = fs_write(fs, h, 0, text, strlen(text));
    rc = n < 0 ? (int)n : fs_flush(fs, h);
    fs_release(fs, h);
    return rc;
}

static void wait_idle(const char *conv) {
    char p[256];
    snprintf(p, sizeof p, "%s/status", conv);
    for (int i = 0; i < 2000; i++) {
        int rc;
        char *t = cat(p, &rc);
        int busy = t && (!strncmp(t, "queued", 6) || !strncmp(t, "prefill", 7) || !strncmp(t, "generating", 10) ||
                         !strncmp(t, "thinking", 8));
        free(t);
        if (!busy) return;
        sleep_ms(5);
    }
    CHECK(0, "%s never finished", conv);
}

static int count_turns(const char *conv) {
    char p[256];
    snprintf(p, sizeof p, "%s/turns", conv);
    fs_dirent *e;
    int n;
    if (fs_readdir(fs, me, (uint64_t)ino_of(p), &e, &n)) return -1;
    int k = 0;
    for (int i = 0; i < n; i++) k += e[i].name[0] >= '0' && e[i].name[0] <= '9';
    fs_dirents_free(e, n);
    return k;
}

static const char *reply_to(const char *msg, int n) {
    static char buf[512];
    int k = snprintf(buf, sizeof buf, "Reply to: %.40s.", msg);
    for (int i = 1; i < n; i++) k += snprintf(buf + k, sizeof buf - k, " w%d", i);
    snprintf(buf + k, sizeof buf - k, "\n");
    return buf;
}

static void test_basics(void) {
    fs_attr a;
    CHECK(fs_mkdir(fs, SHELL_TID, FS_ROOT_INO, "a", &a) == 0, "mkdir");
    CHECK(fs_mkdir(fs, SHELL_TID, FS_ROOT_INO, "a", &a) == -EEXIST, "mkdir twice");
    CHECK(fs_mkdir(fs, SHELL_TID, FS_ROOT_INO, "bad\001", &a) == -EINVAL, "control character");
    char longname[300];
    memset(longname, 'x', 256);
    longname[256] = 0;
    CHECK(fs_mkdir(fs, SHELL_TID, FS_ROOT_INO, longname, &a) == -EINVAL, "256 bytes");
    CHECK(fs_mkdir(fs, SHELL_TID, FS_ROOT_INO, "a/b", &a) == -EINVAL, "slash");
    CHECK(fs_mkdir(fs, SHELL_TID, FS_ROOT_INO, "tmp", &a) == 0, "mkdir tmp");
    CHECK(fs_rename(fs, me, FS_ROOT_INO, "tmp", FS_ROOT_INO, "x/y", 0) == -EINVAL &&
              fs_rename(fs, me, FS_ROOT_INO, "tmp", FS_ROOT_INO, "bad\033", 0) == -EINVAL &&
              fs_rename(fs, me, FS_ROOT_INO, "tmp", FS_ROOT_INO, longname, 0) == -EINVAL,
          "mv to a bad name");
    longname[255] = 0;
    CHECK(fs_rename(fs, me, FS_ROOT_INO, "tmp", FS_ROOT_INO, longname, 0) == 0 && ino_of(longname) > 0, "255 bytes");
    CHECK(fs_rmdir(fs, me, FS_ROOT_INO, longname) == 0, "rmdir");
    CHECK(ino_of("a/reply") > 0 && ino_of("a/turns") > 0 && ino_of("a/nothing") == -ENOENT, "lookups");
    CHECK(text_is("a/status", "idle\n") && text_is("a/message", "") && text_is("a/reply", ""), "fresh files");
    CHECK(echo_to("a/message", "hello\n") == 0, "echo");
    CHECK(text_is("a/reply", reply_to("hello", 12)), "reply");
    CHECK(count_turns("a") == 2, "one message, one reply");
    CHECK(text_is("a/turns/001-user.md", "hello\n"), "user turn");
    fs_getattr(fs, (uint64_t)ino_of("a/reply"), &a);
    CHECK(a.size == strlen(reply_to("hello", 12)), "reply size %llu", (unsigned long long)a.size);
    /* an empty flush and a blank message send nothing */
    CHECK(echo_to("a/message", "\n") == 0 && count_turns("a") == 2, "blank message");
    /* derived files refuse writers; unlink of a conversation file is a no-op */
    fs_handle *h;
    CHECK(fs_open(fs, me, (uint64_t)ino_of("a/reply"), O_WRONLY, &h) == -EACCES, "reply read-only");
    /* (tar: O_EXCL fails, unlink, create again) the unlinker does not see it until it creates it */
    uint64_t adir = (uint64_t)ino_of("a");
    CHECK(fs_unlink(fs, me, adir, "status") == 0 && ino_of("a/status") == -ENOENT &&
              fs_lookup(fs, SHELL_TID, adir, "status", &a) == 0,
          "unlink view: hidden from the unlinker only");
    CHECK(fs_create(fs, me, adir, "status", 0644, O_WRONLY | O_CREAT | O_EXCL, &h, &a) == -EACCES &&
              ino_of("a/status") > 0,
          "created again: a view of a conversation in use refuses writers, and is back");
    CHECK(fs_rmdir(fs, me, FS_ROOT_INO, "a") == -ENOTEMPTY, "rmdir with turns");
}

static void test_writes_and_errors(void) {
    fs_attr a;
    fs_mkdir(fs, SHELL_TID, FS_ROOT_INO, "w", &a);
    /* several writes, one flush: one message; a second flush with nothing new: nothing */
    fs_handle *h;
    CHECK(fs_open(fs, me, (uint64_t)ino_of("w/message"), O_WRONLY | O_TRUNC, &h) == 0, "open");
    fs_write(fs, h, 0, "one ", 4);
    fs_write(fs, h, 4, "two", 3);
    CHECK(count_turns("w") == 0, "not before flush");
    CHECK(fs_flush(fs, h) == 0 && count_turns("w") == 2, "sent at flush");
    CHECK(fs_flush(fs, h) == 0 && count_turns("w") == 2, "second flush sends nothing");
    fs_release(fs, h);
    CHECK(text_is("w/turns/001-user.md", "one two\n"), "joined");
    /* EBUSY at open while it generates, then stop */
    wait_idle("w");
    CHECK(echo_to("w/message", "long #tokens=500 #delay=5\n") == 0, "long");
    CHECK(fs_open(fs, me, (uint64_t)ino_of("w/message"), O_WRONLY, &h) == -EBUSY, "EBUSY");
    CHECK(text_is("w/error", "a reply is being generated: wait for it or write 'stop' to ctl\n"), "EBUSY reason");
    CHECK(echo_to("w/ctl", "stop\n") == 0, "stop");
    int rc;
    char *s = cat("w/status", &rc);
    CHECK(s && strstr(s, "(stopped)"), "stopped: %s", s);
    free(s);
    /* EFBIG: the fake's context is 4096 tokens of 4 bytes */
    char *big = malloc(20001);
    memset(big, 'x', 20000);
    big[20000] = 0;
    CHECK(echo_to("w/message", big) == -EFBIG, "EFBIG");
    free(big);
    CHECK(count_turns("w") == 4, "EFBIG sent nothing");
    /* EIO after the partial text */
    CHECK(echo_to("w/message", "x #fail=2") == 0, "fail");
    char *t = cat("w/reply", &rc);
    CHECK(rc == -EIO && t && !strncmp(t, "Reply to: x", 11), "EIO after partial: %d %s", rc, t);
    free(t);
    CHECK(text_is("w/error", "fake engine failure\n"), "failure reason");
    /* settings: refused at write, partial JSON across writes, truncation resets */
    CHECK(echo_to("w/settings.json", "{\"top_p\": 2}") == -EINVAL, "bad top_p");
    CHECK(fs_open(fs, me, (uint64_t)ino_of("w/settings.json"), O_WRONLY | O_TRUNC, &h) == 0, "open settings");
    CHECK(fs_write(fs, h, 0, "{\"seed\": ", 9) == 9, "partial JSON is fine");
    CHECK(fs_write(fs, h, 9, "5}", 2) == 2 && fs_flush(fs, h) == 0, "completed");
    fs_release(fs, h);
    s = cat("w/settings.json", &rc);
    CHECK(s && strstr(s, "\"seed\": 5"), "seed set: %s", s);
    free(s);
    CHECK(fs_open(fs, me, (uint64_t)ino_of("w/settings.json"), O_WRONLY | O_TRUNC, &h) == 0, ": > settings.json");
    fs_flush(fs, h);
    fs_release(fs, h);
    s = cat("w/settings.json", &rc);
    CHECK(s && strstr(s, "\"seed\": null"), "reset: %s", s);
    free(s);
    /* templates: a built-in by name, Jinja text checked by compiling it */
    CHECK(echo_to("w/settings.json", "{\"template\": \"vicuna\"}") == -EINVAL &&
              text_is_prefix("w/error", "template must be null (the model's own) or one of chatml, qwen3, qwen35"),
          "an unknown built-in template");
    CHECK(echo_to("w/settings.json", "{\"chat_template\": \"{% for m in messages %}{{ m.content }\"}") == -EINVAL &&
              text_is_prefix("w/error", "chat_template does not compile: line 1: "),
          "a chat_template that does not compile");
    CHECK(echo_to("w/settings.json", "{\"chat_template\": 7}") == -EINVAL, "chat_template must be text");
    CHECK(echo_to("w/settings.json", "{\"template\": \"qwen35\", \"chat_template\": \"{{ messages[0].content }}\"}") == 0,
          "a built-in and a chat_template");
    s = cat("w/settings.json", &rc);
    CHECK(s && strstr(s, "\"template\": \"qwen35\"") && strstr(s, "\"chat_template\": \"{{ messages[0].content }}\""),
          "both shown: %s", s);
    free(s);
    CHECK(echo_to("w/settings.json", "{\"chat_template\": null}") == 0, "back to the model's own");
    s = cat("w/settings.json", &rc);
    CHECK(s && strstr(s, "\"chat_template\": null") && strstr(s, "\"template\": null"), "reset: %s", s);
    free(s);
    CHECK(echo_to("w/ctl", "jump\n") == -EINVAL, "unknown verb");
    /* several verbs in one write: stop, then regenerate (was refused at the write with
     * "write 'stop' first") */
    CHECK(echo_to("w/message", "again #tokens=500 #delay=5\n") == 0, "long again");
    CHECK(echo_to("w/ctl", "stop regenerate\n") == 0, "stop, then regenerate");
    s = cat("w/status", &rc);
    CHECK(s && (!strncmp(s, "queued", 6) || !strncmp(s, "prefill", 7) || !strncmp(s, "generating", 10)),
          "regenerating: %s", s);
    free(s);
    CHECK(echo_to("w/ctl", "stop\n") == 0, "stop");
    wait_idle("w");
}

/* vim 9 with defaults, as traced in fuse-interface.md section 2.7 */
static void test_vim_sequence(void) {
    fs_attr a;
    fs_mkdir(fs, SHELL_TID, FS_ROOT_INO, "v", &a);
    uint64_t dir = (uint64_t)ino_of("v");
    fs_handle *swp, *h;
    CHECK(fs_create(fs, me, dir, ".message.swp", 0600, O_RDWR | O_CREAT | O_EXCL, &swp, &a) == 0, "swap file");
    fs_write(fs, swp, 0, "swapdata", 8);
    CHECK(fs_create(fs, me, dir, "4913", 0644, O_WRONLY | O_CREAT | O_EXCL, &h, &a) == 0, "4913");
    fs_release(fs, h);
    CHECK(fs_unlink(fs, me, dir, "4913") == 0, "unlink 4913");
    CHECK(fs_rename(fs, me, dir, "message", dir, "message~", 0) == 0, "rename to backup");
    CHECK(ino_of("v/message") > 0 && ino_of("v/message~") > 0, "both names exist");
    CHECK(fs_open(fs, me, (uint64_t)ino_of("v/message"), O_WRONLY, &h) == 0, "open for write");
    fs_setattr_in in = {FS_SET_SIZE, 0, 0, 0};
    CHECK(fs_setattr(fs, me, (uint64_t)ino_of("v/message"), h, &in, &a) == 0, "ftruncate");
    fs_write(fs, h, 0, "from vim\n", 9);
    in = (fs_setattr_in){FS_SET_MODE, 0, 0100644, 0};
    fs_setattr(fs, me, (uint64_t)ino_of("v/message"), h, &in, &a);
    CHECK(fs_flush(fs, h) == 0, "flush");
    fs_release(fs, h);
    CHECK(fs_unlink(fs, me, dir, "message~") == 0, "drop backup");
    fs_release(fs, swp);
    CHECK(fs_unlink(fs, me, dir, ".message.swp") == 0, "drop swap");
    CHECK(count_turns("v") == 2 && text_is("v/turns/001-user.md", "from vim\n"), "one message");
    wait_idle("v");
    /* an editor's temporary renamed onto message sends it */
    CHECK(fs_create(fs, me, dir, ".message.tmp", 0644, O_WRONLY | O_CREAT | O_EXCL, &h, &a) == 0, "tmp");
    fs_write(fs, h, 0, "renamed in\n", 11);
    fs_flush(fs, h);
    fs_release(fs, h);
    CHECK(count_turns("v") == 2, "a scratch file is not a message");
    CHECK(fs_rename(fs, me, dir, ".message.tmp", dir, "message", 0) == 0, "rename onto message");
    CHECK(count_turns("v") == 4 && ino_of("v/.message.tmp") == -ENOENT, "sent by rename");
    wait_idle("v");
    /* a turn rewritten in place regenerates; the same text again does nothing */
    CHECK(echo_to("v/turns/001-user.md", "edited\n") == 0, "rewrite turn");
    CHECK(count_turns("v") == 2, "later turns dropped");
    CHECK(text_is("v/reply", reply_to("edited", 12)), "regenerated");
    CHECK(echo_to("v/turns/001-user.md", "edited\n") == 0 && count_turns("v") == 2, "same text: no-op");
    /* new turns are appended in sequence without generating */
    CHECK(echo_to("v/turns/003-user.md", "appended\n") == 0 && count_turns("v") == 3, "append");
    CHECK(echo_to("v/turns/005-user.md", "gap\n") == -EACCES, "a gap is refused");
    /* found by fuzzing: a symlink named like a later turn was listed twice once that turn
     * existed (and rm of that name removed the turn, not the link) */
    uint64_t turns = (uint64_t)ino_of("v/turns");
    CHECK(fs_symlink(fs, me, "x", turns, "004-assistant.md", &a) == -EPERM, "symlink named like a turn");
    CHECK(fs_symlink(fs, me, "x", turns, ".#003-user.md", &a) == 0 && fs_unlink(fs, me, turns, ".#003-user.md") == 0,
          "an editor's lock in turns/");
    CHECK(fs_unlink(fs, me, turns, "002-assistant.md") == 0 && count_turns("v") == 1,
          "unlink drops the turn and later ones");
    CHECK(echo_to("v/ctl", "regenerate\n") == 0 && text_is("v/reply", reply_to("edited", 12)), "regenerate");
}

static void test_import(void) {
    fs_attr a;
    fs_mkdir(fs, SHELL_TID, FS_ROOT_INO, "i", &a);
    CHECK(echo_to("i/messages.json",
                  "[{\"role\":\"developer\",\"content\":\"A\"},{\"role\":\"user\",\"content\":\"u1\"},"
                  "{\"role\":\"system\",\"content\":\"B\"},{\"role\":\"user\",\"content\":\"u2\"},"
                  "{\"role\":\"assistant\",\"content\":\"r\"}]") == 0,
          "import");
    CHECK(text_is("i/system", "A\n\nB\n") && count_turns("i") == 2 && text_is("i/turns/001-user.md", "u1\n\nu2\n"),
          "normalised");
    CHECK(text_is("i/status", "idle\n"), "no generation");
    CHECK(text_is("i/messages.json", "[\n  {\"role\": \"system\", \"content\": \"A\\n\\nB\"},\n"
                                     "  {\"role\": \"user\", \"content\": \"u1\\n\\nu2\"},\n"
                                     "  {\"role\": \"assistant\", \"content\": \"r\"}\n]\n"),
          "rendered");
    CHECK(echo_to("i/messages.json", "[{\"role\":\"tool\",\"content\":\"x\"}]") == -EINVAL, "bad role");
    CHECK(echo_to("i/messages.json", "{}") == -EINVAL, "not an array");
    CHECK(echo_to("i/messages.json", "[{\"role\":\"user\",\"content\":null}]") == -EINVAL, "null content");
    /* text after the array (was dropped without a word) */
    CHECK(echo_to("i/messages.json", "[] [{\"role\":\"user\",\"content\":\"u\"}]") == -EINVAL &&
              text_is("i/error", "messages.json: text after the JSON array\n"),
          "text after the array");
    CHECK(count_turns("i") == 2, "unchanged");
    /* an import adds turns after the ones there; it never drops or changes one */
    CHECK(echo_to("i/messages.json", "[]") == 0 && count_turns("i") == 2 && text_is("i/system", "A\n\nB\n"),
          "an empty import changes nothing");
    CHECK(echo_to("i/messages.json", "[{\"role\":\"user\",\"content\":\"u\"}]") == -EPERM && count_turns("i") == 2 &&
              text_is("i/turns/001-user.md", "u1\n\nu2\n"),
          "an import that differs is refused at the write");
    CHECK(echo_to("i/messages.json", "[{\"role\":\"user\",\"content\":\"u1\\n\\nu2\"},{\"role\":\"assistant\","
                                     "\"content\":\"r\"},{\"role\":\"user\",\"content\":\"more\"}]\n \n") == 0 &&
              count_turns("i") == 3 && text_is("i/turns/003-user.md", "more\n") && text_is("i/system", "A\n\nB\n"),
          "an import that goes on adds its turns; without a system message the system prompt stays");
    CHECK(fs_unlink(fs, me, (uint64_t)ino_of("i/turns"), "001-user.md") == 0 && count_turns("i") == 0 &&
              echo_to("i/messages.json", "[{\"role\":\"user\",\"content\":\"u\"}]\n \n") == 0 &&
              count_turns("i") == 1,
          "removing the turns, then importing, replaces a history (whitespace after the array)");
}

/* cp -r a b: cp makes b, then creates each file with O_EXCL */
static void test_cp_fresh(void) {
    fs_attr a;
    char old[32] = "";
    prctl(PR_GET_NAME, old);
    prctl(PR_SET_NAME, "cp");
    CHECK(fs_mkdir(fs, me, FS_ROOT_INO, "copy", &a) == 0, "mkdir by cp");
    CHECK(ino_of("copy/reply") == -ENOENT && ino_of("copy/system") == -ENOENT, "hidden from cp");
    uint64_t dir = (uint64_t)ino_of("copy");
    fs_handle *h;
    CHECK(fs_create(fs, me, dir, "reply", 0644, O_WRONLY | O_CREAT | O_EXCL, &h, &a) == 0, "create reply");
    CHECK(fs_write(fs, h, 0, "ignored", 7) == 7 && fs_flush(fs, h) == 0, "discarded");
    fs_release(fs, h);
    CHECK(fs_create(fs, me, dir, "system", 0644, O_WRONLY | O_CREAT | O_EXCL, &h, &a) == 0, "create system");
    fs_write(fs, h, 0, "copied\n", 7);
    fs_flush(fs, h);
    fs_release(fs, h);
    CHECK(fs_mkdir(fs, me, dir, "turns", &a) == 0, "mkdir turns");
    CHECK(fs_create(fs, me, (uint64_t)ino_of("copy/turns"), "001-user.md", 0644, O_WRONLY | O_CREAT | O_EXCL, &h,
                    &a) == 0,
          "create turn");
    fs_write(fs, h, 0, "q\n", 2);
    fs_flush(fs, h);
    fs_release(fs, h);
    prctl(PR_SET_NAME, old);
    uint32_t cp_tid = me;
    me = SHELL_TID; /* someone else looks */
    CHECK(text_is("copy/system", "copied\n") && text_is("copy/reply", "") && count_turns("copy") == 1, "imported");
    CHECK(text_is("copy/status", "idle\n"), "no generation");
    me = cp_tid;
    /* others see everything at once */
    CHECK(fs_mkdir(fs, SHELL_TID, FS_ROOT_INO, "plain", &a) == 0 && ino_of("plain/reply") > 0, "not hidden");
    CHECK(fs_create(fs, me, (uint64_t)ino_of("plain"), "reply", 0644, O_WRONLY | O_CREAT | O_EXCL, &h, &a) == -EEXIST,
          "O_EXCL");
}

/* a file created by a copy tool: open(O_CREAT | flags), the text, flush, close; the first error */
static int create_write(uint64_t dir, const char *name, int flags, const char *text) {
    fs_handle *h;
    fs_attr a;
    int rc = fs_create(fs, me, dir, name, 0644, O_WRONLY | O_CREAT | flags, &h, &a);
    if (rc) return rc;
    ssize_t n = fs_write(fs, h, 0, text, strlen(text));
    rc = n < 0 ? (int)n : fs_flush(fs, h);
    fs_release(fs, h);
    return rc;
}

/* writes n bytes of text (NULs allowed) as one write through open(O_TRUNC), then flush
 * and close: the first error */
static int write_bytes(const char *path, const char *text, size_t n) {
    int64_t ino = ino_of(path);
    fs_handle *h;
    int rc = ino < 0 ? (int)ino : fs_open(fs, me, (uint64_t)ino, O_WRONLY | O_TRUNC, &h);
    if (rc) return rc;
    ssize_t w = fs_write(fs, h, 0, text, n);
    rc = w < 0 ? (int)w : fs_flush(fs, h);
    fs_release(fs, h);
    return rc;
}

/* text only: NULs and bytes that are not UTF-8 are refused at the write with the reason
 * in error; a byte-order mark and CRLF are normalised in every view */
static void test_text(void) {
    fs_attr a;
    fs_mkdir(fs, SHELL_TID, FS_ROOT_INO, "t", &a);
    CHECK(write_bytes("t/message", "What is\0 up\n", 12) == -EINVAL && count_turns("t") == 0 &&
              text_is("t/error", "message: a NUL byte at byte 7 (text only)\n"),
          "a NUL in a message");
    CHECK(write_bytes("t/message", "bad \xff\n", 6) == -EINVAL && count_turns("t") == 0 &&
              text_is("t/error", "message: not UTF-8 at byte 4\n"),
          "not UTF-8");
    CHECK(write_bytes("t/system", "sys\0tem", 7) == -EINVAL && text_is("t/system", ""), "a NUL in the system prompt");
    CHECK(echo_to("t/messages.json", "[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]") == -EINVAL &&
              count_turns("t") == 0,
          "a \\u0000 in messages.json");
    CHECK(echo_to("t/messages.json", "[{\"role\":\"user\",\"content\":\"\xc0\xaf\"}]") == -EINVAL, "an overlong form");
    /* a character cut between two writes is whole; one cut at the close is not */
    fs_handle *h;
    CHECK(fs_open(fs, me, (uint64_t)ino_of("t/system"), O_WRONLY | O_TRUNC, &h) == 0 &&
              fs_write(fs, h, 0, "caf\xc3", 4) == 4 && fs_write(fs, h, 4, "\xa9", 1) == 1 && fs_flush(fs, h) == 0,
          "a character cut between writes");
    fs_release(fs, h);
    CHECK(text_is("t/system", "caf\xc3\xa9\n"), "café");
    CHECK(write_bytes("t/system", "cut \xc3", 5) == -EINVAL && text_is("t/system", "caf\xc3\xa9\n"),
          "a character cut at the close");
    /* editors' byte-order mark and CRLF */
    CHECK(echo_to("t/message", "\xef\xbb\xbfline one\r\nline two\r\n") == 0, "BOM and CRLF");
    wait_idle("t");
    CHECK(text_is("t/turns/001-user.md", "line one\nline two\n"), "normalised in the turn");
    int rc;
    char *m = cat("t/messages.json", &rc), *tr = cat("t/transcript.md", &rc);
    CHECK(m && strstr(m, "\"line one\\nline two\"") != NULL, "and in messages.json: %s", m ? m : "");
    CHECK(tr && strstr(tr, "## user\n\nline one\nline two\n\n## assistant"), "and in transcript.md");
    free(m);
    free(tr);
    CHECK(echo_to("t/settings.json", "\xef\xbb\xbf{\"seed\": 5}") == 0, "a BOM before settings.json");
}

/* scratch files: editors' patterns only, SCRATCH_CAP (64 MiB) in all */
static void test_scratch(void) {
    fs_attr a;
    fs_handle *h;
    fs_mkdir(fs, SHELL_TID, FS_ROOT_INO, "s", &a);
    uint64_t d = (uint64_t)ino_of("s");
    CHECK(fs_create(fs, me, d, "notes.txt", 0644, O_WRONLY | O_CREAT, &h, &a) == -EPERM &&
              ino_of("s/notes.txt") == -ENOENT,
          "a name no editor makes");
    int rc;
    char *e = cat("s/error", &rc);
    CHECK(e && strstr(e, "notes.txt: only a conversation's own files and editors' scratch files"), "why: %s", e);
    free(e);
    static const char *const ok[] = {".message.swp", "message~", "#message#", "4913", ".system.Ab12Cd", "sedAb12Cd",
                                     "x.tmp", ".#message"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        CHECK(fs_create(fs, me, d, ok[i], 0644, O_WRONLY | O_CREAT, &h, &a) == 0, "%s", ok[i]);
        fs_release(fs, h);
        fs_unlink(fs, me, d, ok[i]);
    }
    CHECK(fs_symlink(fs, me, "target", d, "link", &a) == -EPERM, "a symlink named like no editor's");
    CHECK(fs_rename(fs, me, d, "message", d, "keep", 0) == -EPERM, "a conversation's file renamed to such a name");
    /* 64 MiB in all */
    size_t big = 40u << 20;
    char *buf = calloc(1, big);
    memset(buf, 'x', big);
    CHECK(fs_create(fs, me, d, ".one.swp", 0644, O_WRONLY | O_CREAT, &h, &a) == 0 && fs_write(fs, h, 0, buf, big) ==
              (ssize_t)big, "40 MiB");
    fs_release(fs, h);
    CHECK(fs_create(fs, me, d, ".two.swp", 0644, O_WRONLY | O_CREAT, &h, &a) == 0 &&
              fs_write(fs, h, 0, buf, 20u << 20) == (ssize_t)(20u << 20) &&
              fs_write(fs, h, 20u << 20, buf, 10u << 20) == -ENOSPC,
          "70 MiB: ENOSPC");
    fs_release(fs, h);
    CHECK(fs_unlink(fs, me, d, ".one.swp") == 0 && fs_create(fs, me, d, ".three.swp", 0644, O_WRONLY | O_CREAT, &h,
                                                              &a) == 0 &&
              fs_write(fs, h, 0, buf, 30u << 20) == (ssize_t)(30u << 20),
          "room again once one is removed");
    fs_release(fs, h);
    fs_unlink(fs, me, d, ".two.swp");
    fs_unlink(fs, me, d, ".three.swp");
    free(buf);
}

/* a backend that cannot count tokens (a remote one): no check at the write, the message
 * is refused with EFBIG when it is sent (at the flush) and nothing is kept */
static void test_cannot_count(void) {
    char err[256];
    fs_backend *b = backend_fake_open("delay=1,ctx=64,count=0", err, sizeof err);
    REQUIRE(b && !b->count_tokens, "fake: %s", err);
    chatfs *other = chatfs_new(b, NULL, err, sizeof err);
    REQUIRE(other, "%s", err);
    chatfs *saved = fs;
    fs = other;
    fs_attr a;
    CHECK(fs_mkdir(fs, SHELL_TID, FS_ROOT_INO, "n", &a) == 0, "mkdir");
    char big[600];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    fs_handle *h;
    CHECK(fs_open(fs, me, (uint64_t)ino_of("n/message"), O_WRONLY | O_TRUNC, &h) == 0 &&
              fs_write(fs, h, 0, big, strlen(big)) == (ssize_t)strlen(big),
          "no count: the write passes");
    CHECK(fs_flush(fs, h) == -EFBIG, "EFBIG when sent");
    fs_release(fs, h);
    CHECK(count_turns("n") == 0, "nothing kept");
    int rc;
    char *e = cat("n/error", &rc);
    CHECK(e && strstr(e, "more than the context of 64"), "why: %s", e ? e : "");
    free(e);
    CHECK(echo_to("n/message", "short\n") == 0, "a short one goes");
    wait_idle("n");
    CHECK(count_turns("n") == 2, "answered");
    char *u = cat("n/usage.json", &rc);
    CHECK(u && strstr(u, "\"tokens\":\tnull") && strstr(u, "\"context\":\t64") && strstr(u, "\"checkpoints\":\tnull"),
          "usage.json without a count: %s", u ? u : "");
    free(u);
    fs = saved;
    chatfs_stop(other);
    b->close(b);
    chatfs_free(other);
}

/* what the copy tools do (fs/copyin.c): shutil.copytree, tar -xf */
static void test_copy_tools(void) {
    fs_attr a;
    /* copytree: the thread that made the conversation makes turns/ too (os.makedirs) */
    CHECK(fs_mkdir(fs, me, FS_ROOT_INO, "ct", &a) == 0, "copytree's mkdir");
    uint64_t cd = (uint64_t)ino_of("ct");
    CHECK(ino_of("ct/turns") == -ENOENT && fs_mkdir(fs, me, cd, "turns", &a) == 0 && ino_of("ct/turns") > 0,
          "turns/ is made by its maker, then it is there");
    uint64_t td = (uint64_t)ino_of("ct/turns");
    /* turns in the source's directory order: 003 waits for 001 and 002 */
    CHECK(create_write(td, "003-user.md", O_TRUNC, "third\n") == 0 && text_is("ct/messages.json", "[]\n") &&
              text_is("ct/turns/003-user.md", "third\n"),
          "a turn that waits: listed, not history yet");
    CHECK(create_write(td, "001-user.md", O_TRUNC, "first\n") == 0 &&
              text_is("ct/messages.json", "[\n  {\"role\": \"user\", \"content\": \"first\"}\n]\n"),
          "the first");
    CHECK(create_write(td, "002-assistant.md", O_TRUNC, "second\n") == 0 && count_turns("ct") == 3 &&
              text_is("ct/turns/003-user.md", "third\n"),
          "the waiting turn joins once the turns before it are there");
    CHECK(echo_to("ct/reply", "copied reply\n") == 0 && text_is("ct/reply", "second\n"), "a view dropped in a copy");
    CHECK(text_is("ct/status", "idle\n"), "a copy generates nothing");
    /* tar over it: O_EXCL fails, unlink (the turn and the later ones go), create again
     * (they are back), write what they say */
    fs_handle *h;
    CHECK(fs_create(fs, me, td, "002-assistant.md", 0644, O_WRONLY | O_CREAT | O_EXCL, &h, &a) == -EEXIST, "O_EXCL");
    CHECK(fs_unlink(fs, me, td, "002-assistant.md") == 0 && count_turns("ct") == 1, "unlink takes 002 and 003");
    CHECK(create_write(td, "002-assistant.md", O_EXCL, "second\n") == 0 && count_turns("ct") == 3 &&
              text_is("ct/turns/003-user.md", "third\n"),
          "created again by the same thread: back");
    CHECK(fs_unlink(fs, me, td, "002-assistant.md") == 0 &&
              create_write(td, "002-assistant.md", O_EXCL, "other\n") == -EPERM && count_turns("ct") == 3 &&
              text_is("ct/turns/002-assistant.md", "second\n"),
          "a copy that differs is refused and the turn stays");
    CHECK(fs_unlink(fs, SHELL_TID, td, "003-user.md") == 0 && count_turns("ct") == 2 &&
              create_write(td, "003-user.md", O_EXCL, "new\n") == 0 && text_is("ct/turns/003-user.md", "new\n"),
          "another thread's unlink is not taken back: the create is a new turn");
    CHECK(fs_rmdir(fs, SHELL_TID, FS_ROOT_INO, "ct") == -ENOTEMPTY, "still there");
}

static void test_persistence(void) {
    CHECK(echo_to("a/system", "be nice\n") == 0, "system");
    CHECK(echo_to("a/message", "cut short #tokens=400 #delay=2") == 0, "long");
    sleep_ms(300);
    fs_rename(fs, me, FS_ROOT_INO, "plain", FS_ROOT_INO, "renamed", 0);
    close_fs(); /* an unmount: stopped, kept */
    open_fs("delay=1");
    CHECK(ino_of("renamed") > 0 && ino_of("plain") == -ENOENT, "rename kept");
    CHECK(text_is("a/system", "be nice\n") && count_turns("a") == 4, "turns kept");
    int rc;
    char *t = cat("a/turns/004-assistant.md", &rc);
    CHECK(t && !strncmp(t, "Reply to: cut short", 19) && strlen(t) > 30, "partial kept: %s", t);
    free(t);
    CHECK(text_is("a/status", "stopped: the reply was stopped and kept as far as it got turn 4\n"),
          "after a clean stop and a remount, status says the reply was stopped");
    CHECK(fs_rmdir(fs, me, FS_ROOT_INO, "renamed") == 0 && ino_of("renamed") == -ENOENT, "rmdir");
}

/* readers on several threads while the reply streams and the conversation is removed */
static void *reader(void *arg) {
    (void)arg;
    for (int i = 0; i < 20; i++) {
        int rc;
        free(cat("r/reply", &rc));
        free(cat("r/transcript.md", &rc));
        free(cat("stats.json", &rc));
        free(cat("r/usage.json", &rc)); /* counts with fs->mu released while r goes */
    }
    return NULL;
}

static void test_concurrency(void) {
    fs_attr a;
    fs_mkdir(fs, SHELL_TID, FS_ROOT_INO, "r", &a);
    echo_to("r/message", "streams #tokens=60 #delay=1");
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, reader, NULL);
    sleep_ms(20);
    uint64_t turns = (uint64_t)ino_of("r/turns");
    fs_unlink(fs, me, turns, "002-assistant.md");
    fs_unlink(fs, me, turns, "001-user.md");
    fs_rmdir(fs, me, (uint64_t)ino_of("r"), "turns");
    CHECK(fs_rmdir(fs, me, FS_ROOT_INO, "r") == 0, "rm -r while streaming");
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
}

/* random operations on a few names: nothing may crash, leak or deadlock. For a longer
 * run: CHATFS_SOAK=ITERATIONS[:SEED] build-asan/tests/test_chatfs */
static void test_soak(void) {
    static const char *names[] = {"s", "t", "s/message", "s/system", "s/settings.json", "s/ctl", "s/messages.json",
                                  "s/turns/001-user.md", "s/turns/002-assistant.md", "s/turns/003-user.md", "s/x~",
                                  "s/turns/.x.swp", "s/reply", "s/usage.json", "t/message", "settings.json", ".root.swp"};
    static const char *texts[] = {"hi #tokens=3 #delay=0", "", "{\"seed\": 1}", "[{\"role\":\"user\",\"content\":\"u\"}]",
                                  "stop", "regenerate", "{", "\n", "garbage ]"};
    const int nn = sizeof names / sizeof *names, nt = sizeof texts / sizeof *texts;
    unsigned seed = 12345;
    int iterations = 3000;
    const char *env = getenv("CHATFS_SOAK");
    if (env) {
        iterations = atoi(env);
        if (strchr(env, ':')) seed = (unsigned)atoi(strchr(env, ':') + 1);
    }
    for (int i = 0; i < iterations; i++) {
        const char *n1 = names[rand_r(&seed) % nn], *n2 = names[rand_r(&seed) % nn], *tx = texts[rand_r(&seed) % nt];
        const char *leaf;
        uint64_t p1 = parent_of(n1, &leaf);
        fs_attr a;
        fs_handle *h;
        int rc;
        switch (rand_r(&seed) % 9) {
        case 0: fs_mkdir(fs, SHELL_TID, p1, leaf, &a); break;
        case 1: echo_to(n1, tx); break;
        case 2: free(cat(n1, &rc)); break;
        case 3: fs_unlink(fs, me, p1, leaf); break;
        case 4: {
            const char *leaf2;
            uint64_t p2 = parent_of(n2, &leaf2);
            fs_rename(fs, me, p1, leaf, p2, leaf2, 0);
            break;
        }
        case 5: fs_rmdir(fs, me, p1, leaf); break;
        case 6:
            if (fs_create(fs, me, p1, leaf, 0644, O_WRONLY | O_CREAT, &h, &a) == 0) {
                fs_write(fs, h, rand_r(&seed) % 5, tx, strlen(tx));
                fs_setattr_in in = {FS_SET_SIZE, rand_r(&seed) % 4, 0, 0};
                fs_setattr(fs, me, a.ino, h, &in, &a);
                if (rand_r(&seed) % 2) fs_flush(fs, h);
                fs_release(fs, h);
            }
            break;
        case 7: {
            fs_dirent *e;
            int n;
            if (fs_readdir(fs, me, p1, &e, &n) == 0) fs_dirents_free(e, n);
            break;
        }
        case 8: fs_symlink(fs, me, "target", p1, leaf, &a); break;
        }
        if (i % 500 == 0) sleep_ms(5);
    }
    CHECK(1, "soak survived");
}

static const char *thought_of(const char *msg, int n) {
    static char buf[512];
    int k = snprintf(buf, sizeof buf, "Thinking about: %.40s.", msg);
    for (int i = 1; i < n; i++) k += snprintf(buf + k, sizeof buf - k, " t%d", i);
    snprintf(buf + k, sizeof buf - k, "\n");
    return buf;
}

static int has_text(const char *path, const char *needle) {
    int rc;
    char *t = cat(path, &rc);
    int ok = t && strstr(t, needle);
    if (!ok) fprintf(stderr, "  %s: got %s, want it to hold \"%s\"\n", path, t ? t : "(error)", needle);
    free(t);
    return ok;
}

/* creates path and writes text in one go (tar, cp: O_CREAT|O_EXCL, write, close) */
static int create_with(const char *path, const char *text) {
    const char *name;
    uint64_t parent = parent_of(path, &name);
    fs_handle *h;
    fs_attr a;
    int rc = fs_create(fs, me, parent, name, 0644, O_WRONLY | O_CREAT | O_EXCL, &h, &a);
    if (rc) return rc;
    ssize_t n = fs_write(fs, h, 0, text, strlen(text));
    rc = n < 0 ? (int)n : fs_flush(fs, h);
    fs_release(fs, h);
    return rc;
}

/* issue 25 on the fake backend: a reply's reasoning in `thinking`, the turns' .thinking.md,
 * settings, status, transcript, messages.json both ways, copies, persistence */
static void remove_db(const char *path) {
    for (const char *suf = ""; suf; suf = !*suf ? "-wal" : !strcmp(suf, "-wal") ? "-shm" : NULL) {
        char p[320];
        snprintf(p, sizeof p, "%s%s", path, suf);
        unlink(p);
    }
}

static void test_thinking(void) {
    close_fs();
    char saved[256];
    snprintf(saved, sizeof saved, "%s", dbpath);
    snprintf(dbpath, sizeof dbpath, "%.200s.think", saved); /* a database of its own: no root settings yet */
    open_fs("delay=1,think=3,temp=0.6,topk=20"); /* a backend whose model thinks and recommends sampling */
    fs_attr a;
    /* the recommended sampling is the default for new conversations; the rest as before */
    CHECK(has_text("settings.json", "\"temperature\": 0.6,") && has_text("settings.json", "\"top_k\": 20,") &&
              has_text("settings.json", "\"top_p\": 0.95,") && has_text("settings.json", "\"thinking\": null,") &&
              has_text("settings.json", "\"thinking_budget\": null,"),
          "root settings: the backend's recommended sampling, thinking null");
    CHECK(has_text("README", "The model can think"), "README says the model can think");
    CHECK(fs_mkdir(fs, SHELL_TID, FS_ROOT_INO, "th", &a) == 0, "mkdir th");
    CHECK(has_text("th/settings.json", "\"temperature\": 0.6,"), "a new conversation starts from them");
    CHECK(text_is("th/thinking", "") && ino_of("th/thinking") > 0, "thinking: empty before a reply");
    /* thinking streams, reaches EOF when the answer starts; reply holds the answer only */
    CHECK(echo_to("th/message", "sum #delay=30") == 0, "send");
    int rc;
    char *t = cat("th/thinking", &rc);
    CHECK(t && !strcmp(t, thought_of("sum #delay=30", 3)) && rc == 0, "thinking streamed: %s", t ? t : "");
    free(t);
    t = cat("th/status", &rc);
    CHECK(t && !strncmp(t, "generating", 10), "the thinking file ended while the answer goes on: %s", t ? t : "");
    free(t);
    CHECK(text_is("th/reply", reply_to("sum #delay=30", 12)), "reply: the answer only");
    wait_idle("th");
    CHECK(has_text("th/status", "done 15 tokens (3 thinking)"), "done: both counts");
    CHECK(text_is("th/turns/002-assistant.md", reply_to("sum #delay=30", 12)), "the turn: the answer");
    CHECK(text_is("th/turns/002-assistant.thinking.md", thought_of("sum #delay=30", 3)), "the turn's reasoning");
    CHECK(ino_of("th/turns/001-user.thinking.md") == -ENOENT && ino_of("th/turns/004-assistant.thinking.md") == -ENOENT,
          "no reasoning file for a user turn or a turn that is not there");
    fs_dirent *e;
    int n;
    CHECK(fs_readdir(fs, me, (uint64_t)ino_of("th/turns"), &e, &n) == 0 && n == 5 &&
              !strcmp(e[2].name, "002-assistant.thinking.md") && !strcmp(e[3].name, "002-assistant.md"),
          "listed before its turn (rm -r order)");
    fs_dirents_free(e, n);
    /* status while thinking */
    CHECK(echo_to("th/message", "slow #think=40 #delay=15") == 0, "send a slow thinker");
    sleep_ms(200);
    t = cat("th/status", &rc);
    CHECK(t && !strncmp(t, "thinking ", 9) && strstr(t, " tokens ") && strstr(t, " tok/s"), "status: %s", t ? t : "");
    free(t);
    CHECK(has_text("th/transcript.md", "> *thinking*\n>\n> Thinking about: slow"), "transcript: the reasoning as it grows");
    CHECK(echo_to("th/ctl", "stop") == 0, "stop");
    wait_idle("th");
    CHECK(has_text("th/status", "(stopped)"), "stopped while thinking");
    /* thinking false: no reasoning; thinking_budget caps it */
    CHECK(echo_to("th/settings.json", "{\"thinking\": false}") == 0, "thinking false");
    CHECK(has_text("th/settings.json", "\"thinking\": false,"), "settings show it");
    CHECK(echo_to("th/message", "no thoughts") == 0, "send");
    CHECK(text_is("th/reply", reply_to("no thoughts", 12)) && text_is("th/thinking", ""), "thinking off: empty");
    wait_idle("th");
    CHECK(ino_of("th/turns/006-assistant.thinking.md") == -ENOENT, "no reasoning file");
    CHECK(echo_to("th/settings.json", "{\"thinking\": true, \"thinking_budget\": 2}") == 0, "budget 2");
    CHECK(echo_to("th/message", "capped #think=50") == 0, "send");
    CHECK(text_is("th/thinking", thought_of("capped #think=50", 2)), "the budget cuts the reasoning");
    CHECK(text_is("th/reply", reply_to("capped #think=50", 12)), "and the answer follows");
    wait_idle("th");
    /* bad values: EINVAL with the reason */
    CHECK(echo_to("th/settings.json", "{\"thinking\": \"yes\"}") == -EINVAL && has_text("th/error", "thinking"),
          "thinking must be a boolean or null");
    CHECK(echo_to("th/settings.json", "{\"thinking_budget\": -1}") == -EINVAL &&
              has_text("th/error", "thinking_budget"), "negative budget");
    CHECK(echo_to("th/settings.json", "{\"thinking_budget\": 1.5}") == -EINVAL, "fractional budget");
    CHECK(echo_to("settings.json", "{\"thinking\": 3}") == -EINVAL, "global settings checked too");
    CHECK(echo_to("settings.json", "{\"thinking\": false, \"thinking_budget\": 100}") == 0 &&
              has_text("settings.json", "\"thinking_budget\": 100"), "global thinking settings");
    CHECK(echo_to("th/settings.json", "{\"thinking\": null, \"thinking_budget\": null}") == 0, "back to null");
    CHECK(echo_to("settings.json", "{}") == 0, "root reset");
    /* the reasoning file is read-write; `thinking` is not */
    fs_handle *h;
    CHECK(fs_open(fs, me, (uint64_t)ino_of("th/thinking"), O_WRONLY, &h) == -EACCES, "thinking is read-only");
    CHECK(echo_to("th/turns/002-assistant.thinking.md", "edited reasoning\n") == 0 &&
              text_is("th/turns/002-assistant.thinking.md", "edited reasoning\n") &&
              text_is("th/turns/002-assistant.md", reply_to("sum #delay=30", 12)),
          "edit the reasoning; the answer stays");
    CHECK(echo_to("th/turns/002-assistant.thinking.md", "bad \xff") == -EINVAL, "reasoning is text");
    /* a turn without reasoning gets one by creating its file */
    CHECK(create_with("th/turns/006-assistant.thinking.md", "added later\n") == 0 &&
              text_is("th/turns/006-assistant.thinking.md", "added later\n"),
          "create a reasoning file for an answer without one");
    CHECK(create_with("th/turns/005-user.thinking.md", "x") == -EPERM, "a user turn has none (not a name of the mount)");
    CHECK(create_with("th/turns/003-assistant.thinking.md", "x") == -EACCES, "turn 3 is a user turn");
    /* messages.json: reasoning_content out */
    CHECK(has_text("th/messages.json",
                   "{\"role\": \"assistant\", \"content\": \"Reply to: sum #delay=30. w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11\", "
                   "\"reasoning_content\": \"edited reasoning\"}"),
          "messages.json carries reasoning_content");
    CHECK(has_text("th/transcript.md", "## assistant\n\n> *thinking*\n>\n> edited reasoning\n\nReply to: sum"),
          "transcript: the reasoning quoted before the answer");
    /* ... and in: a new conversation imports it */
    CHECK(fs_mkdir(fs, SHELL_TID, FS_ROOT_INO, "imp", &a) == 0, "mkdir imp");
    CHECK(echo_to("imp/messages.json",
                  "[{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": \"a\", "
                  "\"reasoning_content\": \"r1\\r\\nr2\"}, {\"role\": \"user\", \"content\": \"q2\"}, "
                  "{\"role\": \"assistant\", \"content\": \"b\", \"reasoning_content\": null}]") == 0,
          "import with reasoning_content");
    CHECK(text_is("imp/turns/002-assistant.thinking.md", "r1\nr2\n") && text_is("imp/turns/002-assistant.md", "a\n") &&
              ino_of("imp/turns/004-assistant.thinking.md") == -ENOENT,
          "imported: the reasoning in its file (CRLF normalised), none for null");
    CHECK(text_is("imp/thinking", "") && text_is("imp/reply", "b\n"), "reply and thinking show the last answer");
    CHECK(echo_to("imp/messages.json",
                  "[{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": \"a\", "
                  "\"reasoning_content\": \"other\"}]") == -EPERM &&
              has_text("imp/error", "002-assistant.thinking.md"),
          "an import that would change a reasoning: EPERM");
    CHECK(echo_to("imp/messages.json",
                  "[{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": \"a\"}]") == 0,
          "one that leaves the reasoning out changes nothing");
    CHECK(echo_to("imp/messages.json", "[{\"role\": \"user\", \"content\": \"q\", \"reasoning_content\": \"x\"}]") ==
              -EINVAL, "reasoning_content on a user message: EINVAL");
    CHECK(echo_to("imp/messages.json",
                  "[{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": \"a\", "
                  "\"reasoning_content\": 5}]") == -EINVAL, "reasoning_content not a string: EINVAL");
    /* tar into a new conversation: a .thinking.md that comes before its turn waits for it */
    CHECK(fs_mkdir(fs, SHELL_TID, FS_ROOT_INO, "tarred", &a) == 0, "mkdir tarred");
    CHECK(create_with("tarred/turns/002-assistant.thinking.md", "copied reasoning\n") == 0, "reasoning first");
    CHECK(create_with("tarred/turns/002-assistant.md", "copied answer\n") == 0, "its turn second");
    CHECK(create_with("tarred/turns/001-user.md", "copied question\n") == 0, "the first turn last");
    CHECK(text_is("tarred/turns/002-assistant.thinking.md", "copied reasoning\n") &&
              text_is("tarred/turns/002-assistant.md", "copied answer\n"),
          "the copy arrived whole");
    /* unlink: the reasoning goes, the answer stays */
    CHECK(fs_unlink(fs, me, (uint64_t)ino_of("imp/turns"), "002-assistant.thinking.md") == 0 &&
              ino_of("imp/turns/002-assistant.thinking.md") == -ENOENT && text_is("imp/turns/002-assistant.md", "a\n"),
          "rm a reasoning file");
    /* persistence: the reasoning is in the database */
    close_fs();
    open_fs("delay=1,think=3");
    CHECK(text_is("th/turns/002-assistant.thinking.md", "edited reasoning\n") &&
              text_is("tarred/turns/002-assistant.thinking.md", "copied reasoning\n") &&
              ino_of("imp/turns/002-assistant.thinking.md") == -ENOENT,
          "reasoning kept across a reopen");
    CHECK(text_is("th/thinking", thought_of("capped #think=50", 2)), "thinking shows the last answer's reasoning after a reopen");
    close_fs();
    remove_db(dbpath);
    snprintf(dbpath, sizeof dbpath, "%s", saved);
    open_fs("delay=1");
}

/* a database written before the reasoning column (conversations schema 1) opens, migrated (to 3:
 * the move of ask_turns finds none) */
static void test_old_schema(void) {
    char path[256], err[512];
    snprintf(path, sizeof path, "%.200s.v1", dbpath);
    store_db *d = db_open(path, err, sizeof err);
    REQUIRE(d, "db: %s", err);
    static const char *const v1[] = {
        "CREATE TABLE conversation(id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL UNIQUE,"
        "  system TEXT NOT NULL DEFAULT '', settings TEXT NOT NULL DEFAULT '{}', mtime_ns INTEGER NOT NULL DEFAULT 0);"
        "CREATE TABLE conversation_turn(conversation INTEGER NOT NULL REFERENCES conversation(id) ON DELETE CASCADE,"
        "  idx INTEGER NOT NULL, role TEXT NOT NULL CHECK (role IN ('user', 'assistant')), content TEXT NOT NULL,"
        "  complete INTEGER NOT NULL DEFAULT 1, mtime_ns INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (conversation, idx));"
        "CREATE TABLE conversation_global(key TEXT PRIMARY KEY, value TEXT NOT NULL);"};
    CHECK(db_migrate(d, "conversations", v1, 1, err, sizeof err) == 0, "schema 1: %s", err);
    CHECK(db_exec(d,
                  "INSERT INTO conversation(id, name) VALUES(1, 'old');"
                  "INSERT INTO conversation_turn(conversation, idx, role, content) VALUES(1, 1, 'user', 'hi');"
                  "INSERT INTO conversation_turn(conversation, idx, role, content) VALUES(1, 2, 'assistant', 'hello');",
                  err, sizeof err) == 0,
          "old rows: %s", err);
    db_close(d);
    d = db_open(path, err, sizeof err);
    REQUIRE(d, "db: %s", err);
    convs_store *s = convs_open(d, err, sizeof err);
    CHECK(s && db_module_version(d, "conversations") == 5, "migrated to schema 5: %s", s ? "" : err);
    CHECK(s && convs_update_reasoning(s, 1, 2, "why", 3, err, sizeof err) == 0, "the new column: %s", err);
    convs_close(s);
    db_close(d);
    /* the mount sees the old turns, and the reasoning written to the new column */
    close_fs();
    char saved[256];
    snprintf(saved, sizeof saved, "%s", dbpath);
    snprintf(dbpath, sizeof dbpath, "%s", path);
    open_fs("delay=1");
    CHECK(text_is("old/turns/001-user.md", "hi\n") && text_is("old/turns/002-assistant.md", "hello\n") &&
              text_is("old/turns/002-assistant.thinking.md", "why\n"),
          "an old database's turns, with the migrated column");
    close_fs();
    snprintf(dbpath, sizeof dbpath, "%s", saved);
    open_fs("delay=1");
    remove_db(path);
}


/* issue 37: refusals where the shell sees them, no stale reply, status's turn number, a
 * busy database that keeps the message (tests/scripts_e2e.py does the same through FUSE) */
static void test_refusals(void) {
    fs_attr a;
    int rc;
    fs_mkdir(fs, SHELL_TID, FS_ROOT_INO, "r", &a);
    CHECK(echo_to("r/message", "one\n") == 0, "one");
    wait_idle("r");
    char *t = cat("r/status", &rc);
    CHECK(t && !strncmp(t, "done 12 tokens", 14) && strstr(t, " turn 2\n"), "status names turn 2: %s", t);
    free(t);
    /* the fake's template refuses #refuse: at the write, and the reply is not the old one */
    fs_handle *h;
    CHECK(fs_open(fs, me, (uint64_t)ino_of("r/message"), O_WRONLY | O_TRUNC, &h) == 0, "open");
    CHECK(fs_write(fs, h, 0, "two #refuse\n", 12) == -EINVAL, "refused at the write");
    CHECK(fs_flush(fs, h) == 0, "nothing left to send at the close");
    fs_release(fs, h);
    CHECK(text_is("r/error", "fake template: the message says #refuse\n"), "the template's reason");
    t = cat("r/reply", &rc);
    CHECK(rc == -EIO && t && !*t, "reply after a refusal: %d %s", rc, t);
    free(t);
    t = cat("r/thinking", &rc);
    CHECK(rc == -EIO, "thinking after a refusal: %d", rc);
    free(t);
    CHECK(text_is("r/status", "error: the message was not sent: fake template: the message says #refuse\n"),
          "status after a refusal");
    CHECK(count_turns("r") == 2, "nothing stored");
    CHECK(echo_to("r/message", "three\n") == 0, "three");
    wait_idle("r");
    CHECK(text_is("r/reply", reply_to("three", 12)), "the next reply");
    t = cat("r/status", &rc);
    CHECK(t && strstr(t, " turn 4\n"), "status names turn 4: %s", t);
    free(t);
    /* a system prompt that leaves no room: EFBIG at its write, the old one stays */
    size_t n = 100000;
    char *big = malloc(n + 1);
    memset(big, 'y', n);
    big[n] = 0;
    CHECK(echo_to("r/system", big) == -EFBIG, "a system prompt over the context");
    free(big);
    CHECK(text_is("r/system", ""), "the old prompt stays");
    CHECK(text_is_prefix("r/error", "the system prompt makes the conversation "), "its reason");
    /* an import with what it would drop */
    CHECK(echo_to("r/messages.json", "[{\"role\": \"user\", \"content\": \"one\", \"name\": \"bob\"}]\n") == -EINVAL,
          "a name refused");
    CHECK(text_is_prefix("r/error", "messages.json: message 1 has \"name\""), "the key named");
    CHECK(echo_to("r/messages.json", "[{\"role\": \"user\", \"content\": \"one\", \"tool_calls\": [{\"id\": \"x\"}]}]\n") ==
              -EINVAL,
          "tool_calls on a user message refused");
    CHECK(text_is_prefix("r/error", "messages.json: message 1: tool_calls must be an array, on an assistant message"),
          "the reason: tool_calls on a user message");
    /* another connection holds the database: the message is sent, stored when it lets go */
    char err[512];
    db_busy_timeout(database, 200);
    store_db *other = db_open(dbpath, err, sizeof err);
    REQUIRE(other, "db: %s", err);
    db_enter(other);
    CHECK(db_exec(other, "BEGIN EXCLUSIVE", err, sizeof err) == 0, "lock: %s", err);
    CHECK(echo_to("r/message", "four\n") == 0, "sent while the database is held");
    wait_idle("r");
    CHECK(text_is("r/reply", reply_to("four", 12)), "answered");
    CHECK(text_is_prefix("r/error", "the database is busy (another process holds it): turn 5 and those after it"),
          "error says it waits");
    fs_attr d;
    CHECK(fs_mkdir(fs, SHELL_TID, FS_ROOT_INO, "r2", &d) == -EAGAIN, "mkdir while held: EAGAIN");
    CHECK(db_exec(other, "COMMIT", err, sizeof err) == 0, "unlock: %s", err);
    db_leave(other);
    db_close(other);
    int cleared = 0;
    for (int i = 0; i < 400 && !cleared; i++) {
        t = cat("r/error", &rc);
        cleared = t && !*t;
        free(t);
        if (!cleared) sleep_ms(10);
    }
    CHECK(cleared, "stored once the lock went");
    close_fs();
    open_fs("delay=1");
    CHECK(count_turns("r") == 6 && text_is("r/turns/005-user.md", "four\n") &&
              text_is("r/turns/006-assistant.md", reply_to("four", 12)),
          "after a reopen: %d turns", count_turns("r"));
}

int main(void) {
    me = (uint32_t)getpid();
    mkdir("tests/tmp", 0755);
    snprintf(dbpath, sizeof dbpath, "tests/tmp/test_chatfs.%d.db", (int)getpid());
    open_fs("delay=1");
    test_basics();
    test_writes_and_errors();
    test_vim_sequence();
    test_import();
    test_cp_fresh();
    test_copy_tools();
    test_text();
    test_scratch();
    test_cannot_count();
    test_persistence();
    test_concurrency();
    test_soak();
    test_thinking();
    test_old_schema();
    test_refusals();
    close_fs();
    char p[300];
    for (const char *suf = ""; suf; suf = !*suf ? "-wal" : !strcmp(suf, "-wal") ? "-shm" : NULL) {
        snprintf(p, sizeof p, "%s%s", dbpath, suf);
        unlink(p);
    }
    return check_report("test_chatfs");
}
