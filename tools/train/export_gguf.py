#!/usr/bin/env python3
"""export_gguf.py - write a trained model.Qwen35 + tokenizer.Tokenizer as a llama.cpp `qwen35` GGUF (F32),
and load such a GGUF back into PyTorch (used by evaluate.py and check_llref.py).

The MTP head is written as convert_hf_to_gguf.py writes a Qwen3.5 checkpoint with MTP (spec §16.1):
`qwen35.nextn_predict_layers` = 1, `block_count` = trunk layers + 1, the head's block as blk.{n_layer} with the
ordinary attention/FFN tensor names plus nextn.eh_proj [2E, E], nextn.enorm, nextn.hnorm, nextn.shared_head_norm
(no nextn.embed_tokens / shared_head_head: the head uses token_embd, tied). Norm weights are stored as the final
multipliers, which is what the converter's +1 on Qwen3.5's zero-centred norms produces.

Usage:
  python3 export_gguf.py CHECKPOINT.pt OUT.gguf     # re-export a checkpoint saved by train.py
  python3 export_gguf.py --dump FILE.gguf           # print metadata and tensor shapes
"""

import argparse
import sys

import numpy as np
import torch

import gguf
from model import Config, Qwen35
from chat_format import TEMPLATE
from tokenizer import Tokenizer

ARCH = "qwen35"


def _np(t):
    return t.detach().cpu().float().numpy()


def add_block(w, p, b):
    w.add_tensor(p + "attn_norm.weight", _np(b.attn_norm))
    w.add_tensor(p + "post_attention_norm.weight", _np(b.post_attention_norm))
    m = b.mixer
    if b.recurrent:
        w.add_tensor(p + "attn_qkv.weight", _np(m.attn_qkv.weight))
        w.add_tensor(p + "attn_gate.weight", _np(m.attn_gate.weight))
        w.add_tensor(p + "ssm_conv1d.weight", _np(m.ssm_conv1d))
        w.add_tensor(p + "ssm_dt.bias", _np(m.ssm_dt_bias))
        w.add_tensor(p + "ssm_a", _np(-torch.exp(m.A_log)))
        w.add_tensor(p + "ssm_beta.weight", _np(m.ssm_beta.weight))
        w.add_tensor(p + "ssm_alpha.weight", _np(m.ssm_alpha.weight))
        w.add_tensor(p + "ssm_norm.weight", _np(m.ssm_norm))
        w.add_tensor(p + "ssm_out.weight", _np(m.ssm_out.weight))
    else:
        w.add_tensor(p + "attn_q.weight", _np(m.attn_q.weight))
        w.add_tensor(p + "attn_k.weight", _np(m.attn_k.weight))
        w.add_tensor(p + "attn_v.weight", _np(m.attn_v.weight))
        w.add_tensor(p + "attn_output.weight", _np(m.attn_output.weight))
        w.add_tensor(p + "attn_q_norm.weight", _np(m.attn_q_norm))
        w.add_tensor(p + "attn_k_norm.weight", _np(m.attn_k_norm))
    w.add_tensor(p + "ffn_gate.weight", _np(b.ffn_gate.weight))
    w.add_tensor(p + "ffn_up.weight", _np(b.ffn_up.weight))
    w.add_tensor(p + "ffn_down.weight", _np(b.ffn_down.weight))


