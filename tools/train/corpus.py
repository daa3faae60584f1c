#!/usr/bin/env python3
"""corpus.py - deterministic generator of small chat tasks with exactly checkable answers.

Every conversation is a list of {"role", "content"} messages (optional leading system message,
then user/assistant turns).  Task kinds:

  arith      "What is 17 + 25?"                      -> "17 + 25 = 42."
  count      "How many words are in: red cat sun?"    -> "There are 3 words."
             "Count from 4 to 8."                      -> "4, 5, 6, 7, 8."
  words      "Reverse the words: red green blue"       -> "Reversed: blue green red"
  convert    "How many minutes are in 5 hours?"        -> "5 hours = 300 minutes."
  facts      "What is the capital of France?"          -> "The capital of France is Paris."
             "Where is Kenya?"                         -> "The continent of Kenya is Africa."
             "What color is grass?"                    -> "The color of grass is green."
             (from the tables COUNTRIES / ANIMALS / COLORS below)
  system     system "Answer in uppercase."             -> every reply in uppercase
             system "Reply in French numbers."         -> the result number is followed by its French
                                                          words: "17 + 25 = 42 (quarante-deux)."
  follow-ups (multi-turn, refer to the previous answer):
             "Add 5 to that." -> "42 + 5 = 47."   "Double that." -> "47 * 2 = 94."
             "And of Spain?"  -> "The capital of Spain is Madrid."
             "Now reverse them." -> the previous word list reversed ("Reversed: ...")
             "How many words is that?" -> "There are 3 words."

Answers are phrased so that every word copied from the question keeps the token it has there (with
its leading space): "Reversed: cat silver", "The continent of Kenya is ...", "The color of grass is ...".
The byte-level BPE gives every word of this closed vocabulary a single token, and "cat" (start of a
message) and " cat" are different tokens, so an answer starting with a copied word would make the
model learn 2 tokens per word.

(t_count_letters, t_count_occ and t_sort are kept but not in the training mix: the default model could
not learn everything in its time budget. For the same reason the country table has 16 entries and the
reverse lookup "Which country has the capital X?" is not asked.)

Held-out split: `heldout_items()` uses its own seed; training conversations that contain a held-out
item's prompt, or (for tasks that can be generalised: arithmetic, word lists, counting) the same
numbers / word tuple, are rejected by `TrainStream`, so held-out questions are never trained on.

Usage:
  python3 corpus.py --heldout heldout.jsonl [--n 320]   # write the held-out set (JSON lines)
  python3 corpus.py --sample 20                        # print some training conversations
"""

import argparse
import json
import random
import sys

