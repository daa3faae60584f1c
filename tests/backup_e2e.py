#!/usr/bin/env python3
"""Whole-mount backups and the tools that meet a mount's root (issue 37, item 3 and its
bullets), with the real tools: tar, rsync -a, cp -a, git init. A backup of the whole
mount restored into a new mount on a new database exits 0 with every tool and brings
every conversation file back byte for byte, the root settings included; README and
stats.json (rendered) take a copy of chatfs's own and refuse anything else; names that
start with a dot or are not UTF-8 are refused and leave nothing; a daemon logs to
--log FILE, a stopped reply included. Runs with tests/fs_e2e.py's helpers:
python3 tests/backup_e2e.py [NAME...] [-v]"""
import os
import re
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fs_e2e as E  # noqa: E402

E.TMP = os.path.join(E.ROOT, "tests", "tmp", "backup")
check, sh, read, write = E.check, E.sh, E.read, E.write

# derived files: what they show comes from the mount (its engine, this run), not from the copy
DERIVED = {"status", "stats.json", "usage.json"}


def tree(root):
    """every file under root with its bytes, derived files left out"""
    out = {}
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for f in sorted(files):
            if f in DERIVED:
                continue
            p = os.path.join(d, f)
            out[os.path.relpath(p, root)] = read(p)
    return out


def fill(m):
    """two conversations with a system prompt, settings, two exchanges; root settings"""
    write(m.p("settings.json"), '{"temperature": 0.5, "seed": 3}')
    for name in ("a", "b"):
        os.mkdir(m.p(name))
        write(m.p(name, "system"), "You are %s.\n" % name)
        write(m.p(name, "settings.json"), '{"max_tokens": 6}')
        for q in ("first", "second"):
            check(sh("echo '%s %s' > %s/message && cat %s/reply >/dev/null" % (q, name, name, name), cwd=m.mnt)[0] == 0,
                  "%s: %s" % (name, q))


RESTORES = {
    "tar": "tar -xzf '{tmp}/backup.tgz' -C '{mnt}'",
    "rsync": "rsync -a '{tmp}/copy/' '{mnt}/'",
    "cp": "cp -a '{tmp}/copy/.' '{mnt}/'",
}


def test_whole_mount_round_trip():
    """tar -czf of the whole mount exits 0 (stats.json stands still while nothing
    happens); the archive, an rsync -a copy and a cp -a copy each restored into a new
    mount on a new database exit 0 and bring back every conversation file and the root
    settings byte for byte, and again after that mount is remounted"""
    with E.Mount("source", fake="delay=1") as m:
        fill(m)
        want = tree(m.mnt)
        check(len([k for k in want if "/turns/" in k]) == 8, "eight turns: %s" % sorted(want))
        rc, _, err = sh("tar -czf '%s/backup.tgz' -C '%s' ." % (m.dir, m.mnt))
        check(rc == 0, "tar -c exits %d: %r" % (rc, err))
        copy = os.path.join(m.dir, "copy")
        shutil.rmtree(copy, ignore_errors=True)
        rc, _, err = sh("rsync -a '%s/' '%s/'" % (m.mnt, copy))
        check(rc == 0, "rsync out exits %d: %r" % (rc, err))
        src_dir = m.dir
    for tool, cmd in RESTORES.items():
        with E.Mount("restore-" + tool, fake="delay=1") as r:
            rc, _, err = sh(cmd.format(tmp=src_dir, mnt=r.mnt), timeout=60)
            check(rc == 0, "%s exits %d: %r" % (tool, rc, err[-600:]))
            got = tree(r.mnt)
            diff = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
            check(not diff, "%s: differs in %s" % (tool, diff))
            check('"temperature": 0.5' in read(r.p("settings.json")), "%s: the root settings" % tool)
            db = r.db
        with E.Mount("restore-" + tool, fake="delay=1", db=db) as again:
            got = tree(again.mnt)
            diff = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
            check(not diff, "%s, remounted: differs in %s" % (tool, diff))


