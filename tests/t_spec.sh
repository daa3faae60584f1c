#!/bin/sh
# Speculative decoding from the command line (issue "Speculative decoding"): `chatfs run
# --draft N` gives llama.cpp's greedy tokens for every N on the MTP fixture (and the default,
# which speculates, too); sampling with a seed is reproducible; on the default model (a
# trained head) `ask` and `run --chat` give plain decoding's replies with most drafts accepted; `ask --stats` reports the
# drafted and accepted tokens and passes, and a follow-up turn restores its checkpoint and
# speculates to the plain reply; under a grammar or a JSON schema `run --draft` gives the
# plain constrained tokens; --draft on a model without the head is one clear error.
set -u
cd "$(dirname "$0")/.."
CHATFS=${CHATFS:-./chatfs}
M=tests/fixtures/qwen35-tiny-mtp-f32.gguf
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
check() { # check NAME CONDITION...
    what=$1; shift
    if "$@"; then :; else echo "FAIL t_spec: $what"; fail=$((fail + 1)); fi
}

want="generated: 260 248 27 177 54 50 44 261 440 112 392 471 328 478 387 316"
for d in "" "--draft 0" "--draft 1" "--draft 2" "--draft 3" "--draft 4" "--draft 8"; do
    g=$($CHATFS run -m $M -p "Hello world! The quick brown fox" --ids $d | sed -n 2p)
    check "run $d: llama.cpp's greedy tokens" [ "$g" = "$want" ]
done
a=$($CHATFS run -m $M -p @tests/fixtures/long.txt -n 64 --ids --draft 0 | sed -n 2p)
b=$($CHATFS run -m $M -p @tests/fixtures/long.txt -n 64 --ids --draft 3 | sed -n 2p)
check "long prompt, 64 tokens: speculative == plain" [ "$a" = "$b" ]
s1=$($CHATFS run -m $M -p "Hello" -n 24 --temp 0.8 --seed 7 --ids --draft 3 | sed -n 2p)
s2=$($CHATFS run -m $M -p "Hello" -n 24 --temp 0.8 --seed 7 --ids --draft 3 | sed -n 2p)
check "sampling: the same seed, the same tokens" [ "$s1" = "$s2" ]

# ask: the same replies with and without speculation, over two turns with checkpoints
for d in 0 3; do
    $CHATFS ask -m $M --db "$T/$d.db" --conversation c -n 32 --stats --draft $d "Hello world! The quick brown fox" \
        > "$T/r1.$d" 2> "$T/s1.$d"
    $CHATFS ask -m $M --db "$T/$d.db" --conversation c -n 32 --stats --draft $d "And then?" > "$T/r2.$d" 2> "$T/s2.$d"
done
check "ask turn 1: the same reply" cmp -s "$T/r1.0" "$T/r1.3"
check "ask turn 2: the same reply" cmp -s "$T/r2.0" "$T/r2.3"
check "ask --stats: drafted and accepted" python3 - "$T/s1.3" "$T/s2.3" "$T/s1.0" <<'PY'
import json, sys
a, b, plain = (json.loads(open(p).read()) for p in sys.argv[1:])
ok = a["draft"] == 3 and a["drafted_tokens"] > 0 and a["accepted_tokens"] > 0
ok &= a["decode_passes"] + a["accepted_tokens"] == a["generated_tokens"] - 1
ok &= b["reused_tokens"] > 0 and b["source"] == "disk" and b["accepted_tokens"] > 0
ok &= plain["draft"] == 0 and plain["drafted_tokens"] == 0 and plain["decode_passes"] == plain["generated_tokens"] - 1
sys.exit(0 if ok else 1)
PY

# the default model's head was trained with its trunk: a real acceptance rate, the same replies
D=models/chatfs-default.gguf
for d in 0 1 3; do
    $CHATFS ask -m $D --db "$T/d$d.db" -n 96 --stats --draft $d "Think step by step: What is 205 + 13?" \
        > "$T/dr.$d" 2> "$T/ds.$d"
    $CHATFS run -m $D -p "What is 7 + 26 + 13?" --chat -n 40 --ids --draft $d | sed -n 2p > "$T/di.$d"
done
check "default model ask: --draft 1 and 3 reply as plain" sh -c "cmp -s $T/dr.0 $T/dr.1 && cmp -s $T/dr.0 $T/dr.3"
check "default model run --chat: --draft 1 and 3 give plain's tokens" sh -c "cmp -s $T/di.0 $T/di.1 && cmp -s $T/di.0 $T/di.3"
check "default model ask --stats: most drafts accepted" python3 - "$T/ds.3" "$T/ds.0" <<'PY'
import json, sys
a, plain = (json.loads(open(p).read()) for p in sys.argv[1:])
ok = a["draft"] == 3 and a["drafted_tokens"] >= 10 and a["accepted_tokens"] >= 0.8 * a["drafted_tokens"]
ok &= a["generated_tokens"] == plain["generated_tokens"] and a["decode_passes"] * 2 < plain["decode_passes"]
print("  default model, ask --draft 3: %d of %d drafts accepted, %d passes for %d tokens (plain %d)" % (
    a["accepted_tokens"], a["drafted_tokens"], a["decode_passes"], a["generated_tokens"], plain["decode_passes"]))
