#!/usr/bin/env python3
"""What scripts meet (issue 37, item 1 and its bullets), with the real tools: bash's
`echo >` and `cat`, and the `sqlite3` CLI holding the database. Every failure must be
visible to the shell or in a file a script reads: a message the template refuses fails
the write, a refused message leaves no stale reply to mistake for the answer, status
names the turn a reply answers, a busy database never drops a message, and the limits
(the context at mount, the system prompt, an import's keys) say why. Runs with
tests/fs_e2e.py's helpers: python3 tests/scripts_e2e.py [NAME...] [-v]"""
import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fs_e2e as E  # noqa: E402

E.TMP = os.path.join(E.ROOT, "tests", "tmp", "scripts")
CHATFS, MODEL, check, sh, read, write = E.CHATFS, E.MODEL, E.check, E.sh, E.read, E.write

REFUSING = ("{% if messages[-1].content == 'forbidden' %}{{ raise_exception('No forbidden words.') }}{% endif %}"
            "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
            "<|im_start|>assistant\n")


def test_template_refusal_fails_the_write():
    """a message the chat template refuses: bash's `echo > message` exits non-zero (the
    write fails with EINVAL), the template's message is in error, nothing is stored, and
    status says the message was not sent; the next message goes through"""
    with E.Mount("refuse", model=MODEL, extra=["-t", "1"]) as m:
        os.mkdir(m.p("t"))
        write(m.p("t", "settings.json"), json.dumps({"chat_template": REFUSING, "max_tokens": 3, "temperature": 0}))
        rc, _, err = sh("echo forbidden > t/message", cwd=m.mnt)
        check(rc != 0 and "Invalid argument" in err, "echo exits %d: %r" % (rc, err))
        check(read(m.p("t", "error")) == "chat template: No forbidden words.\n", "error: %r" % read(m.p("t", "error")))
        check(E.turns(m, "t") == [], "nothing stored: %s" % E.turns(m, "t"))
        st = read(m.p("t", "status"))
        check(st == "error: the message was not sent: chat template: No forbidden words.\n", "status: %r" % st)
        rc, out, err = sh("echo fine > t/message && cat t/reply", cwd=m.mnt, timeout=120)
        check(rc == 0 and out.strip(), "the next message: %d %r" % (rc, err))
        check(re.match(r"done 3 tokens .* turn 2\n\Z", read(m.p("t", "status"))), read(m.p("t", "status")))


def test_refused_send_leaves_no_stale_reply():
    """after a refused message, `cat reply` and `cat thinking` fail (EIO) instead of
    printing the previous answer, until the next message; every reply's status line ends
    with its turn number"""
    with E.Mount("stale", fake="delay=2") as m:
        os.mkdir(m.p("a"))
        rc, out, err = sh("echo one > a/message && cat a/reply", cwd=m.mnt)
        check(rc == 0 and out == E.expected("one"), "first reply: %d %r" % (rc, err))
        st = read(m.p("a", "status"))
        check(re.match(r"done 12 tokens \d+\.\d tok/s reused \d+/\d+ turn 2\n\Z", st), "status: %r" % st)
        # the fake's template refuses a message that says #refuse (fs/backend.h)
        rc, _, err = sh("echo 'two #refuse' > a/message", cwd=m.mnt)
        check(rc != 0, "the refused write exits %d" % rc)
        rc, out, err = sh("cat a/reply", cwd=m.mnt)
        check(rc != 0 and out == "" and "Input/output error" in err, "cat reply: %d %r %r" % (rc, out, err))
        rc, out, err = sh("cat a/thinking", cwd=m.mnt)
        check(rc != 0 and "Input/output error" in err, "cat thinking: %d %r" % (rc, err))
        st = read(m.p("a", "status"))
        check(st.startswith("error: the message was not sent: fake template:"), "status: %r" % st)
        check(E.turns(m, "a") == ["001-user.md", "002-assistant.md"], "nothing stored: %s" % E.turns(m, "a"))
        rc, out, err = sh("echo three > a/message && cat a/reply", cwd=m.mnt)
        check(rc == 0 and out == E.expected("three"), "the next message: %d %r" % (rc, err))
        check(read(m.p("a", "status")).endswith(" turn 4\n"), "turn 4: %r" % read(m.p("a", "status")))
        # while it generates too: the line names the turn being written
        rc, _, _ = sh("echo 'four #delay=100' > a/message", cwd=m.mnt)
        check(E.wait_for(lambda: read(m.p("a", "status")).startswith("generating"), 5), read(m.p("a", "status")))
        check(re.match(r"generating \d+ tokens \d+\.\d tok/s turn 6\n\Z", read(m.p("a", "status"))),
              "generating: %r" % read(m.p("a", "status")))
        E.wait_done(m, "a")


