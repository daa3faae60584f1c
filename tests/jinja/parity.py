"""Rendering parity: every chat template in a directory, over every conversation given,
rendered by python-jinja2 as Hugging Face does (render_ref.py) and by chatfs's interpreter
(jinja_render --batch), compared byte for byte.

Each conversation is rendered with add_generation_prompt true and false, and with
enable_thinking true, false and absent. A template "renders identically" when python
renders it for at least one case and every case agrees: the same bytes where python
renders, and an error where python fails (the same message when python's error is the
template's own raise_exception). Templates python renders for no case are counted apart.

  parity.py --binary build/tests/jinja_render --templates DIR [--must GLOB ...] CONV.json ...

Exit status 1 if a template matching a --must pattern does not render identically (or
python cannot render it).
"""
import argparse
import fnmatch
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import render_ref  # noqa: E402

BOS, EOS = "<|startoftext|>", "<|endoftext|>"


def variants(conv):
    """the contexts one conversation file gives"""
    for gen in (True, False):
        for thinking in (True, False, None):
            ctx = {k: v for k, v in conv.items() if k != "name"}
            ctx.setdefault("bos_token", BOS)
            ctx.setdefault("eos_token", EOS)
            ctx["add_generation_prompt"] = gen
            if thinking is not None:
                ctx["enable_thinking"] = thinking
            name = f"gen{int(gen)}-think{'-' if thinking is None else int(thinking)}"
            yield name, ctx


