#!/usr/bin/env python3
"""pytorch_twin.py - PyTorch's side of bench_e2e: the same models, shapes, optimizer and thread counts, timed the
same way (forward + loss, backward, optimizer step + zero_grad(set_to_none=True) per step; medians of the
measured steps; world > 1 as one process per rank with gloo on loopback, the step of the slowest rank).
tools/bench.sh runs it interleaved with bench_e2e under each PyTorch it finds: Debian's python3-torch (1.13) and
PyTorch 2.x from PyPI (tools/setup_torch2.sh), the latter eager and with --compile.

  python3 bench/pytorch_twin.py --config gpt --mode nosync --world 1 --threads 2 --steps 20
  python3 bench/pytorch_twin.py --config mlp --mode ddp --world 2 --json runs/b.json
  ~/.cache/ddp.cpp/torch2/bin/python bench/pytorch_twin.py --config gpt --world 2 --compile

--compile (PyTorch 2.x): torch.compile on the model (world > 1: on the DDP-wrapped model, so DDP's optimizer
splits the graph at bucket boundaries), backend --compile-backend (default inductor: C++ kernels on the CPU,
Triton on a GPU; "eager" only traces, which tools/gpu_check.sh's dry run uses to stay fast), mode --compile-mode
(default: "default"). The first step compiles forward and backward: its time minus the median step is reported
as compile_s and is not in the step time (the measured steps start after --warmup, at least 2 with --compile).

--device cuda (world 1): the model and batch on GPU 0, each phase timed after torch.cuda.synchronize(), as
bench_e2e waits for the device; --dtype bf16 runs forward and loss under torch.autocast(bfloat16) with float32
weights and optimizer (bench_e2e's mixed precision). --config gpt2s / gpt2-small: GPT-2 small's shape (vocab
50257, context 1024, d 768, 12 heads, 12 blocks, batch 8), the head untied / tied to the token embedding, as
bench_e2e's configurations of those names. --parse-only checks the flags and prints them, without importing torch.
The loss of the first and last step is printed and kept (loss_first, loss_last).

Configurations (bench/e2e.cpp): mlp 784-1024-1024-10 ReLU, batch 64/rank, SGD lr 0.01; gpt vocab 256, context
64, d 128, 4 heads, 2 blocks, GELU (tanh form), batch 16/rank, AdamW lr 3e-4 wd 0.01. Attention is the explicit
q k^T / sqrt(hs) -> causal softmax -> att v (what torch 1.13's nn.functional offers; ddp.cpp's CPU path does the
same), or with --attention sdpa PyTorch 2.x's F.scaled_dot_product_attention (fused kernels, no T x T scores in
memory: the fair twin of ddp.cpp's bf16 GPU path, which runs cuDNN's fused attention).
Sizes as bench_e2e's flags (tools/bench_cost_curve.py sweeps them): --mlp-hidden, --gpt-width (heads = width / 32),
--gpt-depth, --gpt-context; --config many --param-tensors N: N zero-initialised vectors holding --many-mib MiB in
all, h = h + p_i for each in turn, cross-entropy over the vector width, batch 8, SGD
(bench/many_params_model.h).
"""
import argparse
import json
import math
import os
import socket
import statistics
import sys
import time


