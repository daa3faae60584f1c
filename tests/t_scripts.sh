#!/bin/sh
# What scripts meet, end to end with the real tools (bash's echo and cat, the sqlite3
# CLI holding the database): see tests/scripts_e2e.py.
cd "$(dirname "$0")/.."
if [ ! -e /dev/fuse ] || ! command -v fusermount3 >/dev/null; then
    echo "t_scripts: FAIL: needs /dev/fuse and fusermount3 (package fuse3)"
    exit 1
fi
if ! command -v sqlite3 >/dev/null; then
    echo "t_scripts: FAIL: needs the sqlite3 command (package sqlite3)"
    exit 1
fi
exec nice python3 tests/scripts_e2e.py "$@"
