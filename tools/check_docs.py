#!/usr/bin/env python3
"""check_docs.py - the tree and its descriptions agree.

Two checks, run by `make check-docs` (part of `make test`):
1. Every repository path a document or a source comment names (`fs/names.c`,
   `engine/kernels/kernels.{h,c}`, `tests/t_*.sh`) and every relative Markdown link exists,
   so that a file that moves takes its mentions with it.
2. Each room's code table (the `| file | what |` table of engine/README.md, fs/README.md,
   store/README.md) lists exactly the room's .c and .h files: a newcomer who finds a file
   in the tree finds it in the table, and the other way round.
Prints each disagreement with its place and exits 1 when there is one.
"""
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOMS = ("engine", "fs", "store", "cli", "tests", "tools", "bench", "docs", "examples", "models")
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./{},*-]*[\w}*])" % "|".join(ROOMS))
LINK = re.compile(r"\]\(([^)\s#]+)(#[^)]*)?\)")
TABLES = {"engine/README.md": "engine", "engine/jinja/README.md": "engine/jinja", "fs/README.md": "fs",
          "store/README.md": "store"}
# paths that name what the build or a test makes, llama.cpp's files (its models/templates,
# its C++ sources) or a placeholder (engine/ROOM), not what this tree holds
MADE = re.compile(r"^(tests/fixtures/.*\.(gguf|json|f32)|tests/tmp|.*/build(/|$)|models/.*\.gguf|models/templates"
                  r"|.*\.cpp$|.*/[A-Z]+$|.*/[A-Z]+/|.*(NAME|ROOM|MODEL))")


def tracked():
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [p for p in out.splitlines() if os.path.exists(os.path.join(ROOT, p))]


def expand(path):
    """{a,b} alternatives, one level, as the documents write them"""
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [x for alt in m.group(1).split(",") for x in expand(path[:m.start()] + alt + path[m.end():])]


def exists(path, files, dirs):
    path = path.rstrip(".,/")
    for p in expand(path):
        if "*" in p:
            if not glob.glob(os.path.join(ROOT, p)):
                return False
        elif p not in files and p not in dirs and not os.path.exists(os.path.join(ROOT, p)):
            return False
    return True


def comment_text(path, text):
    """the comments of a C file or a script: what is prose there"""
    if path.endswith((".c", ".h")):
        return "\n".join(m.group(0) for m in re.finditer(r"/\*.*?\*/|//[^\n]*", text, re.S))
    return "\n".join(line for line in text.splitlines() if line.lstrip().startswith("#"))


def check_paths(files, dirs, problems):
    for f in files:
        if not f.endswith((".md", ".c", ".h", ".sh", ".py", "Makefile")) or f.startswith("tests/fixtures/"):
            continue
        with open(os.path.join(ROOT, f), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        prose = text if f.endswith(".md") else comment_text(f, text)
        for m in PATH.finditer(prose):
            p = m.group(1)
            if MADE.match(p) or p.endswith("/"):
                continue
            if not exists(p, files, dirs):
                problems.append(f"{f}: names {p}, which is not in the tree")
        if f.endswith(".md"):
            for m in LINK.finditer(text):
                target = m.group(1)
                if re.match(r"^[a-z]+:", target):
                    continue
                p = os.path.normpath(os.path.join(os.path.dirname(f), target))
                if not os.path.exists(os.path.join(ROOT, p)):
                    problems.append(f"{f}: links to {target}, which is not in the tree")


def check_tables(files, problems):
    for readme, room in TABLES.items():
        with open(os.path.join(ROOT, readme), encoding="utf-8") as fh:
            lines = fh.read().splitlines()
        listed = set()
        in_table = False
        for line in lines:
            if re.match(r"^\|\s*file\s*\|", line):
                in_table = True
                continue
            if in_table and not line.startswith("|"):
                in_table = False
            if not in_table:
                continue
            cells = line.split("|")
            for k, cell in enumerate(cells[1:-1]):
                for name in re.findall(r"`([^`]+)`", cell):
                    if k and not re.search(r"\.[ch]\b|\.\{", name):
                        continue  # the description names more than files
                    name = name if name.startswith(room + "/") else f"{room}/{name}"
                    for p in expand(name):
                        hits = glob.glob(os.path.join(ROOT, p))
                        if not hits and k == 0:
                            problems.append(f"{readme}: its code table lists {p}, which is not in the tree")
                        listed.update(os.path.relpath(h, ROOT) for h in hits)
        # a folder with a code table of its own answers for its files
        own = [r for other, r in TABLES.items() if other != readme and r.startswith(room + "/")]
        have = {f for f in files if f.startswith(room + "/") and f.endswith((".c", ".h"))
                and not any(f.startswith(r + "/") for r in own)}
        for f in sorted(have - listed):
            problems.append(f"{readme}: {f} is not in its code table")


def main():
    files = tracked()
    dirs = {os.path.dirname(f) for f in files}
    dirs |= {d for f in files for d in [f.rsplit("/", k)[0] for k in range(1, f.count("/") + 1)]}
    problems = []
    check_paths(set(files), dirs, problems)
    check_tables(files, problems)
    for p in problems:
        print("check_docs: " + p)
    print(f"check_docs: {len(files)} files, {len(problems)} disagreements")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
