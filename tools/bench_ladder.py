#!/usr/bin/env python3
"""bench_ladder.py - the ladder's five rungs (examples/ladder, docs/ladder.md) side by side: each rung's
program at world 2 under ddprun, the rungs interleaved in rounds (round r starts at rung r, so each rung runs
in every position and drift and load hit all alike); per rung the median over rounds of each run's median step
time and exposed communication (rank 0: waiting for collectives after backward's last node), with the spread
(min..max of the run medians), the all-reduces and bytes per step; one table (markdown) and a PNG plot.

usage: tools/bench_ladder.py [--build build] [--rounds 7] [--steps 40] [--warmup 5] [--world 2]
                             [--bucket-mb 1] [--png docs/img/ladder.png] [-- extra program flags]
Figures: docs/ladder.md "Measured".
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

RUNGS = [  # program, the table's label, the plot's label
    ("ladder_rung1_each", "1 all-reduce each gradient after backward", "1 each gradient\nafter backward"),
    ("ladder_rung2_flat", "2 one flat buffer, one all-reduce", "2 one flat buffer\nafter backward"),
    ("ladder_rung3_hooks", "3 per-parameter hooks, async during backward", "3 hook per parameter\nduring backward"),
    ("ladder_rung4_buckets", "4 buckets in reverse order, async", "4 buckets\nduring backward"),
    ("ladder_rung5_ddp", "5 DistributedDataParallel (the reducer)", "5 DistributedDataParallel\n(the reducer)"),
]


def run_once(a, program, extra, json_path):
    cmd = [f"{a.build}/bin/ddprun", "--standalone", "--nproc-per-node", str(a.world), f"{a.build}/bin/{program}",
           "--steps", str(a.steps), "--warmup", str(a.warmup), "--bucket-mb", str(a.bucket_mb),
           "--json", json_path] + extra
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"bench_ladder: {' '.join(cmd)} failed ({out.returncode}):\n{(out.stdout + out.stderr)[-2000:]}")
    with open(json_path) as f:
        rec = json.load(f)
    return {
        "step_ms": statistics.median(rec["step_ms"]),
        "exposed_ms": statistics.median(rec["exposed_ms"]),
        "collectives": statistics.median(rec["collectives"]),
        "bytes": statistics.median(rec["bytes"]),
        "record": rec,
    }


def spread(values):
    return f"{min(values):.2f}..{max(values):.2f}"


def plot(rows, png, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.8))
    xs = range(len(rows))
    rest = [r["step"] - r["exposed"] for r in rows]
    exposed = [r["exposed"] for r in rows]
    ax.bar(xs, rest, color="#7a9cc6", label="rest of the step (forward, backward, optimizer)")
    ax.bar(xs, exposed, bottom=rest, color="#d9534f", label="exposed communication (waiting after backward)")
    for x, r in zip(xs, rows):
        ax.vlines(x, min(r["steps"]), max(r["steps"]), color="black", linewidth=1)
        ax.scatter([x] * len(r["steps"]), r["steps"], s=10, color="black", zorder=3)
        ax.annotate(f"{r['collectives']:g} all-reduce(s)\n{r['mib']:.2f} MiB", (x, max(r["steps"])),
                    textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
    ax.set_xticks(list(xs))
    ax.set_xticklabels([r["plot_label"] for r in rows], fontsize=8)
    ax.set_ylabel("step time, ms (median of run medians; dots: each run)")
    ax.set_ylim(0, max(max(r["steps"]) for r in rows) * 1.25)
    ax.set_title(title, fontsize=9)
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--bucket-mb", type=float, default=1.0)
    ap.add_argument("--png", default="", help="write the plot here (e.g. docs/img/ladder.png)")
    ap.add_argument("extra", nargs="*", help="more flags for every program (after --), e.g. -- --batch 64")
    a = ap.parse_args()
    if a.rounds < 1 or a.steps < 1:
        sys.exit("bench_ladder: --rounds and --steps must be >= 1")
    if a.png:  # before the runs: a missing matplotlib is one line naming the interpreter that has it
        from python_deps import require
        require("matplotlib", "python3-matplotlib", "bench_ladder.py")
    for program, *_ in RUNGS:
        if not os.path.exists(f"{a.build}/bin/{program}"):
            sys.exit(f"bench_ladder: {a.build}/bin/{program} is missing; build it (cmake --build {a.build})")

    started = datetime.datetime.now(datetime.timezone.utc)
    load_before = os.getloadavg()
    runs = {program: [] for program, *_ in RUNGS}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for k in range(len(RUNGS)):
                program = RUNGS[(r + k) % len(RUNGS)][0]
                runs[program].append(run_once(a, program, a.extra, os.path.join(tmp, program + ".json")))
    load_after = os.getloadavg()

    first = runs[RUNGS[0][0]][0]["record"]
    print(f"ladder, {started:%Y-%m-%d %H:%M} UTC, {platform.node()} ({os.cpu_count()} CPUs), load "
          f"{load_before[0]:.2f} before / {load_after[0]:.2f} after (1-min average)")
    print(f"world {first['world']} ({first['backend']}), MLP with {first['parameters']} parameters, batch "
          f"{first['batch']} per rank, bucket cap {a.bucket_mb:g} MiB (rungs 4, 5); {a.rounds} rounds, rungs "
          f"rotated per round; {a.steps} steps after {a.warmup} warm-up per run")
    print(f"command: tools/bench_ladder.py --build {a.build} --rounds {a.rounds} --steps {a.steps} --warmup "
          f"{a.warmup} --world {a.world} --bucket-mb {a.bucket_mb:g}" + (" -- " + " ".join(a.extra) if a.extra else ""))
    print()
    print("| rung | step ms (median; spread) | exposed comm ms (median; spread) | exposed share | "
          "all-reduces / step | MiB / step |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    rows = []
    for program, label, plot_label in RUNGS:
        steps = [x["step_ms"] for x in runs[program]]
        exposed = [x["exposed_ms"] for x in runs[program]]
        row = {"label": label, "plot_label": plot_label, "step": statistics.median(steps),
               "exposed": statistics.median(exposed), "steps": steps,
               "collectives": statistics.median(x["collectives"] for x in runs[program]),
               "mib": statistics.median(x["bytes"] for x in runs[program]) / 2**20}
        rows.append(row)
        print(f"| {label} | {row['step']:.2f} ({spread(steps)}) | {row['exposed']:.2f} ({spread(exposed)}) | "
              f"{100 * row['exposed'] / row['step']:.0f}% | {row['collectives']:g} | {row['mib']:.2f} |")
    if a.png:
        plot(rows, a.png, f"the ladder at world {first['world']} ({first['backend']}), "
                          f"{started:%Y-%m-%d} {platform.node()}, load {load_before[0]:.1f}/{load_after[0]:.1f}")
        print(f"\nplot: {a.png}")


if __name__ == "__main__":
    main()
