#!/bin/sh
# bench/concurrency.sh - many conversations at once (issue "Concurrency") on a
# random-weight model of Qwen3.5-0.8B's shape: aggregate decode tokens/s with 1, 2, 4, 6
# and 8 conversations generating together (target: 6 at least 4x one), and the
# single-flight saving (prompt tokens computed by 6 requests sharing a system prompt,
# with and without single flight). One JSON line per measurement (bench/concurrency_bench.c).
# Settings through the environment:
#   THREADS=2  TG=32 (tokens per reply)  SYSTEM=500 (system prompt tokens)  COUNTS=1,2,4,6,8
#   REPS=3 (rounds over the counts; medians reported)
#   LONG=16384 (the prompt another conversation decodes beside; 0: skip)
#   BENCH_MODEL=path.gguf   instead of the synthetic model (made once and cached)
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
CHATFS=${CHATFS:-./chatfs}
THREADS=${THREADS:-2}
TG=${TG:-32}
SYSTEM=${SYSTEM:-500}
COUNTS=${COUNTS:-1,2,4,6,8}
REPS=${REPS:-3}
LONG=${LONG:-16384}
model=${BENCH_MODEL:-$BUILD/bench/qwen3.5-0.8b-q8_0.gguf}
mkdir -p "$BUILD/bench"
if [ ! -f "$model" ]; then
    echo "making $model (once; cached)" >&2
    nice "$CHATFS" synth --shape qwen3.5-0.8b --type q8_0 --out "$model"
fi
make --no-print-directory "$BUILD/bench/concurrency_bench" >&2 # incremental: never a stale build of the library
load() { echo "{\"bench\":\"machine\",\"cpus\":$(nproc),\"load\":\"$(cut -d' ' -f1-3 /proc/loadavg)\",\"model\":\"$(basename "$model")\"}"; }
load
# the bare model pass with 1 and 6 sequences, for comparison (chatfs bench)
for b in 1 6; do
    "$CHATFS" bench -m "$model" -t "$THREADS" --pp 0 --tg "$TG" --batch $b --reps 1 --no-bandwidth
done
"$BUILD/bench/concurrency_bench" "$model" "$THREADS" "$TG" "$SYSTEM" "$COUNTS" "$REPS" "$LONG"
load
