#!/bin/sh
# bench/state_compression.sh - would lossless compression pay for stored checkpoints?
# (issue "Long context"). Runs conversations on the bundled model with `chatfs ask` into a
# fresh database, takes the recurrent states (ckpt_entries.rec) and KV pages
# (ckpt_pages.kv) out of it as they are stored (float32), and times zstd on them as they
# are and byte-shuffled (each float's 4 bytes split into 4 planes, as Blosc does), with
# the zstd command's own benchmark (-b: ratio, compression and decompression speed on
# one core), each blob on its own as the store would compress it. It prints one line
# per kind of bytes, layout and level; docs/checkpoints.md says what was decided from it.
#
#   bench/state_compression.sh [MODEL.gguf] [LEVELS]     (default: the bundled model, "1 3")
set -eu
cd "$(dirname "$0")/.."
model=${1:-models/chatfs-default.gguf}
levels=${2:-1 3}
for tool in zstd sqlite3 python3; do
    command -v $tool >/dev/null || { echo "state_compression: needs $tool (bash tools/deps.sh)" >&2; exit 1; }
done
[ -x ./chatfs ] || make --no-print-directory chatfs >&2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
db=$T/states.db
# ten conversations of five turns: a common system prompt, different questions
for c in 1 2 3 4 5 6 7 8 9 10; do
    sys="You are a helpful assistant. Answer in a few sentences."
    for q in "Tell me about the weather in city $c." "Why is that?" "What would change it?" \
        "Write a short poem about it." "Summarize our talk."; do
        ./chatfs ask -m "$model" --db "$db" -t 1 -n 48 --conversation "c$c" --system "$sys" "$q" >/dev/null 2>&1 ||
            [ $? -eq 2 ] # -n cut the reply: fine
    done
done
mkdir $T/blobs
sqlite3 "$db" "SELECT writefile('$T/blobs/rec-' || rowid, rec) FROM ckpt_entries WHERE rec IS NOT NULL" >/dev/null
sqlite3 "$db" "SELECT writefile('$T/blobs/kv-' || rowid, kv) FROM ckpt_pages WHERE kv IS NOT NULL" >/dev/null
python3 - "$T" <<'PY'
import glob, os, sys
t = sys.argv[1]
for kind in ("rec", "kv"):
    for layout in ("raw", "shuffled"):
        os.mkdir(os.path.join(t, kind + "." + layout))
    for f in glob.glob(os.path.join(t, "blobs", kind + "-*")):
        raw = open(f, "rb").read()
        raw = raw[: len(raw) // 4 * 4]
        name = os.path.basename(f)
        open(os.path.join(t, kind + ".raw", name), "wb").write(raw)
        open(os.path.join(t, kind + ".shuffled", name), "wb").write(b"".join(raw[i::4] for i in range(4)))
PY
echo "model: $model"
echo "stored: $(ls $T/rec.raw | wc -l) recurrent states ($(cat $T/rec.raw/* | wc -c) B)," \
    "$(ls $T/kv.raw | wc -l) KV pages ($(cat $T/kv.raw/* | wc -c) B)"
printf '%-14s %5s %8s %14s %14s\n' "bytes" "level" "ratio" "compress" "decompress"
for f in rec.raw rec.shuffled kv.raw kv.shuffled; do
    for l in $levels; do
        # zstd -b compresses each file as a block of its own; -q -bL prints
        # "-L  OUT (RATIO) C MB/s D MB/s NAME" last
        zstd -q -b$l -i2 $T/$f/* 2>&1 | tr '\r' '\n' | grep -- "^ *-$l " | tail -1 |
            awk -v f=$f -v l=$l '{ gsub(/[()]/, "", $3); printf "%-14s %5s %8s %9s MB/s %9s MB/s\n", f, l, $3, $4, $6 }'
    done
done
