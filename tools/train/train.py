#!/usr/bin/env python3
"""train.py - the whole pipeline: held-out set -> tokenizer -> training -> GGUF export -> evaluation.

  /usr/bin/python3 tools/train/train.py            (or: make -C tools/train)

Deterministic seeds; 2 data-parallel processes of 1 thread each. Stops after --minutes of training
(or --steps), then writes models/chatfs-default.gguf and evaluates tools/train/heldout.jsonl with
the PyTorch model loaded back from that GGUF, thinking on and off, and the MTP head's acceptance.

Loss: cross-entropy of the trunk on every token of the assistant replies (chat_format.encode_turn), plus the
MTP head's (--mtp-weight) on the same targets one token further ahead of the trunk: head row p (token p, trunk
hidden of p-1) predicts token p+1, i.e. token t+2 from h_t and embed(x_{t+1}), as the head is used to draft;
--mtp-depth > 1 adds passes where the head is fed its own output rows, as in a chain of drafts
(--mtp-chain-weight each).
"""

import argparse
import json
import math
import os
import random
import sys
import time

# one BLAS/OpenMP thread per process: Debian's torch uses OpenBLAS (pthreads), whose own thread pool
# otherwise busy-waits against the other training process and any other load (2-3x slower)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import chat_format                 # noqa: E402
import corpus                      # noqa: E402
import evaluate                    # noqa: E402
from export_gguf import export, load   # noqa: E402
from fastpath import Fast                     # noqa: E402
from model import Config, Qwen35, n_params   # noqa: E402
from tokenizer import SPECIAL_TOKENS, Tokenizer, train_bpe   # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def example_text(e):
    return chat_format.render(e.messages, True, e.thinking) + chat_format.reply_text(e.answer, e.reasoning, e.thinking)


def batches(stream, tok, tokens_per_batch, max_len, seed, pool=4096):
    """Yield (ids, targets) LongTensors; batches group examples of similar length, padded on the right.
    targets = next token where it is part of an assistant reply, else -100 (ignored)."""
    rng = random.Random(seed)
    pad = tok.bos
    while True:
        seqs = []
        while len(seqs) < pool:
            e = next(stream)
            ids, mask = chat_format.encode_turn(tok, e.messages, e.answer, e.reasoning, e.thinking, e.cut,
                                                history_loss=True)
            if len(ids) <= max_len + 1:
                seqs.append((ids, mask))
        seqs.sort(key=lambda s: len(s[0]))
        out, cur = [], []
        for s in seqs:
            L = len(s[0]) - 1
            if cur and (len(cur) + 1) * L > tokens_per_batch:
                out.append(cur)
                cur = []
            cur.append(s)
        if cur:
            out.append(cur)
        rng.shuffle(out)
        for b in out:
            T = max(len(s[0]) for s in b) - 1
            x = torch.full((len(b), T), pad, dtype=torch.long)
            y = torch.full((len(b), T), -100, dtype=torch.long)
            for r, (ids, mask) in enumerate(b):
                n = len(ids) - 1
                x[r, :n] = torch.tensor(ids[:-1])
                y[r, :n] = torch.tensor([t if m else -100 for t, m in zip(ids[1:], mask[1:])])
            yield x, y


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "models", "chatfs-default.gguf"))
    ap.add_argument("--workdir", default=os.path.join(HERE, "build"), help="checkpoints and logs (not committed)")
    ap.add_argument("--heldout", default=os.path.join(HERE, "heldout.jsonl"))
    ap.add_argument("--steps", type=int, default=100000)
    ap.add_argument("--minutes", type=float, default=54.0, help="training time limit (wall clock)")
    ap.add_argument("--tokens-per-batch", type=int, default=512, help="per process")
    ap.add_argument("--max-len", type=int, default=192)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--wd", type=float, default=0.05)
    ap.add_argument("--n-vocab", type=int, default=2048)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--n-layer", type=int, default=6)
    ap.add_argument("--n-ff", type=int, default=512)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-head-kv", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--n-rot", type=int, default=16)
    ap.add_argument("--ssm-k-heads", type=int, default=2)
    ap.add_argument("--ssm-v-heads", type=int, default=4)
    ap.add_argument("--ssm-head-dim", type=int, default=32)
    ap.add_argument("--full-attn-interval", type=int, default=2,
                    help="every N-th layer is gated attention, the others Gated DeltaNet")
    ap.add_argument("--init", metavar="GGUF", help="start from this model's weights and tokenizer (its vocabulary "
                    "plus <think>, </think>; a fresh MTP head) instead of training the tokenizer and random weights")
    ap.add_argument("--no-mtp", action="store_true", help="no MTP (NextN) draft head")
    ap.add_argument("--mtp-weight", type=float, default=0.3, help="weight of the MTP head's loss")
    ap.add_argument("--mtp-depth", type=int, default=2,
                    help="MTP passes: 1 = teacher-forced rows only; k = also the k-th draft of a chain")
    ap.add_argument("--mtp-chain-weight", type=float, default=0.15, help="weight of each chained MTP pass's loss")
    ap.add_argument("--mtp-chain-share", type=float, default=0.34,
                    help="share of each batch's sequences the chained passes run on (they cost as much as pass 1)")
    ap.add_argument("--no-bf16", action="store_true", help="float32 matrix products in training (slower)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--no-eval", action="store_true")
    ap.add_argument("--schedule", choices=["auto", "steps", "time"], default="time",
                    help="cosine LR schedule over: 'steps' = --steps steps (reproducible); 'auto' = the number of "
                         "steps that fits in --minutes at the speed measured over the first 30 steps (printed; "
                         "rerun with --schedule steps --steps N to reproduce); 'time' = the time budget (the "
                         "learning rates used are saved to WORKDIR/lr_schedule.txt; --replay FILE repeats them)")
    ap.add_argument("--replay", metavar="FILE", help="use exactly these per-step learning rates (one per line)")
    ap.add_argument("--procs", type=int, default=2,
                    help="data-parallel training processes (1 thread each, gradients averaged with gloo)")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    if a.procs > 1:
        init = os.path.join(a.workdir, "ddp_init")
        if os.path.exists(init):
            os.remove(init)
        import torch.multiprocessing as mp
        mp.spawn(run, args=(a.procs, a), nprocs=a.procs, join=True)
    else:
        run(0, 1, a)


