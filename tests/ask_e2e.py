#!/usr/bin/env python3
"""`chatfs ask` and the mount share one conversation store (issue 37, item 2): ask
continues the conversation a mount shows under that name, through the mount while one
holds the database (its fake engine answers here), directly in the database when none
does, and a mount shows what ask made (also what an older ask kept in ask_turns). The
script-facing side through a mount: --json, the exit status of a cut reply, the mount's
refusals. Runs with tests/fs_e2e.py's helpers: python3 tests/ask_e2e.py [NAME...] [-v]"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fs_e2e as E  # noqa: E402

E.TMP = os.path.join(E.ROOT, "tests", "tmp", "ask")
CHATFS, MODEL, check, sh, read = E.CHATFS, E.MODEL, E.check, E.sh, E.read


def ask(db, args, timeout=60, **kw):
    """chatfs ask on db with args (a shell-quoted string); (exit status, stdout, stderr)"""
    return sh("'%s' ask --db '%s' %s" % (CHATFS, db, args), timeout=timeout, **kw)


def sent(m, conv, text):
    rc, err = E.send(m, conv, text)
    check(rc == 0, "send %r: %r" % (text, err))
    E.wait_done(m, conv)


def test_ask_continues_the_mounts_conversation():
    """ask --conversation c beside a mount is a turn of the mount's c: the mount's engine
    answers with c's history, its turns and transcript show it, settings.json is c's again
    afterwards; -n 3 cuts the reply (exit 2, status and --json say max_tokens)"""
    with E.Mount("cont", fake="delay=2") as m:
        os.mkdir(m.p("c"))
        sent(m, "c", "one")
        settings = read(m.p("c", "settings.json"))
        rc, out, err = ask(m.db, "--conversation c two")
        check(rc == 0 and out == E.expected("two"), "ask through the mount: %d %r %r" % (rc, out, err))
        check(E.turns(m, "c") == ["001-user.md", "002-assistant.md", "003-user.md", "004-assistant.md"],
              "the mount's turns: %s" % E.turns(m, "c"))
        check(read(m.p("c", "turns", "003-user.md")) == "two\n" and "two" in read(m.p("c", "transcript.md")),
              "the turn is the mount's")
        check(read(m.p("c", "settings.json")) == settings, "settings.json put back: %r" % read(m.p("c", "settings.json")))
        rc, out, err = ask(m.db, "--conversation c -n 3 --json three")
        o = json.loads(out)
        st = read(m.p("c", "status"))
        check(rc == 2 and o["finish_reason"] == "max_tokens" and o["answer"] == E.expected("three", 3)[:-1],
              "-n 3 through the mount: %d %r %r" % (rc, out, err))
        check(st.startswith("done 3 tokens") and "(max_tokens)" in st and
              "reused %d/%d" % (o["reused_tokens"], o["prompt_tokens"]) in st and o["generated_tokens"] == 3,
              "--json %r against status %r" % (o, st))
        check(read(m.p("c", "settings.json")) == settings, "settings.json put back after -n 3")
        # the prompt held c's history: longer than the same message's in a new conversation
        rc, out, _ = ask(m.db, "--json three")
        check(rc == 0 and json.loads(out)["prompt_tokens"] < o["prompt_tokens"], "the history was in the prompt")


def test_ask_makes_what_the_mount_shows():
    """through a mount, a new name is a new directory (with --system's prompt); a turn
    without a name leaves nothing behind"""
    with E.Mount("new", fake="delay=2") as m:
        rc, out, err = ask(m.db, "--conversation fresh --system 'Be brief.' hello")
        check(rc == 0 and out == E.expected("hello"), "ask a new name: %d %r %r" % (rc, out, err))
        check(E.turns(m, "fresh") == ["001-user.md", "002-assistant.md"] and
              read(m.p("fresh", "system")) == "Be brief.\n" and
              read(m.p("fresh", "turns", "002-assistant.md")) == E.expected("hello"), "the mount shows fresh")
        before = sorted(os.listdir(m.mnt))
        rc, out, err = ask(m.db, "alone")
        check(rc == 0 and out == E.expected("alone") and sorted(os.listdir(m.mnt)) == before,
              "ask without a name: %d %r %r %s" % (rc, out, err, os.listdir(m.mnt)))
        rc, out, err = ask(m.db, "--conversation fresh -", input="from stdin\n")
        check(rc == 0 and out == E.expected("from stdin") and
              read(m.p("fresh", "turns", "003-user.md")) == "from stdin\n", "- through the mount: %r %r" % (out, err))


def test_ask_refused_as_the_mount_refuses():
    """through a mount: text that is not UTF-8 is the mount's EINVAL with its reason (exit 1,
    nothing stored); an empty message is refused; a reply the context cuts exits 3"""
    with E.Mount("refuse", fake="delay=1,ctx=60,tokens=100") as m:
        os.mkdir(m.p("c"))
        rc, out, err = ask(m.db, "--conversation c \"$(printf 'a\\377b')\"")
        check(rc == 1 and "c/message: Invalid argument" in err and "not UTF-8" in err and
              read(m.p("c", "messages.json")).strip() == "[]",
              "not UTF-8 through the mount: %d %r %r" % (rc, out, err))
        rc, out, err = ask(m.db, "--conversation c ''")
        check(rc == 1 and "empty" in err and read(m.p("c", "messages.json")).strip() == "[]", "empty: %d %r" % (rc, err))
        rc, out, err = ask(m.db, "--conversation c --json -n 500 hello")
        o = json.loads(out) if out.startswith("{") else {}
        check(rc == 3 and o.get("finish_reason") == "context_full" and "(context full)" in read(m.p("c", "status")),
              "the context cut it: %d %r %r" % (rc, out, err))


def test_ask_thinking_through_the_mount():
    """--json carries the reasoning the mount's `thinking` streamed; --thinking off asks
    for none, for this turn only"""
    with E.Mount("think", fake="delay=2,think=4") as m:
        rc, out, err = ask(m.db, "--conversation t --json hi")
        o = json.loads(out)
        check(rc == 0 and o["reasoning"].startswith("Thinking about: hi.") and o["reasoning_tokens"] > 0 and
              o["answer"] == E.expected("hi")[:-1], "reasoning: %r %r" % (out, err))
        check(o["reasoning"] + "\n" == read(m.p("t", "turns", "002-assistant.thinking.md")), "the turn's reasoning")
        rc, out, err = ask(m.db, "--conversation t --json --thinking off again")
        o = json.loads(out)
        check(rc == 0 and o["reasoning"] == "" and o["reasoning_tokens"] == 0, "--thinking off: %r" % out)
        check('"thinking": null' in read(m.p("t", "settings.json")), "thinking was this turn's only")


def test_mount_shows_what_ask_stored():
    """without a mount, ask stores its turns in the conversation store: a mount then shows
    them (and goes on with them), and ask goes on with a conversation the mount made"""
    d = os.path.join(E.TMP, "direct")
    os.makedirs(d, exist_ok=True)
    db = os.path.join(d, "chatfs.db")
    rc, out1, err = ask(db, "-m '%s' -t 1 -n 4 --conversation c --system 'Be brief.' Hello" % MODEL, timeout=120)
    check(rc == 2 and out1, "ask without a mount: %d %r" % (rc, err))
    rc, out2, err = ask(db, "-m '%s' -t 1 -n 4 --conversation c More" % MODEL, timeout=120)
    check(rc == 2 and out2, "ask again: %d %r" % (rc, err))
    with E.Mount("direct", fake="delay=2", db=db) as m:
        check(E.turns(m, "c") == ["001-user.md", "002-assistant.md", "003-user.md", "004-assistant.md"],
              "the mount shows ask's turns: %s" % os.listdir(m.mnt))
        check(read(m.p("c", "turns", "001-user.md")) == "Hello\n" and read(m.p("c", "system")) == "Be brief.\n" and
              read(m.p("c", "turns", "004-assistant.md")) == out2 and read(m.p("c", "status")).startswith("idle"),
              "ask's texts: %r %r" % (read(m.p("c", "turns", "004-assistant.md")), out2))
        sent(m, "c", "from the mount")
        check(len(E.turns(m, "c")) == 6, "the mount goes on")
    rc, out, err = ask(db, "-m '%s' -t 1 -n 2 --json --conversation c 'And ask again'" % MODEL, timeout=120)
    check(rc == 2, "ask after the mount: %d %r" % (rc, err))
    with E.Mount("direct", fake="delay=2", db=db) as m:
        check(len(E.turns(m, "c")) == 8 and read(m.p("c", "turns", "007-user.md")) == "And ask again\n" and
              read(m.p("c", "turns", "008-assistant.md")) == json.loads(out)["answer"] + "\n",
              "ask's turn after the mount's: %s" % E.turns(m, "c"))


def test_old_ask_history_in_the_mount():
    """a database from before one store: the conversations ask kept in ask_turns are the
    mount's conversations after the migration, under their names (NAME (ask N) where the
    mount had one of that name), their system prompts and turns whole"""
    d = os.path.join(E.TMP, "old")
    os.makedirs(d, exist_ok=True)
    db = os.path.join(d, "chatfs.db")
    script = """
