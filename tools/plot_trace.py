#!/usr/bin/env python3
"""plot_trace.py TRACE.json OUT.png [--iteration N] - draws one training step of a ddp.cpp Chrome trace as a
timeline picture: per rank a compute lane (forward, backward, optimizer; gradient-ready ticks) and a comm lane
(each bucket's all-reduce), so the overlap of communication with backward is visible at a glance.
Needs Debian's python3-matplotlib (tools/ddp bench installs it)."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit(__doc__)
    path, out = args[0], args[1]
    want = int(args[args.index("--iteration") + 1]) if "--iteration" in args else None
    data = json.load(open(path))
    events = data["traceEvents"] if isinstance(data, dict) else data
    iters = [e for e in events if e.get("cat") == "iteration" and e.get("ph") == "X"]
    if not iters:
        sys.exit(f"{path}: no iteration markers (was it written by train/bench_e2e with --trace?)")
    ids = sorted({e["args"]["iteration"] for e in iters})
    it = want if want is not None else ids[len(ids) // 2]
    windows = {e["pid"]: (e["ts"], e["ts"] + e["dur"]) for e in iters if e["args"]["iteration"] == it}
    ranks = sorted(windows)
    colors = {"forward": "#4c72b0", "backward": "#55a868", "optimizer": "#8172b2", "comm": "#dd8452"}
    fig, ax = plt.subplots(figsize=(12, 1.2 + 1.1 * len(ranks)))
    yticks, ylabels = [], []
    for k, r in enumerate(ranks):
        t0, t1 = windows[r]
        base = (len(ranks) - 1 - k) * 2.5
        for e in events:
            if e.get("pid") != r or e.get("ph") not in ("X", "i"):
                continue
            ts = e["ts"]
            if ts < t0 or ts > t1:
                continue
            cat = e.get("cat")
            if e["ph"] == "X" and cat in colors:
                y = base + (0 if cat == "comm" else 1.1)
                ax.broken_barh([((ts - t0) / 1e3, e["dur"] / 1e3)], (y, 0.9), color=colors[cat])
                if cat == "comm":
                    ax.text((ts - t0) / 1e3, y + 0.3, f" b{e['args'].get('bucket', '?')}", fontsize=7)
            elif e["ph"] == "i" and e.get("name", "").startswith("ready "):
                ax.plot([(ts - t0) / 1e3] * 2, [base + 1.1, base + 2.0], color="black", linewidth=0.4)
        yticks += [base + 0.45, base + 1.55]
        ylabels += [f"rank {r} comm", f"rank {r} compute"]
    ax.set_yticks(yticks)
    ax.set_yticklabels(ylabels)
    ax.set_xlabel("ms since the step began")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    ax.legend(handles, list(colors), loc="upper right", fontsize=8, ncol=4)
    ax.set_title(f"{path}: iteration {it} (black ticks: gradient-ready hooks)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out} (iteration {it}, ranks {ranks})")


if __name__ == "__main__":
    main()
