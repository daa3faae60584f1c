#!/usr/bin/env python3
"""model.py - PyTorch implementation of llama.cpp's `qwen35` forward pass (Qwen3.5 dense hybrid:
Gated DeltaNet + gated full attention), parameterised exactly like the GGUF tensors.

See docs/engine-math.md §4 and §7, and llama.cpp's src/models/qwen35.cpp.  Parameter names map
1:1 onto GGUF tensor names (export_gguf.py); PyTorch nn.Linear weights [out, in] are stored as-is
(= ggml ne [in, out]).

Layer i is Gated DeltaNet (GDN) if (i + 1) % full_attention_interval != 0, else gated attention.
  block:  h += Mixer(RMSNorm(h, attn_norm));  h += FFN(RMSNorm(h, post_attention_norm))
  FFN:    ffn_down(silu(ffn_gate y) * ffn_up y)
  logits: token_embd · RMSNorm(h, output_norm)       (tied embeddings, no output.weight)
Norm weights are final multipliers (the GGUF convention), ssm_a = -exp(A_log) is exported.

Two evaluation paths of the delta rule:
  * chunked WY form (training; zero initial state per sequence, chunks of `chunk` tokens with state carry)
  * token-by-token recurrence (inference with a cache; exactly the order llama.cpp's CPU kernel uses)
They are mathematically identical (test: python3 model.py).

MTP (NextN) draft head (spec §16.2, llama.cpp's graph_mtp), block blk.{n_layer} of the GGUF, present when
n_nextn = 1. Row p of the head takes token x_p and the trunk's h_nextn of p-1 (RMSNorm(h, output_norm), the
post-final-norm hidden state; zeros at p = 0) and predicts x_{p+1}, i.e. one token beyond the trunk at p-1:
  e = RMSNorm(embed(x_p), enorm);  hn = RMSNorm(h_prev, hnorm);  c = eh_proj [e ; hn]
  c += GatedAttn(RMSNorm(c, attn_norm))   (its own KV cache over the head's rows, rope at position p)
  c += FFN(RMSNorm(c, post_attention_norm))
  h' = RMSNorm(c, shared_head_norm)  -> logits = token_embd . h'  (tied); h' is the hidden row of the next
                                         draft row when drafts are chained
"""

import math
from dataclasses import dataclass, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    n_vocab: int = 1024
    n_embd: int = 192
    n_layer: int = 8
    n_ff: int = 512
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 48
    n_rot: int = 16
    rope_base: float = 10000.0
    ssm_k_heads: int = 2        # ssm.group_count      (Hk)
    ssm_v_heads: int = 4        # ssm.time_step_rank   (Hv), multiple of Hk; V head h uses K head h % Hk
    ssm_head_dim: int = 48      # ssm.state_size       (dk = dv)
    conv_kernel: int = 4
    full_attn_interval: int = 4
    eps: float = 1e-6
    context_length: int = 4096
    n_nextn: int = 0            # MTP (NextN) blocks after the trunk: 0 or 1 (nextn_predict_layers)

    def is_recurrent(self, i):
        return (i + 1) % self.full_attn_interval != 0

    def to_dict(self):
        return asdict(self)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def l2_norm(x, eps):
    return x / torch.clamp(x.norm(dim=-1, keepdim=True), min=eps)


# ------------------------------------------------------------------------------------------------
# delta rule
# ------------------------------------------------------------------------------------------------
def delta_rule_recurrent(q, k, v, g, beta, S=None):
    """Token-by-token gated delta rule. q,k: [B,T,H,dk] (L2-normalised), v: [B,T,H,dv], g, beta: [B,T,H].
    S: [B,H,dk,dv] or None. Returns o [B,T,H,dv] and the final state."""
    B, T, H, dk = k.shape
    dv = v.shape[-1]
    if S is None:
        S = k.new_zeros(B, H, dk, dv)
    scale = 1.0 / math.sqrt(dk)
    out = []
    for t in range(T):
        S = S * torch.exp(g[:, t])[..., None, None]
        kt = k[:, t]
        kv = torch.einsum("bhi,bhic->bhc", kt, S)
        d = (v[:, t] - kv) * beta[:, t][..., None]
        S = S + kt[..., :, None] * d[..., None, :]
        out.append(torch.einsum("bhi,bhic->bhc", q[:, t], S) * scale)
    return torch.stack(out, 1), S


