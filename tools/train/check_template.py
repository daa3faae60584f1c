#!/usr/bin/env python3
"""check_template.py - does chatfs render and tokenize the default model's conversations as the model was trained?

The default model's tokenizer.chat_template is Qwen3.5's Jinja template (chat_format.py renders it with jinja2 as
Hugging Face does). chatfs does not run Jinja: it recognises the template's family and renders it with its own
code (engine/template.c). This compares the two renderings, byte for byte, on
  - every held-out question, thinking on and off (the generation prompt);
  - N training conversations, thinking on and off: the generation prompt of every turn, and the whole
    conversation with each reply stored as chatfs stores a generated reply (the raw text after the generation
    prompt: "REASONING\\n</think>\\n\\nANSWER" with thinking on), then a follow-up question, and without a
    generation prompt;
and, with --chatfs, chatfs's tokenization of the held-out prompts against tokenizer.py (`chatfs run --ids`).
--write FILE saves a sample of the Jinja renders (JSON lines: messages, thinking, add_generation_prompt, text) for
tests/test_default_template.c, which repeats the comparison in `make test` without Python.

Usage: /usr/bin/python3 tools/train/check_template.py [--model models/chatfs-default.gguf] [-n 500] [--chatfs ./chatfs]
(builds tools/train/template_render.c with engine/template.c in a temporary directory; needs cc)
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

import chat_format      # noqa: E402
import corpus           # noqa: E402
import evaluate         # noqa: E402


class Engine:
    """engine/template.c behind a pipe (template_render.c)."""

    def __init__(self, workdir, template_path):
        exe = os.path.join(workdir, "template_render")
        subprocess.run(["cc", "-std=gnu11", "-O1", "-Wall", "-Wextra", "-I", ROOT,
                        os.path.join(HERE, "template_render.c"), os.path.join(ROOT, "engine", "template.c"),
                        "-o", exe], check=True)
        self.exe, self.template_path = exe, template_path
        self.requests = []

    def add(self, messages, gen, thinking):
        b = [b"%d %d %d\n" % (int(thinking), int(gen), len(messages))]
        for m in messages:
            c = m["content"].encode()
            b.append(b"%s %d\n" % (m["role"].encode(), len(c)) + c)
        self.requests.append(b"".join(b))

    def run(self):
        out = subprocess.run([self.exe, self.template_path], input=b"".join(self.requests), capture_output=True,
                             check=True).stdout
        line, out = out.split(b"\n", 1)
        renders = []
        while out:
            n, out = out.split(b"\n", 1)
            renders.append(out[:int(n)].decode())
            out = out[int(n):]
        assert len(renders) == len(self.requests)
        return line.decode(), renders


def stored_reply(answer, reasoning, thinking):
    """A generated reply as chatfs stores it: the text the model wrote after the generation prompt."""
    return chat_format.reply_text(answer, reasoning, thinking)[:-len(chat_format.EOT)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "chatfs-default.gguf"))
    ap.add_argument("--heldout", default=os.path.join(HERE, "heldout.jsonl"))
    ap.add_argument("-n", type=int, default=500, help="training conversations")
    ap.add_argument("--chatfs", help="a chatfs binary: also compare its tokenization of the held-out prompts")
    ap.add_argument("--show", type=int, default=3, help="differences shown")
    ap.add_argument("--write", metavar="FILE", help="save every 8th render as a fixture for tests/test_default_template.c")
    a = ap.parse_args()
    import gguf
    meta, _ = gguf.read(a.model)
    jinja = meta["tokenizer.chat_template"]
    assert jinja == chat_format.TEMPLATE, "the GGUF's template is not tools/train's"

    cases = []      # (what, messages, gen, thinking, jinja text)
    items = evaluate.load_items(a.heldout)
    for it in items:
        for th in (True, False):
            cases.append(("held-out prompt", it["messages"], True, th, chat_format.render(it["messages"], True, th)))
    stream = corpus.TrainStream(seed=4242, heldout=corpus.heldout_items())
    for _ in range(a.n):
        msgs, turns, thinking = stream.conversation()
        for th in (thinking, not thinking):
            base = 1 if msgs[0]["role"] == "system" else 0
            hist = msgs[:base]
            for t in turns:
                hist = hist + [{"role": "user", "content": t.user}]
                cases.append(("training prompt", hist, True, th, chat_format.render(hist, True, th)))
                hist = hist + [{"role": "assistant", "content": stored_reply(t.answer, t.reasoning if th else "", th)}]
                cases.append(("conversation, no generation prompt", hist, False, th, chat_format.render(hist, False, th)))
            more = hist + [{"role": "user", "content": "Add 5 to that."}]
            cases.append(("conversation + follow-up", more, True, th, chat_format.render(more, True, th)))

    if a.write:
        with open(a.write, "w", encoding="utf-8") as f:
            for what, m, gen, th, want in cases[::8]:
                f.write(json.dumps({"what": what, "messages": m, "thinking": th, "add_generation_prompt": gen,
                                    "text": want}, ensure_ascii=False) + "\n")
        print("wrote %d renders to %s" % (len(cases[::8]), a.write))

    with tempfile.TemporaryDirectory() as td:
        path = os.path.join(td, "template.jinja")
        with open(path, "w", encoding="utf-8") as f:
            f.write(jinja)
        eng = Engine(td, path)
        for _, m, gen, th, _ in cases:
            eng.add(m, gen, th)
        family, renders = eng.run()
        print("chatfs recognises the template as: %s" % family)
        bad = {}
        for (what, m, gen, th, want), got in zip(cases, renders):
            if got != want:
                bad.setdefault(what, []).append((m, th, want, got))
        kinds = {}
        for what, *_ in cases:
            kinds[what] = kinds.get(what, 0) + 1
        for what, n in kinds.items():
            print("  %-36s %5d renders, %d differ" % (what, n, len(bad.get(what, []))))
        shown = 0
        for what, lst in bad.items():
            for m, th, want, got in lst[:a.show]:
                print("DIFF [%s, thinking %s]\n  jinja:  %r\n  chatfs: %r" % (what, th, want, got))
                shown += 1
        ok = not bad

        if a.chatfs:
            from export_gguf import load
            _, tok = load(a.model)
            same = n = 0
            for i, it in enumerate(items):
                for th in (True, False):
                    text = chat_format.render(it["messages"], True, th)
                    p = os.path.join(td, "p.txt")
                    with open(p, "w", encoding="utf-8") as f:
                        f.write(text)
                    r = subprocess.run([a.chatfs, "run", "-m", a.model, "-p", "@" + p, "--ids", "-n", "1", "-t", "1"],
                                       capture_output=True, text=True, check=True)
                    ids = [int(x) for x in r.stdout.split("prompt:", 1)[1].split("\n", 1)[0].split()]
                    n += 1
                    same += ids == tok.encode(text)
            print("  chatfs tokenization == tokenizer.py: %d/%d held-out prompts" % (same, n))
            ok = ok and same == n
    print("TEMPLATE OK" if ok else "TEMPLATE DIFFERS")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
