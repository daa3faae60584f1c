#!/usr/bin/env python3
"""evaluate.py - greedy evaluation of a model on a questions file (JSON lines:
{"kind", "messages", "expect", "check": "exact"|"contains"}), reporting accuracy per kind.

Usage: python3 evaluate.py [--model ../../models/chatfs-default.gguf] [--heldout heldout.jsonl] [--show-errors]
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


def load_items(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def is_correct(item, reply):
    if item.get("check", "exact") == "exact":
        return reply.strip() == item["expect"].strip()
    return item["expect"] in reply


def evaluate(model, tok, items, exact=False, show_errors=False, log=sys.stderr):
    model.eval()
    per = {}
    replies = []
    for it in items:
        ids = tok.encode_prompt(it["messages"])
        out = model.generate(ids, tok.im_end, max_new=64, exact=exact)
        reply = tok.decode(out)
        replies.append(reply)
        ok = is_correct(it, reply)
        k = it.get("kind", "all")
        a, n = per.get(k, (0, 0))
        per[k] = (a + ok, n + 1)
        if show_errors and not ok:
            print("  WRONG [%s] %s\n     expected %r\n     got      %r" % (
                k, it["messages"][-1]["content"], it["expect"], reply), file=log)
    tot = sum(a for a, _ in per.values()), sum(n for _, n in per.values())
    return per, tot, replies


def report(per, tot, log=sys.stderr):
    for k in sorted(per):
        a, n = per[k]
        print("  %-14s %3d/%3d  %6.2f%%" % (k, a, n, 100.0 * a / n), file=log)
    print("  %-14s %3d/%3d  %6.2f%%" % ("TOTAL", tot[0], tot[1], 100.0 * tot[0] / tot[1]), file=log)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(HERE, "..", "..", "models", "chatfs-default.gguf"))
    ap.add_argument("--heldout", default=os.path.join(HERE, "heldout.jsonl"))
    ap.add_argument("--show-errors", action="store_true")
    ap.add_argument("--exact", action="store_true", help="token-by-token prompt processing (slower)")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.set_flush_denormal(True)
    from export_gguf import load
    model, tok = load(a.model)
    items = load_items(a.heldout)
    t = time.time()
    per, tot, _ = evaluate(model, tok, items, exact=a.exact, show_errors=a.show_errors)
    report(per, tot)
    print("  (%d items in %.1fs)" % (tot[1], time.time() - t), file=sys.stderr)


if __name__ == "__main__":
    main()
