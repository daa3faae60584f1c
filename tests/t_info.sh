#!/bin/sh
# t_info.sh - `chatfs info` on every fixture (architecture, parameter count, layer
# pattern, tensor types, tokenizer, template, thinking, recommended sampling, state sizes;
# text and --json), templates of every kind (unknown to chatfs, broken, refusing system
# prompts) and --template, the experts of the MoE fixtures (count, used, shared, active
# parameters and bytes per token), and models chatfs cannot run: an unknown architecture
# and a mixture-of-experts variant without its expert metadata, each made here from a
# fixture, must fail with one line naming the architecture and exit status 1.
set -u
cd "$(dirname "$0")/.."
CHATFS=./chatfs
FX=tests/fixtures
TMP=tests/tmp/t_info.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
failed=0

fail() {
    echo "FAIL t_info: $*"
    failed=$((failed + 1))
}

# has TEXT NEEDLE: TEXT contains NEEDLE literally
has() {
    case "$1" in *"$2"*) return 0 ;; esac
    return 1
}

# fixture arch pattern pre-tokenizer recurrent-bytes kv-bytes-per-token (F32 cache)
while read -r fx arch pattern pre rec kv; do
    f=$FX/$fx.gguf
    out=$($CHATFS info -ctk f32 -ctv f32 "$f" 2>&1) || { fail "$fx: chatfs info exited $?: $out"; continue; }
    # the default cache is F16: half the bytes of F32 (the table's)
    out16=$($CHATFS info "$f" 2>&1)
    has "$out16" "$rec bytes recurrent per sequence, $((kv / 2)) bytes KV per token" || fail "$fx: f16 state line: $out16"
    has "$out" "architecture:  $arch " || fail "$fx: architecture is not $arch: $out"
    has "$out" "pattern: $pattern
" || fail "$fx: pattern is not $pattern: $out"
    has "$out" "tokenizer:     gpt2 (pre-tokenizer $pre), 512 tokens" || fail "$fx: tokenizer line: $out"
    has "$out" "template:      the model's own (199 bytes of Jinja, like chatml): renders
" || fail "$fx: template line: $out"
    has "$out" "state:         $rec bytes recurrent per sequence, $kv bytes KV per token" || fail "$fx: state line: $out"
    # the parameter count llama.cpp reports for the same file
    params=$(grep -o '"n_params": *[0-9]*' $FX/$fx.json | grep -o '[0-9]*$')
    has "$out" "parameters:    $params (" || fail "$fx: parameters are not $params: $out"

    js=$($CHATFS info --json -ctk f32 -ctv f32 "$f" 2>&1) || { fail "$fx: chatfs info --json exited $?"; continue; }
    for field in "\"architecture\":\"$arch\"" "\"pattern\":\"$pattern\"" "\"tokenizer\":\"gpt2\"" \
        "\"pre_tokenizer\":\"$pre\"" "\"template\":\"chatml\"" "\"template_source\":\"model\"" \
        "\"template_bytes\":199" "\"template_renders\":true" "\"template_system_prompt\":true" \
        "\"recurrent_state_bytes\":$rec" "\"kv_bytes_per_token\":$kv" "\"vocab\":512" "\"parameters\":$params,"; do
        has "$js" "$field" || fail "$fx: --json lacks $field: $js"
    done
    [ "$(printf '%s\n' "$js" | wc -l)" -eq 1 ] || fail "$fx: --json is not one line"
