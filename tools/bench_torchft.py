#!/usr/bin/env python3
"""bench_torchft.py - torchft (per-step fault tolerance, PyTorch) measured on this CPU machine, as the yardstick
for ddp.cpp's per-step fault tolerance (issue 40). Our own script: it uses torchft's public API and copies none
of its code.

The model is the one `train --model mlp --data synthetic` trains: 784 -> 1024 -> 1024 -> 10 (Linear/ReLU,
--hidden/--depth), float32, AdamW lr 3e-3, gradient clipping at 1.0, 16 rows per rank per step, teacher-labelled
Gaussian inputs with 10 classes (the same recipe as runtime/data/synthetic.cpp, not the same numbers). Every
process runs one thread (torch.set_num_threads(1), OMP_NUM_THREADS=1) over gloo on the loopback.

torchft's setup: a Lighthouse (the torchft_lighthouse binary, --min_replicas 1) and 2 replica groups of 1 process
each (world 2): torchft.Manager + torchft.ProcessGroupGloo + torchft.ddp.DistributedDataParallel +
torchft.optim.OptimizerWrapper + torchft.data.DistributedSampler. A step is committed when the Manager's
should_commit is True (the OptimizerWrapper then steps; Manager.current_step() counts committed steps).

  healthy   torchft vs plain torch DDP (gloo, 2 processes, torchrun's env: MASTER_ADDR/PORT, RANK, WORLD_SIZE),
            the runs alternated (--repeats of each): median step time of each over the steps where the world is
            2, the per-step overhead of torchft (medians of the per-run medians, and their spread); also each
            process's CPU time per step (time.process_time: all its threads, torchft's Rust ones included),
            which other jobs on the machine disturb far less than wall time, and the step's phases.
  fault     torchft only, --fault-repeats runs of --fault-steps (default 200: the survivor must still be training
            when the restarted replica is back): the driver SIGKILLs replica 1 once it prints committed step
            --kill-step (one flushed JSON line per step; --kill-at backward: as its next backward pass begins, so
            that the survivor's allreduce fails), restarts it --restart-delay seconds later, and measures from the
            survivor's lines: kill -> the survivor's first committed step without the victim (new quorum), kill
            (and restart) -> the first step with 2 participants again, the survivor's uncommitted steps, and,
            with every sample given an id and each replica logging the ids of its committed steps, over the
            epoch (dataset = steps x 2 x batch rows, one epoch when nothing fails) the ids never trained on and
            the ids trained on more than once. --wrapper ours: torch's DDP with our own comm hook through the
            Manager instead of torchft.ddp.DistributedDataParallel (which 0.2.0 lets crash the survivor when the
            peer dies inside the allreduce: an AssertionError in its comm hook).
            --data sampler (default): each replica iterates torchft's DistributedSampler like torchft's example
            train_ddp.py, a restarted one from the start of its shard; --data step: the batch is chosen by the
            committed step (Manager.current_step(), restored when a replica heals).

Run (the venv of tools/setup_torch2.sh; `tools/setup_torch2.sh --with-torchft` adds torchft to it):

  PY=$(tools/setup_torch2.sh --path)
  $PY tools/bench_torchft.py                      # both parts, defaults; prints a table and a JSON summary
  $PY tools/bench_torchft.py --part healthy --repeats 5 --steps 60
  $PY tools/bench_torchft.py --part fault --kill-step 20 --restart-delay 2 --heartbeat-timeout-ms 5000
  $PY tools/bench_torchft.py --part fault --kill-at backward --wrapper ours   # a kill inside the allreduce
  $PY tools/bench_torchft.py --json out.json      # the summary to a file too; --logs DIR keeps every process's log

The lighthouse knobs (--quorum-tick-ms, --join-timeout-ms, --heartbeat-timeout-ms) default to torchft's own
defaults (100, 60000, 5000). The Manager's timeouts (--timeout-s: collectives, should_commit, checkpoint
transfer; --quorum-timeout-s) default to 60 s as in torchft. Exit status 0 when every run finished, 1 otherwise.
"""
import argparse
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

IN_FEATURES, CLASSES = 28 * 28, 10


# ----------------------------------------------------------------------------------------------------- workers
def make_model(torch, hidden, depth):
    layers, width = [], IN_FEATURES
    for _ in range(depth):
        layers += [torch.nn.Linear(width, hidden), torch.nn.ReLU()]
        width = hidden
    layers.append(torch.nn.Linear(width, CLASSES))
    return torch.nn.Sequential(*layers)


