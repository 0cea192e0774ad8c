"""test_collectives.py - every collective of the ddpcpp backend against Gloo and against the result computed
locally from every rank's (seeded) input: sizes 0, 1, world-1, world, world+1, primes, and sizes above the shm
thresholds (32 KiB in-place/small-all-reduce limit, the 1 MiB slot), the dtypes the backend moves (float32,
float64, bfloat16, int32, int64) and those it stages (float16, uint8, int8, int16, bool), every reduce op.

    python test_collectives.py [WORLD]      # default 3; prints one line per collective family, exits 1 on a mismatch
ddpcpp is the default group here (init_process_group("ddpcpp")), Gloo a second group.
"""
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

R = dist.ReduceOp
FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INTS = [torch.int32, torch.int64, torch.uint8, torch.int8, torch.int16]


def sizes(world):
    # 300007 float32 = 1.2 MB: more than one 1 MiB slot; 9001 float32 = 36 KB: above the 32 KiB thresholds.
    return sorted({0, 1, world - 1, world, world + 1, 7, 13, 1021, 9001, 300007})


def make(rank, case, n, dtype, op=None):
    """Rank `rank`'s input of one case: the same on every rank that asks (seeded by case and rank)."""
    g = torch.Generator().manual_seed(hash((case, rank)) % (2**31))
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if op in (R.PRODUCT,):  # keep products finite and exact
        v = torch.randint(1, 3, (n,), generator=g)
        return (v * (1 if dtype in (torch.uint8,) else torch.where(torch.rand(n, generator=g) < 0.5, -1, 1))).to(dtype)
    if dtype.is_floating_point:
        return (torch.randn(n, generator=g, dtype=torch.float64) * 4).to(dtype)
    lo, hi = (0, 40) if dtype == torch.uint8 else (-40, 40)
    return torch.randint(lo, hi, (n,), generator=g).to(dtype)


def reference(inputs, op, dtype, factor=None):
    """The reduction of every rank's input in rank order, computed here."""
    acc = inputs[0].clone()
    if op == R.PREMUL_SUM:
        acc = sum(x.double() * factor for x in inputs).to(dtype)
        return acc
    wide = [x.double() if dtype.is_floating_point else x.long() for x in inputs]
    if op in (R.SUM, R.AVG):
        s = sum(wide[1:], wide[0].clone())
        if op == R.AVG:
            s = s / len(inputs)
        return s.to(dtype)
    for x in inputs[1:]:
        if op == R.MIN:
            acc = torch.minimum(acc, x)
        elif op == R.MAX:
            acc = torch.maximum(acc, x)
        elif op == R.PRODUCT:
            acc = acc * x
        elif op == R.BAND:
            acc = acc & x
        elif op == R.BOR:
            acc = acc | x
        elif op == R.BXOR:
            acc = acc ^ x
    return acc


# Across hosts (DDP_TEST_HOSTS, harness.init) ddpcpp sums inside each host, then between hosts: another order of
# additions than rank order, so float sums may differ from the reference by a few roundings of the inputs.
REORDERED = {"world": 0}


def same(a, b, what, loose=False):
    """loose: against Gloo, which rounds 16-bit floats after every addition (ddpcpp accumulates in float32 and
    rounds once): a few units in the last place of the inputs (|x| < 32 here) apart at world 3 and more."""
    if a.dtype in (torch.bfloat16, torch.float16):
        atol = 0.5 if loose or REORDERED["world"] else 1e-2  # across hosts: rounded per host, then again
        torch.testing.assert_close(a.float(), b.float(), rtol=1e-2, atol=atol, msg=lambda m: f"{what}: {m}")
    elif a.dtype.is_floating_point:
        # world additions of inputs below 32 in magnitude, each rounding by at most half an ulp of the sum
        atol = 1e-6 if not REORDERED["world"] else 32 * REORDERED["world"] * torch.finfo(a.dtype).eps
        torch.testing.assert_close(a, b, rtol=1e-6, atol=atol, msg=lambda m: f"{what}: {m}")
    else:
        assert torch.equal(a, b), f"{what}: {a[:8]} != {b[:8]}"


