"""test_fsdp2.py - FSDP2 (torch.distributed.fsdp.fully_shard) over the ddpcpp backend gives the same model as over
Gloo: float64, world 2, every Linear and the root sharded, a few Adam steps, full parameters equal to 1e-12.
Both runs happen in the same processes, each on a device mesh of its own group (DeviceMesh.from_group): Gloo is
the default group, ddpcpp a second one. FSDP2 calls all_gather_into_tensor and reduce_scatter_tensor (with the
gradient divide factors it picks for the backend) on them.

    python test_fsdp2.py      # one line with the largest difference; exits 1 above 1e-12
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

STEPS = 3


def train(group, rank):
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 33), nn.ReLU(), nn.Linear(33, 17), nn.ReLU(), nn.Linear(17, 4)).double()
    mesh = DeviceMesh.from_group(group, "cpu")
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for step in range(STEPS):
        g = torch.Generator().manual_seed(100 * step + rank)
        x = torch.randn(8, 16, generator=g, dtype=torch.float64)
        y = torch.randn(8, 4, generator=g, dtype=torch.float64)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return [p.full_tensor().detach().clone() for p in model.parameters()], losses


def body(rank, world, store):
    harness.init("gloo", rank, world, store)
    ours = dist.new_group(backend="ddpcpp")
    harness.check_collectives_mode(ours)
    p_gloo, l_gloo = train(dist.group.WORLD, rank)
    p_ours, l_ours = train(ours, rank)
    diff = max((a - b).abs().max().item() for a, b in zip(p_gloo, p_ours))
    ldiff = max(abs(a - b) for a, b in zip(l_gloo, l_ours))
    import json
    import ddp_cpp.torch
    record = json.loads(ddp_cpp.torch.flight_record(ours))
    dist.destroy_process_group()
    return diff, ldiff, l_gloo, record


def main():
    results = harness.run_ranks(body, world=2, timeout_s=300)
    reports = harness.expect_all_ok(results, "fsdp2")
    worst = max(r[0] for r in reports)
    lworst = max(r[1] for r in reports)
    losses = reports[0][2]
    ops = {}
    for e in reports[0][3]["entries"]:
        key = e["op"] + (f" {e['reduce_op']}" if e["op"] in ("allreduce", "reduce_scatter") else "")
        ops[key] = ops.get(key, 0) + 1
    print("ddpcpp collectives FSDP2 issued (rank 0's flight record):",
          ", ".join(f"{k} x{v}" for k, v in sorted(ops.items())))
    assert any(k.startswith("reduce_scatter") for k in ops), f"FSDP2 issued no reduce-scatter on ddpcpp: {ops}"
    ok = worst <= 1e-12 and lworst <= 1e-12 and losses[-1] != losses[0]
    print(f"{'ok  ' if ok else 'FAIL'} fully_shard: max |param gloo - param ddpcpp| = {worst:.3g}, losses {lworst:.3g} "
          f"(gloo's losses {', '.join(f'{v:.6f}' for v in losses)})")
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
