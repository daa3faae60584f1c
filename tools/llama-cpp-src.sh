#!/bin/sh
# Prints the path of llama.cpp's source tree at the release the npm package
# node-llama-cpp ships (its gitRelease.bundle), extracting it on first use.
#
# The tests use it for two things chatfs compares itself with: the chat templates in
# models/templates/ (rendering parity) and llama-server (the remote-engine tests build it,
# see tests/remote/). Nothing from it is copied into the repository.
#
# Cache: $CHATFS_CACHE (default ~/.cache/chatfs), so later runs skip the download.
# Needs npm (the machine's Node.js provides it; else Debian's npm package) and git; reaches
# only the npm registry.
set -eu
VERSION=3.22.1                                   # node-llama-cpp = llama.cpp release v0.5.0
CACHE=${CHATFS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/chatfs}
NPM_DIR=$CACHE/node-llama-cpp-$VERSION
SRC=$CACHE/llama.cpp-src-$VERSION
if [ -f "$SRC/.complete" ]; then echo "$SRC"; exit 0; fi
mkdir -p "$NPM_DIR"
BUNDLE=$NPM_DIR/node_modules/node-llama-cpp/llama/gitRelease.bundle
if [ ! -f "$BUNDLE" ]; then
    command -v npm >/dev/null || { echo "llama-cpp-src: npm is missing (apt-get install npm)" >&2; exit 1; }
    [ -f "$NPM_DIR/package.json" ] || echo '{"private": true}' > "$NPM_DIR/package.json"
    (cd "$NPM_DIR" && npm install --ignore-scripts --omit=optional --no-audit --no-fund --silent \
         "node-llama-cpp@$VERSION" >&2)
fi
[ -f "$BUNDLE" ] || { echo "llama-cpp-src: $BUNDLE not found after npm install" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
git init -q --bare "$TMP/git"
git --git-dir="$TMP/git" fetch -q "$BUNDLE" HEAD:refs/heads/release
rm -rf "$SRC.part" && mkdir -p "$SRC.part"
git --git-dir="$TMP/git" archive release | tar -x -C "$SRC.part"
git --git-dir="$TMP/git" rev-parse release > "$SRC.part/.commit"
touch "$SRC.part/.complete"
rm -rf "$SRC" && mv "$SRC.part" "$SRC"
echo "$SRC"
