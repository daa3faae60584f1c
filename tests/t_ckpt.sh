#!/bin/sh
# `chatfs ask` with checkpoints: a stored conversation, the --stats line, and the
# database broken on purpose - truncated, and killed with -9 in the middle of a
# checkpoint write; a conversation on a mixture-of-experts model. Every answer must
# equal the answer with checkpoints off.
set -u
cd "$(dirname "$0")/.."
CHATFS=${CHATFS:-./chatfs}
M=tests/fixtures/qwen35-tiny-f32.gguf
T=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
fail=0
check() { # check NAME CONDITION...
    what=$1; shift
    if "$@"; then :; else echo "FAIL t_ckpt: $what"; fail=$((fail + 1)); fi
}
ask() { # ask DB ARGS...
    db=$1; shift
    $CHATFS ask -m $M --db "$db" -n 6 -t 2 "$@"
}
num() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p" "$2"; }

# answers without checkpoints
r1=$(ask $T/ref.db --no-checkpoints --conversation c --system "Be brief." "Hello there" 2>/dev/null)
r2=$(ask $T/ref.db --no-checkpoints --conversation c "What is rain?" 2>/dev/null)
r3=$(ask $T/ref.db --no-checkpoints --conversation c "And snow?" 2>/dev/null)
r4=$(ask $T/ref.db --no-checkpoints --conversation c "And snow?" 2>/dev/null)

# the same conversation with checkpoints: same answers, reuse from the database
a1=$(ask $T/a.db --conversation c --system "Be brief." --stats "Hello there" 2>$T/s1)
check "turn 1 answer" [ "$a1" = "$r1" ]
check "turn 1 stats: a miss" grep -q '"reused_tokens":0,.*"source":"none","miss_reason":"none stored"' $T/s1
check "turn 1 stats: ttft" grep -q '"ttft_ms":[0-9]' $T/s1
a2=$(ask $T/a.db --conversation c --stats "What is rain?" 2>$T/s2)
check "turn 2 answer" [ "$a2" = "$r2" ]
check "turn 2 restored from the database" grep -q '"source":"disk","miss_reason":null' $T/s2
check "turn 2 reused the first turn" [ "$(num reused_tokens $T/s2)" -gt "$(num prompt_tokens $T/s1)" ]
check "the database is private" [ "$(stat -c %a $T/a.db)" = 600 ]
# checkpoints hold KV rows of one cache type (the default f16): another type finds none
cp $T/a.db $T/kv32.db
ask $T/kv32.db --conversation c --stats -ctk f32 -ctv f32 "What is rain?" > /dev/null 2> $T/kv32
check "another cache type reuses nothing" [ "$(num reused_tokens $T/kv32)" = 0 ]

# budgets of 0 are none (they used to mean the defaults): no RAM keeps every checkpoint
# in the database, no disk keeps none there, neither keeps none at all
b1=$(ask $T/b.db --conversation c --system "Be brief." --ram-budget 0 "Hello there" 2>/dev/null)
b2=$(ask $T/b.db --conversation c --stats --ram-budget 0 "What is rain?" 2>$T/b2)
check "--ram-budget 0: answers" [ "$b1" = "$r1" ] && check "--ram-budget 0: answers (2)" [ "$b2" = "$r2" ]
check "--ram-budget 0: from the database" grep -q '"source":"disk"' $T/b2
ask $T/n.db --conversation c --system "Be brief." --disk-budget 0 "Hello there" >/dev/null 2>&1
n2=$(ask $T/n.db --conversation c --stats "What is rain?" 2>$T/n2)
check "--disk-budget 0: nothing in the database" grep -q '"source":"none"' $T/n2
check "--disk-budget 0: answers" [ "$n2" = "$r2" ]

# regenerate: the same request again reuses the whole prompt
cp $T/a.db $T/g.db
g=$(ask $T/g.db --stats "Once more" 2>$T/g1)
g2=$(ask $T/g.db --stats "Once more" 2>$T/g2)
check "regenerate answers the same" [ "$g" = "$g2" ]
check "regenerate reuses every prompt token" [ "$(num reused_tokens $T/g2)" = "$(num prompt_tokens $T/g2)" ]

# kill -9 while a checkpoint write is open: the next run recovers, answers right
CHATFS_TEST_CKPT_PAUSE_MS=20000 $CHATFS ask -m $M --db $T/a.db -n 6 -t 2 --conversation c "And snow?" \
    >$T/k.out 2>$T/k.err &
pid=$!
i=0
while [ $i -lt 300 ] && ! grep -q "test pause" $T/k.err; do sleep 0.1; i=$((i + 1)); done
check "the writer paused inside its transaction" grep -q "test pause" $T/k.err
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
# (the killed run stored its reply before the checkpoint write: it is the third turn)
check "after kill -9: the killed run's turn kept" [ "$(sqlite3 $T/a.db "SELECT content FROM conversation_turn WHERE idx = 6 AND complete = 1")" = "$r3" ]
a3=$(ask $T/a.db --conversation c --stats "And snow?" 2>$T/s3)
check "after kill -9: answer" [ "$a3" = "$r4" ]
check "after kill -9: checkpoints still used" [ "$(num reused_tokens $T/s3)" -gt 0 ]

# a truncated database: noticed, moved aside or read around; answers stay right
cp $T/a.db $T/t.db
size=$(stat -c %s $T/t.db)
truncate -s $((size / 2)) $T/t.db
cp $T/t.db $T/tref.db
t1=$(ask $T/t.db --conversation c --stats "Tell me more." 2>$T/t.err)
check "truncated: answered" [ -n "$t1" ]
tr=$(ask $T/tref.db --no-checkpoints --conversation c "Tell me more." 2>/dev/null)
check "truncated: answer as without checkpoints" [ "$t1" = "$tr" ]
t2=$(ask $T/t.db --conversation c --stats "Tell me more." 2>$T/t2.err)
check "truncated: the next run works" [ -n "$t2" ]
check "truncated: the next run reuses again" [ "$(num reused_tokens $T/t2.err)" -gt 0 ]

# garbage instead of a database
head -c 10000 /dev/urandom > $T/x.db
x=$(ask $T/x.db --conversation c --system "Be brief." "Hello there" 2>$T/x.err)
check "garbage file: answered" [ "$x" = "$r1" ]
check "garbage file: moved aside" ls $T/x.db.corrupt-* >/dev/null

# a mixture-of-experts model: a stored conversation answers as without checkpoints and
# turn 2 is restored from the database
M=tests/fixtures/qwen35moe-tiny-f32.gguf
m1=$(ask $T/moeref.db --no-checkpoints --conversation c --system "Be brief." "Hello there" 2>/dev/null)
m2=$(ask $T/moeref.db --no-checkpoints --conversation c "What is rain?" 2>/dev/null)
b1=$(ask $T/moe.db --conversation c --system "Be brief." "Hello there" 2>/dev/null)
b2=$(ask $T/moe.db --conversation c --stats "What is rain?" 2>$T/m2)
check "MoE turn 1 answer" [ -n "$b1" -a "$b1" = "$m1" ]
check "MoE turn 2 answer" [ -n "$b2" -a "$b2" = "$m2" ]
check "MoE turn 2 restored from the database" grep -q '"source":"disk","miss_reason":null' $T/m2
check "MoE turn 2 reused the first turn" [ "$(num reused_tokens $T/m2)" -gt 0 ]

[ $fail -eq 0 ] && echo "t_ckpt                       ok" || echo "t_ckpt                       FAIL ($fail)"
[ $fail -eq 0 ]