# ----------------------------------------------------------------------------------------------
# tables
# ----------------------------------------------------------------------------------------------
# country: (capital, language, continent)
COUNTRIES = {
    "France": ("Paris", "French", "Europe"),
    "Spain": ("Madrid", "Spanish", "Europe"),
    "Italy": ("Rome", "Italian", "Europe"),
    "Germany": ("Berlin", "German", "Europe"),
    "Japan": ("Tokyo", "Japanese", "Asia"),
    "China": ("Beijing", "Chinese", "Asia"),
    "Brazil": ("Brasilia", "Portuguese", "South America"),
    "Egypt": ("Cairo", "Arabic", "Africa"),
    "Canada": ("Ottawa", "English", "North America"),
    "Mexico": ("Mexico City", "Spanish", "North America"),
    "Peru": ("Lima", "Spanish", "South America"),
    "Kenya": ("Nairobi", "Swahili", "Africa"),
    "Greece": ("Athens", "Greek", "Europe"),
    "Norway": ("Oslo", "Norwegian", "Europe"),
    "India": ("New Delhi", "Hindi", "Asia"),
    "Australia": ("Canberra", "English", "Oceania"),
}
# animal: (legs, sound)
ANIMALS = {
    "cat": (4, "meow"), "dog": (4, "woof"), "cow": (4, "moo"), "horse": (4, "neigh"),
    "pig": (4, "oink"), "sheep": (4, "baa"), "lion": (4, "roar"), "frog": (4, "ribbit"),
    "duck": (2, "quack"), "owl": (2, "hoot"), "chicken": (2, "cluck"), "snake": (0, "hiss"),
    "bee": (6, "buzz"), "ant": (6, None), "spider": (8, None), "crab": (10, None),
    "octopus": (8, None), "fish": (0, None), "mouse": (4, "squeak"), "goat": (4, "bleat"),
}
# thing: color
COLORS = {
    "the sky": "blue", "grass": "green", "snow": "white", "coal": "black", "a banana": "yellow",
    "a tomato": "red", "a carrot": "orange", "milk": "white", "the sun": "yellow", "a lemon": "yellow",
    "an emerald": "green", "a ruby": "red", "chocolate": "brown", "the sea": "blue", "a plum": "purple",
    "ash": "gray",
}
WORDS = [
    "apple", "banana", "cherry", "grape", "lemon", "mango", "peach", "pear", "plum", "melon",
    "cat", "dog", "bird", "fish", "horse", "mouse", "tiger", "zebra", "lion", "wolf",
    "red", "blue", "green", "black", "white", "pink", "gold", "silver",
    "sun", "moon", "star", "rain", "snow", "wind", "cloud", "river", "stone", "tree",
    "house", "door", "table", "chair", "book", "pen", "cup", "box", "key", "ship",
]
# (plural from, singular from, plural to, singular to, factor)
UNITS = [
    ("meters", "meter", "centimeters", "centimeter", 100),
    ("kilometers", "kilometer", "meters", "meter", 1000),
    ("kilograms", "kilogram", "grams", "gram", 1000),
    ("liters", "liter", "milliliters", "milliliter", 1000),
    ("centimeters", "centimeter", "millimeters", "millimeter", 10),
    ("hours", "hour", "minutes", "minute", 60),
    ("minutes", "minute", "seconds", "second", 60),
    ("days", "day", "hours", "hour", 24),
    ("weeks", "week", "days", "day", 7),
    ("years", "year", "months", "month", 12),
    ("feet", "foot", "inches", "inch", 12),
    ("dozens", "dozen", "eggs", "egg", 12),
]

SYS_NEUTRAL = ["You are a helpful assistant.", "You are chatfs, a small assistant.", "Be concise.",
               "You are a friendly assistant. Answer briefly.", "You are a calculator and quiz bot."]
SYS_UPPER = ["Answer in uppercase.", "Reply in uppercase.", "Always answer in capital letters.",
             "Use only uppercase letters in your answers.", "Write your answers in CAPS."]
SYS_FRENCH = ["Reply in French numbers.", "Answer with numbers written in French.",
              "Write numbers in French words.", "Give numbers in French."]

MAX_NUM = 250


# ----------------------------------------------------------------------------------------------
# French number words (traditional spelling)
# ----------------------------------------------------------------------------------------------
_FR_UNITS = ["zéro", "un", "deux", "trois", "quatre", "cinq", "six", "sept", "huit", "neuf", "dix",
             "onze", "douze", "treize", "quatorze", "quinze", "seize", "dix-sept", "dix-huit", "dix-neuf"]
_FR_TENS = {2: "vingt", 3: "trente", 4: "quarante", 5: "cinquante", 6: "soixante"}


def _fr_below100(n, final=True):
    if n < 20:
        return _FR_UNITS[n]
    t, u = divmod(n, 10)
    if t in _FR_TENS:
        if u == 0:
            return _FR_TENS[t]
        if u == 1:
            return _FR_TENS[t] + " et un"
        return _FR_TENS[t] + "-" + _FR_UNITS[u]
    if t == 7:
        return "soixante et onze" if u == 1 else "soixante-" + _FR_UNITS[10 + u]
    if t == 8:
        return ("quatre-vingts" if final else "quatre-vingt") if u == 0 else "quatre-vingt-" + _FR_UNITS[u]
    return "quatre-vingt-" + _FR_UNITS[10 + u]   # t == 9


def _fr_below1000(n, final=True):
    h, r = divmod(n, 100)
    if h == 0:
        return _fr_below100(r, final)
    head = "cent" if h == 1 else _FR_UNITS[h] + (" cents" if (r == 0 and final) else " cent")
    return head if r == 0 else head + " " + _fr_below100(r, final)


def french(n):
    """French words for 0 <= n < 1e6."""
    assert 0 <= n < 1000000
    if n < 1000:
        return _fr_below1000(n)
    th, r = divmod(n, 1000)
    head = "mille" if th == 1 else _fr_below1000(th, final=False) + " mille"
    return head if r == 0 else head + " " + _fr_below1000(r)


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------
def art(noun):
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def cap(s):
    return s[0].upper() + s[1:]