def first_difference(a, b):
    n = min(len(a), len(b))
    i = next((k for k in range(n) if a[k] != b[k]), n)
    return i, a[max(0, i - 40):i + 40], b[max(0, i - 40):i + 40]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--templates")
    ap.add_argument("--must", action="append", default=[], help="glob of template file names that must match")
    ap.add_argument("--cases", help="JSON file of small templates, each rendered with its own vars; all must agree")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("conversations", nargs="*")
    args = ap.parse_args()

    os.environ["TZ"] = "UTC"
    time.tzset()
    env = render_ref.environment()
    convs = []
    for path in args.conversations:
        with open(path, encoding="utf-8") as f:
            conv = json.load(f)
        convs.append((os.path.splitext(os.path.basename(path))[0], conv))
    templates = sorted(f for f in os.listdir(args.templates) if f.endswith(".jinja")) if args.templates else []

    work = tempfile.mkdtemp(prefix="chatfs-jinja-")
    jobs, expected = [], {}  # expected[(template, case)] = ("ok", text) | ("raised", msg) | ("error", msg)
    for ti, tname in enumerate(templates):
        tpath = os.path.join(args.templates, tname)
        with open(tpath, encoding="utf-8") as f:
            source = f.read()
        try:
            template = env.from_string(source)
        except Exception as e:  # python cannot compile it: every case is an error
            template, compile_error = None, f"{type(e).__name__}: {e}"
        for cname, conv in convs:
            for vname, ctx in variants(conv):
                case = f"{cname}.{vname}"
                cpath = os.path.join(work, f"{cname}.{vname}.json")
                if ti == 0:
                    with open(cpath, "w", encoding="utf-8") as f:
                        json.dump(ctx, f, ensure_ascii=False)
                if template is None:
                    expected[(tname, case)] = ("error", compile_error)
                else:
                    try:
                        expected[(tname, case)] = ("ok", render_ref.render(env, template, ctx))
                    except render_ref.Raised as e:
                        expected[(tname, case)] = ("raised", str(e))
                    except Exception as e:
                        expected[(tname, case)] = ("error", f"{type(e).__name__}: {e}")
                out = os.path.join(work, f"{ti}.{case}.out")
                jobs.append({"template": tpath, "context": cpath, "out": out})
    cases = []  # (index, template text, expected)
    if args.cases:
        with open(args.cases, encoding="utf-8") as f:
            spec = json.load(f)
        common = spec.get("vars", {})
        for i, case in enumerate(spec["cases"]):
            text = case["template"]
            ctx = dict(common, **case.get("vars", {}))
            tpath, cpath = os.path.join(work, f"case{i}.jinja"), os.path.join(work, f"case{i}.json")
            with open(tpath, "w", encoding="utf-8", newline="") as f:
                f.write(text)
            with open(cpath, "w", encoding="utf-8") as f:
                json.dump(ctx, f, ensure_ascii=False)
            try:
                want = ("ok", render_ref.render(env, env.from_string(text), ctx))
            except render_ref.Raised as e:
                want = ("raised", str(e))
            except Exception as e:
                want = ("error", f"{type(e).__name__}: {e}")
            cases.append((i, text, want))
            jobs.append({"template": tpath, "context": cpath, "out": os.path.join(work, f"case{i}.out")})
    manifest = os.path.join(work, "manifest.json")
    with open(manifest, "w", encoding="utf-8") as f:
        json.dump(jobs, f)
    subprocess.run([args.binary, "--batch", manifest, "--now", str(render_ref.NOW)], check=True)

    identical, rendered, refused, failures = [], [], [], []
    for ti, tname in enumerate(templates):
        python_ok, mismatches = 0, []
        for job in (j for j in jobs if j["template"].endswith("/" + tname)):
            case = os.path.basename(job["out"])[len(f"{ti}."):-len(".out")]
            kind, want = expected[(tname, case)]
            python_ok += kind == "ok"
            got_ok = os.path.exists(job["out"])
            if got_ok:
                with open(job["out"], "rb") as f:
                    got = f.read().decode("utf-8", errors="surrogateescape")
            else:
                with open(job["out"] + ".err", encoding="utf-8", errors="replace") as f:
                    got = f.read()
            if kind == "ok" and (not got_ok or got != want):
                if got_ok:
                    at, w, g = first_difference(want, got)
                    mismatches.append(f"{case}: differs at {at}: python {w!r} ours {g!r}")
                else:
                    mismatches.append(f"{case}: python renders, ours fails: {got}")
            elif kind == "raised" and got != f"raised: {want}":
                mismatches.append(f"{case}: python raises {want!r}, ours: {'renders' if got_ok else got}")
            elif kind == "error" and got_ok:
                mismatches.append(f"{case}: python fails ({want[:120]}), ours renders")
        if python_ok == 0:
            refused.append(tname)
            continue
        rendered.append(tname)
        if mismatches:
            failures.append((tname, mismatches))
        else:
            identical.append(tname)

    case_failures = []
    for i, text, (kind, want) in cases:
        out = os.path.join(work, f"case{i}.out")
        got_ok = os.path.exists(out)
        with open(out if got_ok else out + ".err", "rb") as f:
            got = f.read().decode("utf-8", errors="surrogateescape")
        if kind == "ok" and got != want:
            case_failures.append(f"case {i} {text!r}:\n    python {want!r}\n    ours   {got!r}")
        elif kind == "raised" and got != f"raised: {want}":
            case_failures.append(f"case {i} {text!r}: python raises {want!r}, ours {got!r}")
        elif kind == "error" and got_ok:
            case_failures.append(f"case {i} {text!r}: python fails ({want}), ours renders {got!r}")
        elif args.verbose and kind == "error":
            print(f"case {i}: both fail: python {want} | ours {got}")
    for f in case_failures:
        print(f"DIFF {f}")
    if cases:
        print(f"jinja cases: {len(cases) - len(case_failures)} of {len(cases)} agree with python "
              f"({sum(1 for c in cases if c[2][0] != 'ok')} of them errors in both)")

    for tname, mismatches in failures:
        print(f"DIFF {tname}: {len(mismatches)} case(s)")
        for m in mismatches[: 999 if args.verbose else 3]:
            print(f"    {m}")
    if templates and convs:
        print(f"python refuses (renders no case): {len(refused)}: {' '.join(refused)}")
        print(f"jinja parity: {len(identical)} templates render identically out of {len(rendered)} that python renders "
              f"({len(templates)} templates, {len(convs) * 6} cases each)")
    bad = [f"case {f.split(' ', 2)[1]} differs" for f in case_failures]
    for pattern in args.must:
        names = [t for t in templates if fnmatch.fnmatch(t, pattern)]
        if not names:
            bad.append(f"{pattern}: no such template")
        bad += [f"{t}: must render identically" for t in names if t not in identical]
    for b in bad:
        print(f"FAIL {b}")
    if not bad:
        import shutil
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"(outputs kept in {work})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