def build(config, rank, torch, nn, F, args):
    torch.manual_seed(1234)
    device = args.device
    if config == "many":
        n = args.param_tensors
        width = int(args.many_mib * 1024 * 1024 / 4) // n

        class Many(nn.Module):
            def __init__(self):
                super().__init__()
                self.p = nn.ParameterList([nn.Parameter(torch.zeros(width)) for _ in range(n)])

            def forward(self, h):
                for p in self.p:
                    h = h + p
                return h

        batch = 8
        x = torch.randn(batch, width, generator=torch.Generator().manual_seed(100 + rank))
        y = torch.tensor([(i * 7 + rank) % width for i in range(batch)], dtype=torch.long)
        return Many(), x, y, batch
    if config == "mlp":
        hid = args.mlp_hidden or 1024
        model = nn.Sequential(nn.Linear(784, hid), nn.ReLU(), nn.Linear(hid, hid), nn.ReLU(), nn.Linear(hid, 10))
        batch = 64
        x = torch.randn(batch, 784, generator=torch.Generator().manual_seed(100 + rank))
        y = torch.tensor([(i * 7 + rank) % 10 for i in range(batch)], dtype=torch.long)
        return model, x, y, batch

    vocab, context, d, heads, layers, batch = 256, 64, 128, 4, 2, 16
    if config in ("gpt2s", "gpt2-small"):
        vocab, context, d, heads, layers, batch = 50257, 1024, 768, 12, 12, 8
    if args.gpt_width:
        d, heads = args.gpt_width, args.gpt_width // 32  # head size 32, as bench_e2e --gpt-width
    heads = args.gpt_heads or heads
    layers = args.gpt_depth or layers
    context = args.gpt_context or context
    batch = args.batch_size or batch

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            # a plain attribute, not a buffer: DDP would broadcast buffers, and gloo has no bool type
            self.mask = torch.tril(torch.ones(context, context, dtype=torch.bool, device=device))

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.qkv(x).split(C, dim=2)
            q, k, v = (t.view(B, T, heads, C // heads).transpose(1, 2) for t in (q, k, v))
            if args.attention == "sdpa":  # PyTorch 2.x's fused kernels (flash / memory-efficient / cuDNN)
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // heads))
            att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
            return self.proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.attn = Attention()
            self.fc, self.fc_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            h = x + self.attn(self.ln1(x))
            return h + self.fc_proj(F.gelu(self.fc(self.ln2(h)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(context, d)
            self.blocks = nn.ModuleList([Block() for _ in range(layers)])
            self.ln_f = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)
            if config == "gpt2-small":
                self.head.weight = self.wte.weight  # tied, as GPT-2 (and bench_e2e --config gpt2-small)

        def forward(self, idx):
            T = idx.shape[1]
            h = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
            for b in self.blocks:
                h = b(h)
            return self.head(self.ln_f(h))

    s = (0x9E3779B97F4A7C15 * (rank + 1)) % (1 << 64)
    tokens = []
    for _ in range(batch * context):
        s = (s * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        tokens.append((s >> 33) % vocab)
    targets = tokens[1:] + tokens[:1]
    x = torch.tensor(tokens, dtype=torch.long).view(batch, context)
    y = torch.tensor(targets, dtype=torch.long).view(batch, context)
    return GPT(), x, y, batch


def run_rank(rank, args, port, out_q):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    torch.set_num_threads(args.threads)
    group = None
    if args.world > 1:
        import torch.distributed as dist
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
        dist.init_process_group("gloo", rank=rank, world_size=args.world)
        group = dist
    model, x, y, batch = build(args.config, rank, torch, nn, F, args)
    cuda = args.device == "cuda"
    if cuda:
        model, x, y = model.cuda(), x.cuda(), y.cuda()

    def sync():  # each phase's GPU work counted in it, as bench_e2e waits for the device
        if cuda:
            torch.cuda.synchronize()
    autocast = (lambda: torch.autocast(args.device, dtype=torch.bfloat16)) if args.dtype == "bf16" else _null
    optimizer = args.optimizer if args.optimizer != "default" else ("sgd" if args.config in ("mlp", "many") else "adamw")
    params = list(model.parameters())
    if args.world > 1:
        model = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb,
                                                    gradient_as_bucket_view=args.gradient_as_bucket_view)
    if args.compile:
        model = torch.compile(model, backend=args.compile_backend,
                              mode=None if args.compile_backend != "inductor" else args.compile_mode)
    if optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=args.lr or 0.01)
    else:
        opt = torch.optim.AdamW(params, lr=args.lr or 3e-4, weight_decay=0.01)
    steps, fwd, bwd, optim, losses = [], [], [], [], []
    first_step_s = None
    for it in range(args.warmup + args.steps):
        sync()
        t0 = time.perf_counter()
        ctx = model.no_sync() if (args.world > 1 and args.mode == "nosync") else _null()
        with ctx:
            with autocast():
                logits = model(x)
                loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), y.view(-1))
            sync()
            t1 = time.perf_counter()
            loss.backward()
            sync()
        t2 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        t3 = time.perf_counter()
        losses.append(loss.item())
        if it == 0:
            first_step_s = t3 - t0
        if it >= args.warmup:
            steps.append(t3 - t0)
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
            optim.append(t3 - t2)
    if group is not None:
        t = torch.tensor(steps + [first_step_s], dtype=torch.float64)
        group.all_reduce(t, op=group.ReduceOp.MAX)
        steps, first_step_s = t.tolist()[:-1], t.tolist()[-1]
        group.barrier()
        group.destroy_process_group()
    if rank == 0:
        ordered = sorted(steps)
        out_q.put({"step_s": statistics.median(steps), "forward_s": statistics.median(fwd),
                   "step_p10_s": ordered[int(0.1 * (len(ordered) - 1))],
                   "step_p90_s": ordered[int(round(0.9 * (len(ordered) - 1)))],
                   "backward_s": statistics.median(bwd), "optimizer_s": statistics.median(optim),
                   "optimizer": optimizer, "torch": torch.__version__, "batch_per_rank": batch,
                   "first_step_s": first_step_s, "loss_first": losses[0], "loss_last": losses[-1],
                   "device": torch.cuda.get_device_name(0) if cuda else "cpu",
                   "compile_s": max(0.0, first_step_s - statistics.median(steps)) if args.compile else 0.0})


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", choices=["mlp", "gpt", "gpt2s", "gpt2-small", "many"], default="mlp")
    p.add_argument("--mlp-hidden", type=int, default=0, help="mlp: both hidden widths (0: 1024)")
    p.add_argument("--gpt-width", type=int, default=0, help="gpt: d_model (0: 128); heads = width / 32")
    p.add_argument("--gpt-depth", type=int, default=0, help="gpt: blocks (0: 2)")
    p.add_argument("--gpt-context", type=int, default=0, help="gpt: context (0: 64)")
    p.add_argument("--gpt-heads", type=int, default=0, help="gpt: heads (0: width / 32, or 4)")
    p.add_argument("--batch-size", type=int, default=0, help="gpt: sequences per rank (0: 16)")
    p.add_argument("--param-tensors", type=int, default=256, help="many: parameter tensors")
    p.add_argument("--many-mib", type=float, default=8.0, help="many: MiB of parameters in all")
    p.add_argument("--gradient-as-bucket-view", action="store_true", help="DDP(gradient_as_bucket_view=True)")
    p.add_argument("--mode", choices=["ddp", "nosync"], default="ddp")
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--threads", type=int, default=0, help="intra-op threads per rank (0: cores / world)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--optimizer", choices=["default", "sgd", "adamw"], default="default")
    p.add_argument("--lr", type=float, default=0.0)
    p.add_argument("--bucket-cap-mb", type=float, default=25.0)
    p.add_argument("--json", default="", help="append one JSON record to FILE")
    p.add_argument("--label", default="")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (PyTorch 2.x, inductor)")
    p.add_argument("--compile-mode", default="default",
                   choices=["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"])
    p.add_argument("--compile-backend", default="inductor", choices=["inductor", "eager", "aot_eager"],
                   help="torch.compile backend (eager: tracing only, fast; for dry runs)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cuda: world 1 on GPU 0")
    p.add_argument("--dtype", choices=["f32", "bf16"], default="f32", help="bf16: autocast, float32 weights")
    p.add_argument("--attention", choices=["explicit", "sdpa"], default="explicit",
                   help="gpt: explicit q k^T, causal softmax, att v (default: what ddp.cpp's CPU path does), or "
                        "sdpa: F.scaled_dot_product_attention(is_causal=True), PyTorch 2.x's fused kernels (what "
                        "ddp.cpp's bf16 GPU path compares with: cuDNN's fused attention)")
    p.add_argument("--parse-only", action="store_true", help="check the flags, print them, exit (no torch)")
    args = p.parse_args()
    if args.device == "cuda" and args.world != 1:
        p.error("--device cuda runs world 1 (one GPU)")
    if args.parse_only:
        print("pytorch_twin: flags ok: " + json.dumps(vars(args), sort_keys=True))
        return
    if args.compile:
        import torch
        if not hasattr(torch, "compile"):
            sys.exit(f"pytorch_twin: --compile needs PyTorch 2.x; {sys.executable} has torch {torch.__version__} "
                     f"(tools/setup_torch2.sh makes a venv with it)")
        args.warmup = max(args.warmup, 2)  # the first step compiles; the second may still settle guards
    if args.threads <= 0:
        args.threads = max(1, (os.cpu_count() or 1) // args.world)
    # The same thread budget for every pool in the process, as bench_e2e gives OpenBLAS --threads: without it
    # each rank's OpenBLAS starts one thread per core beside PyTorch's OpenMP threads (set before torch loads;
    # the spawned ranks inherit it). A value the caller exported wins.
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    if args.world == 1:
        run_rank(0, args, port, q)
    else:
        procs = [ctx.Process(target=run_rank, args=(r, args, port, q)) for r in range(args.world)]
        for pr in procs:
            pr.start()
        for pr in procs:
            pr.join()
        if any(pr.exitcode != 0 for pr in procs):
            sys.exit("pytorch_twin: a rank failed")
    r = q.get()
    variant = "compile" if args.compile else "eager"
    rec = {"kind": "pytorch", "variant": variant, "attention": args.attention,
           "compile_mode": args.compile_mode if args.compile else "",
           "compile_backend": args.compile_backend if args.compile else "", "device_kind": args.device,
           "dtype": args.dtype,
           "config": args.config, "mode": args.mode, "world": args.world,
           "gradient_as_bucket_view": args.gradient_as_bucket_view, "sizes": {
               k: getattr(args, k) for k in ("mlp_hidden", "gpt_width", "gpt_depth", "gpt_context", "gpt_heads",
                                             "batch_size", "param_tensors", "many_mib")},
           "threads": args.threads, "steps": args.steps, "warmup": args.warmup, "label": args.label,
           "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "load": os.getloadavg()[0], **r}
    compiled = (f", compile {r['compile_s']:.1f} s (backend {args.compile_backend}, mode {args.compile_mode})"
                if args.compile else "")
    print(f"pytorch_twin: {args.config} {args.mode} world {args.world} threads {args.threads} on {r['device']} "
          f"{args.dtype} ({r['optimizer']}, torch {r['torch']} {variant}, {args.attention} attention): step {r['step_s'] * 1e3:.3f} ms, forward "
          f"{r['forward_s'] * 1e3:.3f}, backward {r['backward_s'] * 1e3:.3f}, optimizer {r['optimizer_s'] * 1e3:.3f}, "
          f"loss {r['loss_first']:.4f} -> {r['loss_last']:.4f}{compiled}")
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