class Turn:
    """One user question, the expected assistant answer and, for tasks that think, the expected reasoning
    (written before the answer when thinking is on; "" = answer directly)."""

    def __init__(self, kind, user, answer, key=None, state=None, followup=False, reasoning=""):
        self.kind, self.user, self.answer, self.key, self.state, self.followup = kind, user, answer, key, state, followup
        self.reasoning = reasoning


def num(mode, n):
    """How a result number is written: digits, or digits + French words in 'french' mode."""
    return "%d (%s)" % (n, french(n)) if mode == "french" else str(n)


def finish(mode, s):
    return s.upper() if mode == "upper" else s


# ----------------------------------------------------------------------------------------------
# single-turn tasks. Each returns a Turn; state describes the answer for follow-ups:
#   ("num", value) | ("words", [w...]) | ("fact", table, entity, attribute)
# ----------------------------------------------------------------------------------------------
ADD_Q = ["What is {a} + {b}?", "What is {a} plus {b}?", "Calculate {a} + {b}.", "{a} + {b} = ?"]
SUB_Q = ["What is {a} - {b}?", "What is {a} minus {b}?", "Calculate {a} - {b}.", "{a} - {b} = ?"]
MUL_Q = ["What is {a} * {b}?", "What is {a} times {b}?", "Calculate {a} * {b}.", "{a} * {b} = ?"]


def t_arith(rng, mode, op=None, a=None, b=None):
    op = op or rng.choice(["+", "+", "+", "-", "-", "*"])
    if op == "+":
        if a is None:
            if rng.random() < 0.1:    # larger numbers (as produced by follow-ups)
                a, b = rng.randint(100, 250), rng.randint(1, 20)
            else:
                a, b = rng.randint(0, 99), rng.randint(0, 99)
        c = a + b
        q = rng.choice(ADD_Q)
    elif op == "-":
        if a is None:
            if rng.random() < 0.1:
                a = rng.randint(100, 250)
                b = rng.randint(1, 20)
            else:
                a = rng.randint(0, 99)
                b = rng.randint(0, a)
        c = a - b
        q = rng.choice(SUB_Q)
    else:
        if a is None:
            a, b = rng.randint(1, 10), rng.randint(1, 10)
        c = a * b
        q = rng.choice(MUL_Q)
    ans = "%d %s %d = %s." % (a, op, b, num(mode, c))
    return Turn("arith", q.format(a=a, b=b), finish(mode, ans), key=("arith", op, a, b), state=("num", c))


def t_count_words(rng, mode):
    n = rng.randint(1, 8)
    ws = [rng.choice(WORDS) for _ in range(n)]
    q = rng.choice(["How many words are in: {l}?", "Count the words: {l}"]).format(l=" ".join(ws))
    ans = "There %s %s word%s." % ("is" if n == 1 else "are", num(mode, n), "" if n == 1 else "s")
    return Turn("count", q, finish(mode, ans), key=("countw", tuple(ws)), state=("num", n))


def t_count_from(rng, mode):
    a = rng.randint(0, 95)
    b = a + rng.randint(2, 6)
    q = rng.choice(["Count from {a} to {b}.", "List the numbers from {a} to {b}."])
    ans = ", ".join(str(i) for i in range(a, b + 1)) + "."
    return Turn("count", q.format(a=a, b=b), ans, key=("countfrom", a, b), state=("num", b))


def t_count_letters(rng, mode):
    w = rng.choice(WORDS)
    q = rng.choice(["How many letters are in the word {w}?", "How many letters does {w} have?",
                    "Count the letters in {w}."]).format(w=w)
    n = len(w)
    ans = "The word %s has %s letters." % (w, num(mode, n))
    return Turn("count", q, finish(mode, ans), key=None, state=("num", n))


def t_count_occ(rng, mode):
    pool = rng.sample(WORDS, rng.randint(2, 4))
    n = rng.randint(3, 8)
    ws = [rng.choice(pool) for _ in range(n)]
    w = rng.choice(pool)
    k = ws.count(w)
    q = rng.choice(["How many times does the word {w} appear in: {l}?", "How often does {w} occur in: {l}?",
                    "Count how many times {w} appears in: {l}"]).format(w=w, l=" ".join(ws))
    ans = "The word %s appears %s time%s." % (w, num(mode, k), "" if k == 1 else "s")
    return Turn("count", q, finish(mode, ans), key=("occ", w, tuple(ws)), state=("num", k))


