#!/usr/bin/env python3
"""gguf.py - minimal GGUF v3 writer and reader (F32/F16 tensors, all metadata value types).

Layout (ggml/include/gguf.h): magic "GGUF", u32 version 3, u64 n_tensors, u64 n_kv; KV pairs (u64-length
string key, u32 type, value); tensor infos (name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset
relative to the data section); zero padding to general.alignment (32); tensor data, each tensor aligned.
Shapes are ggml order [ne0, ne1, ...] (ne0 contiguous): a PyTorch array of shape (a, b) is written as ne [b, a].
"""

import os
import struct

import numpy as np

MAGIC = b"GGUF"
VERSION = 3
ALIGNMENT = 32

(T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY,
 T_UINT64, T_INT64, T_FLOAT64) = range(13)
_FMT = {T_UINT8: "<B", T_INT8: "<b", T_UINT16: "<H", T_INT16: "<h", T_UINT32: "<I", T_INT32: "<i",
        T_FLOAT32: "<f", T_BOOL: "<?", T_UINT64: "<Q", T_INT64: "<q", T_FLOAT64: "<d"}
GGML_F32, GGML_F16 = 0, 1
_GGML_DTYPE = {GGML_F32: "<f4", GGML_F16: "<f2"}


class Val:
    def __init__(self, typ, value, arr_type=None):
        self.typ, self.value, self.arr_type = typ, value, arr_type


def u32(v): return Val(T_UINT32, int(v))
def i32(v): return Val(T_INT32, int(v))
def f32(v): return Val(T_FLOAT32, float(v))
def boolean(v): return Val(T_BOOL, bool(v))
def string(v): return Val(T_STRING, str(v))
def arr_str(v): return Val(T_ARRAY, list(v), T_STRING)
def arr_i32(v): return Val(T_ARRAY, [int(x) for x in v], T_INT32)


def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _val(v):
    out = [struct.pack("<I", v.typ)]
    if v.typ == T_STRING:
        out.append(_str(v.value))
    elif v.typ == T_ARRAY:
        out.append(struct.pack("<IQ", v.arr_type, len(v.value)))
        if v.arr_type == T_STRING:
            out.extend(_str(x) for x in v.value)
        else:
            out.append(np.array(v.value, dtype=np.dtype(_FMT[v.arr_type])).tobytes())
    else:
        out.append(struct.pack(_FMT[v.typ], v.value))
    return b"".join(out)


def _pad(n, a=ALIGNMENT):
    return (n + a - 1) // a * a


class Writer:
    def __init__(self):
        self.kv = []        # (key, Val)
        self.tensors = []   # (name, ndarray float32, ggml type)

    def add(self, key, val):
        assert all(k != key for k, _ in self.kv), "duplicate key " + key
        self.kv.append((key, val))

    def add_tensor(self, name, array, gtype=GGML_F32):
        assert all(t[0] != name for t in self.tensors), "duplicate tensor " + name
        self.tensors.append((name, np.ascontiguousarray(array, dtype=np.float32), gtype))

    def write(self, path):
        head = [MAGIC, struct.pack("<IQQ", VERSION, len(self.tensors), len(self.kv))]
        for k, v in self.kv:
            head += [_str(k), _val(v)]
        datas, off = [], 0
        for name, a, gtype in self.tensors:
            ne = list(reversed(a.shape))
            data = a.astype(_GGML_DTYPE[gtype]).tobytes()
            head += [_str(name), struct.pack("<I", len(ne)), struct.pack("<%dQ" % len(ne), *ne),
                     struct.pack("<IQ", gtype, off)]
            datas.append(data)
            off += _pad(len(data))
        head = b"".join(head)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(head)
            f.write(b"\0" * (_pad(len(head)) - len(head)))
            for d in datas:
                f.write(d)
                f.write(b"\0" * (_pad(len(d)) - len(d)))
        os.replace(tmp, path)
        return os.path.getsize(path)


def read(path):
    """-> (metadata dict key -> python value, tensors dict name -> float32 ndarray in PyTorch order)."""
    buf = open(path, "rb").read()
    p = 0

    def rd(fmt):
        nonlocal p
        v = struct.unpack_from(fmt, buf, p)
        p += struct.calcsize(fmt)
        return v[0] if len(v) == 1 else v

    def rstr():
        nonlocal p
        n = rd("<Q")
        s = buf[p:p + n].decode("utf-8")
        p += n
        return s

    def rval(t):
        if t == T_STRING:
            return rstr()
        if t == T_ARRAY:
            at, n = rd("<IQ")
            return [rval(at) for _ in range(n)]
        return rd(_FMT[t])

    assert buf[:4] == MAGIC
    p = 4
    version, n_t, n_kv = rd("<IQQ")
    assert version == VERSION
    meta = {}
    for _ in range(n_kv):
        k = rstr()
        meta[k] = rval(rd("<I"))
    infos = []
    for _ in range(n_t):
        name = rstr()
        nd = rd("<I")
        ne = [rd("<Q") for _ in range(nd)]
        gt, off = rd("<IQ")
        infos.append((name, ne, gt, off))
    base = _pad(p, meta.get("general.alignment", ALIGNMENT))
    tensors = {}
    for name, ne, gt, off in infos:
        n = int(np.prod(ne))
        a = np.frombuffer(buf, dtype=_GGML_DTYPE[gt], count=n, offset=base + off).astype(np.float32)
        tensors[name] = a.reshape(list(reversed(ne)))
    return meta, tensors
