#!/bin/sh
# bench/cache.sh - the checkpoint benchmark (issue "Checkpoints"): a random-weight
# model of Qwen3.5-0.8B's shape, a ~2,700-token system prompt and 5 user messages
# (cold, warm from RAM, after a restart from the database), a second turn, an edit of
# the 2nd user message of 5, and the bytes a 10-turn conversation stores.
#
#   bench/cache.sh [MODEL.gguf]      (make bench-cache)
#
# Without MODEL it makes build/bench/qwen3.5-0.8b-q8_0.gguf with `chatfs synth`.
set -eu
cd "$(dirname "$0")/.."
mkdir -p build/bench
model=${1:-build/bench/qwen3.5-0.8b-q8_0.gguf}
[ -f "$model" ] || ./chatfs synth --shape qwen3.5-0.8b --type q8_0 --out "$model"
make --no-print-directory build/bench/cache_bench >&2 # never a stale build of the library
exec nice build/bench/cache_bench "$model" build/bench