def delta_rule_chunked(q, k, v, g, beta, S=None, chunk=64):
    """Same recurrence in chunked (WY / UT-transform) form, for training. Shapes as delta_rule_recurrent."""
    B, T, H, dk = k.shape
    dv = v.shape[-1]
    scale = 1.0 / math.sqrt(dk)
    # -> [B,H,T,*]
    q = (q.transpose(1, 2) * scale).contiguous()
    k = k.transpose(1, 2).contiguous()
    v = v.transpose(1, 2).contiguous()
    g = g.transpose(1, 2).contiguous()
    beta = beta.transpose(1, 2).contiguous()
    outs = []
    for s in range(0, T, chunk):
        e = min(T, s + chunk)
        C = e - s
        qc, kc, vc, gc, bc = q[:, :, s:e], k[:, :, s:e], v[:, :, s:e], g[:, :, s:e], beta[:, :, s:e]
        G = torch.cumsum(gc, dim=-1)                                  # [B,H,C]
        diff = G[..., :, None] - G[..., None, :]                      # G_j - G_i  [B,H,C,C]
        tril = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
        D = torch.exp(diff.masked_fill(~tril, float("-inf")))        # i <= j
        KK = kc @ kc.transpose(-1, -2)
        A = torch.tril(bc[..., :, None] * KK * D, diagonal=-1)      # strictly lower
        R = vc
        if S is not None:
            R = vc - torch.exp(G)[..., None] * (kc @ S)
        R = bc[..., None] * R
        IA = A + torch.eye(C, dtype=A.dtype, device=A.device)
        U = torch.linalg.solve_triangular(IA, R, upper=False, unitriangular=True)   # [B,H,C,dv]
        M = (qc @ kc.transpose(-1, -2)) * D
        o = M @ U
        if S is not None:
            o = o + torch.exp(G)[..., None] * (qc @ S)
        outs.append(o)
        GC = G[..., -1:]                                              # [B,H,1]
        w = torch.exp(GC - G)                                         # [B,H,C]
        Snew = (kc * w[..., None]).transpose(-1, -2) @ U              # [B,H,dk,dv]
        S = Snew if S is None else torch.exp(GC)[..., None] * S + Snew
    o = torch.cat(outs, dim=2).transpose(1, 2)
    return o, S


