"""Differential check on a fuzzing corpus: each input's template (the bytes before its first
NUL) rendered by python-jinja2 as Hugging Face configures it (render_ref.py) and by
chatfs's interpreter, with one conversation; reports every input where python renders and
ours does not give the same bytes, or python fails and ours renders, or python's
raise_exception message differs. Not part of make test: run it after make fuzz-jinja,

  differential.py build-fuzz/corpus-jinja build/tests/jinja_render [CONVERSATION.json]

Python prints objects with their address ("<generator object ... at 0x...>"); those
addresses are removed before comparing. Templates python needs longer than 2 s for are
skipped (python has no step limit).
"""
import copy
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import render_ref  # noqa: E402


class Timeout(Exception):
    pass


def on_alarm(*_):
    raise Timeout()


def without_addresses(text):
    text = re.sub(r"<generator object \w+ at 0x[0-9a-f]+>", "<generator object>", text)
    return re.sub(r" at 0x[0-9a-f]+", "", text)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    corpus, binary = sys.argv[1], sys.argv[2]
    here = os.path.dirname(os.path.abspath(__file__))
    with open(sys.argv[3] if len(sys.argv) > 3 else os.path.join(here, "conv_reasoning.json"), encoding="utf-8") as f:
        ctx = json.load(f)
    ctx.update({"add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>"})
    os.environ["TZ"] = "UTC"
    time.tzset()
    env = render_ref.environment()
    work = tempfile.mkdtemp(prefix="chatfs-jinja-diff-")
    cpath = os.path.join(work, "context.json")
    with open(cpath, "w", encoding="utf-8") as f:
        json.dump(ctx, f, ensure_ascii=False)
    signal.signal(signal.SIGALRM, on_alarm)
    jobs, expected, skipped = [], {}, 0
    for name in sorted(os.listdir(corpus)):
        with open(os.path.join(corpus, name), "rb") as f:
            raw = f.read().split(b"\0")[0]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            skipped += 1
            continue
        if "\r" in text:  # python's lexer and ours both normalise it; keep the comparison simple
            skipped += 1
            continue
        signal.alarm(2)
        try:
            # a copy each time: Debian's jinja2 3.1.2 lets list.pop and list.clear through
            expected[name] = ("ok", render_ref.render(env, env.from_string(text), copy.deepcopy(ctx)))
        except (Timeout, RecursionError, MemoryError):
            skipped += 1
            continue
        except render_ref.Raised as e:
            expected[name] = ("raised", str(e))
        except Exception as e:
            expected[name] = ("error", f"{type(e).__name__}: {e}")
        finally:
            signal.alarm(0)
        tpath = os.path.join(work, f"{len(jobs)}.jinja")
        with open(tpath, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        jobs.append({"template": tpath, "context": cpath, "out": os.path.join(work, f"{len(jobs)}.out"), "name": name})
    with open(os.path.join(work, "manifest.json"), "w") as f:
        json.dump(jobs, f)
    subprocess.run([binary, "--batch", os.path.join(work, "manifest.json"), "--now", str(render_ref.NOW)], check=True)
    counts, bad = {"ok": 0, "raised": 0, "error": 0}, 0
    for job in jobs:
        kind, want = expected[job["name"]]
        counts[kind] += 1
        rendered = os.path.exists(job["out"])
        with open(job["out"] if rendered else job["out"] + ".err", "rb") as f:
            got = f.read().decode("utf-8", errors="surrogateescape")
        if kind == "ok":
            same = rendered and without_addresses(want) == got
        elif kind == "raised":
            same = not rendered and got == f"raised: {want}"
        else:
            same = not rendered
        if not same:
            bad += 1
            with open(job["template"], encoding="utf-8") as f:
                print(f"=== {job['name']}: python {kind} {want[:200]!r}\n    ours {got[:200]!r}\n    template {f.read()[:300]!r}")
    print(f"differential: {len(jobs)} inputs (python: {counts['ok']} render, {counts['raised']} raise, "
          f"{counts['error']} fail; {skipped} skipped), {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
