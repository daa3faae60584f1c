#!/bin/sh
# edit-and-regenerate.sh MOUNT CONVERSATION TURN NEW_TEXT... - rewrite a user turn (e.g. 1
# for turns/001-user.md): the turns after it go and the reply is generated again from
# there, reusing the checkpoints of everything before. Without NEW_TEXT, re-roll the last
# reply instead: remove the last assistant turn and write "regenerate" to ctl.
set -eu
[ $# -ge 2 ] || { echo "usage: $0 MOUNT CONVERSATION [TURN NEW_TEXT...]" >&2; exit 2; }
mnt=$1 c=$1/$2
if [ $# -ge 4 ]; then
    turn=$(printf '%03d-user.md' "$3")
    shift 3
    printf '%s\n' "$*" > "$c/turns/$turn"      # any editor works too: vim "$c/turns/$turn"
else
    last=$(ls "$c/turns" | tail -n 1)
    case $last in
    *-assistant.md) rm "$c/turns/$last" ;;
    esac
    echo regenerate > "$c/ctl"
fi
cat "$c/reply"
