"""test_torchrun.py - the ddpcpp backend under torchrun, the way PyTorch users start it: `python -m
torch.distributed.run --standalone --nproc-per-node 2` runs this file as the worker, which does
`import ddp_cpp.torch; dist.init_process_group("ddpcpp")` (rendezvous through torchrun's own store), an
all_reduce, and a DDP step; then a second run with the device string "cpu:ddpcpp". 90 s at most per run.

    python test_torchrun.py       # prints each rank's line; exits 1 when a run fails or a rank's result is wrong
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def worker():
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    import ddp_cpp.torch  # noqa: F401

    dist.init_process_group(os.environ["DDPCPP_TEST_BACKEND"])
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((4,), float(world * (world + 1) // 2))), t
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 2))
    model(torch.randn(4, 8) * (rank + 1)).sum().backward()
    grads = [torch.zeros(2, 8) for _ in range(world)]
    dist.all_gather(grads, model.module.weight.grad)
    assert all(torch.equal(g, grads[0]) for g in grads), "DDP's gradients differ between ranks"
    inner = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu")).inner_backend()
    print(f"rank {rank} of {world}: backend {dist.get_backend()} over {inner}, all_reduce and a DDP step agree",
          flush=True)
    dist.destroy_process_group()


def main():
    failed = False
    for backend in ("ddpcpp", "cpu:ddpcpp"):
        env = dict(os.environ, DDPCPP_TEST_BACKEND=backend, OMP_NUM_THREADS="1")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               os.path.abspath(__file__), "worker"]
        try:
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=90)
            out, rc = r.stdout + r.stderr, r.returncode
        except subprocess.TimeoutExpired as e:
            out, rc = f"{e.stdout or ''}{e.stderr or ''}\ntimed out after 90 s", -1
        # The two ranks' lines may interleave in the pipe: find each rank's sentence, not each line.
        lines = sorted(set(re.findall(r"rank \d of 2: backend \S+ over \w+, all_reduce and a DDP step agree", out)))
        failed |= not harness.report_launch(f"torchrun with init_process_group({backend!r})", rc, out, lines, 2)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    worker() if sys.argv[1:] == ["worker"] else main()
