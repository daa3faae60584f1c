#!/bin/sh
# bench/moe.sh - mixture-of-experts hybrids (issue "MoE hybrids"): prompt processing (512
# tokens), decode, and six sequences decoding together, on random-weight files of real MoE
# shapes cut to their first blocks (chatfs synth --layers): Qwen3.5-35B-A3B's first 8 at
# Q4_K_M and Q8_0, Nemotron-3-Nano-30B-A3B's first 13 at Q4_K_M. Side by side with
# llama.cpp when LLREF points at the oracle program (same file, same threads, the same KV
# cache type KV, default f16; flash attention off and on), the programs alternating ROUNDS
# times so that a busy machine slows both alike; each round prints the JSON lines and a
# ratio line per flash-attention setting. chatfs's decode
# line carries the roofline of the bytes a token moves (chosen experts, shared expert, the
# rest, the recurrent state); the batched line the speed-up over one sequence and the one
# the bytes allow (chatfs bench).
# The files are large (4-8 GB each; made once, cached in $BUILD/bench; check df first).
# Settings through the environment:
#   MOE_MODELS="qwen3.5-35b-a3b:8:q4_k_m qwen3.5-35b-a3b:8:q8_0 nemotron-3-nano-30b-a3b:13:q4_k_m"
#   THREADS=2  PP=512  TG=32  REPS=3  BATCH=6  ROUNDS=2  KV=f16  LLREF=/path/to/llref
#   LLREF_FLAGS=--no-repack  for a file near the size of memory: llama.cpp otherwise keeps a
#   second, repacked copy of the Q4_K weights (the full 40-block Qwen3.5-35B-A3B at Q4_K_M,
#   MOE_MODELS=qwen3.5-35b-a3b:40:q4_k_m, is 21 GB: with the copy it does not fit 24 GB)
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
CHATFS=${CHATFS:-./chatfs}
MODELS=${MOE_MODELS:-qwen3.5-35b-a3b:8:q4_k_m qwen3.5-35b-a3b:8:q8_0 nemotron-3-nano-30b-a3b:13:q4_k_m}
THREADS=${THREADS:-2}
PP=${PP:-512}
TG=${TG:-32}
REPS=${REPS:-3}
BATCH=${BATCH:-6}
ROUNDS=${ROUNDS:-2}
LLREF=${LLREF:-}
LLREF_FLAGS=${LLREF_FLAGS:-}
KV=${KV:-f16}
mkdir -p "$BUILD/bench"
[ "$CHATFS" = ./chatfs ] && make --no-print-directory chatfs >&2 # incremental
num() { sed -n "s/.*\"$1\": *\([0-9.]*\).*/\1/p"; }
for spec in $MODELS; do
    shape=${spec%%:*} rest=${spec#*:}
    layers=${rest%%:*} type=${rest#*:}
    model="$BUILD/bench/$shape-${layers}L-$type.gguf"
    if [ ! -f "$model" ]; then
        echo "making $model (once; cached)" >&2
        nice "$CHATFS" synth --shape "$shape" --layers "$layers" --type "$type" --out "$model"
    fi
    echo "{\"bench\":\"machine\",\"cpus\":$(nproc),\"load\":\"$(cut -d' ' -f1-3 /proc/loadavg)\",\"model\":\"$(basename "$model")\"}"
    r=0
    while [ "$r" -lt "$ROUNDS" ]; do
        r=$((r + 1))
        ours=$("$CHATFS" bench -m "$model" -t "$THREADS" --pp "$PP" --tg "$TG" --reps "$REPS" -ctk "$KV" -ctv "$KV")
        echo "$ours"
        if [ -n "$LLREF" ] && [ -x "$LLREF" ]; then
            for fa in off on; do
                theirs=$("$LLREF" "$model" --bench --pp "$PP" --tg "$TG" -t "$THREADS" --reps "$REPS" --kv "$KV" --fa $fa \
                    $LLREF_FLAGS --json 2>/dev/null | sed 's/.*"bench": {/{"llama.cpp":"kv '"$KV"', fa '$fa"${LLREF_FLAGS:+, $LLREF_FLAGS}"'","model":"'"$(basename "$model")"'",/; s/}}$/}/')
                echo "$theirs"
                awk -v a="$(echo "$ours" | num pp_tps)" -v b="$(echo "$theirs" | num pp_tps)" \
                    -v c="$(echo "$ours" | num tg_tps)" -v d="$(echo "$theirs" | num tg_tps)" -v r="$r" -v fa=$fa \
                    'BEGIN { printf "{\"round\":%d,\"fa\":\"%s\",\"pp_vs_llama\":%.2f,\"tg_vs_llama\":%.2f}\n", r, fa, (b > 0 ? a / b : 0), (d > 0 ? c / d : 0) }'
            done
        fi
    done
    "$CHATFS" bench -m "$model" -t "$THREADS" --pp 0 --tg "$TG" --batch "$BATCH" --reps "$REPS" --no-bandwidth \
        -ctk "$KV" -ctv "$KV"
done
