#!/bin/sh
# bench/vision.sh - encoding an image with Qwen3.5's vision projector (issue "Vision"):
# chatfs's encoder against llama.cpp's mtmd on the same file, same threads, one after the
# other, ROUNDS times (the machine's speed drifts: compare the ratio of each round).
#   projector: chatfs synth --mmproj SHAPE --type TYPE (default qwen3.5-35b-a3b, F16: the
#              projector of Qwen3.5-27B and 35B-A3B), its output width that of the tiny
#              Qwen3.5 test model, which mtmd needs beside it (the text model is not timed)
#   image:     a W x H photograph-like PNG (tests/fixtures/vision/images.py photo)
#   chatfs:    build/bench/vision_bench (resize, normalise, encode; median of REPS)
#   llama.cpp: tests/vision/mtmd_ref.c's --reps (mtmd_encode_chunk; median of REPS), flash
#              attention in the encoder off (the numerics chatfs copies) and on (its default)
# Settings: SHAPE=qwen3.5-35b-a3b TYPE=f16 W=1024 H=768 THREADS=2 REPS=3 ROUNDS=2
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
SHAPE=${SHAPE:-qwen3.5-35b-a3b}
TYPE=${TYPE:-f16}
W=${W:-1024}
H=${H:-768}
THREADS=${THREADS:-2}
REPS=${REPS:-3}
ROUNDS=${ROUNDS:-2}
make --no-print-directory chatfs "$BUILD/bench/vision_bench" >&2
mkdir -p "$BUILD/bench"
mmproj="$BUILD/bench/mmproj-$SHAPE-$TYPE-e64.gguf"
[ -f "$mmproj" ] || ./chatfs synth --mmproj "$SHAPE" --n-embd 64 --type "$TYPE" --out "$mmproj"
image="$BUILD/bench/photo-${W}x$H.png"
[ -f "$image" ] || python3 tests/fixtures/vision/images.py photo "$W" "$H" "$image"
REF=$(tests/vision/mtmd-ref.sh)
num() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p"; }
for round in $(seq "$ROUNDS"); do
    ours=$("$BUILD/bench/vision_bench" "$mmproj" "$image" -t "$THREADS" --reps "$REPS")
    echo "$ours"
    for fa in off on; do
        ref=$("$REF" tests/fixtures/qwen35-tiny-f32.gguf "$mmproj" "$image" -t "$THREADS" --fa "$fa" --reps "$REPS")
        a=$(echo "$ours" | num encode_ms) b=$(echo "$ref" | num encode_ms)
        awk -v a="$a" -v b="$b" -v r="$round" -v s="$SHAPE" -v t="$TYPE" -v i="${W}x$H" -v fa="$fa" 'BEGIN {
            printf "{\"round\":%s,\"shape\":\"%s\",\"type\":\"%s\",\"image\":\"%s\",\"llama_fa\":\"%s\",", r, s, t, i, fa
            printf "\"chatfs_ms\":%s,\"llama_ms\":%s,\"speedup\":%.2f}\n", a, b, b / a }'
    done
done
