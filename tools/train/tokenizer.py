#!/usr/bin/env python3
"""tokenizer.py - byte-level BPE (GPT-2 byte->unicode mapping) with llama.cpp's `qwen35` pre-tokenizer.

Vocabulary layout: ids 0..255 = the 256 byte tokens (id b = byte b), then one token per merge (in merge
order), then the CONTROL tokens <|endoftext|>, <|im_start|>, <|im_end|> and the USER_DEFINED tokens <think>,
</think> (the token types a converted Qwen3.5 GGUF gives them: Qwen's tokenizer marks <think> and </think>
"special": false, so convert_hf_to_gguf.py writes them as USER_DEFINED; llama.cpp matches USER_DEFINED texts
even with parse_special off and always renders them when decoding).

Encoding (what llama.cpp does for tokenizer.ggml.model = "gpt2", pre = "qwen35", parse_special = true):
  1. split the text at occurrences of special-token texts (longest first; with parse_special off only the
     USER_DEFINED ones);
  2. split every other fragment into words with the qwen35 pre-tokenizer regex
       (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}
       | ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
     implemented below as the same hand-written scanner llama.cpp uses (unicode_regex_split_custom_*);
  3. map each word's UTF-8 bytes to GPT-2 byte-level unicode characters and repeatedly merge the adjacent
     pair with the lowest merge rank (leftmost on ties).
"""

import unicodedata

TOK_NORMAL, TOK_CONTROL, TOK_USER_DEFINED = 1, 3, 4
CONTROL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
USER_DEFINED_TOKENS = ["<think>", "</think>"]
SPECIAL_TOKENS = CONTROL_TOKENS + USER_DEFINED_TOKENS


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = bytes_to_unicode()
U2B = {v: k for k, v in B2U.items()}

# --------------------------------------------------------------------------------------------------
# qwen35 pre-tokenizer
# --------------------------------------------------------------------------------------------------
_WS = set([0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000]
          + list(range(0x2000, 0x200B)))


def _flags(cp):
    """(defined, is_letter, is_number, is_mark, is_whitespace) for a code point (None = out of range)."""
    if cp is None:
        return (False, False, False, False, False)
    cat = unicodedata.category(chr(cp))
    return (cat != "Cn", cat[0] == "L", cat[0] == "N", cat[0] == "M", cp in _WS)


def pretokenize(text):
    """Split text into words exactly like llama.cpp's qwen35 scanner."""
    cps = [ord(c) for c in text]
    n = len(cps)
    out = []

    def cpt(i):
        return cps[i] if 0 <= i < n else None

    def fl(i):
        return _flags(cpt(i))

    def lower(c):
        return ord(chr(c).lower()) if c is not None else None

    start = 0
    pos = 0
    while pos < n:
        c = cps[pos]
        f = fl(pos)
        # contractions
        if c == ord("'") and pos + 1 < n:
            c1 = lower(cps[pos + 1])
            if c1 in (ord("s"), ord("t"), ord("m"), ord("d")):
                pos += 2
                out.append(text[start:pos]); start = pos
                continue
            if pos + 2 < n:
                c2 = lower(cps[pos + 2])
                if (c1, c2) in ((ord("r"), ord("e")), (ord("v"), ord("e")), (ord("l"), ord("l"))):
                    pos += 3
                    out.append(text[start:pos]); start = pos
                    continue
        # [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+
        if not (c == 0x0D or c == 0x0A or f[2]):
            f1 = fl(pos + 1)
            if f[1] or f[3] or f1[1] or f1[3]:
                pos += 1
                while True:
                    g = fl(pos)
                    if not (g[1] or g[3]):
                        break
                    pos += 1
                out.append(text[start:pos]); start = pos
                continue
        # \p{N}
        if f[2]:
            pos += 1
            out.append(text[start:pos]); start = pos
            continue
        # ' ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*'
        f2 = fl(pos + 1) if c == 0x20 else f
        if not (f2[4] or f2[1] or f2[3] or f2[2]) and f2[0] and f[0]:
            if c == 0x20:
                pos += 1
            while True:
                g = fl(pos)
                if (g[4] or g[1] or g[3] or g[2]) or not g[0]:
                    break
                pos += 1
            while cpt(pos) in (0x0D, 0x0A):
                pos += 1
            out.append(text[start:pos]); start = pos
            continue
        # whitespace
        nws = 0
        last_rn = 0
        while fl(pos + nws)[4]:
            if cpt(pos + nws) in (0x0D, 0x0A):
                last_rn = pos + nws + 1
            nws += 1
        if last_rn > 0:                       # \s*[\r\n]+
            pos = last_rn
            out.append(text[start:pos]); start = pos
            continue
        if nws > 1 and cpt(pos + nws) is not None:   # \s+(?!\S)
            pos += nws - 1
            out.append(text[start:pos]); start = pos
            continue
        if nws > 0:                           # \s+
            pos += nws
            out.append(text[start:pos]); start = pos
            continue
        pos += 1
        out.append(text[start:pos]); start = pos
    return out


