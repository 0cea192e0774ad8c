#!/usr/bin/env python3
"""torch_backend.py - the ddpcpp torch.distributed backend against Gloo, in the same 2 processes, alternated:

  1. all_reduce (float32 sum) bus bandwidth, 4 KiB to 64 MiB: per size, ROUNDS rounds of ITERS calls on each
     group in turn; the median call (slowest rank's), busbw = 2 (w-1)/w x bytes / time;
  2. PyTorch DDP's training step of the mlp (784-1024-1024-10 ReLU, float32, batch 64 per rank, SGD lr 0.01) and
     of the tiny gpt (vocab 256, context 64, d 128, 4 heads, 2 blocks, batch 16 per rank, AdamW lr 3e-4) -
     bench/pytorch_twin.py's configs: median step of DDP over Gloo and DDP over ddpcpp (the same model and data),
     one step each in turn (ABBA), and the same step under no_sync() (no communication): step minus that is the
     communication the step waits for; and DDP with a comm hook that communicates nothing (no_comm), in the same
     rotation: the step a free all-reduce would give, so the best ratio any backend could reach;
  3. FSDP2's step (fully_shard on every Linear and the root, over a device mesh of each group) of the mlp: the
     median step over Gloo and over ddpcpp, ABBA. FSDP2 gathers parameters inside forward and backward, so there
     is no communication-free twin: the step alone is compared.

    PYTHONPATH=build/ddp_cpp_py ~/.cache/ddp.cpp/torch2/bin/python bench/torch_backend.py [--quick] [--json F]

Needs the ddp_cpp package (tests/torch_backend/run.sh BUILD build, or pip install --no-build-isolation ./python).
One torch thread per rank; ddpcpp's collectives run as DDP_TORCH_COLLECTIVES says (auto by default: on the
calling thread when the ranks keep every core busy, as here - docs/pytorch.md). Prints markdown tables
(docs/pytorch.md) after the machine line.
"""
import argparse
import datetime
import json
import multiprocessing as mp
import os
import statistics
import sys
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


def model_and_batch(name, rank):
    """(model, x, y, optimizer factory) of bench/pytorch_twin.py's config `name` for this rank."""
    if name == "mlp":
        gen = torch.Generator().manual_seed(rank)
        torch.manual_seed(0)
        return (mlp(), torch.randn(64, 784, generator=gen), torch.randint(0, 10, (64,), generator=gen),
                lambda params: torch.optim.SGD(params, lr=0.01))
    import types
    import torch.nn.functional as F
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import pytorch_twin
    args = types.SimpleNamespace(device="cpu", gpt_width=None, gpt_heads=None, gpt_depth=None, gpt_context=None,
                                 batch_size=None)
    model, x, y, _ = pytorch_twin.build(name, rank, torch, nn, F, args)
    return model, x, y, lambda params: torch.optim.AdamW(params, lr=3e-4, weight_decay=0.01)


