#!/usr/bin/env python3
"""evaluate.py - greedy evaluation of a model on a questions file (JSON lines:
{"kind", "messages", "expect", "reasoning", "check": "exact"|"contains"}), thinking on and off, accuracy per kind;
the MTP head's speculative acceptance on the model's own replies; answers after a thinking budget.

A reply is generated after the generation prompt of chat_format.render (Qwen3.5's template, enable_thinking on or
off), greedily, up to <|im_end|>. It is right when it is exactly what the model was trained to write
(chat_format.reply_text): thinking on, the expected reasoning ("" for tasks that answer directly), "\\n</think>\\n\\n",
then the answer; thinking off, the answer alone. ("contains": the answer occurs in the reply.)

Usage: python3 evaluate.py [--model ../../models/chatfs-default.gguf] [--heldout heldout.jsonl] [--thinking on|off|both]
                           [--show-errors] [--draft 3] [--budget 8]
"""

import argparse
import json
import os
import sys
import time

# one BLAS/OpenMP thread per process: Debian's torch uses OpenBLAS (pthreads), whose own thread pool
# otherwise busy-waits against the other training process and any other load (2-3x slower)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import chat_format      # noqa: E402

MAX_NEW = 96            # the longest trained reply (12 words counted one by one) is about 70 tokens


