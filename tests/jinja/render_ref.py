"""The reference renderer: python-jinja2 configured exactly as Hugging Face's
apply_chat_template configures it (transformers' _compile_jinja_template):

  ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                extensions=[AssistantTracker, jinja2.ext.loopcontrols])
  filters["tojson"] = json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
  globals["raise_exception"], globals["strftime_now"]

strftime_now formats a fixed moment (NOW) in local time, so that renders are comparable.
Used by parity.py; also runnable alone:  render_ref.py TEMPLATE CONTEXT.json

  render_ref.py --batch IN.json OUT.json   IN: {"templates": {name: jinja text}, "cases":
      [{"template": name, "context": {...}}, ...]}; OUT: one result per case, in order:
      {"ok": text}, {"raised": raise_exception's message} or {"error": "Class: message"}
      (tests/test_template.c renders its cases in one run this way)
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = 1767225600  # 2026-01-01 00:00:00 UTC


class AssistantTracker(Extension):
    """The {% generation %} tag as transformers defines it: renders its body unchanged and
    notes where it went when assistant masks are asked for (never here)."""

    tags = {"generation"}

    def __init__(self, environment):
        super().__init__(environment)
        environment.extend(activate_tracker=self.activate_tracker)
        self._rendered_blocks = None
        self._generation_indices = None

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context, caller):
        rv = caller()
        if self.is_active():
            start_index = len("".join(self._rendered_blocks))
            self._generation_indices.append((start_index, start_index + len(rv)))
        return rv

    def is_active(self):
        return self._rendered_blocks or self._generation_indices

    def activate_tracker(self, rendered_blocks, generation_indices):
        self._rendered_blocks = rendered_blocks
        self._generation_indices = generation_indices


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.fromtimestamp(NOW).strftime(format)


def environment():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


class Raised(Exception):
    """raise_exception's message, told apart from other template errors"""


def render(env, template, context):
    """the output, or raises Raised(message) for raise_exception and other exceptions as they come"""
    try:
        return template.render(**context)
    except jinja2.exceptions.TemplateError as e:
        if type(e) is jinja2.exceptions.TemplateError:  # raise_exception's own class, not a subclass
            raise Raised(str(e)) from None
        raise


def batch(in_path, out_path):
    env = environment()
    with open(in_path, encoding="utf-8") as f:
        job = json.load(f)
    compiled = {}
    for name, text in job["templates"].items():
        try:
            compiled[name] = env.from_string(text)
        except Exception as e:  # every case of it fails the same way
            compiled[name] = f"{type(e).__name__}: {e}"
    results = []
    for case in job["cases"]:
        template = compiled[case["template"]]
        if isinstance(template, str):
            results.append({"error": template})
            continue
        try:
            results.append({"ok": render(env, template, case["context"])})
        except Raised as e:
            results.append({"raised": str(e)})
        except Exception as e:
            results.append({"error": f"{type(e).__name__}: {e}"})
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(results, f, ensure_ascii=False)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--batch":
        batch(sys.argv[2], sys.argv[3])
        return
    if len(sys.argv) != 3:
        sys.exit("usage: render_ref.py TEMPLATE CONTEXT.json | --batch IN.json OUT.json")
    env = environment()
    with open(sys.argv[1], encoding="utf-8") as f:
        template = env.from_string(f.read())
    with open(sys.argv[2], encoding="utf-8") as f:
        context = json.load(f)
    sys.stdout.write(render(env, template, context))


if __name__ == "__main__":
    main()
