#!/bin/sh
# t_attachments.sh - images in conversations through a real mount: `cp photo NAME/attachments/`
# on the tiny Qwen3.5 model with the tiny projector (tests/fixtures/vision/). What is checked:
#  - the attachment reads back byte for byte, and the next message carries it: its prompt is
#    llama-mtmd-cli's length for that image (the fixture's chunks); it is read-only after;
#  - a follow-up reuses the image from a checkpoint (status "reused"), also after a remount;
#  - a truncated PNG, a text file named .png and a 30000 x 30000 PNG header are refused at the
#    close (EINVAL, the reason in error) and nothing is stored;
#  - two conversations holding the same image store its bytes once;
#  - a removed user turn puts its images back to wait for the next message;
#  - a user turn's file names its images, and saved back as it reads it changes nothing;
#  - chatfs ask --image, on the database and through the mount, gives mtmd's prompt too, and a
#    follow-up reuses the image; without a projector or with a cut PNG ask refuses;
#  - a mount without a projector refuses attachments with the reason (ENOTSUP).
set -u
cd "$(dirname "$0")/.."
if [ ! -e /dev/fuse ] || ! command -v fusermount3 >/dev/null; then
    echo "t_attachments: FAIL: needs /dev/fuse and fusermount3 (package fuse3)"
    exit 1
fi
CHATFS=$(pwd)/chatfs
FX=tests/fixtures
V=$FX/vision
TMP=$(pwd)/tests/tmp/t_attachments.$$
M=$TMP/mnt
mkdir -p "$M"
failed=0
fail() {
    echo "FAIL t_attachments: $*"
    failed=$((failed + 1))
}
has() {
    case "$1" in *"$2"*) return 0 ;; esac
    return 1
}
umount_all() { fusermount3 -u "$M" 2>/dev/null; sleep 0.2; }
trap 'umount_all; rm -rf "$TMP"' EXIT
mount_it() { # extra options...
    "$CHATFS" mount "$M" -m $FX/qwen35-tiny-f32.gguf --db "$TMP/db" -t 2 -ctk f32 -ctv f32 "$@" >"$TMP/mount.out" 2>&1 ||
        { fail "mount $*: $(cat "$TMP/mount.out")"; exit 1; }
}
PROJ="--mmproj $V/mmproj-tiny-f32.gguf"
# a template that writes test_vision's fixture prompt (the image inside "What is in ... this picture?")
python3 - "$TMP/settings.py" <<'PY'
import sys
open(sys.argv[1], "w").write(r'''
import json, sys
t = ("{%- for m in messages -%}<|im_start|>{{ m.role + '\\n' }}"
     "{%- if m.content is string %}{{ m.content }}{% else %}{{ 'What is in' }}"
     "{%- for p in m.content %}{% if p.type == 'image' %}{{ ' <|vision_start|><|image_pad|><|vision_end|>' }}"
     "{% else %}{{ ' ' + p.text }}{% endif %}{% endfor %}{% endif %}{{ '<|im_end|>\\n' }}{% endfor -%}"
     "{{ '<|im_start|>assistant\\n' }}")
p = sys.argv[1]
s = json.load(open(p))
s.update(chat_template=t, max_tokens=8, temperature=0)
open(p, "w").write(json.dumps(s))
''')
PY
setup() { # conversation
    mkdir "$M/$1" && python3 "$TMP/settings.py" "$M/$1/settings.json" || fail "$1: settings.json: $(cat "$M/$1/error")"
}
ask() { # conversation message -> the reply read whole
    echo "$2" >"$M/$1/message" || fail "$1: the message '$2' was not sent: $(cat "$M/$1/error")"
    cat "$M/$1/reply" >/dev/null || fail "$1: the reply to '$2' failed: $(cat "$M/$1/status")"
}
prompt_of() { sed -n 's/.*reused [0-9]*\/\([0-9]*\).*/\1/p' "$M/$1/status"; }
reused_of() { sed -n 's/.*reused \([0-9]*\)\/.*/\1/p' "$M/$1/status"; }

