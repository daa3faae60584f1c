"""A copy of a GGUF file with its chat template replaced (and optionally add_bos_token set):
fixtures for models whose published templates chatfs must render, made at test time from
the tiny fixtures and llama.cpp's models/templates/ (neither copied into the repository).

  gguf_set_template.py IN.gguf TEMPLATE.jinja OUT.gguf [--add-bos true|false]
                       [--f32 KEY=VALUE] [--i32 KEY=VALUE] [--token ID=TEXT]

TEMPLATE.jinja "-" keeps the file's template. --f32 / --i32 set a metadata key (for
example general.sampling.temp), --token gives token ID another text (the thinking tests
make a model whose ordinary tokens are its reasoning markers); each may be repeated.

Also prints the tokenizer's BOS and EOS texts as JSON on stdout ({"bos": ..., "eos": ...,
"add_bos": ...}), which the caller passes to the reference renderer.

GGUF v3: header (magic, version, tensor count, key/value count), the key/values, the
tensor infos (offsets relative to the data section), padding to general.alignment (32 by
default), the data. Only the key/values change, so the tensor infos and data are copied
as they are and the padding recomputed.
"""
import json
import struct
import sys

SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9


class Reader:
    def __init__(self, data):
        self.d, self.o = data, 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.d, self.o)
        self.o += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def string(self):
        n = self.take("Q")
        s = self.d[self.o:self.o + n]
        self.o += n
        return s

    def value(self, t):
        if t == STRING:
            return self.string()
        if t == ARRAY:
            et, n = self.take("I"), self.take("Q")
            return (et, [self.value(et) for _ in range(n)])
        return self.take(SCALAR[t])


def put_string(out, s):
    out += struct.pack("<Q", len(s)) + s


def put_value(out, t, v):
    if t == STRING:
        put_string(out, v)
    elif t == ARRAY:
        et, items = v
        out += struct.pack("<IQ", et, len(items))
        for x in items:
            put_value(out, et, x)
    else:
        out += struct.pack("<" + SCALAR[t], v)


def main():
    args = sys.argv[1:]
    add_bos = None
    extra, tokens = [], []
    for opt in ("--add-bos", "--f32", "--i32", "--token"):
        while opt in args:
            i = args.index(opt)
            if i + 1 >= len(args):
                sys.exit(f"{opt} needs a value")
            value = args[i + 1]
            del args[i:i + 2]
            if opt == "--add-bos":
                add_bos = value == "true"
            elif opt == "--token":
                tid, text = value.split("=", 1)
                tokens.append((int(tid), text.encode("utf-8")))
            else:
                key, v = value.split("=", 1)
                extra.append((key.encode(), 6 if opt == "--f32" else 5, float(v) if opt == "--f32" else int(v)))
    if len(args) != 3:
        sys.exit("usage: gguf_set_template.py IN.gguf TEMPLATE.jinja|- OUT.gguf [--add-bos true|false] "
                 "[--f32 KEY=VALUE] [--i32 KEY=VALUE] [--token ID=TEXT]")
    src, template_path, dst = args
    with open(src, "rb") as f:
        data = f.read()
    template = None
    if template_path != "-":
        with open(template_path, "rb") as f:
            template = f.read()
    r = Reader(data)
    magic, version, n_tensors, n_kv = r.take("IIQQ")
    if magic != 0x46554747 or version != 3:
        sys.exit(f"{src}: not a GGUF v3 file")
    kvs = []
    for _ in range(n_kv):
        key = r.string()
        t = r.take("I")
        kvs.append([key, t, r.value(t)])
    infos_start = r.o
    for _ in range(n_tensors):
        r.string()
        n_dims = r.take("I")
        r.take("Q" * n_dims)
        r.take("IQ")
    infos = data[infos_start:r.o]
    kv = {k: (t, v) for k, t, v in kvs}
    align = kv.get(b"general.alignment", (4, 32))[1]
    data_start = (r.o + align - 1) // align * align

    def set_kv(key, t, v):
        for item in kvs:
            if item[0] == key:
                item[1], item[2] = t, v
                return
        kvs.append([key, t, v])

    if template is not None:
        set_kv(b"tokenizer.chat_template", STRING, template)
    for key, t, v in extra:
        set_kv(key, t, v)
    for tid, text in tokens:
        kv[b"tokenizer.ggml.tokens"][1][1][tid] = text
    if add_bos is not None:
        set_kv(b"tokenizer.ggml.add_bos_token", 7, add_bos)
    out = bytearray(struct.pack("<IIQQ", magic, version, n_tensors, len(kvs)))
    for key, t, v in kvs:
        put_string(out, key)
        out += struct.pack("<I", t)
        put_value(out, t, v)
    out += infos
    out += b"\0" * ((-len(out)) % align)
    out += data[data_start:]
    with open(dst, "wb") as f:
        f.write(out)

    tokens = kv[b"tokenizer.ggml.tokens"][1][1]
    text = {}
    for name in ("bos", "eos"):
        tid = kv.get(b"tokenizer.ggml.%s_token_id" % name.encode())
        text[name] = tokens[tid[1]].decode("utf-8") if tid else ""
    flag = kv.get(b"tokenizer.ggml.add_bos_token")
    text["add_bos"] = add_bos if add_bos is not None else bool(flag[1]) if flag else False
    json.dump(text, sys.stdout)


if __name__ == "__main__":
    main()
