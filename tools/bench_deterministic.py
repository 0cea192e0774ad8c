#!/usr/bin/env python3
"""bench_deterministic.py - the cost of `train --deterministic` beside the normal DDP step (docs/determinism.md,
docs/benchmarks.md): the gpt (and optionally the mlp) at world 2 over shm, the same 32 rows per step in every
mode, modes alternated within each round so that the machine's drift hits all alike.

  normal       DDP: 16 rows per rank, bucketed all-reduce overlapped with backward
  det M=2      --deterministic --micro-batches 2 --batch-size 16: one micro-batch per rank (same GEMM shapes)
  det M=4      --deterministic --micro-batches 4 --batch-size 8: two per rank (worlds 1, 2 and 4 agree)

    tools/bench_deterministic.py [--build build] [--rounds 5] [--steps 40] [--models gpt mlp]

Prints every run's median step (train's summary: median over the steps after the first 2) and per mode the
median over the rounds, the spread (min-max of the rounds) and the ratio to the normal step of the same round,
and the bytes each rank hands to gradient collectives per step (train's summary line).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

MODES = {
    "normal": ["--batch-size", "16"],
    "det M=2": ["--deterministic", "--micro-batches", "2", "--batch-size", "16"],
    "det M=4": ["--deterministic", "--micro-batches", "4", "--batch-size", "8"],
}
STEP = re.compile(r"median step ([0-9.]+) ms")
MIB = re.compile(r"([0-9.]+) MiB per step")


def run(build, model, mode, steps):
    cmd = [f"{build}/bin/ddprun", "--standalone", "--nproc-per-node", "2", "--local-ranks-filter", "0",
           f"{build}/bin/train", "--model", model, "--data", "synthetic", "--steps", str(steps + 2),
           "--log-interval", "0", "--eval-interval", "0", "--eval-batches", "1", "--sample-tokens", "0",
           "--threads", "1", "--optimizer", "adamw"] + MODES[mode]
    out = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    if out.returncode != 0:
        sys.exit(f"bench_deterministic: {' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")
    step, mib = STEP.search(out.stdout), MIB.search(out.stdout)
    if not step or not mib:
        sys.exit(f"bench_deterministic: no median step / MiB line in the output of {' '.join(cmd)}:\n{out.stdout}")
    return float(step.group(1)), float(mib.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--models", nargs="+", default=["gpt"])
    a = ap.parse_args()
    for model in a.models:
        times = {m: [] for m in MODES}
        ratios = {m: [] for m in MODES}
        mib = {}
        for r in range(a.rounds):
            order = list(MODES) if r % 2 == 0 else list(reversed(MODES))
            got = {}
            for m in order:
                got[m], mib[m] = run(a.build, model, m, a.steps)
                print(f"round {r + 1} {model} {m}: median step {got[m]:.2f} ms", flush=True)
            for m in MODES:
                times[m].append(got[m])
                ratios[m].append(got[m] / got["normal"])
        print(f"\n{model} at world 2 over shm, 32 rows per step, {a.rounds} rounds x {a.steps} steps:")
        print(f"| mode | median step (ms) | spread (ms) | ratio to normal (median of rounds) | MiB per step per rank |")
        print("|---|---:|---:|---:|---:|")
        for m in MODES:
            t = times[m]
            print(f"| {m} | {statistics.median(t):.2f} | {min(t):.2f}-{max(t):.2f} | "
                  f"{statistics.median(ratios[m]):.2f} | {mib[m]:.3f} |")


if __name__ == "__main__":
    main()