mount_it $PROJ
setup a
cp $V/noise-131x91.png "$M/a/attachments/" || fail "cp into attachments/: $(cat "$M/a/error")"
cmp -s $V/noise-131x91.png "$M/a/attachments/noise-131x91.png" || fail "the attachment does not read back as written"
ask a "this picture?"
# mtmd's prompt for this image: its text chunks and 12 rows (the fixture)
want=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(sum(len(c["text"]) if "text" in c else c["image_tokens"] for c in j["chunks"]))' $V/noise-131x91.json)
[ "$(prompt_of a)" = "$want" ] || fail "the message with the image has a prompt of $(prompt_of a) tokens, mtmd's $want: $(cat "$M/a/status")"
ls -l "$M/a/attachments/noise-131x91.png" | grep -q '^-r--r--r--' || fail "a sent attachment is not read-only: $(ls -l "$M/a/attachments")"
rm "$M/a/attachments/noise-131x91.png" 2>/dev/null && fail "a sent attachment was removed"
has "$(cat "$M/a/error")" "went with turn 1" || fail "the refused removal says: $(cat "$M/a/error")"
has "$(cat "$M/a/transcript.md")" "> image attachments/noise-131x91.png (47853 bytes)" ||
    fail "transcript.md does not name the image: $(head -5 "$M/a/transcript.md")"
# the turn file names its image before its text; saved back as it reads, nothing changes
want_turn=$(printf '> image attachments/noise-131x91.png (47853 bytes)\n\nthis picture?')
[ "$(cat "$M/a/turns/001-user.md")" = "$want_turn" ] || fail "turns/001-user.md: $(cat "$M/a/turns/001-user.md")"
before=$(cat "$M/a/status")
cat "$M/a/turns/001-user.md" >"$TMP/turn.md" && cat "$TMP/turn.md" >"$M/a/turns/001-user.md" ||
    fail "the turn file saved back: $(cat "$M/a/error")"
[ "$(cat "$M/a/status")" = "$before" ] && [ "$(cat "$M/a/turns/001-user.md")" = "$want_turn" ] ||
    fail "a turn saved back unchanged changed something: $(cat "$M/a/status") / $(cat "$M/a/turns/001-user.md")"
ask a "And its colours?"
r=$(reused_of a)
[ "${r:-0}" -gt "$want" ] || fail "the follow-up reused ${r:-0} tokens, not the image's turn ($want): $(cat "$M/a/status")"

# bad images: refused at the close, nothing stored
head -c 400 $V/noise-131x91.png >"$TMP/cut.png"
echo 'not an image' >"$TMP/text.png"
python3 - "$TMP/huge.png" <<'PY'
import struct, sys, zlib
def chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
open(sys.argv[1], "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 30000, 30000, 8, 2, 0, 0, 0)) +
                              chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))
PY
for f in cut.png text.png huge.png; do
    out=$(cp "$TMP/$f" "$M/a/attachments/" 2>&1) && fail "$f was taken"
    has "$out" "Invalid argument" || fail "$f: cp says '$out', not EINVAL"
    [ -e "$M/a/attachments/$f" ] && fail "$f is left in attachments/"
    [ -s "$M/a/error" ] || fail "$f: error is empty"
done
has "$(cat "$M/a/error")" "pixels" || fail "the huge PNG's reason: $(cat "$M/a/error")"

# the same image in a second conversation: stored once
setup b
cp $V/noise-131x91.png "$M/b/attachments/photo.png" || fail "cp into b: $(cat "$M/b/error")"
ask b "this picture?"
# a removed user turn's image waits for the next message again
rm "$M/b/turns/001-user.md" || fail "rm of b's first turn"
ls -l "$M/b/attachments/photo.png" | grep -q '^-rw-r--r--' || fail "b's image does not wait again: $(ls -l "$M/b/attachments")"
ask b "this picture?"
[ "$(prompt_of b)" = "$want" ] || fail "b's new message does not carry the image: $(cat "$M/b/status")"
umount_all
n=$(python3 -c 'import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print(c.execute("select count(*) from image").fetchone()[0], c.execute("select count(*) from conversation_attachment").fetchone()[0])' "$TMP/db")
[ "$n" = "1 2" ] || fail "images, attachments in the database: $n (want 1 2)"

