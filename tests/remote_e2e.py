#!/usr/bin/env python3
"""End-to-end tests of chatfs over a real llama-server (run by tests/t_remote.sh).

`chatfs mount --engine URL` and `chatfs ask --engine URL` against llama.cpp's own server
(built from the pinned source by tests/remote/llama-server.sh, started on 127.0.0.1 with
the bundled default model by tests/remote/start-server.sh): the filesystem cases that make
sense for a remote engine (echo/cat, streaming with cat and tail -f, editors, cp -r fork,
settings, ctl stop, Ctrl-C while the server is silent, unmount/remount), the default
model's answers, and the failures: the server killed mid-reply, a wrong URL, an unknown
model, a wrong API key, a request the server refuses (HTTP 400: longer than its context),
a 500 (from a tiny local HTTP server: llama-server gives no 500 for any request chatfs can
send), ten conversations at once. The helpers (Mount, sh, check, ...) are fs_e2e.py's.

Usage: remote_e2e.py [-v] [NAME_SUBSTRING ...]   (LLAMA_SERVER: the binary; else built)
"""
import http.server
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fs_e2e  # noqa: E402
from fs_e2e import Fail, check, read, sh, wait_for, write, turns  # noqa: E402

ROOT = fs_e2e.ROOT
CHATFS = fs_e2e.CHATFS
START = os.path.join(ROOT, "tests", "remote", "start-server.sh")
NUMBERS = {}
SERVERS = []
KEY = "sk-chatfs-test-7d1c2e9f"


class Server:
    """llama-server started by start-server.sh; stop() kills it"""

    def __init__(self, name, args=(), port=None, model=None):
        self.dir = os.path.join(fs_e2e.TMP, name, "server")
        self.args, self.port, self.pid, self.model = list(args), port, None, model
        SERVERS.append(self)

    def start(self):
        os.makedirs(self.dir, exist_ok=True)
        env = dict(os.environ)
        if self.port:
            env["PORT"] = str(self.port)
        if self.model:
            env["MODEL"] = self.model
        p = subprocess.run([START, self.dir] + self.args, capture_output=True, text=True, timeout=600, env=env)
        check(p.returncode == 0, "llama-server did not start: %s" % p.stderr[-2000:])
        self.url = p.stdout.strip().splitlines()[-1]
        self.pid = int(read(os.path.join(self.dir, "pid")))
        self.port = int(read(os.path.join(self.dir, "port")))
        return self

    def log(self):
        return read(os.path.join(self.dir, "log"))

    def signal(self, sig):
        os.kill(self.pid, sig)

    def stop(self):
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGCONT)
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass
            wait_for(lambda: not os.path.exists("/proc/%d" % self.pid) or
                     "Z" in sh("ps -o stat= -p %d" % self.pid)[1], 10)
            self.pid = None


class RemoteMount(fs_e2e.Mount):
    """chatfs mount --engine URL in the foreground"""

    def __init__(self, name, url, extra=(), db=None, foreground=True):
        super().__init__(name, db=db, extra=extra)
        self.url, self.foreground = url, foreground

    def cmd(self):
        return [CHATFS, "mount", self.mnt, "--db", self.db, "--engine", self.url] + (["-f"] if self.foreground else []) + \
            self.extra


def mount_refused(name, url, extra=()):
    """chatfs mount that must fail: (exit status, stderr, whether it mounted)"""
    m = RemoteMount(name, url, extra, foreground=False)  # a daemon: the parent reports whether it mounted
    os.makedirs(m.mnt, exist_ok=True)
    p = subprocess.run(m.cmd(), capture_output=True, text=True, timeout=60)
    mounted = os.path.ismount(m.mnt)
    if mounted:
        m.stop()
    return p.returncode, p.stderr, mounted


def greedy(m, extra=""):
    write(m.p("settings.json"), '{"temperature": 0, "max_tokens": 64%s}' % extra)


def ask(m, conv, text, timeout=60):
    return sh("cat > %s/message && cat %s/reply" % (conv, conv), cwd=m.mnt, timeout=timeout, input=text + "\n")


def wait_done(m, conv, timeout=60):
    ok = wait_for(lambda: read(m.p(conv, "status")).startswith(("done", "error", "idle")), timeout)
    check(ok, "%s never finished: %s" % (conv, read(m.p(conv, "status"))))


def long_reply(m, conv, tokens=3000):
    """a reply that goes on (the model's end-of-turn ignored) for `tokens` tokens"""
    write(m.p(conv, "settings.json"), '{"temperature": 0, "max_tokens": %d, "ignore_eos": true}' % tokens)


# ---------------------------------------------------------------- tests


