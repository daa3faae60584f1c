#!/bin/sh
# `chatfs ask` and the mount on one conversation store, end to end with a mount (a fake
# engine) and the real tools: see tests/ask_e2e.py (ask without a mount: tests/t_cli.sh).
cd "$(dirname "$0")/.."
if [ ! -e /dev/fuse ] || ! command -v fusermount3 >/dev/null; then
    echo "t_ask: FAIL: needs /dev/fuse and fusermount3 (package fuse3)"
    exit 1
fi
exec nice python3 tests/ask_e2e.py "$@"
