#!/bin/sh
# bench/restart_long.sh - the first reply after a remount on a long conversation against
# the same reply warm (issue "Long context": restart TTFT <= 1.5x warm). Through the
# mount, on a random-weight model of Qwen3.5-0.8B's shape (Q8_0): a first message of
# about TOKENS tokens, then a short one (warm: its prefix restored from RAM), then a
# remount on the same database and another short one (its prefix restored from the
# database). The times are usage.json's last_prompt.ttft_ms.
#
#   bench/restart_long.sh [TOKENS] [MODEL.gguf]     (default 32000, build/bench/qwen3.5-0.8b-q8_0.gguf)
set -eu
cd "$(dirname "$0")/.."
tokens=${1:-32000}
model=${2:-build/bench/qwen3.5-0.8b-q8_0.gguf}
mkdir -p build/bench
[ -x ./chatfs ] || make --no-print-directory chatfs >&2
[ -f "$model" ] || ./chatfs synth --shape qwen3.5-0.8b --type q8_0 --out "$model" >&2
T=$(mktemp -d)
mnt=$T/mnt
mkdir "$mnt"
cleanup() { fusermount3 -u "$mnt" 2>/dev/null || true; rm -rf "$T"; }
trap cleanup EXIT
ctx=$(( (tokens + 4096) / 256 * 256 ))
mount() {
    ./chatfs mount "$mnt" -m "$model" --db "$T/db" -c $ctx -t 2 --log "$T/log"
    until [ -e "$mnt/README" ]; do sleep 0.1; done
}
ask() { # ask TEXT-FILE: send it to L, wait for the reply; prints usage.json's last prompt
    cp "$1" "$mnt/L/message"
    cat "$mnt/L/reply" >/dev/null
    python3 -c 'import json, sys; p = json.load(open(sys.argv[1]))["last_prompt"]
print(p["prompt_tokens"], p["reused_tokens"], "%.1f" % p["ttft_ms"])' "$mnt/L/usage.json"
}
# prose of about TOKENS tokens: words drawn from a few, scaled by the tokens the model's
# tokenizer makes of a sample
prose() { # prose WORDS FILE
    python3 -c 'import random, sys
random.seed(1)
words = "river mountain silver engine quiet harbor lantern meadow copper violet thunder garden".split()
open(sys.argv[2], "w").write(" ".join(random.choice(words) for _ in range(int(sys.argv[1]))) + "\n")' "$1" "$2"
}
prose 1000 "$T/sample.txt"
per_1000=$(./chatfs run -m "$model" -p @"$T/sample.txt" -n 1 --ids 2>/dev/null | head -1 | wc -w)
prose $((tokens * 1000 * 95 / 100 / per_1000)) "$T/long.txt"
echo "Tell me more about the rivers." > "$T/q1.txt"
echo "And the mountains?" > "$T/q2.txt"
mount
mkdir "$mnt/L"
echo '{"max_tokens": 4, "temperature": 0}' > "$mnt/L/settings.json"
set -- $(ask "$T/long.txt")
echo "first message: $1 prompt tokens, computed in $(echo "$3" | cut -d. -f1) ms"
set -- $(ask "$T/q1.txt")
warm=$3
echo "warm:    prompt $1 tokens, $2 reused, TTFT $warm ms"
pid=$(pgrep -f "chatfs mount $mnt" | head -1)
fusermount3 -u "$mnt" # the daemon writes the checkpoints only RAM holds, then exits
while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
mount
set -- $(ask "$T/q2.txt")
cold=$3
echo "restart: prompt $1 tokens, $2 reused, TTFT $cold ms"
python3 -c "import sys; print('restart / warm: %.2fx' % (float(sys.argv[2]) / float(sys.argv[1])))" "$warm" "$cold"