def export(model, tok, path, name="chatfs-default", description=None):
    c = model.c
    assert c.n_vocab == tok.n_vocab
    w = gguf.Writer()
    w.add("general.architecture", gguf.string(ARCH))
    w.add("general.type", gguf.string("model"))
    w.add("general.name", gguf.string(name))
    if description:
        w.add("general.description", gguf.string(description))
    w.add("general.license", gguf.string("MIT"))
    w.add("general.file_type", gguf.u32(0))            # LLAMA_FTYPE_ALL_F32
    w.add("general.alignment", gguf.u32(gguf.ALIGNMENT))
    A = ARCH + "."
    w.add(A + "vocab_size", gguf.u32(c.n_vocab))
    w.add(A + "context_length", gguf.u32(c.context_length))
    w.add(A + "embedding_length", gguf.u32(c.n_embd))
    w.add(A + "block_count", gguf.u32(c.n_layer + c.n_nextn))
    if c.n_nextn:
        w.add(A + "nextn_predict_layers", gguf.u32(c.n_nextn))
    w.add(A + "feed_forward_length", gguf.u32(c.n_ff))
    w.add(A + "attention.head_count", gguf.u32(c.n_head))
    w.add(A + "attention.head_count_kv", gguf.u32(c.n_head_kv))
    w.add(A + "attention.key_length", gguf.u32(c.head_dim))
    w.add(A + "attention.value_length", gguf.u32(c.head_dim))
    w.add(A + "attention.layer_norm_rms_epsilon", gguf.f32(c.eps))
    w.add(A + "rope.dimension_count", gguf.u32(c.n_rot))
    # IMROPE sections (pairs per position stream t,h,w,e); for text all streams carry the token position,
    # so any split of the n_rot/2 pairs over the first three streams is equivalent to plain NEOX rope.
    half = c.n_rot // 2
    s0 = (half + 2) // 3
    s1 = (half - s0 + 1) // 2
    w.add(A + "rope.dimension_sections", gguf.arr_i32([s0, s1, half - s0 - s1, 0]))
    w.add(A + "rope.freq_base", gguf.f32(c.rope_base))
    w.add(A + "ssm.conv_kernel", gguf.u32(c.conv_kernel))
    w.add(A + "ssm.state_size", gguf.u32(c.ssm_head_dim))
    w.add(A + "ssm.group_count", gguf.u32(c.ssm_k_heads))
    w.add(A + "ssm.time_step_rank", gguf.u32(c.ssm_v_heads))
    w.add(A + "ssm.inner_size", gguf.u32(c.ssm_v_heads * c.ssm_head_dim))
    w.add(A + "full_attention_interval", gguf.u32(c.full_attn_interval))
    # tokenizer
    w.add("tokenizer.ggml.model", gguf.string("gpt2"))
    w.add("tokenizer.ggml.pre", gguf.string("qwen35"))
    w.add("tokenizer.ggml.tokens", gguf.arr_str(tok.tokens))
    w.add("tokenizer.ggml.token_type", gguf.arr_i32(tok.types))
    w.add("tokenizer.ggml.merges", gguf.arr_str(tok.merges_strings()))
    w.add("tokenizer.ggml.bos_token_id", gguf.u32(tok.bos))
    w.add("tokenizer.ggml.eos_token_id", gguf.u32(tok.im_end))
    w.add("tokenizer.ggml.padding_token_id", gguf.u32(tok.bos))
    w.add("tokenizer.ggml.add_bos_token", gguf.boolean(False))
    w.add("tokenizer.chat_template", gguf.string(TEMPLATE))
    # tensors
    w.add_tensor("token_embd.weight", _np(model.token_embd.weight))
    w.add_tensor("output_norm.weight", _np(model.output_norm))
    for i, b in enumerate(model.blocks):
        add_block(w, "blk.%d." % i, b)
    if model.mtp is not None:
        p = "blk.%d." % c.n_layer
        add_block(w, p, model.mtp.block)
        w.add_tensor(p + "nextn.eh_proj.weight", _np(model.mtp.eh_proj.weight))
        w.add_tensor(p + "nextn.enorm.weight", _np(model.mtp.enorm))
        w.add_tensor(p + "nextn.hnorm.weight", _np(model.mtp.hnorm))
        w.add_tensor(p + "nextn.shared_head_norm.weight", _np(model.mtp.shared_head_norm))
    return w.write(path)


def load_block(T, p, b):
    t = lambda n: torch.from_numpy(np.array(T[n]))   # noqa: E731
    b.attn_norm.copy_(t(p + "attn_norm.weight"))
    b.post_attention_norm.copy_(t(p + "post_attention_norm.weight"))
    m = b.mixer
    if b.recurrent:
        m.attn_qkv.weight.copy_(t(p + "attn_qkv.weight"))
        m.attn_gate.weight.copy_(t(p + "attn_gate.weight"))
        m.ssm_conv1d.copy_(t(p + "ssm_conv1d.weight"))
        m.ssm_dt_bias.copy_(t(p + "ssm_dt.bias"))
        m.A_log.copy_(torch.log(-t(p + "ssm_a")))
        m.ssm_beta.weight.copy_(t(p + "ssm_beta.weight"))
        m.ssm_alpha.weight.copy_(t(p + "ssm_alpha.weight"))
        m.ssm_norm.copy_(t(p + "ssm_norm.weight"))
        m.ssm_out.weight.copy_(t(p + "ssm_out.weight"))
    else:
        for n in ("attn_q", "attn_k", "attn_v", "attn_output"):
            getattr(m, n).weight.copy_(t(p + n + ".weight"))
        m.attn_q_norm.copy_(t(p + "attn_q_norm.weight"))
        m.attn_k_norm.copy_(t(p + "attn_k_norm.weight"))
    for n in ("ffn_gate", "ffn_up", "ffn_down"):
        getattr(b, n).weight.copy_(t(p + n + ".weight"))


