#!/usr/bin/env python3
"""torch_host_cost.py - the host cost of the framework, ddp.cpp vs PyTorch eager, alternated in one run.

Rows: one op on one-element tensors without and with the autograd graph (add, mul, linear, layer_norm, gelu),
and the training step of a GPT too small to compute anything (d_model 8, 2 heads, 2 blocks, context 4, batch 1,
vocab 256; AdamW): forward, cross-entropy, backward, optimizer step, zero_grad. ddp.cpp's side is
bench_micro_host_cost (bench/micro_host_cost.cpp), PyTorch's the same shapes here (the GPT is
bench/pytorch_twin.py's). Both use one thread. Times are CPU time per call (process CPU time, so a busy machine
stretches them less than wall time), medians over the rounds; rounds alternate ddp.cpp and PyTorch.

    python bench/torch_host_cost.py --bench build/bin/bench_micro_host_cost [--rounds 3]
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
import types

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_twin  # noqa: E402

OPS = ["add", "mul", "linear", "layer_norm", "gelu"]


def machine_line():
    model, flags = "unknown CPU", set()
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name") and model == "unknown CPU":
            model = line.split(":", 1)[1].strip()
        elif line.startswith("flags") and not flags:
            flags = set(line.split(":", 1)[1].split())
    isa = "AVX-512" if "avx512f" in flags else "AVX2+FMA" if {"avx2", "fma"} <= flags else "no AVX2"
    return (f"machine: {model}, {isa}, {len(os.sched_getaffinity(0))} cores for this process; "
            f"PyTorch {torch.__version__}; {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")


def cpu_ns_per_call(fn, min_s):
    fn()
    n, start = 0, time.process_time()
    while True:
        for _ in range(64):
            fn()
        n += 64
        used = time.process_time() - start
        if used >= min_s:
            return used / n * 1e9


def torch_rows(min_s):
    rows = {}
    for record in (False, True):
        leaf = lambda *s: torch.ones(*s, requires_grad=record)  # noqa: E731
        a, b, x, w, bias = leaf(1), leaf(1), leaf(1, 1), leaf(1, 1), leaf(1)
        fns = {"add": lambda: torch.add(a, b), "mul": lambda: torch.mul(a, b),
               "linear": lambda: F.linear(x, w, bias), "layer_norm": lambda: F.layer_norm(x, (1,), bias, bias),
               "gelu": lambda: F.gelu(a, approximate="tanh")}
        for name in OPS:
            rows[f"{name} {'recorded' if record else 'no_grad'}"] = cpu_ns_per_call(fns[name], min_s)
    args = types.SimpleNamespace(device="cpu", gpt_width=8, gpt_heads=2, gpt_depth=2, gpt_context=4,
                                 batch_size=1)
    model, x, y, _ = pytorch_twin.build("gpt", 0, torch, torch.nn, F, args)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)

    def step():
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
    rows["gpt step"] = cpu_ns_per_call(step, 2 * min_s)
    return rows


def ours_rows(bench, min_s):
    out = subprocess.run([bench, "--benchmark_format=json", f"--benchmark_min_time={min_s}"], check=True,
                         capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1")).stdout
    rows = {}
    for b in json.loads(out)["benchmarks"]:
        scale = {"ns": 1, "us": 1e3, "ms": 1e6}[b["time_unit"]]
        name = "gpt step" if b["name"].startswith("HostCost_GptStep") else b["label"]
        rows[name] = b["cpu_time"] * scale
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bench", default="build/bin/bench_micro_host_cost")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--min-time", type=float, default=0.3, help="seconds of CPU time per row and round")
    args = p.parse_args()
    torch.set_num_threads(1)
    print(machine_line())
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    ours, theirs = [], []
    for r in range(args.rounds):
        ours.append(ours_rows(args.bench, args.min_time))
        theirs.append(torch_rows(args.min_time))
    print(f"load average after: {os.getloadavg()[0]:.2f}; {args.rounds} rounds, CPU ns per call (median)")
    print(f"| row | ddp.cpp | PyTorch {torch.__version__.split('+')[0]} eager | PyTorch / ddp.cpp |")
    print("|---|---:|---:|---:|")
    for name in [f"{o} {m}" for m in ("no_grad", "recorded") for o in OPS] + ["gpt step"]:
        a = statistics.median(r[name] for r in ours)
        b = statistics.median(r[name] for r in theirs)
        unit, div = ("us", 1e3) if name == "gpt step" else ("ns", 1)
        print(f"| {name} | {a / div:.0f} {unit} | {b / div:.0f} {unit} | {b / a:.2f}x |")


if __name__ == "__main__":
    main()
