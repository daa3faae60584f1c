#!/usr/bin/env python3
"""Replies that always parse: settings.json's response_format and grammar, end to end on
the bundled model at temperature 1 with several seeds. Every reply under each JSON schema
of tests/structured/schemas.json parses and validates (python3-jsonschema, and the
formats by regular expression); every json_object reply is an object; ten GBNF grammars
hold (each checked against an equivalent regular expression); a reply cut by max_tokens
says so in status and error; bad schemas and grammars are refused at the write with the
reason; `chatfs ask` and `chatfs run` take --json-schema. Runs with tests/fs_e2e.py's
helpers: python3 tests/structured_e2e.py [NAME...] [-v]"""
import json
import os
import re
import sys

import jsonschema

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fs_e2e as E  # noqa: E402

E.TMP = os.path.join(E.ROOT, "tests", "tmp", "structured")
CHATFS, check, sh, read, write = E.CHATFS, E.check, E.sh, E.read, E.write
SCHEMAS = json.load(open(os.path.join(E.ROOT, "tests", "structured", "schemas.json")))
SEEDS = (1, 2, 3)
QUESTION = "Give me the data."

# llama.cpp's format rules, independently of jsonschema's optional format checkers
FORMATS = {
    "date": r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])",
    "time": r"([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{3})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])",
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
}
FORMATS["date-time"] = FORMATS["date"] + "T" + FORMATS["time"]


def valid(schema, text):
    """why text is not a JSON value valid under schema, or None"""
    try:
        value = json.loads(text)
    except ValueError as e:
        return "not JSON: %s" % e
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as e:
        return "invalid: %s" % e.message
    fmt = schema.get("format")
    if fmt and not re.fullmatch(FORMATS[fmt], value):
        return "not a %s" % fmt
    return None


def ask_reply(m, conv, settings, text=QUESTION, timeout=60):
    """settings.json, then the message; the reply once done (with status and error)"""
    write(m.p(conv, "settings.json"), json.dumps(settings))
    rc, err = E.send(m, conv, text)
    check(rc == 0, "%s: the send failed: %s (%s)" % (conv, err, read(m.p(conv, "error"))))
    E.wait_done(m, conv, timeout)
    return read(m.p(conv, "reply")), read(m.p(conv, "status")), read(m.p(conv, "error"))


def test_every_schema_validates():
    """each schema, three seeds at temperature 1, thinking on for one of them (its budget
    48 tokens, so that the answer comes within max_tokens): the reply (one final newline
    off) parses and validates, and status says the turn ended by itself. A grammar cannot
    make a sampled reply end within max_tokens (a string may go on): a reply cut there must
    say so in status, and at most 3 of the 99 may be cut"""
    bad, cut = [], []
    with E.Mount("schemas", model=E.DEFAULT_MODEL, extra=["-t", "2"]) as m:
        for case in SCHEMAS:
            name = case["name"]
            os.mkdir(m.p(name))
            for seed in SEEDS:
                fmt = {"type": "json_schema", "json_schema": {"name": name, "schema": case["schema"], "strict": True}}
                reply, status, error = ask_reply(m, name, {"response_format": fmt, "temperature": 1, "seed": seed,
                                                           "max_tokens": 400, "thinking": seed == 1,
                                                           "thinking_budget": 48})
                text = reply[:-1] if reply.endswith("\n") else reply
                why = valid(case["schema"], text)
                if status.startswith("done 400 tokens") and "(max_tokens: incomplete for its format)" in status:
                    cut.append("%s seed %d" % (name, seed))
                elif why or not status.startswith("done") or "(" in status.split("tok/s")[-1]:
                    bad.append("%s seed %d: %r: %s (%s%s)" % (name, seed, text, why, status.strip(), error.strip()))
                elif E.VERBOSE:
                    print("  %s seed %d: %s" % (name, seed, text))
    check(not bad, "%d of %d replies do not validate:\n  %s" % (len(bad), len(SCHEMAS) * len(SEEDS),
                                                                "\n  ".join(bad)))
    check(len(cut) <= 3, "%d replies cut by max_tokens: %s" % (len(cut), ", ".join(cut)))
    if cut:
        print("  cut by max_tokens (said so in status): " + ", ".join(cut))