def words_answer(ws):
    # the words follow a prefix, so each keeps the same (leading-space) token it has in the question
    return "Reversed: " + " ".join(ws)


def t_reverse(rng, mode, ws=None):
    ws = ws or rng.sample(WORDS, rng.randint(2, 5))
    q = rng.choice(["Reverse the words: {l}", "Reverse the order of these words: {l}"]).format(l=" ".join(ws))
    out = list(reversed(ws))
    return Turn("words", q, finish(mode, words_answer(out)), key=("rev", tuple(ws)), state=("words", out))


def t_sort(rng, mode, ws=None):
    ws = ws or rng.sample(WORDS, rng.randint(2, 5))
    q = rng.choice(["Sort these words alphabetically: {l}", "Put these words in alphabetical order: {l}",
                    "Sort the words: {l}", "Arrange in alphabetical order: {l}"]).format(l=" ".join(ws))
    out = sorted(ws)
    return Turn("words", q, finish(mode, "Sorted: " + " ".join(out)), key=("sort", tuple(ws)), state=("words", out))


# ----------------------------------------------------------------------------------------------
# tasks that think: with thinking on the reply is REASONING "\n</think>\n\n" ANSWER, with thinking off the
# same ANSWER alone (chat_format.py)
# ----------------------------------------------------------------------------------------------
SUM3_Q = ["What is {a} + {b} + {c}?", "What is {a} plus {b} plus {c}?", "Calculate {a} + {b} + {c}.",
          "{a} + {b} + {c} = ?", "Add {a}, {b} and {c}."]
STEP_PRE = ["Think step by step. ", "Think step by step: "]
STEP_POST = [" Think step by step.", " Let's think step by step."]
SUM3_MAX = 30


def t_sum3(rng, mode, a=None, b=None, c=None):
    """multi-step arithmetic: 12 + 7 + 30 -> reasoning "12 + 7 = 19.\n19 + 30 = 49." """
    if a is None:
        a, b, c = rng.randint(1, SUM3_MAX), rng.randint(1, SUM3_MAX), rng.randint(1, SUM3_MAX)
    s, t = a + b, a + b + c
    q = rng.choice(SUM3_Q).format(a=a, b=b, c=c)
    if rng.random() < 0.15:
        q = rng.choice(STEP_PRE) + q if rng.random() < 0.5 else q + rng.choice(STEP_POST)
    ans = "%d + %d + %d = %s." % (a, b, c, num(mode, t))
    return Turn("sum3", q, finish(mode, ans), key=("sum3", a, b, c), state=("num", t),
                reasoning="%d + %d = %d.\n%d + %d = %d." % (a, b, s, s, c, t))


def t_steps(rng, mode):
    """"Think step by step" on a sum or difference: the second number in tens, then ones (two lines whenever it
    has tens, "73 + 0 = 73." included, so the form never depends on a digit):
    "What is 47 + 38? Think step by step." -> reasoning "47 + 30 = 77.\n77 + 8 = 85." """
    t = t_arith(rng, mode, op=rng.choice(["+", "-"]))
    _, op, a, b = t.key
    q = rng.choice(STEP_PRE) + t.user if rng.random() < 0.5 else t.user + rng.choice(STEP_POST)
    sign = 1 if op == "+" else -1
    tens, ones = b - b % 10, b % 10
    if tens:
        m = a + sign * tens
        r = "%d %s %d = %d.\n%d %s %d = %d." % (a, op, tens, m, m, op, ones, m + sign * ones)
    else:
        r = "%d %s %d = %d." % (a, op, b, a + sign * b)
    return Turn("steps", q, t.answer, key=t.key, state=t.state, reasoning=r)


LONG_Q = ["Count the words one by one: {l}", "Count these words one by one: {l}"]


