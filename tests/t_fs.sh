#!/bin/sh
# The filesystem end to end with the real tools (echo, cat, vim, nano, emacs, cp, rsync,
# tar, git, tail -f, Python's select/epoll): see tests/fs_e2e.py.
cd "$(dirname "$0")/.."
if [ ! -e /dev/fuse ] || ! command -v fusermount3 >/dev/null; then
    echo "t_fs: FAIL: needs /dev/fuse and fusermount3 (package fuse3)"
    exit 1
fi
exec nice python3 tests/fs_e2e.py "$@"
