#!/bin/sh
# Installs the Debian packages chatfs needs (.ci/packages) when some are missing:
# apt-get as root, or through sudo. Quiet and quick when everything is there.
set -eu
cd "$(dirname "$0")/.."
# what installed packages provide counts too (nodesource's nodejs provides npm, and
# conflicts with Debian's)
provided=$(dpkg-query -W -f='${db:Status-Abbrev} ${Provides}\n' 2>/dev/null | awk '$1 == "ii" { $1 = ""; print }' |
           tr ',' '\n' | sed 's/(.*)//; s/[[:space:]]//g')
missing=""
for p in $(cat .ci/packages); do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        printf '%s\n' "$provided" | grep -qx "$p" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "chatfs: installing Debian packages:$missing"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "chatfs: need root or sudo to install:$missing" >&2; exit 1; }
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq $missing >/dev/null