def make_data(torch, n, seed):
    """Teacher-labelled Gaussian inputs (runtime/data/synthetic.cpp's recipe): x ~ N(0,1), y = argmax(W x)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, IN_FEATURES, generator=g)
    w = torch.randn(CLASSES, IN_FEATURES, generator=g, dtype=torch.float64)
    y = (x.double() @ w.t()).argmax(1)
    return x, y


def emit(rec):
    sys.stdout.write(json.dumps(rec) + "\n")
    sys.stdout.flush()


def worker(a):
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    n = a.steps * 2 * a.batch
    x, y = make_data(torch, n, a.seed)
    model = make_model(torch, a.hidden, a.depth)
    lossf = torch.nn.CrossEntropyLoss()

    if a.worker == "ddp":
        import torch.distributed as dist
        dist.init_process_group("gloo")  # torchrun's env: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
        rank = dist.get_rank()
        net = torch.nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.AdamW(net.parameters(), lr=a.lr)
        sampler = torch.utils.data.distributed.DistributedSampler(range(n), num_replicas=2, rank=rank,
                                                                  shuffle=True, seed=a.seed)
        order = list(iter(sampler))
        emit({"ready": True, "r": rank, "t": time.time()})
        for step in range(a.steps):
            t0, c0 = time.perf_counter(), time.process_time()
            ids = order[step * a.batch:(step + 1) * a.batch]
            opt.zero_grad()
            t1 = time.perf_counter()
            loss = lossf(net(x[ids]), y[ids])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            t2 = time.perf_counter()
            opt.step()
            t3 = time.perf_counter()
            emit({"r": rank, "t": time.time(), "step": step + 1, "commit": True, "np": 2, "dt": t3 - t0,
                  "ph": [t1 - t0, t2 - t1, t3 - t2], "cpu": time.process_time() - c0, "loss": loss.item()})
        dist.destroy_process_group()
        return 0

    # torchft: one replica group of one process
    import logging
    from datetime import timedelta
    from torch.distributed import TCPStore
    import torchft
    from torchft import Manager, ProcessGroupGloo, DistributedSampler
    from torchft.ddp import DistributedDataParallel
    from torchft.optim import OptimizerWrapper
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s.%(msecs)03d %(name)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    rid = a.replica
    # This group's own store (torchelastic would start it): the Manager and, when this replica is the quorum's
    # store host, the cross-replica gloo group meet there.
    store = TCPStore("localhost", 0, is_master=True, wait_for_workers=False)
    if a.barrier:  # start both replica groups' Managers together (the driver answers once both are ready), so
        # that the first quorum has both: with --min_replicas 1 a replica that asks alone gets a quorum of 1
        emit({"waiting": True, "r": rid, "t": time.time()})
        sys.stdin.readline()
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr)

    def load_state_dict(sd):
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["optim"])

    def state_dict():
        return {"model": model.state_dict(), "optim": opt.state_dict()}

    pg = ProcessGroupGloo(timeout=timedelta(seconds=a.timeout_s))
    manager = Manager(pg=pg, min_replica_size=1, load_state_dict=load_state_dict, state_dict=state_dict,
                      replica_id=f"bench_{rid}", store_addr="localhost", store_port=store.port, rank=0,
                      world_size=1, lighthouse_addr=a.lighthouse, hostname="localhost",
                      timeout=timedelta(seconds=a.timeout_s), quorum_timeout=timedelta(seconds=a.quorum_timeout_s),
                      connect_timeout=timedelta(seconds=a.timeout_s))
    if a.wrapper == "torchft":
        net = DistributedDataParallel(manager, model)
    else:  # torch's DDP with our own comm hook through the Manager: a failed allreduce gives a zero gradient (the
        # error is already reported to the Manager, so the step will not commit) instead of an exception
        from torchft.process_group import ProcessGroupDummy
        net = torch.nn.parallel.DistributedDataParallel(model, process_group=ProcessGroupDummy(0, 1),
                                                        find_unused_parameters=True)

        def hook(mgr, bucket):
            buf = bucket.buffer()
            if not mgr.allreduce(buf).wait():  # wait() divides by the participants in place when it succeeds
                buf.zero_()
            fut = torch.futures.Future()
            fut.set_result(buf)
            return fut
        net.register_comm_hook(manager, hook)
    if a.mark_backward:  # a line as each backward pass starts: the driver's cue to kill inside the allreduce
        model[-1].register_full_backward_pre_hook(
            lambda mod, g: emit({"bwd": manager.current_step(), "r": rid, "t": time.time()}))
    if a.barrier:
        time.sleep(0.5)  # both Managers heartbeat to the Lighthouse before either asks for a quorum
    fopt = OptimizerWrapper(manager, opt)
    sampler = DistributedSampler(range(n), replica_rank=rid, num_replica_groups=2, group_rank=0, num_replicas=1,
                                 shuffle=True, seed=a.seed)
    epoch, order = 0, list(iter(sampler))
    per_epoch = len(order) // a.batch
    emit({"ready": True, "r": rid, "t": time.time(), "pid": os.getpid()})
    it = 0  # loop iterations (batches drawn in --data sampler mode)
    while manager.current_step() < a.steps:
        t0, c0 = time.perf_counter(), time.process_time()
        pos = it if a.data == "sampler" else manager.current_step()
        if a.data == "sampler" and pos // per_epoch != epoch:  # the next epoch of this replica's shard
            epoch = pos // per_epoch
            sampler.set_epoch(epoch)
            order = list(iter(sampler))
        k = pos % per_epoch
        ids = order[k * a.batch:(k + 1) * a.batch]
        before = manager.current_step()
        fopt.zero_grad()  # starts the (async) quorum
        t1 = time.perf_counter()
        loss = lossf(net(x[ids]), y[ids])
        loss.backward()  # the comm hook waits for the quorum and allreduces through the Manager
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        participating = manager.is_participating()
        t2 = time.perf_counter()
        fopt.step()  # should_commit, then AdamW only when True
        t3 = time.perf_counter()
        commit = manager.current_step() > before
        dt = t3 - t0
        rec = {"r": rid, "t": time.time(), "step": manager.current_step(), "commit": commit,
               "np": manager.num_participants(), "part": participating, "qid": manager._quorum_id, "dt": dt,
               "ph": [t1 - t0, t2 - t1, t3 - t2], "cpu": time.process_time() - c0,
               "loss": loss.item(), "healed_from": before if manager.current_step() - before > 1 else None}
        if commit and participating:
            rec["ids"] = ids
        emit(rec)
        it += 1
    manager.shutdown(wait=False)
    return 0


# ------------------------------------------------------------------------------------------------------ driver
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """A child whose stdout JSON lines are collected by a thread; stderr goes to a log file."""

    def __init__(self, name, argv, env, logdir, on_line=None):
        self.name, self.lines, self.on_line = name, [], on_line
        self.log = open(os.path.join(logdir, name + ".log"), "w")
        self.p = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                  text=True, bufsize=1)
        self.th = threading.Thread(target=self._read, daemon=True)
        self.th.start()

    def _read(self):
        for line in self.p.stdout:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            rec["recv"] = time.time()
            self.lines.append(rec)
            if self.on_line:
                self.on_line(self, rec)

    def wait(self, timeout):
        try:
            rc = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait()
            rc = "timeout"
        self.th.join(5)
        self.log.close()
        return rc


def child_env():
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.pop("TORCHFT_LIGHTHOUSE", None)
    return env


def worker_argv(a, kind, extra):
    argv = [sys.executable, os.path.abspath(__file__), "--worker", kind, "--steps", str(a.steps), "--batch",
            str(a.batch), "--hidden", str(a.hidden), "--depth", str(a.depth), "--lr", str(a.lr), "--seed",
            str(a.seed), "--timeout-s", str(a.timeout_s), "--quorum-timeout-s", str(a.quorum_timeout_s),
            "--data", a.data, "--wrapper", a.wrapper]
    return argv + extra


def lighthouse_bin():
    b = os.path.join(os.path.dirname(sys.executable), "torchft_lighthouse")
    return b if os.path.exists(b) else shutil.which("torchft_lighthouse")


def start_lighthouse(a, logdir, name):
    port = free_port()
    argv = [lighthouse_bin(), "--bind", f"[::]:{port}", "--min_replicas", "1", "--quorum_tick_ms",
            str(a.quorum_tick_ms), "--join_timeout_ms", str(a.join_timeout_ms), "--heartbeat_timeout_ms",
            str(a.heartbeat_timeout_ms)]
    log = open(os.path.join(logdir, name + ".log"), "w")
    env = dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "info"))
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.time() + 20
    while time.time() < deadline:  # wait until it listens
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.05)
    return p, log, f"http://localhost:{port}", argv


def stop(p):
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def run_ddp(a, logdir, tag):
    env = child_env()
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="2")
    procs = []
    for r in range(2):
        e = dict(env, RANK=str(r), LOCAL_RANK=str(r))
        procs.append(Proc(f"{tag}_rank{r}", worker_argv(a, "ddp", []), e, logdir))
    rcs = [p.wait(a.run_timeout_s) for p in procs]
    return procs, rcs


def run_torchft(a, logdir, tag, on_line=None, extra=None):
    lh, lhlog, addr, lh_argv = start_lighthouse(a, logdir, tag + "_lighthouse")
    extra = extra or {}
    procs = [Proc(f"{tag}_replica{r}", worker_argv(a, "torchft", ["--replica", str(r), "--lighthouse", addr,
                                                                   "--barrier"] + extra.get(r, [])),
                  child_env(), logdir, on_line) for r in range(2)]
    deadline = time.time() + a.run_timeout_s
    while time.time() < deadline and not all(any(l.get("waiting") for l in p.lines) or p.p.poll() is not None
                                             for p in procs):
        time.sleep(0.01)
    for p in procs:  # go
        try:
            p.p.stdin.write("go\n")
            p.p.stdin.flush()
        except OSError:
            pass
    return lh, lhlog, addr, lh_argv, procs


def steady(lines, warmup, key="dt"):
    """`key` (step seconds; "cpu": the process's CPU seconds, all threads; "ph0".."ph2": zero_grad, forward +
    backward (with the allreduce and the quorum wait) + clipping, optimizer step (with should_commit)) of the
    committed steps with 2 participants, past the first `warmup` such steps."""
    s = [l for l in lines if "dt" in l and l.get("commit") and l.get("np") == 2][warmup:]
    if key.startswith("ph"):
        return [l["ph"][int(key[2:])] for l in s if "ph" in l]
    return [l[key] for l in s if key in l]


def steady_dts(lines, warmup):
    return steady(lines, warmup)


def spread(xs):
    if not xs:
        return None
    s = sorted(xs)
    q = lambda f: s[min(len(s) - 1, int(round(f * (len(s) - 1))))]  # noqa: E731
    return {"median": statistics.median(s), "min": s[0], "p10": q(0.1), "p90": q(0.9), "max": s[-1], "n": len(s)}


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def med_ms(per_rank):
    """The median over the ranks of each rank's median, in ms (None when no rank has a value)."""
    meds = [statistics.median(d) for d in per_rank if d]
    return 1e3 * statistics.median(meds) if meds else None


