#!/bin/sh
# watch.sh MOUNT CONVERSATION QUESTION... - send a message and watch it generate: the
# status line while the prompt is processed and tokens come, then the transcript.
# (tail -f "$MOUNT/$CONVERSATION/transcript.md" in another terminal follows it too.)
set -eu
[ $# -ge 3 ] || { echo "usage: $0 MOUNT CONVERSATION QUESTION..." >&2; exit 2; }
mnt=$1 c=$1/$2
shift 2
mkdir -p "$c"
printf '%s\n' "$*" > "$c/message"
while :; do
    s=$(cat "$c/status")
    printf '\r\033[K%s' "$s" >&2
    case $s in queued*|prefill*|thinking*|generating*) sleep 0.2 ;; *) break ;; esac
done
printf '\n' >&2
tail -n +1 "$c/transcript.md"
