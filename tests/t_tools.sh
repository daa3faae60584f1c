#!/bin/sh
# Tool calls as files end to end (tools.json, calls/ID/, tool turns, messages.json) on the
# bundled model through a real mount: see tests/tools_e2e.py. Debian's python3, which has
# python3-jsonschema.
cd "$(dirname "$0")/.."
if [ ! -e /dev/fuse ] || ! command -v fusermount3 >/dev/null; then
    echo "t_tools: FAIL: needs /dev/fuse and fusermount3 (package fuse3)"
    exit 1
fi
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
$PY -c 'import jsonschema' 2>/dev/null || { echo "t_tools: FAIL: python3-jsonschema is missing"; exit 1; }
exec nice $PY tests/tools_e2e.py "$@"