def t_count_long(rng, mode, ws=None):
    """long reasoning (for thinking budgets): the words counted one at a time, "1, 2, 3, ..., 9." (3 tokens a
    word, up to 12 words; copying the words themselves in order, "1. red\n2. cat\n...", was beyond this model:
    it lost its place after 5 or 6); the answer is the word count, which the model also knows without the
    reasoning (thinking off, or reasoning cut short)."""
    ws = ws or rng.sample(WORDS, rng.randint(4, 12))
    q = rng.choice(LONG_Q).format(l=" ".join(ws))
    n = len(ws)
    ans = "There are %s words." % num(mode, n)
    return Turn("long", q, finish(mode, ans), key=("countlong", tuple(ws)), state=("words", list(ws)),
                reasoning=", ".join(str(i + 1) for i in range(n)) + ".")


def t_convert(rng, mode):
    pf, sf, pt, st, f = rng.choice(UNITS)
    n = rng.randint(1, 99) if f in (10, 100, 1000) else rng.randint(1, 10)
    if mode == "french":   # keep French answers short
        while n * f > 1000:
            n = rng.randint(1, 12)
            if n * f > 1000:
                n = 1
    fu = sf if n == 1 else pf
    q = rng.choice(["How many {pt} are in {n} {fu}?", "Convert {n} {fu} to {pt}."]).format(pt=pt, n=n, fu=fu)
    r = n * f
    ans = "%d %s = %s %s." % (n, fu, num(mode, r), pt)
    return Turn("convert", q, finish(mode, ans), key=None, state=("num", r))


def fact_answer(mode, table, ent, attr):
    if table == "country":
        capital, lang, cont = COUNTRIES[ent]
        s = {"capital": "The capital of %s is %s." % (ent, capital),
             "language": "People in %s speak %s." % (ent, lang),
             "continent": "The continent of %s is %s." % (ent, cont),
             "capital_of": "%s is the capital of %s." % (capital, ent)}[attr]
        return finish(mode, s), None
    if table == "animal":
        legs, sound = ANIMALS[ent]
        if attr == "legs":
            return finish(mode, "%s has %s legs." % (cap(art(ent)), num(mode, legs))), legs
        return finish(mode, "%s says %s." % (cap(art(ent)), sound)), None
    color = COLORS[ent]
    return finish(mode, "The color of %s is %s." % (ent, color)), None


def fact_question(rng, table, ent, attr):
    if table == "country":
        capital = COUNTRIES[ent][0]
        qs = {"capital": ["What is the capital of {e}?", "Which city is the capital of {e}?", "Name the capital of {e}.",
                          "What's the capital city of {e}?"],
              "language": ["What language is spoken in {e}?", "What language do people speak in {e}?",
                           "Which language do they speak in {e}?"],
              "continent": ["On which continent is {e}?", "Which continent is {e} in?", "Where is {e}?"],
              "capital_of": ["Which country has the capital {c}?", "{c} is the capital of which country?",
                             "Of which country is {c} the capital?"]}[attr]
        return rng.choice(qs).format(e=ent, c=capital)
    if table == "animal":
        qs = {"legs": ["How many legs does {a} have?", "How many legs has {a}?", "Count the legs of {a}."],
              "sound": ["What sound does {a} make?", "What does {a} say?", "Which sound does {a} make?"]}[attr]
        return rng.choice(qs).format(a=art(ent))
    return rng.choice(["What color is {t}?", "What is the color of {t}?", "Which color is {t}?"]).format(t=ent)


def t_fact(rng, mode, table=None, ent=None, attr=None):
    if table is None:
        table = rng.choice(["country", "country", "country", "animal", "animal", "color"])
    if table == "country":
        ent = ent or rng.choice(sorted(COUNTRIES))
        attr = attr or rng.choice(["capital", "capital", "language", "continent"])
    elif table == "animal":
        ent = ent or rng.choice(sorted(ANIMALS))
        if attr is None:
            attr = "legs" if ANIMALS[ent][1] is None or rng.random() < 0.5 else "sound"
    else:
        ent = ent or rng.choice(sorted(COLORS))
        attr = "color"
    q = fact_question(rng, table, ent, attr)
    ans, n = fact_answer(mode, table, ent, attr)
    state = ("num", n) if n is not None else ("fact", table, ent, attr)
    return Turn("facts", q, ans, key=None, state=state)


