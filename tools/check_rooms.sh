#!/bin/sh
# Checks that the engine's rooms import downwards only (engine/README.md): a file in
# engine/ROOM/ may include "engine/R/..." only when R is ROOM or comes before it in
# ORDER, and nothing of store/ or fs/ (the engine is a library of its own: checkpoints go
# through engine/runtime/checkpoint_port.h). Every quoted include in engine/ names its
# room: "engine/<room>/<file>". store/ includes of the engine only the port it implements
# and the hashes (engine/base/hash.h). Prints each offending line; exit status 1 if any.
# Run from the repository root (make test runs it).
ORDER="base gguf kernels layers vision tokenizer grammar toolcall jinja template model arch runtime"

rank() {
    i=0
    for r in $ORDER; do
        [ "$r" = "$1" ] && { echo $i; return; }
        i=$((i + 1))
    done
    echo -1
}

bad=0
for f in $(find engine -name '*.[ch]' | sort); do
    room=${f#engine/}
    room=${room%%/*}
    own=$(rank "$room")
    if [ "$own" -lt 0 ]; then
        echo "$f: engine/$room/ is not a room of engine/README.md's order ($ORDER)"
        bad=1
        continue
    fi
    grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" | while IFS= read -r line; do
        inc=$(printf '%s\n' "$line" | sed 's/^[^"]*"\([^"]*\)".*/\1/')
        case "$inc" in
        engine/*/*)
            r=${inc#engine/}
            r=${r%%/*}
            k=$(rank "$r")
            if [ "$k" -lt 0 ] || [ "$k" -gt "$own" ]; then
                echo "$f:${line%%:*}: $room/ includes $inc: upward (order: $ORDER)"
            fi ;;
        store/* | fs/*)
            echo "$f:${line%%:*}: $room/ includes $inc: the engine includes nothing above it" ;;
        *)
            echo "$f:${line%%:*}: include \"$inc\" does not name its room (\"engine/<room>/<file>\")"
            ;;
        esac
    done | grep . && bad=1
done
for f in $(find store -name '*.[ch]' | sort); do
    grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"engine/' "$f" |
        grep -v '"engine/runtime/checkpoint_port.h"\|"engine/base/hash.h"' |
        sed "s|^|$f:|; s|\$|: store/ includes of the engine only checkpoint_port.h and base/hash.h|"
done | grep . && bad=1
[ $bad -eq 0 ] && echo "rooms: every include in engine/ goes downwards ($ORDER); store/ uses only the port"
exit $bad
