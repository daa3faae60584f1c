#!/bin/sh
# bench/long_context.sh - long prompts and decode at long context (issue "Long context") on
# Qwen3.5-0.8B's shape (Q8_0), the KV cache in type KV for both programs, side by side with
# llama.cpp's llama-server on the same file (tests/remote/llama-server.sh's build, which make
# test makes and caches, or LLAMA_SERVER). For each LENGTH: the speed of a prompt of LENGTH
# random tokens from an empty state, and of TG decode steps right after it.
#   chatfs:    chatfs bench --pp LENGTH --depth LENGTH --tg TG (the decode goes on from the
#              prompt it timed)
#   llama.cpp: one /completion of the same kind (the prompt as token ids, cache_prompt off,
#              n_predict TG, end of text ignored), its timings.prompt_per_second and
#              predicted_per_second; flash attention off and on (FA)
# One JSON line each, then a ratio line per length and flash-attention setting. The runs
# are long (a 32K prompt takes minutes): one repetition each.
# Settings: LENGTHS="8192 32768" TG=32 THREADS=2 KV=f16 FA="off on" SHAPE=qwen3.5-0.8b TYPE=q8_0
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
CHATFS=${CHATFS:-./chatfs}
LENGTHS=${LENGTHS:-8192 32768}
TG=${TG:-32}
THREADS=${THREADS:-2}
KV=${KV:-f16}
FA=${FA:-off on}
SHAPE=${SHAPE:-qwen3.5-0.8b}
TYPE=${TYPE:-q8_0}
[ "$CHATFS" = ./chatfs ] && make --no-print-directory chatfs >&2 # incremental
mkdir -p "$BUILD/bench"
model="$BUILD/bench/$SHAPE-$TYPE.gguf"
if [ ! -f "$model" ]; then
    echo "making $model (once; cached)" >&2
    nice "$CHATFS" synth --shape "$SHAPE" --type "$TYPE" --out "$model"
fi
BIN=${LLAMA_SERVER:-$(tests/remote/llama-server.sh)}
TMP=$(mktemp -d)
trap 'kill $(cat "$TMP/pid" 2>/dev/null) 2>/dev/null; rm -rf "$TMP"' EXIT
num() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p"; }
for n in $LENGTHS; do
    ours=$("$CHATFS" bench -m "$model" -t "$THREADS" --pp "$n" --depth "$n" --tg "$TG" --reps 1 --no-bandwidth \
        -ctk "$KV" -ctv "$KV" --draft 0)
    echo "$ours"
    for fa in $FA; do
        URL=$(LLAMA_SERVER=$BIN MODEL=$model SLOTS=1 CTX=$((n + TG + 64)) tests/remote/start-server.sh "$TMP" \
            -t "$THREADS" -fa "$fa" -ctk "$KV" -ctv "$KV")
        theirs=$(python3 - "${URL%/v1}" "$n" "$TG" "$SHAPE-$TYPE" "$KV" "$fa" <<'PY'
import json, random, sys, urllib.request
base, n, tg, name, kv, fa = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
random.seed(42)
prompt = [random.randrange(1000, 100000) for _ in range(n)]
body = {"prompt": prompt, "n_predict": tg, "temperature": 0, "cache_prompt": False, "ignore_eos": True}
req = urllib.request.Request(base + "/completion", json.dumps(body).encode(), {"Content-Type": "application/json"})
t = json.load(urllib.request.urlopen(req, timeout=7200))["timings"]
print(json.dumps({"llama.cpp": "llama-server kv %s, fa %s" % (kv, fa), "model": name, "pp": t["prompt_n"],
                  "pp_tps": round(t["prompt_per_second"], 2), "tg": t["predicted_n"],
                  "tg_tps": round(t["predicted_per_second"], 2)}, separators=(",", ":")))
PY
)
        kill "$(cat "$TMP/pid")" 2>/dev/null || true
        sleep 1
        echo "$theirs"
        awk -v a="$(echo "$ours" | num pp_tps)" -v b="$(echo "$theirs" | num pp_tps)" \
            -v c="$(echo "$ours" | num tg_tps)" -v d="$(echo "$theirs" | num tg_tps)" -v n="$n" -v fa="$fa" \
            'BEGIN { printf "{\"length\":%d,\"fa\":\"%s\",\"pp_vs_llama\":%.2f,\"tg_vs_llama\":%.2f}\n", n, fa, (b > 0 ? a / b : 0), (d > 0 ? c / d : 0) }'
    done
done