def ops_for(dtype):
    if dtype == torch.bool:
        return [R.MIN, R.MAX, R.BAND, R.BOR]
    if dtype.is_floating_point:
        return [R.SUM, R.AVG, R.MIN, R.MAX, R.PRODUCT, "premul"]
    return [R.SUM, R.MIN, R.MAX, R.PRODUCT, R.BAND, R.BOR, R.BXOR]


def body(rank, world, store):
    harness.init("ddpcpp", rank, world, store)
    if dist.group.WORLD._get_backend(torch.device("cpu")).inner_backend() == "hier":
        REORDERED["world"] = world
    gloo = dist.new_group(backend="gloo")
    counts, gloo_counts = {}, {}

    def check(name, ours, theirs_fn, expected, what):
        same(ours, expected, f"{name} {what} vs the local reference")
        try:
            theirs = theirs_fn()
        except Exception:  # noqa: BLE001 - an op Gloo lacks: the local reference decides
            theirs = None
        if theirs is not None:
            same(ours, theirs, f"{name} {what} vs gloo", loose=True)
            gloo_counts[name] = gloo_counts.get(name, 0) + 1
        counts[name] = counts.get(name, 0) + 1

    case = 0
    for dtype in FLOATS + INTS + [torch.bool]:
        for n in sizes(world):
            for op in ops_for(dtype):
                case += 1
                factor = 0.5 + case % 3
                redop = dist._make_nccl_premul_sum(factor) if op == "premul" else op
                ref_op = R.PREMUL_SUM if op == "premul" else op
                ins = [make(r, case, n, dtype, op) for r in range(world)]
                what = f"({n} x {dtype}, {op})"
                # all_reduce
                t = ins[rank].clone()
                dist.all_reduce(t, op=redop)

                def gloo_ar():
                    u = ins[rank].clone()
                    dist.all_reduce(u, op=redop, group=gloo)
                    return u
                check("all_reduce", t, gloo_ar if op != "premul" else lambda: None,
                      reference(ins, ref_op, dtype, factor), what)
                # reduce_scatter_tensor: each rank's input is world chunks of n
                big = [torch.cat([make(r, case * 7 + c, n, dtype, op) for c in range(world)]) for r in range(world)]
                out = torch.empty(n, dtype=dtype)
                dist.reduce_scatter_tensor(out, big[rank].clone(), op=redop)
                full = reference(big, ref_op, dtype, factor)

                def gloo_rst():
                    u = torch.empty(n, dtype=dtype)
                    dist.reduce_scatter_tensor(u, big[rank].clone(), op=redop, group=gloo)
                    return u
                check("reduce_scatter_tensor", out, gloo_rst if op != "premul" else lambda: None,
                      full[rank * n:(rank + 1) * n], what)
                # reduce_scatter (list)
                out2 = torch.empty(n, dtype=dtype)
                dist.reduce_scatter(out2, list(big[rank].clone().split(n)) if n else
                                    [torch.empty(0, dtype=dtype) for _ in range(world)], op=redop)
                check("reduce_scatter", out2, lambda: None, full[rank * n:(rank + 1) * n], what)
            # data movement: once per dtype and size
            x = make(rank, case, n, dtype)
            ins = [make(r, case, n, dtype) for r in range(world)]
            outs = [torch.empty(n, dtype=dtype) for _ in range(world)]
            dist.all_gather(outs, x)

            def gloo_ag():
                u = [torch.empty(n, dtype=dtype) for _ in range(world)]
                dist.all_gather(u, x, group=gloo)
                return torch.cat(u)
            check("all_gather", torch.cat(outs), gloo_ag, torch.cat(ins), f"({n} x {dtype})")
            flat = torch.empty(world * n, dtype=dtype)
            dist.all_gather_into_tensor(flat, x)
            check("all_gather_into_tensor", flat, lambda: None, torch.cat(ins), f"({n} x {dtype})")
            for root in (0, world - 1):
                b = x.clone()
                dist.broadcast(b, root)

                def gloo_bc():
                    u = x.clone()
                    dist.broadcast(u, root, group=gloo)
                    return u
                check("broadcast", b, gloo_bc, ins[root], f"({n} x {dtype}, root {root})")

    # Layouts: a non-contiguous tensor, a 2-D output list, the future's value.
    m = torch.arange(12, dtype=torch.float64).reshape(3, 4) * (rank + 1)
    col = m[:, 1]
    dist.all_reduce(col)
    expected_col = torch.tensor([1.0, 5.0, 9.0], dtype=torch.float64) * sum(range(1, world + 1))
    check("all_reduce non-contiguous", col, lambda: None, expected_col, "(column of a 3x4)")
    assert torch.equal(m[:, 1], expected_col), "the non-contiguous tensor's storage was not written back"
    work = dist.all_reduce(torch.ones(5) * rank, async_op=True)
    value = work.get_future().wait()
    assert isinstance(value, list) and torch.equal(value[0], torch.ones(5) * sum(range(world))), value
    counts["future"] = 1

    # The coalescing manager's fast paths (FSDP2's): all_reduce, all_gather_into_tensor, reduce_scatter_tensor.
    from torch.distributed.distributed_c10d import _coalescing_manager
    ts = [torch.full((k + 1,), float(rank + k)) for k in range(3)]
    with _coalescing_manager(async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t)
    cm.wait()
    for k, t in enumerate(ts):
        assert torch.equal(t, torch.full((k + 1,), float(sum(r + k for r in range(world))))), (k, t)
    outs = [torch.empty(world * (k + 1)) for k in range(3)]
    with _coalescing_manager(async_ops=True) as cm:
        for k in range(3):
            dist.all_gather_into_tensor(outs[k], torch.full((k + 1,), float(rank)))
    cm.wait()
    for k in range(3):
        assert torch.equal(outs[k], torch.arange(world).float().repeat_interleave(k + 1)), (k, outs[k])
    rs = [torch.empty(k + 1) for k in range(3)]
    with _coalescing_manager(async_ops=True) as cm:
        for k in range(3):
            dist.reduce_scatter_tensor(rs[k], torch.arange(world * (k + 1)).float(), op=R.AVG)
    cm.wait()
    for k in range(3):
        assert torch.equal(rs[k], torch.arange(rank * (k + 1), (rank + 1) * (k + 1)).float()), (k, rs[k])
    counts["coalesced"] = 3
    dist.barrier()
    # split_group/new_group on a plugin backend: a subgroup of ranks 0 and 1, and the sequence numbers.
    sub = dist.new_group(ranks=[0, 1], backend="ddpcpp")
    if rank < 2:
        t = torch.ones(3)
        dist.all_reduce(t, group=sub)
        assert torch.equal(t, torch.full((3,), 2.0)), t
        counts["subgroup"] = 1
    # The sequence-number calls new_group/split_group make on plugin backends: set is a no-op, get is the
    # number of the next collective, the same on every rank.
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    backend._set_sequence_number_for_group()
    seq = backend._get_sequence_number_for_group()
    seqs = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(seqs, torch.tensor([seq]), group=gloo)
    assert seq > 0 and all(int(x) == seq for x in seqs), (seq, seqs)
    counts["sequence_number"] = 1
    # dist.split_group: ranks 0 and 1 in one split, the rest in another (world 3: rank 2 alone).
    split = dist.split_group(split_ranks=[[0, 1], list(range(2, world))])
    t = torch.full((2,), float(rank + 1))
    dist.all_reduce(t, group=split)
    want = 3.0 if rank < 2 else float(sum(r + 1 for r in range(2, world)))
    assert torch.equal(t, torch.full((2,), want)), (rank, t)
    counts["split_group"] = 1
    dist.destroy_process_group()
    return counts, gloo_counts


def main():
    world = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    results = harness.run_ranks(body, world=world, timeout_s=500)
    counts, gloo_counts = harness.expect_all_ok(results, "collectives")[0]
    for name, k in sorted(counts.items()):
        print(f"ok {name}: {k} cases ({gloo_counts.get(name, 0)} of them also against gloo)")
    print(f"collectives at world {world}: every case agrees with the reference and with Gloo where Gloo has it")


if __name__ == "__main__":
    main()
