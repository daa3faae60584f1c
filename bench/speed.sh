#!/bin/sh
# Speed of prompt processing, decode and batched decode on synthetic models of a real
# model's shape (default: Qwen3.5-0.8B in Q8_0, Q4_K, and llama-quantize's Q4_K_M mix, the
# file most people download), one JSON line per run from `chatfs bench` (for Q8_0 also on
# the opt-in AMX kernel set where the CPU has AMX).
# Settings through the environment:
#   BENCH_SHAPES="qwen3.5-0.8b"  BENCH_TYPES="q8_0 q4_k q4_k_m"  THREADS=2  PP=512  TG=64  REPS=3  BATCH=6
#   LLREF=/path/to/llref         also run llama.cpp's bench on the same files, side by side
#   KV=f16                       the KV cache type of both (llama.cpp's default; f32 as the
#                                reference results); llama.cpp runs with flash attention off and on
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
KV=${KV:-f16}
[ "$CHATFS" = ./chatfs ] && make --no-print-directory chatfs >&2 # incremental
for shape in $SHAPES; do
    for type in $TYPES; do
        model="$BUILD/bench/$shape-$type.gguf"
        if [ ! -f "$model" ]; then
            echo "making $model (once; cached)" >&2
            nice "$CHATFS" synth --shape "$shape" --type "$type" --out "$model"
        fi
        "$CHATFS" bench -m "$model" -t "$THREADS" --pp "$PP" --tg "$TG" --reps "$REPS" -ctk "$KV" -ctv "$KV"
        "$CHATFS" bench -m "$model" -t "$THREADS" --pp 0 --tg "$TG" --batch "$BATCH" --reps "$REPS" --no-bandwidth \
            -ctk "$KV" -ctv "$KV"
        # the opt-in AMX set (Q8_0 in the block-integer order, engine/kernels/kernels_amx.c), where the CPU has it
        if [ "$type" = q8_0 ] && grep -q amx_int8 /proc/cpuinfo; then
            CHATFS_ISA=amx "$CHATFS" bench -m "$model" -t "$THREADS" --pp "$PP" --tg "$TG" --reps "$REPS" --no-bandwidth
            CHATFS_ISA=amx "$CHATFS" bench -m "$model" -t "$THREADS" --pp 0 --tg "$TG" --batch "$BATCH" --reps "$REPS" --no-bandwidth
        fi
        if [ -n "$LLREF" ] && [ -x "$LLREF" ]; then
            for fa in off on; do
                "$LLREF" "$model" --bench --pp "$PP" --tg "$TG" -t "$THREADS" --reps "$REPS" --kv "$KV" --fa $fa \
                    --json 2>/dev/null |
                    sed 's/.*"bench": {/{"llama.cpp":"kv '"$KV"', fa '$fa'","model":"'"$shape-$type"'",/; s/}}$/}/'
            done
        fi
    done
done
