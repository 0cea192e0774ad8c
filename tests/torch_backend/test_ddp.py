"""test_ddp.py - PyTorch's DistributedDataParallel and ZeroRedundancyOptimizer over the ddpcpp backend give the
same model as over Gloo: float64, world 2, a few SGD/Adam steps, parameters equal to 1e-12 (max abs difference),
for each DDP option: default, find_unused_parameters (a branch skipped on odd steps), no_sync (gradient
accumulation), static_graph, the bf16 compress hook, gradient_as_bucket_view, and ZeRO (Adam, parameters
broadcast from their owner). Both runs happen in the same processes: Gloo is the default group, ddpcpp a
second one (dist.new_group(backend="ddpcpp")). Small buckets (bucket_cap_mb 0.002) give several per step.

    python test_ddp.py      # one line per case with the largest difference; exits 1 when one is above 1e-12
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

CASES = ["default", "find_unused_parameters", "no_sync", "static_graph", "bf16_compress_hook",
         "gradient_as_bucket_view", "zero_redundancy_optimizer"]
STEPS = 4


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(16, 32)
        self.mid = nn.Linear(32, 32)
        self.branch = nn.Linear(32, 32)  # skipped on odd steps when skip_branch
        self.out = nn.Linear(32, 4)

    def forward(self, x, skip_branch=False):
        h = torch.relu(self.inp(x))
        h = torch.relu(self.mid(h))
        if not skip_branch:
            h = h + torch.tanh(self.branch(h))
        return self.out(h)


def train(case, pg, rank):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = Net().double()
    kwargs = dict(process_group=pg, bucket_cap_mb=0.002)
    if case == "find_unused_parameters":
        kwargs["find_unused_parameters"] = True
    if case == "static_graph":
        kwargs["static_graph"] = True
    if case == "gradient_as_bucket_view":
        kwargs["gradient_as_bucket_view"] = True
    ddp = DDP(model, **kwargs)
    if case == "bf16_compress_hook":
        ddp.register_comm_hook(pg, default_hooks.bf16_compress_hook)
    if case == "zero_redundancy_optimizer":
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam, process_group=pg, lr=1e-2)
    else:
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(STEPS):
        g = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(8, 16, generator=g, dtype=torch.float64)
        y = torch.randn(8, 4, generator=g, dtype=torch.float64)
        skip = case == "find_unused_parameters" and step % 2 == 1
        if case == "no_sync":
            with ddp.no_sync():
                nn.functional.mse_loss(ddp(x[:4]), y[:4]).backward()
            loss = nn.functional.mse_loss(ddp(x[4:]), y[4:])
        else:
            loss = nn.functional.mse_loss(ddp(x, skip_branch=skip), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=case != "gradient_as_bucket_view")
        losses.append(loss.item())
    return [p.detach().clone() for p in model.parameters()], losses


def body(rank, world, store):
    harness.init("gloo", rank, world, store)
    ours = dist.new_group(backend="ddpcpp")
    harness.check_collectives_mode(ours)
    report = {}
    for case in CASES:
        if os.environ.get("DDP_TEST_VERBOSE"):
            print(f"rank {rank}: {case}", file=sys.stderr, flush=True)
        p_gloo, l_gloo = train(case, dist.group.WORLD, rank)
        p_ours, l_ours = train(case, ours, rank)
        diff = max((a - b).abs().max().item() for a, b in zip(p_gloo, p_ours))
        ldiff = max(abs(a - b) for a, b in zip(l_gloo, l_ours))
        moved = max((a - b).abs().max().item() for a, b in zip(p_gloo, train_init()))
        report[case] = (diff, ldiff, moved)
    dist.destroy_process_group()
    return report


def train_init():
    torch.manual_seed(0)
    return [p.detach().clone() for p in Net().double().parameters()]


def main():
    results = harness.run_ranks(body, world=2, timeout_s=int(os.environ.get("DDP_TEST_TIMEOUT_S", 300)))
    reports = harness.expect_all_ok(results, "ddp")
    failed = False
    for case in CASES:
        worst = max(r[case][0] for r in reports)
        lworst = max(r[case][1] for r in reports)
        moved = min(r[case][2] for r in reports)
        ok = worst <= 1e-12 and lworst <= 1e-12 and moved > 1e-6
        failed |= not ok
        print(f"{'ok  ' if ok else 'FAIL'} {case}: max |param gloo - param ddpcpp| = {worst:.3g}, "
              f"losses {lworst:.3g}, parameters moved {moved:.3g} from their start")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
