#!/usr/bin/env python3
"""ncu_kernel_summary.py - where one training step's GPU time goes, from an Nsight Compute CSV.

Reads the CSV that `ncu --metrics gpu__time_duration.sum --csv --print-units base PROGRAM` writes (one row per
kernel launch, in launch order), cuts out one step - the launches after the N-th group of optimizer launches
(kernels whose name contains --step-marker, 'adamw' by default) up to the end of the next group - and prints the
kernel time of that step and a table of kernel names by total time: launches, ms, share. Used on the H200 on
2026-12-04 (docs/gpu.md, "Where GPT-2 small's step goes"):

  ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \\
      build/bin/bench_e2e --device cuda --config gpt2-small --dtype bf16 --warmup 1 --steps 1 --batch-size 8 >k.csv
  tools/ncu_kernel_summary.py k.csv            # the step after the first optimizer step

Without a marker in the file, or with --all, every launch is summed.
"""
import argparse
import csv
import re
import sys
from collections import defaultdict


def launches(path):
    """(kernel name, nanoseconds) per launch, in order; lines that are not CSV rows of a launch are skipped."""
    out = []
    with open(path, newline="") as f:
        header = None
        for row in csv.reader(f):
            if not row:
                continue
            if row[0] == "ID":
                header = row
                continue
            if header is None or not row[0].isdigit() or len(row) != len(header):
                continue
            rec = dict(zip(header, row))
            if rec.get("Metric Name") != "gpu__time_duration.sum":
                continue
            value = float(rec["Metric Value"].replace(",", ""))
            unit = rec.get("Metric Unit", "ns")
            scale = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6}.get(unit)
            if scale is None:
                sys.exit(f"ncu_kernel_summary: unknown unit '{unit}' in {path}; run ncu with --print-units base")
            out.append((rec["Kernel Name"], value * scale))
    return out


def marker_groups(names, marker):
    """[first, last] index of each run of consecutive launches whose name contains marker."""
    groups, start = [], None
    for i, n in enumerate(names + [""]):
        hit = marker in n.lower()
        if hit and start is None:
            start = i
        if not hit and start is not None:
            groups.append((start, i - 1))
            start = None
    return groups


def short(name, width):
    name = re.sub(r"\(.*", "", name)  # the argument list
    return name if len(name) <= width else name[: width - 3] + "..."


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--step-marker", default="adamw", help="substring of the optimizer's kernel names")
    ap.add_argument("--after", type=int, default=1, help="the step after this many optimizer groups (default 1)")
    ap.add_argument("--all", action="store_true", help="sum every launch in the file")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--width", type=int, default=90)
    a = ap.parse_args()
    ks = launches(a.csv)
    if not ks:
        sys.exit(f"ncu_kernel_summary: no kernel launches with gpu__time_duration.sum in {a.csv}")
    names = [n for n, _ in ks]
    groups = marker_groups(names, a.step_marker.lower())
    if a.all or len(groups) <= a.after:
        lo, hi, what = 0, len(ks) - 1, "every launch"
        if not a.all:
            what += f" (fewer than {a.after + 1} groups of '{a.step_marker}' launches)"
    else:
        lo, hi = groups[a.after - 1][1] + 1, groups[a.after][1]
        what = f"launches {lo}..{hi}: after optimizer group {a.after}, through the next"
    step = ks[lo : hi + 1]
    total = sum(t for _, t in step)
    print(f"{what}: {len(step)} kernels, {total / 1e6:.3f} ms of kernel time")
    agg = defaultdict(lambda: [0, 0.0])
    for n, t in step:
        agg[short(n, a.width)][0] += 1
        agg[short(n, a.width)][1] += t
    print(f"{'ms':>8} {'launches':>8} {'share':>6}  kernel")
    for n, (c, t) in sorted(agg.items(), key=lambda kv: -kv[1][1])[: a.top]:
        print(f"{t / 1e6:8.3f} {c:8d} {100 * t / total:5.1f}%  {n}")


if __name__ == "__main__":
    main()