def test_default_model_answers(srv):
    """echo/cat with the bundled model on llama-server: 42, the follow-up 47, a system
    prompt; status and stats.json show the server's own prefix cache"""
    with RemoteMount("answers", srv.url) as m:
        greedy(m)
        os.mkdir(m.p("c"))
        rc, r1, err = ask(m, "c", "What is 17 + 25?")
        check(rc == 0 and "42" in r1, "17 + 25: %r %r" % (r1, err))
        rc, r2, err = ask(m, "c", "Add 5 to that.")
        check(rc == 0 and "47" in r2, "add 5 to that: %r %r" % (r2, err))
        st = read(m.p("c", "status"))
        got = re.match(r"done (\d+) tokens [\d.]+ tok/s reused (\d+)/(\d+)", st)
        check(got and int(got.group(2)) > 0 and int(got.group(3)) > int(got.group(2)),
              "the follow-up's status shows the server's cached prefix: %r" % st)
        NUMBERS["followup_status"] = st.strip()
        # usage.json: the server counts and caches, so tokens, context and checkpoints are
        # unknown here; the last prompt's reuse is the server's, as status says
        u = json.loads(read(m.p("c", "usage.json")))
        check(u["turns"] == 4 and u["tokens"] is None and u["context"] is None and u["checkpoints"] is None and
              u["last_prompt"]["reused_tokens"] == int(got.group(2)), "usage.json with --engine: %s" % u)
        check(turns(m, "c") == ["001-user.md", "002-assistant.md", "003-user.md", "004-assistant.md"], "turns")
        check(read(m.p("c", "turns", "002-assistant.md")) == r1, "the turn is the reply")
        msgs = json.loads(read(m.p("c", "messages.json")))
        check([x["role"] for x in msgs] == ["user", "assistant", "user", "assistant"], "messages.json")
        os.mkdir(m.p("u"))
        write(m.p("u", "system"), "Answer in uppercase.")
        rc, r3, err = ask(m, "u", "What is the capital of France?")
        check(r3.strip() and r3 == r3.upper() and "PARIS" in r3, "uppercase system prompt: %r" % r3)
        s = json.loads(read(m.p("stats.json")))
        e = s["engine"]
        check(s["backend"] == "remote" and e["server"] == "llama.cpp" and e["model"] == "chatfs-default" and
              e["url"] == srv.url and e["replies"] == 3 and e["cached_tokens"] > 0, "stats.json %s" % e)
        check(read(m.p("c", "error")) == "", "no error")


def test_streaming_cat_tail_f(srv):
    """a reply read by cat while it streams, and tail -f on the transcript"""
    with RemoteMount("stream", srv.url) as m:
        os.mkdir(m.p("a"))
        long_reply(m, "a", 800)
        tail = subprocess.Popen(["tail", "-f", m.p("a", "transcript.md")], stdout=subprocess.PIPE)
        try:
            fs_e2e.send(m, "a", "What is 17 + 25?")
            cat = subprocess.Popen(["cat", m.p("a", "reply")], stdout=subprocess.PIPE)
            first = os.read(cat.stdout.fileno(), 4096)  # arrives while the reply is still generated
            status = read(m.p("a", "status"))
            out = first + cat.communicate(timeout=180)[0]  # 3 s on a quiet machine; 10-36 s under heavy load
            wait_done(m, "a")
            time.sleep(2.5)  # tail -f polls fstat once a second on FUSE
        finally:
            tail.terminate()
        check(first and status.startswith(("generating", "prefill")), "read while streaming: %r" % status)
        final = read(m.p("a", "turns", "002-assistant.md"))
        check(out.decode() == final and len(final) > 300, "cat got the whole reply (%d bytes)" % len(out))
        st = read(m.p("a", "status"))
        check(st.startswith("done 800 tokens") and "(max_tokens)" in st, "status: %r" % st)
        seen = tail.communicate(timeout=5)[0].decode()
        check(final.rstrip("\n") in seen, "tail -f followed the reply (%d bytes)" % len(seen))


def test_editors_fork_settings(srv):
    """vim and emacs send messages and rewrite a turn; cp -r forks and the fork's first
    message reuses the server's cache of the shared prefix; settings reach the server"""
    with RemoteMount("editors", srv.url) as m:
        greedy(m)
        os.mkdir(m.p("a"))
        env = dict(os.environ, HOME=m.dir)
        rc, out, err = sh("vim -u DEFAULTS -i NONE -es -c 'set backupskip=' -c 'call setline(1, \"What is 17 + 25?\")' "
                          "-c wq a/message", cwd=m.mnt, env=env)
        check(rc == 0, "vim: %s %s" % (out, err))
        wait_done(m, "a")
        check("42" in read(m.p("a", "turns", "002-assistant.md")), "vim's message answered")
        rc, out, err = sh("emacs --batch a/message --eval '(progn (insert \"Add 5 to that.\") (save-buffer))'",
                          cwd=m.mnt, env=env, timeout=60)
        check(rc == 0, "emacs: " + err)
        wait_done(m, "a")
        check(len(turns(m, "a")) == 4 and "47" in read(m.p("a", "turns", "004-assistant.md")), "emacs's message")
        # a user turn rewritten with vim: the later turns go, the reply is generated again
        rc, out, err = sh("vim -u DEFAULTS -i NONE -es -c 'set backupskip=' -c 'call setline(1, \"What is 20 + 3?\")' "
                          "-c wq a/turns/001-user.md", cwd=m.mnt, env=env)
        wait_done(m, "a")
        check(turns(m, "a")[:2] == ["001-user.md", "002-assistant.md"] and len(turns(m, "a")) == 2 and
              "23" in read(m.p("a", "turns", "002-assistant.md")), "turn rewritten: %s %r" %
              (turns(m, "a"), read(m.p("a", "turns", "002-assistant.md"))))
        # cp -r forks; the fork's next message is a prompt whose prefix the server has cached
        rc, out, err = sh("cp -r a b", cwd=m.mnt)
        check(rc == 0 and turns(m, "b") == turns(m, "a") and read(m.p("b", "status")) == "idle\n", "cp -r: %r" % err)
        rc, r, err = ask(m, "b", "Add 5 to that.")
        st = read(m.p("b", "status"))
        got = re.search(r"reused (\d+)/(\d+)", st)
        check("28" in r and got and int(got.group(1)) > 0, "the fork: %r %r" % (r, st))
        check(len(turns(m, "a")) == 2, "a unchanged")
        # settings: max_tokens with ignore_eos gives exactly that many tokens; a stop string cuts
        write(m.p("b", "settings.json"), '{"temperature": 0, "max_tokens": 7, "ignore_eos": true}')
        ask(m, "b", "What is 17 + 25?")
        st = read(m.p("b", "status"))
        check(st.startswith("done 7 tokens") and "(max_tokens)" in st, "max_tokens: %r" % st)
        write(m.p("b", "settings.json"), '{"temperature": 0, "stop": ["+"]}')
        rc, r, err = ask(m, "b", "What is 17 + 25?")
        check(r == "17 \n", "stop string: %r" % r)
        # a seed makes a sampled reply repeatable
        write(m.p("b", "settings.json"), '{"temperature": 1.5, "top_k": 0, "top_p": 1, "min_p": 0, "seed": 11, '
                                         '"max_tokens": 24}')
        r1 = ask(m, "b", "What is 17 + 25?")[1]
        check(sh("echo regenerate > b/ctl", cwd=m.mnt)[0] == 0, "regenerate")
        wait_done(m, "b")
        check(read(m.p("b", "reply")) == r1, "same seed, same reply: %r vs %r" % (r1, read(m.p("b", "reply"))))