def test_json_object_replies_are_objects():
    """response_format json_object: every reply that ends by itself is a JSON object; one cut
    by max_tokens says so in status (at most 1 of 8)"""
    cut = 0
    with E.Mount("object", model=E.DEFAULT_MODEL, extra=["-t", "2"]) as m:
        os.mkdir(m.p("o"))
        for seed in range(1, 9):
            reply, status, _ = ask_reply(m, "o", {"response_format": {"type": "json_object"}, "temperature": 1,
                                                  "seed": seed, "max_tokens": 400, "thinking": False})
            if status.startswith("done 400 tokens") and "(max_tokens: incomplete for its format)" in status:
                cut += 1
                continue
            try:
                value = json.loads(reply)
            except ValueError:
                value = None
            check(isinstance(value, dict), "seed %d: %r is not an object (%s)" % (seed, reply, status))
        check(cut <= 1, "%d of 8 replies cut by max_tokens" % cut)
        s = json.loads(read(m.p("o", "settings.json")))
        check(s["response_format"] == {"type": "json_object"} and s["grammar"] is None, "settings.json: %s" % s)


# ten grammars with the regular expressions of their languages
GRAMMARS = [
    (r'root ::= "yes" | "no"', r"yes|no"),
    (r'root ::= [0-9]{1,4} ("." [0-9]{1,2})?', r"[0-9]{1,4}(\.[0-9]{1,2})?"),
    (r'root ::= word (" " word){0,3}' + "\n" + r'word ::= [a-z]{1,7}', r"[a-z]{1,7}( [a-z]{1,7}){0,3}"),
    (r'root ::= "[" (item ("," item){0,5})? "]"' + "\n" + r'item ::= [1-9] [0-9]?', r"\[([1-9][0-9]?(,[1-9][0-9]?){0,5})?\]"),
    (r'root ::= [A-Z] [a-z]+ "."', r"[A-Z][a-z]+\."),
    (r'root ::= ("ab" | "cd")+ "!"', r"(ab|cd)+!"),
    (r'root ::= "<" tag ">" [^<]{0,20} "</" tag ">"' + "\n" + r'tag ::= "b" | "i"', r"<(b|i)>[^<]{0,20}</(b|i)>"),
    (r'root ::= "x = " num' + "\n" + r'num ::= "-"? [0-9] [0-9]?', r"x = -?[0-9][0-9]?"),
    (r'root ::= [αβγ]{2,5} | [0-9a-f]{6}', r"[αβγ]{2,5}|[0-9a-f]{6}"),
    (r'root ::= "key: " [a-z_]{1,10} "\n" "value: " [0-9]{1,3}', r"key: [a-z_]{1,10}\nvalue: [0-9]{1,3}"),
]


def test_gbnf_grammars_hold():
    """settings.json grammar: ten grammars, two seeds each at temperature 1: every reply is a
    sentence of its grammar; without it the same seed's reply is not (for most of them)"""
    bad, free_match = [], 0
    with E.Mount("gbnf", model=E.DEFAULT_MODEL, extra=["-t", "2"]) as m:
        for i, (g, rx) in enumerate(GRAMMARS):
            c = "g%d" % i
            os.mkdir(m.p(c))
            for seed in (1, 2):
                reply, status, error = ask_reply(m, c, {"grammar": g, "temperature": 1, "seed": seed,
                                                        "max_tokens": 200, "thinking": False}, "Write something.")
                text = reply[:-1] if reply.endswith("\n") else reply
                if not re.fullmatch(rx, text):
                    bad.append("grammar %d seed %d: %r (%s%s)" % (i, seed, text, status.strip(), error.strip()))
            reply, _, _ = ask_reply(m, c, {"grammar": None, "temperature": 1, "seed": 1, "max_tokens": 40,
                                           "thinking": False}, "Write something.")
            free_match += bool(re.fullmatch(rx, reply[:-1] if reply.endswith("\n") else reply))
    check(not bad, "replies outside their grammar:\n  " + "\n  ".join(bad))
    check(free_match <= 3, "%d of 10 unconstrained replies match anyway: the check cannot fail" % free_match)