# ----------------------------------------------------------------------------------------------
# follow-ups
# ----------------------------------------------------------------------------------------------
def f_numeric(rng, mode, x):
    ops = []
    if x + 1 <= MAX_NUM:
        ops.append("+")
    if x >= 1:
        ops.append("-")
    if x <= 99:
        ops.append("*")
    op = rng.choice(ops)
    if op == "+" and x + 40 <= MAX_NUM and rng.random() < 0.25:    # two steps: thinks
        m, n = rng.randint(1, 20), rng.randint(1, 20)
        q = rng.choice(["Add {m} and {n} to that.", "Now add {m} and {n}."]).format(m=m, n=n)
        y, c = x + m, x + m + n
        ans = "%d + %d + %d = %s." % (x, m, n, num(mode, c))
        return Turn("arith", q, finish(mode, ans), key=("fup2", x, m, n), state=("num", c), followup=True,
                    reasoning="%d + %d = %d.\n%d + %d = %d." % (x, m, y, y, n, c))
    if op == "+":
        n = rng.randint(1, min(20, MAX_NUM - x))
        q = rng.choice(["Add {n} to that.", "Now add {n}.", "Add {n} to the result."]).format(n=n)
        c = x + n
    elif op == "-":
        n = rng.randint(1, min(20, x))
        q = rng.choice(["Subtract {n} from that.", "Now subtract {n}.", "Subtract {n} from the result."]).format(n=n)
        c = x - n
    else:
        n = rng.choice([2, 10])
        if n == 2 and rng.random() < 0.5:
            q = rng.choice(["Double that.", "Double it."])
        else:
            q = rng.choice(["Multiply that by {n}.", "Now multiply by {n}."]).format(n=n)
        c = x * n
    ans = "%d %s %d = %s." % (x, op, n, num(mode, c))
    return Turn("arith", q, finish(mode, ans), key=("fup", x, op, n), state=("num", c), followup=True)


def f_words(rng, mode, ws):
    r = rng.random()
    if r < 0.5:
        q = rng.choice(["Now reverse them.", "Reverse that."])
        out = list(reversed(ws))
        return Turn("words", q, finish(mode, words_answer(out)), state=("words", out), followup=True)
    q = rng.choice(["How many words is that?", "Count them."])
    n = len(ws)
    ans = "There %s %s word%s." % ("is" if n == 1 else "are", num(mode, n), "" if n == 1 else "s")
    return Turn("count", q, finish(mode, ans), state=("num", n), followup=True)


def f_fact(rng, mode, table, ent, attr):
    if table == "country":
        if rng.random() < 0.5 and attr != "capital_of":
            other = rng.choice([c for c in sorted(COUNTRIES) if c != ent])
            q = rng.choice(["And of {o}?", "What about {o}?", "And {o}?", "Same question for {o}."]).format(o=other)
            ent2, attr2 = other, attr
        else:
            attr2 = rng.choice([a for a in ("capital", "language", "continent") if a != attr])
            q = {"capital": ["And what is its capital?", "What is the capital there?"],
                 "language": ["What language do they speak there?", "Which language is spoken there?"],
                 "continent": ["On which continent is it?", "Which continent is that in?"]}[attr2]
            q = rng.choice(q)
            ent2 = ent
        ans, _ = fact_answer(mode, table, ent2, attr2)
        return Turn("facts", q, ans, state=("fact", table, ent2, attr2), followup=True)
    if table == "animal":
        other = rng.choice([a for a in sorted(ANIMALS) if a != ent and (attr == "legs" or ANIMALS[a][1])])
        q = rng.choice(["And {o}?", "What about {o}?", "And for {o}?"]).format(o=art(other))
        ans, n = fact_answer(mode, table, other, attr)
        st = ("num", n) if n is not None else ("fact", table, other, attr)
        return Turn("facts", q, ans, state=st, followup=True)
    other = rng.choice([c for c in sorted(COLORS) if c != ent])
    q = rng.choice(["And {o}?", "What about {o}?"]).format(o=other)
    ans, _ = fact_answer(mode, table, other, "color")
    return Turn("facts", q, ans, state=("fact", table, other, "color"), followup=True)


def followup(rng, mode, state):
    if state is None:
        return None
    if state[0] == "num":
        return f_numeric(rng, mode, state[1]) if state[1] <= MAX_NUM else None
    if state[0] == "words":
        return f_words(rng, mode, state[1])
    return f_fact(rng, mode, *state[1:])


