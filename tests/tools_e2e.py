#!/usr/bin/env python3
"""Tool calls as files, end to end on the bundled model through a real mount (Qwen3.5's
template, the qwen-xml format): tools.json at the root and per conversation (validated,
the root's the default for new conversations); a required call shows as calls/ID/{name,
arguments.json} with status "tool_calls N: waiting for results", its arguments valid under
the function's schema (python3-jsonschema); a result written with echo becomes
turns/NNN-tool.md and the model goes on by itself, reusing the prompt up to the result; a
second result is refused; a new message without the results answers the calls with an
error text; the calls survive a remount; messages.json exports OpenAI's shape (tool_calls
with id, type, function.name, function.arguments as a string; role tool with tool_call_id)
and imports it back the same; tar, rsync and cp -a copy a conversation with calls out and in
whole (calls/ is not listed: the turns and messages.json carry the calls); rm -r removes it.
Runs with tests/fs_e2e.py's helpers: python3 tests/tools_e2e.py [NAME...] [-v]"""
import errno
import json
import os
import sys

import jsonschema

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fs_e2e as E  # noqa: E402

E.TMP = os.path.join(E.ROOT, "tests", "tmp", "tools")
check, sh, read, write = E.check, E.sh, E.read, E.write

CALC = {"type": "function", "function": {
    "name": "calculate", "description": "Evaluates arithmetic.",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"},
                                                     "op": {"type": "string", "enum": ["+", "-", "*", "/"]},
                                                     "b": {"type": "integer"}},
                   "required": ["a", "op", "b"]}}}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},
                   "required": ["city"]}}}
TOOLS = [CALC, WEATHER]
REQUIRED = {"tool_choice": "required", "parallel_tool_calls": False, "temperature": 0, "thinking": False,
            "max_tokens": 300}


def mount(name, db=None):
    return E.Mount(name, model=E.DEFAULT_MODEL, db=db, extra=["-t", "2"])


def wait_status(m, conv, prefix, timeout=60):
    ok = E.wait_for(lambda: read(m.p(conv, "status")).startswith(prefix), timeout)
    check(ok, "%s: status %r, waited for %r (error %r)" % (conv, read(m.p(conv, "status")), prefix,
                                                         read(m.p(conv, "error"))))


def ask_for_call(m, conv, question="What is 347 * 29?"):
    """a conversation whose reply is one required call; the call's id"""
    os.mkdir(m.p(conv))
    write(m.p(conv, "tools.json"), json.dumps(TOOLS))
    write(m.p(conv, "settings.json"), json.dumps(REQUIRED))
    rc, err = E.send(m, conv, question)
    check(rc == 0, "%s: the send failed: %s" % (conv, err))
    n = len(E.turns(m, conv)) if os.path.isdir(m.p(conv, "turns")) else 0
    wait_status(m, conv, "tool_calls 1: waiting for results turn %d" % max(n, 2))
    ids = os.listdir(m.p(conv, "calls"))
    check(len(ids) >= 1, "%s: calls/ holds %s" % (conv, ids))
    return sorted(ids)[-1]


def test_tools_files():
    """tools.json: [] by default, pretty JSON once set, refused with the reason when it is
    not a tools array; the root's is the default for new conversations"""
    with mount("files") as m:
        check(sorted(os.listdir(m.mnt)) == ["README", "settings.json", "stats.json", "tools.json"], "root listing")
        check(read(m.p("tools.json")) == "[]\n", "no tools by default: %r" % read(m.p("tools.json")))
        write(m.p("tools.json"), json.dumps([WEATHER]))
        check(json.loads(read(m.p("tools.json"))) == [WEATHER], "the root's tools read back")
        check(read(m.p("tools.json")).startswith('[\n  {\n    "type": "function",'), "pretty")
        os.mkdir(m.p("a"))
        check(json.loads(read(m.p("a", "tools.json"))) == [WEATHER], "a new conversation gets the root's")
        for bad, why in (('[{"type": "function"}]', "tools[0]: function has no name"),
                         ('{"name": "x"}', "not an array of tools"),
                         ('[{"type": "function", "function": {"name": "x"', "incomplete JSON")):
            rc, _, err = sh("echo '%s' > a/tools.json" % bad, cwd=m.mnt)
            # complete JSON is refused at the write; JSON that never completes at the close
            check((rc != 0 and "Invalid argument" in err or why == "incomplete JSON") and why in read(m.p("a", "error")),
                  "%s refused: %d %r, error %r" % (bad, rc, err, read(m.p("a", "error"))))
        check(json.loads(read(m.p("a", "tools.json"))) == [WEATHER], "a refused write changes nothing")
        write(m.p("a", "tools.json"), json.dumps(TOOLS))
        write(m.p("a", "settings.json"), '{"temperature": 0.5}')
        check(json.loads(read(m.p("a", "tools.json"))) == TOOLS, "settings.json without tools keeps them")
        check(json.loads(read(m.p("tools.json"))) == [WEATHER], "the root's stay")