def test_ctl_stop_and_ctrl_c(srv):
    """ctl stop closes the request (the server logs the cancelled task); Ctrl-C on cat
    returns at once while the server says nothing (SIGSTOPped), and the mount stays quick"""
    with RemoteMount("stop", srv.url) as m:
        os.mkdir(m.p("a"))
        long_reply(m, "a", 3500)
        fs_e2e.send(m, "a", "What is 17 + 25?")
        check(wait_for(lambda: os.stat(m.p("a", "reply")).st_size > 0, 30), "no text")
        check(sh("echo stop > a/ctl", cwd=m.mnt)[0] == 0, "stop")
        st = read(m.p("a", "status"))
        check(st.startswith("done") and "(stopped)" in st, "status after stop: %r" % st)
        size = len(read(m.p("a", "reply")))
        check(wait_for(lambda: "cancel task" in srv.log(), 10), "the server did not cancel the task")
        time.sleep(0.3)
        check(len(read(m.p("a", "reply"))) == size, "the reply stays as it was stopped")
        e = json.loads(read(m.p("stats.json")))["engine"]
        check(e["cancelled"] == 1 and e["in_flight"] == 0, "stats after stop: %s" % e)
        # a silent server: the request waits; cat blocks, Ctrl-C returns at once, the mount stays quick
        srv.signal(signal.SIGSTOP)
        try:
            os.mkdir(m.p("b"))
            fs_e2e.send(m, "b", "What is 17 + 25?")
            cat = subprocess.Popen(["cat", m.p("b", "reply")], stdout=subprocess.PIPE)
            time.sleep(0.5)
            check(cat.poll() is None, "cat waits for the silent server")
            t0 = time.monotonic()
            cat.send_signal(signal.SIGINT)
            cat.wait(timeout=10)
            dt = time.monotonic() - t0
            NUMBERS["ctrl_c_ms"] = round(dt * 1000, 1)
            check(dt < 0.3, "Ctrl-C took %.0f ms" % (dt * 1000))
            t0 = time.monotonic()
            for _ in range(20):
                os.listdir(m.mnt), read(m.p("b", "status")), os.stat(m.p("a", "reply"))
            check(time.monotonic() - t0 < 1.0, "the mount is slow while the server is silent")
            check(read(m.p("b", "status")).startswith("prefill"), "status: " + read(m.p("b", "status")))
        finally:
            srv.signal(signal.SIGCONT)
        wait_done(m, "b")
        check("42" in read(m.p("b", "reply")) or read(m.p("b", "status")).startswith("done"), "b finished")
    # unmounting while the server is silent: the daemon exits at once, the message is kept
    db = os.path.join(fs_e2e.TMP, "stop", "chatfs.db")
    m = RemoteMount("stop", srv.url, db=db).start()
    srv.signal(signal.SIGSTOP)
    try:
        os.mkdir(m.p("c"))
        fs_e2e.send(m, "c", "What is 17 + 25?")
        time.sleep(0.3)
        t0 = time.monotonic()
        subprocess.run(["fusermount3", "-u", m.mnt], capture_output=True)
        m.proc.wait(timeout=10)
        dt = time.monotonic() - t0
        NUMBERS["unmount_silent_server_ms"] = round(dt * 1000, 1)
        check(dt < 2.0, "unmount took %.1f s with the server silent" % dt)
    finally:
        srv.signal(signal.SIGCONT)
    with RemoteMount("stop", srv.url, db=db) as m:
        check(turns(m, "c")[:1] == ["001-user.md"] and read(m.p("c", "turns", "001-user.md")) == "What is 17 + 25?\n",
              "the message survived: %s" % turns(m, "c"))
        check(sh("echo regenerate > c/ctl", cwd=m.mnt)[0] == 0, "regenerate")
        wait_done(m, "c")
        check(read(m.p("c", "status")).startswith("done"), "regenerated: " + read(m.p("c", "status")))