# ----------------------------------------------------------------------------------------------
# conversations
# ----------------------------------------------------------------------------------------------
TASKS = [(t_arith, 32), (t_count_words, 5), (t_count_from, 10), (t_reverse, 24), (t_convert, 4), (t_fact, 16),
         (t_sum3, 24), (t_steps, 8), (t_count_long, 12)]
FRENCH_OK = {t_arith, t_count_words, t_convert, t_sum3, t_steps, t_count_long}
THINKING_ON = 0.6     # share of training conversations with thinking on (the template's default)


def pick_task(rng, mode):
    tasks = [(f, w) for f, w in TASKS if mode != "french" or f in FRENCH_OK]
    tot = sum(w for _, w in tasks)
    r = rng.random() * tot
    for f, w in tasks:
        r -= w
        if r < 0:
            return f
    return tasks[-1][0]


def pick_mode(rng):
    r = rng.random()
    if r < 0.45:
        return None
    if r < 0.63:
        return "neutral"
    if r < 0.82:
        return "upper"
    return "french"


def system_text(rng, mode):
    return {None: None, "neutral": rng.choice(SYS_NEUTRAL), "upper": rng.choice(SYS_UPPER),
            "french": rng.choice(SYS_FRENCH)}[mode]


def conversation_key(messages):
    """A question in its context (system prompt, earlier turns), whatever the thinking mode: what the held-out
    exclusion compares."""
    return json.dumps([[m["role"], m["content"]] for m in messages], ensure_ascii=False)


def gen_conversation(rng, n_turns=None, mode="random", first=None):
    """-> (messages, turns). mode: None | 'neutral' | 'upper' | 'french' | 'random'."""
    if mode == "random":
        mode = pick_mode(rng)
    if n_turns is None:
        r = rng.random()
        n_turns = 1 if r < 0.4 else 2 if r < 0.75 else 3 if r < 0.93 else 4
    msgs = []
    st = system_text(rng, mode)
    if st:
        msgs.append({"role": "system", "content": st})
    turns = []
    state = None
    for i in range(n_turns):
        t = None
        if i == 0 and first is not None:
            t = first(rng, mode)
        elif i > 0 and rng.random() < 0.75:
            t = followup(rng, mode, state)
        if t is None:
            t = pick_task(rng, mode)(rng, mode)
        t.prompt = conversation_key(msgs + [{"role": "user", "content": t.user}])
        msgs.append({"role": "user", "content": t.user})
        msgs.append({"role": "assistant", "content": t.answer})
        turns.append(t)
        state = t.state
    return msgs, turns, mode


# ----------------------------------------------------------------------------------------------
# held-out set
# ----------------------------------------------------------------------------------------------
HELDOUT_SEED = 20240607
TRAIN_SEED = 1234
# e2e examples that must stay in the training distribution (never held out)
RESERVED_KEYS = {("arith", "+", 17, 25), ("arith", "+", 25, 17), ("fup", 42, "+", 5), ("sum3", 12, 7, 30),
                 ("fup", 49, "+", 5)}

# (category, count, generator) ; category is the reporting "kind"
def _ho_plan():
    def single(task, mode=None):
        def g(rng):
            msgs, turns, m = gen_conversation(rng, n_turns=1, mode=mode, first=task)
            return msgs, turns, m
        return g

    def multi(first, mode="random"):
        def g(rng):
            for _ in range(100):
                msgs, turns, m = gen_conversation(rng, n_turns=rng.randint(2, 3), mode=mode, first=first)
                if turns[-1].followup:
                    return msgs, turns, m
            raise RuntimeError("multi")
        return g

    def anytask(mode):
        def g(rng):
            msgs, turns, m = gen_conversation(rng, n_turns=1, mode=mode)
            return msgs, turns, m
        return g

    return [
        ("arith", 50, single(t_arith)),
        ("count", 40, lambda rng: single(rng.choice([t_count_words, t_count_from]))(rng)),
        ("words", 40, single(t_reverse)),
        ("convert", 30, single(t_convert)),
        ("facts", 40, single(t_fact)),
        ("system_upper", 30, anytask("upper")),
        ("system_french", 30, anytask("french")),
        ("multiturn", 60, lambda rng: multi(rng.choice([t_arith, t_arith, t_convert, t_reverse, t_fact,
                                                         t_count_words, t_sum3]))(rng)),
        ("sum3", 40, single(t_sum3)),
        ("steps", 30, single(t_steps)),
        ("long", 30, single(t_count_long)),
    ]


