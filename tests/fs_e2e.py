#!/usr/bin/env python3
"""End-to-end tests of `chatfs mount` with the real tools (run by tests/t_fs.sh).

Every test mounts in a child process under tests/tmp/ (not /tmp: vim skips its backup
under /tmp), with a per-test alarm, and always unmounts with `fusermount3 -uz` and
kills the daemon it started. Most tests use the fake engine (`--fake-engine`:
deterministic words at a set pace, see fs/backend.h); the last ones use the real engine
with tests/fixtures/qwen35-tiny-f32.gguf (random weights: gibberish, deterministic),
among them six conversations written at once against the same six sent one by one, and
one with the attention-only qwen2-tiny-f32.gguf (an edit reuses up to the changed word).

Usage: fs_e2e.py [-v] [NAME_SUBSTRING ...]
"""
import errno
import json
import re
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHATFS = os.environ.get("CHATFS", os.path.join(ROOT, "chatfs"))
# Mounts live outside /tmp: vim and emacs make no backup files there, and the editor
# tests check the backups. A checkout under /tmp (CI's clones may be) mounts under /var/tmp.
TMP = os.path.join(ROOT, "tests", "tmp", "fs")
if os.path.realpath(ROOT).startswith(("/tmp/", os.path.realpath(os.environ.get("TMPDIR", "/tmp")) + "/")):
    TMP = "/var/tmp/chatfs-fs-tests-%d" % os.getuid()
MODEL = os.path.join(ROOT, "tests", "fixtures", "qwen35-tiny-f32.gguf")
MOE_MODEL = os.path.join(ROOT, "tests", "fixtures", "qwen35moe-tiny-f32.gguf")
QWEN2_MODEL = os.path.join(ROOT, "tests", "fixtures", "qwen2-tiny-f32.gguf")  # attention only
DEFAULT_MODEL = "default"  # Mount(model=DEFAULT_MODEL): no -m, chatfs finds models/chatfs-default.gguf
VERBOSE = "-v" in sys.argv
# The Ctrl-C tests signal cat as a terminal would. A runner started in the background by
# a shell without job control ignores SIGINT, and an ignored signal stays ignored in the
# programs it starts (cat then waited for the reply's end: 7.2 s); with a handler of
# Python's own, they start with the default.
signal.signal(signal.SIGINT, signal.default_int_handler)
NUMBERS = {}
MOUNTS = []  # every Mount started, stopped again after each test whatever happened


class Fail(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Fail(what)


def sh(cmd, timeout=30, **kw):
    """runs a bash command (bash names write errors; dash says "I/O error"); returns (exit status, stdout, stderr)"""
    if "input" not in kw:
        kw["stdin"] = subprocess.DEVNULL  # CI has no standard input; vim -es would read it
    p = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=timeout, **kw)
    return p.returncode, p.stdout, p.stderr


def read(path):
    with open(path, "rb") as f:
        return f.read().decode()


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def wait_for(cond, timeout=10.0, step=0.02):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return cond()


def expected(msg, n=12):
    """the fake engine's reply to msg with n tokens (backend_fake.c)"""
    return ("Reply to: %s." % msg[:40]) + "".join(" w%d" % i for i in range(1, n)) + "\n"


class Mount:
    """chatfs mounted in a child process; a context manager"""

    def __init__(self, name, fake="delay=20", model=None, db=None, extra=(), daemon=False):
        self.dir = os.path.join(TMP, name)
        self.mnt = os.path.join(self.dir, "mnt")
        self.db = db or os.path.join(self.dir, "chatfs.db")
        self.fake, self.model, self.extra, self.daemon = fake, model, list(extra), daemon
        self.proc = None
        self.pid = None
        MOUNTS.append(self)

    def cmd(self):
        c = [CHATFS, "mount", self.mnt, "--db", self.db]
        if self.model != DEFAULT_MODEL:
            c += ["-m", self.model] if self.model else ["--fake-engine", self.fake]
        return c + ([] if self.daemon else ["-f"]) + self.extra

    def start(self):
        try:
            os.makedirs(self.mnt, exist_ok=True)
        except FileExistsError:  # a dead mount (kill -9): chatfs mount cleans it up
            pass
        if self.daemon:
            p = subprocess.run(self.cmd(), capture_output=True, text=True, timeout=60)
            check(p.returncode == 0, "daemon mount failed: %s" % p.stderr)
            self.pid = int(sh("pgrep -f -n -x '%s'" % " ".join(self.cmd()))[1].strip() or 0)
        else:
            self.log = open(os.path.join(self.dir, "daemon.log"), "w")
            self.proc = subprocess.Popen(self.cmd(), stdout=self.log, stderr=subprocess.STDOUT)
            self.pid = self.proc.pid
        ok = wait_for(lambda: os.path.ismount(self.mnt) or (self.proc and self.proc.poll() is not None), 60)
        check(ok and os.path.ismount(self.mnt), "not mounted: %s" % self.log_text())
        return self

    def log_text(self):
        try:
            return read(os.path.join(self.dir, "daemon.log"))
        except OSError:
            return ""

    def p(self, *parts):
        return os.path.join(self.mnt, *parts)

    def stop(self, lazy=True):
        subprocess.run(["fusermount3", "-u" + ("z" if lazy else ""), self.mnt], capture_output=True)
        if self.proc:
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.log.close()
        elif self.pid:
            wait_for(lambda: not os.path.exists("/proc/%d" % self.pid) or
                     "zombie" in sh("ps -o stat= -p %d" % self.pid)[1], 15)
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass

    def __enter__(self):
        return self.start()

    def __exit__(self, *a):
        self.stop()


def send(m, conv, text):
    rc, out, err = sh("cat > '%s'" % m.p(conv, "message"), timeout=30, input=text + "\n")
    return rc, err


def turns(m, conv):
    return sorted(os.listdir(m.p(conv, "turns")))


def wait_done(m, conv, timeout=30):
    ok = wait_for(lambda: read(m.p(conv, "status")).startswith(("done", "error", "idle")), timeout)
    check(ok, "%s never finished: %s" % (conv, read(m.p(conv, "status"))))


# ---------------------------------------------------------------- tests


def test_echo_cat():
    with Mount("echo") as m:
        check(sorted(os.listdir(m.mnt)) == ["README", "settings.json", "stats.json", "tools.json"], "root listing")
        os.mkdir(m.p("a"))
        names = sorted(os.listdir(m.p("a")))
        check(names == sorted(["message", "reply", "system", "settings.json", "transcript.md", "messages.json",
                               "status", "error", "ctl", "thinking", "tools.json", "usage.json", "turns"]), "conversation listing %s" % names)
        rc, out, err = sh("echo 'hello world' > a/message && cat a/reply", cwd=m.mnt)
        check(rc == 0 and out == expected("hello world"), "echo/cat: %r %r" % (out, err))
        check(read(m.p("a", "status")).startswith("done 12 tokens"), "status: " + read(m.p("a", "status")))
        check(turns(m, "a") == ["001-user.md", "002-assistant.md"], "turns %s" % turns(m, "a"))
        check(read(m.p("a", "turns", "001-user.md")) == "hello world\n", "user turn")
        check(read(m.p("a", "turns", "002-assistant.md")) == expected("hello world"), "assistant turn")
        check(os.stat(m.p("a", "reply")).st_size == len(expected("hello world")), "reply size exact once done")
        check(read(m.p("a", "message")) == "" and os.stat(m.p("a", "message")).st_size == 0, "message reads empty")
        tr = read(m.p("a", "transcript.md"))
        check("## user\n\nhello world\n" in tr and expected("hello world") in tr, "transcript: " + tr)
        msgs = json.loads(read(m.p("a", "messages.json")))
        check(msgs == [{"role": "user", "content": "hello world"},
                       {"role": "assistant", "content": expected("hello world")[:-1]}], "messages.json %s" % msgs)
        check(read(m.p("a", "error")) == "", "error empty")
        check("chatfs" in read(m.p("README")), "README")
        st = json.loads(read(m.p("stats.json")))
        check(st["filesystem"]["messages_sent"] == 1 and "engine" in st, "stats.json %s" % st)
        # the second message continues the conversation
        rc, out, err = sh("echo again > a/message && cat a/reply", cwd=m.mnt)
        check(out == expected("again") and len(turns(m, "a")) == 4, "second message")


def test_printf_several_writes():
    with Mount("printf") as m:
        os.mkdir(m.p("a"))
        rc, _, err = sh("{ printf 'one '; printf 'two '; printf 'three\\n'; } > a/message", cwd=m.mnt)
        check(rc == 0, err)
        wait_done(m, "a")
        check(turns(m, "a") == ["001-user.md", "002-assistant.md"], "exactly one message %s" % turns(m, "a"))
        check(read(m.p("a", "turns", "001-user.md")) == "one two three\n", "the writes joined")
        # >> appends are messages too; an empty write sends nothing
        sh(": > a/message; echo > a/message", cwd=m.mnt)
        time.sleep(0.2)
        check(len(turns(m, "a")) == 2, "empty message sent nothing")


def test_python_writes():
    with Mount("python") as m:
        os.mkdir(m.p("a"))
        f = open(m.p("a", "message"), "w")
        f.write("part one, ")
        f.flush()  # a WRITE, not a FLUSH: nothing is sent yet
        f.write("part two")
        f.flush()
        time.sleep(0.2)
        check(turns(m, "a") == [], "sent before close")
        f.close()  # FLUSH: sent before close() returns
        check(turns(m, "a") == ["001-user.md", "002-assistant.md"], "sent at close")
        check(read(m.p("a", "turns", "001-user.md")) == "part one, part two\n", "content")
        out = read(m.p("a", "reply"))
        check(out == expected("part one, part two"), "reply %r" % out)
        # a temporary file renamed onto message (safe-write editors) sends its content once
        write(m.p("a", ".message.tmp"), "renamed in\n")
        check(len(turns(m, "a")) == 2, "a scratch file is no message")
        os.rename(m.p("a", ".message.tmp"), m.p("a", "message"))
        check(len(turns(m, "a")) == 4 and read(m.p("a", "turns", "003-user.md")) == "renamed in\n", "sent by rename")
        check(read(m.p("a", "reply")) == expected("renamed in") and not os.path.exists(m.p("a", ".message.tmp")),
              "reply to the renamed message")


def test_vim():
    with Mount("vim") as m:
        os.mkdir(m.p("a"))
        env = dict(os.environ, HOME=m.dir)
        # default settings: swap file, 4913 probe, rename(message, message~), write, unlink message~
        rc, out, err = sh("vim -u DEFAULTS -i NONE -es -c 'set backupskip=' -c 'call setline(1, \"from vim\")' "
                          "-c wq a/message", cwd=m.mnt, env=env)
        check(rc == 0, "vim rename path: %s %s" % (out, err))
        wait_done(m, "a")
        check(turns(m, "a") == ["001-user.md", "002-assistant.md"], "vim sent one message %s" % turns(m, "a"))
        check(read(m.p("a", "turns", "001-user.md")) == "from vim\n", "vim text")
        check(sorted(x for x in os.listdir(m.p("a")) if x.startswith(".") or x.endswith("~") or x == "4913") == [],
              "vim's scratch files are gone")
        # in place (backupcopy=yes: open, truncate, write)
        rc, out, err = sh("vim -u DEFAULTS -i NONE -es -c 'set backupcopy=yes' -c 'call setline(1, \"in place\")' "
                          "-c wq a/message", cwd=m.mnt, env=env)
        check(rc == 0, "vim in place: %s %s" % (out, err))
        wait_done(m, "a")
        check(len(turns(m, "a")) == 4 and read(m.p("a", "turns", "003-user.md")) == "in place\n",
              "vim in place sent one message %s" % turns(m, "a"))
        # editing a user turn: later turns go, the reply is generated again
        rc, out, err = sh("vim -u DEFAULTS -i NONE -es -c 'set backupskip=' -c 'call setline(1, \"edited\")' "
                          "-c wq a/turns/001-user.md", cwd=m.mnt, env=env)
        check(rc == 0, "vim on a turn: %s %s" % (out, err))
        wait_done(m, "a")
        check(turns(m, "a") == ["001-user.md", "002-assistant.md"], "regenerated from turn 1 %s" % turns(m, "a"))
        check(read(m.p("a", "turns", "002-assistant.md")) == expected("edited"), "regenerated reply")
        check([x for x in os.listdir(m.p("a", "turns")) if not x[0].isdigit()] == [], "no scratch left in turns/")
        # saving an unchanged turn changes nothing
        sh("vim -u DEFAULTS -i NONE -es -c 'set backupskip=' -c wq a/turns/001-user.md", cwd=m.mnt, env=env)
        time.sleep(0.2)
        check(read(m.p("a", "status")).startswith("done") and len(turns(m, "a")) == 2, "unchanged save is a no-op")


def nano_save(m, path, typed):
    """nano in a tmux pane: types at the start of path, saves (^O Enter) and quits"""
    s = "chatfs-nano-%d" % os.getpid()
    sh("tmux kill-session -t %s 2>/dev/null" % s)
    rc, _, err = sh("tmux new-session -d -s %s -x 100 -y 20 \"cd '%s' && HOME='%s' nano %s\"" % (s, m.mnt, m.dir, path))
    check(rc == 0, "tmux: " + err)
    try:
        check(wait_for(lambda: "GNU nano" in sh("tmux capture-pane -p -t " + s)[1], 10), "nano started")
        lock = m.p(os.path.dirname(path), "." + os.path.basename(path) + ".swp")
        check(os.path.exists(lock), "nano's lock file is a scratch file")
        sh("tmux send-keys -t %s '%s'" % (s, typed))
        time.sleep(0.2)
        sh("tmux send-keys -t %s C-o" % s)
        time.sleep(0.3)
        sh("tmux send-keys -t %s Enter" % s)
        check(wait_for(lambda: "Wrote" in sh("tmux capture-pane -p -t " + s)[1], 10),
              "nano saved: " + sh("tmux capture-pane -p -t " + s)[1])
        sh("tmux send-keys -t %s C-x" % s)
        wait_for(lambda: sh("tmux has-session -t " + s)[0] != 0, 5)
    finally:
        sh("tmux kill-session -t %s 2>/dev/null" % s)
    check(not os.path.exists(lock), "nano's lock file is gone")