def test_server_killed_mid_reply(srv_unused):
    """the server dies mid-reply: reply keeps the partial text then EIO, error says what
    happened, no turn is lost; a server back on the same port and `regenerate` retry"""
    srv = Server("killed").start()
    with RemoteMount("killed", srv.url) as m:
        greedy(m)
        os.mkdir(m.p("a"))
        rc, r1, _ = ask(m, "a", "What is 17 + 25?")
        check("42" in r1, "first turn")
        long_reply(m, "a", 3500)
        fs_e2e.send(m, "a", "Add 5 to that.")
        check(wait_for(lambda: os.stat(m.p("a", "reply")).st_size > 0, 30), "no text")
        srv.signal(signal.SIGSTOP)  # freeze it mid-reply, then kill it
        time.sleep(0.3)
        partial = read(m.p("a", "turns", "004-assistant.md"))  # (reply would wait for the rest)
        srv.stop()
        wait_done(m, "a")
        rc, out, err = sh("cat a/reply", cwd=m.mnt)
        check(rc != 0 and "Input/output error" in err and out.startswith(partial), "EIO after the partial reply: %d %r" %
              (rc, err))
        error = read(m.p("a", "error"))
        check("connection to the server broke" in error or "closed the connection" in error, "error: %r" % error)
        check(read(m.p("a", "status")).startswith("error: "), "status: " + read(m.p("a", "status")))
        check(turns(m, "a") == ["001-user.md", "002-assistant.md", "003-user.md", "004-assistant.md"], "no turn lost")
        check(read(m.p("a", "turns", "003-user.md")) == "Add 5 to that.\n", "the message is kept")
        check(read(m.p("a", "turns", "004-assistant.md")).startswith(partial.rstrip("\n")), "the partial reply is kept")
        NUMBERS["killed_error"] = error.strip()
        # regenerate while the server is down: a clear error, still nothing lost
        sh("echo regenerate > a/ctl", cwd=m.mnt)
        # (status still shows the last error until the new request fails: wait for its own)
        wait_for(lambda: "cannot reach the server" in read(m.p("a", "error")), 30)
        wait_done(m, "a")
        check("cannot reach the server" in read(m.p("a", "error")), "down: %r (status %r)" % (read(m.p("a", "error")), read(m.p("a", "status"))))
        check(len(turns(m, "a")) == 4, "no turn lost")
        # back on the same port: regenerate makes the reply
        Server("killed-again", port=srv.port).start()
        greedy(m)
        write(m.p("a", "settings.json"), '{"temperature": 0, "max_tokens": 64}')
        check(sh("echo regenerate > a/ctl", cwd=m.mnt)[0] == 0, "regenerate")
        wait_done(m, "a")
        check("47" in read(m.p("a", "reply")) and read(m.p("a", "error")) == "", "regenerated: %r %r" %
              (read(m.p("a", "reply")), read(m.p("a", "error"))))
        check(len(turns(m, "a")) == 4, "turns after regenerate")


def test_mount_refusals(srv):
    """a wrong URL, an unknown model and a wrong API key: the mount refuses with the
    reason, and the database's conversations are untouched"""
    db = os.path.join(fs_e2e.TMP, "refuse", "chatfs.db")
    with RemoteMount("refuse", srv.url, db=db) as m:
        greedy(m)
        os.mkdir(m.p("kept"))
        ask(m, "kept", "What is 17 + 25?")
    closed = srv.port + 1 if srv.port < 65535 else srv.port - 1
    while sh("curl -s -o /dev/null http://127.0.0.1:%d/" % closed)[0] != 7:  # 7: could not connect
        closed -= 1
    rc, err, mounted = mount_refused("refuse", "http://127.0.0.1:%d/v1" % closed, ["--db", db])
    check(rc != 0 and not mounted and "cannot reach the server at http://127.0.0.1:%d/v1" % closed in err,
          "wrong URL: %d %r" % (rc, err))
    NUMBERS["wrong_url"] = err.strip()
    rc, err, mounted = mount_refused("refuse", srv.url, ["--db", db, "--model", "no-such-model"])
    check(rc != 0 and not mounted and "no model 'no-such-model'" in err and "chatfs-default" in err,
          "unknown model: %d %r" % (rc, err))
    NUMBERS["unknown_model"] = err.strip()
    rc, err, mounted = mount_refused("refuse", srv.url.replace("/v1", ""), ["--db", db])  # llama-server has both
    check(rc == 0 or "404" in err, "URL without /v1: %r" % err)
    rc, err, mounted = mount_refused("refuse", srv.url + "/nope", ["--db", db])
    check(rc != 0 and "HTTP 404" in err, "a wrong path: %r" % err)
    with RemoteMount("refuse", srv.url, db=db) as m:
        check(turns(m, "kept") == ["001-user.md", "002-assistant.md"], "the conversation is still there")


