#!/bin/sh
# t_grammar.sh - `chatfs run` and `chatfs ask` with --grammar-file on the bundled model at
# temperature 1 over several seeds: every output is a sentence of the grammar (checked
# against an equivalent regular expression with python3), the unconstrained run with the
# same seed is not, and a grammar that does not compile exits 1 with its reason.
set -u
cd "$(dirname "$0")/.."
CHATFS=./chatfs
TMP=tests/tmp/t_grammar.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
failed=0

fail() {
    echo "FAIL t_grammar: $*"
    failed=$((failed + 1))
}

# matches REGEX FILE: the file's text (one final newline off) is all of REGEX
matches() {
    python3 -c 'import re, sys
t = open(sys.argv[2], encoding="utf-8", errors="surrogateescape").read()
t = t[:-1] if t.endswith("\n") else t
sys.exit(0 if re.fullmatch(sys.argv[1], t) else 1)' "$1" "$2"
}

cat >"$TMP/obj.gbnf" <<'G'
# a JSON object of one to three short pairs
root ::= "{" pair ("," " "? pair){0,2} "}"
pair ::= "\"" [a-z]{1,6} "\": " ([0-9]{1,3} | "true" | "null")
G
OBJ='\{"[a-z]{1,6}": ([0-9]{1,3}|true|null)(, ?"[a-z]{1,6}": ([0-9]{1,3}|true|null)){0,2}\}'
cat >"$TMP/list.gbnf" <<'G'
root ::= item ("," item){0,3} "."
item ::= [a-z]{2,5} | [α-ω]{1,3}
G
LIST='([a-z]{2,5}|[α-ω]{1,3})(,([a-z]{2,5}|[α-ω]{1,3})){0,3}\.'

free_ok=0
for seed in 1 2 3; do
    for g in obj list; do
        if [ $g = obj ]; then re=$OBJ; else re=$LIST; fi
        $CHATFS run -p "Hello" --temp 1 --seed $seed -n 96 --grammar-file "$TMP/$g.gbnf" >"$TMP/out" 2>"$TMP/err" ||
            fail "run $g seed $seed: exit $? ($(cat "$TMP/err"))"
        matches "$re" "$TMP/out" || fail "run $g seed $seed: '$(cat "$TMP/out")' is not a sentence of the grammar"
        $CHATFS run -p "Hello" --temp 1 --seed $seed -n 24 >"$TMP/free" 2>/dev/null
        matches "$re" "$TMP/free" && free_ok=$((free_ok + 1))
        $CHATFS ask --db "$TMP/db" --temp 1 --seed $seed --grammar-file "$TMP/$g.gbnf" "Write something." \
            >"$TMP/ask" 2>"$TMP/err" || fail "ask $g seed $seed: exit $? ($(cat "$TMP/err"))"
        matches "$re" "$TMP/ask" || fail "ask $g seed $seed: '$(cat "$TMP/ask")' is not a sentence of the grammar"
    done
done
[ $free_ok -lt 6 ] || fail "every unconstrained run happened to match its grammar"

printf 'root ::= "a" tail\n' >"$TMP/bad.gbnf"
for cmd in "run -p Hello" "ask --db $TMP/db Hello"; do
    $CHATFS $cmd --grammar-file "$TMP/bad.gbnf" >/dev/null 2>"$TMP/err"
    rc=$?
    [ $rc -eq 1 ] || fail "$cmd with an undefined rule: exit $rc"
    grep -q "line 1, column 14: undefined rule 'tail'" "$TMP/err" || fail "$cmd: message '$(cat "$TMP/err")'"
done
$CHATFS run -p Hello --grammar-file "$TMP/missing.gbnf" >/dev/null 2>&1 && fail "a missing grammar file ran"

[ "$failed" -eq 0 ] && echo "t_grammar.sh                 ok" || echo "t_grammar.sh                 FAIL ($failed)"
[ "$failed" -eq 0 ]
