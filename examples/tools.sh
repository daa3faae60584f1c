#!/bin/sh
# tools.sh MOUNT CONVERSATION QUESTION... - a tool loop: offer the model a calculator,
# answer every call it makes with the result, and print its final answer.
#   chatfs mount ~/chat -m model.gguf && examples/tools.sh ~/chat sums "What is 347 * 29?"
# TOOL_CHOICE=required makes the first reply a call (a model that would not call by
# itself); the replies after the results may call again or answer.
set -eu
[ $# -ge 3 ] || { echo "usage: $0 MOUNT CONVERSATION QUESTION..." >&2; exit 2; }
mnt=$1 conv=$2
shift 2
d=$mnt/$conv
mkdir -p "$d"
cat > "$d/tools.json" <<'TOOLS'
[{"type": "function", "function": {"name": "calculate", "description": "Evaluates a OP b.",
  "parameters": {"type": "object", "required": ["a", "op", "b"], "properties": {
    "a": {"type": "integer"}, "op": {"type": "string", "enum": ["+", "-", "*", "/"]}, "b": {"type": "integer"}}}}}]
TOOLS
printf '{"tool_choice": "%s", "parallel_tool_calls": true}\n' "${TOOL_CHOICE:-auto}" > "$d/settings.json"
printf '%s\n' "$*" > "$d/message"
# the calculator: calls/ID/arguments.json in, the number out
calculate() {
    python3 -c 'import json, operator, sys
a = json.load(open(sys.argv[1]))
ops = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.floordiv}
print(ops[a["op"]](a["a"], a["b"]) if a["op"] != "/" or a["b"] else "error: division by zero")' "$1"
}
while :; do
    status=$(cat "$d/status")
    case $status in
    tool_calls*) # the model waits: answer each call that has no result yet
        for call in "$d"/calls/*/; do
            [ -s "$call/result" ] && continue
            result=$(calculate "$call/arguments.json" 2>/dev/null || echo "error: bad arguments")
            echo "$(basename "$call"): $(cat "$call/name") $(tr -d '\n ' < "$call/arguments.json") = $result" >&2
            printf '{"tool_choice": "auto", "parallel_tool_calls": true}\n' > "$d/settings.json"
            printf '%s\n' "$result" > "$call/result"
        done ;;
    done*) cat "$d/reply"; exit 0 ;;
    error*|stopped*) echo "$status" >&2; exit 1 ;;
    *) sleep 0.2 ;;
    esac
done
