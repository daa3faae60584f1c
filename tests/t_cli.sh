#!/bin/sh
# The command line as scripts use it: `chatfs run` output forms, --stop, prompt files, logits
# dumps, and one clear error line (exit 1) for bad input.
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

# --dump-logits writes n_vocab float32 values equal to llama.cpp's
$CHATFS run -m $M -p "Hello world! The quick brown fox" -n 1 --dump-logits "$T/l.f32" > /dev/null
check "--dump-logits size" [ "$(stat -c %s "$T/l.f32")" -eq 2048 ]
check "--dump-logits values" python3 - "$T/l.f32" tests/fixtures/qwen35-tiny-f32.last.f32 <<'PY'
import struct, sys
a = struct.unpack('<512f', open(sys.argv[1], 'rb').read())
b = struct.unpack('<512f', open(sys.argv[2], 'rb').read())
sys.exit(0 if max(abs(x - y) for x, y in zip(a, b)) <= 1e-4 else 1)
PY

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
check "1T is a size" $CHATFS ask -m $M --db "$T/s.db" -t 1 -n 1 --disk-budget 1T --ram-budget 0 hi > /dev/null

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

[ $fail -eq 0 ] && echo "t_cli.sh                     ok" || echo "t_cli.sh                     FAIL ($fail)"
[ $fail -eq 0 ]