def test_cut_reply_says_it_is_incomplete():
    """a constrained reply cut by max_tokens: status says it cannot be complete, error says
    why; the next unconstrained reply clears it"""
    with E.Mount("cut", model=E.DEFAULT_MODEL, extra=["-t", "2"]) as m:
        os.mkdir(m.p("c"))
        schema = {"type": "object", "properties": {"text": {"type": "string", "minLength": 30}}, "required": ["text"]}
        fmt = {"type": "json_schema", "json_schema": {"name": "long", "schema": schema}}
        reply, status, error = ask_reply(m, "c", {"response_format": fmt, "max_tokens": 4, "thinking": False,
                                                  "temperature": 0})
        check(re.match(r"done 4 tokens .*\(max_tokens: incomplete for its format\)( drafted \d+ accepted \d+)? turn 2\n\Z",
                       status),
              "status: %r" % status)
        check(error == "the reply was cut by max_tokens before its grammar or response_format was complete\n",
              "error: %r" % error)
        check(valid(schema, reply) is not None, "a cut reply validates? %r" % reply)
        _, status, error = ask_reply(m, "c", {"response_format": None, "max_tokens": 4, "thinking": False})
        check(status.startswith("done 4 tokens") and "incomplete" not in status and error == "",
              "after: %r %r" % (status, error))


def test_bad_formats_refused_at_write():
    """a schema that is not an object, an unsupported keyword, a schema whose language is
    empty, a GBNF with a syntax error or an undefined rule, both at once: the write of
    settings.json fails with EINVAL, error says why, the settings stay as they were"""
    cases = [
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": "{not json"}}},
         "response_format"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"not": {}}}}}, "not"),
        ({"response_format": {"type": "json_schema",
                              "json_schema": {"name": "x", "schema": {"type": "integer", "minimum": 5,
                                                                      "maximum": 2}}}}, "response_format"),
        ({"response_format": {"type": "xml"}}, "response_format type must be"),
        ({"grammar": 'root ::= "a" ('}, "grammar does not compile"),
        ({"grammar": "root ::= undefined-rule"}, "undefined-rule"),
        ({"grammar": 'root ::= "a"', "response_format": {"type": "json_object"}}, "cannot both be set"),
    ]
    with E.Mount("bad", fake="delay=2") as m:
        os.mkdir(m.p("b"))
        before = read(m.p("b", "settings.json"))
        for settings, why in cases:
            rc, _, err = sh("cat > b/settings.json", cwd=m.mnt, input=json.dumps(settings))
            check(rc != 0 and "Invalid argument" in err, "%s: cat exits %d: %r" % (settings, rc, err))
            e = read(m.p("b", "error"))
            check(why in e, "%s: error %r does not say %r" % (settings, e, why))
            check(read(m.p("b", "settings.json")) == before, "%s: the settings changed" % settings)


def test_ask_and_run_take_a_schema():
    """chatfs ask --json-schema (its own engine, and through a mount) and chatfs run
    --json-schema: the answer validates; a schema file that is not JSON exits 1"""
    d = os.path.join(E.TMP, "cli")
    os.makedirs(d, exist_ok=True)
    schema = next(c["schema"] for c in SCHEMAS if c["name"] == "nested")
    sf = os.path.join(d, "schema.json")
    write(sf, json.dumps(schema))
    db = os.path.join(d, "ask.db")
    if os.path.exists(db):
        os.unlink(db)
    for seed in SEEDS:
        rc, out, err = sh("%s ask --db %s --temp 1 --seed %d -n 400 --json-schema %s 'Who is it?'"
                          % (CHATFS, db, seed, sf), timeout=120)
        check(rc == 0 and valid(schema, out.rstrip("\n")) is None, "ask seed %d: %d %r %r" % (seed, rc, out, err))
        rc, out, err = sh("%s run -p 'Data:' --temp 1 --seed %d -n 300 --stop --json-schema %s" % (CHATFS, seed, sf),
                          timeout=120)
        check(rc == 0 and valid(schema, out.rstrip("\n")) is None, "run seed %d: %d %r %r" % (seed, rc, out, err))
    write(os.path.join(d, "bad.json"), "{not json")
    rc, _, err = sh("%s ask --db %s --json-schema %s/bad.json hi" % (CHATFS, db, d))
    check(rc == 1 and "not JSON" in err, "a bad schema file: %d %r" % (rc, err))
    with E.Mount("askmount", model=E.DEFAULT_MODEL, extra=["-t", "2"]) as m:
        rc, out, err = sh("%s ask --db %s --conversation q --temp 1 --seed 5 -n 400 --json-schema %s 'Who?'"
                          % (CHATFS, m.db, sf), timeout=120)
        check(rc == 0 and valid(schema, out.rstrip("\n")) is None, "ask through the mount: %d %r %r" % (rc, out, err))
        s = json.loads(read(m.p("q", "settings.json")))
        check(s["response_format"] is None, "the conversation's settings put back: %s" % s["response_format"])


E.TESTS = [(n[5:], f) for n, f in list(globals().items()) if n.startswith("test_")]

if __name__ == "__main__":
    sys.exit(E.main())