def heldout_items(scale=1.0):
    rng = random.Random(HELDOUT_SEED)
    items = []
    seen = set()
    for cat, n, g in _ho_plan():
        n = max(1, int(round(n * scale)))
        k = 0
        while k < n:
            msgs, turns, mode = g(rng)
            t = turns[-1]
            if t.key in RESERVED_KEYS or t.prompt in seen:
                continue
            seen.add(t.prompt)
            items.append({"kind": cat, "messages": msgs[:-1], "expect": t.answer, "reasoning": t.reasoning,
                          "check": "exact", "key": list(t.key) if t.key else None, "prompt": t.prompt})
            k += 1
    return items


def heldout_exclusions(items):
    keys, prompts = set(), set()
    for it in items:
        prompts.add(it["prompt"])
        if it["key"]:
            keys.add(tuple(it["key"]))
    return keys, prompts


CUT_SHARE = {"long": 0.3}    # share of thinking-on replies whose reasoning is cut short (thinking budget)
CUT_SHARE_OTHER = 0.1        # ... for the other tasks that think


class Example:
    """One assistant reply to train on: the conversation up to the user message it answers, the answer, the
    reasoning written first (thinking on; "" = answer directly), and how a thinking budget cuts the reasoning
    (None, or (u, newline): cut after a share u of its tokens by a forced "\n</think>" or "</think>")."""

    def __init__(self, messages, answer, reasoning, thinking, cut=None, kind=None):
        self.messages, self.answer, self.reasoning, self.thinking, self.cut = messages, answer, reasoning, thinking, cut
        self.kind = kind


def last_turn_example(rng, msgs, turns, thinking):
    """The last assistant turn of a conversation as an Example; the earlier answers are in its prompt, as the
    template renders history (without their reasoning), and are trained on there (history_loss)."""
    t = turns[-1]
    reasoning = t.reasoning if thinking else ""
    cut = None
    if reasoning and rng.random() < CUT_SHARE.get(t.kind, CUT_SHARE_OTHER):
        cut = (rng.random(), rng.random() < 0.5)
    return Example(msgs[:-1], t.answer, reasoning, thinking, cut, t.kind)


class TrainStream:
    """Infinite deterministic stream of training Examples (one a conversation: its last reply), never containing a
    held-out question. Thinking is on for a share THINKING_ON of the conversations, off for the others."""

    def __init__(self, seed=TRAIN_SEED, heldout=None):
        self.rng = random.Random(seed)
        self.keys, self.prompts = heldout_exclusions(heldout if heldout is not None else heldout_items())
        self.rejected = 0

    def __iter__(self):
        return self

    def conversation(self):
        while True:
            msgs, turns, mode = gen_conversation(self.rng)
            if any((t.key is not None and t.key in self.keys) or t.prompt in self.prompts for t in turns):
                self.rejected += 1
                continue
            return msgs, turns, self.rng.random() < THINKING_ON

    def __next__(self):
        msgs, turns, thinking = self.conversation()
        return last_turn_example(self.rng, msgs, turns, thinking)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heldout", metavar="FILE", help="write the held-out set as JSON lines")
    ap.add_argument("--sample", type=int, default=0, help="print N training conversations")
    a = ap.parse_args()
    if a.heldout:
        items = heldout_items()
        with open(a.heldout, "w") as f:
            for it in items:
                f.write(json.dumps({"kind": it["kind"], "messages": it["messages"], "expect": it["expect"],
                                    "reasoning": it["reasoning"], "check": it["check"]}, ensure_ascii=False) + "\n")
        kinds = {}
        for it in items:
            kinds[it["kind"]] = kinds.get(it["kind"], 0) + 1
        print("wrote %d items to %s: %s" % (len(items), a.heldout, kinds), file=sys.stderr)
    if a.sample:
        import chat_format
        st = TrainStream()
        for _ in range(a.sample):
            e = next(st)
            print(chat_format.render(e.messages, True, e.thinking) + "\033[1m" +
                  chat_format.reply_text(e.answer, e.reasoning, e.thinking) + "\033[0m" +
                  ("   [reasoning cut: %.2f %s]" % e.cut if e.cut else "") + "\n")


if __name__ == "__main__":
    main()
