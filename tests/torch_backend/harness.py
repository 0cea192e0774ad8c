"""harness.py - runs a test function on N local ranks (spawned processes) with a TCPStore on 127.0.0.1 that the
parent hosts on a free port, and reports each rank's outcome: the ddpcpp backend tests share it.

    results = harness.run_ranks(fn, world=2, timeout_s=120, args=(...))   # fn(rank, world, store, *args)

Every rank's return value (or its exception's text) comes back; a rank that does not finish within timeout_s is
killed and reported as "hung", so a test never hangs. import ddp_cpp.torch happens in the ranks.
"""
import datetime
import faulthandler
import multiprocessing as mp
import os
import queue
import sys
import traceback

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))


def _child(fn, rank, world, port, q, args, dump_after_s):
    # A rank still running near the parent's deadline prints every thread's Python stack (stderr) first.
    faulthandler.dump_traceback_later(dump_after_s, exit=False)
    try:
        store = dist.TCPStore("127.0.0.1", port, world + 1, False, timeout=datetime.timedelta(seconds=60))
        q.put((rank, "ok", fn(rank, world, store, *args)))
    except BaseException as e:  # noqa: BLE001 - every outcome goes back to the parent
        q.put((rank, "error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
    finally:
        sys.stdout.flush()


def run_ranks(fn, world=2, timeout_s=120, args=(), wait_for=None):
    """{rank: ("ok", value) | ("error", text) | ("hung", "")}; the parent hosts the store. wait_for: the ranks
    whose outcome is awaited (default all); the others are killed once those reported."""
    wait_for = set(range(world) if wait_for is None else wait_for)
    ctx = mp.get_context("spawn")
    server = dist.TCPStore("127.0.0.1", 0, world + 1, True, timeout=datetime.timedelta(seconds=60),
                           wait_for_workers=False)
    q = ctx.Queue()
    procs = [ctx.Process(target=_child, args=(fn, r, world, server.port, q, args, max(timeout_s - 5, 1))) for r in range(world)]
    for p in procs:
        p.start()
    results = {}
    deadline = datetime.datetime.now() + datetime.timedelta(seconds=timeout_s)
    while not wait_for <= set(results):
        left = (deadline - datetime.datetime.now()).total_seconds()
        if left <= 0:
            break
        try:
            rank, status, value = q.get(timeout=min(left, 1.0))
            results[rank] = (status, value)
        except queue.Empty:
            if all(not p.is_alive() for p in procs) and q.empty():
                break
    for r, p in enumerate(procs):
        p.join(timeout=5 if r in results else 0.1)
        if p.is_alive():
            p.kill()
            p.join()
        if r not in results:
            results[r] = ("hung", "") if p.exitcode in (None, -9) else ("died", f"exit code {p.exitcode}")
    return results


def init(backend, rank, world, store, timeout_s=60):
    """init_process_group on the harness's store (importing ddp_cpp.torch first). With DDP_TEST_HOSTS=H (ctest's
    .hosts variants) the ranks play H hosts, consecutive ranks on one (DDP_TORCH_PRETEND_HOST): ddpcpp groups
    then run across hosts (shared memory inside each, PyTorch's Gloo between them)."""
    hosts = int(os.environ.get("DDP_TEST_HOSTS", "0"))
    if hosts:
        os.environ["DDP_TORCH_PRETEND_HOST"] = f"test-host-{rank * hosts // world}"
    import ddp_cpp.torch  # noqa: F401
    dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s))
    if backend == "ddpcpp":
        check_collectives_mode()


def check_collectives_mode(group=None):
    """With DDP_TORCH_COLLECTIVES=caller or thread set (ctest's variants of each test), the ddpcpp group runs its
    collectives that way, and with DDP_TEST_HOSTS it is the group across hosts: raises otherwise, so a variant
    cannot pass by testing another path."""
    want = os.environ.get("DDP_TORCH_COLLECTIVES", "")
    backend = (group if group is not None else dist.distributed_c10d._get_default_group())._get_backend(
        torch.device("cpu"))
    if want in ("caller", "thread"):
        got = backend.collectives_run_on()
        if got != want:
            raise AssertionError(f"DDP_TORCH_COLLECTIVES={want} but the ddpcpp group runs its collectives on the {got}")
    if int(os.environ.get("DDP_TEST_HOSTS", "0")) > 1 and backend.inner_backend() != "hier":
        raise AssertionError(f"DDP_TEST_HOSTS is set but the ddpcpp group is {backend.inner_backend()}, not hier")


def report_launch(what, rc, out, lines, want_lines):
    """One launcher run's verdict: ok when it exited 0 and printed `want_lines` of the expected `lines` (found in
    its output); prints "ok"/"FAIL", the lines, and the output's tail when it failed. Returns ok."""
    ok = rc == 0 and len(lines) == want_lines
    print(f"{'ok  ' if ok else 'FAIL'} {what}: exit {rc}")
    for line in lines:
        print("     " + line)
    if not ok:
        print(out[-4000:])
    return ok


def expect_all_ok(results, what):
    """Raises with every failing rank's text unless all ranks returned."""
    bad = {r: v for r, v in results.items() if v[0] != "ok"}
    if bad:
        text = "\n".join(f"--- rank {r}: {s}\n{v}" for r, (s, v) in sorted(bad.items()))
        raise AssertionError(f"{what}: {len(bad)} rank(s) failed\n{text}")
    return [results[r][1] for r in sorted(results)]
