#!/usr/bin/env python3
"""compare_pytorch.py - the PyTorch vs ddp.cpp table from a bench JSON-lines file: bench_e2e records
("kind": "e2e") against pytorch_twin.py records ("kind": "pytorch") of the same configuration, mode and world,
each side the median over passes of its per-run step median; ratio = ddp.cpp / PyTorch (< 1: ddp.cpp faster).
When PyTorch ran the same configuration with several thread counts (tools/bench.sh adds 1 thread at world 1),
its fastest setting is the one compared against, and "PT thr" names it.

  python3 bench/compare_pytorch.py runs/bench-....json
"""
import json
import statistics
import sys
from collections import defaultdict


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: compare_pytorch.py BENCH.json")
    ours, theirs = defaultdict(list), defaultdict(list)
    ours_opt, theirs_opt = defaultdict(list), defaultdict(list)
    with open(sys.argv[1]) as f:
        for line in f:
            r = json.loads(line)
            if r.get("kind") == "e2e" and r.get("mode") in ("nosync", "ddp") and "vs-pytorch" in r.get("label", ""):
                key = (r["config"], r["mode"], r["world"])
                ours[key].append(r["step_s"]["median"])
                ours_opt[key].append(r["optimizer_s"]["median"])
            elif r.get("kind") == "pytorch":
                key = (r["config"], r["mode"], r["world"], r.get("threads", 0))
                theirs[key].append(r["step_s"])
                theirs_opt[key].append(r["optimizer_s"])
    # PyTorch's fastest thread setting per configuration (median over passes of each setting)
    best = {}
    for (config, mode, world, threads), steps in theirs.items():
        key, med = (config, mode, world), statistics.median(steps)
        if key not in best or med < best[key][0]:
            best[key] = (med, threads)
    keys = sorted(set(ours) & set(best))
    if not keys:
        print("compare_pytorch: no matching bench_e2e / pytorch_twin records")
        return
    print(f"  {'config':6} {'mode':6} {'world':>5} {'PyTorch ms':>11} {'ddp.cpp ms':>11} {'ratio':>6}"
          f" {'opt PT ms':>10} {'opt ours ms':>11} {'passes':>6} {'PT thr':>6}")
    for k in keys:
        t, threads = best[k]
        tk = k + (threads,)
        o = statistics.median(ours[k])
        print(f"  {k[0]:6} {k[1]:6} {k[2]:5d} {t * 1e3:11.2f} {o * 1e3:11.2f} {o / t:6.2f}"
              f" {statistics.median(theirs_opt[tk]) * 1e3:10.3f} {statistics.median(ours_opt[k]) * 1e3:11.3f}"
              f" {min(len(theirs[tk]), len(ours[k])):6d} {threads:6d}")


if __name__ == "__main__":
    main()