# after a remount: the attachment is there and the follow-up restores from disk
mount_it $PROJ
cmp -s $V/noise-131x91.png "$M/a/attachments/noise-131x91.png" || fail "after a remount the attachment differs"
ask a "Once more?"
has "$(cat "$M/a/status")" "reused" || fail "after a remount: $(cat "$M/a/status")"
r=$(reused_of a)
[ "${r:-0}" -gt "$want" ] || fail "after a remount the follow-up reused ${r:-0} tokens: $(cat "$M/a/status")"
# messages.json exports the image as a data: URL and imports it back: a copy of the history
python3 - "$M/a/messages.json" $V/noise-131x91.png <<'PY' || fail "messages.json does not carry the image"
import base64, json, sys
m = json.load(open(sys.argv[1]))
part = m[0]["content"][0]
url = part["image_url"]["url"]
assert part["type"] == "image_url" and url.startswith("data:image/png;base64,"), part["type"]
assert base64.b64decode(url.split(",", 1)[1]) == open(sys.argv[2], "rb").read()
assert m[0]["content"][1] == {"type": "text", "text": "this picture?"}, m[0]["content"][1]
PY
mkdir "$M/d" && cp "$M/a/messages.json" "$M/d/messages.json" || fail "import into d: $(cat "$M/d/error")"
cmp -s $V/noise-131x91.png "$M/d/attachments/001-1.png" || fail "the import did not bring the image: $(ls "$M/d/attachments")"
cmp -s "$M/a/messages.json" "$M/d/messages.json" || fail "d's messages.json differs from a's"
python3 "$TMP/settings.py" "$M/d/settings.json"
ask d "And one more?"
r=$(reused_of d)
[ "${r:-0}" -gt "$want" ] || fail "the imported conversation reused ${r:-0} tokens: $(cat "$M/d/status")"
mkdir "$M/e"
printf '[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "/etc/hostname"}}, {"type": "text", "text": "hi"}]}]\n' >"$TMP/path.json"
cp "$TMP/path.json" "$M/e/messages.json" 2>/dev/null && fail "an image by file path was imported"
has "$(cat "$M/e/error")" "data: URL" || fail "the refused path says: $(cat "$M/e/error")"
[ -z "$(ls "$M/e/turns")" ] || fail "the refused import left turns: $(ls "$M/e/turns")"
umount_all

# chatfs ask --image: without a mount (the database directly) and through one
mount_it $PROJ
setup f
setup g
umount_all
js() { printf '%s' "$2" | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())[sys.argv[1]])' "$1"; }
# the tiny model's 8 tokens: exit status 2 (-n cut the reply) is a reply
ask_ok() { "$@"; rc=$?; [ $rc = 0 ] || [ $rc = 2 ]; }
ASK="$CHATFS ask -m $FX/qwen35-tiny-f32.gguf --db $TMP/db -t 2 -ctk f32 -ctv f32 -n 8 --json"
out=$(ask_ok $ASK $PROJ --conversation f --image $V/noise-131x91.png "this picture?") || fail "ask --image: $out"
[ "$(js prompt_tokens "$out")" = "$want" ] || fail "ask --image: the prompt is not mtmd's $want tokens: $out"
out=$(ask_ok $ASK $PROJ --conversation f "And its colours?") || fail "ask after the image: $out"
[ "$(js reused_tokens "$out")" -gt "$want" ] || fail "ask's follow-up did not reuse the image: $out"
out=$($ASK --conversation g --image $V/noise-131x91.png "this picture?" 2>&1) && fail "ask --image without a projector ran"
has "$out" "mmproj" || fail "ask --image without a projector says: $out"
head -c 400 $V/noise-131x91.png >"$TMP/cut.png"
out=$($ASK $PROJ --conversation g --image "$TMP/cut.png" "this picture?" 2>&1) && fail "ask took a cut PNG"
has "$out" "Invalid argument" || fail "ask --image of a cut PNG says: $out"
mount_it $PROJ
cmp -s $V/noise-131x91.png "$M/f/attachments/noise-131x91.png" || fail "ask's image is not in f/attachments/"
has "$(cat "$M/f/turns/001-user.md")" "> image attachments/noise-131x91.png" || fail "f's turn: $(cat "$M/f/turns/001-user.md")"
[ -z "$(ls "$M/g/turns")" ] && [ -z "$(ls "$M/g/attachments")" ] || fail "refused asks left something in g: $(ls -R "$M/g")"
out=$(ask_ok $ASK --conversation g --image $V/noise-131x91.png "this picture?") || fail "ask --image through the mount: $out"
[ "$(js prompt_tokens "$out")" = "$want" ] || fail "ask --image through the mount: the prompt is not $want tokens: $out"
cmp -s $V/noise-131x91.png "$M/g/attachments/noise-131x91.png" || fail "ask through the mount: the image is not in g/attachments/"
umount_all

# no projector: refused at the create, with the reason
mount_it
out=$(cp $V/grad-97x61.png "$M/a/attachments/" 2>&1) && fail "a mount without a projector took an image"
has "$out" "not supported" || fail "no projector: cp says '$out'"
has "$(cat "$M/a/error")" "mmproj" || fail "no projector: error says '$(cat "$M/a/error")'"
umount_all

if [ "$failed" -eq 0 ]; then echo "t_attachments                ok"; else echo "t_attachments                FAIL ($failed)"; exit 1; fi