def healthy(a, logdir):
    runs = {"ddp": [], "torchft": []}
    ok = True
    for rep in range(a.repeats):
        order = ["ddp", "torchft"] if rep % 2 == 0 else ["torchft", "ddp"]
        for kind in order:
            tag = f"healthy{rep}_{kind}"
            load0 = loadavg()
            t0 = time.time()
            if kind == "ddp":
                procs, rcs = run_ddp(a, logdir, tag)
            else:
                lh, lhlog, _, _, procs = run_torchft(a, logdir, tag)
                rcs = [p.wait(a.run_timeout_s) for p in procs]
                stop(lh)
                lhlog.close()
            wall = time.time() - t0
            ok &= all(rc == 0 for rc in rcs)
            per_rank = [steady_dts(p.lines, a.warmup) for p in procs]
            meds = [statistics.median(d) for d in per_rank if d]
            rec = {"rep": rep, "rc": rcs, "wall_s": round(wall, 2), "load_before": load0, "load_after": loadavg(),
                   "median_step_ms": 1e3 * statistics.median(meds) if meds else None,
                   **{f"median_{k}_ms": med_ms([steady(p.lines, a.warmup, k) for p in procs])
                      for k in ("cpu", "ph0", "ph1", "ph2")},
                   "steps_counted": [len(d) for d in per_rank],
                   "uncommitted": sum(1 for p in procs for l in p.lines if "dt" in l and not l["commit"]),
                   "steps_world1": sum(1 for p in procs for l in p.lines if "dt" in l and l.get("np") == 1)}
            runs[kind].append(rec)
            print(f"  {tag}: median step {rec['median_step_ms'] or float('nan'):.2f} ms  rc {rcs}  "
                  f"load {load0}", file=sys.stderr)
    out = {}
    for kind in runs:
        out[kind] = {"runs": runs[kind]}
        for k in ("median_step_ms", "median_cpu_ms", "median_ph0_ms", "median_ph1_ms", "median_ph2_ms"):
            out[kind][k] = spread([r[k] for r in runs[kind] if r.get(k) is not None])
    for k, name in (("median_step_ms", "overhead_ms_per_step"), ("median_cpu_ms", "overhead_cpu_ms_per_step")):
        d = [t[k] - r[k] for r, t in zip(runs["ddp"], runs["torchft"]) if r.get(k) and t.get(k)]
        out[name] = spread(d)
    return out, ok