def test_nano():
    if not shutil.which("tmux") or not shutil.which("nano"):
        raise Fail("nano and tmux are needed (.ci/packages)")
    with Mount("nano") as m:
        os.mkdir(m.p("a"))
        nano_save(m, "a/message", "from nano")
        wait_done(m, "a")
        check(turns(m, "a") == ["001-user.md", "002-assistant.md"], "nano sent one message %s" % turns(m, "a"))
        check(read(m.p("a", "turns", "001-user.md")) == "from nano\n", "nano text")
        # a user turn saved with nano: the later turns go and one reply is generated again
        sh("echo second > a/message && cat a/reply >/dev/null", cwd=m.mnt)
        nano_save(m, "a/turns/001-user.md", "edited ")
        wait_done(m, "a")
        check(turns(m, "a") == ["001-user.md", "002-assistant.md"], "nano on a turn %s" % turns(m, "a"))
        check(read(m.p("a", "turns", "001-user.md")) == "edited from nano\n", "nano turn text")
        check(read(m.p("a", "turns", "002-assistant.md")) == expected("edited from nano"), "regenerated")
        check(json.loads(read(m.p("stats.json")))["filesystem"]["regenerations"] == 1, "one regeneration")


def test_emacs():
    with Mount("emacs") as m:
        os.mkdir(m.p("a"))
        env = dict(os.environ, HOME=m.dir)
        rc, out, err = sh("emacs --batch a/message --eval '(progn (insert \"from emacs\") (save-buffer))'",
                          cwd=m.mnt, env=env, timeout=60)
        check(rc == 0, "emacs: " + err)
        wait_done(m, "a")
        check(turns(m, "a") == ["001-user.md", "002-assistant.md"], "emacs sent one message %s" % turns(m, "a"))
        check(read(m.p("a", "turns", "001-user.md")) == "from emacs\n", "emacs text")
        check(os.path.exists(m.p("a", "message~")), "emacs's backup is a scratch file")
        # a second save (backup exists already) sends exactly one more
        rc, out, err = sh("emacs --batch a/message --eval '(progn (insert \"again\") (save-buffer))'",
                          cwd=m.mnt, env=env, timeout=60)
        wait_done(m, "a")
        check(len(turns(m, "a")) == 4, "second emacs save %s" % turns(m, "a"))
        # the scratch file is not history and goes with rm
        os.unlink(m.p("a", "message~"))
        check("message~" not in os.listdir(m.p("a")), "scratch removed")
        # a user turn saved with emacs: the later turns go and one reply is generated again
        rc, out, err = sh("emacs --batch a/turns/001-user.md --eval '(progn (erase-buffer) (insert \"emacs edit\") "
                          "(save-buffer))'", cwd=m.mnt, env=env, timeout=60)
        check(rc == 0, "emacs on a turn: " + err)
        wait_done(m, "a")
        t = [x for x in turns(m, "a") if x.endswith(".md")]
        check(t == ["001-user.md", "002-assistant.md"], "emacs on a turn %s" % turns(m, "a"))
        check(read(m.p("a", "turns", "001-user.md")) == "emacs edit\n", "emacs turn text")
        check(read(m.p("a", "turns", "002-assistant.md")) == expected("emacs edit"), "regenerated")
        check(json.loads(read(m.p("stats.json")))["filesystem"]["regenerations"] == 1, "one regeneration")
        check(os.path.exists(m.p("a", "turns", "001-user.md~")), "emacs's backup of the turn is a scratch file")


def test_cp_fork_and_copies_out():
    with Mount("cp") as m:
        os.mkdir(m.p("a"))
        write(m.p("a", "system"), "You are terse.\n")
        write(m.p("a", "settings.json"), '{"temperature": 0.2, "seed": 7, "stop": ["END"]}')
        check(sh("echo first > a/message && cat a/reply >/dev/null && echo second > a/message && "
                 "cat a/reply > /dev/null", cwd=m.mnt)[0] == 0, "conversation a")
        rc, out, err = sh("cp -r a b", cwd=m.mnt)
        check(rc == 0 and err == "", "cp -r exits 0 quietly: %d %r" % (rc, err))
        for f in ["system", "settings.json", "messages.json", "transcript.md", "reply"]:
            check(read(m.p("a", f)) == read(m.p("b", f)), "fork's %s" % f)
        check(turns(m, "a") == turns(m, "b"), "fork's turns")
        for t in turns(m, "a"):
            check(read(m.p("a", "turns", t)) == read(m.p("b", "turns", t)), "fork's " + t)
        check(read(m.p("b", "status")) == "idle\n", "the fork did not generate: " + read(m.p("b", "status")))
        sh("echo third > b/message && cat b/reply > /dev/null", cwd=m.mnt)
        check(len(turns(m, "b")) == 6 and len(turns(m, "a")) == 4, "fork goes its own way")
        # copies out of the mount: cp, rsync, tar, grep, git
        out = os.path.join(m.dir, "out")
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        rc, _, err = sh("rsync -a '%s/' '%s/rs/'" % (m.p("a"), out))
        check(rc == 0, "rsync -a: " + err)
        check(read(os.path.join(out, "rs", "turns", "002-assistant.md")) == read(m.p("a", "turns", "002-assistant.md")),
              "rsync copied the turns with their sizes")
        check(read(os.path.join(out, "rs", "messages.json")) == read(m.p("a", "messages.json")), "rsync messages.json")
        rc, _, err = sh("tar -C '%s' -cf '%s/a.tar' a && mkdir '%s/t' && tar -C '%s/t' -xf '%s/a.tar'" %
                        (m.mnt, out, out, out, out))
        check(rc == 0 and read(os.path.join(out, "t", "a", "system")) == "You are terse.\n", "tar: " + err)
        rc, o, err = sh("grep -r -l first '%s'" % m.p("a"))
        check(rc == 0 and "001-user.md" in o, "grep -r: %r %r" % (o, err))
        rc, o, err = sh("cp -r '%s' '%s/g' && cd '%s/g' && git init -q && git add . && "
                        "git -c user.email=t@t -c user.name=t commit -qm x && git status --porcelain && "
                        "git hash-object turns/001-user.md" % (m.p("a"), out, out))
        blob = sh("printf 'first\\n' | git hash-object --stdin")[1]
        check(rc == 0 and o.strip().endswith(blob.strip()), "git add: %r %r" % (o, err))


def conversation_files(root, name):
    """what a conversation holds, as files: system, settings, messages.json, the turns"""
    d = os.path.join(root, name)
    out = {f: read(os.path.join(d, f)) for f in ("system", "settings.json", "messages.json")}
    for t in sorted(os.listdir(os.path.join(d, "turns"))):
        out["turns/" + t] = read(os.path.join(d, "turns", t))
    return out


COPY_TOOLS = {  # (timeout: the tool itself is stopped when it spins)
    "tar": "tar -C '{src}' -cf '{tmp}/{name}.tar' '{name}' && timeout 20 tar -C '{mnt}' -xf '{tmp}/{name}.tar'",
    "rsync": "timeout 20 rsync -a '{src}/{name}' '{mnt}/'",
    "copytree": "timeout 20 python3 -c 'import shutil, sys; shutil.copytree(sys.argv[1], sys.argv[2])' "
                "'{src}/{name}' '{mnt}/{name}'",
    "cpa": "timeout 20 cp -a '{src}/{name}' '{mnt}/'",
}


def test_copy_into_mount():
    """Issue "Hardening" 3: a conversation copied into the mount with tar -xf, rsync -a,
    shutil.copytree or cp -a arrives whole and the tool exits 0, each within a time limit;
    an archive made from the mount itself (its own file order) too; copying an older
    backup onto the conversation it came from never cuts its history."""
    with Mount("copyin") as m:
        os.mkdir(m.p("a"))
        write(m.p("a", "system"), "You are terse.\n")
        write(m.p("a", "settings.json"), '{"seed": 7, "max_tokens": 5}')
        for q in ("first question", "second question"):
            check(sh("echo '%s' > a/message && cat a/reply >/dev/null" % q, cwd=m.mnt)[0] == 0, q)
        src = os.path.join(m.dir, "src")
        os.makedirs(src)
        check(sh("cp -r '%s' '%s/a'" % (m.p("a"), src))[0] == 0, "copy out")
        want = conversation_files(m.mnt, "a")
        check(len([k for k in want if k.startswith("turns/")]) == 4, "four turns: %s" % list(want))
        for tool, cmd in COPY_TOOLS.items():
            name = tool + "_a"
            shutil.copytree(os.path.join(src, "a"), os.path.join(src, name))
            t0 = time.monotonic()
            rc, out, err = sh(cmd.format(src=src, tmp=m.dir, mnt=m.mnt, name=name), timeout=30)
            NUMBERS["copy_in_%s_s" % tool] = round(time.monotonic() - t0, 3)
            check(rc == 0, "%s exits %d: %r" % (tool, rc, err[-600:]))
            got = conversation_files(m.mnt, name)
            check(got == want, "%s: the copy differs: %s" % (tool, {k: (want.get(k), got.get(k)) for k in
                                                                   set(want) | set(got) if want.get(k) != got.get(k)}))
            check(read(m.p(name, "status")) == "idle\n" and read(m.p(name, "error")) == "",
                  "%s: the copy is idle: %r %r" % (tool, read(m.p(name, "status")), read(m.p(name, "error"))))
            extra = [f for f in os.listdir(m.p(name)) + os.listdir(m.p(name, "turns"))
                     if f.startswith(".") or f.endswith("~")]
            check(not extra, "%s left scratch files: %s" % (tool, extra))
        # the copy goes on as a conversation of its own
        check(sh("echo third > tar_a/message && cat tar_a/reply >/dev/null", cwd=m.mnt)[0] == 0, "tar_a goes on")
        check(len(turns(m, "tar_a")) == 6 and len(turns(m, "a")) == 4, "the copy has its own history")
        # an archive of the mount itself, extracted as a new conversation
        check(sh("tar -C '%s' -cf '%s/m.tar' a && mv a a_orig && timeout 30 tar -C '%s' -xf '%s/m.tar'" %
                 (m.mnt, m.dir, m.mnt, m.dir), cwd=m.mnt)[0] == 0, "tar of the mount, extracted again")
        check(conversation_files(m.mnt, "a") == want, "the mount's own archive")
        # an older backup onto the conversation it came from (now six turns): the history stays
        check(sh("echo third > a/message && cat a/reply >/dev/null", cwd=m.mnt)[0] == 0, "a third exchange")
        now = conversation_files(m.mnt, "a")
        for tool, cmd in COPY_TOOLS.items():
            if tool == "copytree":
                cmd = cmd.replace("shutil.copytree(sys.argv[1], sys.argv[2])",
                                  "shutil.copytree(sys.argv[1], sys.argv[2], dirs_exist_ok=True)")
            rc, out, err = sh(cmd.format(src=src, tmp=m.dir, mnt=m.mnt, name="a"), timeout=30)
            check(conversation_files(m.mnt, "a") == now, "%s cut the history (exit %d: %r)" % (tool, rc, err[-400:]))
            check(read(m.p("a", "status")).startswith("done"), "%s: nothing generated" % tool)
            # what the tool reports: the views refuse the copy, nothing else fails
            bad = [l for l in err.replace("), (", ")\n(").splitlines() if "denied" in l or "Errno" in l]
            check(rc == 0 or (bad and all(re.search(r"/(reply|thinking|transcript\.md|status|error|usage\.json)\b", l) for l in bad)),
                  "%s: %r" % (tool, err[-600:]))
            check(rc == 0 or "is read-only" in read(m.p("a", "error")), "%s: error says why: %r" %
                  (tool, read(m.p("a", "error"))))
            NUMBERS["backup_onto_existing_%s_exit" % tool] = rc


def test_view_mtimes():
    """Issue "Hardening": every view's modification time moves when its content does (a
    changed system prompt changes transcript.md and messages.json), so rsync's quick
    check copies it again; one whose content stays keeps its time"""
    with Mount("mtimes") as m:
        os.mkdir(m.p("a"))
        check(sh("echo hi > a/message && cat a/reply >/dev/null", cwd=m.mnt)[0] == 0, "a reply")
        out = os.path.join(m.dir, "out")
        check(sh("rsync -a '%s/' '%s/'" % (m.p("a"), out))[0] == 0, "rsync out")
        views = ("transcript.md", "messages.json", "status", "reply", "settings.json", "system")
        before = {f: os.stat(m.p("a", f)).st_mtime_ns for f in views}
        time.sleep(0.05)
        write(m.p("a", "system"), "Be brief.\n")
        write(m.p("a", "settings.json"), '{"seed": 9}')
        after = {f: os.stat(m.p("a", f)).st_mtime_ns for f in views}
        for f in ("transcript.md", "messages.json", "settings.json", "system"):
            check(after[f] > before[f], "%s's mtime did not move: %d %d" % (f, before[f], after[f]))
        for f in ("status", "reply"):
            check(after[f] == before[f], "%s's mtime moved without a change" % f)
        check(sh("rsync -a '%s/' '%s/'" % (m.p("a"), out))[0] == 0, "rsync again")
        for f in ("transcript.md", "messages.json", "system", "settings.json"):
            check(read(os.path.join(out, f)) == read(m.p("a", f)), "rsync's quick check skipped %s" % f)