# ------------------------------------------------------------------------------------------------
# layers
# ------------------------------------------------------------------------------------------------
class GDN(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        Hk, Hv, d = c.ssm_k_heads, c.ssm_v_heads, c.ssm_head_dim
        self.key_dim, self.value_dim = Hk * d, Hv * d
        self.conv_dim = 2 * self.key_dim + self.value_dim
        E = c.n_embd
        self.attn_qkv = nn.Linear(E, self.conv_dim, bias=False)
        self.attn_gate = nn.Linear(E, self.value_dim, bias=False)
        self.ssm_beta = nn.Linear(E, Hv, bias=False)
        self.ssm_alpha = nn.Linear(E, Hv, bias=False)
        self.ssm_conv1d = nn.Parameter(torch.empty(self.conv_dim, c.conv_kernel))
        self.ssm_dt_bias = nn.Parameter(torch.empty(Hv))
        self.A_log = nn.Parameter(torch.empty(Hv))
        self.ssm_norm = nn.Parameter(torch.ones(d))
        self.ssm_out = nn.Linear(self.value_dim, E, bias=False)

    def forward(self, x, cache=None, chunked=True):
        """x [B,T,E]. cache: dict with 'conv' [B,K-1,conv_dim] and 'S' [B,Hv,dk,dv] (updated in place)."""
        c = self.c
        B, T, _ = x.shape
        Hk, Hv, d, K = c.ssm_k_heads, c.ssm_v_heads, c.ssm_head_dim, c.conv_kernel
        mixed = self.attn_qkv(x)
        z = self.attn_gate(x)
        beta = torch.sigmoid(self.ssm_beta(x))
        a = -torch.exp(self.A_log)
        g = F.softplus(self.ssm_alpha(x) + self.ssm_dt_bias, beta=1.0, threshold=20.0) * a
        if cache is not None and "conv" in cache:
            prev = cache["conv"]
        else:
            prev = x.new_zeros(B, K - 1, self.conv_dim)
        u = torch.cat([prev, mixed], dim=1)                               # [B, K-1+T, C]
        if cache is not None:
            cache["conv"] = u[:, -(K - 1):].detach()
        cv = F.conv1d(u.transpose(1, 2), self.ssm_conv1d[:, None, :], groups=self.conv_dim).transpose(1, 2)
        cv = F.silu(cv)
        q = cv[..., :self.key_dim].reshape(B, T, Hk, d)
        k = cv[..., self.key_dim:2 * self.key_dim].reshape(B, T, Hk, d)
        v = cv[..., 2 * self.key_dim:].reshape(B, T, Hv, d)
        q = l2_norm(q, c.eps)
        k = l2_norm(k, c.eps)
        r = Hv // Hk
        if r > 1:                       # tiled: V head h uses K head h % Hk
            q = q.repeat(1, 1, r, 1)
            k = k.repeat(1, 1, r, 1)
        S = cache.get("S") if cache is not None else None
        if chunked and S is None:       # zero initial state: chunked form (training, prefill)
            o, S = delta_rule_chunked(q, k, v, g, beta)
        else:
            o, S = delta_rule_recurrent(q, k, v, g, beta, S)
        if cache is not None:
            cache["S"] = S.detach()
        o = rms_norm(o, self.ssm_norm, c.eps) * F.silu(z.reshape(B, T, Hv, d))
        return self.ssm_out(o.reshape(B, T, self.value_dim))


def rope_cache(n_rot, base, positions):
    """cos/sin [T, n_rot/2] for NEOX rotation, theta_k = p * base^(-2k/n_rot)."""
    k = torch.arange(n_rot // 2, dtype=torch.float64)
    inv = base ** (-2.0 * k / n_rot)
    th = positions.to(torch.float64)[:, None] * inv[None, :]
    return torch.cos(th).float(), torch.sin(th).float()


def apply_rope(x, cos, sin, n_rot):
    """x [B,T,H,hd]; NEOX pairs (i, i + n_rot/2) for i < n_rot/2; dims >= n_rot unchanged."""
    h = n_rot // 2
    x0, x1, rest = x[..., :h], x[..., h:n_rot], x[..., n_rot:]
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x0 * cos - x1 * sin, x0 * sin + x1 * cos, rest], dim=-1)


