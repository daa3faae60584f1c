#!/bin/sh
# t_vision.sh - images through the command line: `chatfs run --image` on the tiny Qwen3.5
# model with the tiny projector (tests/fixtures/vision/) gives llama.cpp's mtmd results
# (the last logits within 1e-4, the greedy tokens equal) for a raw prompt with a
# <__media__> marker and for --chat; the projector beside the model is found by itself;
# `chatfs info` describes a projector; and the refusals say why, exit status 1: no
# projector, another model's projector, a text file as an image, a truncated JPEG, more
# images than places.
set -u
cd "$(dirname "$0")/.."
CHATFS=./chatfs
FX=tests/fixtures
V=$FX/vision
TMP=tests/tmp/t_vision.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
failed=0
fail() {
    echo "FAIL t_vision: $*"
    failed=$((failed + 1))
}
has() {
    case "$1" in *"$2"*) return 0 ;; esac
    return 1
}
MODEL=$FX/qwen35-tiny-f32.gguf
PROMPT='<|im_start|>user
What is in <__media__> this picture?<|im_end|>
<|im_start|>assistant
'
RUN="$CHATFS run -m $MODEL --mmproj $V/mmproj-tiny-f32.gguf -ctk f32 -ctv f32 -t 2"
# the greedy tokens mtmd gave (fixture JSON) and the logits within 1e-4
for img in grad-97x61.png wide-640x37.jpg dots-100x90.png; do
    name=${img%.*}
    want=$(sed -n 's/.*"greedy":\[\([0-9,]*\)\].*/\1/p' "$V/$name.json" | tr ',' ' ')
    out=$($RUN --image "$V/$img" -p "$PROMPT" -n 8 --ids --dump-logits "$TMP/$name.f32" 2>&1) ||
        { fail "$img: run exited $?: $out"; continue; }
    got=$(printf '%s\n' "$out" | sed -n 's/^generated: //p')
    [ "$got" = "$want" ] || fail "$img: generated '$got', llama.cpp '$want'"
    has "$out" "[image " || fail "$img: the prompt line does not show the image: $out"
    python3 - "$TMP/$name.f32" "$V/$name.logits.f32" <<'PY' || fail "$img: logits differ from llama.cpp's"
import struct, sys
a, b = (open(p, "rb").read() for p in sys.argv[1:3])
x, y = struct.unpack("%df" % (len(a) // 4), a), struct.unpack("%df" % (len(b) // 4), b)
worst = max(abs(p - q) for p, q in zip(x, y)) if len(x) == len(y) else 1e9
sys.exit(0 if worst <= 1e-4 else 1)
PY
done
# --chat: the image goes before the message's text and Qwen3.5's own template (from
# llama.cpp's tree, put into a copy of the tiny model) writes its markers: the same tokens
# as the raw prompt with the marker in that place
SRC=$(tools/llama-cpp-src.sh)
python3 tests/jinja/gguf_set_template.py "$MODEL" "$SRC/models/templates/Qwen3.5-4B.jinja" "$TMP/q35.gguf" > /dev/null ||
    fail "could not give the tiny model Qwen3.5's template"
chat=$($CHATFS run -m "$TMP/q35.gguf" --mmproj "$V/mmproj-tiny-f32.gguf" -ctk f32 -ctv f32 --chat \
    --image "$V/grad-97x61.png" -p "What is this?" -n 4 --ids 2>&1) || fail "--chat with an image exited $?: $chat"
raw=$($CHATFS run -m "$TMP/q35.gguf" --mmproj "$V/mmproj-tiny-f32.gguf" -ctk f32 -ctv f32 --image "$V/grad-97x61.png" \
    -p '<|im_start|>user
<__media__>What is this?<|im_end|>
<|im_start|>assistant
<think>
' -n 4 --ids 2>&1)
has "$chat" "[image 4x3]" || fail "--chat: no image in the prompt: $chat"
[ "$chat" = "$raw" ] || fail "--chat and the raw prompt differ: $chat / $raw"
# the projector beside the model, found without --mmproj
cp "$MODEL" "$TMP/model.gguf" && cp "$V/mmproj-tiny-f32.gguf" "$TMP/mmproj-model.gguf"
out=$($CHATFS run -m "$TMP/model.gguf" --image "$V/grad-97x61.png" -p "$PROMPT" -n 8 --ids -ctk f32 -ctv f32 2>&1)
want=$(sed -n 's/.*"greedy":\[\([0-9,]*\)\].*/\1/p' "$V/grad-97x61.json" | tr ',' ' ')
[ "$(printf '%s\n' "$out" | sed -n 's/^generated: //p')" = "$want" ] || fail "mmproj beside the model: $out"
# info on a projector
out=$($CHATFS info "$V/mmproj-tiny-f32.gguf" 2>&1) || fail "info on a projector exited $?"
has "$out" "projector:     qwen3vl_merger (vision)" || fail "info: $out"
has "$out" "merger:        2 x 2 patches into one embedding of width 64" || fail "info merger line: $out"
# refusals
refused() { # refused WHAT NEEDLE CMD...: exit status 1 and NEEDLE in the one error line
    what=$1 needle=$2
    shift 2
    out=$("$@" 2>&1)
    st=$?
    [ $st -eq 1 ] || fail "$what: exit status $st, not 1: $out"
    has "$out" "$needle" || fail "$what: '$needle' not in: $out"
}
refused "no projector" "no vision projector for the images" \
    $CHATFS run -m "$MODEL" --image "$V/grad-97x61.png" -p "$PROMPT" -n 1
$CHATFS synth --mmproj tiny --n-embd 32 --type f32 --out "$TMP/mm32.gguf" -q
refused "another model's projector" "another model's projector" \
    $CHATFS run -m "$MODEL" --mmproj "$TMP/mm32.gguf" --image "$V/grad-97x61.png" -p "$PROMPT" -n 1
printf 'not a picture\n' > "$TMP/text.png"
refused "a text file" "not an image stb_image decodes" $RUN --image "$TMP/text.png" -p "$PROMPT" -n 1
head -c 2000 "$V/wide-640x37.jpg" > "$TMP/cut.jpg"
refused "a truncated JPEG" "cannot be decoded" $RUN --image "$TMP/cut.jpg" -p "$PROMPT" -n 1
refused "two images, one place" "1 places for images and 2 were given" \
    $RUN --image "$V/grad-97x61.png" --image "$V/dots-100x90.png" -p "$PROMPT" -n 1
[ "$failed" -eq 0 ] && echo "t_vision.sh                  ok" || echo "t_vision.sh                  FAIL ($failed)"
[ "$failed" -eq 0 ]
