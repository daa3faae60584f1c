#!/bin/sh
# Speed of prompt processing, decode and batched decode on synthetic models of a real
# model's shape (default: Qwen3.5-0.8B in Q8_0, Q4_K, and llama-quantize's Q4_K_M mix, the
# file most people download), one JSON line per run from `chatfs bench` (for Q8_0 also on
# the opt-in AMX kernel set where the CPU has AMX).
# Settings through the environment:
#   BENCH_SHAPES="qwen3.5-0.8b"  BENCH_TYPES="q8_0 q4_k q4_k_m"  THREADS=2  PP=512  TG=64  REPS=3  BATCH=6
#   LLREF=/path/to/llref         also run llama.cpp's bench on the same files, side by side
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
CHATFS=${CHATFS:-./chatfs}
SHAPES=${BENCH_SHAPES:-qwen3.5-0.8b}
TYPES=${BENCH_TYPES:-q8_0 q4_k q4_k_m}
THREADS=${THREADS:-2}
PP=${PP:-512}
TG=${TG:-64}
REPS=${REPS:-3}
BATCH=${BATCH:-6}
LLREF=${LLREF:-}
[ "$CHATFS" = ./chatfs ] && make --no-print-directory chatfs >&2 # incremental
for shape in $SHAPES; do
    for type in $TYPES; do
        model="$BUILD/bench/$shape-$type.gguf"
        if [ ! -f "$model" ]; then
            echo "making $model (once; cached)" >&2
            nice "$CHATFS" synth --shape "$shape" --type "$type" --out "$model"
        fi
        "$CHATFS" bench -m "$model" -t "$THREADS" --pp "$PP" --tg "$TG" --reps "$REPS"
        "$CHATFS" bench -m "$model" -t "$THREADS" --pp 0 --tg "$TG" --batch "$BATCH" --reps "$REPS" --no-bandwidth
        # the opt-in AMX set (Q8_0 in the block-integer order, engine/kernels/kernels_amx.c), where the CPU has it
        if [ "$type" = q8_0 ] && grep -q amx_int8 /proc/cpuinfo; then
            CHATFS_ISA=amx "$CHATFS" bench -m "$model" -t "$THREADS" --pp "$PP" --tg "$TG" --reps "$REPS" --no-bandwidth
            CHATFS_ISA=amx "$CHATFS" bench -m "$model" -t "$THREADS" --pp 0 --tg "$TG" --batch "$BATCH" --reps "$REPS" --no-bandwidth
        fi
        if [ -n "$LLREF" ] && [ -x "$LLREF" ]; then
            "$LLREF" "$model" --bench --pp "$PP" --tg "$TG" -t "$THREADS" --reps "$REPS" --kv f32 --fa off --json 2>/dev/null |
                sed 's/.*"bench": {/{"llama.cpp":"kv f32, fa off","model":"'"$shape-$type"'",/; s/}}$/}/'
        fi
    done
done