def last_error(path):
    """The last line of a log that names an error (an exception's last line), or None."""
    try:
        with open(path, errors="replace") as f:
            lines = [l.strip() for l in f if "Error" in l and not l.startswith(" ")]
    except OSError:
        return None
    return lines[-1][:300] if lines else None


FAULT_FIGURES = ("kill_to_survivor_next_commit_s", "kill_to_first_commit_new_quorum_s",
                 "survivor_longest_step_after_kill_s", "survivor_uncommitted_steps_after_kill", "survivor_steps_world1",
                 "restart_to_process_ready_s", "restart_to_world2_s", "kill_to_world2_s")


def faults(a, logdir):
    """--fault-repeats fault runs; each figure's median and spread over the runs that produced it."""
    runs, ok = [], True
    for i in range(a.fault_repeats):
        r, k = fault(a, logdir, f"fault{i}")
        ok &= k
        runs.append(r)
        print(f"  fault{i}: kill->commit {r.get('kill_to_survivor_next_commit_s')}  kill->world2 "
              f"{r.get('kill_to_world2_s')}  survivor rc {r.get('rc', {}).get('survivor')}", file=sys.stderr)
    agg = {k: spread([r[k] for r in runs if r.get(k) is not None]) for k in FAULT_FIGURES}
    agg["samples_never_used"] = spread([r["samples"]["never_used"] for r in runs if "samples" in r])
    agg["samples_used_more_than_once"] = spread([r["samples"]["used_more_than_once"] for r in runs if "samples" in r])
    agg["dataset"] = a.fault_steps * 2 * a.batch
    agg["runs"] = len(runs)
    agg["survivor_died"] = sum(1 for r in runs if r.get("survivor_error") or r.get("rc", {}).get("survivor") != 0)
    agg["never_back_to_world2"] = sum(1 for r in runs if r.get("kill_to_world2_s") is None)
    return {"summary": agg, "runs": runs}, ok


