#!/bin/sh
# Speculative decoding with Qwen3.5's MTP head (docs/performance.md): on a random-weight
# file of Qwen3.5-0.8B's shape with its MTP block (`chatfs synth --mtp`), `chatfs bench
# --draft N` times a plain decode step, the verify steps of k+1 tokens and a draft row, and
# models the speed-up at llama.cpp's published acceptance; runs alternate between drafting
# over the whole vocabulary and over its first DRAFT_VOCAB ids. One JSON line per run.
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
i=0
while [ "$i" -lt "$PAIRS" ]; do
    for dv in 0 "$DRAFT_VOCAB"; do
        "$CHATFS" bench -m "$model" -t "$THREADS" --pp 128 --tg 24 --reps "$REPS" --draft "$DRAFT" --draft-vocab "$dv" \
            --no-bandwidth | sed -n 2p
    done
    i=$((i + 1))
done
if [ -n "$LLREF" ] && [ -x "$LLREF" ]; then
    k=1
    while [ "$k" -le $((DRAFT + 1)) ]; do
        "$LLREF" "$model" --bench --pp "$k" --tg 8 -t 1 --reps 3 --kv f32 --fa off --json 2>/dev/null |
            sed 's/.*"bench": {/{"llama.cpp":"kv f32, fa off, 1 thread","model":"'"$SHAPE-$TYPE-mtp"'",/; s/}}$/}/'
        k=$((k + 1))
    done
fi
[ -x "$BUILD/bench/spec_heldout" ] || make --no-print-directory "$BUILD/bench/spec_heldout" >&2
"$BUILD/bench/spec_heldout" models/chatfs-default.gguf tools/train/heldout.jsonl "$HELDOUT_ITEMS" "$THREADS"