def test_views_read_in_pieces():
    """A view read in several read() calls is one text even when it changes in between
    (CI once read stats.json as one rendering's head and a longer one's tail, which is not
    JSON); a view that only grew continues with what was appended (`tail -f`)."""
    with Mount("pieces") as m:
        fd = os.open(m.p("stats.json"), os.O_RDONLY)
        try:
            first = os.pread(fd, 1 << 16, 0)
            for i in range(12):  # "conversations": 0 -> 12, one byte longer
                os.mkdir(m.p("p%d" % i))
            mid = first.index(b'"generating"')  # after the counter that moved
            rest = os.pread(fd, 1 << 16, mid)
            check(rest == first[mid:], "a second read spliced two renderings: %r" % rest[:40])
            check(os.pread(fd, 1 << 16, len(first)) == b"", "more bytes after the end of the text")
            again = json.loads(os.pread(fd, 1 << 16, 0))
            check(again["filesystem"]["conversations"] == json.loads(first)["filesystem"]["conversations"] + 12,
                  "a read at offset 0 starts over: %s" % again["filesystem"])
        finally:
            os.close(fd)
        fd = os.open(m.p("p0", "transcript.md"), os.O_RDONLY)
        try:
            before = os.pread(fd, 1 << 16, 0)
            check(sh("echo hello > p0/message && cat p0/reply >/dev/null", cwd=m.mnt)[0] == 0, "a reply")
            grown = os.pread(fd, 1 << 16, len(before))
            check(grown and before + grown == read(m.p("p0", "transcript.md")).encode(),
                  "transcript.md grew, the same handle reads on: %r %r" % (before, grown))
        finally:
            os.close(fd)


def test_tail_f():
    with Mount("tail", fake="delay=100") as m:
        os.mkdir(m.p("a"))
        tail = subprocess.Popen(["tail", "-f", m.p("a", "transcript.md")], stdout=subprocess.PIPE)
        try:
            send(m, "a", "watch me #tokens=25")
            wait_done(m, "a")
            time.sleep(2.5)  # tail -f polls fstat once a second on FUSE
        finally:
            tail.terminate()
        out = tail.communicate(timeout=5)[0].decode()
        check(expected("watch me #tokens=25", 25) in out, "tail -f followed: %r" % out)


def test_ctrl_c_blocked_cat():
    with Mount("ctrlc", fake="delay=1500") as m:
        os.mkdir(m.p("a"))
        send(m, "a", "slow #tokens=6")
        cat = subprocess.Popen(["cat", m.p("a", "reply")], stdout=subprocess.PIPE)
        first = os.read(cat.stdout.fileno(), 100)  # the first token, then cat blocks again
        check(first.startswith(b"Reply to:"), "first token %r" % first)
        check(os.stat(m.p("a", "reply")).st_size == len(first), "reply's size is the bytes so far: %d vs %d" %
              (os.stat(m.p("a", "reply")).st_size, len(first)))
        time.sleep(0.3)
        t0 = time.monotonic()
        cat.send_signal(signal.SIGINT)
        cat.wait(timeout=10)
        dt = time.monotonic() - t0
        NUMBERS["ctrl_c_ms"] = round(dt * 1000, 1)
        check(dt < 0.2, "Ctrl-C took %.0f ms" % (dt * 1000))
        check(read(m.p("a", "status")).startswith("generating"), "generation goes on: " + read(m.p("a", "status")))
        # kill -9 of a blocked reader does not leave it in D state either
        cat = subprocess.Popen(["cat", m.p("a", "reply")], stdout=subprocess.PIPE)
        os.read(cat.stdout.fileno(), 100)
        time.sleep(0.3)
        t0 = time.monotonic()
        cat.kill()
        cat.wait(timeout=10)
        NUMBERS["kill_9_reader_ms"] = round((time.monotonic() - t0) * 1000, 1)
        check(time.monotonic() - t0 < 0.2, "kill -9 of a blocked reader")
        check(read(m.p("a", "status")).startswith("generating"), "generation goes on after kill")


def test_ten_blocked_readers_stat_fast():
    with Mount("ten", fake="delay=3000") as m:
        os.mkdir(m.p("a"))
        send(m, "a", "very slow #tokens=3")
        cats = [subprocess.Popen(["cat", m.p("a", "reply")], stdout=subprocess.PIPE) for _ in range(10)]
        try:
            for c in cats:
                check(os.read(c.stdout.fileno(), 100).startswith(b"Reply to:"), "reader got the first token")
            time.sleep(0.3)  # all ten are parked now, waiting for token 2
            times = []
            for _ in range(5):
                t0 = time.monotonic()
                os.stat(m.p("a", "status"))
                os.listdir(m.p("a"))
                read(m.p("a", "status"))
                times.append(time.monotonic() - t0)
            NUMBERS["stat_with_10_blocked_readers_ms"] = round(max(times) * 1000, 2)
            check(max(times) < 0.25, "stat/ls/cat took %.0f ms with 10 blocked readers" % (max(times) * 1000))
            # another conversation works meanwhile
            os.mkdir(m.p("b"))
            check(read(m.p("b", "status")) == "idle\n", "other conversation")
        finally:
            for c in cats:
                c.kill()
                c.wait()


