#!/bin/sh
# The same five-turn conversation through the local engine and through llama-server
# (the remote engine), with the bundled default model: time to first token per turn side
# by side, with the prompt tokens each side reused (local: chatfs's checkpoints, restored
# from the database by a fresh `chatfs ask`; remote: llama-server's own prefix cache, its
# usage.prompt_tokens_details.cached_tokens). Greedy, so both give the same replies.
#
#   bench/remote_ttft.sh [RUNS]      (RUNS conversations each way, default 3)
#
# SYSTEM_WORDS=N puts a system prompt of N filler words first (3 tokens each for the default
# model: 1000 fills most of its 4096-token context), so that
# the prefill, and what each side's cache saves of it, shows in the times.
set -eu
cd "$(dirname "$0")/.."
RUNS=${1:-3}
TMP=$(mktemp -d)
SRV=$TMP/server
URL=$(tests/remote/start-server.sh "$SRV" -np 1)
trap 'kill $(cat "$SRV/pid") 2>/dev/null; rm -rf "$TMP"' EXIT
SYS=""
if [ "${SYSTEM_WORDS:-0}" -gt 0 ]; then
    python3 -c "import sys; print(' '.join(['Answer', 'briefly.'] + ['note'] * int(sys.argv[1])))" "$SYSTEM_WORDS" >"$TMP/system"
    SYS="--system @$TMP/system"
fi
set -- "What is 17 + 25?" "Add 5 to that." "What is 12 + 30?" "Add 5 to that." "What is the capital of France?"
field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p"; }
printf '%-4s %-32s %10s %10s %12s %12s\n' run turn local_ms remote_ms local_reused remote_reused
for run in $(seq 1 "$RUNS"); do
    i=0
    for q in "$@"; do
        i=$((i + 1))
        l=$(./chatfs ask -m models/chatfs-default.gguf -t 2 --db "$TMP/local.db" --conversation "c$run" $SYS --stats "$q" 2>&1 >/dev/null | tail -n 1)
        r=$(./chatfs ask --engine "$URL" --db "$TMP/remote.db" --conversation "c$run" $SYS --stats "$q" 2>&1 >/dev/null | tail -n 1)
        printf '%-4s %-32s %10.1f %10.1f %12s %12s\n' "$run" "$i: $q" "$(echo "$l" | field ttft_ms)" \
            "$(echo "$r" | field ttft_ms)" "$(echo "$l" | field reused_tokens)/$(echo "$l" | field prompt_tokens)" \
            "$(echo "$r" | field reused_tokens)/$(echo "$r" | field prompt_tokens)"
    done
done
