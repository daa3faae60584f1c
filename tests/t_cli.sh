#!/bin/sh
# The command line as scripts use it: `chatfs run` output forms, --stop, prompt files, logits
# dumps, one clear error line (exit 1) for bad input, and `chatfs ask` for scripts (stdin,
# --json, --temp/--seed/--thinking, exit statuses, the mount's text rules, one store).
set -u
cd "$(dirname "$0")/.."
CHATFS=${CHATFS:-./chatfs}
M=tests/fixtures/qwen35-tiny-f32.gguf
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
check() { # check NAME CONDITION...
    what=$1; shift
    if "$@"; then :; else echo "FAIL t_cli: $what"; fail=$((fail + 1)); fi
}

# --ids: exactly two lines, the oracle's prompt and greedy tokens
out=$($CHATFS run -m $M -p "Hello world! The quick brown fox" --ids)
check "--ids prints two lines" [ "$(printf '%s\n' "$out" | wc -l)" -eq 2 ]
check "--ids prompt tokens" [ "$(printf '%s\n' "$out" | sed -n 1p)" = "prompt: 390 481 33 373 342 413 280 428 110 462" ]
check "--ids greedy tokens" [ "$(printf '%s\n' "$out" | sed -n 2p)" = "generated: 271 390 168 21 344 25 324 69 419 375 295 483 335 257 471 471" ]

# without --stop the run goes on past end-of-generation tokens (as the reference does);
# with it, it ends at the first one: mamba2's greedy continuation (the oracle's) has
# <|endoftext|> (509) 4th and 13th
M2=tests/fixtures/mamba2-tiny-f32.gguf
g=$($CHATFS run -m $M2 -p "Hello world! The quick brown fox" --ids | sed -n 2p)
check "no --stop: past end-of-generation" [ "$g" = "generated: 388 375 163 509 28 28 60 117 120 420 328 328 509 425 200 200" ]
g=$($CHATFS run -m $M2 -p "Hello world! The quick brown fox" --ids --stop | sed -n 2p)
check "--stop ends at end-of-generation" [ "$g" = "generated: 388 375 163 509" ]

# -n and -p @FILE give the same as the literal text
printf 'Hello world! The quick brown fox' > "$T/p.txt"
a=$($CHATFS run -m $M -p @"$T/p.txt" -n 5 --ids | sed -n 2p)
check "-p @FILE and -n" [ "$a" = "generated: 271 390 168 21 344" ]

# --dump-logits writes n_vocab float32 values equal to llama.cpp's at the same cache type:
# F32 (-ctk/-ctv f32), and the default F16; each is far from the other's
$CHATFS run -m $M -p "Hello world! The quick brown fox" -n 1 -ctk f32 -ctv f32 --dump-logits "$T/l.f32" > /dev/null
$CHATFS run -m $M -p "Hello world! The quick brown fox" -n 1 --dump-logits "$T/l16.f32" > /dev/null
check "--dump-logits size" [ "$(stat -c %s "$T/l.f32")" -eq 2048 ]
logits_within() { # OURS REFERENCE TOLERANCE [FAR]: within TOLERANCE, and (FAR given) not within FAR of the other
    python3 - "$@" <<'PY'
import struct, sys
a = struct.unpack('<512f', open(sys.argv[1], 'rb').read())
b = struct.unpack('<512f', open(sys.argv[2], 'rb').read())
sys.exit(0 if max(abs(x - y) for x, y in zip(a, b)) <= float(sys.argv[3]) else 1)
PY
}
check "--dump-logits values (f32 cache)" logits_within "$T/l.f32" tests/fixtures/qwen35-tiny-f32.last.f32 1e-4
check "--dump-logits values (f16 cache)" logits_within "$T/l16.f32" tests/fixtures/kv/qwen35-tiny-f32.f16.last.f32 5e-4
logits_apart() { ! logits_within "$@"; }
check "the f16 cache changes the logits" logits_apart "$T/l16.f32" tests/fixtures/qwen35-tiny-f32.last.f32 1e-4

# --chat renders the template: more prompt tokens, starting with <|im_start|> (510)
c=$($CHATFS run -m $M -p "hi" --chat -n 1 --ids | sed -n 1p)
check "--chat uses the template" sh -c "echo '$c' | grep -q '^prompt: 510 '"

# the same seed gives the same sampled text; temperature > 0 is not greedy forever
s1=$($CHATFS run -m $M -p "Hello" -n 20 --temp 0.8 --seed 7 --ids | sed -n 2p)
s2=$($CHATFS run -m $M -p "Hello" -n 20 --temp 0.8 --seed 7 --ids | sed -n 2p)
check "same seed, same tokens" [ "$s1" = "$s2" ]