def test_call_result_goes_on():
    """a required call, its result by echo, the model goes on; the history in every view"""
    with mount("result") as m:
        cid = ask_for_call(m, "c")
        check(cid == "call_2_1", "the call's id: %s" % cid)
        call = m.p("c", "calls", cid)
        check(sorted(os.listdir(call)) == ["arguments.json", "name", "result"], "a call's files")
        name = read(os.path.join(call, "name")).strip()
        args = json.loads(read(os.path.join(call, "arguments.json")))
        fn = next((t["function"] for t in TOOLS if t["function"]["name"] == name), None)
        check(fn is not None, "an offered function: %r" % name)
        jsonschema.validate(args, fn["parameters"])
        check(read(os.path.join(call, "result")) == "", "no result yet")
        write(m.p("c", "settings.json"), json.dumps(dict(REQUIRED, tool_choice="auto")))
        rc, _, err = sh("echo 10063 > c/calls/%s/result" % cid, cwd=m.mnt)
        check(rc == 0, "the result: %r %r" % (err, read(m.p("c", "error"))))
        E.wait_done(m, "c", 60)
        status = read(m.p("c", "status"))
        check(status.startswith("done") and status.endswith("turn 4\n"), "the model went on: %r" % status)
        reused, prompt = (int(x) for x in status.split("reused ")[1].split()[0].split("/"))
        # the prompt after the result: everything before the result comes from the checkpoint
        check(prompt - reused <= 40, "reused %d of %d prompt tokens after the result" % (reused, prompt))
        print("  the turn after a tool result: %d of %d prompt tokens reused" % (reused, prompt))
        check(E.turns(m, "c") == ["001-user.md", "002-assistant.md", "003-tool.md", "004-assistant.md"],
              "turns: %s" % E.turns(m, "c"))
        check(read(m.p("c", "turns", "003-tool.md")) == "10063\n", "the tool turn")
        check(read(os.path.join(call, "result")) == "10063", "the result reads back")
        msgs = json.loads(read(m.p("c", "messages.json")))
        check([x["role"] for x in msgs] == ["user", "assistant", "tool", "assistant"], "roles: %s" % msgs)
        tc = msgs[1]["tool_calls"]
        check(len(tc) == 1 and tc[0]["id"] == cid and tc[0]["type"] == "function" and
              tc[0]["function"]["name"] == name and isinstance(tc[0]["function"]["arguments"], str) and
              json.loads(tc[0]["function"]["arguments"]) == args, "OpenAI's tool_calls: %s" % tc)
        check(msgs[2] == {"role": "tool", "tool_call_id": cid, "content": "10063"}, "the tool message: %s" % msgs[2])
        transcript = read(m.p("c", "transcript.md"))
        check("## tool (%s)\n\n10063" % cid in transcript and "> call %s: %s" % (cid, name) in transcript,
              "transcript: %r" % transcript)
        rc, _, err = sh("echo 42 > c/calls/%s/result" % cid, cwd=m.mnt)
        check(rc != 0 and "has its result" in read(m.p("c", "error")), "a second result: %d %r" % (rc, err))
        check(read(m.p("c", "turns", "003-tool.md")) == "10063\n", "the first result stays")