def test_api_key(srv_unused):
    """--api-key-file: the key works, a wrong one is refused with the server's message,
    and the key appears in no error, stats.json or log"""
    srv = Server("key", ["--api-key", KEY]).start()
    d = os.path.join(fs_e2e.TMP, "key")
    good, bad = os.path.join(d, "good.key"), os.path.join(d, "bad.key")
    write(good, "# the test key\n%s\n" % KEY)
    write(bad, "sk-wrong-key\n")
    rc, err, mounted = mount_refused("key", srv.url, ["--api-key-file", bad])
    check(rc != 0 and "HTTP 401" in err and "sk-wrong-key" not in err, "wrong key: %r" % err)
    NUMBERS["wrong_key"] = err.strip()
    rc, err, mounted = mount_refused("key", srv.url)
    check(rc != 0 and "HTTP 401" in err, "no key: %r" % err)
    with RemoteMount("key", srv.url, ["--api-key-file", good]) as m:
        greedy(m)
        os.mkdir(m.p("a"))
        rc, r, err = ask(m, "a", "What is 17 + 25?")
        check("42" in r, "with the key: %r" % r)
        everything = read(m.p("stats.json")) + read(m.p("a", "error")) + read(m.p("a", "status"))
        check(KEY not in everything, "the key leaked into the files")
    check(KEY not in m.log_text(), "the key is in chatfs's log")
    rc, out, err = sh("'%s' ask --engine %s --api-key-file %s --db %s/ask.db 'What is 17 + 25?'" %
                      (CHATFS, srv.url, good, d))
    check(rc == 0 and "42" in out and KEY not in err, "ask with the key: %r %r" % (out, err))


class Answer500(http.server.BaseHTTPRequestHandler):
    """a tiny server: lists a model, answers every chat request with HTTP 500"""

    def log_message(self, *a):
        pass

    def reply(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/v1/models":
            self.reply(200, {"object": "list", "data": [{"id": "m500", "object": "model", "owned_by": "test"}]})
        else:
            self.reply(404, {"error": {"message": "not found", "code": 404}})

    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        self.server.bodies.append(json.loads(self.rfile.read(n)))
        self.reply(500, {"error": {"code": 500, "type": "server_error",
                                   "message": "CUDA error: out of memory (tiny test server)"}})


def test_http_errors(srv):
    """the server's own message lands in error: a 400 from llama-server (a conversation
    longer than its context) and a 500 from a tiny local server; no turn is lost"""
    with RemoteMount("http400", srv.url) as m:
        greedy(m)
        os.mkdir(m.p("a"))
        ask(m, "a", "What is 17 + 25?")
        rc, out, err = ask(m, "a", "word " * 6000)
        check(rc != 0 and "Input/output error" in err, "a reply to a too long message fails: %d %r" % (rc, err))
        error = read(m.p("a", "error"))
        check("HTTP 400" in error and "context" in error, "the server's message: %r" % error)
        NUMBERS["http_400"] = error.strip()
        check(turns(m, "a") == ["001-user.md", "002-assistant.md", "003-user.md", "004-assistant.md"],
              "the message is kept: %s" % turns(m, "a"))
        # the user fixes it: rewriting the turn regenerates
        write(m.p("a", "turns", "003-user.md"), "Add 5 to that.\n")
        wait_done(m, "a")
        check("47" in read(m.p("a", "reply")) and read(m.p("a", "error")) == "", "after the fix")
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer500)
    httpd.bodies = []
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = "http://127.0.0.1:%d/v1" % httpd.server_address[1]
        with RemoteMount("http500", url) as m:
            os.mkdir(m.p("a"))
            write(m.p("a", "system"), "Be brief.")
            rc, out, err = ask(m, "a", "What is 17 + 25?")
            check(rc != 0 and "Input/output error" in err, "HTTP 500: %d %r" % (rc, err))
            error = read(m.p("a", "error"))
            check(error == "the server answered HTTP 500: CUDA error: out of memory (tiny test server)\n",
                  "error: %r" % error)
            check(read(m.p("a", "status")).startswith("error: the server answered HTTP 500"), "status")
            check(turns(m, "a") == ["001-user.md", "002-assistant.md"] and
                  read(m.p("a", "turns", "001-user.md")) == "What is 17 + 25?\n", "no turn lost")
            b = httpd.bodies[0]
            check(b["model"] == "m500" and b["stream"] is True and b["messages"][0] == {"role": "system",
                  "content": "Be brief."} and "cache_prompt" not in b, "the request: %s" % b)
    finally:
        httpd.shutdown()
        httpd.server_close()