def split_special(text, specials=SPECIAL_TOKENS):
    """-> list of (special_text or None, raw_text) fragments, like llama.cpp's tokenizer_st_partition."""
    frags = [(None, text)]
    for sp in sorted(specials, key=len, reverse=True):
        nf = []
        for s, t in frags:
            if s is not None:
                nf.append((s, t))
                continue
            while True:
                i = t.find(sp)
                if i < 0:
                    break
                if i > 0:
                    nf.append((None, t[:i]))
                nf.append((sp, sp))
                t = t[i + len(sp):]
            if t:
                nf.append((None, t))
        frags = nf
    return frags


def word_symbols(word):
    return [B2U[b] for b in word.encode("utf-8")]


# --------------------------------------------------------------------------------------------------
# BPE training
# --------------------------------------------------------------------------------------------------
def train_bpe(texts, n_merges):
    """Learn n_merges merges from texts (special tokens removed). Most frequent pair first; ties: lexicographic."""
    freq = {}
    for t in texts:
        for s, frag in split_special(t):
            if s is not None:
                continue
            for w in pretokenize(frag):
                freq[w] = freq.get(w, 0) + 1
    words = [word_symbols(w) for w in freq]
    counts = [freq[w] for w in freq]
    # pair -> count, pair -> set of word indices
    pairs, where = {}, {}
    for wi, (w, c) in enumerate(zip(words, counts)):
        for p in zip(w, w[1:]):
            pairs[p] = pairs.get(p, 0) + c
            where.setdefault(p, set()).add(wi)
    merges = []
    while len(merges) < n_merges and pairs:
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        if best[1] <= 0:
            break
        a, b = best[0]
        merges.append((a, b))
        ab = a + b
        for wi in list(where.get((a, b), ())):
            w, c = words[wi], counts[wi]
            for p in zip(w, w[1:]):
                pairs[p] -= c
            i, nw = 0, []
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    nw.append(ab)
                    i += 2
                else:
                    nw.append(w[i])
                    i += 1
            words[wi] = nw
            for p in zip(nw, nw[1:]):
                pairs[p] = pairs.get(p, 0) + c
                where.setdefault(p, set()).add(wi)
        pairs = {p: c for p, c in pairs.items() if c > 0}
    return merges


# --------------------------------------------------------------------------------------------------
# tokenizer
# --------------------------------------------------------------------------------------------------
class Tokenizer:
    def __init__(self, merges, specials=SPECIAL_TOKENS):
        """specials: the special tokens after the merges (a file made before <think> existed has only the
        CONTROL ones)."""
        self.merges = [tuple(m) for m in merges]
        self.rank = {m: i for i, m in enumerate(self.merges)}
        self.tokens = [B2U[b] for b in range(256)]
        seen = set(self.tokens)
        for a, b in self.merges:
            assert a + b not in seen, "duplicate merge result " + a + b
            self.tokens.append(a + b)
            seen.add(a + b)
        self.types = [TOK_NORMAL] * len(self.tokens)
        self.special = {}
        for s in specials:
            self.special[s] = len(self.tokens)
            self.tokens.append(s)
            self.types.append(TOK_CONTROL if s in CONTROL_TOKENS else TOK_USER_DEFINED)
        self.id = {t: i for i, t in enumerate(self.tokens) if self.types[i] == TOK_NORMAL}
        self.bos = self.special["<|endoftext|>"]
        self.im_start = self.special["<|im_start|>"]
        self.im_end = self.special["<|im_end|>"]
        self.think = self.special.get("<think>")
        self.end_think = self.special.get("</think>")
        self.eos = self.im_end
        self._cache = {}

    @property
    def n_vocab(self):
        return len(self.tokens)

    def merges_strings(self):
        return ["%s %s" % m for m in self.merges]

    def bpe_word(self, word):
        r = self._cache.get(word)
        if r is not None:
            return r
        sym = word_symbols(word)
        while len(sym) > 1:
            best, bi = None, -1
            for i in range(len(sym) - 1):
                k = self.rank.get((sym[i], sym[i + 1]))
                if k is not None and (best is None or k < best):
                    best, bi = k, i
            if best is None:
                break
            sym[bi:bi + 2] = [sym[bi] + sym[bi + 1]]
        ids = []
        for s in sym:
            if s in self.id:
                ids.append(self.id[s])
            else:
                ids.extend(self.id[c] for c in s)
        self._cache[word] = ids
        return ids

    def encode(self, text, parse_special=True):
        ids = []
        frags = split_special(text, list(self.special) if parse_special else
                              [t for t in self.special if t in USER_DEFINED_TOKENS])
        for s, frag in frags:
            if s is not None:
                ids.append(self.special[s])
                continue
            for w in pretokenize(frag):
                ids.extend(self.bpe_word(w))
        return ids

    def decode(self, ids, special=True):
        out = bytearray()
        for i in ids:
            if self.types[i] == TOK_USER_DEFINED:
                out += self.tokens[i].encode()
            elif self.types[i] == TOK_CONTROL:
                if special:
                    out += self.tokens[i].encode()
            else:
                out += bytes(U2B[c] for c in self.tokens[i])
        return out.decode("utf-8", errors="replace")
