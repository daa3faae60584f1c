#!/bin/sh
# Chat templates: chatfs's Jinja interpreter (engine/jinja/) against python-jinja2 configured
# as Hugging Face's apply_chat_template, on every template in llama.cpp's models/templates/
# over the conversations tests/jinja/conv_*.json (tests/jinja/parity.py); the templates of
# the supported architectures' models must render identically, and so must the small
# templates of tests/jinja/cases.json (the language, case by case). Then the benchmark: the
# boundary search's two renders of a 50-turn conversation with the Qwen3.5 template must
# take under 2 ms (checked in the optimised build only).
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BIN=$BUILD/tests/jinja_render
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3  # Debian's, with python3-jinja2
$PY -c 'import jinja2' 2>/dev/null || { echo "t_jinja: python3-jinja2 is missing (apt-get install python3-jinja2)"; exit 1; }
SRC=$(tools/llama-cpp-src.sh) || { echo "t_jinja: llama.cpp's source is not available (tools/llama-cpp-src.sh)"; exit 1; }
TEMPLATES=$SRC/models/templates

$PY tests/jinja/parity.py --binary "$BIN" --templates "$TEMPLATES" \
    --must 'Qwen3.5-*' --must 'Qwen-Qwen3-*' --must 'Qwen-Qwen2.5-*' --must 'Qwen3-Coder*' --must 'NVIDIA-Nemotron-*' \
    --must 'LFM2*' --must 'ibm-granite-granite-4.*' --must 'meta-llama-Llama-3.*' \
    --cases tests/jinja/cases.json tests/jinja/conv_*.json

line=$("$BIN" --bench "$TEMPLATES/Qwen3.5-4B.jinja" 50 300)
echo "jinja bench (Qwen3.5-4B.jinja): $line"
if [ "$BUILD" = build ]; then
    ms=${line%% ms*}
    awk -v ms="$ms" 'BEGIN { exit !(ms < 2.0) }' || { echo "t_jinja: FAIL: the boundary search takes $ms ms (limit 2 ms)"; exit 1; }
fi