def test_root_views_take_only_their_copy():
    """README and stats.json are rendered: a write of anything else fails (echo exits
    non-zero, the file is unchanged); a copy of chatfs's own is accepted and changes
    nothing; rm does not remove them (tar's unlink puts the name aside for its own thread
    until it creates it again)"""
    with E.Mount("views", fake="delay=1") as m:
        readme = read(m.p("README"))
        rc, _, err = sh("echo junk > README", cwd=m.mnt)
        check(rc != 0 and "Permission denied" in err, "echo > README: %d %r" % (rc, err))
        rc, _, err = sh("echo junk > stats.json", cwd=m.mnt)
        check(rc != 0, "echo > stats.json: %d %r" % (rc, err))
        check(read(m.p("README")) == readme, "README unchanged")
        rc, _, err = sh("cp README /tmp/chatfs-readme-copy && cp /tmp/chatfs-readme-copy README", cwd=m.mnt)
        check(rc == 0 and read(m.p("README")) == readme, "its own copy: %d %r" % (rc, err))
        rc, _, err = sh("rm README", cwd=m.mnt)  # put aside for rm's thread only (fs/copyin.c)
        check(read(m.p("README")) == readme, "README stays after rm: %d %r" % (rc, err))


def test_stats_json_stands_still():
    """stats.json's modification time moves when its content does, not at every look"""
    with E.Mount("stats", fake="delay=1") as m:
        t0 = os.stat(m.p("stats.json")).st_mtime_ns
        time.sleep(0.05)
        check(os.stat(m.p("stats.json")).st_mtime_ns == t0, "mtime moved while nothing happened")
        os.mkdir(m.p("a"))
        check(sh("echo hi > a/message && cat a/reply >/dev/null", cwd=m.mnt)[0] == 0, "a reply")
        check(os.stat(m.p("stats.json")).st_mtime_ns > t0, "mtime stayed though the counters moved")


def test_names_that_are_refused():
    """git init in the mount fails and leaves no .git; mkdir and mv refuse names that
    start with a dot or are not UTF-8 (EINVAL) and leave nothing behind"""
    with E.Mount("names", fake="delay=1") as m:
        rc, _, err = sh("git init -q", cwd=m.mnt)
        check(rc != 0 and not os.path.exists(m.p(".git")), "git init: %d %r" % (rc, err))
        for name in (b".hidden", b"bad\xff", b".."):
            try:
                os.mkdir(os.path.join(m.mnt.encode(), name))
                got = 0
            except OSError as e:
                got = e.errno
            check(got in (E.errno.EINVAL, E.errno.EEXIST), "mkdir %r: %s" % (name, got))
        os.mkdir(m.p("a"))
        rc, _, err = sh("mv a .a", cwd=m.mnt)
        check(rc != 0 and os.path.isdir(m.p("a")), "mv a .a: %d %r" % (rc, err))
        check(sorted(os.listdir(m.mnt)) == ["README", "a", "settings.json", "stats.json", "tools.json"], os.listdir(m.mnt))


def test_daemon_log():
    """a daemon mount with --log FILE writes the log there: a line per reply, and one
    for a reply stopped with ctl; after a remount, status says that reply was stopped"""
    log = os.path.join(E.TMP, "log", "chatfs.log")
    if os.path.exists(log):
        os.unlink(log)
    with E.Mount("log", fake="delay=30", daemon=True, extra=["--log", log]) as m:
        os.mkdir(m.p("a"))
        check(sh("echo hi > a/message && cat a/reply >/dev/null", cwd=m.mnt)[0] == 0, "a reply")
        check(sh("echo 'go on #delay=200' > a/message", cwd=m.mnt)[0] == 0, "a long reply")
        check(E.wait_for(lambda: read(m.p("a", "status")).startswith("generating"), 5), read(m.p("a", "status")))
        write(m.p("a", "ctl"), "stop\n")
        check(E.wait_for(lambda: "was stopped" in read(log), 5), "no stop line: %r" % read(log))
    text = read(log)
    check(re.search(r"chatfs: a: \d+ prompt tokens .* end of turn", text), "no reply line: %r" % text)
    check(re.search(r"chatfs: a: the reply \(turn 4\) was stopped", text), "the stop line: %r" % text)
    # after a remount, status says the last reply was stopped (the database keeps it)
    with E.Mount("log", fake="delay=30") as m:
        st = read(m.p("a", "status"))
        check(st == "stopped: the reply was stopped and kept as far as it got turn 4\n", "after a remount: %r" % st)


