#!/usr/bin/env python3
"""compare_pytorch.py - the PyTorch vs ddp.cpp table from a bench JSON-lines file: bench_e2e records
("kind": "e2e", label "vs-pytorch ...") against pytorch_twin.py records ("kind": "pytorch") of the same
configuration, mode, world and threads per rank, each side the median over passes of its per-run step median.
One row per (config, mode, world, threads): ddp.cpp's step, then per PyTorch seen (version and variant: 1.13
eager, 2.x eager, 2.x compile) its step and the ratio ddp.cpp / PyTorch (< 1: ddp.cpp faster); torch.compile's
compilation time (the median over passes of compile_s, not part of its step) in the last column.

  python3 bench/compare_pytorch.py runs/bench-....json
"""
import json
import statistics
import sys
from collections import defaultdict


def side_name(r):
    """'1.13 eager', '2.15 compile', ... from a pytorch_twin record (older records have no variant: eager)."""
    version = ".".join(str(r.get("torch", "?")).split("+")[0].split(".")[:2])
    return f"{version} {r.get('variant', 'eager')}"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: compare_pytorch.py BENCH.json")
    ours = defaultdict(list)                          # (config, mode, world, threads) -> steps
    theirs = defaultdict(lambda: defaultdict(list))   # side -> key -> steps
    compile_s = defaultdict(lambda: defaultdict(list))
    with open(sys.argv[1]) as f:
        for line in f:
            r = json.loads(line)
            if r.get("kind") == "e2e" and r.get("mode") in ("nosync", "ddp") and "vs-pytorch" in r.get("label", ""):
                ours[(r["config"], r["mode"], r["world"], r.get("threads", 0))].append(r["step_s"]["median"])
            elif r.get("kind") == "pytorch":
                key, side = (r["config"], r["mode"], r["world"], r.get("threads", 0)), side_name(r)
                theirs[side][key].append(r["step_s"])
                if r.get("variant") == "compile":
                    compile_s[side][key].append(r.get("compile_s", 0.0))
    sides = sorted(theirs, key=lambda s: (s.split()[0].split("."), s.split()[1] != "eager"))
    keys = sorted(k for k in ours if any(k in theirs[s] for s in sides))
    if not keys:
        print("compare_pytorch: no matching bench_e2e / pytorch_twin records (same config, mode, world, threads)")
        return
    head = f"  {'config':6} {'mode':6} {'world':>5} {'thr':>3} {'ddp.cpp ms':>10}"
    for s in sides:
        head += f" {('PT ' + s + ' ms'):>19} {'ratio':>5}"
    head += "  compile s" if compile_s else ""
    print(head)
    for k in keys:
        o = statistics.median(ours[k])
        row = f"  {k[0]:6} {k[1]:6} {k[2]:5d} {k[3]:3d} {o * 1e3:10.2f}"
        for s in sides:
            if k in theirs[s]:
                t = statistics.median(theirs[s][k])
                row += f" {t * 1e3:19.2f} {o / t:5.2f}"
            else:
                row += f" {'-':>19} {'-':>5}"
        for s in sides:
            if k in compile_s[s]:
                row += f"  {statistics.median(compile_s[s][k]):.1f} ({s.split()[0]})"
        print(row)
    print("  (ratio = ddp.cpp / PyTorch with the same threads per rank; compile s: torch.compile's first-step "
          "excess over the median step, excluded from its step time)")


if __name__ == "__main__":
    main()