class GatedAttention(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        E, H, Hkv, hd = c.n_embd, c.n_head, c.n_head_kv, c.head_dim
        self.attn_q = nn.Linear(E, 2 * H * hd, bias=False)     # per head: [q (hd) | gate (hd)]
        self.attn_k = nn.Linear(E, Hkv * hd, bias=False)
        self.attn_v = nn.Linear(E, Hkv * hd, bias=False)
        self.attn_output = nn.Linear(H * hd, E, bias=False)
        self.attn_q_norm = nn.Parameter(torch.ones(hd))
        self.attn_k_norm = nn.Parameter(torch.ones(hd))

    def forward(self, x, cache=None, pos0=0):
        c = self.c
        B, T, _ = x.shape
        H, Hkv, hd = c.n_head, c.n_head_kv, c.head_dim
        Qf = self.attn_q(x).reshape(B, T, H, 2 * hd)
        q, gate = Qf[..., :hd], Qf[..., hd:]
        q = rms_norm(q, self.attn_q_norm, c.eps)
        k = rms_norm(self.attn_k(x).reshape(B, T, Hkv, hd), self.attn_k_norm, c.eps)
        v = self.attn_v(x).reshape(B, T, Hkv, hd)
        cos, sin = rope_cache(c.n_rot, c.rope_base, torch.arange(pos0, pos0 + T))
        q = apply_rope(q, cos, sin, c.n_rot)
        k = apply_rope(k, cos, sin, c.n_rot)
        if cache is not None:
            if "k" in cache:
                k = torch.cat([cache["k"], k], dim=1)
                v = torch.cat([cache["v"], v], dim=1)
            cache["k"], cache["v"] = k.detach(), v.detach()
        Tk = k.shape[1]
        r = H // Hkv
        kk = k.repeat_interleave(r, dim=2)         # q head h uses kv head h // r
        vv = v.repeat_interleave(r, dim=2)
        s = torch.einsum("bthd,bshd->bhts", q, kk) / math.sqrt(hd)
        qpos = torch.arange(Tk - T, Tk)[:, None]
        kpos = torch.arange(Tk)[None, :]
        s = s.masked_fill(kpos > qpos, float("-inf"))
        p = torch.softmax(s, dim=-1)
        o = torch.einsum("bhts,bshd->bthd", p, vv)
        o = o * torch.sigmoid(gate)
        return self.attn_output(o.reshape(B, T, H * hd))


class Block(nn.Module):
    def __init__(self, c: Config, i, recurrent=None):
        super().__init__()
        self.c = c
        self.recurrent = c.is_recurrent(i) if recurrent is None else recurrent
        self.attn_norm = nn.Parameter(torch.ones(c.n_embd))
        self.post_attention_norm = nn.Parameter(torch.ones(c.n_embd))
        self.mixer = GDN(c) if self.recurrent else GatedAttention(c)
        self.ffn_gate = nn.Linear(c.n_embd, c.n_ff, bias=False)
        self.ffn_up = nn.Linear(c.n_embd, c.n_ff, bias=False)
        self.ffn_down = nn.Linear(c.n_ff, c.n_embd, bias=False)

    def forward(self, h, cache=None, pos0=0, chunked=True):
        x = rms_norm(h, self.attn_norm, self.c.eps)
        if self.recurrent:
            h = h + self.mixer(x, cache, chunked)
        else:
            h = h + self.mixer(x, cache, pos0)
        y = rms_norm(h, self.post_attention_norm, self.c.eps)
        return h + self.ffn_down(F.silu(self.ffn_gate(y)) * self.ffn_up(y))


class MTPHead(nn.Module):
    """The NextN block: a gated-attention decoder block behind a projection of [embedding ; trunk hidden]."""

    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        E = c.n_embd
        self.enorm = nn.Parameter(torch.ones(E))
        self.hnorm = nn.Parameter(torch.ones(E))
        self.eh_proj = nn.Linear(2 * E, E, bias=False)       # GGUF ne [2E, E]: embedding half first
        self.block = Block(c, c.n_layer, recurrent=False)
        self.shared_head_norm = nn.Parameter(torch.ones(E))

    def forward(self, emb, h_prev, cache=None, pos0=0):
        """emb = token_embd(x) [B,T,E], h_prev [B,T,E] (the hidden row paired with each token) ->
        the head's h_nextn [B,T,E] (logits = h_nextn . token_embd^T). cache: dict for the block's KV."""
        c = self.c
        x = torch.cat([rms_norm(emb, self.enorm, c.eps), rms_norm(h_prev, self.hnorm, c.eps)], dim=-1)
        return rms_norm(self.block(self.eh_proj(x), cache, pos0), self.shared_head_norm, c.eps)


class Qwen35(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        self.token_embd = nn.Embedding(c.n_vocab, c.n_embd)
        self.blocks = nn.ModuleList([Block(c, i) for i in range(c.n_layer)])
        self.output_norm = nn.Parameter(torch.ones(c.n_embd))
        assert c.n_nextn in (0, 1), "one MTP block at most (as llama.cpp)"
        self.mtp = MTPHead(c) if c.n_nextn else None

    def init_weights(self, seed=0):
        gen = torch.Generator().manual_seed(seed)
        c = self.c

        def init_block(blk):
            for name, p in blk.named_parameters():
                if p.dim() == 2 and name.endswith("weight") and "conv1d" not in name:
                    fan_in = p.shape[1]
                    std = 1.0 / math.sqrt(fan_in)
                    if name.endswith(("ssm_out.weight", "attn_output.weight", "ffn_down.weight")):
                        std /= math.sqrt(2 * c.n_layer)
                    p.normal_(0.0, std, generator=gen)
            if blk.recurrent:
                m = blk.mixer
                m.ssm_conv1d.uniform_(-1.0 / math.sqrt(c.conv_kernel), 1.0 / math.sqrt(c.conv_kernel),
                                      generator=gen)
                A = torch.empty(c.ssm_v_heads).uniform_(1.0, 16.0, generator=gen)
                m.A_log.copy_(torch.log(A))
                dt = torch.exp(torch.empty(c.ssm_v_heads).uniform_(math.log(1e-3), math.log(1e-1),
                                                                   generator=gen))
                m.ssm_dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))   # inverse softplus

        with torch.no_grad():
            self.token_embd.weight.normal_(0.0, 0.02, generator=gen)
            for blk in self.blocks:
                init_block(blk)
            if self.mtp is not None:     # drawn after the trunk's: the trunk's initial weights do not depend on it
                init_block(self.mtp.block)
                self.mtp.eh_proj.weight.normal_(0.0, 1.0 / math.sqrt(2 * c.n_embd), generator=gen)

    def hidden(self, ids, caches=None, pos0=0, chunked=True):
        """ids [B,T] -> final hidden states (before output_norm) [B,T,E]."""
        h = self.token_embd(ids)
        for i, blk in enumerate(self.blocks):
            h = blk(h, None if caches is None else caches[i], pos0, chunked)
        return h

    def logits(self, h):
        return rms_norm(h, self.output_norm, self.c.eps) @ self.token_embd.weight.t()

    def h_nextn(self, h):
        """What the trunk hands the MTP head: its hidden state after output_norm (llama.cpp's "h_nextn")."""
        return rms_norm(h, self.output_norm, self.c.eps)

    def mtp_rows(self, ids, h_prev, cache=None, pos0=0):
        """MTP head rows (token ids [B,T], paired hidden rows [B,T,E]) -> (logits [B,T,V], the head's h_nextn)."""
        hm = self.mtp(self.token_embd(ids), h_prev, cache, pos0)
        return hm @ self.token_embd.weight.t(), hm

    def mtp_teacher_forced(self, ids, h):
        """The head at every position of a sequence (llama.cpp's catch-up / teacher-forced rows): row p pairs
        token p with the trunk's h_nextn of p-1 (zeros at 0). h = trunk hidden [B,T,E] of the same ids.
        Returns logits [B,T,V] (row p predicts token p+1) and the head's h_nextn rows."""
        hn = self.h_nextn(h)
        h_prev = torch.cat([torch.zeros_like(hn[:, :1]), hn[:, :-1]], dim=1)
        return self.mtp_rows(ids, h_prev)

    def forward(self, ids, caches=None, pos0=0, chunked=True):
        """ids [B,T] -> logits [B,T,V]. caches: list (one dict per layer) for incremental decoding."""
        return self.logits(self.hidden(ids, caches, pos0, chunked))

    def new_cache(self):
        return [dict() for _ in self.blocks]

    @torch.no_grad()
    def generate(self, prompt_ids, stop_id, max_new=48, exact=False):
        """Greedy decoding (argmax, lowest id wins ties) until stop_id (not included) or max_new tokens.
        exact=True runs the prompt through the token-by-token recurrence (llama.cpp's order of operations);
        otherwise the prompt uses the chunked form (same maths, faster)."""
        caches = self.new_cache()
        ids = torch.tensor([prompt_ids], dtype=torch.long)
        logits = self.forward(ids, caches, 0, chunked=not exact)[0, -1]
        pos = len(prompt_ids)
        out = []
        for _ in range(max_new):
            t = int(torch.argmax(logits))
            if t == stop_id:
                break
            out.append(t)
            logits = self.forward(torch.tensor([[t]]), caches, pos, chunked=False)[0, -1]
            pos += 1
        return out


    @torch.no_grad()
    def speculate(self, prompt_ids, gen_ids, n_draft=3):
        """Greedy speculative decoding with the MTP head as llama.cpp's draft-mtp runs it (spec §16.4; llref
        --mtp-draft N: drafts of up to n_draft tokens, p_min 0, verification accepts the longest prefix the trunk
        agrees with, plus the trunk's own token). gen_ids = the trunk's greedy reply (speculation reproduces it
        exactly), so the trunk's rows are computed once, teacher-forced, and each step only drafts. Returns a
        list of (pos0, drafted tokens, accepted count)."""
        S = list(prompt_ids) + list(gen_ids)
        N, M = len(prompt_ids), len(gen_ids)
        R = len(S) - 1
        ids = torch.tensor([S[:R]])
        hn = self.h_nextn(self.hidden(ids))                       # trunk h_nextn of rows 0..R-1
        cache = {}                                                # the head's KV over teacher-forced rows
        self.mtp_rows(ids, torch.cat([torch.zeros_like(hn[:, :1]), hn[:, :-1]], dim=1), cache, 0)
        K, V = cache["k"], cache["v"]
        steps, n_out, pos0 = [], 1, N
        while n_out < M:
            want = min(n_draft, M - n_out - 1)
            c = {"k": K[:, :pos0], "v": V[:, :pos0]}              # the draft region is discarded each step
            tok, h, draft = S[pos0], hn[:, pos0 - 1:pos0], []
            for i in range(want):
                logits, h = self.mtp_rows(torch.tensor([[tok]]), h, c, pos0 + i)
                tok = int(torch.argmax(logits[0, -1]))
                draft.append(tok)
            na = 0
            while na < len(draft) and draft[na] == S[pos0 + 1 + na]:
                na += 1
            steps.append((pos0, draft, na))
            n_out += na + 1
            pos0 += na + 1
        return steps