def test_poll_epoll_nonblock_first_byte():
    with Mount("poll", fake="delay=300") as m:
        os.mkdir(m.p("a"))
        send(m, "a", "poll me #tokens=3")
        fd = os.open(m.p("a", "reply"), os.O_RDONLY)
        ep = select.epoll()
        ep.register(fd, select.EPOLLIN)
        t0 = time.monotonic()
        ev = ep.poll(5)
        dt = time.monotonic() - t0
        check(ev and dt > 0.15, "epoll woke after %.3f s with %s (the first token comes after 0.3 s)" % (dt, ev))
        data = os.read(fd, 4096)
        check(data.startswith(b"Reply to:"), "read after epoll %r" % data)
        # nothing unread now: not ready until the next token
        check(ep.poll(0.05) == [], "not ready right after reading everything")
        check(ep.poll(5) != [], "ready at the next token")
        # select() too
        r, _, _ = select.select([fd], [], [], 5)
        check(r == [fd], "select")
        ep.close()
        while os.read(fd, 4096):
            pass
        os.close(fd)
        # O_NONBLOCK: EAGAIN instead of waiting
        send(m, "a", "again #tokens=2 #delay=500")
        fd = os.open(m.p("a", "reply"), os.O_RDONLY | os.O_NONBLOCK)
        try:
            os.read(fd, 100)
            check(False, "O_NONBLOCK read did not fail")
        except BlockingIOError as e:
            check(e.errno == errno.EAGAIN, "EAGAIN")
        os.close(fd)
        wait_done(m, "a")
        # first-byte latency: close() of message to the first byte of reply (20 ms per token)
        lat = []
        for i in range(5):
            with open(m.p("a", "message"), "w") as f:
                f.write("latency %d #delay=20 #tokens=2" % i)
            t0 = time.monotonic()
            with open(m.p("a", "reply"), "rb", buffering=0) as f:
                f.read(1)
                lat.append(time.monotonic() - t0)
                f.read()
        NUMBERS["first_byte_fake_20ms_token_ms"] = round(sorted(lat)[len(lat) // 2] * 1000, 1)


def test_errors():
    with Mount("errors", fake="delay=50,ctx=200") as m:
        os.mkdir(m.p("a"))
        send(m, "a", "busy #tokens=40")
        rc, out, err = sh("echo more > a/message", cwd=m.mnt)
        check(rc != 0 and "Device or resource busy" in err, "EBUSY at open: %d %r" % (rc, err))
        check("being generated" in read(m.p("a", "error")), "EBUSY reason in error")
        rc, out, err = sh("echo stop > a/ctl", cwd=m.mnt)
        check(rc == 0, "stop: " + err)
        check(read(m.p("a", "status")).startswith("done") and "(stopped)" in read(m.p("a", "status")),
              "stopped: " + read(m.p("a", "status")))
        # EFBIG: longer than the context (200 fake tokens = about 800 bytes)
        rc, out, err = sh("head -c 2000 /dev/zero | tr '\\0' x > a/message", cwd=m.mnt)
        check(rc != 0 and "File too large" in err, "EFBIG at write: %d %r" % (rc, err))
        check("context" in read(m.p("a", "error")), "EFBIG reason: " + read(m.p("a", "error")))
        check(len(turns(m, "a")) == 2, "nothing sent")
        # engine failure: partial text, then EIO
        rc, out, err = sh("echo 'break #fail=3' > a/message && cat a/reply", cwd=m.mnt)
        check(rc != 0 and out.startswith("Reply to: break") and "Input/output error" in err,
              "EIO after partial text: %d %r %r" % (rc, out, err))
        check(read(m.p("a", "error")) == "fake engine failure\n", "failure reason: " + read(m.p("a", "error")))
        check(read(m.p("a", "status")).startswith("error: fake engine failure"), "status error")
        # settings: EINVAL at write with the reason
        rc, out, err = sh("echo '{\"temperature\": -1}' > a/settings.json", cwd=m.mnt)
        check(rc != 0 and "Invalid argument" in err, "EINVAL: %r" % err)
        check("temperature" in read(m.p("a", "error")), "settings reason: " + read(m.p("a", "error")))
        rc, out, err = sh("echo '{\"nonsense\": 1}' > a/settings.json", cwd=m.mnt)
        check(rc != 0 and "unknown setting" in read(m.p("a", "error")), "unknown key")
        rc, _, err = sh("echo '{\"top_k\": 5, \"max_tokens\": 3}' > a/settings.json", cwd=m.mnt)
        s = json.loads(read(m.p("a", "settings.json")))
        check(rc == 0 and s["top_k"] == 5 and s["max_tokens"] == 3 and s["top_p"] == 0.95, "partial settings %s" % s)
        check(read(m.p("a", "error")) == "", "error cleared by a good write")
        rc, out, err = sh("echo dance > a/ctl", cwd=m.mnt)
        check(rc != 0 and "Invalid argument" in err and "dance" in read(m.p("a", "error")), "bad ctl verb")
        # derived files refuse writes outside a copy
        rc, out, err = sh("echo x > a/reply", cwd=m.mnt)
        check(rc != 0 and "Permission denied" in err, "reply is read-only: %r" % err)
        # scratch files: editors' patterns only, 64 MiB in all
        rc, out, err = sh("echo x > a/notes.txt", cwd=m.mnt)
        check(rc != 0 and "Operation not permitted" in err and "notes.txt" in read(m.p("a", "error")),
              "a file no editor makes: %r" % err)
        rc, out, err = sh("head -c 40M /dev/zero > a/.one.swp && head -c 40M /dev/zero > a/.two.swp", cwd=m.mnt)
        check(rc != 0 and "No space left on device" in err, "the scratch cap: %r" % err)
        st = json.loads(read(m.p("stats.json")))["filesystem"]
        check(st["scratch_bytes"] <= st["scratch_bytes_max"] == 64 << 20, "stats: %s" % st)
        check(sh("rm a/.one.swp a/.two.swp", cwd=m.mnt)[0] == 0, "rm scratch")
        # names
        check(sh("mkdir \"$(printf 'bad\\001name')\"", cwd=m.mnt)[0] != 0, "control characters refused")
        check(sh("mkdir %s" % ("x" * 256), cwd=m.mnt)[0] != 0, "256 bytes refused")
        check(sh("mkdir %s" % ("y" * 255), cwd=m.mnt)[0] == 0, "255 bytes accepted")
        check(sh("mkdir a", cwd=m.mnt)[0] != 0, "EEXIST")
        check(sh("mv a \"$(printf 'bad\\001name')\"", cwd=m.mnt)[0] != 0, "mv to control characters refused")
        check(sh("mv a %s" % ("x" * 256), cwd=m.mnt)[0] != 0 and os.path.isdir(m.p("a")), "mv to 256 bytes refused")


def test_bytes_that_are_not_text():
    """Issue "Hardening": a NUL or bytes that are not UTF-8 in a message, the system prompt,
    a turn or messages.json are refused where the shell sees it (write), with the reason
    in error; a byte-order mark and CRLF from editors are normalised in every view; every
    view stays valid (messages.json parses)"""
    with Mount("bytes") as m:
        os.mkdir(m.p("a"))
        for f, data in (("message", r"What is\0 up\n"), ("message", r"caf\xe9\n"), ("system", r"sys\0tem\n"),
                        ("messages.json", r'[{"role": "user", "content": "a\\u0000b"}]\n')):
            rc, _, err = sh("printf '%s' > a/%s" % (data, f), cwd=m.mnt)
            check(rc != 0 and "Invalid argument" in err, "%s %r: %d %r" % (f, data, rc, err))
            check(re.search(r"NUL|not UTF-8", read(m.p("a", "error"))), "the reason: %r" % read(m.p("a", "error")))
        check(turns(m, "a") == [] and read(m.p("a", "system")) == "", "nothing got in")
        rc, out, err = sh(r"printf '\xef\xbb\xbfline one\r\nline two\r\n' > a/message && cat a/reply", cwd=m.mnt)
        check(rc == 0 and out == expected("line one\nline two"), "BOM and CRLF: %r %r" % (out, err))
        check(read(m.p("a", "turns", "001-user.md")) == "line one\nline two\n", "normalised turn")
        msgs = json.loads(read(m.p("a", "messages.json")))
        check(msgs[0]["content"] == "line one\nline two", "normalised in messages.json: %s" % msgs)
        check("## user\n\nline one\nline two\n" in read(m.p("a", "transcript.md")), "and in transcript.md")
        rc, _, err = sh(r"printf 'bad \xff' > a/turns/001-user.md", cwd=m.mnt)
        check(rc != 0 and read(m.p("a", "turns", "001-user.md")) == "line one\nline two\n", "a turn: %r" % err)


def test_status_formats():
    """status reads queued, prefill N/M (P%) reused R, generating N tokens X tok/s,
    done N tokens X tok/s reused R/M, idle (the fake engine runs one request at a time)"""
    with Mount("status", fake="delay=150,prefill=500") as m:
        os.mkdir(m.p("a"))
        os.mkdir(m.p("b"))
        check(read(m.p("a", "status")) == "idle\n", "idle")
        send(m, "a", "first #tokens=4")
        prefill = re.compile(r"prefill \d+/\d+ \(\d+%\) reused \d+ turn 2\n\Z")
        check(wait_for(lambda: prefill.match(read(m.p("a", "status"))), 2, 0.01),
              "prefill: %r" % read(m.p("a", "status")))
        send(m, "b", "second #tokens=2")
        check(read(m.p("b", "status")) == "queued turn 2\n", "queued behind a: %r" % read(m.p("b", "status")))
        generating = re.compile(r"generating [1-9]\d* tokens \d+\.\d tok/s turn 2\n\Z")
        check(wait_for(lambda: generating.match(read(m.p("a", "status"))), 3, 0.01),
              "generating: %r" % read(m.p("a", "status")))
        wait_done(m, "a")
        st = read(m.p("a", "status"))
        check(re.match(r"done 4 tokens \d+\.\d tok/s reused \d+/[1-9]\d* turn \d+\n\Z", st), "done: %r" % st)
        wait_done(m, "b")
        check(read(m.p("b", "status")).startswith("done 2 tokens"), "b done: " + read(m.p("b", "status")))
        # usage.json: the fake counts tokens (ceil(bytes / 4) + 4 a message) and keeps no
        # checkpoints; its size is exact, as stats.json's
        u = json.loads(read(m.p("a", "usage.json")))
        check(u["turns"] == 2 and u["context"] == 4096 and u["tokens"] > 8 and
              u["context_left"] == 4096 - u["tokens"] and u["checkpoints"] is None and
              u["last_prompt"]["generated_tokens"] == 4 and u["last_prompt"]["generating"] is False,
              "usage.json %s" % u)
        check(os.stat(m.p("a", "usage.json")).st_size == len(read(m.p("a", "usage.json"))), "usage.json size")
        os.mkdir(m.p("c"))
        u = json.loads(read(m.p("c", "usage.json")))
        check(u["turns"] == 0 and u["tokens"] == 0 and u["last_prompt"] is None, "usage.json empty %s" % u)


def test_import_regenerate_rename_rm():
    with Mount("import") as m:
        os.mkdir(m.p("a"))
        msgs = [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "hi"},
                {"role": "system", "content": "Use English."}, {"role": "user", "content": "there"},
                {"role": "assistant", "content": [{"type": "text", "text": "hello"}]}]
        write(m.p("a", "messages.json"), json.dumps(msgs))
        check(read(m.p("a", "system")) == "Be brief.\n\nUse English.\n", "system messages merged to the front")
        check(turns(m, "a") == ["001-user.md", "002-assistant.md"], "consecutive roles merged %s" % turns(m, "a"))
        check(read(m.p("a", "turns", "001-user.md")) == "hi\n\nthere\n", "merged user text")
        check(read(m.p("a", "status")) == "idle\n", "an import does not generate")
        rc, _, err = sh("echo '[{\"role\": \"function\", \"content\": \"x\"}]' > a/messages.json", cwd=m.mnt)
        check(rc != 0 and "role 'function'" in read(m.p("a", "error")), "bad role refused: " + read(m.p("a", "error")))
        rc, _, err = sh("echo '[{\"role\": \"user\"}]' > a/messages.json", cwd=m.mnt)
        check(rc != 0 and "content" in read(m.p("a", "error")), "missing content refused")
        check(len(turns(m, "a")) == 2, "refused imports changed nothing")
        # re-roll: rm the last assistant turn, regenerate
        os.unlink(m.p("a", "turns", "002-assistant.md"))
        check(turns(m, "a") == ["001-user.md"], "last turn removed")
        rc, out, err = sh("echo regenerate > a/ctl && cat a/reply", cwd=m.mnt)
        check(out == expected("hi\n\nthere"), "regenerated %r" % out)
        # appending turns by hand does not generate
        write(m.p("a", "turns", "003-user.md"), "added\n")
        check(turns(m, "a")[-1] == "003-user.md" and read(m.p("a", "status")).startswith("done"), "appended a turn")
        check(sh("echo x > a/turns/009-user.md", cwd=m.mnt)[0] != 0, "turns are numbered in sequence")
        rc, out, err = sh("echo regenerate > a/ctl && cat a/reply", cwd=m.mnt)
        check(out == expected("added") and len(turns(m, "a")) == 4, "regenerate after a user turn")
        # mv renames, rm -r deletes (also while it generates)
        os.rename(m.p("a"), m.p("b"))
        check(sorted(os.listdir(m.mnt))[-2:] == ["stats.json", "tools.json"] and os.path.isdir(m.p("b")), "mv")
        send(m, "b", "long #tokens=100")
        rc, _, err = sh("rm -r b", cwd=m.mnt)
        check(rc == 0 and not os.path.exists(m.p("b")), "rm -r: " + err)
        check(sh("rmdir b", cwd=m.mnt)[0] != 0, "gone")
        # its checkpoints are released from the budgets: the engine forgets its session
        eng = json.loads(read(m.p("stats.json")))["engine"]
        check(eng["forgotten_sessions"] == 1, "rm -r told the engine: %s" % eng)


def test_persistence_kill9_unmount():
    m = Mount("persist", fake="delay=100").start()
    try:
        os.mkdir(m.p("a"))
        write(m.p("a", "system"), "sys\n")
        write(m.p("a", "settings.json"), '{"seed": 3}')
        write(m.p("settings.json"), '{"temperature": 0.25}')
        os.mkdir(m.p("old"))
        os.rename(m.p("old"), m.p("new"))
        check(sh("echo kept > a/message && cat a/reply >/dev/null", cwd=m.mnt)[0] == 0, "first")
        send(m, "a", "interrupted #tokens=200")
        fd = os.open(m.p("a", "reply"), os.O_RDONLY)
        got = b""
        while len(got) < 30:
            got += os.read(fd, 100)
        time.sleep(0.6)  # a growing reply reaches the database every 0.2 s
        os.close(fd)
        before = read(m.p("a", "turns", "004-assistant.md"))
        os.kill(m.pid, signal.SIGKILL)
        m.proc.wait()
    finally:
        m.stop()
    m = Mount("persist", fake="delay=100").start()
    try:
        check(turns(m, "a") == ["001-user.md", "002-assistant.md", "003-user.md", "004-assistant.md"],
              "after kill -9: %s" % turns(m, "a"))
        check(read(m.p("a", "turns", "003-user.md")) == "interrupted #tokens=200\n", "the sent message survived")
        part = read(m.p("a", "turns", "004-assistant.md"))
        check(len(part) >= 20 and before.startswith(part.rstrip("\n")), "partial reply kept: %r vs %r" % (part, before))
        check("incomplete" in read(m.p("a", "status")) and "incomplete" in read(m.p("a", "error")),
              "marked incomplete: " + read(m.p("a", "status")))
        check("incomplete" in read(m.p("a", "transcript.md")), "transcript marks it")
        check(read(m.p("a", "system")) == "sys\n" and json.loads(read(m.p("a", "settings.json")))["seed"] == 3,
              "system and settings survived")
        check(json.loads(read(m.p("settings.json")))["temperature"] == 0.25, "the root settings survived")
        check(sorted(os.listdir(m.mnt)) == ["README", "a", "new", "settings.json", "stats.json", "tools.json"],
              "the same tree: %s" % sorted(os.listdir(m.mnt)))
        # a clean unmount stops generation and keeps what was produced
        send(m, "a", "stopped by unmount #tokens=200")
        time.sleep(0.5)
        subprocess.run(["fusermount3", "-u", m.mnt], check=True)
        m.proc.wait(timeout=15)
        check(m.proc.returncode == 0, "daemon exit status %s" % m.proc.returncode)
    finally:
        m.stop()
    m = Mount("persist", fake="delay=100").start()
    try:
        t = turns(m, "a")
        check(len(t) == 6 and read(m.p("a", "turns", t[-1])).startswith("Reply to: stopped"),
              "after unmount: %s" % t)
        check(read(m.p("a", "status")) == "stopped: the reply was stopped and kept as far as it got turn 6\n",
              "a stopped reply says so after the remount: %r" % read(m.p("a", "status")))
    finally:
        m.stop()


def daemon_fds(pid):
    """the database files a daemon holds open, as /proc/PID/fd shows them"""
    out = []
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            out.append(os.readlink("/proc/%d/fd/%s" % (pid, fd)))
        except OSError:
            pass
    return [t for t in out if ".db" in t]


def test_crash_with_second_reader():
    """Issue "Hardening" 1: another SQLite connection to the database from another process
    (the sqlite3 shell, `chatfs ask`) must not cost the daemon its locks: every turn
    completed before a kill -9 is there after remounting. Run twice: a reader that comes
    and goes, and one that holds a read transaction open across the daemon's writes."""
    for hold in (False, True):
        name = "crash-hold" if hold else "crash"
        m = Mount(name, model=MODEL, extra=["-t", "1"]).start()
        reader = None
        try:
            write(m.p("settings.json"), '{"max_tokens": 6, "temperature": 0}')
            os.mkdir(m.p("x"))
            r1 = sh("echo first > x/message && cat x/reply", cwd=m.mnt, timeout=120)[1]
            check(r1, "first reply")
            if hold:
                reader = subprocess.Popen(["sqlite3", m.db], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                reader.stdin.write("BEGIN;\nSELECT 'turns', count(*) FROM conversation_turn;\n")
                reader.stdin.flush()
                check(reader.stdout.readline().startswith("turns|"), "the reader's transaction began")
            else:
                rc, out, err = sh("sqlite3 '%s' 'PRAGMA integrity_check'" % m.db)
                check(rc == 0 and out.strip() == "ok", "integrity_check: %r %r" % (out, err))
            rc, out, err = sh("'%s' ask -m '%s' --db '%s' -t 1 -n 4 --conversation asked 'Hello'" %
                              (CHATFS, MODEL, m.db), timeout=120)
            check(rc == 2 and out, "chatfs ask beside the mount (through it; -n 4 cuts: exit 2): %d %r %r" % (rc, out, err))
            r2 = sh("echo second > x/message && cat x/reply", cwd=m.mnt, timeout=120)[1]
            os.mkdir(m.p("y"))
            r3 = sh("echo third > y/message && cat y/reply", cwd=m.mnt, timeout=120)[1]
            check(r2 and r3, "replies after the second connection")
            if hold:
                reader.stdin.write("SELECT 'turns', count(*) FROM conversation_turn;\nCOMMIT;\n.quit\n")
                reader.stdin.flush()
                reader.wait(timeout=30)
            fds = daemon_fds(m.pid)
            check(fds and not [f for f in fds if "(deleted)" in f], "the daemon's database files: %s" % fds)
            time.sleep(0.3)
            os.kill(m.pid, signal.SIGKILL)
            m.proc.wait()
        finally:
            if reader and reader.poll() is None:
                reader.kill()
            m.stop()
        m = Mount(name, model=MODEL, extra=["-t", "1"]).start()
        try:
            check(turns(m, "x") == ["001-user.md", "002-assistant.md", "003-user.md", "004-assistant.md"],
                  "x after kill -9: %s" % turns(m, "x"))
            check(read(m.p("x", "turns", "004-assistant.md")) == r2, "x's second reply: %r vs %r" %
                  (read(m.p("x", "turns", "004-assistant.md")), r2))
            check(os.path.isdir(m.p("y")) and turns(m, "y") == ["001-user.md", "002-assistant.md"] and
                  read(m.p("y", "turns", "002-assistant.md")) == r3, "y after kill -9")
            check(turns(m, "asked") == ["001-user.md", "002-assistant.md"], "chatfs ask's turn: %s" % turns(m, "asked"))
        finally:
            m.stop()


class SmallDisk:
    """a tmpfs of `kib` KiB at DIR/disk for a database (root only), unmounted on exit"""

    def __init__(self, name, kib):
        self.dir = os.path.join(TMP, name, "disk")
        self.kib = kib

    def __enter__(self):
        check(os.geteuid() == 0, "a full disk needs root to mount a small tmpfs (CI runs as root)")
        os.makedirs(self.dir, exist_ok=True)
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dk,mode=0700" % self.kib, "tmpfs", self.dir],
                           capture_output=True, text=True)
        check(p.returncode == 0, "mount -t tmpfs: %s" % p.stderr)
        return self

    def __exit__(self, *a):
        while MOUNTS:  # chatfs lets go of the database before the disk goes
            MOUNTS.pop().stop()
        subprocess.run(["umount", self.dir], capture_output=True)

    def fill(self, name):
        """writes DIR/disk/NAME until the disk is full; returns its size"""
        n = 0
        with open(os.path.join(self.dir, name), "wb", buffering=0) as f:
            for chunk in (65536, 4096, 512):
                try:
                    while True:
                        n += f.write(b"\0" * chunk)
                except OSError as e:
                    check(e.errno == errno.ENOSPC, "filling the disk: %s" % e)
        return n

    def free_kib(self):
        st = os.statvfs(self.dir)
        return st.f_bavail * st.f_frsize // 1024


def write_errno(path, text):
    """writes text to path and closes it (where chatfs stores it); 0 or the errno"""
    try:
        with open(path, "w") as f:
            f.write(text)
        return 0
    except OSError as e:
        return e.errno


def integrity(db):
    rc, out, err = sh("sqlite3 '%s' 'PRAGMA integrity_check'" % db)
    return out.strip() if rc == 0 else err


def test_full_disk():
    """Issue 22's third break: the database on a tmpfs that fills up. What could not be
    stored fails with ENOSPC and "the disk is full: ..." in error and changes nothing; a
    reply that does not fit stays readable but status says it is not stored; the mount
    keeps serving; once there is room the reply is written and everything works again;
    after kill -9 every turn that was reported stored is there, and integrity_check is ok."""
    name = "fulldisk"
    with SmallDisk(name, 1024) as disk:
        db = os.path.join(disk.dir, "chatfs.db")
        m = Mount(name, fake="delay=0,ctx=100000", db=db).start()
        os.mkdir(m.p("a"))
        check(send(m, "a", "first #tokens=20")[0] == 0, "a first message")
        wait_done(m, "a")
        write(m.p("a", "system"), "sys\n")
        a_before = {t: read(m.p("a", "turns", t)) for t in turns(m, "a")}
        # room for a message (its turn and the empty reply) but not for a 6000-word reply
        slack = os.path.join(disk.dir, "slack")
        with open(slack, "wb") as f:
            f.write(b"\0" * 32768)
        disk.fill("filler")
        os.unlink(slack)
        os.mkdir(m.p("b"))  # (a few hundred bytes of the slack)
        rc, err = send(m, "b", "a long answer please #tokens=6000")
        check(rc == 0, "the message fits: %r" % err)
        wait_done(m, "b")
        status = read(m.p("b", "status"))
        check(status.startswith("error: the disk is full: the reply turns/002-assistant.md is not stored yet"),
              "a reply that does not fit is not shown as done: %r" % status)
        check(status == "error: " + read(m.p("b", "error"))[:-1] + " turn 2\n", "error says the same: %r" % read(m.p("b", "error")))
        long_reply = read(m.p("b", "reply"))
        check(long_reply == expected("a long answer please #tokens=6000", 6000), "the reply is readable whole")
        check(read(m.p("b", "turns", "002-assistant.md")) == long_reply, "its turn too")
        # keep talking until nothing fits: each kind of change goes on until the database
        # refuses it, and the refused one fails with ENOSPC, says why and changes nothing
        disk.fill("filler2")

        def snapshot(conv):
            return {t: read(m.p(conv, "turns", t)) for t in turns(m, conv)}

        def until_full(what, change, after=None):
            for i in range(200):
                before = snapshot("a")
                rc = change(i)
                check(rc in (0, errno.ENOSPC), "%s: errno %s" % (what, rc))
                if rc:
                    check(snapshot("a") == before, "%s refused but the turns changed" % what)
                    return i
                if after:
                    after()
            check(False, "%s: the disk never filled up" % what)

        def sent(i):
            rc, err = send(m, "a", "message %d #tokens=3" % i)
            check(rc == 0 or "No space left on device" in err, "a message on a full disk: %r" % err)
            return errno.ENOSPC if rc else 0

        def replied():  # done, or shown but not stored yet (the reply did not fit)
            check(wait_for(lambda: read(m.p("a", "status")).startswith(("done", "error: the disk is full: the reply")),
                           10), "a's reply: %r" % read(m.p("a", "status")))

        NUMBERS["full_disk_messages_until_full"] = until_full("a message", sent, replied)
        e = read(m.p("a", "error"))
        check(e.startswith("the disk is full: the message was not stored (%s: database or disk is full)" % db),
              "the message's error: %r" % e)
        system = read(m.p("a", "system"))

        def new_system(i):
            rc = write_errno(m.p("a", "system"), "system %d\n" % i)
            if rc == 0:
                check(read(m.p("a", "system")) == "system %d\n" % i, "a stored system prompt shows")
            return rc

        until_full("the system prompt", new_system)
        check("the system prompt was not stored" in read(m.p("a", "error")), "why: %r" % read(m.p("a", "error")))
        system = read(m.p("a", "system"))
        check(system.startswith(("sys", "system")), "the last stored system prompt stays: %r" % system)
        seed = json.loads(read(m.p("a", "settings.json")))["seed"]
        until_full("settings.json", lambda i: write_errno(m.p("a", "settings.json"), '{"seed": %d}' % (100 + i)))
        check("settings.json was not stored" in read(m.p("a", "error")), "why: %r" % read(m.p("a", "error")))
        seed = json.loads(read(m.p("a", "settings.json")))["seed"]
        check(seed is None or seed >= 100, "settings: %r" % seed)
        until_full("the root settings.json",
                   lambda i: write_errno(m.p("settings.json"), '{"temperature": 0.%d}' % (i + 1)))

        def imported(i):
            msgs = json.loads(read(m.p("a", "messages.json"))) + [{"role": "user", "content": "imported %d" % i},
                                                                    {"role": "assistant", "content": "reply %d" % i}]
            return write_errno(m.p("a", "messages.json"), json.dumps(msgs))

        until_full("an import", imported)
        check("the import was not stored" in read(m.p("a", "error")), "why: %r" % read(m.p("a", "error")))
        until_full("a turn edit", lambda i: write_errno(m.p("a", "turns", "002-assistant.md"), "edited %d\n" % i))
        check("the turn was not stored" in read(m.p("a", "error")), "why: %r" % read(m.p("a", "error")))

        def made(i):
            try:
                os.mkdir(m.p("c%d" % i))
                return 0
            except OSError as ex:
                check(not os.path.exists(m.p("c%d" % i)), "a refused conversation is not there")
                return ex.errno

        until_full("mkdir", made)
        # the mount keeps serving what is stored
        check(os.path.ismount(m.mnt) and "first" in read(m.p("a", "transcript.md")), "still serving")
        check(read(m.p("b", "status")).startswith("error: the disk is full"), "b still not stored")
        # room again: the waiting reply is written within a second or two, and everything works
        os.unlink(os.path.join(disk.dir, "filler"))
        os.unlink(os.path.join(disk.dir, "filler2"))
        check(wait_for(lambda: read(m.p("b", "status")).startswith("done"), 10),
              "the reply stored once there is room: %r" % read(m.p("b", "status")))
        check(read(m.p("b", "error")) == "", "b's error cleared: %r" % read(m.p("b", "error")))
        check(send(m, "a", "room again")[0] == 0, "a message after freeing space")
        wait_done(m, "a")
        check(read(m.p("a", "status")).startswith("done") and read(m.p("a", "error")) == "", "a works again")
        check(write_errno(m.p("a", "system"), "new system\n") == 0, "the system prompt again")
        os.mkdir(m.p("c"))
        check(send(m, "c", "in c")[0] == 0, "c")
        wait_done(m, "c")
        stored = {}
        for conv in os.listdir(m.mnt):
            if os.path.isdir(m.p(conv)):
                stored[conv] = {t: read(m.p(conv, "turns", t)) for t in turns(m, conv)}
                check(not read(m.p(conv, "status")).startswith("error"), "%s: %s" % (conv, read(m.p(conv, "status"))))
        check(len(stored["a"]) >= 4 and len(stored["b"]) == 2 and len(stored["c"]) == 2, "turns: %s" %
              {k: sorted(v) for k, v in stored.items()})
        NUMBERS["full_disk_reply_bytes"] = len(long_reply)
        os.kill(m.pid, signal.SIGKILL)
        m.proc.wait()
        m.stop()
        check(integrity(db) == "ok", "integrity_check after kill -9: %r" % integrity(db))
        m = Mount(name, fake="delay=0,ctx=100000", db=db).start()
        for conv, want in stored.items():
            got = {t: read(m.p(conv, "turns", t)) for t in turns(m, conv)}
            check(got == want, "%s after kill -9: %s vs %s" % (conv, sorted(got), sorted(want)))
        check(read(m.p("a", "system")) == "new system\n", "the system prompt stored after the disk had room")
        check(read(m.p("b", "status")).startswith("idle"), "b's reply complete: %r" % read(m.p("b", "status")))
        m.stop(lazy=False)
        check(integrity(db) == "ok", "integrity_check after unmount: %r" % integrity(db))


def test_full_disk_checkpoints():
    """Checkpoints are a cache: on a disk with room for the conversation but not for a
    checkpoint of the default model (57 KiB of recurrent state, 1.5 KiB of KV per token),
    the checkpoint write fails, the reply still arrives and is stored, the next message
    reuses the checkpoint from RAM; once there is room the checkpoints reach the database
    with the next ones, and after kill -9 the turns are there."""
    name = "fulldisk-ckpt"
    with SmallDisk(name, 1024) as disk:
        db = os.path.join(disk.dir, "chatfs.db")
        m = Mount(name, model=DEFAULT_MODEL, db=db, extra=["-t", "1"]).start()
        write(m.p("settings.json"), '{"temperature": 0, "max_tokens": 24, "thinking": false}')
        os.mkdir(m.p("c"))
        slack = os.path.join(disk.dir, "slack")
        with open(slack, "wb") as f:
            f.write(b"\0" * 40960)
        disk.fill("filler")
        os.unlink(slack)
        r1 = sh("echo 'What is 17 + 25?' > c/message; cat c/reply", cwd=m.mnt, timeout=120)[1]
        check("42" in r1, "the reply arrives: %r" % r1)
        wait_done(m, "c")
        def engine():
            return json.loads(read(m.p("stats.json")))["engine"]

        check(wait_for(lambda: engine()["write_errors"] > 0, 60),
              "the checkpoint write found no room: %s" % {k: engine()[k] for k in ("disk", "write_errors")})
        check(read(m.p("c", "status")).startswith("done") and read(m.p("c", "error")) == "",
              "the reply is stored: %r %r" % (read(m.p("c", "status")), read(m.p("c", "error"))))
        r2 = sh("echo 'Add 5 to that.' > c/message; cat c/reply", cwd=m.mnt, timeout=120)[1]
        st2 = read(m.p("c", "status"))
        reused = re.search(r"reused (\d+)/", st2)
        check("47" in r2 and reused and int(reused.group(1)) > 0, "the follow-up from RAM: %r %r" % (r2, st2))
        NUMBERS["full_disk_checkpoint_followup"] = st2.strip()
        stored = {t: read(m.p("c", "turns", t)) for t in turns(m, "c")}
        check(len(stored) == 4 and stored["004-assistant.md"] == r2, "four turns: %s" % sorted(stored))
        check(engine()["disk"]["entries"] == 0, "no checkpoint on the full disk: %s" % engine()["disk"])
        # room again: the checkpoints kept in RAM reach the database with the next ones
        os.unlink(os.path.join(disk.dir, "filler"))
        r3 = sh("echo 'What is 2 + 3?' > c/message; cat c/reply", cwd=m.mnt, timeout=120)[1]
        check(wait_for(lambda: engine()["disk"]["entries"] > 0, 60), "checkpoints on disk: %s" % engine()["disk"])
        NUMBERS["full_disk_checkpoints_later"] = engine()["disk"]["entries"]
        stored = {t: read(m.p("c", "turns", t)) for t in turns(m, "c")}
        check(len(stored) == 6 and stored["006-assistant.md"] == r3, "six turns: %s" % sorted(stored))
        time.sleep(0.5)
        os.kill(m.pid, signal.SIGKILL)
        m.proc.wait()
        m.stop()
        check(integrity(db) == "ok", "integrity_check: %r" % integrity(db))
        m = Mount(name, model=DEFAULT_MODEL, db=db, extra=["-t", "1"]).start()
        got = {t: read(m.p("c", "turns", t)) for t in turns(m, "c")}
        check(got == stored, "after kill -9: %s" % sorted(got))
        m.stop(lazy=False)


def test_second_mount_refused():
    """Issue "Hardening" 2: one process writes a database. A second mount on it is refused,
    naming the first (pid, mount point); so is a mount while a chatfs ask runs; a failed
    mount leaves no new database behind."""
    with Mount("one") as m:
        os.mkdir(m.p("a"))
        other = os.path.join(m.dir, "mnt2")
        os.makedirs(other, exist_ok=True)
        for daemon in (False, True):
            # (timeout: an old chatfs mounts and serves; then it is unmounted again)
            rc, _, err = sh("timeout 5 '%s' mount '%s' --db '%s' --fake-engine ''%s" %
                            (CHATFS, other, m.db, "" if daemon else " -f"))
            mounted = os.path.ismount(other)
            if mounted:
                sh("fusermount3 -uz '%s'" % other)  # the daemon exits when unmounted
            check(rc == 1 and "in use by chatfs mount on %s (pid %d)" % (m.mnt, m.pid) in err,
                  "second mount: %d %r" % (rc, err))
            check(not mounted, "not mounted twice")
        check(os.listdir(m.mnt).count("a") == 1, "the first mount goes on")
    # a database held the way chatfs ask holds it (store/db.h: flock on DB.lock, a note
    # naming the holder): a mount is refused naming it; ask itself goes on beside a holder
    import fcntl
    db = os.path.join(TMP, "one", "ask.db")
    with open(db + ".lock", "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lk.write("%d\nchatfs ask\n" % os.getpid())
        lk.flush()
        rc, _, err = sh("'%s' mount '%s' --db '%s' --fake-engine '' -f" % (CHATFS, other, db))
        check(rc == 1 and "in use by chatfs ask (pid %d)" % os.getpid() in err, "mount beside ask: %d %r" % (rc, err))
        rc, out, err = sh("'%s' ask -m '%s' --db '%s' -t 1 -n 4 Hello" % (CHATFS, MODEL, db), timeout=120)
        check(rc == 2 and out and "in use by chatfs ask (pid %d)" % os.getpid() in err, "ask beside ask: %r" % err)
    # a holder whose note says it is finishing (a mount after its unmount, writing its last
    # checkpoints: store/db.h db_claim_finishing) is waited for, not refused: a remount
    # right after fusermount3 -u works
    holder = subprocess.Popen([sys.executable, "-c", """
import fcntl, sys, time
lk = open(sys.argv[1], "w")
fcntl.flock(lk, fcntl.LOCK_EX)
lk.write("%d\\nchatfs mount on /x, finishing after its unmount\\n" % 1)
lk.flush()
print("held", flush=True)
time.sleep(1.5)
""", db + ".lock"], stdout=subprocess.PIPE, text=True)
    holder.stdout.readline()
    t0 = time.time()
    rc, _, err = sh("timeout 20 '%s' mount '%s' --db '%s' --fake-engine ''" % (CHATFS, other, db))
    waited = time.time() - t0
    mounted = os.path.ismount(other)
    if mounted:
        sh("fusermount3 -u '%s'" % other)
    holder.wait()
    check(rc == 0 and mounted and waited >= 1.0, "remount after a finishing holder: %d %.1f s %r" % (rc, waited, err))
    def lock_free():  # (the daemon lets go of the lock a moment after its unmount)
        with open(db + ".lock") as lk:
            try:
                fcntl.flock(lk, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except OSError:
                return False
    check(wait_for(lock_free, 20), "the remounted daemon let go of the database")
    rc, out, err = sh("'%s' ask -m '%s' --db '%s' -t 1 -n 4 Hello" % (CHATFS, MODEL, db), timeout=120)
    note = read(db + ".lock").split("\n")
    check(rc == 2 and out and "in use" not in err and note[1] == "chatfs ask" and int(note[0]) != os.getpid(),
          "ask alone took the lock: %r %r" % (err, note))
    # a mount that fails (here: a bad model) creates no database
    db = os.path.join(TMP, "one", "new.db")
    rc, _, err = sh("'%s' mount '%s' --db '%s' -m /nonexistent.gguf -f" % (CHATFS, other, db))
    check(rc == 1 and not [f for f in os.listdir(os.path.dirname(db)) if f.startswith("new.db")],
          "a failed mount left %s" % os.listdir(os.path.dirname(db)))


def test_daemon_mode_and_errors():
    rc, out, err = sh("'%s' mount '%s' -m /nonexistent.gguf --db '%s/x.db'" % (CHATFS, TMP, TMP))
    check(rc == 1 and "nonexistent.gguf" in err, "a bad model fails in the terminal: %r" % err)
    rc, out, err = sh("'%s' mount /nonexistent-dir --db '%s/x.db' --fake-engine ''" % (CHATFS, TMP))
    check(rc == 1 and "nonexistent-dir" in err, "a bad mountpoint: %r" % err)
    m = Mount("daemon", daemon=True)
    m.start()
    try:
        os.mkdir(m.p("a"))
        rc, out, _ = sh("echo hi > a/message && cat a/reply", cwd=m.mnt)
        check(out == expected("hi"), "daemon serves")
        opts = [l.split()[3] for l in read("/proc/mounts").splitlines() if l.split()[1] == m.mnt]
        check(opts and "allow_other" not in opts[0].split(","), "private by default: %s" % opts)
    finally:
        m.stop(lazy=False)
    check(not os.path.ismount(m.mnt), "unmounted")
    # -o FUSE_OPTIONS reach the mount (ro: the kernel refuses writes); bad ones fail in the terminal
    with Mount("daemon", daemon=True, extra=["-o", "ro"]) as m:
        opts = [l.split()[3] for l in read("/proc/mounts").splitlines() if l.split()[1] == m.mnt]
        check(opts and "ro" in opts[0].split(","), "-o ro: %s" % opts)
        rc, _, err = sh("echo hi > a/message", cwd=m.mnt)
        check(rc != 0 and "Read-only file system" in err, "-o ro refuses writes: %r" % err)
        check(read(m.p("a", "reply")) == expected("hi"), "and reads")
    rc, _, err = sh("'%s' mount '%s' --fake-engine '' --db '%s/bad-o.db' -o no_such_option" % (CHATFS, m.mnt, TMP))
    check(rc == 1 and "no_such_option" in err and not os.path.ismount(m.mnt), "bad -o: %r" % err)


def test_mount_says_what_it_is():
    """Issue "Hardening": the mount says what it mounted (model, context); README and
    stats.json name the model; -f logs one line per reply, -v every change; a chatfs
    killed with -9 leaves a dead mount that the next mount cleans up; a second mount on a
    mount point is refused"""
    m = Mount("diag", model=DEFAULT_MODEL, extra=["-t", "1", "-v"]).start()
    try:
        check(wait_for(lambda: "mounted on %s" % m.mnt in m.log_text(), 10), "the mount's line: %r" % m.log_text())
        check(re.search(r"chatfs-default.gguf \(qwen35\), context \d+ tokens", m.log_text()), m.log_text())
        check(re.search(r"This mount: .*chatfs-default.gguf \(qwen35\), context \d+ tokens", read(m.p("README"))),
              "README names the model")
        model = json.loads(read(m.p("stats.json")))["engine"]["model"]
        check(model["architecture"] == "qwen35" and model["file"].endswith("chatfs-default.gguf") and
              model["context"] > 0, "stats.json names the model: %s" % model)
        os.mkdir(m.p("c"))
        check(sh("echo 'What is 17 + 25?' > c/message && cat c/reply", cwd=m.mnt, timeout=60)[0] == 0, "a reply")
        check(wait_for(lambda: re.search(r"chatfs: c: \d+ prompt tokens \(\d+ reused from \w+, \d+ computed\), \d+ "
                                         r"generated( \(\d+ thinking(: only the markers)?\))?, first token after \d+ ms, [\d.]+ tok/s", m.log_text()), 5),
              "-f: one line per reply: %r" % m.log_text())
        check("chatfs: c: a message of 16 bytes" in m.log_text(), "-v: the message: %r" % m.log_text())
        # ignore_eos with a chat model: no end-of-turn tokens drawn, so no tokens hidden
        write(m.p("c", "settings.json"), '{"ignore_eos": true, "max_tokens": 40}')
        reply = sh("echo 'What is 17 + 25?' > c/message && cat c/reply", cwd=m.mnt, timeout=60)[1]
        check(read(m.p("c", "status")).startswith("done 40 tokens") and len(reply.encode()) > 40,
              "ignore_eos: %r %r" % (read(m.p("c", "status")), reply))
        # mounting again on the same mount point
        rc, _, err = sh("'%s' mount '%s' --db '%s/other.db' --fake-engine '' -f" % (CHATFS, m.mnt, m.dir), timeout=20)
        check(rc == 1 and "is a chatfs mount already" in err, "a second mount on the mount point: %r" % err)
        os.kill(m.pid, signal.SIGKILL)
        m.proc.wait()
    except BaseException:
        m.stop()
        raise
    MOUNTS.remove(m)  # the dead mount stays for the next mount to find
    check(sh("stat '%s'" % m.mnt)[0] != 0, "a dead mount after kill -9")
    m2 = Mount("diag", model=DEFAULT_MODEL, extra=["-t", "1"]).start()  # the same mount point
    try:
        check("unmounted the mount of a chatfs that is gone" in m2.log_text(), "the dead mount: %r" % m2.log_text())
        check(turns(m2, "c")[:2] == ["001-user.md", "002-assistant.md"], "the conversation is back")
    finally:
        m2.stop()


def test_errors_at_the_write():
    """Issue "Hardening": what the shell sees (it ignores close): incomplete JSON in
    settings.json, regenerate with nothing to regenerate; a good stop clears error"""
    with Mount("atwrite") as m:
        os.mkdir(m.p("a"))
        rc, _, err = sh("echo '{\"top_k\": 5' > a/settings.json", cwd=m.mnt)
        check(rc != 0 and "Invalid argument" in err and "incomplete JSON" in read(m.p("a", "error")),
              "incomplete settings.json: %d %r" % (rc, err))
        rc, _, err = sh("echo regenerate > a/ctl", cwd=m.mnt)
        check(rc != 0 and "Invalid argument" in err and "nothing to regenerate" in read(m.p("a", "error")),
              "regenerate with nothing: %d %r" % (rc, err))
        rc, _, err = sh("echo 'break #fail=2' > a/message && cat a/reply", cwd=m.mnt)
        check(read(m.p("a", "error")) == "fake engine failure\n", "a failure: %r" % read(m.p("a", "error")))
        check(sh("echo stop > a/ctl", cwd=m.mnt)[0] == 0 and read(m.p("a", "error")) == "", "stop clears error")


def test_mount_options():
    """--batch, --chunk and the checkpoint budgets reach the engine (stats.json shows them);
    bad values are refused in the terminal"""
    for bad, why in (("--batch 0", "--batch"), ("--chunk 5", "--chunk"), ("--ram-budget 12Q", "--ram-budget")):
        rc, _, err = sh("'%s' mount '%s/x' -m '%s' %s" % (CHATFS, TMP, MODEL, bad))
        check(rc == 1 and why in err, "%s: %r" % (bad, err))
    with Mount("options", model=MODEL, extra=["-t", "1", "--batch", "3", "--chunk", "64", "--ram-budget", "64M"]) as m:
        eng = json.loads(read(m.p("stats.json")))["engine"]
        check(eng["max_batch"] == 3 and eng["prefill_chunk"] == 64, "engine stats %s" % eng)
        write(m.p("settings.json"), '{"max_tokens": 4, "temperature": 0}')
        os.mkdir(m.p("a"))
        rc, out, _ = sh("echo 'Hello there' > a/message && cat a/reply", cwd=m.mnt, timeout=120)
        check(rc == 0 and out, "a reply with the options")


def test_speculative():
    """a model with an MTP head speculates by default: the same greedy reply as with
    "speculative": 0 in settings.json, status and stats.json count the drafted and accepted
    tokens; a bad value is refused; --draft 0 turns it off for the mount"""
    mtp = os.path.join(ROOT, "tests", "fixtures", "qwen35-tiny-mtp-f32.gguf")
    with Mount("spec", model=mtp, extra=["-t", "1"]) as m:
        write(m.p("settings.json"), '{"max_tokens": 24, "temperature": 0}')
        for name, spec in (("on", "null"), ("off", "0")):
            os.mkdir(m.p(name))
            write(m.p(name, "settings.json"), '{"speculative": %s}' % spec)
            send(m, name, "Hello world! The quick brown fox")
            wait_done(m, name, 60)
        on, off = read(m.p("on", "status")), read(m.p("off", "status"))
        check(read(m.p("on", "reply")) == read(m.p("off", "reply")), "speculative and plain replies differ")
        check(re.match(r"done 24 tokens \d+\.\d tok/s reused \d+/\d+ \(max_tokens\) drafted [1-9]\d* accepted \d+ turn \d+\n\Z", on),
              "status with speculation: %r" % on)
        check(re.match(r"done 24 tokens \d+\.\d tok/s reused \d+/\d+ \(max_tokens\) turn \d+\n\Z", off), "status without: %r" % off)
        check(json.loads(read(m.p("on", "settings.json")))["speculative"] is None, "speculative: null")
        eng = json.loads(read(m.p("stats.json")))["engine"]
        check(eng["draft"] >= 1 and eng["drafted_tokens"] > 0 and eng["accepted_tokens"] > 0, "engine stats %s" % eng)
        rc, _, _ = sh("echo '{\"speculative\": 9}' > on/settings.json", cwd=m.mnt)
        check(rc != 0 and "speculative" in read(m.p("on", "error")), "speculative 9 refused: " + read(m.p("on", "error")))
    with Mount("spec-off", model=mtp, extra=["-t", "1", "--draft", "0"]) as m:
        write(m.p("settings.json"), '{"max_tokens": 8, "temperature": 0, "speculative": 4}')
        os.mkdir(m.p("a"))
        send(m, "a", "Hello")
        wait_done(m, "a", 60)
        eng = json.loads(read(m.p("stats.json")))["engine"]
        check(eng["draft"] == 0 and eng["drafted_tokens"] == 0, "--draft 0: %s" % eng)
        check("drafted" not in read(m.p("a", "status")), "--draft 0 status: " + read(m.p("a", "status")))


def test_examples():
    ex = os.path.join(ROOT, "examples")
    with Mount("examples") as m:
        rc, out, err = sh("'%s/ask.sh' '%s' demo 'What is 17 + 25?'" % (ex, m.mnt))
        check(rc == 0 and out == expected("What is 17 + 25?"), "ask.sh: %r %r" % (out, err))
        rc, out, err = sh("'%s/fork.sh' '%s' demo other 'And times 2?'" % (ex, m.mnt))
        check(rc == 0 and out.startswith(expected("And times 2?")) and "demo still has 2 turns, other has 4" in out,
              "fork.sh: %r %r" % (out, err))
        rc, out, err = sh("'%s/edit-and-regenerate.sh' '%s' demo 1 'What is 6 * 7?'" % (ex, m.mnt))
        check(rc == 0 and out == expected("What is 6 * 7?") and len(turns(m, "demo")) == 2,
              "edit-and-regenerate.sh: %r %r" % (out, err))
        rc, out, err = sh("'%s/edit-and-regenerate.sh' '%s' demo" % (ex, m.mnt))
        check(rc == 0 and out == expected("What is 6 * 7?") and len(turns(m, "demo")) == 2, "re-roll: %r" % out)
        rc, out, err = sh("'%s/watch.sh' '%s' demo 'Watch this'" % (ex, m.mnt))
        check(rc == 0 and expected("Watch this") in out and "done 12 tokens" in err, "watch.sh: %r %r" % (out, err))


def test_real_engine():
    with Mount("real", model=MODEL, extra=["-t", "1"]) as m:
        write(m.p("settings.json"), '{"max_tokens": 12, "temperature": 0}')
        os.mkdir(m.p("a"))
        t0 = time.monotonic()
        rc, out, err = sh("echo 'Hello there' > a/message && cat a/reply", cwd=m.mnt, timeout=120)
        NUMBERS["real_engine_tiny_reply_s"] = round(time.monotonic() - t0, 3)
        check(rc == 0 and len(out) > 0, "real reply: %d %r %r" % (rc, out, err))
        st = read(m.p("a", "status"))
        check(st.startswith("done 12 tokens"), "status " + st)
        check(os.stat(m.p("a", "reply")).st_size == len(out.encode()), "size exact")
        # greedy: the fork's next message gives the same reply as the original's
        check(sh("cp -r a b", cwd=m.mnt)[0] == 0, "fork")
        r1 = sh("echo next > a/message && cat a/reply", cwd=m.mnt, timeout=120)[1]
        r2 = sh("echo next > b/message && cat b/reply", cwd=m.mnt, timeout=120)[1]
        check(r1 == r2 and r1, "fork and original agree: %r %r" % (r1, r2))
        # the fork never computed anything: what its first reply reused are a's checkpoints
        st = read(m.p("b", "status"))
        reused = re.search(r"reused (\d+)/(\d+)", st)
        check(reused and int(reused.group(1)) > 0, "the fork reused a's checkpoints: %r" % st)
        # rewriting a user turn regenerates from there and reuses what comes before it
        check(sh("echo other > b/turns/003-user.md && cat b/reply >/dev/null", cwd=m.mnt, timeout=120)[0] == 0,
              "rewrite turn 3")
        st = read(m.p("b", "status"))
        reused = re.search(r"reused (\d+)/(\d+)", st)
        check(len(turns(m, "b")) == 4 and reused and int(reused.group(1)) > 0, "edit reused: %r" % st)
        # usage.json says the same reuse, and what b's checkpoints hold
        u = json.loads(read(m.p("b", "usage.json")))
        k = u["checkpoints"]
        check(u["last_prompt"]["reused_tokens"] == int(reused.group(1)) and
              u["last_prompt"]["prompt_tokens"] == int(reused.group(2)) and
              u["tokens"] >= u["last_prompt"]["prompt_tokens"] and u["context_left"] == u["context"] - u["tokens"] and
              k["ram"]["states"] >= 1 and k["ram"]["bytes"] > 0 and k["longest_tokens"] <= u["tokens"],
              "usage.json of the real engine %s" % u)
        # one rendering and tokenization per message (the engine's, at the send): a short
        # message is not counted at the write, nothing renders it twice
        renders = json.loads(read(m.p("stats.json")))["engine"]["prompt_renders"]
        check(sh("echo 'one more' > a/message && cat a/reply >/dev/null", cwd=m.mnt, timeout=120)[0] == 0, "one more")
        renders2 = json.loads(read(m.p("stats.json")))["engine"]["prompt_renders"]
        check(renders2 - renders == 1, "a message rendered %d times" % (renders2 - renders))
        # EFBIG from the real tokenizer's count
        rc, _, err = sh("head -c 200000 /dev/urandom | base64 > a/message", cwd=m.mnt, timeout=120)
        check(rc != 0 and "File too large" in err, "EFBIG with the real engine: %r" % err)
        st = json.loads(read(m.p("stats.json")))
        check(st["backend"] == "engine" and st["engine"].get("requests", 0) >= 3, "engine stats %s" % st)
        e = st["engine"]
        check(e["hits"] >= 2 and 0 < e["hit_rate"] <= 1 and 0 < e["token_reuse_rate"] < 1 and
              "evicted" in e["misses_by_reason"] and "budget" in e["ram"] and "budget" in e["disk"],
              "checkpoint counters, tiers, hit rates, miss reasons: %s" % e)
        # a long reply (until the context is full): first byte, Ctrl-C on a reader, stop
        os.mkdir(m.p("long"))
        write(m.p("long", "settings.json"), '{"max_tokens": 0, "temperature": 0}')
        with open(m.p("long", "message"), "w") as f:
            f.write("Tell me everything.")
        t0 = time.monotonic()
        cat = subprocess.Popen(["cat", m.p("long", "reply")], stdout=subprocess.PIPE)
        first = os.read(cat.stdout.fileno(), 1)
        NUMBERS["first_byte_real_tiny_ms"] = round((time.monotonic() - t0) * 1000, 1)
        check(first, "first byte")
        t0 = time.monotonic()
        cat.send_signal(signal.SIGINT)
        cat.wait(timeout=10)
        NUMBERS["ctrl_c_real_engine_ms"] = round((time.monotonic() - t0) * 1000, 1)
        check(time.monotonic() - t0 < 0.2, "Ctrl-C with the real engine")
        st = read(m.p("long", "status"))
        running = st.startswith(("prefill", "generating"))
        # still going, or already at its own end (a fast machine runs the tiny model's reply
        # to its end-of-text in about 12 ms, before the signal lands): never cancelled
        check(running or (st.startswith("done") and "(stopped)" not in st),
              "Ctrl-C on a reader does not stop generation: " + st)
        check(sh("echo stop > long/ctl", cwd=m.mnt)[0] == 0, "stop")
        st = read(m.p("long", "status"))
        # done: stopped, or (on a fast machine) at its own end just before the stop came
        check(st.startswith("done"), "stopped: " + st)
        size = os.stat(m.p("long", "reply")).st_size
        check(size > 0 and size == len(read(m.p("long", "reply")).encode()), "partial reply kept")


def test_real_engine_templates():
    """Issue "Templates": settings.json's template (a built-in by name) and chat_template
    (Jinja text, compiled when written), and a message the template refuses: EINVAL with the
    template's own message in error, and nothing stored."""
    with Mount("templates", model=MODEL, extra=["-t", "1"]) as m:
        os.mkdir(m.p("t"))
        bad = os.path.join(m.dir, "bad.json")
        write(bad, '{"chat_template": "{% for m in messages %}{{ m.content }"}')
        rc, _, err = sh("cat %s > t/settings.json" % bad, cwd=m.mnt)
        check(rc != 0 and "Invalid argument" in err, "a template that does not compile: %d %r" % (rc, err))
        check(read(m.p("t", "error")).startswith("chat_template does not compile: line 1: "),
              "its compile error: " + read(m.p("t", "error")))
        rc, _, err = sh("""echo '{"template": "vicuna"}' > t/settings.json""", cwd=m.mnt)
        check(rc != 0 and "chatml, qwen3, qwen35" in read(m.p("t", "error")), "an unknown built-in: %r" % err)
        refusing = ("{% if messages[-1].content == 'forbidden' %}{{ raise_exception('No forbidden words.') }}{% endif %}"
                    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                    "<|im_start|>assistant\n")
        write(m.p("t", "settings.json"), json.dumps({"chat_template": refusing, "max_tokens": 4, "temperature": 0}))
        check(json.loads(read(m.p("t", "settings.json")))["chat_template"] == refusing, "chat_template shown")
        # the message is rendered at each write: Python's buffered write reaches the file at
        # the close, and close() fails (tests/scripts_e2e.py: bash's echo at the write)
        try:
            write(m.p("t", "message"), "forbidden\n")
            refused = None
        except OSError as e:
            refused = e.errno
        check(refused == errno.EINVAL, "a refused message: %s" % refused)
        check(read(m.p("t", "error")) == "chat template: No forbidden words.\n", "the template's message: %r"
              % read(m.p("t", "error")))
        check(turns(m, "t") == [] and read(m.p("t", "status")).startswith("error: the message was not sent: "),
              "nothing stored: %s %r"
              % (turns(m, "t"), read(m.p("t", "status"))))
        rc, out, err = sh("echo fine > t/message && cat t/reply", cwd=m.mnt, timeout=120)
        check(rc == 0 and read(m.p("t", "status")).startswith("done 4 tokens"), "the template renders others: %r %r"
              % (err, read(m.p("t", "status"))))
        check(len(turns(m, "t")) == 2 and read(m.p("t", "error")) == "", "one exchange: %s" % turns(m, "t"))
        # a built-in by name for another conversation; null is the model's own again
        os.mkdir(m.p("q"))
        write(m.p("q", "settings.json"), '{"template": "qwen35", "max_tokens": 2, "temperature": 0}')
        rc, _, err = sh("echo hi > q/message && cat q/reply", cwd=m.mnt, timeout=120)
        st = read(m.p("q", "status"))
        check(rc == 0 and st.startswith("done"), "the built-in qwen35: %r %r" % (err, st))
def test_real_engine_moe():
    """a mixture-of-experts model through the files: the reply `chatfs ask` gives without
    checkpoints, a fork that continues like the original and reuses its checkpoints"""
    db = os.path.join(TMP, "moe-ask.db")
    rc, ref, err = sh("'%s' ask -m '%s' --db '%s' --no-checkpoints -n 12 -t 1 'Hello there'" % (CHATFS, MOE_MODEL, db),
                      timeout=120)
    check(rc == 2 and ref, "ask on the MoE model (-n 12 cuts: exit 2): %d %r" % (rc, err))
    with Mount("moe", model=MOE_MODEL, extra=["-t", "1"]) as m:
        write(m.p("settings.json"), '{"max_tokens": 12, "temperature": 0}')
        os.mkdir(m.p("a"))
        rc, out, err = sh("echo 'Hello there' > a/message && cat a/reply", cwd=m.mnt, timeout=120)
        check(rc == 0 and out.rstrip("\n") == ref.rstrip("\n"), "MoE reply %r is not ask's %r" % (out, ref))
        check(read(m.p("a", "status")).startswith("done 12 tokens"), "status " + read(m.p("a", "status")))
        check(sh("cp -r a b", cwd=m.mnt)[0] == 0, "fork")
        r1 = sh("echo next > a/message && cat a/reply", cwd=m.mnt, timeout=120)[1]
        r2 = sh("echo next > b/message && cat b/reply", cwd=m.mnt, timeout=120)[1]
        check(r1 == r2 and r1, "MoE fork and original agree: %r %r" % (r1, r2))
        reused = re.search(r"reused (\d+)/(\d+)", read(m.p("b", "status")))
        check(reused and int(reused.group(1)) > 0, "the MoE fork reused a's checkpoints")


def test_real_engine_attention_only():
    """Qwen2 (attention in every layer) through the files: a rewritten user turn reuses
    everything before the first changed word - its KV pages cut back there, more than any
    checkpoint placed at a message boundary covers - and replies as a new conversation with
    the same text, which reuses the whole prompt"""
    with Mount("qwen2", model=QWEN2_MODEL, extra=["-t", "2"]) as m:
        write(m.p("settings.json"), '{"max_tokens": 8, "temperature": 0}')
        os.mkdir(m.p("a"))
        write(m.p("a", "system"), "You are terse.")
        rc, out, err = sh("echo 'Tell me about the rivers of Europe, from the Danube to the Rhine.' > a/message && "
                          "cat a/reply", cwd=m.mnt, timeout=120)
        check(rc == 0 and out and read(m.p("a", "status")).startswith("done 8 tokens"), "qwen2 reply: %r %r" % (out, err))
        edited = "Tell me about the rivers of Europe, from the Danube to the Volga."
        rc, r1, err = sh("echo '%s' > a/turns/001-user.md && cat a/reply" % edited, cwd=m.mnt, timeout=120)
        st = read(m.p("a", "status"))
        reused = re.search(r"reused (\d+)/(\d+)", st)
        # the prompt after the change: "Volga." and the assistant header, about 14 tokens
        # with the fixture's byte-level vocabulary; a checkpoint at the message's start
        # would leave the whole message (over 60 tokens) to compute
        check(rc == 0 and reused and int(reused.group(2)) - int(reused.group(1)) <= 20,
              "the edit reused less than the unchanged prefix: %r" % st)
        os.mkdir(m.p("c"))
        write(m.p("c", "system"), "You are terse.")
        rc, r2, err = sh("echo '%s' > c/message && cat c/reply" % edited, cwd=m.mnt, timeout=120)
        st = read(m.p("c", "status"))
        reused = re.search(r"reused (\d+)/(\d+)", st)
        check(rc == 0 and r1 == r2 and r1, "the edited turn's reply %r, a new conversation's %r" % (r1, r2))
        check(reused and reused.group(1) == reused.group(2), "the same prompt again is not all reused: %r" % st)
        NUMBERS["qwen2_edit_status"] = read(m.p("a", "status")).strip()


def test_real_engine_six_at_once():
    """six conversations with one system prompt, their messages written at once (six
    threads): each reply is the one the conversation gets alone, on a fresh mount"""
    words = "river mountain silver engine quiet harbor lantern meadow copper violet thunder garden".split()
    system = "You are a translator. Translate this text into French and answer with the translation only. " + \
        " ".join(words[(i * 7) % len(words)] for i in range(120))
    starts = ["Bonjour", "Yesterday", "Quick", "Seven", "Under", "Please"]
    texts = ["%s %s." % (starts[i], " ".join(words[(i + k) % len(words)] for k in range(3 + 9 * i))) for i in range(6)]

    def run(name, at_once):
        m = Mount(name, model=MODEL, extra=["-t", "2"]).start()
        write(m.p("settings.json"), '{"max_tokens": 16, "temperature": 0}')
        for i in range(6):
            os.mkdir(m.p("c%d" % i))
            write(m.p("c%d" % i, "system"), system)
        if at_once:
            # two long replies in the same batch: one removed with rm -r while the six run,
            # one still generating at unmount
            for name in ("gone", "left"):
                os.mkdir(m.p(name))
                write(m.p(name, "settings.json"), '{"max_tokens": 0, "ignore_eos": true}')
                write(m.p(name, "message"), "Tell me everything.")
            ts = [threading.Thread(target=write, args=(m.p("c%d" % i, "message"), texts[i])) for i in range(6)]
            t0 = time.monotonic()
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            rc, _, err = sh("rm -r gone", cwd=m.mnt)
            check(rc == 0 and not os.path.exists(m.p("gone")), "rm -r of a generating conversation: " + err)
        else:
            t0 = time.monotonic()
        replies = []
        for i in range(6):
            if not at_once:
                write(m.p("c%d" % i, "message"), texts[i])
            wait_done(m, "c%d" % i, 120)
            replies.append(read(m.p("c%d" % i, "reply")))
            check(read(m.p("c%d" % i, "status")).startswith("done"), "c%d: %s" % (i, read(m.p("c%d" % i, "status"))))
        elapsed = time.monotonic() - t0
        st = json.loads(read(m.p("stats.json")))["engine"]
        if at_once:
            left = read(m.p("left", "status"))
            check(left.startswith("generating") or "(context full)" in left, "left: " + left)
        m.stop(lazy=False)  # unmount: the running reply stops, the daemon exits
        check(m.proc.returncode == 0 and not os.path.ismount(m.mnt), "unmount while generating: exit %s, %s" %
              (m.proc.returncode, m.log_text()[-500:]))
        return replies, st, elapsed

    together, st, t_together = run("six", True)
    alone, _, t_alone = run("six-alone", False)
    for i in range(6):
        check(together[i] == alone[i], "c%d: written at once %r, alone %r" % (i, together[i], alone[i]))
    check(st["requests"] == 8 and st["failed"] == 0 and st["cancelled"] == 1, "engine stats %s" % st)
    NUMBERS["six_at_once_s"] = round(t_together, 3)
    NUMBERS["six_one_by_one_s"] = round(t_alone, 3)
    NUMBERS["six_at_once_single_flight_tokens"] = st.get("single_flight_tokens")
    NUMBERS["six_at_once_max_active"] = st.get("max_active")


def thought(msg, n):
    """the fake engine's reasoning for msg with n words (backend_fake.c: think=N)"""
    return ("Thinking about: %s." % msg[:40]) + "".join(" t%d" % i for i in range(1, n)) + "\n"


def test_thinking_files():
    """Issue 25 on the fake engine: `thinking` streams the reasoning with reply's semantics
    (blocking cat, EOF when the answer starts, epoll, O_NONBLOCK, Ctrl-C), status says
    thinking then generating and done counts both, settings are checked when written,
    turns/NNN-assistant.thinking.md is read-write, messages.json round-trips
    reasoning_content, transcript.md quotes it, and copies in (tar, rsync, copytree,
    cp -a) carry the .thinking.md files"""
    with Mount("thinking", fake="delay=20,think=3,temp=0.6") as m:
        check("The model can think" in read(m.p("README")), "README says the model can think")
        check('"temperature": 0.6,' in read(m.p("settings.json")), "the backend's recommended temperature")
        os.mkdir(m.p("a"))
        check(read(m.p("a", "thinking")) == "", "empty before any reply")
        # cat thinking blocks, streams, and ends when the answer begins
        send(m, "a", "add up #think=5 #delay=150")
        t0 = time.monotonic()
        rc, th, _ = sh("cat a/thinking", cwd=m.mnt)
        dt = time.monotonic() - t0
        st = read(m.p("a", "status"))
        check(rc == 0 and th == thought("add up #think=5 #delay=150", 5), "thinking %r" % th)
        check(dt > 0.5 and st.startswith("generating"), "EOF when the answer starts (%.2f s, status %r)" % (dt, st))
        check(read(m.p("a", "reply")) == expected("add up #think=5 #delay=150"), "reply: the answer only")
        wait_done(m, "a")
        st = read(m.p("a", "status"))
        check(re.match(r"done 17 tokens \(5 thinking\) \d+\.\d tok/s reused \d+/\d+ turn 2\n\Z", st), "done: %r" % st)
        check(turns(m, "a") == ["001-user.md", "002-assistant.md", "002-assistant.thinking.md"], str(turns(m, "a")))
        check(read(m.p("a", "turns", "002-assistant.thinking.md")) == th, "the turn's reasoning")
        # status while thinking; epoll on thinking; O_NONBLOCK; Ctrl-C on a waiting cat
        send(m, "a", "slow #think=6 #delay=400 #tokens=2")
        check(wait_for(lambda: re.match(r"thinking [1-9]\d* tokens \d+\.\d tok/s turn \d+\n\Z", read(m.p("a", "status"))), 3,
                       0.01), "status while thinking: %r" % read(m.p("a", "status")))
        fd = os.open(m.p("a", "thinking"), os.O_RDONLY | os.O_NONBLOCK)
        got = b""
        try:
            while True:
                got += os.read(fd, 4096)
        except BlockingIOError as e:
            check(e.errno == errno.EAGAIN and got.startswith(b"Thinking about: slow"), "O_NONBLOCK: EAGAIN after %r" % got)
        ep = select.epoll()
        ep.register(fd, select.EPOLLIN)
        check(ep.poll(5) != [], "epoll wakes at the next reasoning word")
        ep.close()
        os.close(fd)
        cat = subprocess.Popen(["cat", m.p("a", "thinking")], stdout=subprocess.PIPE)
        os.read(cat.stdout.fileno(), 100)
        time.sleep(0.3)
        t0 = time.monotonic()
        cat.send_signal(signal.SIGINT)
        cat.wait(timeout=10)
        NUMBERS["ctrl_c_thinking_ms"] = round((time.monotonic() - t0) * 1000, 1)
        check(time.monotonic() - t0 < 0.2, "Ctrl-C on cat thinking")
        check(read(m.p("a", "status")).startswith("thinking"), "the reasoning goes on")
        check(sh("echo stop > a/ctl", cwd=m.mnt)[0] == 0, "stop")
        wait_done(m, "a")
        # settings: checked when written, the reason in error
        for bad in ('{"thinking": "yes"}', '{"thinking_budget": -2}', '{"thinking_budget": "10"}'):
            rc, _, err = sh("echo '%s' > a/settings.json" % bad, cwd=m.mnt)
            check(rc != 0 and "Invalid argument" in err and "thinking" in read(m.p("a", "error")),
                  "%s refused: %r %r" % (bad, err, read(m.p("a", "error"))))
        rc, _, err = sh("echo '{\"thinking\": 1}' > settings.json", cwd=m.mnt)
        check(rc != 0 and "Invalid argument" in err, "the root's too")
        os.mkdir(m.p("off"))
        write(m.p("off", "settings.json"), '{"thinking": false, "thinking_budget": 1}')
        s = json.loads(read(m.p("off", "settings.json")))
        check(s["thinking"] is False and s["thinking_budget"] == 1, "settings show them: %s" % s)
        rc, out, _ = sh("echo 'plain #think=4' > off/message; cat off/reply; cat off/thinking", cwd=m.mnt)
        check(out == expected("plain #think=4"), "thinking false: no reasoning: %r" % out)
        write(m.p("off", "settings.json"), '{"thinking": null, "thinking_budget": 1}')
        rc, out, _ = sh("echo 'capped #think=4' > off/message; cat off/thinking", cwd=m.mnt)
        check(out == thought("capped #think=4", 1), "budget 1: %r" % out)
        # the reasoning file is edited like a turn; transcript and messages.json show it
        write(m.p("a", "turns", "002-assistant.thinking.md"), "first I add 2 and 3\n\nthen 5\n")
        check(read(m.p("a", "turns", "002-assistant.thinking.md")) == "first I add 2 and 3\n\nthen 5\n", "edited")
        tr = read(m.p("a", "transcript.md"))
        check("## assistant\n\n> *thinking*\n>\n> first I add 2 and 3\n>\n> then 5\n\nReply to: add up" in tr,
              "transcript quotes the reasoning: %r" % tr[:400])
        msgs = json.loads(read(m.p("a", "messages.json")))
        check(msgs[1]["reasoning_content"] == "first I add 2 and 3\n\nthen 5" and "reasoning_content" not in msgs[0],
              "messages.json: %s" % msgs[:2])
        # messages.json imported into a new conversation: the reasoning comes along
        os.mkdir(m.p("imp"))
        write(m.p("imp", "messages.json"), json.dumps(msgs))
        check(json.loads(read(m.p("imp", "messages.json"))) == msgs, "messages.json round trip")
        check(read(m.p("imp", "turns", "002-assistant.thinking.md")) == "first I add 2 and 3\n\nthen 5\n",
              "imported reasoning file")
        # copies in carry the .thinking.md files (each tool into a new name)
        src = os.path.join(m.dir, "src")
        os.makedirs(src)
        check(sh("cp -r '%s' '%s/a'" % (m.p("a"), src))[0] == 0, "copy out")
        check(os.path.exists(os.path.join(src, "a", "turns", "002-assistant.thinking.md")), "copied out")
        want = conversation_files(m.mnt, "a")
        for tool, cmd in COPY_TOOLS.items():
            name = tool + "_a"
            shutil.copytree(os.path.join(src, "a"), os.path.join(src, name))
            os.remove(os.path.join(src, name, "messages.json"))  # the turn files alone must bring it
            rc, out, err = sh(cmd.format(src=src, tmp=m.dir, mnt=m.mnt, name=name), timeout=30)
            check(rc == 0, "%s exits %d: %r" % (tool, rc, err[-600:]))
            got = conversation_files(m.mnt, name)
            check(got == want, "%s: the copy differs: %s" % (tool, {k: (want.get(k), got.get(k)) for k in
                                                                   set(want) | set(got) if want.get(k) != got.get(k)}))
        # tar of the mount itself, extracted as a new conversation
        check(sh("tar -C '%s' -cf '%s/m.tar' a && mv a a_orig && timeout 30 tar -C '%s' -xf '%s/m.tar'" %
                 (m.mnt, m.dir, m.mnt, m.dir), cwd=m.mnt)[0] == 0, "tar of the mount, extracted again")
        check(conversation_files(m.mnt, "a") == want, "the mount's own archive keeps the reasoning")
        # rm of the reasoning file: the answer stays
        os.remove(m.p("a", "turns", "002-assistant.thinking.md"))
        check("002-assistant.thinking.md" not in turns(m, "a") and
              read(m.p("a", "turns", "002-assistant.md")) == expected("add up #think=5 #delay=150"), "rm reasoning")
        check(sh("rm -r a_orig", cwd=m.mnt)[0] == 0 and not os.path.exists(m.p("a_orig")), "rm -r with reasoning files")


def test_default_model_thinking():
    """Issue 25's acceptance with the bundled model (needs the engine's side: the engine
    splits the reasoning off and reports it): a multi-step question with thinking on gives
    a non-empty thinking and the right answer in reply without <think> text; thinking off
    an empty thinking and the right answer; a budget cuts a long reasoning and still answers;
    messages.json round-trips reasoning_content"""
    with Mount("default-thinking", model=DEFAULT_MODEL, extra=["-t", "2"]) as m:
        check("The model can think" in read(m.p("README")),
              "the engine says the model cannot think (engine_can_think): %r" % read(m.p("README"))[-300:])
        write(m.p("settings.json"), '{"temperature": 0, "max_tokens": 200}')
        os.mkdir(m.p("on"))
        rc, reply, _ = sh("echo 'What is 14 + 5 + 20?' > on/message; cat on/reply", cwd=m.mnt, timeout=120)
        th = read(m.p("on", "thinking"))
        check(th.strip() and "39" in reply and "<think>" not in reply and "</think>" not in reply,
              "thinking on: thinking %r reply %r" % (th, reply))
        check(re.match(r"done \d+ tokens \([1-9]\d* thinking\)", read(m.p("on", "status"))), read(m.p("on", "status")))
        os.mkdir(m.p("off"))
        write(m.p("off", "settings.json"), '{"thinking": false}')
        rc, reply, _ = sh("echo 'What is 14 + 5 + 20?' > off/message; cat off/reply", cwd=m.mnt, timeout=120)
        check(read(m.p("off", "thinking")) == "" and "39" in reply and "<think>" not in reply,
              "thinking off: %r" % reply)
        os.mkdir(m.p("cap"))
        write(m.p("cap", "settings.json"), '{"thinking_budget": 4}')
        rc, reply, _ = sh("echo 'Think step by step: what is 12 + 7 + 30?' > cap/message; cat cap/reply", cwd=m.mnt,
                          timeout=120)
        st = read(m.p("cap", "status"))
        got = re.match(r"done \d+ tokens \((\d+) thinking\)", st)
        check(got and int(got.group(1)) <= 6 and reply.strip(), "budget 4: %r %r" % (st, reply))
        msgs = json.loads(read(m.p("on", "messages.json")))
        os.mkdir(m.p("copy"))
        write(m.p("copy", "messages.json"), json.dumps(msgs))
        check(json.loads(read(m.p("copy", "messages.json"))) == msgs and msgs[1].get("reasoning_content"),
              "reasoning_content round trip")
        NUMBERS["default_thinking_status"] = read(m.p("on", "status")).strip()


def test_default_model():
    """The bundled model through the files (issue "Default model"): arithmetic, a follow-up
    that refers to the previous answer, a system-prompt instruction; the same replies with
    checkpoints on and off, and the follow-up reuses the first turn when they are on."""
    replies = {}
    for ck in ("true", "false"):
        with Mount("default-" + ck, model=DEFAULT_MODEL, extra=["-t", "2"]) as m:
            write(m.p("settings.json"), '{"temperature": 0, "max_tokens": 48, "checkpoints": %s}' % ck)
            os.mkdir(m.p("c"))
            r1 = sh("echo 'What is 17 + 25?' > c/message; cat c/reply", cwd=m.mnt, timeout=120)[1]
            r2 = sh("echo 'Add 5 to that.' > c/message; cat c/reply", cwd=m.mnt, timeout=120)[1]
            st2 = read(m.p("c", "status"))
            os.mkdir(m.p("u"))
            write(m.p("u", "system"), "Answer in uppercase.")
            r3 = sh("echo 'What is the capital of France?' > u/message; cat u/reply", cwd=m.mnt, timeout=120)[1]
            replies[ck] = (r1, r2, r3)
            if ck == "true":
                reused = re.search(r"reused (\d+)/(\d+)", st2)
                check(reused and int(reused.group(1)) > 0, "the follow-up reused no checkpoint: %r" % st2)
                NUMBERS["default_model_followup"] = st2.strip()
    r1, r2, r3 = replies["true"]
    check("42" in r1, "17 + 25: %r" % r1)
    check("47" in r2, "add 5 to that: %r" % r2)
    check(r3.strip() and r3 == r3.upper() and "PARIS" in r3, "uppercase system prompt: %r" % r3)
    check(replies["true"] == replies["false"], "checkpoints on/off differ: %r vs %r" % (replies["true"], replies["false"]))


TESTS = [(n[5:], f) for n, f in list(globals().items()) if n.startswith("test_")]


def main():
    want = [a for a in sys.argv[1:] if not a.startswith("-")]
    os.makedirs(TMP, exist_ok=True)
    passed = failed = 0
    for name, fn in TESTS:
        if want and not any(w in name for w in want):
            continue
        for d in os.listdir(TMP):  # a clean slate (never through a mount that is still there)
            if not os.path.ismount(os.path.join(TMP, d, "mnt")):
                shutil.rmtree(os.path.join(TMP, d), ignore_errors=True)

        def alarm(*a):
            raise Fail("timed out")

        signal.signal(signal.SIGALRM, alarm)
        signal.alarm(180)
        t0 = time.monotonic()
        try:
            fn()
            passed += 1
            print("ok   fs %-34s %.1f s" % (name, time.monotonic() - t0), flush=True)
        except Exception as e:  # noqa: BLE001 - report and go on
            failed += 1
            print("FAIL fs %-34s %s: %s" % (name, type(e).__name__, e), flush=True)
            log = os.path.join(TMP, name, "daemon.log")
            if os.path.exists(log) and VERBOSE:
                print(read(log)[-3000:])
        finally:
            signal.alarm(0)
            # whatever a failed test left: lazy unmounts, then the daemons it started
            while MOUNTS:
                MOUNTS.pop().stop()
    if not failed:  # keep what a failure left for a look; else tidy up
        for d in os.listdir(TMP):
            if not os.path.ismount(os.path.join(TMP, d, "mnt")):
                shutil.rmtree(os.path.join(TMP, d), ignore_errors=True)
    if NUMBERS:
        print("fs numbers: " + json.dumps(NUMBERS))
    print("fs: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
