#!/bin/sh
# Speculative decoding with Qwen3.5's MTP head (docs/performance.md): on a random-weight
# file of Qwen3.5-0.8B's shape with its MTP block (`chatfs synth --mtp`), `chatfs bench
# --draft N` times a plain decode step, the verify steps of k+1 tokens and a draft row, and
# models the speed-up at llama.cpp's published acceptance; runs alternate between drafting
# over the whole vocabulary and over its first DRAFT_VOCAB ids. One JSON line per run; then
# how often Qwen3.5's real tokens fall among those ids, and the speed-up at the acceptance
# that leaves.
# Then the default model's trained head on its held-out conversations (bench/spec_heldout.c:
# greedy, thinking on, drafts of 0..3): acceptance, passes, decode time and speed-up.
# Settings through the environment:
#   SPEC_SHAPE=qwen3.5-0.8b  SPEC_TYPE=q8_0  THREADS=2  DRAFT=4  DRAFT_VOCAB=32768  PAIRS=2  REPS=7
#   HELDOUT_ITEMS=420       held-out conversations the default model answers in each mode
#   LLREF=/path/to/llref     also llama.cpp's cost of a batch of 1..DRAFT+1 tokens on the same file
#                            (its --bench pp, 1 thread: its spinning barrier suffers on a loaded machine)
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
CHATFS=${CHATFS:-./chatfs}
SHAPE=${SPEC_SHAPE:-qwen3.5-0.8b}
TYPE=${SPEC_TYPE:-q8_0}
THREADS=${THREADS:-2}
DRAFT=${DRAFT:-4}
DRAFT_VOCAB=${DRAFT_VOCAB:-32768}
PAIRS=${PAIRS:-2}
REPS=${REPS:-7}
LLREF=${LLREF:-}
HELDOUT_ITEMS=${HELDOUT_ITEMS:-420}
[ "$CHATFS" = ./chatfs ] && make --no-print-directory chatfs >&2 # incremental
model="$BUILD/bench/$SHAPE-$TYPE-mtp.gguf"
if [ ! -f "$model" ]; then
    echo "making $model (once; cached)" >&2
    nice "$CHATFS" synth --shape "$SHAPE" --type "$TYPE" --mtp --out "$model"
fi
runs=$(mktemp)
trap 'rm -f "$runs"' EXIT
i=0
while [ "$i" -lt "$PAIRS" ]; do
    for dv in 0 "$DRAFT_VOCAB"; do
        "$CHATFS" bench -m "$model" -t "$THREADS" --pp 128 --tg 24 --reps "$REPS" --draft "$DRAFT" --draft-vocab "$dv" \
            --no-bandwidth | sed -n 2p | tee -a "$runs"
    done
    i=$((i + 1))
done
# A head drafting over the first DRAFT_VOCAB ids can be right only when the next token is
# one of them. How often that is, in Qwen3.5's real vocabulary (llama.cpp's
# models/ggml-vocab-qwen35.gguf, via tools/llama-cpp-src.sh) on this repository's English
# and C text, bounds the acceptance there: p x coverage. One JSON line: the coverage and,
# from the runs above with that vocabulary, the median speed-up at p = 0.79 x coverage.
if src=$(sh tools/llama-cpp-src.sh 2>/dev/null) && [ -f "$src/models/ggml-vocab-qwen35.gguf" ]; then
    for f in README.md docs/*.md engine/model/*.c engine/runtime/*.c; do
        python3 -c 'import json, sys; print(json.dumps([{"role": "user", "content": "Show me this file."},
                    {"role": "assistant", "content": open(sys.argv[1]).read()}]))' "$f" |
            "$CHATFS" render -m "$src/models/ggml-vocab-qwen35.gguf" --ids - && echo
    done | python3 -c '
import json, statistics, sys
V, runs = int(sys.argv[1]), [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
ids = [int(t) for t in sys.stdin.read().replace(",", " ").split()]
cov = sum(i < V for i in ids) / len(ids)
p = 0.79 * cov
sub = [r for r in runs if r["draft_vocab"] == V]
def speedup(r, k):
    return sum(p ** j for j in range(k + 1)) / (r["verify_vs_plain"][k] + k * r["draft_row_ms"] / r["plain_ms"])
K = len(sub[0]["verify_vs_plain"]) if sub else 0
print(json.dumps({"draft_vocab": V, "tokens": len(ids), "coverage": round(cov, 3), "acceptance": round(p, 3),
                  "median_speedup": [round(statistics.median(speedup(r, k) for r in sub), 3) for k in range(K)]}))
' "$DRAFT_VOCAB" "$runs"
fi
if [ -n "$LLREF" ] && [ -x "$LLREF" ]; then
    k=1
    while [ "$k" -le $((DRAFT + 1)) ]; do
        "$LLREF" "$model" --bench --pp "$k" --tg 8 -t 1 --reps 3 --kv f16 --fa off --json 2>/dev/null |
            sed 's/.*"bench": {/{"llama.cpp":"kv f16, fa off, 1 thread","model":"'"$SHAPE-$TYPE-mtp"'",/; s/}}$/}/'
        k=$((k + 1))
    done
fi
[ -x "$BUILD/bench/spec_heldout" ] || make --no-print-directory "$BUILD/bench/spec_heldout" >&2
"$BUILD/bench/spec_heldout" models/chatfs-default.gguf tools/train/heldout.jsonl "$HELDOUT_ITEMS" "$THREADS"