def n_params(model):
    return sum(p.numel() for p in model.parameters())


if __name__ == "__main__":
    # self-test: chunked == recurrent, batched forward == incremental forward
    torch.manual_seed(0)
    B, T, H, d = 2, 150, 4, 16
    k = l2_norm(torch.randn(B, T, H, d, dtype=torch.float64), 1e-6)
    q = l2_norm(torch.randn(B, T, H, d, dtype=torch.float64), 1e-6)
    v = torch.randn(B, T, H, d, dtype=torch.float64)
    g = -torch.rand(B, T, H, dtype=torch.float64) * 0.5
    beta = torch.rand(B, T, H, dtype=torch.float64)
    o1, S1 = delta_rule_recurrent(q, k, v, g, beta)
    o2, S2 = delta_rule_chunked(q, k, v, g, beta, chunk=64)
    print("delta rule chunked vs recurrent: max|do| %.3g max|dS| %.3g" % ((o1 - o2).abs().max(), (S1 - S2).abs().max()))
    c = Config(n_vocab=300, n_embd=64, n_layer=4, n_ff=96, head_dim=16, n_rot=8, ssm_head_dim=16)
    m = Qwen35(c)
    m.init_weights(1)
    ids = torch.randint(0, 300, (1, 40))
    full = m(ids)
    caches = m.new_cache()
    a = m(ids[:, :25], caches, 0, chunked=False)
    b = m(ids[:, 25:], caches, 25, chunked=False)
    inc = torch.cat([a, b], 1)
    print("model chunked full vs incremental: max|dlogit| %.3g" % (full - inc).abs().max())
    print("params", n_params(m))
