#!/bin/sh
# bench/vision_followup.sh - a follow-up question about an image (issue "Vision"): the time
# to first token of the second question, chatfs's mount against llama-server on the same
# files, same threads. chatfs restores the checkpoint after the first turn (the image is
# in it); llama-server re-encodes the image and recomputes the prompt (a hybrid model's
# cache cannot be cut back to the image: llama.cpp issue #26994).
#   model:     chatfs synth --shape qwen3.5-0.8b --type q8_0 (Qwen3.5-0.8B's shape)
#   projector: chatfs synth --mmproj qwen3.5-35b-a3b --n-embd 1024 --type f16 (Qwen3.5's
#              vision encoder, its output the 0.8B's width)
#   image:     a W x H photograph-like PNG (tests/fixtures/vision/images.py photo)
#   chatfs:    a mount; the first question, then the follow-up; ttft_ms from usage.json
#   llama.cpp: llama-server --mmproj (tests/remote/llama-server.sh), the same two requests
#              through /v1/chat/completions with max_tokens 1: the time to the reply
# Settings: W=1024 H=768 THREADS=2
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
W=${W:-1024}
H=${H:-768}
THREADS=${THREADS:-2}
make --no-print-directory chatfs >&2
mkdir -p "$BUILD/bench"
model="$BUILD/bench/qwen3.5-0.8b-q8_0.gguf"
[ -f "$model" ] || ./chatfs synth --shape qwen3.5-0.8b --type q8_0 --out "$model" >&2
mmproj="$BUILD/bench/mmproj-qwen3.5-35b-a3b-f16-e1024.gguf"
[ -f "$mmproj" ] || ./chatfs synth --mmproj qwen3.5-35b-a3b --n-embd 1024 --type f16 --out "$mmproj" >&2
image="$BUILD/bench/photo-${W}x$H.png"
[ -f "$image" ] || python3 tests/fixtures/vision/images.py photo "$W" "$H" "$image"
SERVER=$(tests/remote/llama-server.sh)
TMP=$(mktemp -d)
M="$TMP/mnt"
mkdir -p "$M"
cleanup() {
    fusermount3 -u "$M" 2>/dev/null || true
    [ -f "$TMP/server/pid" ] && kill "$(cat "$TMP/server/pid")" 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT
Q1="What is in this picture?"
Q2="What colours does it have?"

# chatfs: the template places the image before the question, as Qwen3.5's does
./chatfs mount "$M" -m "$model" --mmproj "$mmproj" --db "$TMP/db" -t "$THREADS" >&2
mkdir "$M/c"
python3 - "$M/c/settings.json" <<'PY'
import json, sys
t = ("{%- for m in messages -%}<|im_start|>{{ m.role + '\\n' }}"
     "{%- if m.content is string %}{{ m.content }}{% else %}"
     "{%- for p in m.content %}{% if p.type == 'image' %}{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
     "{% else %}{{ p.text }}{% endif %}{% endfor %}{% endif %}{{ '<|im_end|>\\n' }}{% endfor -%}"
     "{{ '<|im_start|>assistant\\n' }}")
s = json.load(open(sys.argv[1]))
s.update(chat_template=t, max_tokens=1, temperature=0)
open(sys.argv[1], "w").write(json.dumps(s))
PY
cp "$image" "$M/c/attachments/"
ttft() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["last_prompt"]["ttft_ms"])' "$M/c/usage.json"; }
echo "$Q1" >"$M/c/message"; cat "$M/c/reply" >/dev/null
c1=$(ttft)
echo "$Q2" >"$M/c/message"; cat "$M/c/reply" >/dev/null
c2=$(ttft)
status=$(cat "$M/c/status")
a1=$(cat "$M/c/turns/002-assistant.md")
fusermount3 -u "$M"

# llama-server: the same two requests
mkdir -p "$TMP/server"
url=$(MODEL="$model" LLAMA_SERVER="$SERVER" SLOTS=1 tests/remote/start-server.sh "$TMP/server" --mmproj "$mmproj" \
      -t "$THREADS" | tail -1)
python3 - "$url" "$image" "$Q1" "$Q2" "$a1" "$c1" "$c2" "$status" "${W}x$H" <<'PY'
import base64, json, sys, time, urllib.request
url, image, q1, q2, a1, c1, c2, status, size = sys.argv[1:]
data = "data:image/png;base64," + base64.b64encode(open(image, "rb").read()).decode()
user1 = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": data}}, {"type": "text", "text": q1}]}
def ask(messages):
    body = json.dumps({"messages": messages, "max_tokens": 1, "temperature": 0}).encode()
    t = time.monotonic()
    r = urllib.request.urlopen(urllib.request.Request(url + "/chat/completions", body, {"Content-Type": "application/json"}), timeout=3600)
    out = json.load(r)
    return (time.monotonic() - t) * 1e3, out
l1, r1 = ask([user1])
l2, _ = ask([user1, {"role": "assistant", "content": a1.rstrip("\n")}, {"role": "user", "content": q2}])
c1, c2 = float(c1), float(c2)
print(json.dumps({"image": size, "chatfs_first_ttft_ms": round(c1, 1), "chatfs_followup_ttft_ms": round(c2, 1),
                  "llama_first_ms": round(l1, 1), "llama_followup_ms": round(l2, 1),
                  "followup_ratio": round(c2 / l2, 4), "chatfs_status": status.strip()}))
PY