def test_message_without_results():
    """a new message while a call waits: the call is answered with an error text first"""
    with mount("message") as m:
        cid = ask_for_call(m, "c")
        write(m.p("c", "settings.json"), json.dumps(dict(REQUIRED, tool_choice="none")))
        rc, err = E.send(m, "c", "Never mind. Say hi.")
        check(rc == 0, "the message: %s" % err)
        E.wait_done(m, "c", 60)
        check(E.turns(m, "c") == ["001-user.md", "002-assistant.md", "003-tool.md", "004-user.md",
                                  "005-assistant.md"], "turns: %s" % E.turns(m, "c"))
        check(read(m.p("c", "turns", "003-tool.md")) == "error: no result was given for this call\n",
              "the missing result: %r" % read(m.p("c", "turns", "003-tool.md")))
        check(not read(m.p("c", "status")).startswith("tool_calls"), "nothing waits: %r" % read(m.p("c", "status")))
        check(os.listdir(m.p("c", "calls")) == [cid], "calls/ keeps the history")


def test_remount_import_tar_rm():
    """the calls are in the database: a remount shows them waiting, and the result still
    goes on; messages.json copies the conversation exactly; tar and rm -r work"""
    db = os.path.join(E.TMP, "remount.db")
    for f in (db, db + "-wal", db + "-shm"):
        if os.path.exists(f):
            os.unlink(f)
    with mount("remount", db=db) as m:
        cid = ask_for_call(m, "c")
        args = read(m.p("c", "calls", cid, "arguments.json"))
    with mount("remount2", db=db) as m:
        check(read(m.p("c", "status")).startswith("tool_calls 1: waiting for results turn 2"),
              "after a remount: %r" % read(m.p("c", "status")))
        check(read(m.p("c", "calls", cid, "arguments.json")) == args, "the arguments after a remount")
        os.mkdir(m.p("copy"))
        rc, _, err = sh("cp c/messages.json copy/messages.json", cwd=m.mnt)
        check(rc == 0, "import: %r %r" % (err, read(m.p("copy", "error"))))
        check(read(m.p("copy", "messages.json")) == read(m.p("c", "messages.json")), "the import is the same history")
        check(read(m.p("copy", "status")).startswith("tool_calls 1: waiting"), "the copy waits for its result")
        check("calls" not in os.listdir(m.p("c")), "calls/ is not listed (copies take the turns)")
        for tool, cmd in (("tar", "tar cf - c | (mkdir -p ../out/t && tar -C ../out/t -xf -) && "
                                  "mv ../out/t/c ../out/t/{n} && tar -C ../out/t -cf - {n} | tar xf -"),
                          ("rsync", "rsync -a ../out/t/tar_c/ {n}/"), ("cpa", "cp -a ../out/t/tar_c {n}")):
            n = tool + "_c"
            rc, out, err = sh(cmd.format(n=n), cwd=m.mnt)
            check(rc == 0, "%s into the mount: %r (%r)" % (tool, err, read(m.p(n, "error"))))
            check(read(m.p(n, "messages.json")) == read(m.p("c", "messages.json")), "%s: the same history" % tool)
            check(E.turns(m, n) == E.turns(m, "c"), "%s: the same turns" % tool)
        write(m.p("c", "settings.json"), json.dumps(dict(REQUIRED, tool_choice="auto")))
        rc, _, err = sh("echo sunny > c/calls/%s/result" % cid, cwd=m.mnt)
        check(rc == 0, "the result after a remount: %r" % err)
        E.wait_done(m, "c", 60)
        rc, _, err = sh("rm -r c copy tar_c rsync_c cpa_c", cwd=m.mnt)
        check(rc == 0 and not os.path.exists(m.p("c")), "rm -r: %r" % err)
        bad = '[{"role": "tool", "content": "x"}]'
        os.mkdir(m.p("bad"))
        try:
            write(m.p("bad", "messages.json"), bad)
            check(False, "a tool message without tool_call_id imported")
        except OSError as e:
            check(e.errno == errno.EINVAL and "tool_call_id" in read(m.p("bad", "error")), "refused: %s" % e)


E.TESTS = [(n[5:], f) for n, f in list(globals().items()) if n.startswith("test_")]

if __name__ == "__main__":
    sys.exit(E.main())