def run(rank, world, a):
    """One training process. Every rank builds the same held-out set, tokenizer and initial weights; each
    trains on its own data stream; gradients are averaged every step. Rank 0 exports and evaluates."""
    global log
    if rank != 0:
        log = lambda *x: None      # noqa: E731
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method="file://" + os.path.join(a.workdir, "ddp_init"),
                                rank=rank, world_size=world)
    t_start = time.time()
    torch.set_num_threads(a.threads)
    torch.set_flush_denormal(True)     # decays exp(g) underflow: denormals make CPU training ~5x slower
    torch.manual_seed(a.seed)

    # 1. held-out set (fixed seed) -- written so the C test-suite can evaluate the engine on it
    items = corpus.heldout_items()
    with open(a.heldout if rank == 0 else os.devnull, "w") as f:
        for it in items:
            f.write(json.dumps({"kind": it["kind"], "messages": it["messages"], "expect": it["expect"],
                                "reasoning": it["reasoning"], "check": it["check"]}, ensure_ascii=False) + "\n")
    log("held-out: %d items -> %s" % (len(items), a.heldout))

    # 2. tokenizer: byte-level BPE trained on 30000 training examples (rendered with the chat template), or the
    #    merges of the model training starts from (--init)
    base = None
    if a.init:
        base, base_tok = load(a.init)
        merges = base_tok.merges
    else:
        tok_stream = corpus.TrainStream(seed=a.seed + 1, heldout=items)
        texts = [example_text(next(tok_stream)) for _ in range(30000)]
        merges = train_bpe(texts, a.n_vocab - 256 - len(SPECIAL_TOKENS))
    tok = Tokenizer(merges)
    log("tokenizer: %d tokens (%d merges)%s" % (tok.n_vocab, len(merges), " from " + a.init if a.init else ""))

    # 3. model
    if base is not None:
        bc = base.c
        cfg = Config(**dict(bc.to_dict(), n_vocab=tok.n_vocab, n_nextn=0 if a.no_mtp else 1))
    else:
        cfg = Config(n_vocab=tok.n_vocab, n_embd=a.n_embd, n_layer=a.n_layer, n_ff=a.n_ff, n_head=a.n_head,
                     n_head_kv=a.n_head_kv, head_dim=a.head_dim, n_rot=a.n_rot, ssm_k_heads=a.ssm_k_heads,
                     ssm_v_heads=a.ssm_v_heads, ssm_head_dim=a.ssm_head_dim,
                     full_attn_interval=a.full_attn_interval, n_nextn=0 if a.no_mtp else 1)
    model = Qwen35(cfg)
    model.init_weights(a.seed)
    if base is not None:
        # the base model's weights; its vocabulary is a prefix of this one (the tokens added after it, <think>
        # and </think>, keep their fresh rows), the MTP head starts fresh
        with torch.no_grad():
            nb = base.c.n_vocab
            assert tok.tokens[:nb] == base_tok.tokens, "the base vocabulary is not a prefix"
            model.token_embd.weight[:nb].copy_(base.token_embd.weight)
            model.output_norm.copy_(base.output_norm)
            model.blocks.load_state_dict(base.blocks.state_dict())
        del base
    log("model: %s\nparameters: %d (F32 GGUF ~%.1f MB)" % (cfg.to_dict(), n_params(model), n_params(model) * 4 / 1e6))

    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (decay if p.dim() == 2 and "conv1d" not in n and "token_embd" not in n else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)

    total = [a.steps]
    replay = None
    if a.replay:
        replay = [float(l) for l in open(a.replay) if l.strip()]
        total[0] = len(replay)
    used_lr = []

    def lr_at(step, elapsed):
        if step < a.warmup:
            return a.lr * (step + 1) / a.warmup
        pr = min(1.0, (step - a.warmup) / max(1, total[0] - a.warmup))
        if a.schedule == "time":      # progress = fraction of the time budget used (not reproducible)
            pr = max(pr, min(1.0, elapsed / limit))
        return a.lr * (a.min_lr_frac + (1 - a.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * pr)))

    # 4. training
    stream = corpus.TrainStream(seed=a.seed + 7919 * rank, heldout=items)
    data = batches(stream, tok, a.tokens_per_batch, a.max_len, a.seed + rank)
    params = list(model.parameters())
    model.train()
    fast = Fast(model, bf16=not a.no_bf16)
    t0 = time.time()
    limit = a.minutes * 60.0
    ema, ntok, step, done = None, 0, 0, 0
    mtp_ema = [None] * a.mtp_depth
    el = 0.0          # elapsed training time, averaged over ranks (identical on every rank)
    for step in range(a.steps):
        if step >= total[0]:
            break
        if a.schedule == "auto" and step == 30:
            total[0] = min(a.steps, 30 + int((limit - el) / (el / 30) * 0.93))
            log("schedule: %d steps (%.2f s/step)" % (total[0], el / 30))
        lr = replay[step] if replay is not None else lr_at(step, el)
        used_lr.append(lr)
        for gr in opt.param_groups:
            gr["lr"] = lr
        x, y = next(data)
        sel = (y >= 0).reshape(-1)
        ysel = y.reshape(-1)[sel]
        hfull = fast.hidden(x)
        h = hfull.reshape(-1, cfg.n_embd)[sel]       # logits only where there is a target
        loss = loss_trunk = F.cross_entropy(model.logits(h), ysel)
        if model.mtp is not None:
            nb = max(1, int(math.ceil(a.mtp_chain_share * x.shape[0])))
            for k, hm in enumerate(fast.mtp(hfull, x, a.mtp_depth, nb)):
                sk = (y[:hm.shape[0]] >= 0).reshape(-1)
                lk = F.cross_entropy(hm.reshape(-1, cfg.n_embd)[sk] @ model.token_embd.weight.t(),
                                     y[:hm.shape[0]].reshape(-1)[sk])
                loss = loss + (a.mtp_weight if k == 0 else a.mtp_chain_weight) * lk
                mtp_ema[k] = lk.item() if mtp_ema[k] is None else 0.98 * mtp_ema[k] + 0.02 * lk.item()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if world > 1:
            flat = torch.cat([p.grad.reshape(-1) for p in params] + [torch.tensor([time.time() - t0])])
            dist.all_reduce(flat)
            flat /= world
            o = 0
            for p in params:
                n = p.numel()
                p.grad.copy_(flat[o:o + n].view_as(p))
                o += n
            el = float(flat[-1])
        else:
            el = time.time() - t0
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        done += 1
        ntok += x.numel() * world
        ema = loss_trunk.item() if ema is None else 0.98 * ema + 0.02 * loss_trunk.item()
        if step % a.log_every == 0 or step == a.steps - 1:
            log("step %5d  loss %.4f%s  lr %.2e  %.0f tok/s  %.1f min" % (
                step, ema, "".join("  mtp%d %.3f" % (k + 1, v) for k, v in enumerate(mtp_ema) if v is not None),
                lr, ntok / (time.time() - t0), el / 60))
        if el > limit and replay is None:
            log("time limit reached at step %d" % step)
            break
    train_min = (time.time() - t0) / 60
    log("trained %d steps in %.1f min (%d conversations rejected as held-out)" % (done, train_min, stream.rejected))
    if world > 1:
        dist.destroy_process_group()
    if rank != 0:
        return
    with open(os.path.join(a.workdir, "lr_schedule.txt"), "w") as f:
        f.write("".join("%.9g\n" % x for x in used_lr))

    # 5. export
    ck = os.path.join(a.workdir, "checkpoint.pt")
    torch.save({"config": cfg.to_dict(), "model": model.state_dict(), "merges": [list(m) for m in merges],
                "args": vars(a), "steps": done}, ck)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    nbytes = export(model, tok, a.out,
                    description="chatfs default model: tiny qwen35 hybrid trained on generated chat tasks "
                                "(tools/train)")
    log("wrote %s (%d bytes)" % (a.out, nbytes))

    # 6. evaluate the exported file
    result = {"steps": done, "train_minutes": round(train_min, 1), "params": n_params(model),
              "gguf_bytes": nbytes, "config": cfg.to_dict()}
    if not a.no_eval:
        m2, tok2 = load(a.out)
        t1 = time.time()
        result["heldout"] = evaluate.run_all(m2, tok2, evaluate.load_items(a.heldout), show_errors=True)
        log("  (eval %.1f min)" % ((time.time() - t1) / 60))
    result["total_minutes"] = round((time.time() - t_start) / 60, 1)
    with open(os.path.join(a.workdir, "result.json"), "w") as f:
        json.dump(result, f, indent=1)
    log("total %.1f min" % result["total_minutes"])


if __name__ == "__main__":
    main()
