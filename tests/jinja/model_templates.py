"""Models carrying published chat templates, end to end through the chatfs command
(tests/t_template.sh runs it).

For each template of a supported architecture's model, a fixture is made from a tiny
model (gguf_set_template.py: its tokenizer.chat_template replaced, add_bos_token set where
the model's tokenizer adds BOS). Then:

  - `chatfs render` of every chatfs-shaped conversation (tests/jinja/conv_*.json with only
    system, user and assistant messages), thinking on and off, must be byte for byte what
    Hugging Face's apply_chat_template gives: python3-jinja2 configured as transformers
    configures it (render_ref.py), with the context transformers builds (the messages as
    given, tools and documents None, the tokenizer's BOS/EOS texts) and llama.cpp's BOS
    rule (a BOS text at the start is dropped when the tokenizer adds BOS itself);
  - a conversation the template refuses exits 1 with the template's own message;
  - the same for requests with tools (conv_tools*.json): the tools offered, assistant
    turns with calls (arguments as mappings, a JSON string parsed first, as llama.cpp
    passes them), tool results;
  - `chatfs render --ids` gives the tokens of that text;
  - with NVIDIA-Nemotron-3-Nano's template (which writes <think></think> before past
    answers and an empty system turn when there is none, and which chatfs once took for
    Qwen3.5's): real runs (`chatfs ask --stats`) reuse exactly up to the real message
    boundaries: a second turn restores the checkpoint where the new user message begins,
    and another conversation with the same system prompt the one where its first user
    message begins;
  - with Qwen2.5-Instruct's template on the attention-only qwen2-tiny: a real run without
    a system prompt has the template's default system turn in its prompt (the prompt is
    the reference text's tokens), while the fixture's own plain ChatML has none.

  model_templates.py --chatfs ./chatfs --templates DIR --fixtures tests/fixtures --work DIR
"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import render_ref  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FAILED = []

# template, tiny model it is put on, add_bos_token (None: the fixture's own, false)
MODELS = [
    ("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "nemotron_h-tiny-f32", None),
    ("NVIDIA-Nemotron-Nano-v2", "nemotron_h-tiny-f32", None),
    ("Qwen3.5-4B", "qwen35-tiny-f32", None),
    ("Qwen-Qwen3-0.6B", "qwen3-tiny-f32", None),
    ("Qwen-Qwen2.5-7B-Instruct", "qwen2-tiny-f32", None),
    ("meta-llama-Llama-3.1-8B-Instruct", "llama-tiny-f32", True),
    ("meta-llama-Llama-3.2-3B-Instruct", "llama-tiny-f32", True),
    ("LFM2.5-Instruct", "lfm2-tiny-f32", True),
    ("LFM2-8B-A1B", "lfm2-tiny-f32", True),
    ("ibm-granite-granite-4.0", "granitehybrid-tiny-f32", None),
]


def check(ok, what):
    if not ok:
        FAILED.append(what)
        print("FAIL model_templates: " + what, file=sys.stderr)


def run(cmd, stdin=None):
    p = subprocess.run(cmd, input=stdin, capture_output=True)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def make_fixture(args, template, base, add_bos):
    out = os.path.join(args.work, f"{template}.gguf")
    cmd = [sys.executable, os.path.join(HERE, "gguf_set_template.py"), os.path.join(args.fixtures, base + ".gguf"),
           os.path.join(args.templates, template + ".jinja"), out]
    if add_bos is not None:
        cmd += ["--add-bos", "true" if add_bos else "false"]
    rc, stdout, err = run(cmd)
    if rc:
        sys.exit(f"model_templates: {template}: {err}")
    return out, json.loads(stdout)


def reference(env, template_text, messages, tokens, thinking, tools=None):
    """apply_chat_template's text, with llama.cpp's BOS rule; None when the template fails"""
    ctx = {"messages": messages, "tools": tools, "documents": None, "add_generation_prompt": True,
           "bos_token": tokens["bos"], "eos_token": tokens["eos"], "enable_thinking": thinking}
    try:
        text = render_ref.render(env, env.from_string(template_text), ctx)
    except render_ref.Raised as e:
        return None, str(e)
    if tokens["add_bos"] and tokens["bos"] and text.startswith(tokens["bos"]):
        text = text[len(tokens["bos"]):]
    return text, None


def conversations():
    out = []
    for name in sorted(os.listdir(HERE)):
        if not (name.startswith("conv_") and name.endswith(".json")):
            continue
        with open(os.path.join(HERE, name), encoding="utf-8") as f:
            conv = json.load(f)
        if set(conv) != {"messages"}:
            continue  # tools: not part of a chatfs conversation
        if all(set(m) <= {"role", "content", "reasoning_content"} and m["role"] in ("system", "user", "assistant")
               for m in conv["messages"]):
            out.append((name, os.path.join(HERE, name), conv["messages"]))
    return out


def render_matches(args, env, gguf, text, tokens, messages, path, thinking, tools, what):
    """`chatfs render` of the file at path is apply_chat_template's text, or the template's
    own refusal. strftime_now (Llama 3.1 writes today's date): python renders at the moment
    before chatfs ran and, if that differs, at the moment after (a day may turn). Returns
    (ok, refused)."""
    render_ref.NOW = int(time.time())
    want, raised = reference(env, text, messages, tokens, thinking, tools)
    rc, out, err = run([args.chatfs, "render", "-m", gguf, "--thinking", str(thinking).lower(), path])
    if want is not None and out != want.encode("utf-8"):
        render_ref.NOW = int(time.time())
        want, raised = reference(env, text, messages, tokens, thinking, tools)
    if want is None:
        ok = rc == 1 and out == b"" and err == f"chatfs: chat template: {raised}\n"
    else:
        ok = rc == 0 and out == want.encode("utf-8")
    check(ok, f"{what} (thinking {thinking}): rc {rc} {err.strip()!r}"
          + ("" if want is None else f"\n  want {want!r}\n  got  {out.decode('utf-8', 'replace')!r}"))
    return ok, want is None


def parity(args, env):
    convs = conversations()
    check(len(convs) >= 10, f"only {len(convs)} chatfs-shaped conversations")
    same = total = 0
    for template, base, add_bos in MODELS:
        gguf, tokens = make_fixture(args, template, base, add_bos)
        with open(os.path.join(args.templates, template + ".jinja"), encoding="utf-8") as f:
            text = f.read()
        for name, path, messages in convs:
            for thinking in (True, False):
                ok, _ = render_matches(args, env, gguf, text, tokens, messages, path, thinking, None,
                                       f"{template} on {name}")
                total += 1
                same += ok
    print(f"  chatfs render against apply_chat_template: {same} of {total} renders identical "
          f"({len(MODELS)} templates on fixtures, {len(convs)} conversations, thinking on and off)")


def tool_conversations():
    """Requests with tools: conv_tools*.json (a tool message's legacy "name" left out: a
    chatfs tool turn is its call id and its result), and the first turn of each, the tools
    offered to a question alone."""
    out = []
    for name in ("conv_tools.json", "conv_tools_string_args.json"):
        with open(os.path.join(HERE, name), encoding="utf-8") as f:
            conv = json.load(f)
        msgs = [{k: v for k, v in m.items() if not (m["role"] == "tool" and k == "name")} for m in conv["messages"]]
        first = [m for m in msgs[:next(i for i, m in enumerate(msgs) if m["role"] == "user") + 1]]
        out.append((name, {"messages": msgs, "tools": conv["tools"]}))
        out.append((name + " (first turn)", {"messages": first, "tools": conv["tools"]}))
    return out


def as_llama_cpp_passes(messages):
    """The messages as llama.cpp hands them to a template that reads arguments as a mapping:
    a call's arguments given as a JSON string parsed first (func_args_not_string)."""
    out = json.loads(json.dumps(messages))
    for m in out:
        for call in m.get("tool_calls") or []:
            args = call["function"].get("arguments")
            if isinstance(args, str):
                call["function"]["arguments"] = json.loads(args)
    return out


def tool_parity(args, env):
    """`chatfs render` of requests with tools: the template's own text, or its own refusal."""
    same = total = refused = 0
    for template, base, add_bos in MODELS:
        gguf, tokens = make_fixture(args, template, base, add_bos)
        with open(os.path.join(args.templates, template + ".jinja"), encoding="utf-8") as f:
            text = f.read()
        for name, request in tool_conversations():
            path = os.path.join(args.work, "request.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(request, f, ensure_ascii=False)
            messages = as_llama_cpp_passes(request["messages"])
            for thinking in (True, False):
                ok, was_refused = render_matches(args, env, gguf, text, tokens, messages, path, thinking,
                                                 request["tools"], f"{template} on {name} with tools")
                total += 1
                same += ok
                refused += was_refused
    check(total and refused < total, f"tool renders: {refused} of {total} refused")
    print(f"  chatfs render with tools against apply_chat_template: {same} of {total} renders identical "
          f"({refused} refused by the template with its own message; {len(MODELS)} templates, thinking on and off)")


def refusal_and_ids(args):
    gguf, _ = make_fixture(args, "Qwen3.5-4B", "qwen35-tiny-f32", None)
    rc, out, err = run([args.chatfs, "render", "-m", gguf, "-"], stdin=b'[{"role": "assistant", "content": "hi"}]')
    check(rc == 1 and out == b"" and err == "chatfs: chat template: No user query found in messages.\n",
          f"a refused conversation: rc {rc}, {out!r}, {err!r}")
    msgs = b'{"messages": [{"role": "user", "content": "Hello"}]}'
    rc, text, _ = run([args.chatfs, "render", "-m", gguf, "-"], stdin=msgs)
    rc2, ids, _ = run([args.chatfs, "render", "-m", gguf, "--ids", "-"], stdin=msgs)
    path = os.path.join(args.work, "prompt.txt")
    with open(path, "wb") as f:
        f.write(text)
    rc3, run_ids, _ = run([args.chatfs, "run", "-m", gguf, "-p", "@" + path, "-n", "0", "--ids"])
    want = run_ids.decode().splitlines()[0].removeprefix("prompt: ")
    check(rc == rc2 == rc3 == 0 and ids.decode() == want + "\n", f"--ids: {ids!r}, the text's tokens {want!r}")


def tokens_of(args, gguf, text):
    path = os.path.join(args.work, "text.txt")
    with open(path, "wb") as f:
        f.write(text.encode("utf-8"))
    rc, out, err = run([args.chatfs, "run", "-m", gguf, "-p", "@" + path, "-n", "0", "--ids"])
    check(rc == 0, "run --ids: " + err)
    return out.decode().splitlines()[0].removeprefix("prompt: ").split()


def ask(args, gguf, db, conv, text, system=None):
    cmd = [args.chatfs, "ask", "-m", gguf, "--db", db, "--conversation", conv, "-n", "6", "--stats", "-t", "1"]
    if system:
        cmd += ["--system", system]
    rc, out, err = run(cmd + [text])
    stats = json.loads(err.strip().splitlines()[-1]) if err.strip() else {}
    # ask exits 2 when -n cut the reply, 0 when the model ended its turn
    want = 2 if stats.get("finish_reason") == "max_tokens" else 0
    check(rc == want and stats, f"ask {conv}: exit {rc}: {err}")
    return out.decode("utf-8")[:-1], stats  # the reply (ask adds a newline)


def boundaries(args):
    """Checkpoints on Nemotron-3's message boundaries, in real runs."""
    gguf, _ = make_fixture(args, "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "nemotron_h-tiny-f32", None)
    db = os.path.join(args.work, "ask.db")
    system = "You are terse."
    reply, first = ask(args, gguf, db, "a", "What is 2 + 2?", system)
    check(first["reused_tokens"] == 0, f"first turn: {first}")
    _, second = ask(args, gguf, db, "a", "And 3 + 3?")
    # the second prompt, and where its new user message begins in it
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": "What is 2 + 2?"},
            {"role": "assistant", "content": reply}, {"role": "user", "content": "And 3 + 3?"}]
    rc, prompt, err = run([args.chatfs, "render", "-m", gguf, "-"], stdin=json.dumps(msgs).encode())
    prompt = prompt.decode("utf-8")
    marker = "<|im_start|>user\n"
    check(prompt.count("<think></think>") == 1 and prompt.endswith("<|im_start|>assistant\n<think>\n"),
          f"Nemotron-3's history: {prompt!r}")
    head = prompt[:prompt.rindex(marker) + len(marker)]
    want = len(tokens_of(args, gguf, head))
    check(second["prompt_tokens"] == len(tokens_of(args, gguf, prompt)), f"second turn's prompt: {second}")
    check(second["reused_tokens"] == want,
          f"second turn: reused {second['reused_tokens']}, the new user message begins at token {want}: {second}")
    # another conversation with the same system prompt: up to its first user message
    _, other = ask(args, gguf, db, "b", "Hello?", system)
    sys_head = f"<|im_start|>system\n{system}<|im_end|>\n{marker}"
    want_sys = len(tokens_of(args, gguf, sys_head))
    check(other["reused_tokens"] == want_sys,
          f"same system prompt: reused {other['reused_tokens']}, the first user message begins at {want_sys}: {other}")
    print(f"  Nemotron-3 checkpoints: a second turn reused {second['reused_tokens']} of {second['prompt_tokens']} "
          f"tokens (its user message begins at {want}); a new conversation {other['reused_tokens']} (the system "
          f"turn ends at {want_sys})")


def qwen2_default_system(args, env):
    """Qwen2.5's default system turn comes from its template, in a real run."""
    gguf, tokens = make_fixture(args, "Qwen-Qwen2.5-7B-Instruct", "qwen2-tiny-f32", None)
    with open(os.path.join(args.templates, "Qwen-Qwen2.5-7B-Instruct.jinja"), encoding="utf-8") as f:
        text = f.read()
    msgs = [{"role": "user", "content": "What is 2 + 2?"}]
    want, _ = reference(env, text, msgs, tokens, True)
    check(want is not None and want.startswith("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud."),
          f"Qwen2.5's reference render: {want!r}")
    db = os.path.join(args.work, "qwen2.db")
    _, with_template = ask(args, gguf, db, "q25", msgs[0]["content"])
    n_want = len(tokens_of(args, gguf, want))
    check(with_template["prompt_tokens"] == n_want,
          f"Qwen2.5's template: a prompt of {with_template['prompt_tokens']} tokens, the reference text {n_want}")
    plain = os.path.join(args.fixtures, "qwen2-tiny-f32.gguf")
    _, own = ask(args, plain, os.path.join(args.work, "plain.db"), "chatml", msgs[0]["content"])
    n_plain = len(tokens_of(args, plain, "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n"))
    check(own["prompt_tokens"] == n_plain < n_want,
          f"plain ChatML: a prompt of {own['prompt_tokens']} tokens, the text without a system turn {n_plain}")
    print(f"  Qwen2.5's template on qwen2-tiny: a question without a system prompt is {with_template['prompt_tokens']} "
          f"prompt tokens with its default system turn, {own['prompt_tokens']} under the fixture's plain ChatML")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chatfs", required=True)
    ap.add_argument("--templates", required=True)
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    os.environ["TZ"] = "UTC"
    env = render_ref.environment()
    parity(args, env)
    tool_parity(args, env)
    refusal_and_ids(args)
    boundaries(args)
    qwen2_default_system(args, env)
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