# errors: one line starting with "chatfs: ", exit 1
err_case() { # NAME EXPECTED-SUBSTRING CMD...
    case_name=$1 want=$2; shift 2
    "$@" > "$T/out" 2> "$T/err"
    rc=$?
    check "$case_name exits 1" [ $rc -eq 1 ]
    check "$case_name: one line" [ "$(wc -l < "$T/err")" -eq 1 ]
    check "$case_name: message" grep -q -- "^chatfs: .*$want" "$T/err"
}
err_case "run: an unknown cache type" "the known ones are f32, f16, bf16, q8_0, q4_0" $CHATFS run -m $M -p hi -ctv f8
err_case "run: a q4_0 cache over heads of 16" "heads have 16" $CHATFS run -m tests/fixtures/llama-tiny-f32.gguf -p hi -ctk q4_0
err_case "mount: -ctk with --engine" "-ctk and -ctv are the local engine's" $CHATFS mount "$T" --engine http://127.0.0.1:9 -ctk q8_0
head -c 1000 $M > "$T/cut.gguf"
err_case "truncated model" "cut.gguf: file is truncated" $CHATFS info "$T/cut.gguf"
err_case "missing model" "No such file" $CHATFS run -m "$T/none.gguf" -p hi
err_case "bad -n" "-n needs an integer" $CHATFS run -m $M -p hi -n lots
err_case "unknown option" "unknown option" $CHATFS run -m $M -p hi --frobnicate
err_case "missing prompt file" "nofile" $CHATFS run -m $M -p @"$T/nofile"
err_case "unknown command" "unknown command" $CHATFS frobnicate

# sizes are digits with K, M, G or T, nothing else (strtoull took -1 as 1.8e19)
err_case "a negative size" "byte count" $CHATFS ask --ram-budget -1 hi
err_case "an unknown unit" "byte count" $CHATFS ask --disk-budget 5Q hi
err_case "a size beyond 64 bits" "byte count" $CHATFS ask --disk-budget 99999999T hi
$CHATFS ask -m $M --db "$T/s.db" -t 1 -n 1 --disk-budget 1T --ram-budget 0 hi > /dev/null
check "1T is a size (-n 1 cuts the reply: exit 2)" [ $? -eq 2 ]

# every subcommand answers --help (on stdout, exit 0); --version
for c in mount ask run info bench synth; do
    $CHATFS $c --help > "$T/help"
    check "$c --help exits 0" [ $? -eq 0 ]
    check "$c --help" grep -q "^usage: chatfs $c" "$T/help"
done
check "--version" sh -c "$CHATFS --version | grep -q '^chatfs [0-9]'"

# the context: chatfs info says what a conversation gets; -c sets it (run and ask)
check "info states the default context" sh -c "$CHATFS info $M | grep -q 'a conversation gets [0-9]* by default'"
err_case "-c: a prompt over the context" "context of 16" $CHATFS run -m $M -c 16 -p "Hello world! The quick brown fox jumps over the lazy dog again and again"
err_case "ask -c" "the context holds 16" $CHATFS ask -m $M --db "$T/c.db" -c 16 "Hello world! The quick brown fox jumps over the lazy dog"

# ask and run default to the bundled model, as mount does
# (run prints the raw reply: with thinking on, the empty reasoning's "\n</think>\n\n" comes first)
check "run without -m" sh -c "$CHATFS run -p 'What is 2 + 2?' --chat --stop -n 16 | grep -q 4"
check "ask without -m" sh -c "$CHATFS ask --db '$T/d.db' -t 1 'What is 17 + 25?' | grep -q 42"

