#!/bin/sh
# Runs every benchmark script bench/*.sh (except this one), in name order. Each prints its
# own results; synthetic models are made once and cached under $BUILD/bench. Run through
# `make bench`. Other benchmarks (cache, concurrency) plug in by adding a script here.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export BUILD
mkdir -p "$BUILD/bench"
failed=0
for b in bench/*.sh; do
    [ "$b" = bench/run.sh ] && continue
    echo "== $b"
    if ! sh "$b"; then
        echo "FAILED: $b"
        failed=$((failed + 1))
    fi
done
[ "$failed" -eq 0 ]