sys.exit(0 if ok else 1)
PY

# under a grammar and a JSON schema: the drafts are masked too, the tokens plain decoding's
printf 'root ::= "The answer is " [0-9]+ "."\n' > "$T/g.gbnf"
printf '%s\n' '{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "array",
  "items": {"type": "string"}, "maxItems": 3}}, "required": ["a", "b"]}' > "$T/s.json"
for d in 0 3; do
    $CHATFS run -m $D -p "What is 7 + 26 + 13?" --chat -n 40 --ids --draft $d --grammar-file "$T/g.gbnf" --stats \
        2> "$T/gs.$d" | sed -n 2p > "$T/gi.$d"
    $CHATFS run -m $D -p "List three words." --chat -n 96 --ids --draft $d --json-schema "$T/s.json" --stats \
        2> "$T/js.$d" | sed -n 2p > "$T/ji.$d"
done
check "run --grammar-file: --draft 3 gives plain's tokens" cmp -s "$T/gi.0" "$T/gi.3"
check "run --json-schema: --draft 3 gives plain's tokens" cmp -s "$T/ji.0" "$T/ji.3"
check "run under a grammar: drafts accepted" python3 - "$T/gs.3" "$T/js.3" <<'PY'
import json, sys
for p in sys.argv[1:]:
    s = json.loads(open(p).read().strip().splitlines()[-1])
    if not (s["drafted_tokens"] > 0 and s["accepted_tokens"] > 0): sys.exit(1)
PY

# synth --mtp writes the head; bench --draft times the verify steps and a draft row
$CHATFS synth --shape qwen3.5-small --type q8_0 --out "$T/s.gguf" --mtp -q -t 2
check "synth --mtp: a head" sh -c "$CHATFS info $T/s.gguf | grep -q '^MTP head:      yes'"
out=$($CHATFS bench -m "$T/s.gguf" -t 2 --pp 16 --tg 8 --reps 1 --draft 2 --draft-vocab 300 --no-bandwidth)
check "bench --draft: two lines" [ "$(printf '%s\n' "$out" | wc -l)" -eq 2 ]
check "bench --draft: the speculative line" python3 - "$(printf '%s\n' "$out" | sed -n 2p)" <<'PY'
import json, sys
b = json.loads(sys.argv[1])
ok = b["draft"] == 2 and b["draft_vocab"] == 300 and len(b["verify_ms"]) == 3 and len(b["speedup_at_0.79"]) == 3
ok &= all(t > 0 for t in b["verify_ms"]) and b["draft_row_ms"] > 0 and b["plain_ms"] > 0 and b["spec_tps"] > 0
ok &= 0 <= b["acceptance"] <= 1 and 0 < b["passes_per_token"] <= 1
sys.exit(0 if ok else 1)
PY
out=$($CHATFS bench -m "$T/s.gguf" -t 2 --pp 16 --tg 8 --reps 1 --draft 0 --no-bandwidth)
check "bench --draft 0: one line" [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ]

# errors: one line starting with "chatfs: ", exit 1
err_case() { # NAME EXPECTED-SUBSTRING CMD...
    case_name=$1 want=$2; shift 2
    "$@" > "$T/out" 2> "$T/err"
    rc=$?
    check "$case_name exits 1" [ $rc -eq 1 ]
    check "$case_name: one line" [ "$(wc -l < "$T/err")" -eq 1 ]
    check "$case_name: message" grep -q -- "^chatfs: .*$want" "$T/err"
}
err_case "--draft without a head" "needs a model with an MTP head" $CHATFS run -m tests/fixtures/qwen35-tiny-f32.gguf -p hi --draft 2
err_case "--draft 9" "--draft needs an integer between 0 and 8" $CHATFS run -m $M -p hi --draft 9
err_case "ask --draft without a head" "MTP head" $CHATFS ask -m tests/fixtures/qwen35-tiny-f32.gguf --db "$T/x.db" --draft 1 hi
err_case "synth --mtp on another shape" "--mtp is for Qwen3.5 shapes" $CHATFS synth --shape mamba-130m --type f32 --out "$T/x.gguf" --mtp
err_case "bench --draft without a head" "needs a model with an MTP head" $CHATFS bench -m tests/fixtures/qwen35-tiny-f32.gguf --pp 4 --tg 4 --reps 1 --draft 2 --no-bandwidth
check "info names the head" sh -c "$CHATFS info $M | grep -q '^MTP head:      yes'"
check "info --json mtp_head" sh -c "$CHATFS info $M --json | grep -q '\"mtp_head\":true'"

[ $fail -eq 0 ] && echo "t_spec.sh                    ok" || echo "t_spec.sh                    FAIL ($fail)"
[ $fail -eq 0 ]
