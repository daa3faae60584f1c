"""fastpath.py - the training forward pass: the same maths as model.Qwen35.hidden() (chunked delta rule,
zero initial state, positions from 0), written with fewer, larger tensor operations and optionally bf16
matrix products (Sapphire Rapids AMX via oneDNN; parameters, activations and gradients stay float32).

Also the MTP head's training passes (mtp()): pass 1 is the head at every position with the trunk's hidden rows
(model.Qwen35.mtp_teacher_forced); pass k+1 feeds pass k's own output rows instead, as a chain of drafts does,
with the attention pattern of that chain (attn_chain()).

Used only for training; export, evaluation and the llama.cpp comparison use model.py's reference code.
`python3 fastpath.py` checks it against model.py (float32: max |diff| ~1e-6).
"""

import math

import torch
import torch.nn.functional as F

from model import Qwen35

_MASKS = {}


class _BLinear(torch.autograd.Function):
    """(x @ w1.T, x @ w2.T, ...) with bf16 inputs (float32 accumulation inside oneDNN), float32 in and out."""

    @staticmethod
    def forward(ctx, x, *ws):
        shp = x.shape
        xb = x.reshape(-1, shp[-1]).to(torch.bfloat16)
        wbs = [w.to(torch.bfloat16) for w in ws]
        ctx.save_for_backward(xb, *wbs)
        ctx.shp = shp
        return tuple(torch.mm(xb, wb.t()).float().reshape(*shp[:-1], wb.shape[0]) for wb in wbs)

    @staticmethod
    def backward(ctx, *gs):
        xb, *wbs = ctx.saved_tensors
        gx = None
        gws = []
        for g, wb in zip(gs, wbs):
            gb = g.reshape(-1, g.shape[-1]).to(torch.bfloat16)
            gx = torch.mm(gb, wb) if gx is None else torch.addmm(gx, gb, wb)
            gws.append(torch.mm(gb.t(), xb).float())
        return (gx.float().reshape(ctx.shp),) + tuple(gws)


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, eps):
        r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True).add_(eps))
        xn = x * r
        ctx.save_for_backward(xn, r, w)
        return xn * w

    @staticmethod
    def backward(ctx, g):
        xn, r, w = ctx.saved_tensors
        gxn = g * w
        gw = (g * xn).reshape(-1, xn.shape[-1]).sum(0)
        gx = (gxn - xn * (gxn * xn).mean(-1, keepdim=True)) * r
        return gx, gw, None


def rms_norm(x, w, eps):
    return _RMSNorm.apply(x, w, eps)