CREATE TABLE schema_versions(module TEXT PRIMARY KEY, version INTEGER NOT NULL);
INSERT INTO schema_versions VALUES('ask', 1);
CREATE TABLE ask_turns(conversation TEXT NOT NULL, idx INTEGER NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL,
    PRIMARY KEY(conversation, idx));
INSERT INTO ask_turns VALUES('a', 0, 'system', 'Be brief.'), ('a', 1, 'user', 'Hello'), ('a', 2, 'assistant', 'Hi'),
    ('x/y', 0, 'user', 'slash'), ('x/y', 1, 'assistant', 'ok');
"""
    p = subprocess.run(["sqlite3", db], input=script, capture_output=True, text=True)
    check(p.returncode == 0, "sqlite3: %s" % p.stderr)
    with E.Mount("old", fake="delay=2", db=db) as m:
        check(E.turns(m, "a") == ["001-user.md", "002-assistant.md"] and read(m.p("a", "system")) == "Be brief.\n" and
              read(m.p("a", "turns", "002-assistant.md")) == "Hi\n", "a: %s" % os.listdir(m.mnt))
        check(read(m.p("x_y", "turns", "001-user.md")) == "slash\n", "x/y as x_y: %s" % os.listdir(m.mnt))
        rc, out, err = ask(m.db, "--conversation a again")
        check(rc == 0 and len(E.turns(m, "a")) == 4, "ask goes on with it through the mount: %r" % err)


E.TESTS = [(n[5:], f) for n, f in list(globals().items()) if n.startswith("test_")]

if __name__ == "__main__":
    sys.exit(E.main())
