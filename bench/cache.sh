#!/bin/sh
# bench/cache.sh - the checkpoint benchmark (issue "Checkpoints"): a random-weight
# model of Qwen3.5-0.8B's shape, a ~2,700-token system prompt and 5 user messages
# (cold, warm from RAM, after a restart from the database), a second turn, an edit of
# the 2nd user message of 5, and the bytes a 10-turn conversation stores.
#
#   bench/cache.sh [MODEL.gguf]      (make bench-cache)
#
# Without MODEL it makes build/bench/qwen35-0.8b-q8_0.gguf with `chatfs synth` when
# this build has it, else with shared/tools/mkgguf.py when that is beside the repo.
set -eu
cd "$(dirname "$0")/.."
mkdir -p build/bench
model=${1:-build/bench/qwen35-0.8b-q8_0.gguf}
if [ ! -f "$model" ]; then
    if ./chatfs synth --help >/dev/null 2>&1; then
        ./chatfs synth --shape qwen3.5-0.8b --type q8_0 --out "$model"
    elif [ -f ../shared/tools/mkgguf.py ]; then
        echo "cache.sh: 'chatfs synth' is not in this build; making the model with shared/tools/mkgguf.py" >&2
        /usr/bin/python3 ../shared/tools/mkgguf.py --arch qwen35 --size 0.8b --ftype q8_0 --out "$model"
    else
        echo "cache.sh: no model: pass one, or build 'chatfs synth'" >&2
        exit 1
    fi
fi
exec nice build/bench/cache_bench "$model" build/bench