def test_examples_with_a_thinking_model():
    """examples/*.sh on the bundled model, which thinks before a three-number sum: watch.sh
    waits through the thinking (its status line shows it) to the end of the reply, and
    ask.sh, fork.sh and edit-and-regenerate.sh print the reply the conversation has;
    tools.sh answers the calls the model makes and prints its answer"""
    ex = os.path.join(E.ROOT, "examples")
    with E.Mount("examples-fake", fake="delay=30,think=10") as m:  # ten words of reasoning, 0.3 s
        rc, out, err = sh("sh '%s/watch.sh' '%s' w 'hello'" % (ex, m.mnt), timeout=60)
        check(rc == 0 and "thinking" in err and read(m.p("w", "status")).startswith("done") and
              read(m.p("w", "reply")).strip() in out, "watch.sh while it thinks: %d %r %r" % (rc, out[-300:], err[-300:]))
    with E.Mount("examples", model=E.DEFAULT_MODEL, extra=["-t", "1"]) as m:
        rc, out, err = sh("sh '%s/watch.sh' '%s' w 'What is 12 + 7 + 30?'" % (ex, m.mnt), timeout=120)
        check(rc == 0 and "thinking" in err and read(m.p("w", "reply")) in out, "watch.sh: %d %r %r" % (rc, out[-300:], err[-300:]))
        check(read(m.p("w", "status")).startswith("done"), "watch.sh stopped early: %r" % read(m.p("w", "status")))
        rc, out, err = sh("sh '%s/ask.sh' '%s' a 'What is 12 + 7 + 30?'" % (ex, m.mnt), timeout=120)
        check(rc == 0 and out == read(m.p("a", "reply")) and out.strip(), "ask.sh: %d %r %r" % (rc, out[-300:], err[-300:]))
        rc, out, err = sh("sh '%s/fork.sh' '%s' a f 'What is 12 + 7 + 30?'" % (ex, m.mnt), timeout=120)
        check(rc == 0 and out.startswith(read(m.p("f", "reply"))) and "--- f: done" in out,
              "fork.sh: %d %r %r" % (rc, out[-300:], err[-300:]))
        rc, out, err = sh("sh '%s/edit-and-regenerate.sh' '%s' f 1 'What is 10 + 7 + 30?'" % (ex, m.mnt), timeout=120)
        check(rc == 0 and out == read(m.p("f", "reply")) and out.strip() and
              read(m.p("f", "turns", "001-user.md")) == "What is 10 + 7 + 30?\n",
              "edit-and-regenerate.sh: %d %r %r" % (rc, out[-300:], err[-300:]))
        # the tool loop: a required first call answered by the calculator, then the answer
        rc, out, err = sh("TOOL_CHOICE=required sh '%s/tools.sh' '%s' t 'What is 347 * 29?'" % (ex, m.mnt), timeout=120)
        check(rc == 0 and "call_2_1: calculate {" in err and out == read(m.p("t", "reply")) and
              "003-tool.md" in E.turns(m, "t") and read(m.p("t", "status")).startswith("done"),
              "tools.sh: %d %r %r %s" % (rc, out[-300:], err[-300:], E.turns(m, "t")))


E.TESTS = [(n[5:], f) for n, f in list(globals().items()) if n.startswith("test_")]

if __name__ == "__main__":
    sys.exit(E.main())
