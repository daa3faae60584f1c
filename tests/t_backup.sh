#!/bin/sh
# Whole-mount backups and the root's names, end to end with the real tools (tar, rsync,
# cp -a, git): see tests/backup_e2e.py.
cd "$(dirname "$0")/.."
if [ ! -e /dev/fuse ] || ! command -v fusermount3 >/dev/null; then
    echo "t_backup: FAIL: needs /dev/fuse and fusermount3 (package fuse3)"
    exit 1
fi
for tool in tar rsync git; do
    command -v $tool >/dev/null || { echo "t_backup: FAIL: needs $tool (Debian package $tool)"; exit 1; }
done
exec nice python3 tests/backup_e2e.py "$@"
