#!/usr/bin/env python3
# torch_allreduce.py - PyTorch's Gloo all-reduce (float32 sum, 2 processes on loopback, one thread each): the
# median time over ITERS, the slowest rank's. The reference for bench_allreduce --backend gloo at the same size
# (docs/benchmarks.md): run both alternately in one session.
#   /usr/bin/python3 tools/torch_allreduce.py 1863690 20 29600     # elements, iterations, a free port
import statistics
import sys
import time

from python_deps import require

require("torch", "python3-torch", "torch_allreduce.py")  # one line naming the interpreter, not a traceback
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def run(rank, world, n, iters, port):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    t = torch.ones(n)
    for _ in range(3):
        dist.all_reduce(t)
    times = []
    for _ in range(iters):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(t)
        times.append(time.perf_counter() - t0)
    m = torch.tensor([statistics.median(times)], dtype=torch.float64)
    dist.all_reduce(m, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(f"torch gloo allreduce {n} x float32: median {m.item() * 1e3:.2f} ms")
    dist.destroy_process_group()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: torch_allreduce.py ELEMENTS ITERS PORT")
    n, iters, port = (int(a) for a in sys.argv[1:])
    mp.spawn(run, args=(2, n, iters, port), nprocs=2)
