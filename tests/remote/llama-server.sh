#!/bin/sh
# Prints the path of a llama-server binary built from the llama.cpp source that
# tools/llama-cpp-src.sh extracts (node-llama-cpp's pinned release), building it on first
# use: the remote-engine tests (tests/t_remote.sh) run chatfs against it.
#
# CPU only, no network at build time (no prebuilt web UI download, no OpenSSL: the tests
# talk plain HTTP on 127.0.0.1; this release has no LLAMA_CURL any more, its model
# downloads went to cpp-httplib, which needs OpenSSL for https), one static binary, only
# the llama-server target.
# -march=native (GGML_NATIVE) keeps it fast enough for the tests, so the cache key holds
# the CPU's feature flags as well as the source commit and the build flags: a cached
# binary is never run on a CPU it was not built for.
#
# Cache: $CHATFS_CACHE (default ~/.cache/chatfs)/llama-server-<commit>-<key>/llama-server.
# About 10-15 minutes on 2 cores the first time; later runs print the cached path at once.
# JOBS (default 2) sets the build's parallelism.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$("$HERE/../../tools/llama-cpp-src.sh")
CACHE=${CHATFS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/chatfs}
COMMIT=$(cat "$SRC/.commit")
FLAGS="-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON
-DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_OPENMP=ON -DGGML_BLAS=OFF
-DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF
-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF
-DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_COMMON=ON"
CPU=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
KEY=$(printf '%s\n%s\n%s\n' "$FLAGS" "$CPU" "$(cc --version | head -n1)" | sha256sum | cut -c1-12)
OUT=$CACHE/llama-server-$(echo "$COMMIT" | cut -c1-12)-$KEY
if [ -x "$OUT/llama-server" ]; then echo "$OUT/llama-server"; exit 0; fi

command -v cmake >/dev/null || { echo "llama-server.sh: cmake is missing (apt-get install cmake)" >&2; exit 1; }
mkdir -p "$CACHE"
# One build at a time per cache entry: a second caller waits for the first.
exec 9>"$OUT.lock"
flock 9
if [ -x "$OUT/llama-server" ]; then echo "$OUT/llama-server"; exit 0; fi
BUILD_DIR=$OUT.build
echo "llama-server.sh: building llama-server ($COMMIT) in $BUILD_DIR; takes 10-15 minutes on 2 cores" >&2
# shellcheck disable=SC2086  # FLAGS is a list of words
cmake -S "$SRC" -B "$BUILD_DIR" $FLAGS >"$OUT.log" 2>&1 ||
    { tail -n 30 "$OUT.log" >&2; echo "llama-server.sh: cmake configure failed, see $OUT.log" >&2; exit 1; }
cmake --build "$BUILD_DIR" --target llama-server -j "${JOBS:-2}" >>"$OUT.log" 2>&1 ||
    { tail -n 30 "$OUT.log" >&2; echo "llama-server.sh: build failed, see $OUT.log" >&2; exit 1; }
mkdir -p "$OUT.part"
cp "$BUILD_DIR/bin/llama-server" "$OUT.part/llama-server"
echo "$COMMIT" > "$OUT.part/commit"
echo "$FLAGS" > "$OUT.part/flags"
rm -rf "$OUT" && mv "$OUT.part" "$OUT"
rm -rf "$BUILD_DIR"
echo "$OUT/llama-server"
