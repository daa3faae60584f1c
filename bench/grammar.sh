#!/bin/sh
# Constrained decoding: greedy decode under the grammar of a nested JSON schema
# (bench/nested-schema.json) against free decode on Qwen3.5-0.8B's shape (Q8_0), from
# `chatfs bench --json-schema` (alternating runs; the mask's time per step and the
# schema's compile time in the line), then the same on llama.cpp's llama-server with the
# same file and schema (its /completion with and without json_schema, timings.predicted_per_second),
# (tests/remote/llama-server.sh's build, which make test makes and caches, or LLAMA_SERVER).
# Settings through the environment: THREADS=2 TG=64 REPS=3 SHAPE=qwen3.5-0.8b TYPE=q8_0
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
CHATFS=${CHATFS:-./chatfs}
THREADS=${THREADS:-2}
TG=${TG:-64}
REPS=${REPS:-3}
SHAPE=${SHAPE:-qwen3.5-0.8b}
TYPE=${TYPE:-q8_0}
SCHEMA=bench/nested-schema.json
[ "$CHATFS" = ./chatfs ] && make --no-print-directory chatfs >&2 # incremental
mkdir -p "$BUILD/bench"
model="$BUILD/bench/$SHAPE-$TYPE.gguf"
if [ ! -f "$model" ]; then
    echo "making $model (once; cached)" >&2
    nice "$CHATFS" synth --shape "$SHAPE" --type "$TYPE" --out "$model"
fi
"$CHATFS" bench -m "$model" -t "$THREADS" --pp 0 --tg "$TG" --reps "$REPS" --no-bandwidth --draft 0 \
    --json-schema "$SCHEMA" | tail -n 1
BIN=${LLAMA_SERVER:-$(tests/remote/llama-server.sh)} # built once by make test's remote tests, then cached
TMP=$(mktemp -d)
trap 'kill $(cat "$TMP/pid" 2>/dev/null) 2>/dev/null; rm -rf "$TMP"' EXIT
URL=$(LLAMA_SERVER=$BIN MODEL=$model SLOTS=1 CTX=1024 tests/remote/start-server.sh "$TMP" -t "$THREADS")
python3 - "${URL%/v1}" "$SCHEMA" "$TG" "$REPS" "$SHAPE-$TYPE" <<'PY'
import json, statistics, sys, urllib.request
base, schema, tg, reps, name = sys.argv[1], json.load(open(sys.argv[2])), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
def tps(constrained):
    body = {"prompt": "Data:", "n_predict": tg, "temperature": 0, "cache_prompt": False, "ignore_eos": not constrained}
    if constrained:
        body["json_schema"] = schema
    req = urllib.request.Request(base + "/completion", json.dumps(body).encode(), {"Content-Type": "application/json"})
    t = json.load(urllib.request.urlopen(req, timeout=600))["timings"]
    return t["predicted_per_second"], t["predicted_n"]
free, gram = [], []
for _ in range(reps):  # alternating, as chatfs bench does
    free.append(tps(False)[0])
    gram.append(tps(True)[0])
f, g = statistics.median(free), statistics.median(gram)
print(json.dumps({"llama.cpp": "llama-server /completion", "model": name, "free_tps": round(f, 2),
                  "constrained_tps": round(g, 2), "ratio": round(g / f, 3), "reps": reps}))
PY
