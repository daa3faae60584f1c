#!/bin/sh
# Checks the rooms' order in the built archives, as tools/check_rooms.sh does in the
# includes: every symbol an archive uses but does not define must come from an archive
# after it on the command line (a room below it) or from a system library, never from one
# before it (a room above). The link alone would not say so when another room had pulled
# the symbol in already. Usage: tools/check_links.sh ARCHIVE... (top room first, as the
# Makefile's LIBS). Prints each upward use; exit status 1 if any.
set -u
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
i=0
for a in "$@"; do
    i=$((i + 1))
    nm -g --defined-only "$a" | awk 'NF == 3 {print $3}' | sort -u >"$work/def.$i"
    nm -g --undefined-only "$a" | awk '{print $NF}' | sort -u | comm -23 - "$work/def.$i" >"$work/need.$i"
done
bad=0
i=0
for a in "$@"; do
    i=$((i + 1))
    j=0
    for up in "$@"; do
        j=$((j + 1))
        [ $j -lt $i ] || break
        comm -12 "$work/need.$i" "$work/def.$j" | while read -r sym; do
            echo "$a uses $sym from $up, a room above it"
        done
    done
done >"$work/upward"
if [ -s "$work/upward" ]; then
    cat "$work/upward"
    bad=1
fi
[ $bad -eq 0 ] && echo "links: every archive uses only the rooms below it ($# archives)"
exit $bad