def load_items(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def expected_reply(item, thinking):
    r = chat_format.reply_text(item["expect"], item.get("reasoning", "") if thinking else "", thinking)
    return r[:-len(chat_format.EOT)]


def is_correct(item, reply, thinking=False):
    if item.get("check", "exact") == "exact":
        return reply == expected_reply(item, thinking)
    return item["expect"] in reply


def answer_of(reply):
    """The answer part of a reply (after </think>, if any)."""
    return reply.split("</think>")[-1].lstrip("\n")


def prompt_ids(tok, item, thinking):
    return tok.encode(chat_format.render(item["messages"], True, thinking))


@torch.no_grad()
def generate(model, ids, stop_id, max_new=MAX_NEW, exact=False, budget=None, end_think=None, forced=()):
    """Greedy decoding until stop_id (not included). budget: after that many generated tokens without end_think,
    the tokens `forced` (e.g. "\\n</think>") are appended as a thinking budget does, and decoding goes on."""
    caches = model.new_cache()
    logits = model.forward(torch.tensor([ids]), caches, 0, chunked=not exact)[0, -1]
    pos, out = len(ids), []
    while len(out) < max_new:
        if budget is not None and len(out) == budget and end_think not in out:
            nxt = list(forced)
        else:
            nxt = [int(torch.argmax(logits))]
            if nxt[0] == stop_id:
                break
        out += nxt
        logits = model.forward(torch.tensor([nxt]), caches, pos, chunked=False)[0, -1]
        pos += len(nxt)
    return out


def evaluate(model, tok, items, thinking=True, exact=False, show_errors=False, log=sys.stderr, draft=0):
    """-> per-kind (correct, n), total, replies, and (if draft and the model has an MTP head) the speculative
    acceptance over all replies: (drafted, accepted, passes = verification steps, tokens)."""
    model.eval()
    per, replies = {}, []
    spec = [0, 0, 0, 0]
    for it in items:
        ids = prompt_ids(tok, it, thinking)
        out = generate(model, ids, tok.im_end, exact=exact)
        reply = tok.decode(out)
        replies.append(reply)
        ok = is_correct(it, reply, thinking)
        k = it.get("kind", "all")
        a, n = per.get(k, (0, 0))
        per[k] = (a + ok, n + 1)
        if show_errors and not ok:
            print("  WRONG [%s, thinking %s] %s\n     expected %r\n     got      %r" % (
                k, "on" if thinking else "off", it["messages"][-1]["content"], expected_reply(it, thinking), reply),
                file=log)
        if draft and model.mtp is not None:
            steps = model.speculate(ids, out + [tok.im_end], draft)
            spec[0] += sum(len(d) for _, d, _ in steps)
            spec[1] += sum(na for _, _, na in steps)
            spec[2] += len(steps) + 1        # + the prompt's pass, which gives the first token
            spec[3] += len(out) + 1
    tot = sum(a for a, _ in per.values()), sum(n for _, n in per.values())
    return per, tot, replies, spec


def budget_check(model, tok, items, budget, newline=True):
    """Thinking on, reasoning cut after `budget` tokens by a forced "\\n</think>" (or "</think>"): how many
    replies still end in the right answer, per kind (items whose reasoning is longer than the budget)."""
    forced = tok.encode("\n</think>" if newline else "</think>")
    per = {}
    for it in items:
        if not it.get("reasoning") or chat_format.reasoning_tokens(tok, it["expect"], it["reasoning"]) <= budget:
            continue
        out = generate(model, prompt_ids(tok, it, True), tok.im_end, budget=budget, end_think=tok.end_think,
                       forced=forced)
        ok = answer_of(tok.decode(out)) == it["expect"]
        a, n = per.get(it["kind"], (0, 0))
        per[it["kind"]] = (a + ok, n + 1)
    return per


def report(per, tot, log=sys.stderr, title=None):
    if title:
        print(title, file=log)
    for k in sorted(per):
        a, n = per[k]
        print("  %-14s %3d/%3d  %6.2f%%" % (k, a, n, 100.0 * a / n), file=log)
    print("  %-14s %3d/%3d  %6.2f%%" % ("TOTAL", tot[0], tot[1], 100.0 * tot[0] / tot[1]), file=log)


def report_spec(spec, draft, log=sys.stderr):
    d, a, passes, toks = spec
    if d:
        print("  MTP drafts of up to %d: %d drafted, %d accepted (%.1f %%); %d tokens in %d trunk passes "
              "(%.2f tokens per pass)" % (draft, d, a, 100.0 * a / d, toks, passes, toks / passes), file=log)


def run_all(model, tok, items, modes=(True, False), show_errors=False, draft=3, budgets=(8,), exact=False,
            log=sys.stderr):
    """Both modes, acceptance, budgets; returns a dict for result.json."""
    res = {}
    for th in modes:
        t = time.time()
        per, tot, _, spec = evaluate(model, tok, items, th, exact, show_errors, log, draft)
        name = "thinking_on" if th else "thinking_off"
        report(per, tot, log, "held-out accuracy, %s (greedy):" % name.replace("_", " "))
        report_spec(spec, draft, log)
        print("  (%d items in %.1f s)" % (tot[1], time.time() - t), file=log)
        res[name] = {"per_kind": {k: list(v) for k, v in per.items()}, "total": list(tot),
                     "mtp": {"draft": draft, "drafted": spec[0], "accepted": spec[1], "passes": spec[2],
                             "tokens": spec[3]}}
    for b in budgets:
        for nl in (True, False):
            per = budget_check(model, tok, items, b, nl)
            c, n = sum(x for x, _ in per.values()), sum(y for _, y in per.values())
            print("thinking budget %d tokens, then %r forced: right answer %d/%d  (%s)" % (
                b, "\n</think>" if nl else "</think>", c, n,
                ", ".join("%s %d/%d" % (k, x, y) for k, (x, y) in sorted(per.items()))), file=log)
            res["budget_%d%s" % (b, "" if nl else "_no_newline")] = {k: list(v) for k, v in per.items()}
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(HERE, "..", "..", "models", "chatfs-default.gguf"))
    ap.add_argument("--heldout", default=os.path.join(HERE, "heldout.jsonl"))
    ap.add_argument("--thinking", choices=["on", "off", "both"], default="both")
    ap.add_argument("--show-errors", action="store_true")
    ap.add_argument("--exact", action="store_true", help="token-by-token prompt processing (slower)")
    ap.add_argument("--draft", type=int, default=3, help="MTP draft length for the acceptance (0: skip)")
    ap.add_argument("--budget", type=int, action="append", help="thinking budgets to check (default 8)")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.set_flush_denormal(True)
    from export_gguf import load
    model, tok = load(a.model)
    items = load_items(a.heldout)
    modes = {"on": (True,), "off": (False,), "both": (True, False)}[a.thinking]
    run_all(model, tok, items, modes, a.show_errors, a.draft, a.budget or [8], a.exact)


if __name__ == "__main__":
    main()