class TLSAnswer(Answer500):
    """the tiny server over https: lists a model, streams a fixed reply"""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for piece in ("over ", "TLS"):
            self.wfile.write(b'data: {"choices":[{"index":0,"delta":{"content":"%s"}}]}\n\n' % piece.encode())
        self.wfile.write(b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')
        self.close_connection = True


def test_https(srv_unused):
    """https verifies the certificate: a self-signed one is refused with the reason, and
    accepted once CURL_CA_BUNDLE names it"""
    import ssl
    d = os.path.join(fs_e2e.TMP, "https")
    os.makedirs(d, exist_ok=True)
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    rc, out, err = sh("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 "
                      "-addext subjectAltName=IP:127.0.0.1 -keyout '%s' -out '%s'" % (key, cert))
    check(rc == 0, "openssl: " + err)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), TLSAnswer)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = "https://127.0.0.1:%d/v1" % httpd.server_address[1]
    try:
        rc, err, mounted = mount_refused("https", url)
        check(rc != 0 and not mounted and "certificate" in err, "self-signed: %r" % err)
        NUMBERS["https_self_signed"] = err.strip()
        os.environ["CURL_CA_BUNDLE"] = cert
        try:
            with RemoteMount("https", url) as m:
                os.mkdir(m.p("a"))
                rc, out, err = ask(m, "a", "hello")
                check(out == "over TLS\n", "over https: %r %r" % (out, err))
        finally:
            del os.environ["CURL_CA_BUNDLE"]
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_ten_at_once(srv):
    """ten conversations written at once; --batch 4: four in flight, the rest queued; all complete"""
    with RemoteMount("ten", srv.url, ["--batch", "4"]) as m:
        write(m.p("settings.json"), '{"temperature": 0, "max_tokens": 400, "ignore_eos": true}')
        pairs = [(10 + i, 3 * i + 2) for i in range(10)]
        for i in range(10):
            os.mkdir(m.p("c%d" % i))
        statuses = {}

        def watch():  # what the statuses and stats.json say while the ten run
            try:
                for _ in range(3000):
                    now = [read(m.p("c%d" % i, "status")).split(" ")[0].strip() for i in range(10)]
                    for word in now:
                        statuses[word] = statuses.get(word, 0) + 1
                    try:
                        e = json.loads(read(m.p("stats.json")))["engine"]
                        statuses["max_in_flight"] = max(statuses.get("max_in_flight", 0), e["in_flight"])
                    except ValueError:  # read while it changed size: the next look will do
                        pass
                    if all(w == "done" for w in now):
                        return
                    time.sleep(0.01)
            except Exception as e:  # noqa: BLE001 - reported by the check below
                statuses["watch_error"] = repr(e)

        w = threading.Thread(target=watch)
        threads = [threading.Thread(target=fs_e2e.send, args=(m, "c%d" % i, "What is %d + %d?" % p))
                   for i, p in enumerate(pairs)]
        t0 = time.monotonic()
        w.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i in range(10):
            wait_done(m, "c%d" % i, 120)
        w.join()
        NUMBERS["ten_at_once_s"] = round(time.monotonic() - t0, 2)
        for i, (a, b) in enumerate(pairs):
            st = read(m.p("c%d" % i, "status"))
            check(st.startswith("done 400 tokens"), "c%d: %r" % (i, st))
            check(read(m.p("c%d" % i, "reply")).startswith("%d + %d = %d" % (a, b, a + b)), "c%d: %r" %
                  (i, read(m.p("c%d" % i, "reply"))[:40]))
        e = json.loads(read(m.p("stats.json")))["engine"]
        check(e["replies"] == 10 and e["failed"] == 0 and e["max_in_flight"] == 4, "stats %s" % e)
        check(statuses.get("max_in_flight", 0) <= 4 and statuses.get("queued", 0) > 0,
              "queued while four were in flight: %s" % statuses)
        NUMBERS["ten_at_once_statuses"] = statuses


def test_remount_and_ask(srv):
    """unmount and mount again: the conversation is in the local database and goes on;
    chatfs ask --engine continues a stored conversation"""
    db = os.path.join(fs_e2e.TMP, "remount", "chatfs.db")
    with RemoteMount("remount", srv.url, db=db) as m:
        greedy(m)
        os.mkdir(m.p("c"))
        check("42" in ask(m, "c", "What is 17 + 25?")[1], "before")
    with RemoteMount("remount", srv.url, db=db) as m:
        check(turns(m, "c") == ["001-user.md", "002-assistant.md"] and read(m.p("c", "status")).startswith("idle"),
              "after the remount: %s %r" % (turns(m, "c"), read(m.p("c", "status"))))
        check("47" in ask(m, "c", "Add 5 to that.")[1], "the conversation goes on")
    d = os.path.join(fs_e2e.TMP, "remount")
    rc, out, err = sh("'%s' ask --engine %s --db %s/ask.db --conversation x --stats 'What is 17 + 25?'" %
                      (CHATFS, srv.url, d))
    check(rc == 0 and "42" in out, "ask: %r %r" % (out, err))
    rc, out, err = sh("'%s' ask --engine %s --db %s/ask.db --conversation x --stats 'Add 5 to that.'" %
                      (CHATFS, srv.url, d))
    stats = json.loads(err.strip().splitlines()[-1])
    check(rc == 0 and "47" in out and stats["source"] == "server" and stats["reused_tokens"] > 0, "ask again: %r %r" %
          (out, err))
    rc, out, err = sh("'%s' ask --engine http://127.0.0.1:1/v1 --db %s/ask.db --conversation x 'hi'" % (CHATFS, d))
    check(rc != 0 and "cannot reach the server" in err, "ask, server gone: %r" % err)


def test_structured_output(srv):
    """settings.json's response_format and grammar go to llama-server, which follows them:
    a json_schema reply validates (checked by hand: the remote tests need no jsonschema),
    a GBNF grammar's reply is a sentence of it; ask --json-schema through the server too"""
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9},
                                               "ok": {"type": "boolean"}},
              "required": ["n", "ok"], "additionalProperties": False}
    with RemoteMount("structured", srv.url) as m:
        os.mkdir(m.p("s"))
        for seed in (1, 2):
            write(m.p("s", "settings.json"), json.dumps({
                "temperature": 1, "seed": seed, "max_tokens": 200, "thinking": False,
                "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": schema}}}))
            rc, out, err = ask(m, "s", "Give me the data.")
            v = json.loads(out) if rc == 0 else None
            check(isinstance(v, dict) and set(v) == {"n", "ok"} and isinstance(v["n"], int) and 1 <= v["n"] <= 9 and
                  isinstance(v["ok"], bool), "seed %d: %d %r %r" % (seed, rc, out, err))
        write(m.p("s", "settings.json"), json.dumps({"temperature": 1, "seed": 3, "max_tokens": 100, "thinking": False,
                                                    "response_format": None, "grammar": 'root ::= ("yes" | "no") "!"'}))
        rc, out, err = ask(m, "s", "Say something.")
        check(rc == 0 and out in ("yes!\n", "no!\n"), "grammar: %d %r %r" % (rc, out, err))
    d = os.path.join(fs_e2e.TMP, "structured")
    write(os.path.join(d, "schema.json"), json.dumps(schema))
    rc, out, err = sh("'%s' ask --engine %s --db %s/ask.db --temp 1 --seed 4 --thinking off --json-schema %s/schema.json "
                      "'Data?'" % (CHATFS, srv.url, d, d), timeout=60)
    v = json.loads(out) if rc == 0 else None
    check(isinstance(v, dict) and set(v) == {"n", "ok"}, "ask --json-schema: %d %r %r" % (rc, out, err))


