#!/bin/sh
# ask.sh MOUNT CONVERSATION QUESTION... - send one message and print the reply as it streams.
#   chatfs mount ~/chat -m model.gguf && examples/ask.sh ~/chat math "What is 17 + 25?"
set -eu
[ $# -ge 3 ] || { echo "usage: $0 MOUNT CONVERSATION QUESTION..." >&2; exit 2; }
mnt=$1 conv=$2
shift 2
mkdir -p "$mnt/$conv"
# The message is sent when the file is closed; an error (busy, too long) shows here.
printf '%s\n' "$*" > "$mnt/$conv/message"
# cat waits for each token and ends with the reply; an engine failure exits non-zero.
cat "$mnt/$conv/reply" || { echo "error: $(cat "$mnt/$conv/error")" >&2; exit 1; }
