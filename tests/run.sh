#!/bin/sh
# Runs every test: the C test programs built into $BUILD/tests, then the shell
# tests tests/t_*.sh (end-to-end: command line, filesystem). Exit status is the
# number of failed tests (0 = all passed). Run through `make test`.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export BUILD
failed=0
ran=0
for t in "$BUILD"/tests/test_*; do
    case "$t" in *.o|*.d) continue ;; esac
    [ -x "$t" ] || continue
    ran=$((ran + 1))
    if ! "$t"; then
        echo "FAILED: $t"
        failed=$((failed + 1))
    fi
done
for t in tests/t_*.sh; do
    [ -f "$t" ] || continue
    ran=$((ran + 1))
    if ! sh "$t"; then
        echo "FAILED: $t"
        failed=$((failed + 1))
    fi
done
echo "$ran tests, $failed failed"
[ "$failed" -eq 0 ]
