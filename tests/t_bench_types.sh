#!/bin/sh
# `chatfs synth` + `chatfs bench` on every supported weight type (small Qwen3.5 shape):
# the file is written, loads, runs prompt processing and decode, and bench prints its
# JSON line with the fields the issue names.
set -u
BUILD=${BUILD:-build}
dir="$BUILD/tests/tmp/bench_types"
mkdir -p "$dir"
fail=0
for type in f32 f16 bf16 q8_0 q4_0 q5_0 q4_1 q5_1 q4_k q5_k q6_k q4_k_m; do
    m="$dir/small-$type.gguf"
    if ! ./chatfs synth --shape qwen3.5-small --type "$type" --out "$m" -q -t 2; then
        echo "t_bench_types: synth $type failed"; fail=1; continue
    fi
    if [ "$type" = q4_k_m ]; then # llama-quantize's mix: Q6_K head and some ffn_down, Q5_K attn_qkv, Q4_K the rest
        mix=$(./chatfs info "$m" | grep 'tensor types')
        for t in Q6_K Q5_K Q4_K; do
            case "$mix" in *"$t"*) ;; *) echo "t_bench_types: q4_k_m has no $t: $mix"; fail=1 ;; esac
        done
    fi
    out=$(./chatfs bench -m "$m" -t 2 --pp 40 --tg 6 --batch 3 --reps 1 --no-bandwidth) || { echo "t_bench_types: bench $type failed"; fail=1; continue; }
    for k in '"model"' '"threads":2' '"pp":40' '"pp_tps"' '"tg":6' '"tg_tps"' '"batch":3' '"bandwidth_gbs"' '"roofline_tps"' '"rss_mb"'; do
        case "$out" in *"$k"*) ;; *) echo "t_bench_types: $type: no $k in: $out"; fail=1 ;; esac
    done
    case "$out" in *'"tg_tps":0.00'*|*'"pp_tps":0.00'*) echo "t_bench_types: $type: zero speed: $out"; fail=1 ;; esac
done
rm -rf "$dir"
[ "$fail" -eq 0 ] && echo "t_bench_types                ok (11 weight types and the Q4_K_M mix)"
[ "$fail" -eq 0 ]
