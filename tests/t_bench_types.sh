#!/bin/sh
# `chatfs synth` + `chatfs bench` on every supported weight type (small Qwen3.5 shape) and
# a small mixture-of-experts shape: the file is written, loads, runs prompt processing and
# decode, and bench prints its JSON line with the fields the issue names.
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
# a mixture-of-experts shape: llama-quantize's Q4_K_M mix gives the experts' ffn_down
# Q6_K in the blocks use_more_bits picks (2 and 3 of 4: 2 tensors each, with the shared
# expert's), and --layers keeps the first blocks of the pattern
m="$dir/moe-small-q4_k_m.gguf"
if ./chatfs synth --shape qwen3.5-moe-small --type q4_k_m --out "$m" -q -t 2 &&
    ./chatfs synth --shape qwen3.5-moe-small --type q8_0 --layers 3 --out "$dir/moe-3.gguf" -q -t 2; then
    info=$(./chatfs info "$m")
    case "$info" in *"Q6_K x6"*"experts:       4 in each of 4 blocks, 2 used per token, 1 shared"*) ;;
        *) echo "t_bench_types: MoE q4_k_m: $info"; fail=1 ;; esac
    case "$(./chatfs info "$dir/moe-3.gguf")" in *"layers:        3  pattern: GGG"*) ;;
        *) echo "t_bench_types: --layers 3 did not keep 3 blocks"; fail=1 ;; esac
    out=$(./chatfs bench -m "$m" -t 2 --pp 40 --tg 6 --batch 3 --reps 1 --no-bandwidth) || { echo "t_bench_types: MoE bench failed"; fail=1; }
    case "$out" in *'"tg_tps":0.00'*|*'"pp_tps":0.00'*|'') echo "t_bench_types: MoE: zero speed: $out"; fail=1 ;; esac
else
    echo "t_bench_types: synth of the MoE shape failed"; fail=1
fi
rm -rf "$dir"
[ "$fail" -eq 0 ] && echo "t_bench_types                ok (11 weight types, the Q4_K_M mix, an MoE shape)"
[ "$fail" -eq 0 ]
