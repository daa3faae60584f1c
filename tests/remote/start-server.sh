#!/bin/sh
# Starts llama-server (tests/remote/llama-server.sh builds it) on 127.0.0.1 at a free
# port with the bundled default model, and waits until it answers. Prints the API's
# base URL (http://127.0.0.1:PORT/v1) for `chatfs mount --engine`.
#
#   tests/remote/start-server.sh DIR [llama-server options...]
#
# DIR gets pid (kill it to stop the server), port and log. Extra options go to
# llama-server after the defaults (e.g. --api-key KEY). MODEL overrides the model,
# SLOTS (default 4) the parallel slots, CTX (default 4096) the context they share, PORT
# a port to use instead of a free one.
# --jinja: the server renders the GGUF's own chat template, as chatfs does.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
[ $# -ge 1 ] || { echo "usage: $0 DIR [llama-server options...]" >&2; exit 2; }
DIR=$1
shift
mkdir -p "$DIR"
BIN=${LLAMA_SERVER:-$("$HERE/llama-server.sh")}
MODEL=${MODEL:-$ROOT/models/chatfs-default.gguf}
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
WANT_PORT=${PORT:-}
for attempt in 1 2 3; do
    PORT=${WANT_PORT:-$(free_port)}
    "$BIN" -m "$MODEL" --host 127.0.0.1 --port "$PORT" --jinja --no-webui \
        --alias "$(basename "$MODEL" .gguf)" -c "${CTX:-4096}" -np "${SLOTS:-4}" --kv-unified -t 2 "$@" \
        >"$DIR/log" 2>&1 &
    PID=$!
    echo "$PID" >"$DIR/pid"
    echo "$PORT" >"$DIR/port"
    # ready when /health says so (it answers 503 while the model loads)
    i=0
    while [ $i -lt 300 ]; do
        if ! kill -0 "$PID" 2>/dev/null; then break; fi
        code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health" 2>/dev/null || true)
        if [ "$code" = 200 ]; then
            echo "http://127.0.0.1:$PORT/v1"
            exit 0
        fi
        sleep 0.1
        i=$((i + 1))
    done
    kill "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
    if grep -q "bind\|address already in use" "$DIR/log" 2>/dev/null; then continue; fi # the port was taken meanwhile
    break
done
echo "start-server.sh: llama-server did not start; its log:" >&2
tail -n 20 "$DIR/log" >&2
exit 1