def fault(a, logdir, tag):
    a = argparse.Namespace(**{**vars(a), "steps": a.fault_steps})
    state = {"killed_at": None, "restart_at": None, "victim": None}
    lock = threading.Lock()

    def on_line(proc, rec):
        with lock:
            if not proc.name.endswith("replica1") or state["killed_at"] is not None:
                return
            if a.kill_at == "backward" and rec.get("bwd", -1) >= a.kill_step:
                rec = {"step": rec["bwd"]}  # inside step kill_step + 1, its backward pass just begun
            elif not (a.kill_at == "step" and rec.get("commit") and rec.get("step", 0) >= a.kill_step):
                return
            if a.kill_offset_ms > 0:  # later into the next step
                time.sleep(a.kill_offset_ms / 1e3)
            proc.p.send_signal(signal.SIGKILL)
            state["killed_at"] = time.time()
            state["killed_after_step"] = rec["step"]
            state["victim"] = proc

    load0 = loadavg()
    lh, lhlog, addr, lh_argv, procs = run_torchft(a, logdir, tag, on_line,
                                                  {1: ["--mark-backward"]} if a.kill_at == "backward" else None)
    survivor, victim = procs
    deadline = time.time() + a.run_timeout_s
    while state["killed_at"] is None and time.time() < deadline and victim.p.poll() is None:
        time.sleep(0.01)
    if state["killed_at"] is None:
        rcs = [p.wait(a.run_timeout_s) for p in procs]
        stop(lh)
        return {"error": f"replica 1 ended before step {a.kill_step} (rc {rcs})"}, False
    victim_rc = victim.wait(30)
    time.sleep(max(0.0, state["killed_at"] + a.restart_delay - time.time()))
    state["restart_at"] = time.time()
    reborn = Proc(f"{tag}_replica1_restarted",
                  worker_argv(a, "torchft", ["--replica", "1", "--lighthouse", addr]), child_env(), logdir)
    rcs = [survivor.wait(a.run_timeout_s), reborn.wait(a.run_timeout_s)]
    stop(lh)
    lhlog.close()
    ok = all(rc == 0 for rc in rcs)

    tk, tr = state["killed_at"], state["restart_at"]
    s_lines = [l for l in survivor.lines if "dt" in l]
    after_kill = [l for l in s_lines if l["t"] > tk]
    first_commit = next((l for l in after_kill if l["commit"]), None)
    # the survivor's step in flight at the kill may still complete with the victim's gradient (delivered before
    # the kill); the first step of a new quorum is the first one without the victim
    qid_at_kill = max((l["qid"] for l in s_lines if l["t"] <= tk), default=None)
    first_new_q = next((l for l in after_kill if l["commit"] and l["qid"] != qid_at_kill), None)
    back_to_2 = next((l for l in s_lines if l["t"] > tr and l["commit"] and l["np"] == 2), None)
    lost_steps = sum(1 for l in after_kill if not l["commit"])
    r_lines = [l for l in reborn.lines if "dt" in l]
    ready = next((l for l in reborn.lines if l.get("ready")), None)
    first_reborn = r_lines[0] if r_lines else None
    # the samples: ids of the committed steps in which a replica took part, over all three processes
    n = a.steps * 2 * a.batch
    uses = [0] * n
    for p in (survivor, victim, reborn):
        for l in p.lines:
            for i in l.get("ids", []):
                uses[i] += 1
    never = sum(1 for u in uses if u == 0)
    more = sum(1 for u in uses if u > 1)
    # which shard the never-used ids belong to
    import torch  # noqa: F401  (only for the sampler's order, as the workers compute it)
    from torchft import DistributedSampler
    shard = {}
    for r in range(2):
        for i in DistributedSampler(range(n), replica_rank=r, num_replica_groups=2, group_rank=0, num_replicas=1,
                                    shuffle=True, seed=a.seed):
            shard[i] = r
    never_by_shard = [sum(1 for i in range(n) if uses[i] == 0 and shard[i] == r) for r in range(2)]
    more_by_shard = [sum(1 for i in range(n) if uses[i] > 1 and shard[i] == r) for r in range(2)]
    out = {
        "rc": {"survivor": rcs[0], "killed": victim_rc, "restarted": rcs[1]},
        "survivor_error": last_error(os.path.join(logdir, f"{tag}_replica0.log")) if rcs[0] != 0 else None,
        "restarted_error": (last_error(os.path.join(logdir, f"{tag}_replica1_restarted.log"))
                            if rcs[1] != 0 else None),
        "steps": a.steps, "wrapper": a.wrapper,
        "load_before": load0, "load_after": loadavg(),
        "lighthouse": lh_argv[1:],
        "kill_step": a.kill_step, "kill_at": a.kill_at, "kill_offset_ms": a.kill_offset_ms,
        "killed_after_committed_step": state["killed_after_step"],
        "restart_delay_s": a.restart_delay,
        "kill_to_survivor_next_commit_s": first_commit["t"] - tk if first_commit else None,
        "survivor_next_commit_step": first_commit["step"] if first_commit else None,
        "kill_to_first_commit_new_quorum_s": first_new_q["t"] - tk if first_new_q else None,
        "survivor_longest_step_after_kill_s": max((l["dt"] for l in after_kill), default=None),
        "survivor_uncommitted_steps_after_kill": lost_steps,
        "survivor_steps_world1": sum(1 for l in s_lines if l["np"] == 1 and l["t"] > tk),
        "kill_to_world2_s": back_to_2["t"] - tk if back_to_2 else None,
        "restart_to_world2_s": back_to_2["t"] - tr if back_to_2 else None,
        "restart_to_process_ready_s": ready["t"] - tr if ready else None,
        "restart_to_first_step_s": first_reborn["t"] - tr if first_reborn else None,
        "restarted_first_step": ({k: first_reborn[k] for k in ("step", "commit", "np", "part", "healed_from")}
                                 if first_reborn else None),
        "restarted_steps": len(r_lines), "restarted_uncommitted": sum(1 for l in r_lines if not l["commit"]),
        "survivor_step_ms_world1": spread([1e3 * l["dt"] for l in s_lines if l["np"] == 1 and l["commit"]]),
        "survivor_step_ms_world2": spread([1e3 * l["dt"] for l in s_lines if l["np"] == 2 and l["commit"]]),
        "samples": {"dataset": n, "data_mode": a.data, "trained_sample_steps": sum(uses), "never_used": never,
                    "used_more_than_once": more, "never_used_by_shard": never_by_shard,
                    "repeated_by_shard": more_by_shard},
        "survivor_timeline": [{k: l.get(k) for k in ("step", "commit", "np", "qid")} | {
            "t_from_kill_s": round(l["t"] - tk, 3), "dt_ms": round(1e3 * l["dt"], 1)}
            for l in s_lines if tk - 0.5 < l["t"] < (back_to_2["t"] + 0.5 if back_to_2 else tk + 30)],
    }
    return out, ok


