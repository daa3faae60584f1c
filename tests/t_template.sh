#!/bin/sh
# Models carrying the published chat templates of the supported architectures' models
# (llama.cpp's models/templates/, via tools/llama-cpp-src.sh), made at test time from the
# tiny fixtures: `chatfs render` must give what Hugging Face's apply_chat_template gives
# (python3-jinja2), refuse what the template refuses with its message, and real runs on
# NVIDIA-Nemotron-3-Nano's template must reuse checkpoints exactly up to the message
# boundaries (tests/jinja/model_templates.py says what is checked).
set -eu
cd "$(dirname "$0")/.."
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3 # Debian's, with python3-jinja2
$PY -c 'import jinja2' 2>/dev/null || { echo "t_template: python3-jinja2 is missing (apt-get install python3-jinja2)"; exit 1; }
SRC=$(tools/llama-cpp-src.sh) || { echo "t_template: llama.cpp's source is not available (tools/llama-cpp-src.sh)"; exit 1; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
if $PY tests/jinja/model_templates.py --chatfs "${CHATFS:-./chatfs}" --templates "$SRC/models/templates" \
    --fixtures tests/fixtures --work "$WORK"; then
    echo "t_template.sh                ok"
else
    echo "t_template.sh                FAIL"
    exit 1
fi
