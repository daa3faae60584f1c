#!/usr/bin/env python3
"""check_llref.py - local debugging tool: compare the exported GGUF in llama.cpp (via the oracle program
`llref`, a llama.cpp-linked program built outside the repository) with this directory's PyTorch model.

For N held-out prompts (spread over all kinds), each rendered with the model's chat template (chat_format.py)
thinking on and thinking off:
  (a) llama.cpp's tokenization (parse_special = true) == tokenizer.py's tokenization;
  (b) llama.cpp's trunk logits at every prompt position and every generated position vs the PyTorch model
      (token-by-token recurrence, F32): max |diff|;
  (c) llama.cpp's greedy continuation up to the first end-of-generation token == PyTorch greedy reply;
  (d) with --mtp-draft N (default 3; 0 = skip) and a model with an MTP head, llama.cpp's own MTP context
      (llref --mtp-draft N --dump-mtp): its teacher-forced MTP logits at every position vs the PyTorch head
      (row p: token p + the trunk's h_nextn of p-1), the logits of every draft row of its speculative run vs the
      PyTorch head's draft chain from the same state, and the speculative run's drafted / accepted tokens
      (llama.cpp's measured acceptance on the model's own replies) next to PyTorch's (model.Qwen35.speculate).

Usage (needs llref, a llama.cpp-linked reference program built outside the repository):
  /usr/bin/python3 tools/train/check_llref.py [--llref /work/llref/build/llref] [--model models/chatfs-default.gguf]
                                              [-n 40] [--thinking on|off|both] [--mtp-draft 3]
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

import chat_format              # noqa: E402
import evaluate                 # noqa: E402
from export_gguf import load    # noqa: E402


def f32(path, width):
    return np.fromfile(path, dtype="<f4").reshape(-1, width)


@torch.no_grad()
def draft_rows(model, K, V, hn, pos0, id_last, draft):
    """Logits of the head's draft chain of one speculative step: the KV cache holds the teacher-forced rows
    before pos0, row 0 = (id_last, trunk h_nextn of pos0-1), row i = (draft i-1, the head's own h_nextn)."""
    cache = {"k": K[:, :pos0], "v": V[:, :pos0]}
    tok, h, rows = id_last, hn[:, pos0 - 1:pos0], []
    for i in range(len(draft)):
        logits, h = model.mtp_rows(torch.tensor([[tok]]), h, cache, pos0 + i)
        rows.append(logits[0, -1].numpy())
        tok = draft[i]
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llref", default="/work/llref/build/llref")
    ap.add_argument("--model", default=os.path.join(HERE, "..", "..", "models", "chatfs-default.gguf"))
    ap.add_argument("--heldout", default=os.path.join(HERE, "heldout.jsonl"))
    ap.add_argument("-n", type=int, default=40, help="number of held-out prompts to check")
    ap.add_argument("--thinking", choices=["on", "off", "both"], default="both")
    ap.add_argument("--max-new", type=int, default=evaluate.MAX_NEW)
    ap.add_argument("--mtp-draft", type=int, default=3, help="draft length of llama.cpp's MTP run (0: skip)")
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
    mtp = a.mtp_draft > 0 and model.mtp is not None
    items = evaluate.load_items(a.heldout)
    step = max(1, len(items) // a.n)          # spread the checked prompts over all kinds
    items = items[::step][:a.n]
    modes = {"on": (True,), "off": (False,), "both": (True, False)}[a.thinking]
    V, E = tok.n_vocab, model.c.n_embd

    ok_all = True
    summary = []
    with tempfile.TemporaryDirectory() as td:
        dump, pfile, mp = os.path.join(td, "all.f32"), os.path.join(td, "prompt.txt"), os.path.join(td, "m")
        for thinking in modes:
            c = dict(tok=0, greedy=0, right_llama=0, right_torch=0, dp=0.0, dg=0.0, dm=0.0, dd=0.0, drows=0,
                     drafted=0, accepted=0, steps=0, tokens=0, t_drafted=0, t_accepted=0, eq_greedy=0)
            print("thinking %s:" % ("on" if thinking else "off"))
            for it in items:
                text = chat_format.render(it["messages"], True, thinking)
                with open(pfile, "w", encoding="utf-8") as f:
                    f.write(text)
                ids = tok.encode(text)
                cmd = [a.llref, a.model, "-f", pfile, "-n", str(a.max_new), "--stop-eog", "--json",
                       "--dump-all", dump, "-t", "1"]
                if mtp:
                    cmd += ["--mtp-draft", str(a.mtp_draft), "--dump-mtp", mp]
                r = subprocess.run(cmd, capture_output=True, text=True, env=env)
                if r.returncode != 0:
                    print(r.stderr, file=sys.stderr)
                    raise SystemExit("llref failed (%d)" % r.returncode)
                j = json.loads(r.stdout)
                same_tok = j["prompt_tokens"] == ids
                gen = j["gen_tokens"]
                lgen = gen[:-1] if gen and gen[-1] == tok.im_end else gen
                ref = f32(dump, V)
                # PyTorch: token-by-token recurrence over prompt + llama.cpp's generated tokens
                seq = j["prompt_tokens"] + gen[:-1] if gen else j["prompt_tokens"]
                with torch.no_grad():
                    h = model.hidden(torch.tensor([seq]), model.new_cache(), 0, chunked=False)
                    mine = model.logits(h)[0].numpy()
                n_p = len(j["prompt_tokens"])
                dp = float(np.abs(mine[:n_p] - ref[:n_p]).max())
                dg = float(np.abs(mine[n_p:] - ref[n_p:len(seq)]).max()) if len(seq) > n_p else 0.0
                tg = evaluate.generate(model, ids, tok.im_end, max_new=a.max_new, exact=True)
                same_gen = tg == lgen
                rl, rt = tok.decode(lgen), tok.decode(tg)
                good = same_tok and same_gen and max(dp, dg) <= a.tol
                c["tok"] += same_tok
                c["greedy"] += same_gen
                c["right_llama"] += evaluate.is_correct(it, rl, thinking)
                c["right_torch"] += evaluate.is_correct(it, rt, thinking)
                c["dp"], c["dg"] = max(c["dp"], dp), max(c["dg"], dg)
                extra = ""
                if mtp:
                    m = j["mtp"]
                    sp = m["spec"]
                    with torch.no_grad():
                        lm, _ = model.mtp_teacher_forced(torch.tensor([seq]), h)
                        hn = model.h_nextn(h)
                        cache = {}
                        model.mtp_rows(torch.tensor([seq]), torch.cat([torch.zeros_like(hn[:, :1]), hn[:, :-1]], 1),
                                       cache, 0)
                    dm = float(np.abs(lm[0].numpy() - f32(mp + ".mtp.f32", V)).max())
                    rows = []
                    for st in sp["steps"]:
                        rows += draft_rows(model, cache["k"], cache["v"], hn, st["pos"], st["id_last"], st["draft"])
                    spec_ref = f32(mp + ".spec.f32", V) if rows else np.zeros((0, V), np.float32)
                    dd = float(np.abs(np.array(rows) - spec_ref).max()) if rows else 0.0
                    steps = model.speculate(ids, gen, a.mtp_draft) if len(gen) >= 2 else []
                    c["dm"], c["dd"] = max(c["dm"], dm), max(c["dd"], dd)
                    c["drows"] += len(rows)
                    c["drafted"] += sp["n_drafted"]
                    c["accepted"] += sp["n_accepted"]
                    c["steps"] += sp["n_steps"] + 1
                    c["tokens"] += len(gen)
                    c["eq_greedy"] += bool(sp["equals_greedy"])
                    c["t_drafted"] += sum(len(d) for _, d, _ in steps)
                    c["t_accepted"] += sum(na for _, _, na in steps)
                    good = good and max(dm, dd) <= a.tol and sp["equals_greedy"] and not m["failed"]
                    extra = "  mtp %.1e draft %.1e  accepted %d/%d" % (dm, dd, sp["n_accepted"], sp["n_drafted"])
                ok_all = ok_all and good
                print("[%-13s] tokens %s  logits prompt %.1e gen %.1e  greedy %s%s  llama.cpp: %r%s" % (
                    it.get("kind", ""), "same" if same_tok else "DIFF", dp, dg, "same" if same_gen else "DIFF", extra,
                    rl, "" if good else "   <-- MISMATCH"))
            summary.append((thinking, c))
    n = len(items)
    for thinking, c in summary:
        print("\nsummary, thinking %s, %d held-out prompts:" % ("on" if thinking else "off", n))
        print("  tokenization identical:      %d/%d" % (c["tok"], n))
        print("  greedy replies identical:    %d/%d" % (c["greedy"], n))
        print("  max |logit diff| prompt:     %.3g   generated positions: %.3g" % (c["dp"], c["dg"]))
        print("  right answers llama.cpp:     %d/%d   PyTorch: %d/%d" % (c["right_llama"], n, c["right_torch"], n))
        if mtp:
            print("  MTP teacher-forced logits:   max |diff| %.3g (every position of prompt + reply)" % c["dm"])
            print("  MTP draft-row logits:        max |diff| %.3g (%d rows of the speculative runs)" % (c["dd"], c["drows"]))
            print("  llama.cpp speculative runs (drafts of up to %d): %d drafted, %d accepted (%.1f %%), "
                  "%d tokens in %d target passes (%.2f per pass); equal to plain greedy %d/%d" % (
                      a.mtp_draft, c["drafted"], c["accepted"], 100.0 * c["accepted"] / max(1, c["drafted"]),
                      c["tokens"], c["steps"], c["tokens"] / max(1, c["steps"]), c["eq_greedy"], n))
            print("  PyTorch head, same runs:     %d drafted, %d accepted" % (c["t_drafted"], c["t_accepted"]))
    print("PARITY OK" if ok_all else "PARITY FAILED")
    sys.exit(0 if ok_all else 1)


if __name__ == "__main__":
    main()
