#!/bin/sh
# fork.sh MOUNT FROM TO QUESTION... - copy a conversation and take the copy elsewhere.
# The copy has FROM's system prompt, settings and turns; its first reply reuses FROM's
# checkpoints, so only the new message is computed.
set -eu
[ $# -ge 4 ] || { echo "usage: $0 MOUNT FROM TO QUESTION..." >&2; exit 2; }
mnt=$1 from=$2 to=$3
shift 3
cp -r "$mnt/$from" "$mnt/$to"
printf '%s\n' "$*" > "$mnt/$to/message"
cat "$mnt/$to/reply"
echo "--- $to: $(cat "$mnt/$to/status")"
echo "--- $from still has $(ls "$mnt/$from/turns" | wc -l) turns, $to has $(ls "$mnt/$to/turns" | wc -l)"