# ask for scripts (a mount beside it: tests/ask_e2e.py). Exit 2 when -n cut the reply,
# 3 when the context did, 0 when the model ended its turn; --json says which.
j() { python3 -c 'import json, sys; o = json.load(open(sys.argv[1])); print(o[sys.argv[2]])' "$@"; }
$CHATFS ask -m $M --db "$T/x.db" -t 1 -n 3 --json hi > "$T/n.json"
check "ask -n 3 cut the reply: exit 2" [ $? -eq 2 ]
check "ask -n 3: finish_reason max_tokens" [ "$(j "$T/n.json" finish_reason)" = max_tokens ]
check "ask -n 3: 3 generated" [ "$(j "$T/n.json" generated_tokens)" = 3 ]
$CHATFS ask -m $M --db "$T/x.db" -t 1 -c 48 --json "Hello world, quick brown fox" > "$T/c.json"
check "ask -c 48: the context cut the reply: exit 3" [ $? -eq 3 ]
check "ask -c 48: finish_reason context_full" [ "$(j "$T/c.json" finish_reason)" = context_full ]
check "ask --json: the keys" python3 - "$T/c.json" <<'PY'
import json, sys
o = json.load(open(sys.argv[1]))
keys = {"answer", "reasoning", "finish_reason", "prompt_tokens", "reused_tokens", "generated_tokens", "reasoning_tokens"}
sys.exit(0 if keys <= set(o) and o["prompt_tokens"] > 0 and o["answer"] else 1)
PY
# the default model: - reads the message from stdin; --thinking on/off; a finished reply exits 0
echo 'What is 12 + 7 + 30?' | $CHATFS ask --db "$T/t.db" -t 1 --json --thinking on - > "$T/on.json"
check "ask - (stdin), thinking on: exit 0" [ $? -eq 0 ]
check "ask -: the answer" sh -c "grep -q 49 '$T/on.json'"
check "ask --thinking on: end_of_turn" [ "$(j "$T/on.json" finish_reason)" = end_of_turn ]
check "ask --thinking on: reasoning" [ -n "$(j "$T/on.json" reasoning)" ] && [ "$(j "$T/on.json" reasoning_tokens)" -gt 0 ]
$CHATFS ask --db "$T/t.db" -t 1 --json --thinking off 'What is 12 + 7 + 30?' > "$T/off.json"
check "ask --thinking off: no reasoning" [ -z "$(j "$T/off.json" reasoning)" ] && [ "$(j "$T/off.json" reasoning_tokens)" = 0 ]
# --temp and --seed: the same seed the same reply, greedy by default
a=$($CHATFS ask -m $M --db "$T/s.db" -t 1 -n 16 --temp 1 --seed 1 Hello)
b=$($CHATFS ask -m $M --db "$T/s.db" -t 1 -n 16 --temp 1 --seed 2 Hello)
c=$($CHATFS ask -m $M --db "$T/s.db" -t 1 -n 16 --temp 1 --seed 1 Hello)
g=$($CHATFS ask -m $M --db "$T/s.db" -t 1 -n 16 Hello)
check "ask --seed: the same seed, the same reply" [ "$a" = "$c" ]
check "ask --temp 1: other seeds, other replies" [ "$a" != "$b" ]
check "ask: greedy without --temp" [ "$g" = "$($CHATFS ask -m $M --db "$T/s.db" -t 1 -n 16 --temp 0 --seed 9 Hello)" ]
err_case "ask --temp junk" "--temp needs a number" $CHATFS ask -m $M --db "$T/s.db" --temp hot hi
err_case "ask --thinking junk" "--thinking needs on or off" $CHATFS ask -m $M --db "$T/s.db" --thinking maybe hi
# what the mount refuses, ask refuses the same way: exit 1, one line, nothing stored
err_case "ask: an empty message" "the message is empty" $CHATFS ask -m $M --db "$T/e.db" --conversation e ""
printf ' \n' > "$T/blank"
err_case "ask -: a blank message" "the message is empty" sh -c "$CHATFS ask -m $M --db '$T/e.db' --conversation e - < '$T/blank'"
err_case "ask: not UTF-8" "message: not UTF-8 at byte 1 (Invalid argument)" $CHATFS ask -m $M --db "$T/e.db" --conversation e "$(printf 'a\377b')"
printf 'a\0b' > "$T/nul"
err_case "ask @FILE: a NUL" "message: a NUL byte at byte 1" $CHATFS ask -m $M --db "$T/e.db" --conversation e @"$T/nul"
err_case "ask: a name with /" "not a conversation's name" $CHATFS ask -m $M --db "$T/e.db" --conversation a/b hi
err_case "ask: a message over the context" "the context holds 16" $CHATFS ask -m $M --db "$T/e.db" -c 16 --conversation e "Hello world! The quick brown fox jumps over the lazy dog"
# a -c beyond the memory available (as the test hook sets it): refused with what fits,
# and info says the same (the tiny model's KV cache is 256 B a token in F16, 512 B in
# F32: 1,000,000 B hold 3840 or 1792)
err_case "ask: -c beyond memory" "the largest context that fits is 3840" env CHATFS_TEST_MEM_AVAILABLE=1000000 $CHATFS ask -m $M --db "$T/e.db" -c 4096 --conversation e hi
err_case "ask: -c beyond memory (f32)" "the largest context that fits is 1792" env CHATFS_TEST_MEM_AVAILABLE=1000000 $CHATFS ask -m $M --db "$T/e.db" -c 4096 -ctk f32 -ctv f32 --conversation e hi
check "info: the largest context that fits" sh -c "CHATFS_TEST_MEM_AVAILABLE=1000000 $CHATFS info $M | grep -q 'at most 3840 fits'"
check "info: the largest context per cache type" sh -c "CHATFS_TEST_MEM_AVAILABLE=1000000 $CHATFS info $M | grep -q 'f32 1792, f16 3840, bf16 3840, q8_0 4096, q4_0 4096'"
check "ask: refused messages stored nothing" [ "$(sqlite3 "$T/e.db" 'SELECT count(*) FROM conversation' 2>&1)" = 0 ]