def load(path):
    """GGUF -> (Qwen35 model with the file's weights, including an MTP head if the file has one, Tokenizer)."""
    meta, T = gguf.read(path)
    A = meta["general.architecture"] + "."
    assert A == ARCH + "."
    nextn = meta.get(A + "nextn_predict_layers", 0)
    c = Config(n_vocab=len(meta["tokenizer.ggml.tokens"]), n_embd=meta[A + "embedding_length"],
               n_layer=meta[A + "block_count"] - nextn, n_ff=meta[A + "feed_forward_length"],
               n_head=meta[A + "attention.head_count"], n_head_kv=meta[A + "attention.head_count_kv"],
               head_dim=meta[A + "attention.key_length"], n_rot=meta[A + "rope.dimension_count"],
               rope_base=meta[A + "rope.freq_base"], ssm_k_heads=meta[A + "ssm.group_count"],
               ssm_v_heads=meta[A + "ssm.time_step_rank"], ssm_head_dim=meta[A + "ssm.state_size"],
               conv_kernel=meta[A + "ssm.conv_kernel"], full_attn_interval=meta[A + "full_attention_interval"],
               eps=meta[A + "attention.layer_norm_rms_epsilon"], context_length=meta[A + "context_length"],
               n_nextn=nextn)
    model = Qwen35(c)
    t = lambda n: torch.from_numpy(np.array(T[n]))   # noqa: E731
    with torch.no_grad():
        model.token_embd.weight.copy_(t("token_embd.weight"))
        model.output_norm.copy_(t("output_norm.weight"))
        for i, b in enumerate(model.blocks):
            load_block(T, "blk.%d." % i, b)
        if nextn:
            p = "blk.%d." % c.n_layer
            load_block(T, p, model.mtp.block)
            model.mtp.eh_proj.weight.copy_(t(p + "nextn.eh_proj.weight"))
            model.mtp.enorm.copy_(t(p + "nextn.enorm.weight"))
            model.mtp.hnorm.copy_(t(p + "nextn.hnorm.weight"))
            model.mtp.shared_head_norm.copy_(t(p + "nextn.shared_head_norm.weight"))
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    tok = Tokenizer(merges, meta["tokenizer.ggml.tokens"][256 + len(merges):])
    assert tok.tokens == meta["tokenizer.ggml.tokens"], "token list does not match the merges"
    assert tok.types == meta["tokenizer.ggml.token_type"], "token types do not match"
    return model, tok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("args", nargs="*")
    ap.add_argument("--dump", metavar="GGUF")
    a = ap.parse_args()
    if a.dump:
        meta, T = gguf.read(a.dump)
        for k, v in meta.items():
            if isinstance(v, list):
                print("%-45s [%d] %s" % (k, len(v), v[:6]))
            else:
                print("%-45s %r" % (k, v if not isinstance(v, str) or len(v) < 100 else v[:97] + "..."))
        n = 0
        for k, v in T.items():
            print("T %-40s %s" % (k, list(reversed(v.shape))))
            n += v.size
        print("params", n)
        return
    if len(a.args) != 2:
        ap.error("usage: export_gguf.py CHECKPOINT.pt OUT.gguf")
    ck = torch.load(a.args[0])
    model = Qwen35(Config(**ck["config"]))
    model.load_state_dict(ck["model"])
    tok = Tokenizer([tuple(m) for m in ck["merges"]])
    n = export(model, tok, a.args[1])
    print("wrote %s (%d bytes)" % (a.args[1], n), file=sys.stderr)


if __name__ == "__main__":
    main()
