#!/bin/sh
# Prints the path of mtmd_ref (tests/vision/mtmd_ref.c) linked against llama.cpp's mtmd
# library, built from the release tools/llama-cpp-src.sh extracts, building it on first
# use. Only tests/fixtures/vision/make.sh needs it: the tests read the files it wrote.
#
# CPU only, static libraries, no network; -march=native (GGML_NATIVE), so the cache key
# holds the CPU's feature flags as well as the source commit and the build flags.
# Cache: $CHATFS_CACHE (default ~/.cache/chatfs)/mtmd-ref-<commit>-<key>/mtmd_ref.
# About 10 minutes on 2 cores the first time. JOBS (default 2) sets the parallelism.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$("$HERE/../../tools/llama-cpp-src.sh")
CACHE=${CHATFS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/chatfs}
COMMIT=$(cat "$SRC/.commit")
FLAGS="-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON
-DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_OPENMP=ON -DGGML_BLAS=OFF
-DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF
-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF
-DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_COMMON=ON"
CPU=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
KEY=$(printf '%s\n%s\n%s\n%s\n' "$FLAGS" "$CPU" "$(cc --version | head -n1)" \
      "$(cat "$HERE/mtmd_ref.c")" | sha256sum | cut -c1-12)
OUT=$CACHE/mtmd-ref-$(echo "$COMMIT" | cut -c1-12)-$KEY
if [ -x "$OUT/mtmd_ref" ]; then echo "$OUT/mtmd_ref"; exit 0; fi

command -v cmake >/dev/null || { echo "mtmd-ref.sh: cmake is missing (apt-get install cmake)" >&2; exit 1; }
mkdir -p "$CACHE"
exec 9>"$OUT.lock"
flock 9
if [ -x "$OUT/mtmd_ref" ]; then echo "$OUT/mtmd_ref"; exit 0; fi
# the libraries do not depend on mtmd_ref.c: one build tree per release and flags
LIBKEY=$(printf '%s\n%s\n' "$FLAGS" "$CPU" | sha256sum | cut -c1-12)
BUILD_DIR=$CACHE/mtmd-build-$(echo "$COMMIT" | cut -c1-12)-$LIBKEY
echo "mtmd-ref.sh: building llama.cpp's mtmd ($COMMIT) in $BUILD_DIR; about 10 minutes" >&2
# shellcheck disable=SC2086  # FLAGS is a list of words
cmake -S "$SRC" -B "$BUILD_DIR" $FLAGS >"$OUT.log" 2>&1 ||
    { tail -n 30 "$OUT.log" >&2; echo "mtmd-ref.sh: cmake configure failed, see $OUT.log" >&2; exit 1; }
cmake --build "$BUILD_DIR" --target mtmd -j "${JOBS:-2}" >>"$OUT.log" 2>&1 ||
    { tail -n 30 "$OUT.log" >&2; echo "mtmd-ref.sh: build failed, see $OUT.log" >&2; exit 1; }
mkdir -p "$OUT.part"
LIBS=$(find "$BUILD_DIR" -name 'lib*.a' | sort)
# shellcheck disable=SC2086  # LIBS is a list of paths
c++ -O2 -x c "$HERE/mtmd_ref.c" -x none -I"$SRC/include" -I"$SRC/ggml/include" -I"$SRC/tools/mtmd" \
    -Wl,--start-group $LIBS -Wl,--end-group -fopenmp -lpthread -lm -o "$OUT.part/mtmd_ref" >>"$OUT.log" 2>&1 ||
    { tail -n 30 "$OUT.log" >&2; echo "mtmd-ref.sh: linking mtmd_ref failed, see $OUT.log" >&2; exit 1; }
echo "$COMMIT" > "$OUT.part/commit"
rm -rf "$OUT" && mv "$OUT.part" "$OUT"
echo "$OUT/mtmd_ref"