# one store: ask's conversations are the conversation store's (the mount's), and a
# database from before keeps the turns ask stored apart (table ask_turns): moved, under
# the same name unless the mount has a conversation of that name (then "NAME (ask N)")
sqlite3 "$T/old.db" <<'SQL'
CREATE TABLE schema_versions(module TEXT PRIMARY KEY, version INTEGER NOT NULL);
INSERT INTO schema_versions VALUES('ask', 1), ('conversations', 2);
CREATE TABLE ask_turns(conversation TEXT NOT NULL, idx INTEGER NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL, PRIMARY KEY(conversation, idx));
INSERT INTO ask_turns VALUES('a', 0, 'system', 'Be brief.'), ('a', 1, 'user', 'Hello'), ('a', 2, 'assistant', 'Hi there'),
    ('m', 0, 'user', 'asked'), ('m', 1, 'assistant', 'answered');
CREATE TABLE conversation(id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL UNIQUE, system TEXT NOT NULL DEFAULT '',
    settings TEXT NOT NULL DEFAULT '{}', mtime_ns INTEGER NOT NULL DEFAULT 0);
CREATE TABLE conversation_turn(conversation INTEGER NOT NULL REFERENCES conversation(id) ON DELETE CASCADE, idx INTEGER NOT NULL,
    role TEXT NOT NULL CHECK (role IN ('user', 'assistant')), content TEXT NOT NULL, complete INTEGER NOT NULL DEFAULT 1,
    mtime_ns INTEGER NOT NULL DEFAULT 0, reasoning TEXT NOT NULL DEFAULT '', PRIMARY KEY (conversation, idx));
CREATE TABLE conversation_global(key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO conversation(name) VALUES('m');
INSERT INTO conversation_turn(conversation, idx, role, content) VALUES(1, 1, 'user', 'mounted'), (1, 2, 'assistant', 'mine');
SQL
$CHATFS ask -m $M --db "$T/old.db" -t 1 -n 2 --conversation a --json "And then?" > "$T/a.json"
check "old database: ask continues a (exit 2: -n 2)" [ $? -eq 2 ]
q() { sqlite3 "$T/old.db" "$1" | tr '\n' ' '; }
check "old database: a's turns moved and continued" [ "$(q "SELECT t.role || ':' || t.content FROM conversation_turn t JOIN conversation c ON c.id = t.conversation WHERE c.name = 'a' AND t.idx < 4 ORDER BY t.idx")" = "user:Hello assistant:Hi there user:And then? " ]
check "old database: a's reply stored, complete" [ "$(q "SELECT t.idx, t.complete FROM conversation_turn t JOIN conversation c ON c.id = t.conversation WHERE c.name = 'a' AND t.idx = 4")" = "4|1 " ]
check "old database: a's system prompt" [ "$(q "SELECT system FROM conversation WHERE name = 'a'")" = "Be brief. " ]
check "old database: the prompt had a's history" [ "$(j "$T/a.json" prompt_tokens)" -gt 20 ]
check "old database: m stays the mount's" [ "$(q "SELECT t.content FROM conversation_turn t JOIN conversation c ON c.id = t.conversation WHERE c.name = 'm' ORDER BY t.idx")" = "mounted mine " ]
check "old database: ask's m is 'm (ask 2)'" [ "$(q "SELECT t.content FROM conversation_turn t JOIN conversation c ON c.id = t.conversation WHERE c.name = 'm (ask 2)' ORDER BY t.idx")" = "asked answered " ]
check "old database: no ask_turns left" [ "$(q "SELECT count(*) FROM sqlite_master WHERE name = 'ask_turns'")" = "0 " ]
check "old database: versions" [ "$(q "SELECT module || '=' || version FROM schema_versions ORDER BY module")" = "ask=2 checkpoints=1 conversations=5 " ]

[ $fail -eq 0 ] && echo "t_cli.sh                     ok" || echo "t_cli.sh                     FAIL ($fail)"
[ $fail -eq 0 ]