done <<'EOF'
nemotron_h-tiny-f32 nemotron_h M-M*-M*- qwen2 31488 512
mamba2-tiny-f32 mamba2 MMMM qwen2 41984 0
mamba-tiny-f32 mamba SSSS qwen2 22528 0
granitehybrid-tiny-f32 granitehybrid MM*MM* qwen2 40448 512
lfm2-tiny-f32 lfm2 CC*CC* qwen2 2048 512
qwen3-tiny-f32 qwen3 **** qwen2 0 2048
qwen2-tiny-f32 qwen2 **** qwen2 0 1024
llama-tiny-f32 llama **** qwen2 0 1024
qwen35-tiny-f32 qwen35 GGG*GGG* qwen35 33792 512
qwen35-tiny-f16 qwen35 GGG*GGG* qwen35 33792 512
qwen35-tiny-q8_0 qwen35 GGG*GGG* qwen35 33792 512
qwen35moe-tiny-f32 qwen35moe GGG* qwen35 16896 256
qwen35moe-tiny-q8_0 qwen35moe GGG* qwen35 16896 256
qwen3next-tiny-f32 qwen3next GGG* qwen2 16896 256
nemotron_h_moe-tiny-f32 nemotron_h_moe MEM*EMEM*E qwen2 41984 512
nemotron_h_moe-tiny-latent-f32 nemotron_h_moe MEM*EMEM*E qwen2 41984 512
granitehybrid-tiny-moe-f32 granitehybrid M*MM* qwen2 30336 512
lfm2moe-tiny-f32 lfm2moe CC*CC* qwen2 2048 512
EOF

# experts: count, used, shared, blocks; active parameters and weight bytes one token reads.
# Active = all but the untied embeddings (one 64-float row of 512 read) and the experts
# not chosen: qwen35moe's 4 blocks of 3 x 64x32x8 expert floats read 2 of 8, so
# 358344 - 32768 + 64 - 196608 + 49152 = 178184 parameters
while read -r fx count used shared blocks active bytes; do
    out=$($CHATFS info $FX/$fx.gguf)
    has "$out" "experts:       $count in each of $blocks blocks, $used used per token, $shared shared" ||
        fail "$fx: experts line: $out"
    has "$out" "per token:     $active active parameters" || fail "$fx: active parameters are not $active: $out"
    has "$out" "reads $bytes of" || fail "$fx: bytes per token are not $bytes: $out"
    has "$($CHATFS info --json $FX/$fx.gguf)" "\"experts\":{\"count\":$count,\"used\":$used,\"shared\":$shared,\"blocks\":$blocks},\"active_parameters\":$active," ||
        fail "$fx: --json experts"
done <<'EOF'
qwen35moe-tiny-f32 8 2 1 4 178184 712736
qwen35moe-tiny-q8_0 8 2 1 4 178184 202692
qwen3next-tiny-f32 8 2 1 4 178184 712736
nemotron_h_moe-tiny-latent-f32 8 3 1 4 255104 1020416
granitehybrid-tiny-moe-f32 8 2 1 5 267816 1071264
lfm2moe-tiny-f32 8 3 0 4 249568 998272
EOF

# tensor types: how many tensors of each type the file holds ('+' for a space below)
while read -r fx types json; do
    types=$(printf %s "$types" | tr + ' ')
    has "$($CHATFS info $FX/$fx.gguf)" "tensor types:  $types
" || fail "$fx: tensor types are not $types"
    has "$($CHATFS info --json $FX/$fx.gguf)" "\"tensor_types\":{$json}" || fail "$fx: --json tensor_types are not {$json}"
done <<'EOF'
qwen35-tiny-f32 F32+x108 "F32":108
qwen35-tiny-f16 F16+x63+F32+x45 "F16":63,"F32":45
qwen35-tiny-q8_0 Q8_0+x63+F32+x45 "Q8_0":63,"F32":45
qwen35-small-q4_k Q4_K+x31+F32+x23+Q5_0+x1 "Q4_K":31,"F32":23,"Q5_0":1
EOF

# ---- binary patching of GGUF copies (POSIX tools only)

# offset KEY FILE: byte offset of the first occurrence of KEY in FILE
offset() {
    LC_ALL=C grep -boa -- "$1" "$2" | head -n 1 | cut -d: -f1
}

# u64 FILE OFFSET: the little-endian u64 at OFFSET
u64() {
    od -An -tu8 -j "$2" -N 8 "$1" | tr -d ' '
}

