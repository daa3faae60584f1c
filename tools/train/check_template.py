#!/usr/bin/env python3
"""check_template.py - does chatfs render and tokenize the default model's conversations as the model was trained?

The default model's tokenizer.chat_template is Qwen3.5's Jinja template (chat_format.py renders it with jinja2 as
Hugging Face does). chatfs renders it with its own Jinja interpreter (`chatfs render`, the function a mount
renders a sent message with). This compares the two renderings, byte for byte, on
  - every held-out question, thinking on and off (the generation prompt);
  - N training conversations, thinking on and off: the generation prompt of every turn, and the whole
    conversation with each reply stored as chatfs stores a generated reply (the raw text after the generation
    prompt: "REASONING\\n</think>\\n\\nANSWER" with thinking on), then a follow-up question, and without a
    generation prompt;
and, with --chatfs, chatfs's tokenization of the held-out prompts against tokenizer.py (`chatfs run --ids`).
--write FILE saves a sample of the Jinja renders (JSON lines: messages, thinking, add_generation_prompt, text) for
tests/test_default_template.c, which repeats the comparison in `make test` without Python.

Usage: /usr/bin/python3 tools/train/check_template.py [--model models/chatfs-default.gguf] [-n 500] [--chatfs ./chatfs]
(--chatfs defaults to the repository's ./chatfs, built by `make`)
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


class Engine:
    """`chatfs render` of the model's own template, one conversation at a time."""

    def __init__(self, chatfs, model):
        self.chatfs, self.model = chatfs, model
        self.requests = []

    def add(self, messages, gen, thinking):
        self.requests.append((messages, gen, thinking))

    def run(self):
        renders = []
        for messages, gen, thinking in self.requests:
            cmd = [self.chatfs, "render", "-m", self.model, "--thinking", "true" if thinking else "false"]
            if not gen:
                cmd.append("--no-generation-prompt")
            r = subprocess.run(cmd + ["-"], input=json.dumps(messages).encode(), capture_output=True, check=True)
            renders.append(r.stdout.decode())
        return renders


def load_items(path):
    """the held-out questions (evaluate.py's format; read here without its PyTorch)"""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def stored_reply(answer, reasoning, thinking):
    """A generated reply as chatfs stores it: the text the model wrote after the generation prompt."""
    return chat_format.reply_text(answer, reasoning, thinking)[:-len(chat_format.EOT)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "chatfs-default.gguf"))
    ap.add_argument("--heldout", default=os.path.join(HERE, "heldout.jsonl"))
    ap.add_argument("-n", type=int, default=500, help="training conversations")
    ap.add_argument("--chatfs", default=os.path.join(ROOT, "chatfs"), help="the chatfs binary (default: ./chatfs)")
    ap.add_argument("--tokens", action="store_true", help="also compare chatfs's tokenization of the held-out prompts")
    ap.add_argument("--show", type=int, default=3, help="differences shown")
    ap.add_argument("--write", metavar="FILE", help="save every 8th render as a fixture for tests/test_default_template.c")
    a = ap.parse_args()
    import gguf
    meta, _ = gguf.read(a.model)
    jinja = meta["tokenizer.chat_template"]
    assert jinja == chat_format.TEMPLATE, "the GGUF's template is not tools/train's"

    cases = []      # (what, messages, gen, thinking, jinja text)
    items = load_items(a.heldout)
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
        eng = Engine(a.chatfs, a.model)
        for _, m, gen, th, _ in cases:
            eng.add(m, gen, th)
        renders = eng.run()
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

        if a.tokens:
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
