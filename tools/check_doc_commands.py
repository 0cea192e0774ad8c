#!/usr/bin/env python3
"""check_doc_commands.py - the scripts and programs a document cites are in the repository, so that every
figure's command can be run from a clone (docs/benchmarks.md is the one ctest checks).

Checks, in DOC:
  - no script or source is cited by a path of one machine (/tmp/..., /work/..., /root/..., /home/... ending in
    .sh, .py, .cpp, .h, .cu): such a file is not in a clone;
  - every tools/..., bench/..., examples/... or tests/... path it names exists in the repository;
  - every program it runs from a build folder (build/bin/X, bin/X) is one the build makes: tools/X.cpp,
    bench/Y.cpp as bench_Y, tests/progs/Y.cpp as testprog_Y, examples/ladder/*.cpp programs;
  - every --flag given to a tools/ or bench/ script inside a fenced command block appears in that script.

    tools/check_doc_commands.py DOC [ROOT]    # exit 0, or 1 with one line per problem (DOC:line: ...)

ctest runs it on docs/benchmarks.md as Docs.BenchmarkCommandsAreInTheRepository.
"""
import os
import re
import sys

MACHINE_PATH = re.compile(r"(?<![\w.])/(?:tmp|work|root|home)/[\w./-]*\.(?:sh|py|cpp|h|cu)\b")
REPO_PATH = re.compile(r"(?<![\w/.$-])((?:tools|bench|examples|tests)/[\w./-]*[\w])")
BUILT = re.compile(r"(?<![\w/.$-])(?:build/)?bin/([\w-]+)")
SCRIPT_CALL = re.compile(r"((?:tools|bench)/[\w-]+\.(?:py|sh))((?:\s+[^\s|;&#]+)*)")


def programs(root):
    """Names of the programs the build makes (CMakeLists.txt: tools/*.cpp and models/*_main.cpp without
    "_main"; bench/ and tests/CMakeLists.txt)."""
    names = set()
    models = os.path.join(root, "models")
    if os.path.isdir(models):
        names |= {f[: -len("_main.cpp")] for f in os.listdir(models) if f.endswith("_main.cpp")}
    for sub, prefix in (("tools", ""), ("bench", "bench_"), ("tests/progs", "testprog_")):
        d = os.path.join(root, sub)
        if os.path.isdir(d):
            names |= {prefix + f[:-4] for f in os.listdir(d) if f.endswith(".cpp")}
    ladder = os.path.join(root, "examples", "ladder")
    if os.path.isdir(ladder):
        for dirpath, _, files in os.walk(ladder):  # each rung*.cpp is bin/ladder_rung<N>_<idea>
            names |= {"ladder_" + f[:-4] for f in files if f.startswith("rung") and f.endswith(".cpp")}
    return names


def check(doc, root):
    problems = []
    built = programs(root)
    in_block = False
    with open(doc, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for number, line in enumerate(lines, 1):
        where = f"{os.path.relpath(doc, root)}:{number}"
        if line.startswith("```"):
            in_block = not in_block
            continue
        for m in MACHINE_PATH.finditer(line):
            problems.append(f"{where}: cites {m.group(0)}, a file of one machine, not of the repository")
        for m in REPO_PATH.finditer(line):
            path = m.group(1).rstrip(".")
            if "*" in path or "<" in path:
                continue
            if not os.path.exists(os.path.join(root, path)):
                problems.append(f"{where}: cites {path}, which is not in the repository")
        for m in BUILT.finditer(line):
            if m.group(1) not in built:
                problems.append(f"{where}: runs bin/{m.group(1)}, which the build does not make")
        if in_block:
            for m in SCRIPT_CALL.finditer(line):
                script = os.path.join(root, m.group(1))
                if not os.path.exists(script):
                    continue  # reported above
                with open(script, encoding="utf-8") as s:
                    text = s.read()
                for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", m.group(2)):
                    if flag not in text:
                        problems.append(f"{where}: {m.group(1)} is given {flag}, which it does not know")
    return problems


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: check_doc_commands.py DOC [ROOT]")
    doc = sys.argv[1]
    root = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    problems = check(doc, root)
    for p in problems:
        print(p)
    if problems:
        print(f"check_doc_commands: {len(problems)} citation(s) that a clone cannot run")
        return 1
    print(f"check_doc_commands: every script and program {os.path.basename(doc)} cites is in the repository")
    return 0


if __name__ == "__main__":
    sys.exit(main())
