#!/usr/bin/env python3
"""torch_cross_entropy.py - PyTorch's F.cross_entropy forward on the logits of bench_micro_ops' cross_entropy row
(4096 x 256 float32 = 1M values, 4 MiB, in cache) against a copy of the same tensor, at one thread: the figure
docs/benchmarks.md ("CPU kernels against copy bandwidth") sets beside ddp.cpp's cross-entropy forward.

    /usr/bin/python3 bench/torch_cross_entropy.py [--rows 4096] [--cols 256] [--threads 1] [--repeats 5]

Prints the median microseconds per call of each over `--repeats` timed rounds (each round: as many calls as fit
in about 0.2 s, after a warm-up), and their ratio. Needs PyTorch (Debian: python3-torch).
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from python_deps import require  # noqa: E402


def per_call_us(fn, seconds=0.2):
    """Microseconds per call of fn() over about `seconds` (one round, after one warm-up call)."""
    fn()
    calls, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        fn()
        calls += 1
    return (time.perf_counter() - t0) / calls * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    require("torch", "python3-torch", "torch_cross_entropy.py")
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(a.rows, a.cols, generator=g)
    targets = torch.randint(0, a.cols, (a.rows,), generator=g)
    out = torch.empty_like(logits)
    with torch.no_grad():
        ce = [per_call_us(lambda: F.cross_entropy(logits, targets)) for _ in range(a.repeats)]
        cp = [per_call_us(lambda: out.copy_(logits)) for _ in range(a.repeats)]
    ce_us, cp_us = statistics.median(ce), statistics.median(cp)
    print(f"torch {torch.__version__}, {a.threads} thread(s), logits {a.rows} x {a.cols} float32")
    print(f"F.cross_entropy forward: {ce_us:.1f} us per call (median of {a.repeats})")
    print(f"copy of the logits:      {cp_us:.1f} us per call")
    print(f"copy / cross_entropy:    {cp_us / ce_us:.2f}")


if __name__ == "__main__":
    main()