def test_tool_calls(srv):
    """tools.json, tool_choice and parallel_tool_calls go to llama-server (--jinja), which
    takes them and renders the tools into the model's template: the same question's prompt
    grows by the tools' description. (The calls a server streams back, delta.tool_calls with
    the arguments in pieces, are read by tests/test_remote.c from llama-server's format: for
    a required call llama-server's grammar lets free text come first, and the untrained
    model writes only text.)"""
    calc = {"type": "function", "function": {"name": "calculate", "description": "Evaluates arithmetic.",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                           "required": ["a", "b"]}}}
    with RemoteMount("tools", srv.url) as m:
        prompts = []
        for name, tools in (("plain", []), ("tools", [calc])):
            os.mkdir(m.p(name))
            write(m.p(name, "tools.json"), json.dumps(tools))
            write(m.p(name, "settings.json"), json.dumps({"temperature": 0, "max_tokens": 8, "thinking": False,
                                                         "tool_choice": "auto", "parallel_tool_calls": False}))
            rc, out, err = ask(m, name, "What is 347 * 29?")
            status = read(m.p(name, "status"))
            check(rc == 0 and status.startswith("done"), "%s: %d %r %r (%r)" % (name, rc, err, status,
                                                                             read(m.p(name, "error"))))
            prompts.append(int(status.split("reused ")[1].split()[0].split("/")[1]))
        check(prompts[1] > prompts[0] + 20, "the tools are in the server's prompt: %d vs %d tokens" % tuple(prompts))
        NUMBERS["tools_prompt_tokens"] = prompts


def test_thinking(srv_unused):
    """issue 25 over llama-server: with --reasoning-format deepseek the server sends the
    default model's reasoning as reasoning_content; it streams into `thinking` (EOF when
    the answer starts), reply holds the answer only, status counts both, the turn's
    .thinking.md, messages.json and transcript.md carry it; thinking false reaches the
    template (chat_template_kwargs): no reasoning, still the answer; a thinking_budget
    goes to the server as thinking_budget_tokens"""
    srv = Server("thinking", ["--reasoning-format", "deepseek"]).start()
    with RemoteMount("thinking", srv.url) as m:
        write(m.p("settings.json"), '{"temperature": 0, "max_tokens": 200}')
        os.mkdir(m.p("t"))
        with open(m.p("t", "message"), "w") as f:
            f.write("What is 12 + 7 + 30?\n")
        thinking = read(m.p("t", "thinking"))  # blocks until the reasoning ends
        reply = read(m.p("t", "reply"))
        wait_done(m, "t")
        check(thinking.strip() and "49" in thinking and "<think>" not in thinking, "thinking: %r" % thinking)
        check("49" in reply and "<think>" not in reply and "</think>" not in reply, "reply: %r" % reply)
        st = read(m.p("t", "status"))
        got = re.match(r"done (\d+) tokens \((\d+) thinking\) ", st)
        check(got and 0 < int(got.group(2)) < int(got.group(1)), "status counts both: %r" % st)
        NUMBERS["thinking_status"] = st.strip()
        check(turns(m, "t") == ["001-user.md", "002-assistant.md", "002-assistant.thinking.md"], "turns %s" % turns(m, "t"))
        check(read(m.p("t", "turns", "002-assistant.thinking.md")) == thinking.rstrip("\n") + "\n" or
              read(m.p("t", "turns", "002-assistant.thinking.md")) == thinking, "the turn's reasoning file")
        check(read(m.p("t", "turns", "002-assistant.md")) == reply, "the turn holds the answer")
        msgs = json.loads(read(m.p("t", "messages.json")))
        check(msgs[1]["content"] + "\n" == reply and msgs[1]["reasoning_content"].strip() == thinking.strip(),
              "messages.json reasoning_content: %r" % msgs[1])
        check("> *thinking*" in read(m.p("t", "transcript.md")), "transcript quotes the reasoning")
        # a follow-up: the past reasoning goes back to the server (its template decides)
        rc, r2, err = ask(m, "t", "Add 5 to that.")
        check(rc == 0 and "54" in r2 and "<think>" not in r2, "follow-up: %r %r" % (r2, err))
        # thinking false: the template's switch, no reasoning, the answer still right
        os.mkdir(m.p("off"))
        write(m.p("off", "settings.json"), '{"thinking": false}')
        rc, r3, err = ask(m, "off", "What is 12 + 7 + 30?")
        check(rc == 0 and r3.strip() and "<think>" not in r3, "thinking off: %r %r" % (r3, err))
        check(read(m.p("off", "thinking")) == "" and "thinking" not in read(m.p("off", "status")) and
              "002-assistant.thinking.md" not in turns(m, "off"), "thinking off: no reasoning")
        NUMBERS["thinking_off_reply"] = r3.strip()
        # a budget: the server closes the reasoning after N tokens
        os.mkdir(m.p("cap"))
        write(m.p("cap", "settings.json"), '{"thinking_budget": 2}')
        rc, r4, err = ask(m, "cap", "What is 12 + 7 + 30?")
        st = read(m.p("cap", "status"))
        got = re.match(r"done (\d+) tokens(?: \((\d+) thinking\))? ", st)
        check(rc == 0 and got and int(got.group(2) or 0) <= 4 and r4.strip(), "budget 2: %r %r" % (st, r4))
        NUMBERS["thinking_budget_2_status"] = st.strip()
        # `thinking` streams: a reader opened before the reasoning begins gets it as it comes
        with open(m.p("t", "message"), "w") as f:
            f.write("What is 3 + 4 + 5?\n")
        cat = subprocess.Popen(["cat", m.p("t", "thinking")], stdout=subprocess.PIPE)
        out, _ = cat.communicate(timeout=60)
        wait_done(m, "t")
        check(out.decode() == read(m.p("t", "turns", "006-assistant.thinking.md")), "cat thinking: %r" % out)
    srv.stop()


