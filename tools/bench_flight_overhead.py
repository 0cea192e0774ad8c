#!/usr/bin/env python3
"""bench_flight_overhead.py - the flight recorder's cost in the DDP step: bench_e2e at world 2 under ddprun,
recorder on (default, 2000 entries) and off (DDP_FLIGHT_RECORDER_ENTRIES=0), alternated ABBA in one run so
drift and load hit both alike; per setting the median over runs of each run's median step time (slowest
rank), with the spread (min..max of the run medians), and the ratio on/off.

usage: tools/bench_flight_overhead.py [--build build] [--rounds 8] [--steps 50] [--configs mlp,gpt]
Figures: docs/benchmarks.md "Flight recorder overhead".
"""
import argparse
import os
import re
import statistics
import subprocess
import sys


def step_median_ms(build, config, steps, recorder_on):
    env = dict(os.environ)
    env.pop("DDP_FLIGHT_RECORDER_DIR", None)
    if recorder_on:
        env.pop("DDP_FLIGHT_RECORDER_ENTRIES", None)
    else:
        env["DDP_FLIGHT_RECORDER_ENTRIES"] = "0"
    cmd = [f"{build}/bin/ddprun", "--nproc-per-node", "2", f"{build}/bin/bench_e2e", "--config", config,
           "--steps", str(steps)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"bench_flight_overhead: {' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    m = re.search(r"step \(ms, slowest rank\)\s+([0-9.]+)", out.stdout + out.stderr)
    if not m:
        sys.exit(f"bench_flight_overhead: no step line in the output of {' '.join(cmd)}")
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--configs", default="mlp,gpt")
    a = ap.parse_args()
    configs = a.configs.split(",")
    runs = {(c, on): [] for c in configs for on in (True, False)}
    for r in range(a.rounds):
        order = (True, False) if r % 2 == 0 else (False, True)  # ABBA
        for c in configs:
            for on in order:
                runs[(c, on)].append(step_median_ms(a.build, c, a.steps, on))
    print(f"flight recorder overhead: bench_e2e world 2 (ddprun, default backend), {a.rounds} runs per setting "
          f"alternated ABBA, {a.steps} measured steps per run; load {os.getloadavg()[0]:.2f} at the end")
    print(f"{'config':8} {'on (ms)':>10} {'off (ms)':>10} {'on/off':>8}   spread on / off (run medians)")
    for c in configs:
        on, off = runs[(c, True)], runs[(c, False)]
        mo, mf = statistics.median(on), statistics.median(off)
        print(f"{c:8} {mo:10.3f} {mf:10.3f} {mo / mf:8.3f}   {min(on):.3f}..{max(on):.3f} / {min(off):.3f}..{max(off):.3f}")


if __name__ == "__main__":
    main()
