#!/usr/bin/env python3
"""torch_backend.py - the ddpcpp torch.distributed backend against Gloo, in the same 2 processes, alternated:

  1. all_reduce (float32 sum) bus bandwidth, 4 KiB to 64 MiB: per size, ROUNDS rounds of ITERS calls on each
     group in turn; the median call (slowest rank's), busbw = 2 (w-1)/w x bytes / time;
  2. PyTorch DDP's training step of the mlp (784-1024-1024-10 ReLU, float32, batch 64 per rank, SGD lr 0.01;
     bench/pytorch_twin.py's config): median step of DDP over Gloo and DDP over ddpcpp (the same model and data),
     one step each in turn (ABBA), and the same step under no_sync() (no communication): step minus that is the
     communication the step waits for.

    PYTHONPATH=build/ddp_cpp_py ~/.cache/ddp.cpp/torch2/bin/python bench/torch_backend.py [--quick] [--json F]

Needs the ddp_cpp package (tests/torch_backend/run.sh BUILD build, or pip install --no-build-isolation ./python).
One torch thread per rank. Prints markdown tables (docs/pytorch.md).
"""
import argparse
import datetime
import json
import multiprocessing as mp
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def median_max(times):
    """The median of this rank's times, then the largest over the ranks (the group waits for the slowest)."""
    m = torch.tensor([statistics.median(times)], dtype=torch.float64)
    dist.all_reduce(m, op=dist.ReduceOp.MAX)
    return m.item()


def bench_allreduce(groups, sizes, rounds, iters):
    world = dist.get_world_size()
    rows = []
    for nbytes in sizes:
        t = torch.ones(nbytes // 4)
        times = {name: [] for name in groups}
        for name, g in groups.items():  # warm-up
            for _ in range(2):
                dist.all_reduce(t, group=g)
        for _ in range(rounds):
            for name, g in groups.items():
                for _ in range(iters):
                    dist.barrier(group=g)
                    t0 = time.perf_counter()
                    dist.all_reduce(t, group=g)
                    times[name].append(time.perf_counter() - t0)
        row = {"bytes": nbytes}
        for name in groups:
            s = median_max(times[name])
            row[name] = {"ms": s * 1e3, "busbw_gbs": 2 * (world - 1) / world * nbytes / s / 1e9}
        rows.append(row)
    return rows


def mlp():
    return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))


def bench_ddp(groups, blocks, steps, rank):
    from torch.nn.parallel import DistributedDataParallel as DDP

    runs = {}
    for name, g in groups.items():
        torch.manual_seed(0)
        model = DDP(mlp(), process_group=g)
        runs[name] = (model, torch.optim.SGD(model.parameters(), lr=0.01))
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(64, 784, generator=gen)
    y = torch.randint(0, 10, (64,), generator=gen)
    loss_fn = nn.CrossEntropyLoss()

    def step(model, opt, sync):
        t0 = time.perf_counter()
        if sync:
            loss_fn(model(x), y).backward()
        else:
            with model.no_sync():
                loss_fn(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        return time.perf_counter() - t0

    for name, (model, opt) in runs.items():  # warm-up, and DDP's bucket rebuild after the first step
        for _ in range(3):
            step(model, opt, True)
    # Step by step, ABBA order, each step after a barrier of its group: load drift hits both backends alike.
    times = {name: {"step": [], "no_sync": []} for name in runs}
    names = list(runs)
    for i in range(blocks * steps):
        for kind in ("step", "no_sync"):
            for name in (names if i % 2 == 0 else names[::-1]):
                model, opt = runs[name]
                dist.barrier(group=groups[name])
                times[name][kind].append(step(model, opt, kind == "step"))
    out = {}
    for name in runs:
        s, c = median_max(times[name]["step"]), median_max(times[name]["no_sync"])
        out[name] = {"step_ms": s * 1e3, "no_sync_ms": c * 1e3, "comm_ms": (s - c) * 1e3}
    return out


def worker(rank, world, port, args, q):
    torch.set_num_threads(1)
    import ddp_cpp.torch  # noqa: F401

    store = dist.TCPStore("127.0.0.1", port, world + 1, False, timeout=datetime.timedelta(seconds=120))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    groups = {"gloo": dist.group.WORLD, "ddpcpp": dist.new_group(backend="ddpcpp")}
    sizes = [4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
    if args.quick:
        sizes = [4 << 10, 1 << 20]
    ar = bench_allreduce(groups, sizes, rounds=2 if args.quick else 5, iters=3 if args.quick else 6)
    ddp = bench_ddp(groups, blocks=2 if args.quick else 6, steps=3 if args.quick else 10, rank=rank)
    if rank == 0:
        q.put({"allreduce": ar, "ddp_mlp": ddp})
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="two sizes, few steps (a smoke run)")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args()
    world = 2
    ctx = mp.get_context("spawn")
    server = dist.TCPStore("127.0.0.1", 0, world + 1, True, wait_for_workers=False)
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, world, server.port, args, q)) for r in range(world)]
    for pr in procs:
        pr.start()
    res = q.get(timeout=1800)
    for pr in procs:
        pr.join()
    print(f"| size | gloo ms | gloo busbw GB/s | ddpcpp ms | ddpcpp busbw GB/s | ddpcpp speed-up |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in res["allreduce"]:
        size = f"{r['bytes'] >> 20} MiB" if r["bytes"] >= 1 << 20 else f"{r['bytes'] >> 10} KiB"
        g, d = r["gloo"], r["ddpcpp"]
        print(f"| {size} | {g['ms']:.3f} | {g['busbw_gbs']:.2f} | {d['ms']:.3f} | {d['busbw_gbs']:.2f} | "
              f"{g['ms'] / d['ms']:.2f}x |")
    print()
    print("| DDP mlp, world 2 | step ms | no_sync step ms | communication ms (step - no_sync) |")
    print("| --- | ---: | ---: | ---: |")
    for name, v in res["ddp_mlp"].items():
        print(f"| {name} | {v['step_ms']:.2f} | {v['no_sync_ms']:.2f} | {v['comm_ms']:.2f} |")
    g, d = res["ddp_mlp"]["gloo"], res["ddp_mlp"]["ddpcpp"]
    comm = f"{g['comm_ms'] / d['comm_ms']:.2f}x" if d["comm_ms"] > 0 else "n/a (ddpcpp's is within the noise of 0)"
    print(f"\nstep: ddpcpp {g['step_ms'] / d['step_ms']:.2f}x faster than gloo; communication {comm}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
