#!/usr/bin/env python3
"""ft_campaign.py - a seeded fault campaign for per-step fault tolerance (docs/fault-tolerance.md).

Each trial starts `ddprun --fault-tolerant` over a world of 2-4 ranks on shm or gloo with a small float64 MLP
(a third of them with --zero 1),
and kills one or two ranks with SIGKILL (train --ft-fault) at a random step, in a random phase: forward,
inside backward (buckets in flight), inside the optimizer step (after clipping), after the step before it
commits, during the state transfer of a recovery (a second kill), or while rank 0 writes a checkpoint (every 4 steps:
the newest checkpoint must then load and equal the reference at its step). Some trials start replacements
(--replacements) that join mid-run and heal from a live peer. A trial passes when

  - ddprun exits 0 within the trial's time limit (nothing hangs),
  - `train --ft-check` holds: every step committed once, every sample of every epoch used exactly once, the
    final parameters bitwise equal on every rank that finished and equal (1e-12) to one process trained on
    the same global batches,
  - every lost step is accounted for (ft-check): each attempt that did not commit was redone under a later
    membership epoch, and no epoch lost more than the one step in flight.

    tools/ft_campaign.py BUILD_DIR [--trials 48] [--seed 1] [--keep DIR] [-v]

Prints one line per trial and 'N passed, N failed' (K kills); exit 0 when every trial passed. ctest runs it
as FaultTolerance.Campaign (tests/CMakeLists.txt); a longer campaign is `--trials 500 --seed 7`.
"""
import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

MODEL = ["--model", "mlp", "--hidden", "32", "--depth", "1", "--data", "synthetic", "--synthetic-samples", "384",
         "--batch-size", "8", "--steps", "0", "--epochs", "2", "--optimizer", "sgd", "--momentum", "0.9",
         "--dtype", "float64", "--clip-grad", "1.0"]
PHASES = ["forward", "backward", "optimizer", "commit"]


def plan(rng):
    """One trial: world, backend, faults, replacements."""
    world = rng.choice([2, 3, 4])
    backend = rng.choice(["shm", "gloo"])
    zero = rng.choice([0, 0, 1])  # ZeRO-1: each optimizer shard also on a buddy rank
    victims = rng.sample(range(world), k=min(world - 1, rng.choice([1, 1, 2])))  # someone always survives
    if zero and len(victims) == 2:
        # ZeRO-1 holds each shard on two neighbouring ranks: two kills must spare one holder of each (world 4,
        # ranks two apart, in the same step; losing both holders is a named error, tested in test_ft_runs.cpp).
        victims = rng.choice([[0, 2], [1, 3]]) if world == 4 else victims[:1]
    faults = []
    step = rng.randint(2, 10)
    for i, slot in enumerate(victims):
        phase = rng.choice(PHASES)
        if zero and i == 1:
            faults.append({"slot": slot, "step": step, "phase": faults[0]["phase"]})
            continue
        if i == 0 and not zero and rng.random() < 0.15:
            # rank 0 (the writer: slot 0 is rank 0 until it dies) killed while it writes a checkpoint
            faults.append({"slot": 0, "step": rng.choice([4, 8]), "phase": "checkpoint"})
            continue
        if i == 1 and rng.random() < 0.4:
            phase = "recovery"  # dies while the others heal from the first loss
        faults.append({"slot": slot, "step": step if i == 0 or rng.random() < 0.5 else step + rng.randint(1, 4),
                       "phase": phase})
    replacements = rng.choice([0, 0, 1, 2])
    delay = round(rng.uniform(0.0, 0.3), 2)
    return {"world": world, "backend": backend, "zero": zero, "faults": faults, "replacements": replacements,
            "delay": delay}


def spec(faults):
    return ";".join(f"slot={f['slot']},step={f['step']},phase={f['phase']}" for f in faults)


def run_trial(build, trial, logdir, limit_s, verbose):
    ddprun = os.path.join(build, "bin", "ddprun")
    train = os.path.join(build, "bin", "train")
    env = dict(os.environ)
    env["DDP_FT_TEST_STEP_SLEEP_MS"] = "15"  # a step of the tiny model lasts long enough for replacements to join
    env["OMP_NUM_THREADS"] = env["OPENBLAS_NUM_THREADS"] = "1"
    if trial["backend"] == "gloo":
        env["DDP_SHM"] = "0"
    cmd = [ddprun, "--fault-tolerant", "--nproc-per-node", str(trial["world"]), "--standalone",
           "--grace-period", "1"]
    if trial["replacements"]:
        cmd += ["--replacements", str(trial["replacements"]), "--replace-delay", str(trial["delay"])]
    # ZeRO-1 (refuses checkpoints under --fault-tolerant) or checkpoints every 4 steps
    ckpt = ["--zero", "1"] if trial["zero"] else ["--checkpoint-dir", logdir + "/ckpt", "--checkpoint-interval", "4"]
    cmd += [train, "--fault-tolerant", "--log-interval", "0", "--ft-log", logdir, "--ft-fault",
            spec(trial["faults"])] + MODEL + ckpt
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=limit_s)
    except subprocess.TimeoutExpired as e:
        return False, f"hung: no end within {limit_s} s", (e.stdout or "") if isinstance(e.stdout, str) else ""
    took = time.monotonic() - t0
    out = p.stdout
    if p.returncode != 0:
        return False, f"ddprun exited {p.returncode} after {took:.1f} s", out
    check = subprocess.run([train] + MODEL + ckpt + ["--ft-check", logdir], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=120)
    if check.returncode != 0:
        return False, "ft-check failed", out + check.stdout
    lost_record = None
    for line in check.stdout.splitlines():
        if "attempt(s) not committed" in line:
            lost_record = int(line.split(";")[-1].split()[0])
    redone = sum(1 for line in out.splitlines() if "redone over world" in line or "runs over world" in line)
    if lost_record is None:
        return False, "ft-check printed no attempt count", out + check.stdout
    return True, f"{took:.1f} s, {redone} recover(ies), {lost_record} attempt(s) not committed", out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("--trials", type=int, default=48)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--limit", type=float, default=90.0, help="seconds before a trial counts as hung")
    ap.add_argument("--keep", help="keep each trial's record under this folder")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    passed = failed = kills = 0
    root = a.keep or tempfile.mkdtemp(prefix="ft-campaign-")
    for i in range(a.trials):
        rng = random.Random(a.seed * 100003 + i)
        trial = plan(rng)
        kills += len(trial["faults"])
        logdir = os.path.join(root, f"trial{i}")
        shutil.rmtree(logdir, ignore_errors=True)
        ok, what, out = run_trial(a.build, trial, logdir, a.limit, a.verbose)
        passed += ok
        failed += not ok
        desc = (f"world {trial['world']} {trial['backend']}{' zero1' if trial['zero'] else ''}, kill {spec(trial['faults'])}, "
                f"replacements {trial['replacements']}")
        print(f"trial {i:3d} {'pass' if ok else 'FAIL'}: {desc}: {what}", flush=True)
        if not ok or a.verbose:
            print("".join("    " + l + "\n" for l in out.splitlines()[-40:]), flush=True)
    if not a.keep:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{passed} passed, {failed} failed ({kills} kills, seed {a.seed})")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
