#!/bin/sh
# chatfs over a real llama-server (the remote engine, fs/backend_remote.c): builds
# llama-server from the pinned llama.cpp source on first use (tests/remote/llama-server.sh,
# cached under ~/.cache/chatfs; 10-25 minutes on 2 cores the first time), then runs
# tests/remote_e2e.py, which starts its servers on 127.0.0.1 and mounts against them.
cd "$(dirname "$0")/.."
if [ ! -e /dev/fuse ] || ! command -v fusermount3 >/dev/null; then
    echo "t_remote: FAIL: needs /dev/fuse and fusermount3 (package fuse3)"
    exit 1
fi
LLAMA_SERVER=$(tests/remote/llama-server.sh) || { echo "t_remote: FAIL: cannot build llama-server"; exit 1; }
export LLAMA_SERVER
exec nice python3 tests/remote_e2e.py "$@"
