#!/usr/bin/env python3
"""chat_format.py - the default model's chat format: Qwen3.5's own chat template, rendered with jinja2 the way
Hugging Face's apply_chat_template renders it, and the tokens of one assistant reply as the model generates them.

The template (qwen35-chat-template.jinja) is Qwen3.5's published chat template, byte for byte the text of
llama.cpp's models/templates/Qwen3.5-4B.jinja; export_gguf.py stores it in tokenizer.chat_template, so chatfs,
llama.cpp and Hugging Face render the default model's prompts as for a real Qwen3.5, and training renders its
prompts with the very same template:

  generation prompt, thinking on (the default):  ...<|im_start|>assistant\\n<think>\\n
  generation prompt, enable_thinking = false:    ...<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n
  past assistant turns (before the last user message): <|im_start|>assistant\\nANSWER<|im_end|>\\n (reasoning dropped)

What the model generates after the generation prompt (reply_text):
  thinking on:   REASONING "\\n</think>\\n\\n" ANSWER <|im_end|>     (REASONING empty for tasks that answer directly)
  thinking off:  ANSWER <|im_end|>
which is exactly what the template renders for that reply as the last assistant message (check_turn).

Prompt and reply are tokenized separately, as at inference: the engine tokenizes the rendered prompt and the model
then emits the reply token by token (tokenizing the two texts together would merge "<think>\\n" + "\\n</think>"
into one "\\n\\n" token the model never emits).
"""

import json
import os

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE_PATH = os.path.join(HERE, "qwen35-chat-template.jinja")
with open(TEMPLATE_PATH, encoding="utf-8") as _f:
    TEMPLATE = _f.read()

END_THINK = "\n</think>\n\n"     # closes the reasoning (the template's "\n</think>\n\n")
EOT = "<|im_end|>"


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


# configured as transformers' _compile_jinja_template: sandboxed, trim_blocks, lstrip_blocks, loopcontrols,
# its tojson filter and raise_exception global
_env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
_env.filters["tojson"] = _tojson
_env.globals["raise_exception"] = _raise_exception
_template = _env.from_string(TEMPLATE)


def render(messages, add_generation_prompt=True, thinking=True):
    """The template's text for messages ([{"role", "content", optional "reasoning_content"}])."""
    return _template.render(messages=messages, tools=None, documents=None,
                            add_generation_prompt=add_generation_prompt, enable_thinking=bool(thinking))


def reply_text(answer, reasoning, thinking):
    """The text the model generates after the generation prompt, up to and including <|im_end|>."""
    if thinking:
        return reasoning + END_THINK + answer + EOT
    assert not reasoning, "thinking off: no reasoning"
    return answer + EOT


def check_turn(messages, answer, reasoning, thinking):
    """The generation prompt + the reply == the template's rendering of the conversation with that reply as the
    last assistant message (so training, chatfs and llama.cpp all see the same bytes)."""
    last = {"role": "assistant", "content": answer}
    if reasoning:
        last["reasoning_content"] = reasoning
    whole = render(messages + [last], add_generation_prompt=False, thinking=thinking)
    ours = render(messages, True, thinking) + reply_text(answer, reasoning, thinking) + "\n"
    assert whole == ours, (whole, ours)


def encode_prompt(tok, messages, thinking, history_loss=False):
    """Token ids of the generation prompt for messages, and a mask that is 1 on the earlier assistant answers as
    the template renders them in the history (each answer and its <|im_end|>) when history_loss is set: an extra
    training signal on the answers the prompt contains anyway (0 everywhere otherwise)."""
    text = render(messages, True, thinking)
    if not history_loss:
        ids = tok.encode(text)
        return ids, [0] * len(ids)
    ids, mask, pos = [], [], 0
    for m in messages:
        if m["role"] != "assistant":
            continue
        head = "<|im_start|>assistant\n"
        i = text.index(head + m["content"] + EOT, pos) + len(head)
        j = i + len(m["content"]) + len(EOT)
        for seg, target in ((text[pos:i], 0), (text[i:j], 1)):
            t = tok.encode(seg)
            ids += t
            mask += [target] * len(t)
        pos = j
    t = tok.encode(text[pos:])
    ids += t
    mask += [0] * len(t)
    return ids, mask


def encode_turn(tok, messages, answer, reasoning, thinking, cut=None, history_loss=False):
    """Token ids of one training example and its loss mask (1 = a token the model must generate).

    messages: the conversation up to the user message being answered. cut = (u, newline): the reasoning is cut
    after a share u (0 <= u < 1) of its tokens, at least one and not the last, by a forced "\n</think>"
    (newline true) or "</think>" (false), as a thinking budget cuts it; the forced tokens are not targets, the
    "\n\n" and the answer after them are. A reasoning of fewer than 3 tokens is not cut. history_loss: the
    earlier answers in the prompt are targets too (encode_prompt)."""
    prompt, pmask = encode_prompt(tok, messages, thinking, history_loss)
    reply = tok.encode(reply_text(answer, reasoning, thinking))
    j = reply.index(tok.end_think) if thinking else 0
    if cut is None or j < 3:
        return prompt + reply, pmask + [1] * len(reply)
    u, newline = cut
    k = 1 + int(u * (j - 2))
    forced = tok.encode("\n</think>" if newline else "</think>")
    tail = tok.encode("\n\n" + answer + EOT)
    ids = prompt + reply[:k] + forced + tail
    return ids, pmask + [1] * k + [0] * len(forced) + [1] * len(tail)


def reasoning_tokens(tok, answer, reasoning):
    """Number of reply tokens before </think> (thinking on): where a cut may happen."""
    return tok.encode(reply_text(answer, reasoning, True)).index(tok.end_think)


if __name__ == "__main__":
    # self-test: the template's switch and history as described above
    msgs = [{"role": "system", "content": "Be concise."}, {"role": "user", "content": "What is 12 + 7 + 30?"}]
    assert render(msgs, True, True).endswith("<|im_start|>user\nWhat is 12 + 7 + 30?<|im_end|>\n"
                                             "<|im_start|>assistant\n<think>\n")
    assert render(msgs, True, False).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    for th in (True, False):
        check_turn(msgs, "12 + 7 + 30 = 49.", "12 + 7 = 19.\n19 + 30 = 49." if th else "", th)
        check_turn(msgs, "12 + 7 + 30 = 49.", "", th)
    hist = msgs + [{"role": "assistant", "content": "12 + 7 + 30 = 49.", "reasoning_content": "12 + 7 = 19."},
                   {"role": "user", "content": "Add 5 to that."}]
    r = render(hist, True, True)
    assert "<|im_start|>assistant\n12 + 7 + 30 = 49.<|im_end|>\n<|im_start|>user\nAdd 5 to that." in r, r
    # a past reply stored with its think block (as a client keeps the generated text) renders the same
    hist2 = msgs + [{"role": "assistant", "content": "12 + 7 = 19.\n</think>\n\n12 + 7 + 30 = 49."},
                    {"role": "user", "content": "Add 5 to that."}]
    assert render(hist2, True, True) == r
    print("chat_format: template renders and reply texts agree")