def loss_of(out, y):
    return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def no_comm_hook(state, bucket):
    """A DDP comm hook that communicates nothing: DDP's own bucket work (copies in and out, hooks) stays."""
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def bench_ddp(groups, name, blocks, steps, rank):
    from torch.nn.parallel import DistributedDataParallel as DDP

    runs = {}
    for g_name, g in groups.items():
        model, x, y, make_opt = model_and_batch(name, rank)
        model = DDP(model, process_group=g)
        runs[g_name] = (model, make_opt(model.parameters()))
    # The floor: DDP with a hook that communicates nothing (over the first group; it never uses it). A backend
    # whose all-reduce took no time would step this fast.
    model, x, y, make_opt = model_and_batch(name, rank)
    model = DDP(model, process_group=next(iter(groups.values())))
    model.register_comm_hook(None, no_comm_hook)
    runs["no_comm"] = (model, make_opt(model.parameters()))
    groups = dict(groups, no_comm=next(iter(groups.values())))

    def step(model, opt, sync):
        t0 = time.perf_counter()
        if sync:
            loss_of(model(x), y).backward()
        else:
            with model.no_sync():
                loss_of(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        return time.perf_counter() - t0

    for g_name, (model, opt) in runs.items():  # warm-up, and DDP's bucket rebuild after the first step
        for _ in range(3):
            step(model, opt, True)
    # Step by step, ABBA order, each step after a barrier of its group: load drift hits both backends alike.
    times = {g_name: {"step": [], "no_sync": []} for g_name in runs}
    names = list(runs)
    for i in range(blocks * steps):
        for kind in ("step", "no_sync"):
            for g_name in (names if i % 2 == 0 else names[::-1]):
                model, opt = runs[g_name]
                dist.barrier(group=groups[g_name])
                times[g_name][kind].append(step(model, opt, kind == "step"))
    out = {}
    for g_name in runs:
        s, c = median_max(times[g_name]["step"]), median_max(times[g_name]["no_sync"])
        out[g_name] = {"step_ms": s * 1e3, "no_sync_ms": c * 1e3, "comm_ms": (s - c) * 1e3}
    return out


def bench_fsdp2(groups, name, blocks, steps, rank):
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    runs = {}
    for g_name, g in groups.items():
        model, x, y, make_opt = model_and_batch(name, rank)
        mesh = DeviceMesh.from_group(g, "cpu")
        for m in model.modules():
            if isinstance(m, nn.Linear):
                fully_shard(m, mesh=mesh)
        fully_shard(model, mesh=mesh)
        runs[g_name] = (model, make_opt(model.parameters()))

    def step(model, opt):
        t0 = time.perf_counter()
        loss_of(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        return time.perf_counter() - t0

    for model, opt in runs.values():
        for _ in range(3):
            step(model, opt)
    times = {g_name: [] for g_name in runs}
    names = list(runs)
    for i in range(blocks * steps):
        for g_name in (names if i % 2 == 0 else names[::-1]):
            dist.barrier(group=groups[g_name])
            times[g_name].append(step(*runs[g_name]))
    return {g_name: {"step_ms": median_max(t) * 1e3} for g_name, t in times.items()}


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
    blocks, steps = (2, 3) if args.quick else (6, 10)
    res = {"allreduce": ar, "collectives_run_on": groups["ddpcpp"]._get_backend(torch.device("cpu")).collectives_run_on()}
    for name in ("mlp", "gpt"):
        res[f"ddp_{name}"] = bench_ddp(groups, name, blocks, steps, rank)
    res["fsdp2_mlp"] = bench_fsdp2(groups, "mlp", blocks, steps, rank)
    if rank == 0:
        q.put(res)
    dist.destroy_process_group()


def machine_line():
    """CPU model, the widest vector ISA, cores this process may use, PyTorch's version: figures depend on them."""
    model, flags = "unknown CPU", set()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name") and model == "unknown CPU":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    isa = "AVX-512" if "avx512f" in flags else "AVX2+FMA" if {"avx2", "fma"} <= flags else "no AVX2"
    return (f"machine: {model}, {isa}, {len(os.sched_getaffinity(0))} cores for this process; "
            f"PyTorch {torch.__version__}; {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")


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
    print(machine_line())
    print()
    print(f"| size | gloo ms | gloo busbw GB/s | ddpcpp ms | ddpcpp busbw GB/s | ddpcpp speed-up |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in res["allreduce"]:
        size = f"{r['bytes'] >> 20} MiB" if r["bytes"] >= 1 << 20 else f"{r['bytes'] >> 10} KiB"
        g, d = r["gloo"], r["ddpcpp"]
        print(f"| {size} | {g['ms']:.3f} | {g['busbw_gbs']:.2f} | {d['ms']:.3f} | {d['busbw_gbs']:.2f} | "
              f"{g['ms'] / d['ms']:.2f}x |")
    for name in ("mlp", "gpt"):
        print()
        print(f"| DDP {name}, world 2 | step ms | no_sync step ms | communication ms (step - no_sync) |")
        # no_comm: DDP with a hook that communicates nothing - the step a free all-reduce would give
        print("| --- | ---: | ---: | ---: |")
        for g_name, v in res[f"ddp_{name}"].items():
            print(f"| {g_name} | {v['step_ms']:.2f} | {v['no_sync_ms']:.2f} | {v['comm_ms']:.2f} |")
        g, d = res[f"ddp_{name}"]["gloo"], res[f"ddp_{name}"]["ddpcpp"]
        comm = f"{g['comm_ms'] / d['comm_ms']:.2f}x" if d["comm_ms"] > 0 else "n/a (ddpcpp's is within the noise of 0)"
        f = res[f"ddp_{name}"]["no_comm"]
        print(f"\nDDP {name} step: ddpcpp {g['step_ms'] / d['step_ms']:.2f}x faster than gloo; communication {comm}; "
              f"a free all-reduce (no_comm) would make it {g['step_ms'] / f['step_ms']:.2f}x")
    g, d = res["fsdp2_mlp"]["gloo"], res["fsdp2_mlp"]["ddpcpp"]
    print(f"\n| FSDP2 mlp, world 2 | step ms |\n| --- | ---: |\n| gloo | {g['step_ms']:.2f} |\n| ddpcpp | {d['step_ms']:.2f} |")
    print(f"\nFSDP2 mlp step: ddpcpp {g['step_ms'] / d['step_ms']:.2f}x faster than gloo")
    print(f"(ddpcpp's collectives ran on the {res['collectives_run_on']})")
    if args.json:
        res["machine"] = machine_line()
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