def test_images(srv_unused):
    """issue 42 over llama-server with --mmproj: an image copied into attachments/ goes to
    the server as an image_url part with a data: URL, which it encodes: its prompt is the
    image's rows longer; a text file named .png is refused at the close, as the local
    engine refuses it, and nothing is sent"""
    fx = os.path.join(ROOT, "tests", "fixtures")
    srv = Server("vision", ["--mmproj", os.path.join(fx, "vision", "mmproj-tiny-f32.gguf")],
                 model=os.path.join(fx, "qwen35-tiny-f32.gguf")).start()
    with RemoteMount("vision", srv.url) as m:
        write(m.p("settings.json"), '{"temperature": 0, "max_tokens": 8}')
        os.mkdir(m.p("plain"))
        rc, r0, err = ask(m, "plain", "What is in this picture?")
        check(rc == 0, "a message without an image: %r" % err)
        os.mkdir(m.p("v"))
        shutil.copy(os.path.join(fx, "vision", "noise-131x91.png"), m.p("v", "attachments"))
        rc, r1, err = ask(m, "v", "What is in this picture?")
        check(rc == 0, "the message with the image: %r %r" % (r1, err))
        check("loaded multimodal model" in srv.log(), "llama-server has no projector: %s" % srv.log()[-1500:])
        u0 = json.loads(read(m.p("plain", "usage.json")))
        u1 = json.loads(read(m.p("v", "usage.json")))
        p0, p1 = u0["last_prompt"]["prompt_tokens"], u1["last_prompt"]["prompt_tokens"]
        check(p1 >= p0 + 12, "the server counted %d prompt tokens with the image's 12 rows, %d without" % (p1, p0))
        NUMBERS["remote_image_prompt_tokens"] = [p0, p1]
        with open(os.path.join(fs_e2e.TMP, "vision", "text.png"), "w") as f:
            f.write("not an image\n")
        p = subprocess.run(["cp", os.path.join(fs_e2e.TMP, "vision", "text.png"), m.p("v", "attachments")],
                           capture_output=True, text=True)
        check(p.returncode != 0 and "Invalid argument" in p.stderr and
              os.listdir(m.p("v", "attachments")) == ["noise-131x91.png"], "a text file as an image: %r" % p.stderr)
    srv.stop()


TESTS = [(n[5:], f) for n, f in list(globals().items()) if n.startswith("test_")]


def main():
    want = [a for a in sys.argv[1:] if not a.startswith("-")]
    os.makedirs(fs_e2e.TMP, exist_ok=True)
    passed = failed = 0
    shared = None
    for name, fn in TESTS:
        if want and not any(w in name for w in want):
            continue
        for d in os.listdir(fs_e2e.TMP):
            if d != "shared" and not os.path.ismount(os.path.join(fs_e2e.TMP, d, "mnt")):
                shutil.rmtree(os.path.join(fs_e2e.TMP, d), ignore_errors=True)

        def alarm(*a):
            raise Fail("timed out")

        signal.signal(signal.SIGALRM, alarm)
        signal.alarm(300)
        t0 = time.monotonic()
        try:
            if shared is None:
                shared = Server("shared", ["--metrics"]).start()
                SERVERS.remove(shared)
            fn(shared)
            passed += 1
            print("ok   remote %-30s %.1f s" % (name, time.monotonic() - t0), flush=True)
        except Exception as e:  # noqa: BLE001 - report and go on
            failed += 1
            print("FAIL remote %-30s %s: %s" % (name, type(e).__name__, e), flush=True)
            if fs_e2e.VERBOSE:
                for mnt in fs_e2e.MOUNTS:
                    print(mnt.log_text()[-3000:])
        finally:
            signal.alarm(0)
            while fs_e2e.MOUNTS:
                fs_e2e.MOUNTS.pop().stop()
            while SERVERS:
                SERVERS.pop().stop()
    if shared:
        shared.stop()
    if not failed:  # keep what a failure left for a look; else tidy up
        for d in os.listdir(fs_e2e.TMP):
            if not os.path.ismount(os.path.join(fs_e2e.TMP, d, "mnt")):
                shutil.rmtree(os.path.join(fs_e2e.TMP, d), ignore_errors=True)
    if NUMBERS:
        print("remote numbers: " + json.dumps(NUMBERS))
    print("remote: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