def machine(a):
    info = {"python": platform.python_version(), "platform": platform.platform(), "cores": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            txt = f.read()
        for line in txt.splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        flags = next((l.split(":", 1)[1].split() for l in txt.splitlines() if l.startswith("flags")), [])
        info["isa"] = sorted(f for f in flags if f in ("avx", "avx2", "fma") or f.startswith("avx512"))
    except OSError:
        pass
    import torch
    import importlib.metadata as md
    info["torch"] = torch.__version__
    info["torchft"] = md.version("torchft")
    info["threads_per_process"] = 1
    return info


def table(summary):
    rows = []
    h = summary.get("healthy")
    if h:
        for kind in ("ddp", "torchft"):
            s = h[kind]["median_step_ms"]
            if s:
                rows.append((f"healthy step, {kind} (ms)", f"{s['median']:.2f}", f"{s['min']:.2f}..{s['max']:.2f}"))
        o = h["overhead_ms_per_step"]
        if o:
            rows.append(("torchft overhead per step (ms)", f"{o['median']:.2f}", f"{o['min']:.2f}..{o['max']:.2f}"))
        for kind in ("ddp", "torchft"):
            for k, what in (("median_cpu_ms", "CPU time"), ("median_ph0_ms", "zero_grad"),
                            ("median_ph1_ms", "fwd+bwd+allreduce"), ("median_ph2_ms", "optimizer step")):
                s = h[kind].get(k)
                if s:
                    rows.append((f"  {kind} {what} (ms)", f"{s['median']:.2f}", f"{s['min']:.2f}..{s['max']:.2f}"))
        o = h.get("overhead_cpu_ms_per_step")
        if o:
            rows.append(("torchft CPU overhead per step (ms)", f"{o['median']:.2f}",
                         f"{o['min']:.2f}..{o['max']:.2f}"))
    f = summary.get("fault")
    if f:
        g = f["summary"]
        names = {"kill_to_survivor_next_commit_s": "kill -> survivor's next committed step (s)",
                 "kill_to_first_commit_new_quorum_s": "kill -> survivor's first commit, new quorum (s)",
                 "survivor_longest_step_after_kill_s": "survivor's longest step after the kill (s)",
                 "survivor_uncommitted_steps_after_kill": "survivor steps not committed",
                 "survivor_steps_world1": "survivor steps at world 1",
                 "restart_to_process_ready_s": "restart -> process ready (s)",
                 "restart_to_world2_s": "restart -> world 2 again (s)",
                 "kill_to_world2_s": "kill -> world 2 again (s)",
                 "samples_never_used": f"samples never used (of {g['dataset']})",
                 "samples_used_more_than_once": "samples used more than once"}
        for k, name in names.items():
            v = g.get(k)
            if v:
                rows.append((name, f"{v['median']:.2f}", f"{v['min']:.2f}..{v['max']:.2f} (n {v['n']})"))
        rows.append(("fault runs: survivor died / never world 2 again",
                     f"{g['survivor_died']}, {g['never_back_to_world2']}", f"of {g['runs']}"))
    w = max(len(r[0]) for r in rows) if rows else 0
    lines = [f"{'':{w}}  {'median':>10}  {'spread (min..max)':>18}"]
    lines += [f"{r[0]:{w}}  {r[1]:>10}  {r[2]:>18}" for r in rows]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--part", choices=("all", "healthy", "fault"), default="all")
    ap.add_argument("--steps", type=int, default=60, help="committed steps per run (default 60)")
    ap.add_argument("--repeats", type=int, default=3, help="healthy: runs of each kind, alternated (default 3)")
    ap.add_argument("--warmup", type=int, default=5, help="healthy: world-2 steps left out of the median")
    ap.add_argument("--kill-step", type=int, default=20, help="fault: SIGKILL replica 1 after this committed step")
    ap.add_argument("--kill-at", choices=("step", "backward"), default="step",
                    help="fault: step: once replica 1 printed committed step --kill-step (between steps); "
                         "backward: as its backward pass of the next step begins (its allreduce then fails)")
    ap.add_argument("--kill-offset-ms", type=float, default=0,
                    help="fault: kill this long after replica 1 printed the step (0: at once, between steps)")
    ap.add_argument("--restart-delay", type=float, default=2.0, help="fault: seconds from the kill to the restart")
    ap.add_argument("--data", choices=("sampler", "step"), default="sampler",
                    help="sampler: iterate torchft's DistributedSampler (as torchft's example); step: batch by "
                         "the committed step")
    ap.add_argument("--wrapper", choices=("torchft", "ours"), default="torchft",
                    help="torchft: torchft.ddp.DistributedDataParallel; ours: torch DDP + our comm hook through "
                         "the Manager (a failed allreduce: zero gradient, no commit)")
    ap.add_argument("--fault-steps", type=int, default=200,
                    help="fault: committed steps of that run (the survivor must still be training when the "
                         "restarted replica is back: D + its start-up + the heartbeat timeout)")
    ap.add_argument("--fault-repeats", type=int, default=3, help="fault: runs (default 3)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--quorum-tick-ms", type=int, default=100)
    ap.add_argument("--join-timeout-ms", type=int, default=60000)
    ap.add_argument("--heartbeat-timeout-ms", type=int, default=5000)
    ap.add_argument("--timeout-s", type=int, default=60, help="Manager timeout (collectives, should_commit)")
    ap.add_argument("--quorum-timeout-s", type=int, default=60)
    ap.add_argument("--run-timeout-s", type=float, default=300, help="a run killed past this")
    ap.add_argument("--json", help="also write the JSON summary here")
    ap.add_argument("--logs", help="keep every process's log in this folder (default: a temporary one)")
    ap.add_argument("--worker", choices=("ddp", "torchft"), help=argparse.SUPPRESS)
    ap.add_argument("--replica", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--lighthouse", help=argparse.SUPPRESS)
    ap.add_argument("--barrier", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mark-backward", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a)

    try:  # one line instead of a traceback (as tools/python_deps.py does); no Debian package has torchft
        import torchft  # noqa: F401  (imports torch too)
    except ImportError as e:
        sys.exit(f"bench_torchft.py needs PyTorch 2.x and torchft, which {sys.executable} cannot import "
                 f"({' '.join(str(e).split())}): run tools/setup_torch2.sh --with-torchft, then this script with "
                 f"the python that tools/setup_torch2.sh --path prints")
    if not lighthouse_bin():
        sys.exit("bench_torchft.py: no torchft_lighthouse next to " + sys.executable)
    logdir = a.logs or tempfile.mkdtemp(prefix="bench_torchft.")
    os.makedirs(logdir, exist_ok=True)
    summary = {"machine": machine(a), "uptime_before": subprocess.run(["uptime"], capture_output=True,
                                                                      text=True).stdout.strip(),
               "args": {k: v for k, v in vars(a).items()
                        if k not in ("worker", "replica", "lighthouse", "barrier", "mark_backward")},
               "logs": logdir}
    ok = True
    if a.part in ("all", "healthy"):
        print(f"healthy: {a.repeats} x (plain DDP, torchft), {a.steps} steps each", file=sys.stderr)
        summary["healthy"], k = healthy(a, logdir)
        ok &= k
    if a.part in ("all", "fault"):
        print(f"fault: SIGKILL replica 1 after step {a.kill_step}, restart {a.restart_delay} s later",
              file=sys.stderr)
        summary["fault"], k = faults(a, logdir)
        ok &= k
    summary["uptime_after"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    text = json.dumps(summary, indent=1)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    print(table(summary), file=sys.stderr)
    print(f"logs: {logdir}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