class Fast:
    def __init__(self, model: Qwen35, bf16=True):
        self.m = model
        self.c = model.c
        self.bf16 = bf16
        self.chunk = int(__import__("os").environ.get("CHUNK", 64))

    def lin(self, x, *ws):
        """x @ w.T for each w (one conversion of x to bf16 for all)."""
        if self.bf16:
            r = _BLinear.apply(x, *ws)
        else:
            r = tuple(F.linear(x, w) for w in ws)
        return r if len(ws) > 1 else r[0]

    # --------------------------------------------------------------------------------------------
    def delta_rule(self, q, k, v, g, beta, chunk=None):
        """q,k [B,H,T,dk] (q already scaled), v [B,H,T,dv], g, beta [B,H,T]; zero initial state."""
        B, H, T, dk = k.shape
        chunk = chunk or self.chunk
        S = None
        outs = []
        n = (T + chunk - 1) // chunk
        sizes = [T // n + (1 if i < T % n else 0) for i in range(n)]     # equal chunks <= chunk
        parts = [t.split(sizes, dim=2) for t in (q, k, v, g, beta)]
        s = 0
        for i, C in enumerate(sizes):
            e = s + C
            m = _MASKS.get(C)
            if m is None:
                tril = torch.ones(C, C, dtype=torch.bool).tril()
                m = _MASKS[C] = (~tril, torch.eye(C))
            ntril, eye = m
            qc, kc, vc, gc, bc = (p[i] for p in parts)
            G = torch.cumsum(gc, dim=-1)
            D = torch.exp((G[..., :, None] - G[..., None, :]).masked_fill(ntril, float("-inf")))
            KK = kc @ kc.transpose(-1, -2)
            A = (KK * D) * bc[..., :, None]
            A = A.tril(-1) + eye
            if S is None:
                R = vc * bc[..., None]
            else:
                eG = torch.exp(G)[..., None]
                R = (vc - eG * (kc @ S)) * bc[..., None]
            U = torch.linalg.solve_triangular(A, R, upper=False, unitriangular=True)
            o = ((qc @ kc.transpose(-1, -2)) * D) @ U
            if S is not None:
                o = o + eG * (qc @ S)
            outs.append(o)
            if e < T:
                GC = G[..., -1:]
                Snew = (kc * torch.exp(GC - G)[..., None]).transpose(-1, -2) @ U
                S = Snew if S is None else torch.exp(GC)[..., None] * S + Snew
            s = e
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)

    def gdn(self, mx, x):
        c = self.c
        B, T, E = x.shape
        Hk, Hv, d, K = c.ssm_k_heads, c.ssm_v_heads, c.ssm_head_dim, c.conv_kernel
        kd, vd = mx.key_dim, mx.value_dim
        mixed, z, b, a = self.lin(x, mx.attn_qkv.weight, mx.attn_gate.weight, mx.ssm_beta.weight,
                                  mx.ssm_alpha.weight)
        beta = torch.sigmoid(b)
        g = F.softplus(a + mx.ssm_dt_bias) * -torch.exp(mx.A_log)
        u = F.pad(mixed.transpose(1, 2), (K - 1, 0))
        cv = F.silu(F.conv1d(u, mx.ssm_conv1d[:, None, :], groups=mx.conv_dim))   # [B, C, T]
        cv = cv.reshape(B, 2 * Hk + Hv, d, T)
        qk, v = cv.split([2 * Hk, Hv], dim=1)
        qk = qk * torch.rsqrt(torch.clamp(qk.pow(2).sum(2, keepdim=True), min=c.eps * c.eps))
        q, k = qk.split([Hk, Hk], dim=1)
        r = Hv // Hk
        if r > 1:
            q = q.repeat(1, r, 1, 1)
            k = k.repeat(1, r, 1, 1)
        q = q.transpose(-1, -2) * (1.0 / math.sqrt(d))         # [B,Hv,T,d]
        k = k.transpose(-1, -2)
        v = v.transpose(-1, -2)
        o = self.delta_rule(q, k, v, g.transpose(1, 2), beta.transpose(1, 2))   # [B,Hv,T,d]
        o = o.transpose(1, 2)                                    # [B,T,Hv,d]
        o = rms_norm(o, mx.ssm_norm, c.eps) * F.silu(z.reshape(B, T, Hv, d))
        return self.lin(o.reshape(B, T, vd), mx.ssm_out.weight)

    def rope(self, T):
        key = ("rope", T)
        r = _MASKS.get(key)
        if r is None:
            c = self.c
            k = torch.arange(c.n_rot // 2, dtype=torch.float64)
            th = torch.arange(T, dtype=torch.float64)[:, None] * (c.rope_base ** (-2.0 * k / c.n_rot))[None, :]
            mask = torch.full((T, T), float("-inf")).triu(1)
            r = _MASKS[key] = (torch.cos(th).float(), torch.sin(th).float(), mask)
        return r

    def attn(self, mx, x):
        c = self.c
        B, T, E = x.shape
        H, Hkv, hd, nr = c.n_head, c.n_head_kv, c.head_dim, c.n_rot
        Qf, k, v = self.lin(x, mx.attn_q.weight, mx.attn_k.weight, mx.attn_v.weight)
        Qf = Qf.reshape(B, T, H, 2 * hd)
        q, gate = Qf.split([hd, hd], dim=-1)
        q = rms_norm(q, mx.attn_q_norm, c.eps)
        k = rms_norm(k.reshape(B, T, Hkv, hd), mx.attn_k_norm, c.eps)
        cos, sin, mask = self.rope(T)
        cos, sin = cos[:, None, :], sin[:, None, :]
        h2 = nr // 2

        def rope(t):
            t0, t1, rest = t.split([h2, h2, t.shape[-1] - nr], dim=-1)
            return torch.cat([t0 * cos - t1 * sin, t0 * sin + t1 * cos, rest], dim=-1)

        q, k = rope(q), rope(k)
        r = H // Hkv
        # q head h uses kv head h // r: group the r query heads of a kv head along the time axis
        qg = q.reshape(B, T, Hkv, r, hd).permute(0, 2, 3, 1, 4).reshape(B * Hkv, r * T, hd)
        kg = k.permute(0, 2, 3, 1).reshape(B * Hkv, hd, T)
        vg = v.reshape(B, T, Hkv, hd).permute(0, 2, 1, 3).reshape(B * Hkv, T, hd)
        s = torch.baddbmm(mask.repeat(r, 1).expand(B * Hkv, r * T, T), qg, kg, alpha=1.0 / math.sqrt(hd))
        p = torch.softmax(s, dim=-1)
        o = torch.bmm(p, vg).reshape(B, Hkv, r, T, hd).permute(0, 3, 1, 2, 4).reshape(B, T, H, hd)
        o = o * torch.sigmoid(gate)
        return self.lin(o.reshape(B, T, H * hd), mx.attn_output.weight)

    def chain_mask(self, T, j):
        """Additive mask [T, (j+1)T] of chain pass j (0 = teacher-forced). A draft chain started at position
        p0 = q - j reaches position q at pass j; the head's KV cache then holds the teacher-forced rows at
        positions <= p0 (key part 0) and the chain's own rows p0+1 .. q, written by passes 1 .. j (key part i
        holds pass i's rows; the chain's row at pass i sits at position p0 + i)."""
        key = ("chain", T, j)
        r = _MASKS.get(key)
        if r is None:
            q = torch.arange(T)[:, None]
            s = torch.arange(T)[None, :]
            parts = [s <= q - j] + [s == q - j + i for i in range(1, j + 1)]
            r = _MASKS[key] = torch.zeros(T, (j + 1) * T).masked_fill(~torch.cat(parts, dim=1), float("-inf"))
        return r

    def attn_chain(self, mx, x, kvs):
        """Gated attention of MTP pass j = len(kvs) over the keys of passes 0..j (chain_mask). Returns the
        output and this pass's (k, v) [B,T,Hkv,hd] (roped k)."""
        c = self.c
        B, T, E = x.shape
        H, Hkv, hd, nr = c.n_head, c.n_head_kv, c.head_dim, c.n_rot
        Qf, k, v = self.lin(x, mx.attn_q.weight, mx.attn_k.weight, mx.attn_v.weight)
        Qf = Qf.reshape(B, T, H, 2 * hd)
        q, gate = Qf.split([hd, hd], dim=-1)
        q = rms_norm(q, mx.attn_q_norm, c.eps)
        k = rms_norm(k.reshape(B, T, Hkv, hd), mx.attn_k_norm, c.eps)
        v = v.reshape(B, T, Hkv, hd)
        cos, sin, _ = self.rope(T)
        cos, sin = cos[:, None, :], sin[:, None, :]
        h2 = nr // 2

        def rope(t):
            t0, t1, rest = t.split([h2, h2, t.shape[-1] - nr], dim=-1)
            return torch.cat([t0 * cos - t1 * sin, t0 * sin + t1 * cos, rest], dim=-1)

        q, k = rope(q), rope(k)
        K = torch.cat([kv[0] for kv in kvs] + [k], dim=1)             # [B, (j+1)T, Hkv, hd]
        Vv = torch.cat([kv[1] for kv in kvs] + [v], dim=1)
        Tk = K.shape[1]
        r = H // Hkv
        qg = q.reshape(B, T, Hkv, r, hd).permute(0, 2, 3, 1, 4).reshape(B * Hkv, r * T, hd)
        kg = K.permute(0, 2, 3, 1).reshape(B * Hkv, hd, Tk)
        vg = Vv.permute(0, 2, 1, 3).reshape(B * Hkv, Tk, hd)
        mask = self.chain_mask(T, len(kvs))
        s = torch.baddbmm(mask.repeat(r, 1).expand(B * Hkv, r * T, Tk), qg, kg, alpha=1.0 / math.sqrt(hd))
        o = torch.bmm(torch.softmax(s, dim=-1), vg).reshape(B, Hkv, r, T, hd).permute(0, 3, 1, 2, 4).reshape(B, T, H, hd)
        o = o * torch.sigmoid(gate)
        return self.lin(o.reshape(B, T, H * hd), mx.attn_output.weight), (k, v)

    def mtp(self, h, ids, depth=1, chain_rows=None):
        """MTP head passes over a batch: h = trunk hidden [B,T,E] (before output_norm) of ids [B,T]. Pass 1:
        row p = (token p, trunk h_nextn of p-1); pass k+1: row p = (token p, pass k's own h_nextn of p-1), the
        k-th chained draft, on the first chain_rows sequences only (None: all). Returns each pass's h_nextn rows
        [B',T,E] (logits = rows . token_embd^T; row p predicts token p+1, like the trunk's row p)."""
        m, c = self.m, self.c
        hd = m.mtp
        blk = hd.block
        e = rms_norm(F.embedding(ids, m.token_embd.weight), hd.enorm, c.eps)
        prev = rms_norm(h, m.output_norm, c.eps)
        kvs, outs = [], []
        for k in range(depth):
            if k == 1 and chain_rows is not None:
                e, prev = e[:chain_rows], prev[:chain_rows]
                kvs = [(kk[:chain_rows], vv[:chain_rows]) for kk, vv in kvs]
            h_prev = F.pad(prev[:, :-1], (0, 0, 1, 0))              # row p gets row p-1; zeros at p = 0
            x = self.lin(torch.cat([e, rms_norm(h_prev, hd.hnorm, c.eps)], dim=-1), hd.eh_proj.weight)
            a, kv = self.attn_chain(blk.mixer, rms_norm(x, blk.attn_norm, c.eps), kvs)
            kvs.append(kv)
            x = x + a
            y = rms_norm(x, blk.post_attention_norm, c.eps)
            gt, up = self.lin(y, blk.ffn_gate.weight, blk.ffn_up.weight)
            x = x + self.lin(F.silu(gt) * up, blk.ffn_down.weight)
            prev = rms_norm(x, hd.shared_head_norm, c.eps)
            outs.append(prev)
        return outs

    def hidden(self, ids):
        m, c = self.m, self.c
        h = F.embedding(ids, m.token_embd.weight)
        for blk in m.blocks:
            x = rms_norm(h, blk.attn_norm, c.eps)
            h = h + (self.gdn(blk.mixer, x) if blk.recurrent else self.attn(blk.mixer, x))
            y = rms_norm(h, blk.post_attention_norm, c.eps)
            gt, up = self.lin(y, blk.ffn_gate.weight, blk.ffn_up.weight)
            h = h + self.lin(F.silu(gt) * up, blk.ffn_down.weight)
        return h


if __name__ == "__main__":
    from model import Config
    torch.manual_seed(0)
    c = Config(n_vocab=300, n_embd=64, n_layer=4, n_ff=96, head_dim=16, n_rot=8, ssm_head_dim=16, n_nextn=1)
    m = Qwen35(c)
    m.init_weights(1)
    ids = torch.randint(0, 300, (3, 150))
    ref = m.hidden(ids)
    with torch.no_grad():
        # MTP passes vs model.py: pass 1 = teacher-forced rows; pass k+1 row q = draft k of a chain started at
        # q - k, computed row by row with a KV cache holding the teacher-forced rows <= q - k
        _, tf = m.mtp_teacher_forced(ids, ref)
        outs = Fast(m, bf16=False).mtp(ref, ids, depth=3)
        print("MTP pass 1 vs model.py teacher-forced rows: max|dh| %.3g" % (outs[0] - tf).abs().max())
        hn = m.h_nextn(ref)
        worst = [0.0, 0.0]
        for q0 in (1, 17, 60, 146):
            cache = {}
            m.mtp_rows(ids[:1, :q0 + 1], torch.cat([torch.zeros_like(hn[:1, :1]), hn[:1, :q0]], 1), cache, 0)
            h = tf[:1, q0:q0 + 1]
            for k in (1, 2):
                _, h = m.mtp_rows(ids[:1, q0 + k:q0 + k + 1], h, cache, q0 + k)
                worst[k - 1] = max(worst[k - 1], float((h[0, 0] - outs[k][0, q0 + k]).abs().max()))
        print("MTP chained passes 2, 3 vs model.py draft chains: max|dh| %.3g %.3g" % tuple(worst))
    for bf in (False, True):
        f = Fast(m, bf16=bf)
        out = f.hidden(ids)
        print("fast path (bf16=%s) vs model.py: max|dh| %.3g" % (bf, (out - ref).abs().max()))
        ps = list(m.parameters())

        def loss(h, hm):      # trunk + MTP pass 1 (the MTP rows through model.py or the fast path)
            return m.logits(h).pow(2).sum() + (hm @ m.token_embd.weight.t()).pow(2).sum()

        h1 = m.hidden(ids)
        g1 = torch.autograd.grad(loss(h1, m.mtp_teacher_forced(ids, h1)[1]), ps)
        h2 = f.hidden(ids)
        g2 = torch.autograd.grad(loss(h2, f.mtp(h2, ids)[0]), ps)
        print("  max relative grad diff %.3g" % max(float((a - b).norm() / (a.norm() + 1e-12)) for a, b in zip(g1, g2)))
