"""test_multinode.py - the ddpcpp backend across two "hosts": two network namespaces joined by a veth pair
(198.18.0.1 and 198.18.0.2, the benchmarking range; namespaces named ddptest_<pid>_torch_<node>, as
tests/netns/namespace_pair.h names its own, so a killed run's are removed by the next), and in each a torchrun
`--nnodes 2 --node-rank N --nproc-per-node 2` whose workers (this file) call init_process_group("ddpcpp").
The namespaces make the nodes different hosts to ddp.cpp (host identity includes the network namespace), so
every rank gets the hierarchical group: shared memory between the two ranks of a node, PyTorch's Gloo between the
node leaders over the veth link (GLOO_SOCKET_IFNAME). Each worker checks an all_reduce, an all_gather and a
float64 DDP step (gradients equal on all 4 ranks and equal to Gloo's). Exits 77 (skipped) where namespaces
cannot be made (no root, no iproute2), 1 when a node fails; 120 s at most per node.

    python test_multinode.py
"""
import os
import re
import shutil
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

PREFIX = "ddptest_"
ADDRESS = ["198.18.0.1", "198.18.0.2"]
IFACE = ["veth0", "veth1"]
NODE_TIMEOUT_S = 120


def worker():
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    import ddp_cpp.torch  # noqa: F401

    dist.init_process_group("ddpcpp")
    rank, world = dist.get_rank(), dist.get_world_size()
    inner = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu")).inner_backend()
    assert inner == "hier", f"rank {rank}: the ddpcpp group is {inner}, not hier (nodes seen as one host?)"
    t = torch.full((1000,), float(rank + 1), dtype=torch.float64)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((1000,), float(world * (world + 1) // 2), dtype=torch.float64)), t[:4]
    outs = [torch.zeros(3, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(outs, torch.full((3,), rank, dtype=torch.int64))
    assert all(torch.equal(o, torch.full((3,), r, dtype=torch.int64)) for r, o in enumerate(outs)), outs
    gloo = dist.new_group(backend="gloo")
    grads = {}
    for name, group in (("ddpcpp", None), ("gloo", gloo)):
        torch.manual_seed(0)
        model = nn.parallel.DistributedDataParallel(nn.Linear(16, 4).double(), process_group=group)
        x = torch.randn(8, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(rank))
        model(x).square().sum().backward()
        grads[name] = model.module.weight.grad.clone()
    every = [torch.zeros_like(grads["ddpcpp"]) for _ in range(world)]
    dist.all_gather(every, grads["ddpcpp"], group=gloo)
    assert all(torch.equal(g, every[0]) for g in every), "DDP's gradients differ between ranks"
    diff = (grads["ddpcpp"] - grads["gloo"]).abs().max().item()
    assert diff < 1e-12, f"DDP over ddpcpp and over gloo differ by {diff}"
    print(f"rank {rank} of {world}: ddpcpp over {inner}, all_reduce, all_gather and DDP agree (vs gloo {diff:.1e})",
          flush=True)
    dist.destroy_process_group()


def ip(*args):
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)


def make_namespaces():
    """The two namespaces and the link; (names, None) or (None, why not)."""
    if shutil.which("ip") is None:
        return None, "iproute2's ip is not installed"
    for name in os.listdir("/run/netns") if os.path.isdir("/run/netns") else []:  # left by killed runs
        pid = name[len(PREFIX):].split("_")[0] if name.startswith(PREFIX) else ""
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            ip("netns", "del", name)
    names = [f"{PREFIX}{os.getpid()}_torch_{n}" for n in (0, 1)]
    steps = [("netns", "add", names[0]), ("netns", "add", names[1]),
             ("link", "add", "name", IFACE[0], "netns", names[0], "type", "veth", "peer", "name", IFACE[1],
              "netns", names[1])]
    for n in (0, 1):
        steps += [("-n", names[n], "addr", "add", ADDRESS[n] + "/30", "dev", IFACE[n]),
                  ("-n", names[n], "link", "set", "lo", "up"), ("-n", names[n], "link", "set", IFACE[n], "up")]
    for step in steps:
        r = ip(*step)
        if r.returncode != 0:
            delete_namespaces(names)
            return None, f"`ip {' '.join(step)}` failed: {r.stderr.strip()}"
    return names, None


def delete_namespaces(names):
    for name in names:
        ip("netns", "del", name)


def run_node(names, node, results):
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME=IFACE[node], DDP_COLLECTIVE_TIMEOUT_S="60")
    env.pop("DDP_TEST_HOSTS", None)
    env.pop("DDP_TORCH_PRETEND_HOST", None)
    cmd = ["ip", "netns", "exec", names[node], sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
           "--node-rank", str(node), "--nproc-per-node", "2", "--master-addr", ADDRESS[0], "--master-port", "29531",
           os.path.abspath(__file__), "worker"]
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=NODE_TIMEOUT_S)
        results[node] = (r.returncode, r.stdout + r.stderr)
    except subprocess.TimeoutExpired as e:
        results[node] = (-1, f"{e.stdout or ''}{e.stderr or ''}\ntimed out after {NODE_TIMEOUT_S} s")


def main():
    names, why_not = make_namespaces()
    if names is None:
        print(f"SKIP: network namespaces are not available here: {why_not}")
        sys.exit(77)
    results = {}
    try:
        threads = [threading.Thread(target=run_node, args=(names, n, results)) for n in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        delete_namespaces(names)
    failed = False
    for node in (0, 1):
        rc, out = results[node]
        # The ranks' lines may interleave in the pipe (seen: two on one line): find each rank's sentence.
        lines = sorted(set(re.findall(r"rank \d of 4: ddpcpp over hier, all_reduce, all_gather and DDP agree "
                                      r"\(vs gloo [0-9.e+-]+\)", out)))
        failed |= not harness.report_launch(f"node {node} ({names[node]}): torchrun", rc, out, lines, 2)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    worker() if sys.argv[1:] == ["worker"] else main()
