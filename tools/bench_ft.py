#!/usr/bin/env python3
"""bench_ft.py - what per-step fault tolerance costs and buys (docs/fault-tolerance.md, "Measured").

On the demo's tiny GPT (Moby Dick, batch 16 per rank, world 2 under ddprun; one thread per rank), or with
--model mlp --backend gloo on the MLP tools/bench_torchft.py runs under torchft:

  healthy   median step of `train` (plain DDP) and of `train --fault-tolerant` (heartbeats every 100 ms),
            and of `train --fault-tolerant` with heartbeats every 10 s (DDP_FT_HEARTBEAT_PERIOD_MS, deadline 60 s): the
            per-step cost of the quorum is the difference between the last two; runs interleaved, --repeats
            each, medians and spreads.
  kill      `ddprun --fault-tolerant --replacements 1`: the script SIGKILLs rank 1 when rank 0 logs step
            --kill-at; measured from the kill: the next committed step (rank 0's next log line), and the
            step at which the world is back to 2; steps lost (attempts not committed).
  restart   what ddprun does without fault tolerance: `--max-restarts 1` and checkpoints every
            --checkpoint-interval steps, resumed with --resume auto; the same kill; measured: the first step
            after the restart, the time until the job is back at the kill step, steps lost (redone).

    python3 tools/bench_ft.py BUILD_DIR [--model gpt|mlp] [--backend shm|gloo] [--steps 120] [--kill-at 60]
                              [--repeats 3] [--json OUT]

Prints the machine (bench_machine) first, then one table. Timings on a loaded 2-core machine are noisy:
compare ratios inside one run.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

STEP = re.compile(r"^\[rank 0\] step\s+(\d+)")
MEDIAN = re.compile(r"median step ([0-9.]+) ms")
MODELS = {
    # the demo's tiny GPT on Moby Dick
    "gpt": ["--model", "gpt", "--data", "moby-dick", "--batch-size", "16", "--lr", "3e-3", "--warmup-steps", "20",
            "--eval-interval", "0", "--sample-tokens", "0"],
    # the MLP tools/bench_torchft.py trains under torchft (784-1024-1024-10, AdamW, batch 16)
    "mlp": ["--model", "mlp", "--data", "synthetic", "--batch-size", "16", "--lr", "3e-3", "--warmup-steps", "20",
            "--eval-interval", "0"],
}


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def cpu_seconds(pid):
    """utime + stime of a live process, in seconds (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


LAST_LAUNCHER_CPU = [0.0]


def run(cmd, env, kill_at=None, timeout=600):
    """Runs cmd; returns (lines with arrival times, kill time). Kills ddprun's second worker at step kill_at.
    LAST_LAUNCHER_CPU[0]: ddprun's own CPU seconds (its store and coordinator), read at its last output line."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    lines, killed_at = [], None
    for line in p.stdout:
        now = time.monotonic() - t0
        c = cpu_seconds(p.pid)
        if c is not None:
            LAST_LAUNCHER_CPU[0] = c
        lines.append((now, line.rstrip("\n")))
        m = STEP.match(line)
        if kill_at is not None and killed_at is None and m and int(m.group(1)) >= kill_at:
            kids = children(p.pid)
            if len(kids) >= 2:
                os.kill(kids[1], signal.SIGKILL)
                killed_at = time.monotonic() - t0
        if now > timeout:
            p.kill()
    p.wait()
    if p.returncode != 0:
        sys.stderr.write("\n".join(l for _, l in lines[-30:]) + "\n")
        raise SystemExit(f"bench_ft: {' '.join(cmd[:4])} ... exited {p.returncode}")
    return lines, killed_at


def median_step(lines):
    for _, l in lines:
        m = MEDIAN.search(l)
        if m:
            return float(m.group(1))
    raise SystemExit("bench_ft: no median step in the output")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--kill-at", type=int, default=60)
    ap.add_argument("--checkpoint-interval", type=int, default=25)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--replace-delay", type=float, default=0.0,
                    help="seconds before ddprun starts the replacement (bench_torchft.py restarts after 2)")
    ap.add_argument("--model", choices=sorted(MODELS), default="gpt")
    ap.add_argument("--backend", choices=["shm", "gloo"], default="shm", help="gloo: DDP_SHM=0 (as torchft's runs)")
    ap.add_argument("--json")
    a = ap.parse_args()
    GPT = MODELS[a.model]
    b = a.build
    ddprun, train = f"{b}/bin/ddprun", f"{b}/bin/train"
    subprocess.run([f"{b}/bin/bench_machine"], check=False)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    if a.backend == "gloo":
        env["DDP_SHM"] = "0"
    steps = ["--steps", str(a.steps)]

    plain = [ddprun, "--nproc-per-node", "2", "--standalone", train] + GPT + steps + ["--log-interval", "0"]
    ft = [ddprun, "--fault-tolerant", "--nproc-per-node", "2", "--standalone", train, "--fault-tolerant"] + GPT + \
        steps + ["--log-interval", "0"]
    slow_beat = dict(env, DDP_FT_HEARTBEAT_PERIOD_MS="10000")
    ft_quiet = ft[:2] + ["--heartbeat-timeout", "60"] + ft[2:]
    healthy = {"plain": [], "ft": [], "ft_quiet": []}
    beats_cpu, launcher_cpu = [], []
    for _ in range(a.repeats):
        healthy["plain"].append(median_step(run(plain, env)[0]))
        lines = run(ft, env)[0]
        healthy["ft"].append(median_step(lines))
        launcher_cpu.append(LAST_LAUNCHER_CPU[0])
        for _, l in lines:
            m = re.search(r"heartbeats: \d+, ([0-9.]+) ms of CPU", l)
            if m:
                beats_cpu.append(float(m.group(1)) / a.steps)
        healthy["ft_quiet"].append(median_step(run(ft_quiet, slow_beat)[0]))

    # A kill under fault tolerance.
    ftlog = tempfile.mkdtemp(prefix="bench-ft-log-")
    ftk = [ddprun, "--fault-tolerant", "--replacements", "1", "--replace-delay", str(a.replace_delay),
           "--nproc-per-node", "2", "--standalone", train,
           "--fault-tolerant", "--ft-log", ftlog] + GPT + steps + ["--log-interval", "1"]
    lines, killed = run(ftk, env, kill_at=a.kill_at)
    check = subprocess.run([train] + GPT + steps + ["--ft-check", ftlog, "--ft-check-tolerance", "1e-3"],
                           stdout=subprocess.PIPE, text=True).stdout
    samples = [l for l in check.splitlines() if "committed once each" in l]
    after = [(t, int(STEP.match(l).group(1))) for t, l in lines if STEP.match(l) and t > killed]
    back = [t for t, l in lines if "world 1 -> 2" in l and "[rank 0]" in l]
    lost = [l for _, l in lines if "step attempts lost here" in l]
    kill = {"next_step_s": after[0][0] - killed if after else None,
            "world_back_s": back[0] - killed if back else None,
            "summary": lost[0].split("] ", 1)[-1].strip() if lost else "",
            "samples": samples[0].replace("ft-check: ", "") if samples else "ft-check found no record"}

    # The same kill with restarts from a checkpoint.
    ck = tempfile.mkdtemp(prefix="bench-ft-ckpt-")
    inner = " ".join([train] + GPT + steps + ["--log-interval", "1", "--checkpoint-dir", ck, "--checkpoint-interval",
                                              str(a.checkpoint_interval)])
    script = f'if [ "$TORCHELASTIC_RESTART_COUNT" -gt 0 ]; then exec {inner} --resume auto; else exec {inner}; fi'
    rs = [ddprun, "--max-restarts", "1", "--nproc-per-node", "2", "--standalone", "bash", "-c", script]
    lines, killed = run(rs, env, kill_at=a.kill_at)
    steps_seen = [(t, int(STEP.match(l).group(1))) for t, l in lines if STEP.match(l)]
    before = max(s for t, s in steps_seen if t <= killed)
    after = [(t, s) for t, s in steps_seen if t > killed]
    first_after = after[0] if after else (None, None)
    regained = [t for t, s in after if s > before]
    restart = {"first_step_after_s": first_after[0] - killed if first_after[0] else None,
               "first_step_after": first_after[1], "back_at_kill_step_s": regained[0] - killed if regained else None,
               "steps_lost": before - (first_after[1] - 1) if first_after[1] else None}

    def ms(v):
        return f"{statistics.median(v):.1f} ms (spread {min(v):.1f}-{max(v):.1f})"
    q = statistics.median(healthy["ft"]) / statistics.median(healthy["ft_quiet"]) - 1
    print(f"\nbench_ft: {a.model} ({a.backend}), world 2, {a.steps} steps, {a.repeats} interleaved repeats, load "
          f"{os.getloadavg()[0]:.1f}")
    print(f"  healthy median step: plain DDP {ms(healthy['plain'])}; --fault-tolerant {ms(healthy['ft'])}; "
          f"--fault-tolerant, heartbeat every 10 s {ms(healthy['ft_quiet'])}")
    print(f"  per-step cost of the heartbeats: {100 * q:+.2f}% of the step time (fault-tolerant vs its own quiet-heartbeat "
          f"run: noise at this load); measured CPU of rank 0's heartbeat thread {statistics.median(beats_cpu):.3f} ms "
          f"per step = {100 * statistics.median(beats_cpu) / statistics.median(healthy['ft']):.2f}% of the median step; "
          f"ddprun's own CPU (store + coordinator, whole run) {statistics.median(launcher_cpu) * 1e3:.0f} ms")
    print(f"  kill at step {a.kill_at}, fault-tolerant: next committed step {kill['next_step_s']:.3f} s after the kill; "
          f"world back to 2 after {kill['world_back_s'] if kill['world_back_s'] is None else round(kill['world_back_s'], 3)} s;"
          f" {kill['summary']}; {kill['samples']}")
    print(f"  kill at step {a.kill_at}, restart from checkpoint (every {a.checkpoint_interval}): first step after the "
          f"restart {restart['first_step_after_s']:.3f} s after the kill (step {restart['first_step_after']}), back at "
          f"step {before + 1} after {restart['back_at_kill_step_s']:.3f} s; {restart['steps_lost']} steps redone")
    out = {"healthy_ms": healthy, "heartbeat_cost": q, "heartbeat_cpu_ms_per_step": beats_cpu,
           "launcher_cpu_s": launcher_cpu, "kill": kill, "restart": restart, "steps": a.steps,
           "kill_at": a.kill_at}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
