#!/bin/sh
# The pure-attention control model: speed.sh on Qwen1.5-0.5B's shape (GGUF arch qwen2, the
# family of Qwen1.5/2/2.5) in Q8_0 and llama-quantize's Q4_K_M mix - prompt, decode and
# batched decode, and llama.cpp on the same files when LLREF points at the oracle program.
# Settings: BENCH_QWEN2_SHAPES="qwen1.5-0.5b"  BENCH_QWEN2_TYPES="q8_0 q4_k_m", the rest as speed.sh.
set -eu
BENCH_SHAPES=${BENCH_QWEN2_SHAPES:-qwen1.5-0.5b} BENCH_TYPES=${BENCH_QWEN2_TYPES:-q8_0 q4_k_m} \
    exec sh "$(dirname "$0")/speed.sh"