# le VALUE BYTES: VALUE as BYTES little-endian bytes
le() {
    v=$1 k=0
    while [ "$k" -lt "$2" ]; do
        printf "\\$(printf %03o $((v % 256)))"
        v=$((v / 256))
        k=$((k + 1))
    done
}

# kv_u32 KEY VALUE: a GGUF key/value pair of type UINT32
kv_u32() {
    le ${#1} 8
    printf %s "$1"
    le 4 4
    le "$2" 4
}

# ---- templates of every kind, and --template

# retemplate TEXT FILE: a copy of the qwen3 fixture whose 199-byte chat template is TEXT,
# padded to the same length by a Jinja comment
retemplate() {
    cp $FX/qwen3-tiny-f32.gguf "$2"
    o=$(offset tokenizer.chat_template "$2")
    len=$(u64 "$2" $((o + 23 + 4)))
    { printf '%s{#' "$1"; head -c $((len - ${#1} - 4)) /dev/zero | tr '\0' ' '; printf '#}'; } |
        dd of="$2" bs=1 seek=$((o + 23 + 12)) conv=notrunc 2>/dev/null
}

# a template chatfs has no family for renders by its own text (it was ChatML before)
retemplate '{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}' "$TMP/own.gguf"
out=$($CHATFS info "$TMP/own.gguf" 2>&1)
has "$out" "template:      the model's own (199 bytes of Jinja): renders
" || fail "a template of no family: $out"
has "$($CHATFS info --json "$TMP/own.gguf")" '"template":null' || fail "no family: --json"
printf '[{"role": "user", "content": "hi"}]' >"$TMP/m.json"
out=$($CHATFS render -m "$TMP/own.gguf" "$TMP/m.json")
[ "$out" = "[user] hi" ] || fail "render with a template of no family: [$out]"
out=$($CHATFS info --template llama3 "$TMP/own.gguf" 2>&1)
has "$out" "template:      the built-in llama3 (--template): renders
" || fail "--template llama3: $out"
has "$($CHATFS info --json --template llama3 "$TMP/own.gguf")" '"template_source":"forced"' || fail "forced: --json"
# broken: it loads, and says why it cannot render
retemplate '{% for m in messages %}{{ m.content }' "$TMP/broken.gguf"
out=$($CHATFS info "$TMP/broken.gguf" 2>&1)
[ $? -eq 0 ] && has "$out" "template:      the model's own (199 bytes of Jinja): does not compile: line 1: " ||
    fail "a template that does not compile: $out"
js=$($CHATFS info --json "$TMP/broken.gguf")
has "$js" '"template_renders":false' && has "$js" '"template_error":"does not compile: line 1: ' ||
    fail "does not compile: --json: $js"
# one that refuses system prompts (as some published ones do)
retemplate "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}ok" \
    "$TMP/nosys.gguf"
out=$($CHATFS info "$TMP/nosys.gguf" 2>&1)
has "$out" "renders, but not with a system prompt: chat template: System role not supported" ||
    fail "a template refusing system prompts: $out"
out=$($CHATFS info --template nosuch $FX/qwen3-tiny-f32.gguf 2>&1)
[ $? -eq 1 ] && has "$out" "unknown template 'nosuch' (built in: chatml, qwen3, qwen35, llama3, granite, lfm2, nemotron)" ||
    fail "--template nosuch: $out"
out=$($CHATFS run -m $FX/qwen3-tiny-f32.gguf -p hi --chat --template granite -n 1 --ids 2>&1)
has "$out" "prompt: 60 124 115 287 114 116 95 111 102 95 114 111 315 124 62" ||
    fail "run --template granite does not render <|start_of_role|>: $out"

# ---- models chatfs cannot run

# expect_fail FILE ARCH WORDS: chatfs info fails with exit 1 and one line naming ARCH
expect_fail() {
    out=$($CHATFS info "$1" 2>&1)
    rc=$?
    [ $rc -eq 1 ] || fail "$(basename "$1"): exit status $rc, not 1"
    [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || fail "$(basename "$1"): not one line: $out"
    has "$out" "'$2'" || fail "$(basename "$1"): the message does not name '$2': $out"
    has "$out" "$3" || fail "$(basename "$1"): the message does not say '$3': $out"
}

# an architecture llama.cpp knows and chatfs does not: llama -> jamba (same length)
cp $FX/llama-tiny-f32.gguf "$TMP/jamba.gguf"
o=$(offset general.architecture "$TMP/jamba.gguf")
printf jamba | dd of="$TMP/jamba.gguf" bs=1 seek=$((o + 20 + 12)) conv=notrunc 2>/dev/null
expect_fail "$TMP/jamba.gguf" jamba "is not supported"
out=$($CHATFS info "$TMP/jamba.gguf" 2>&1)
has "$out" "supported: qwen35, " && has "$out" ", qwen2, " || fail "the supported architectures do not list qwen2: $out"

# qwen2 without its rms epsilon, which llama.cpp's qwen2 loader requires (the key renamed)
cp $FX/qwen2-tiny-f32.gguf "$TMP/qwen2-noeps.gguf"
o=$(offset qwen2.attention.layer_norm_rms_epsilon "$TMP/qwen2-noeps.gguf")
printf X | dd of="$TMP/qwen2-noeps.gguf" bs=1 seek=$((o + 37)) conv=notrunc 2>/dev/null
expect_fail "$TMP/qwen2-noeps.gguf" qwen2.attention.layer_norm_rms_epsilon "is missing"

# granitehybrid with experts but no expert_used_count (nor expert tensors): two key/value
# pairs inserted after the header, 64 bytes in all so that the tensor data keeps its
# 32-byte alignment
src=$FX/granitehybrid-tiny-f32.gguf
n_kv=$(u64 $src 16)
{
    head -c 16 $src
    le $((n_kv + 2)) 8
    kv_u32 granitehybrid.expert_count 4 # 8 + 26 + 4 + 4 = 42 bytes
    kv_u32 chatfs 0                     # 8 + 6 + 4 + 4 = 22 bytes
    tail -c +25 $src
} >"$TMP/granite-moe.gguf"
expect_fail "$TMP/granite-moe.gguf" granitehybrid "with 4 experts: metadata 'granitehybrid.expert_used_count' is missing"

# thinking and the recommended sampling: the default model thinks (its vocabulary has
# <think> </think>, its template reads enable_thinking), a tiny ChatML fixture does not; a
# copy of the default model with general.sampling.* shows them (text and --json)
out=$($CHATFS info models/chatfs-default.gguf 2>&1)
has "$out" "thinking:      yes
" || fail "default model: not 'thinking: yes': $out"
has "$out" "sampling:" && fail "default model: a sampling line without general.sampling.*: $out"
out=$($CHATFS info $FX/llama-tiny-f32.gguf 2>&1)
has "$out" "thinking:      no
" || fail "llama-tiny: not 'thinking: no': $out"
PY=/usr/bin/python3
[ -x $PY ] || PY=python3
if $PY tests/jinja/gguf_set_template.py models/chatfs-default.gguf - "$TMP/sampling.gguf" \
    --f32 general.sampling.temp=0.7 --i32 general.sampling.top_k=20 --f32 general.sampling.top_p=0.8 >/dev/null; then
    out=$($CHATFS info "$TMP/sampling.gguf" 2>&1)
    has "$out" "sampling:      the file recommends temp 0.7, top_k 20, top_p 0.8, min_p 0.05
" || fail "general.sampling.*: $out"
    out=$($CHATFS info --json "$TMP/sampling.gguf" 2>&1)
    has "$out" '"thinking":true,"sampling":{"temp":0.699999988079071,"top_k":20,"top_p":0.800000011920929,"min_p":0.05000000074505806}' ||
        fail "general.sampling.* in --json: $out"
else
    fail "gguf_set_template.py could not add general.sampling.*"
fi

[ "$failed" -eq 0 ] && echo "t_info.sh                    ok" || echo "t_info.sh                    FAIL ($failed)"
[ "$failed" -eq 0 ]
