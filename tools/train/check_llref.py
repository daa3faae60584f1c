#!/usr/bin/env python3
"""check_llref.py - local debugging tool: compare the exported GGUF in llama.cpp (via the oracle program
`llref`, a llama.cpp-linked program built outside the repository) with this directory's PyTorch model.

For each of the first N held-out prompts (ChatML-rendered, generation prompt appended):
  (a) llama.cpp's tokenization (parse_special=true) == tokenizer.py's tokenization;
  (b) llama.cpp's logits at every prompt position and every generated position vs the PyTorch model
      (token-by-token recurrence, F32): max |diff|;
  (c) llama.cpp's greedy continuation up to the first end-of-generation token == PyTorch greedy reply.

Usage (build llref first: cp -r shared/oracle /work/llref && cd /work/llref &&
       npm install --ignore-scripts --omit=optional && make):
  /usr/bin/python3 tools/train/check_llref.py [--llref /work/llref/build/llref] [--model models/chatfs-default.gguf] [-n 40]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
# one BLAS/OpenMP thread per process: Debian's torch uses OpenBLAS (pthreads), whose own thread pool
# otherwise busy-waits against the other training process and any other load (2-3x slower)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import evaluate                 # noqa: E402
from export_gguf import load    # noqa: E402


def render_prompt(messages):
    return "".join("<|im_start|>%s\n%s<|im_end|>\n" % (m["role"], m["content"]) for m in messages) + \
        "<|im_start|>assistant\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llref", default="/work/llref/build/llref")
    ap.add_argument("--model", default=os.path.join(HERE, "..", "..", "models", "chatfs-default.gguf"))
    ap.add_argument("--heldout", default=os.path.join(HERE, "heldout.jsonl"))
    ap.add_argument("-n", type=int, default=40, help="number of held-out prompts to check")
    ap.add_argument("--max-new", type=int, default=48)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--libdir", help="directory of the llama.cpp/ggml shared libraries llref loads its CPU backend "
                                     "from (sets LLREF_LIBDIR), e.g. a directory with only libggml-cpu-zen4.so")
    a = ap.parse_args()
    env = dict(os.environ)
    if a.libdir:
        env["LLREF_LIBDIR"] = a.libdir
    torch.set_num_threads(1)

    model, tok = load(a.model)
    model.eval()
    items = evaluate.load_items(a.heldout)
    # spread the checked prompts over all kinds
    step = max(1, len(items) // a.n)
    items = items[::step][:a.n]

    tok_ok = greedy_ok = correct_llama = correct_torch = 0
    max_prompt_diff = max_gen_diff = 0.0
    with tempfile.TemporaryDirectory() as td:
        dump = os.path.join(td, "all.f32")
        for it in items:
            text = render_prompt(it["messages"])
            ids = tok.encode(text)
            r = subprocess.run([a.llref, a.model, "-p", text, "-n", str(a.max_new), "--stop-eog", "--json",
                                "--dump-all", dump, "-t", "1"], capture_output=True, text=True, env=env)
            if r.returncode != 0:
                print(r.stderr, file=sys.stderr)
                raise SystemExit("llref failed")
            j = json.loads(r.stdout)
            same_tok = j["prompt_tokens"] == ids
            tok_ok += same_tok
            gen = j["gen_tokens"]
            if gen and gen[-1] == tok.im_end:
                lgen = gen[:-1]
            else:
                lgen = gen
            ref = np.fromfile(dump, dtype=np.float32).reshape(-1, tok.n_vocab)
            # PyTorch: token-by-token recurrence over prompt + llama.cpp's generated tokens
            seq = j["prompt_tokens"] + gen[:-1] if gen else j["prompt_tokens"]
            with torch.no_grad():
                caches = model.new_cache()
                mine = model(torch.tensor([seq]), caches, 0, chunked=False)[0].numpy()
            n_p = len(j["prompt_tokens"])
            dp = float(np.abs(mine[:n_p] - ref[:n_p]).max())
            dg = float(np.abs(mine[n_p:] - ref[n_p:len(seq)]).max()) if len(seq) > n_p else 0.0
            max_prompt_diff = max(max_prompt_diff, dp)
            max_gen_diff = max(max_gen_diff, dg)
            tg = model.generate(ids, tok.im_end, max_new=a.max_new, exact=True)
            same_gen = tg == lgen
            greedy_ok += same_gen
            rl, rt = tok.decode(lgen), tok.decode(tg)
            correct_llama += evaluate.is_correct(it, rl)
            correct_torch += evaluate.is_correct(it, rt)
            flag = "" if (same_tok and same_gen and max(dp, dg) <= a.tol) else "   <-- MISMATCH"
            print("[%-13s] tokens %s  logits max|d| prompt %.2e gen %.2e  greedy %s  llama.cpp: %r%s" % (
                it.get("kind", ""), "same" if same_tok else "DIFF", dp, dg, "same" if same_gen else "DIFF", rl, flag))
    n = len(items)
    print("\nsummary over %d held-out prompts:" % n)
    print("  tokenization identical:      %d/%d" % (tok_ok, n))
    print("  greedy replies identical:    %d/%d" % (greedy_ok, n))
    print("  max |logit diff| prompt:     %.3g   generated positions: %.3g" % (max_prompt_diff, max_gen_diff))
    print("  correct answers llama.cpp:   %d/%d   PyTorch: %d/%d" % (correct_llama, n, correct_torch, n))
    ok = tok_ok == n and greedy_ok == n and max(max_prompt_diff, max_gen_diff) <= a.tol
    print("PARITY OK" if ok else "PARITY FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