class Locker:
    """the sqlite3 CLI holding db with BEGIN EXCLUSIVE for secs seconds (then COMMIT)"""

    def __init__(self, db, secs):
        self.p = subprocess.Popen(["sqlite3", db], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.p.stdin.write("BEGIN EXCLUSIVE;\nSELECT 'locked';\n")
        self.p.stdin.flush()
        check(self.p.stdout.readline().strip() == "locked", "sqlite3 took no lock")
        self.until = time.monotonic() + secs

    def release(self):
        time.sleep(max(0, self.until - time.monotonic()))
        self.p.stdin.write("COMMIT;\n")
        self.p.stdin.close()
        self.p.wait(timeout=10)


def db_turns(db, conv):
    rc, out, err = sh("sqlite3 '%s' \"SELECT t.idx || ' ' || t.role || ' ' || t.content FROM conversation_turn t JOIN "
                      "conversation c ON c.id = t.conversation WHERE c.name = '%s' ORDER BY t.idx\"" % (db, conv))
    check(rc == 0, "sqlite3 read: %r" % err)
    return out.splitlines()


def test_busy_database_keeps_the_message():
    """another process holding the database (sqlite3 with BEGIN EXCLUSIVE for 15 s): a
    message is still sent and answered at once (echo exits 0, cat reply reads the
    answer), error says it is not stored yet, it is stored when the lock goes, and a
    remount shows it; a change that cannot wait (the system prompt) fails with EAGAIN"""
    with E.Mount("busy", fake="delay=2") as m:
        os.mkdir(m.p("a"))
        rc, out, _ = sh("echo one > a/message && cat a/reply", cwd=m.mnt)
        check(rc == 0 and out == E.expected("one"), "before the lock")
        lock = Locker(m.db, 15)
        t0 = time.monotonic()
        rc, out, err = sh("echo two > a/message && cat a/reply", cwd=m.mnt)
        dt = time.monotonic() - t0
        check(rc == 0 and out == E.expected("two"), "sent while the database is held: %d %r %r" % (rc, out, err))
        check(dt < 5, "no long stall: %.1f s" % dt)
        check(re.match(r"done 12 tokens .* turn 4\n\Z", read(m.p("a", "status"))), read(m.p("a", "status")))
        check("database is busy" in read(m.p("a", "error")) and "not stored yet" in read(m.p("a", "error")),
              "error: %r" % read(m.p("a", "error")))
        check(len(db_turns(m.db, "a")) == 2, "not in the database yet: %s" % db_turns(m.db, "a"))
        rc, _, err = sh("mkdir b", cwd=m.mnt)
        check(rc != 0 and "Resource temporarily unavailable" in err and not os.path.exists(m.p("b")),
              "mkdir while held: %d %r" % (rc, err))
        try:  # the system prompt is stored at the close, where Python looks
            write(m.p("a", "system"), "Be brief.\n")
            got = None
        except OSError as e:
            got = e.errno
        check(got == E.errno.EAGAIN, "system while held: %s" % got)
        check("database is busy (another process holds it): the system prompt was not stored" in read(m.p("a", "error")),
              "its reason: %r" % read(m.p("a", "error")))
        check(read(m.p("a", "system")) == "", "the old prompt stays")
        lock.release()
        check(E.wait_for(lambda: len(db_turns(m.db, "a")) == 4, 5), "stored when the lock went: %s" % db_turns(m.db, "a"))
        check(E.wait_for(lambda: read(m.p("a", "error")) == "", 3), "error cleared: %r" % read(m.p("a", "error")))
    with E.Mount("busy", fake="delay=2", db=m.db) as m2:
        check(E.turns(m2, "a") == ["001-user.md", "002-assistant.md", "003-user.md", "004-assistant.md"],
              "after a remount: %s" % E.turns(m2, "a"))
        check(read(m2.p("a", "turns", "003-user.md")) == "two\n" and
              read(m2.p("a", "turns", "004-assistant.md")) == E.expected("two"), "the texts")


def test_context_cut_is_said_at_mount():
    """-c larger than the model's context: the mount says on stderr that it was cut, to
    what and why; a -c that fits says nothing of the kind"""
    with E.Mount("ctx", model=MODEL, extra=["-t", "1", "-c", "100000"]) as m:
        log = m.log_text()
        check("chatfs: -c 100000 is more than the model's context (it was trained on 4096 tokens): a conversation "
              "holds at most 4096" in log, "mount's stderr: %r" % log)
        check("context 4096 tokens per conversation" in read(m.p("README")) or "4096" in read(m.p("stats.json")),
              "the context in effect")
    with E.Mount("ctx2", model=MODEL, extra=["-t", "1", "-c", "1024"]) as m:
        check("more than the model's context" not in m.log_text(), "a -c that fits: %r" % m.log_text())


def test_thinking_of_only_the_markers():
    """a reply whose reasoning was only its markers (thinking_budget 0 closes it at once):
    the thinking file is empty and status says what the thinking tokens were"""
    with E.Mount("markers", model=E.DEFAULT_MODEL, extra=["-t", "1"]) as m:
        os.mkdir(m.p("a"))
        write(m.p("a", "settings.json"), '{"thinking_budget": 0, "max_tokens": 8, "temperature": 0}')
        rc, out, err = sh("echo 'What is 2+2?' > a/message && cat a/reply", cwd=m.mnt, timeout=120)
        check(rc == 0, "sent: %r" % err)
        st = read(m.p("a", "status"))
        check(read(m.p("a", "thinking")) == "", "thinking: %r" % read(m.p("a", "thinking")))
        check(re.match(r"done 8 tokens \(2 thinking: only the markers\) ", st), "status: %r" % st)
        # chatfs ask through the mount reads that status: its --json counts the same tokens
        rc, out, err = sh("'%s' ask --db '%s' --conversation a --json -n 8 'And 3+3?'" % (CHATFS, m.db), timeout=120)
        o = json.loads(out) if rc == 2 else {}  # 2: -n cut the reply
        st = read(m.p("a", "status"))
        check(rc == 2 and o["reasoning"] == "" and "(2 thinking: only the markers)" in st and o["reasoning_tokens"] == 2,
              "ask --json: %d %r %r %r" % (rc, out, err, st))
        # a reply with reasoning keeps the plain count
        os.mkdir(m.p("b"))
        write(m.p("b", "settings.json"), '{"thinking_budget": 6, "max_tokens": 12, "temperature": 0}')
        rc, out, err = sh("echo 'What is 14 + 5 + 20?' > b/message && cat b/reply", cwd=m.mnt, timeout=120)
        st = read(m.p("b", "status"))
        check(rc == 0 and read(m.p("b", "thinking")) != "" and re.match(r"done 12 tokens \(\d+ thinking\) ", st),
              "with reasoning: %r %r" % (read(m.p("b", "thinking")), st))


def test_system_prompt_too_long_fails_its_write():
    """a 5 MB system prompt: `cat big > system` fails with EFBIG (File too large) and error
    says why; the prompt stays as it was and messages still go through"""
    with E.Mount("system", fake="delay=2") as m:
        os.mkdir(m.p("a"))
        big = os.path.join(m.dir, "big.txt")
        write(big, ("All work and no play makes Jack a dull boy. " * 120000)[:5000000] + "\n")
        rc, _, err = sh("cat '%s' > a/system" % big, cwd=m.mnt)
        check(rc != 0 and "File too large" in err, "cat exits %d: %r" % (rc, err))
        e = read(m.p("a", "error"))
        check(e.startswith("the system prompt makes the conversation ") and "more than the context of 4096" in e,
              "error: %r" % e)
        check(read(m.p("a", "system")) == "", "the prompt stays: %d bytes" % len(read(m.p("a", "system"))))
        rc, _, err = sh("echo 'Be brief.' > a/system && echo hi > a/message", cwd=m.mnt)
        check(rc == 0 and read(m.p("a", "system")) == "Be brief.\n", "a prompt that fits: %r" % err)
        E.wait_done(m, "a")
        check(read(m.p("a", "reply")) == E.expected("hi"), "the message after it")


def test_import_refuses_what_it_would_drop():
    """messages.json with a key a conversation cannot keep (a name, a content part's
    cache_control) or tool keys out of place: the write fails with EINVAL (echo exits
    non-zero), error names the key, nothing is imported; tool_calls and tool messages in
    OpenAI's shape are kept"""
    with E.Mount("import", fake="delay=2") as m:
        os.mkdir(m.p("a"))
        calls = ('[{"role": "user", "content": "weather?"}, {"role": "user", "content": "", "tool_calls": '
                 '[{"id": "1", "type": "function", "function": {"name": "w", "arguments": "{}"}}]}]')
        rc, _, err = sh("echo '%s' > a/messages.json" % calls, cwd=m.mnt)
        check(rc != 0 and "Invalid argument" in err, "tool_calls on a user message: %d %r" % (rc, err))
        check("message 2: tool_calls must be an array, on an assistant message" in read(m.p("a", "error")),
              "error: %r" % read(m.p("a", "error")))
        check(E.turns(m, "a") == [], "nothing imported: %s" % E.turns(m, "a"))
        rc, _, err = sh("""echo '[{"role": "user", "content": "hi", "name": "bob"}]' > a/messages.json""", cwd=m.mnt)
        check(rc != 0 and 'message 1 has "name"' in read(m.p("a", "error")), "name: %r" % read(m.p("a", "error")))
        rc, _, err = sh("""echo '[{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {}}]}]'"""
                        """ > a/messages.json""", cwd=m.mnt)
        check(rc != 0 and '"cache_control"' in read(m.p("a", "error")), "a part's key: %r" % read(m.p("a", "error")))
        rc, _, err = sh("""echo '[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", """
                        """"reasoning_content": null}]' > a/messages.json""", cwd=m.mnt)
        check(rc == 0 and E.turns(m, "a") == ["001-user.md", "002-assistant.md"], "what it keeps: %r" % err)


def test_signal_ends_a_waiting_cat_cleanly():
    """Ctrl-C on -f (SIGINT) and kill (SIGTERM) of the daemon while `cat reply` waits for
    tokens: the reply is stopped and kept, cat prints it as far as it got and exits 0 (not
    an I/O error), the daemon exits 0 and the mount is gone; after a remount the reply is
    there and status says it was stopped"""
    for sig in (signal.SIGINT, signal.SIGTERM):
        name = "signal%d" % sig
        m = E.Mount(name, fake="delay=30").start()
        try:
            os.mkdir(m.p("a"))
            check(sh("echo 'go on #delay=200' > a/message", cwd=m.mnt)[0] == 0, "the send")
            cat = subprocess.Popen(["cat", m.p("a", "reply")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)
            check(E.wait_for(lambda: re.match(r"generating [2-9]", read(m.p("a", "status"))), 10),
                  read(m.p("a", "status")))
            m.proc.send_signal(sig)
            out, err = cat.communicate(timeout=15)
            check(cat.returncode == 0 and err == "", "%s: cat exits %d: %r" % (sig, cat.returncode, err))
            check(len(out.split()) >= 2 and out.endswith("\n"), "%s: cat printed %r" % (sig, out))
            check(m.proc.wait(timeout=15) == 0, "%s: the daemon exits %s" % (sig, m.proc.returncode))
            check(not os.path.ismount(m.mnt), "%s: still mounted" % sig)
        finally:
            m.stop()
        with E.Mount(name, fake="delay=30") as m:
            st = read(m.p("a", "status"))
            check(st == "stopped: the reply was stopped and kept as far as it got turn 2\n", "%s: %r" % (sig, st))
            kept = read(m.p("a", "turns", "002-assistant.md"))
            check(kept.rstrip("\n") == out.rstrip("\n"), "%s: kept %r, cat read %r" % (sig, kept, out))


E.TESTS = [(n[5:], f) for n, f in list(globals().items()) if n.startswith("test_")]

if __name__ == "__main__":
    sys.exit(E.main())
