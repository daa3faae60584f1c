#!/bin/sh
# Structured output end to end (settings.json's response_format and grammar, ask and run
# --json-schema) on the bundled model: see tests/structured_e2e.py. Debian's python3,
# which has python3-jsonschema.
cd "$(dirname "$0")/.."
if [ ! -e /dev/fuse ] || ! command -v fusermount3 >/dev/null; then
    echo "t_structured: FAIL: needs /dev/fuse and fusermount3 (package fuse3)"
    exit 1
fi
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
$PY -c 'import jsonschema' 2>/dev/null || { echo "t_structured: FAIL: python3-jsonschema is missing"; exit 1; }
exec nice $PY tests/structured_e2e.py "$@"
